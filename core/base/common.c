/* common.c — the token table, secrets compared in constant time, clocks, random numbers,
 * the heap trim. */
#include "base/common.h"

#include <malloc.h>
#include <sys/random.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <time.h>

#define T1(c) [c] = 1
const uint8_t sl_tchar_table[256] = {
    T1('!'), T1('#'), T1('$'), T1('%'), T1('&'), T1('\''), T1('*'), T1('+'), T1('-'), T1('.'),
    T1('^'), T1('_'), T1('`'), T1('|'), T1('~'),
    T1('0'), T1('1'), T1('2'), T1('3'), T1('4'), T1('5'), T1('6'), T1('7'), T1('8'), T1('9'),
    T1('A'), T1('B'), T1('C'), T1('D'), T1('E'), T1('F'), T1('G'), T1('H'), T1('I'), T1('J'),
    T1('K'), T1('L'), T1('M'), T1('N'), T1('O'), T1('P'), T1('Q'), T1('R'), T1('S'), T1('T'),
    T1('U'), T1('V'), T1('W'), T1('X'), T1('Y'), T1('Z'),
    T1('a'), T1('b'), T1('c'), T1('d'), T1('e'), T1('f'), T1('g'), T1('h'), T1('i'), T1('j'),
    T1('k'), T1('l'), T1('m'), T1('n'), T1('o'), T1('p'), T1('q'), T1('r'), T1('s'), T1('t'),
    T1('u'), T1('v'), T1('w'), T1('x'), T1('y'), T1('z'),
};
#undef T1

bool sl_secret_equal(const char *tok, size_t tlen, const char *given, size_t glen) {
    const unsigned char *t = (const unsigned char *)tok, *g = (const unsigned char *)given;
    unsigned diff = glen != tlen;
    for (size_t i = 0; i < tlen; i++) diff |= t[i] ^ (i < glen ? g[i] : 0u);
    return diff == 0;
}

uint64_t sl_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t sl_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__thread sl_wake_clock_t sl__wake;

bool sl__ticks_tsc;
double sl__ns_per_tick = 1.0;

void sl_ticks_calibrate(void) {
    static bool done;
    if (done) return;
    done = true;
#if defined(__x86_64__)
    /* CPUID 0x80000007 EDX bit 8: the TSC runs at a constant rate in every P-/C-state (and
     * is what the kernel's own clocksource uses on such a machine). */
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000007, &a, &b, &c, &d) || !(d & (1u << 8))) return;
    uint64_t t0 = __builtin_ia32_rdtsc(), n0 = sl_now_ns(), n1;
    while ((n1 = sl_now_ns()) - n0 < 2000000) {
    }
    uint64_t t1 = __builtin_ia32_rdtsc();
    if (t1 <= t0) return;
    sl__ns_per_tick = (double)(n1 - n0) / (double)(t1 - t0);
    sl__ticks_tsc = true;
#endif
}

static __thread uint64_t rnd_state;

uint64_t sl_rand64(void) {
    if (SL_UNLIKELY(!rnd_state)) {
        if (getrandom(&rnd_state, sizeof(rnd_state), 0) != sizeof(rnd_state) || !rnd_state)
            rnd_state = sl_now_ns() | 1;
    }
    rnd_state ^= rnd_state >> 12, rnd_state ^= rnd_state << 25, rnd_state ^= rnd_state >> 27;
    return rnd_state * 0x2545F4914F6CDD1DULL; /* xorshift64* */
}

#if defined(__SANITIZE_ADDRESS__)
#define SL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SL_ASAN 1
#endif
#endif

void sl_heap_trim(void) {
#ifndef SL_ASAN
    malloc_trim(0);
#endif
}
