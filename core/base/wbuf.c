/* wbuf.c — the output buffer's slow paths: growth, numbers, printf, JSON strings. */
#include "base/wbuf.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

bool sl_wbuf_reserve(sl_wbuf_t *b, size_t n) {
    if (b->cap - b->len >= n) return true;
    size_t max = b->bounded ? b->cap : b->max ? b->max : SIZE_MAX;
    if (max - b->len < n) {
        b->full = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
    if (cap > max) cap = max;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p, b->cap = cap;
    return true;
}

bool sl_wbuf_u64(sl_wbuf_t *b, uint64_t v) {
    char tmp[24];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return sl_wbuf_put(b, tmp + i, sizeof(tmp) - i);
}

bool sl_wbuf_hex(sl_wbuf_t *b, uint64_t v) {
    static const char digits[] = "0123456789abcdef";
    char tmp[20];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = digits[v & 15];
        v >>= 4;
    } while (v);
    return sl_wbuf_put(b, tmp + i, sizeof(tmp) - i);
}

bool sl_wbuf_vprintf(sl_wbuf_t *b, const char *fmt, va_list ap) {
    for (;;) {
        size_t room = b->cap - b->len;
        va_list aq;
        va_copy(aq, ap);
        int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, aq);
        va_end(aq);
        if (n < 0) {
            b->full = true; /* an encoding error: nothing sensible was written */
            return false;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return true;
        }
        /* vsnprintf wants room for its NUL too (not counted in len); then it fits */
        if (!sl_wbuf_reserve(b, (size_t)n + 1)) return false;
    }
}

bool sl_wbuf_printf(sl_wbuf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bool ok = sl_wbuf_vprintf(b, fmt, ap);
    va_end(ap);
    return ok;
}

/* The escape of each byte that needs one: its short form's letter, or 'u' for \u00XX. */
static const char json_esc[256] = {
    ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't',
    [0x00] = 'u', [0x01] = 'u', [0x02] = 'u', [0x03] = 'u', [0x04] = 'u', [0x05] = 'u',
    [0x06] = 'u', [0x07] = 'u', [0x0b] = 'u', [0x0e] = 'u', [0x0f] = 'u', [0x10] = 'u',
    [0x11] = 'u', [0x12] = 'u', [0x13] = 'u', [0x14] = 'u', [0x15] = 'u', [0x16] = 'u',
    [0x17] = 'u', [0x18] = 'u', [0x19] = 'u', [0x1a] = 'u', [0x1b] = 'u', [0x1c] = 'u',
    [0x1d] = 'u', [0x1e] = 'u', [0x1f] = 'u', [0x7f] = 'u',
    ['"'] = '"', ['\\'] = '\\',
};

bool sl_wbuf_json_str(sl_wbuf_t *b, sl_str_t s) {
    static const char hex[] = "0123456789abcdef";
    if (!s.len) return true;
    const unsigned char *p = (const unsigned char *)s.p;
    size_t run = 0; /* bytes that need no escape, written in one put */
    for (size_t i = 0; i < s.len; i++) {
        char e = json_esc[p[i]];
        if (SL_LIKELY(!e)) {
            run++;
            continue;
        }
        char esc[6] = {'\\', e, '0', '0', hex[p[i] >> 4], hex[p[i] & 15]};
        if (!sl_wbuf_put(b, p + i - run, run) || !sl_wbuf_put(b, esc, e == 'u' ? 6 : 2)) return false;
        run = 0;
    }
    return sl_wbuf_put(b, p + s.len - run, run);
}

bool sl_wbuf_json_quoted(sl_wbuf_t *b, sl_str_t s) {
    return SL_WBUF_LIT(b, "\"") && sl_wbuf_json_str(b, s) && SL_WBUF_LIT(b, "\"");
}

char *sl_wbuf_cstr(sl_wbuf_t *b) {
    if (b->cap - b->len < 1 && !sl_wbuf_reserve(b, 1)) return NULL;
    b->p[b->len] = '\0';
    return b->p;
}

char *sl_wbuf_take(sl_wbuf_t *b) {
    assert(!b->bounded); /* a bounded buffer's memory is its caller's */
    char *p = sl_wbuf_failed(b) ? NULL : sl_wbuf_cstr(b);
    if (!p) free(b->p);
    *b = SL_WBUF_GROWING(b->max);
    return p;
}

void sl_wbuf_free(sl_wbuf_t *b) {
    if (!b->bounded) {
        free(b->p);
        *b = SL_WBUF_GROWING(b->max);
    } else {
        b->len = 0;
        b->full = b->oom = false;
    }
}
