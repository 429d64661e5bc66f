/* wbuf.h — the core's one output buffer: bytes appended at the end, either into memory the
 * caller owns (bounded: a head built in an arena, a log line on the stack) or into memory
 * the buffer owns and grows (a JSON document, a metrics page, a batch of log lines).
 *
 * Both kinds share the appenders, so that a JSON string is escaped one way everywhere
 * (sl_wbuf_json_str). The append that fits is a compare and a memcpy; only one that does
 * not fit leaves the inline path (sl_wbuf_reserve).
 *
 * An append that does not fit writes nothing, returns false and records why: `full` (a
 * bounded buffer's cap, or a growing one's max) or `oom` (a growth failed). After a failed
 * append the contents miss a piece: a caller that goes on appending checks the flags at
 * the end (sl_wbuf_failed) before it uses what it built. A growing buffer stays NUL-free;
 * sl_wbuf_cstr terminates it. Owner: whoever holds the struct; no locking here.
 */
#ifndef SL_WBUF_H
#define SL_WBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/common.h"

typedef struct {
    char *p;
    size_t len, cap;
    size_t max;   /**< growing: at most this many bytes (0: no limit) */
    bool bounded; /**< p is the caller's cap bytes and never grows; else p is malloc'ed (owned) */
    bool full;    /**< an append did not fit within cap (bounded) or max (growing) */
    bool oom;     /**< a growth failed (a later one tries again) */
} sl_wbuf_t;

/** A bounded buffer over the caller's cap bytes at mem, empty. */
#define SL_WBUF_BOUNDED(mem, cap_) ((sl_wbuf_t){.p = (mem), .len = 0, .cap = (cap_), .bounded = true})
/** A growing buffer, empty, that holds at most max bytes (0: no limit). A zeroed sl_wbuf_t
 *  ({0}, calloc) is a growing buffer with no limit. */
#define SL_WBUF_GROWING(max_) ((sl_wbuf_t){.p = NULL, .len = 0, .cap = 0, .max = (max_)})

/** Makes room for n more bytes: true when cap - len >= n afterwards. A bounded buffer
 *  cannot grow (false, `full`); a growing one doubles (at least 256 bytes) up to max. */
bool sl_wbuf_reserve(sl_wbuf_t *b, size_t n);

static inline bool sl_wbuf_put(sl_wbuf_t *b, const void *p, size_t n) {
    if (SL_UNLIKELY(b->cap - b->len < n) && !sl_wbuf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    return true;
}
#define SL_WBUF_LIT(b, lit) sl_wbuf_put((b), (lit), sizeof(lit) - 1)
static inline bool sl_wbuf_str(sl_wbuf_t *b, sl_str_t s) { return sl_wbuf_put(b, s.p, s.len); }
static inline bool sl_wbuf_cat(sl_wbuf_t *b, const char *s) { return sl_wbuf_put(b, s, strlen(s)); }
static inline bool sl_wbuf_failed(const sl_wbuf_t *b) { return b->full || b->oom; }

/** Decimal and lower-case hexadecimal digits of v. */
bool sl_wbuf_u64(sl_wbuf_t *b, uint64_t v);
bool sl_wbuf_hex(sl_wbuf_t *b, uint64_t v);
/** printf-style; writes all of it or nothing (a bounded buffer needs a byte more than it
 *  writes: vsnprintf's NUL, which it leaves after len). */
bool sl_wbuf_printf(sl_wbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool sl_wbuf_vprintf(sl_wbuf_t *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/** Writes s as the inside of a JSON string (quotes not included): '"' and '\' escaped,
 *  every control character (< 0x20, and 0x7f) as a short form (\b \f \n \r \t) or \u00XX,
 *  every other byte as it is (UTF-8 passes through; JSON does not require more). On
 *  failure part of s may have been written: check the return or sl_wbuf_failed. */
bool sl_wbuf_json_str(sl_wbuf_t *b, sl_str_t s);
/** The same between quotes. */
bool sl_wbuf_json_quoted(sl_wbuf_t *b, sl_str_t s);
static inline bool sl_wbuf_json_cstr(sl_wbuf_t *b, const char *s) {
    return sl_wbuf_json_quoted(b, (sl_str_t){s, strlen(s)});
}

/** The contents NUL-terminated (the NUL is not counted in len), or NULL when the NUL does
 *  not fit. The pointer is b->p: a growing buffer's until the next append or free. */
char *sl_wbuf_cstr(sl_wbuf_t *b);
/** Hands a growing buffer's memory to the caller (NUL-terminated; NULL when an append
 *  failed, then freed) and leaves b empty. */
char *sl_wbuf_take(sl_wbuf_t *b);
/** Frees a growing buffer's memory and empties it (keeping max); a bounded one is emptied. */
void sl_wbuf_free(sl_wbuf_t *b);

#endif
