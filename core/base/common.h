/* common.h — the few types and conventions every core file shares.
 *
 * Returns: 0 (SL_OK) for success, negative SL_E* for failure, SL_EAGAIN when an
 * operation would block. Bytes travel as sl_str_t (pointer + length), never as
 * NUL-terminated strings on the hot path.
 */
#ifndef SL_COMMON_H
#define SL_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sluice.h" /* SL_OK, SL_ERROR, SL_EAGAIN, SL_DECLINED: the codes that cross the ABI */

/** Internal only (never returned through the ABI): a plugin answered, the chain is over. */
#define SL_DONE (-3)

/** A borrowed byte range; whoever hands one out says how long it stays valid. */
typedef struct {
    const char *p;
    size_t len;
} sl_str_t;

#define SL_LIT(s) ((sl_str_t){(s), sizeof(s) - 1})
#define SL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define SL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SL_LIKELY(x) __builtin_expect(!!(x), 1)
#define SL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SL_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/** RFC 9110 tchar: the bytes of a token (field names, methods, transfer codings). */
extern const uint8_t sl_tchar_table[256];
static inline bool sl_tchar(unsigned char c) { return sl_tchar_table[c] != 0; }
static inline bool sl_is_token(sl_str_t v) {
    if (v.len == 0) return false;
    for (size_t i = 0; i < v.len; i++)
        if (!sl_tchar((unsigned char)v.p[i])) return false;
    return true;
}

static inline char sl_lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c | 0x20) : c; }

/* 8 bytes of a against 8 of a lower-case pattern: ASCII letters of the pattern match either
 * case, every other byte itself (SWAR: a pattern byte in 'a'..'z' puts 0x20 in the fold
 * mask; adding 0x1f or 0x05 to a 7-bit byte cannot carry into the next). -1 when the
 * pattern holds an upper-case letter, which sl_lower'd bytes never equal: the caller
 * compares byte by byte then. */
static inline int sl__ieq8(const char *a, const char *lower) {
    uint64_t x, y;
    memcpy(&x, a, 8);
    memcpy(&y, lower, 8);
    uint64_t y7 = y & 0x7f7f7f7f7f7f7f7full, hi = ~y & 0x8080808080808080ull;
    uint64_t ge_a = y7 + 0x1f1f1f1f1f1f1f1full, gt_z = y7 + 0x0505050505050505ull;
    uint64_t ge_A = y7 + 0x3f3f3f3f3f3f3f3full, gt_Z = y7 + 0x2525252525252525ull;
    if (ge_A & ~gt_Z & hi) return -1;
    return (x | ((ge_a & ~gt_z & hi) >> 2)) == y;
}

/** Case-insensitive equality of a byte range with a lower-case literal. */
static inline bool sl_str_ieq(sl_str_t a, const char *lower, size_t n) {
    if (a.len != n) return false;
    if (n >= 8) {
        /* 8 bytes at a time, the last 8 overlapping the word before them */
        int r = 1;
        for (size_t i = 0; r == 1 && i + 8 < n; i += 8) r = sl__ieq8(a.p + i, lower + i);
        if (r == 1) r = sl__ieq8(a.p + n - 8, lower + n - 8);
        if (r >= 0) return r == 1;
    }
    for (size_t i = 0; i < n; i++)
        if (sl_lower(a.p[i]) != lower[i]) return false;
    return true;
}
#define SL_IEQ(s, lit) sl_str_ieq((s), (lit), sizeof(lit) - 1)

static inline bool sl_str_ieq2(sl_str_t a, sl_str_t b) {
    if (a.len != b.len) return false;
    for (size_t i = 0; i < a.len; i++)
        if (sl_lower(a.p[i]) != sl_lower(b.p[i])) return false;
    return true;
}

/** True when `given` equals the secret `tok`, in a time that depends on the secret's length
 *  only: it tells nothing about how many leading bytes matched. */
bool sl_secret_equal(const char *tok, size_t tlen, const char *given, size_t glen);

/** Gives the heap's free pages back to the OS (malloc_trim(0)); any thread, any number at
 *  once. Nothing under AddressSanitizer: its allocator replaces glibc's, whose untouched
 *  arena malloc_trim would set up on first use, racily when two threads trim first at once
 *  (a SEGV in mtrim: concurrent reapers after quick reloads). */
void sl_heap_trim(void);

/** A fast per-thread pseudo-random number (xorshift64*, seeded by getrandom): for
 *  balancing, jitter and ids, never for secrets. */
uint64_t sl_rand64(void);

/** Monotonic milliseconds and nanoseconds; wall-clock for logs. */
uint64_t sl_now_ms(void);
uint64_t sl_now_ns(void);

/* The wake clock: sl_now_ns read once per event-loop wakeup, for the times things
 * arrived (a request's first bytes, an upstream's response head). Whatever arrived was
 * there when the loop woke, so the first read after the wake is nearer the arrival than a
 * read later in the same wakeup, and later reads there reuse it (docs/DECISIONS.md, clock
 * reads). A worker thread turns it on and clears it before and after each poll
 * (sl_wake_clear); on other threads, or once off, every call reads the clock. */
typedef struct {
    bool on;
    uint64_t ns; /**< 0: not read since the last clear */
} sl_wake_clock_t;
extern __thread sl_wake_clock_t sl__wake;
static inline uint64_t sl_wake_ns(void) {
    if (!sl__wake.on) return sl_now_ns();
    if (!sl__wake.ns) sl__wake.ns = sl_now_ns();
    return sl__wake.ns;
}
static inline void sl_wake_clear(void) { sl__wake.ns = 0; }
static inline void sl_wake_enable(bool on) { sl__wake.on = on, sl__wake.ns = 0; }

/* Ticks: a cheaper clock for timing short calls (plugin phases), read where a
 * clock_gettime per call would cost more than what it measures. The invariant TSC on
 * x86-64 (rdtsc, no system call and no vDSO page), else sl_now_ns. */
extern bool sl__ticks_tsc;
extern double sl__ns_per_tick;
/** Picks the tick source and measures its rate against CLOCK_MONOTONIC (about 2 ms, once
 *  per process; later calls return at once). Main thread, before workers start. */
void sl_ticks_calibrate(void);
#if defined(__x86_64__)
static inline uint64_t sl_ticks(void) { return sl__ticks_tsc ? __builtin_ia32_rdtsc() : sl_now_ns(); }
#else
static inline uint64_t sl_ticks(void) { return sl_now_ns(); }
#endif
/** A number of ticks in ns. */
static inline uint64_t sl_ticks_ns(uint64_t ticks) { return (uint64_t)((double)ticks * sl__ns_per_tick); }

#endif
