/* limiter_test.c — unit tests for core/limiter.c on an injected clock: the token bucket's
 * exact admissions and result fields (strict rate, burst, lazy refill, cost, changed
 * parameters), the sliding window's weighting at window boundaries, LRU eviction, long
 * keys, and the concurrency tests: the stampede (8 threads released at once on one key
 * with a frozen clock, 1,000 trials) and many threads on many keys checked against the
 * bucket's bound. Built plain, with ASan+UBSan (SLUICE_SANITIZE) and with TSan
 * (SLUICE_TSAN: ctest/CMakeLists.txt).
 *
 *   limiter_test [name-substring]
 */
#include "upstream/limiter.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "base/common.h"
#include "stampede.h"

#define MS UINT64_C(1000000)
#define SEC (1000 * MS)
/* Far from 0 and on a boundary of every window below. */
#define T0 (1000 * SEC)

/* Doubles that should be equal up to rounding (times: 1 ns). */
#define CHECK_NEAR(a, b)                                                                           \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (fabs(a_ - b_) <= 1e-9)                                                                 \
            passed++;                                                                              \
        else {                                                                                     \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: %s == %s failed: %.12g != %.12g\n", __FILE__, __LINE__, #a,    \
                    #b, a_, b_);                                                                   \
        }                                                                                          \
    } while (0)

/* All four fields a take returns to Lua. */
#define EXPECT(r, allowed_, remaining_, reset_, retry_)                                            \
    do {                                                                                           \
        sl_limit_result_t r_ = (r);                                                                \
        CHECK_INT(r_.allowed, allowed_);                                                           \
        CHECK_NEAR(r_.remaining, remaining_);                                                      \
        CHECK_NEAR(r_.reset, reset_);                                                              \
        CHECK_NEAR(r_.retry_after, retry_);                                                        \
    } while (0)

typedef int (*limit_fn)(const char *, size_t, double, double, double, uint64_t, sl_limit_result_t *,
                        const char **);

/* One call that must succeed: take (rate, burst) or window (limit, window_s). */
static sl_limit_result_t call(limit_fn fn, const char *key, double a, double b, double cost,
                              uint64_t now) {
    sl_limit_result_t r = {0};
    const char *err = NULL;
    int rc = fn(key, strlen(key), a, b, cost, now, &r, &err);
    CHECK_INT(rc, SL_OK);
    if (rc) fprintf(stderr, "  %s: %s\n", key, err);
    return r;
}

static sl_limit_result_t take(const char *key, double rate, double burst, double cost,
                              uint64_t now) {
    return call(sl_limiter_take_at, key, rate, burst, cost, now);
}

static sl_limit_result_t window(const char *key, double limit, double window_s, double cost,
                                uint64_t now) {
    return call(sl_limiter_window_at, key, limit, window_s, cost, now);
}

static void fresh(void) {
    sl_limiter_set_max_keys(SL_LIMITER_MAX_KEYS);
    sl_limiter_clear();
}

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---------------------------------------------------------------- token bucket */

static void test_bucket_strict_rate(void) {
    fresh();
    /* rate 100, burst 0: capacity 1, one token per 10 ms */
    sl_limit_result_t r = take("k", 100, 0, 1, T0);
    EXPECT(r, 1, 0, 0.010, 0);
    CHECK_NEAR(r.limit, 1);
    EXPECT(take("k", 100, 0, 1, T0), 0, 0, 0.010, 0.010);
    EXPECT(take("k", 100, 0, 1, T0 + 1 * MS), 0, 0, 0.009, 0.009);
    EXPECT(take("k", 100, 0, 1, T0 + 9 * MS), 0, 0, 0.001, 0.001);
    EXPECT(take("k", 100, 0, 1, T0 + 10 * MS - 1), 0, 0, 1e-9, 1e-9);
    EXPECT(take("k", 100, 0, 1, T0 + 10 * MS), 1, 0, 0.010, 0);

    /* a late request does not push the next token later: tokens come every 10 ms from the
     * first take, and a full bucket keeps its progress towards the next one */
    EXPECT(take("late", 100, 0, 1, T0), 1, 0, 0.010, 0);
    EXPECT(take("late", 100, 0, 1, T0 + 17 * MS), 1, 0, 0.003, 0);
    EXPECT(take("late", 100, 0, 1, T0 + 19 * MS), 0, 0, 0.001, 0.001);
    EXPECT(take("late", 100, 0, 1, T0 + 20 * MS), 1, 0, 0.010, 0);
    EXPECT(take("late", 100, 0, 1, T0 + 3000 * MS + 4 * MS), 1, 0, 0.006, 0);

    /* 1,000 requests, one per ms over 1 s: exactly one admitted per 10 ms, 100 in all */
    int admitted = 0, misplaced = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        sl_limit_result_t x = take("even", 100, 0, 1, T0 + i * MS);
        admitted += x.allowed;
        misplaced += x.allowed != (i % 10 == 0);
    }
    CHECK_INT(admitted, 100);
    CHECK_INT(misplaced, 0);
}

/* The acceptance load as the bucket sees it: 1,000 requests over about 1 s at rate
 * 100, burst 0, evenly spaced, with arrival jitter, and Poisson. Tokens on a grid admit
 * one request per 10 ms period that has one; nginx's rule (the next admission a period
 * after the last one) is simulated next to it for comparison (limiter.h). */
static void test_bucket_acceptance_shape(void) {
    fresh();
    uint64_t s = 0x9E3779B97F4A7C15ull;
    static const int64_t jitter_us[] = {0, 100, 250, 1000, -1 /* Poisson, mean gap 1 ms */};
    for (size_t j = 0; j < SL_ARRAY_LEN(jitter_us); j++) {
        char key[32];
        snprintf(key, sizeof key, "acc-%zu", j);
        int admitted = 0, nginx = 0;
        uint64_t t = T0, first = 0, next = 0;
        for (uint64_t i = 0; i < 1000; i++) {
            uint64_t u = xorshift(&s);
            if (jitter_us[j] < 0)
                t += i ? (uint64_t)(-log((double)(u >> 11) / 9007199254740992.0 + 1e-18) * 1e6) : 0;
            else
                t = T0 + i * MS + (jitter_us[j] ? u % (uint64_t)(jitter_us[j] * 1000) : 0);
            if (i == 0) first = t;
            admitted += take(key, 100, 0, 1, t).allowed;
            if (t >= next) nginx++, next = t + 10 * MS;
        }
        /* the periods of the grid (from the first take) the arrivals reached */
        int periods = (int)((t - first) / (10 * MS)) + 1;
        if (jitter_us[j] < 0)
            printf("acceptance shape: 1000 Poisson arrivals (mean gap 1 ms) over %.3f s, rate "
                   "100 burst 0: %d admitted in %d periods (nginx's rule: %d)\n",
                   (double)(t - first) / 1e9, admitted, periods, nginx);
        else
            printf("acceptance shape: 1000 requests 1 ms apart + up to %lld us of jitter, rate "
                   "100 burst 0: %d admitted in %d periods (nginx's rule: %d)\n",
                   (long long)jitter_us[j], admitted, periods, nginx);
        CHECK(admitted <= periods);
        CHECK(admitted >= periods - 1);
        if (jitter_us[j] == 0) CHECK_INT(admitted, 100);
    }
}

static void test_bucket_burst(void) {
    fresh();
    /* burst 5: capacity 6, all at once, then one per 10 ms */
    for (int i = 0; i < 6; i++) EXPECT(take("b", 100, 5, 1, T0), 1, 5 - i, 0.010 * (i + 1), 0);
    EXPECT(take("b", 100, 5, 1, T0), 0, 0, 0.060, 0.010);
    EXPECT(take("b", 100, 5, 1, T0 + 4 * MS), 0, 0, 0.056, 0.006);
    EXPECT(take("b", 100, 5, 1, T0 + 10 * MS), 1, 0, 0.060, 0);
    EXPECT(take("b", 100, 5, 1, T0 + 19 * MS), 0, 0, 0.051, 0.001);
    EXPECT(take("b", 100, 5, 1, T0 + 20 * MS), 1, 0, 0.060, 0);
    CHECK_NEAR(take("b", 100, 5, 1, T0 + 20 * MS).limit, 6);
    /* partly refilled: 35 ms later 3 tokens (and a half) came back */
    EXPECT(take("b", 100, 5, 1, T0 + 55 * MS), 1, 2, 0.035, 0);
    EXPECT(take("b", 100, 5, 1, T0 + 55 * MS), 1, 1, 0.045, 0);
    EXPECT(take("b", 100, 5, 1, T0 + 55 * MS), 1, 0, 0.055, 0);
    EXPECT(take("b", 100, 5, 1, T0 + 55 * MS), 0, 0, 0.055, 0.005);
}

static void test_bucket_lazy_refill(void) {
    fresh();
    for (int i = 0; i < 6; i++) take("idle", 100, 5, 1, T0);
    CHECK_INT(take("idle", 100, 5, 1, T0).allowed, 0);
    /* an hour idle refills to the capacity, not past it */
    uint64_t later = T0 + 3600 * SEC;
    int admitted = 0;
    for (int i = 0; i < 100; i++) admitted += take("idle", 100, 5, 1, later).allowed;
    CHECK_INT(admitted, 6);
    /* a reading (cost 0) of a full bucket after days: full, nothing owed */
    EXPECT(take("idle", 100, 5, 0, later + 86400 * SEC), 1, 6, 0, 0);
    /* a clock read older than the bucket's state (another thread got there first) sees it
     * as it would be then: emptier, never fuller */
    EXPECT(take("idle", 100, 5, 1, later), 0, 0, 0.060, 0.010);
    /* a slow rate over a long time: rate 1 per minute, burst 2 */
    for (int i = 0; i < 3; i++)
        EXPECT(take("slow", 1.0 / 60, 2, 1, T0), 1, 2 - i, 60.0 * (i + 1), 0);
    EXPECT(take("slow", 1.0 / 60, 2, 1, T0 + 59 * SEC), 0, 0, 121, 1);
    EXPECT(take("slow", 1.0 / 60, 2, 1, T0 + 60 * SEC), 1, 0, 180, 0);
}

static void test_bucket_cost(void) {
    fresh();
    /* burst 5 (6 tokens), cost 4: once; then 2 left, short by 2 (20 ms) */
    EXPECT(take("c", 100, 5, 4, T0), 1, 2, 0.040, 0);
    EXPECT(take("c", 100, 5, 4, T0), 0, 2, 0.040, 0.020);
    EXPECT(take("c", 100, 5, 2, T0), 1, 0, 0.060, 0);
    /* cost 0 reads without taking, even from an empty bucket */
    EXPECT(take("c", 100, 5, 0, T0 + 15 * MS), 1, 1, 0.045, 0);
    EXPECT(take("c", 100, 5, 0, T0 + 15 * MS), 1, 1, 0.045, 0);
    /* the whole capacity at once */
    EXPECT(take("c6", 100, 5, 6, T0), 1, 0, 0.060, 0);
    EXPECT(take("c6", 100, 5, 6, T0 + 59 * MS), 0, 5, 0.001, 0.001);
    /* fractional rates: rate 3, burst 2 is exactly 3 at once, then one per 1/3 s */
    for (int i = 0; i < 3; i++) CHECK_INT(take("r3", 3, 2, 1, T0).allowed, 1);
    CHECK_INT(take("r3", 3, 2, 1, T0).allowed, 0);
    CHECK_INT(take("r3", 3, 2, 1, T0 + SEC / 3 - 1000).allowed, 0);
    CHECK_INT(take("r3", 3, 2, 1, T0 + SEC / 3).allowed, 1);
}

/* A reload changed a key's parameters: the key goes on from its state, the time it owes. */
static void test_bucket_changed_parameters(void) {
    fresh();
    for (int i = 0; i < 11; i++) take("p", 100, 10, 1, T0); /* 110 ms owed */
    /* burst lowered to 1 (capacity 20 ms): the 110 ms stay owed, so a token is there once
     * 100 ms have passed */
    EXPECT(take("p", 100, 1, 1, T0), 0, 0, 0.110, 0.100);
    EXPECT(take("p", 100, 1, 1, T0 + 99 * MS), 0, 0, 0.011, 0.001);
    EXPECT(take("p", 100, 1, 1, T0 + 100 * MS), 1, 0, 0.020, 0);
    /* rate raised to 1,000 a second: 60 ms owed are 60 tokens of its 101 */
    for (int i = 0; i < 6; i++) take("q", 100, 5, 1, T0);
    EXPECT(take("q", 1000, 100, 1, T0), 1, 40, 0.061, 0);
    /* rate lowered to 10 a second: 61 ms owed are 0.61 of a token */
    EXPECT(take("q", 10, 0, 1, T0), 0, 0, 0.061, 0.061);
}

static void test_invalid_arguments(void) {
    fresh();
    sl_limit_result_t r;
    const char *err = NULL;
    static const double bad_rate[] = {0, -1, NAN, INFINITY, 2e9};
    for (size_t i = 0; i < SL_ARRAY_LEN(bad_rate); i++) {
        err = NULL;
        CHECK_INT(sl_limiter_take_at("k", 1, bad_rate[i], 0, 1, T0, &r, &err), SL_ERROR);
        CHECK(err && strstr(err, "rate"));
    }
    static const double bad_burst[] = {-1, NAN, INFINITY};
    for (size_t i = 0; i < SL_ARRAY_LEN(bad_burst); i++) {
        err = NULL;
        CHECK_INT(sl_limiter_take_at("k", 1, 10, bad_burst[i], 1, T0, &r, &err), SL_ERROR);
        CHECK(err && strstr(err, "burst"));
    }
    static const double bad_cost[] = {-1, NAN, 7};
    for (size_t i = 0; i < SL_ARRAY_LEN(bad_cost); i++) {
        err = NULL;
        CHECK_INT(sl_limiter_take_at("k", 1, 10, 5, bad_cost[i], T0, &r, &err), SL_ERROR);
        CHECK(err && strstr(err, "cost"));
        CHECK_INT(sl_limiter_window_at("k", 1, 5, 1, bad_cost[i] + 0.5, T0, &r, &err), SL_ERROR);
    }
    CHECK_INT(sl_limiter_window_at("k", 1, 0, 1, 1, T0, &r, &err), SL_ERROR);
    CHECK(strstr(err, "limit"));
    CHECK_INT(sl_limiter_window_at("k", 1, 10, 0, 1, T0, &r, &err), SL_ERROR);
    CHECK(strstr(err, "window"));
    CHECK_INT(sl_limiter_window_at("k", 1, 10, 1e12, 1, T0, &r, &err), SL_ERROR);
    CHECK_INT(sl_limiter_take_at(NULL, 3, 10, 0, 1, T0, &r, &err), SL_ERROR);
    CHECK_INT(sl_limiter_take_at("k", 1, 10, 0, 1, T0, NULL, &err), SL_ERROR);
    /* a NULL err is allowed; an empty key (even NULL with length 0) is a key */
    CHECK_INT(sl_limiter_take_at("k", 1, -1, 0, 1, T0, &r, NULL), SL_ERROR);
    CHECK_INT(sl_limiter_take_at(NULL, 0, 100, 0, 1, T0, &r, NULL), SL_OK);
    CHECK_INT(r.allowed, 1);
    EXPECT(take("", 100, 0, 1, T0), 0, 0, 0.010, 0.010);
    CHECK_INT(sl_limiter_count(), 1);
    CHECK_INT(sl_limiter_set_max_keys(0), SL_ERROR);
    CHECK_INT(sl_limiter_max_keys(), SL_LIMITER_MAX_KEYS);
}

/* ---------------------------------------------------------------- sliding window */

static void test_window_within_one(void) {
    fresh();
    /* 10 per 1 s, from the start of a window */
    for (int i = 0; i < 10; i++) {
        sl_limit_result_t r = window("w", 10, 1, 1, T0 + 100 * MS);
        EXPECT(r, 1, 9 - i, 0.9, 0);
        CHECK_NEAR(r.limit, 10);
    }
    /* full: the next window starts in 0.9 s, and the 10 weigh 0.9 of themselves (9) until
     * 0.1 s into it, when 9 + 1 fit again */
    EXPECT(window("w", 10, 1, 1, T0 + 100 * MS), 0, 0, 0.9, 1.0);
    EXPECT(window("w", 10, 1, 1, T0 + 999 * MS), 0, 0, 0.001, 0.101);
    EXPECT(window("w", 10, 1, 1, T0 + SEC), 0, 0, 1, 0.1);
    EXPECT(window("w", 10, 1, 1, T0 + SEC + 50 * MS), 0, 0, 0.95, 0.05);
    EXPECT(window("w", 10, 1, 1, T0 + SEC + 100 * MS), 1, 0, 0.9, 0);
}

static void test_window_weighting_at_boundaries(void) {
    fresh();
    for (int i = 0; i < 10; i++) window("x", 10, 1, 1, T0);
    /* a quarter into the next window the previous 10 weigh 7.5: 2 more fit (9.5), a third
     * would make 10.5 */
    EXPECT(window("x", 10, 1, 1, T0 + SEC + 250 * MS), 1, 1, 0.75, 0);
    EXPECT(window("x", 10, 1, 1, T0 + SEC + 250 * MS), 1, 0, 0.75, 0);
    /* 7.5 + 2 + 1 <= 10 once the 10 weigh 7, at 0.3 into the window */
    EXPECT(window("x", 10, 1, 1, T0 + SEC + 250 * MS), 0, 0, 0.75, 0.05);
    EXPECT(window("x", 10, 1, 1, T0 + SEC + 300 * MS), 1, 0, 0.7, 0);
    /* the next window: 3 from the last one weigh fully at its very start, and nothing is
     * left of the 10 from two windows back */
    EXPECT(window("x", 10, 1, 1, T0 + 2 * SEC), 1, 6, 1, 0);
    /* two whole windows idle forget everything */
    for (int i = 0; i < 10; i++) CHECK_INT(window("x", 10, 1, 1, T0 + 4 * SEC).allowed, 1);
    CHECK_INT(window("x", 10, 1, 1, T0 + 4 * SEC).allowed, 0);
    /* 10 in the window before the last one: nothing weighs at the next window's start */
    for (int i = 0; i < 10; i++) CHECK_INT(window("x", 10, 1, 1, T0 + 6 * SEC).allowed, 1);
    /* the current window's count alone too high for the cost: wait for the window's end,
     * then for that count to weigh little enough (9 * 8/9 + 2 <= 10, 1/9 s into the next) */
    fresh();
    for (int i = 0; i < 8; i++) window("y", 10, 1, 1, T0 + 500 * MS);
    for (int i = 0; i < 9; i++) /* 8 weigh 0.8 at 0.9 into the next window: 9 more fit */
        CHECK_INT(window("y", 10, 1, 1, T0 + SEC + 900 * MS).allowed, 1);
    EXPECT(window("y", 10, 1, 2, T0 + SEC + 900 * MS), 0, 0, 0.1, 0.1 + 1.0 / 9);
    /* the previous 8 weighing, the current window's count still below the limit */
    fresh();
    for (int i = 0; i < 8; i++) window("z", 10, 1, 1, T0);
    for (int i = 0; i < 2; i++) window("z", 10, 1, 1, T0 + SEC); /* 8 + 2 = 10 */
    EXPECT(window("z", 10, 1, 1, T0 + SEC), 0, 0, 1, 0.125);
    EXPECT(window("z", 10, 1, 1, T0 + SEC + 125 * MS), 1, 0, 0.875, 0);
    /* cost: 3 units at once, 10 per window */
    EXPECT(window("cost", 10, 1, 3, T0), 1, 7, 1, 0);
    EXPECT(window("cost", 10, 1, 7, T0), 1, 0, 1, 0);
    EXPECT(window("cost", 10, 1, 0, T0), 1, 0, 1, 0);
}

/* One key string, two algorithms: two states. */
static void test_kinds_are_separate(void) {
    fresh();
    CHECK_INT(take("same", 1, 0, 1, T0).allowed, 1);
    CHECK_INT(take("same", 1, 0, 1, T0).allowed, 0);
    CHECK_INT(window("same", 1, 1, 1, T0).allowed, 1);
    CHECK_INT(window("same", 1, 1, 1, T0).allowed, 0);
    CHECK_INT(sl_limiter_count(), 2);
}

/* ---------------------------------------------------------------- keys and memory */

/* n keys "prefix-<i>" that all live in one shard. */
static void same_shard(char keys[][32], int n, const char *prefix) {
    int found = 0;
    unsigned shard = 0;
    for (int i = 0; found < n; i++) {
        char k[32];
        snprintf(k, sizeof k, "%s-%d", prefix, i);
        unsigned sh = sl_limiter_shard(k, strlen(k));
        if (found == 0) shard = sh;
        if (sh == shard) memcpy(keys[found++], k, sizeof k);
    }
}

static void test_lru_eviction(void) {
    fresh();
    sl_limiter_set_max_keys(2 * SL_LIMITER_SHARDS); /* two keys a shard */
    char k[4][32];
    same_shard(k, 4, "lru");
    /* rate 1/s, burst 0: a take empties a key for a second; the clock stands still, so a
     * key found admitting again was forgotten */
    CHECK_INT(take(k[0], 1, 0, 1, T0).allowed, 1);
    CHECK_INT(take(k[1], 1, 0, 1, T0).allowed, 1);
    CHECK_INT(take(k[0], 1, 0, 1, T0).allowed, 0); /* k0 used again: k1 is the LRU */
    CHECK_INT(take(k[2], 1, 0, 1, T0).allowed, 1); /* evicts k1 */
    CHECK_INT(sl_limiter_count(), 2);
    CHECK_INT(take(k[0], 1, 0, 1, T0).allowed, 0); /* survived, and is used again */
    CHECK_INT(take(k[1], 1, 0, 1, T0).allowed, 1); /* forgotten: starts full; evicts k2 */
    CHECK_INT(take(k[0], 1, 0, 1, T0).allowed, 0);
    CHECK_INT(take(k[2], 1, 0, 1, T0).allowed, 1); /* forgotten too; evicts k1 */
    CHECK_INT(take(k[0], 1, 0, 1, T0).allowed, 0);
    CHECK_INT(sl_limiter_count(), 2);

    /* the bound lowered: the shard drops to it at its next new key */
    sl_limiter_set_max_keys(SL_LIMITER_SHARDS);
    CHECK_INT(take(k[3], 1, 0, 1, T0).allowed, 1);
    CHECK_INT(sl_limiter_count(), 1);
    CHECK_INT(take(k[3], 1, 0, 1, T0).allowed, 0);
    CHECK_INT(take(k[0], 1, 0, 1, T0).allowed, 1);

    /* many keys: never more than the bound */
    sl_limiter_set_max_keys(2 * SL_LIMITER_SHARDS);
    for (int i = 0; i < 5000; i++) {
        char key[32];
        snprintf(key, sizeof key, "many-%d", i);
        take(key, 1, 0, 1, T0);
    }
    size_t n = sl_limiter_count();
    CHECK(n <= 2 * SL_LIMITER_SHARDS);
    CHECK(n >= 2 * SL_LIMITER_SHARDS - 2);
    /* keys of every size class (and long ones) evicting each other */
    for (int i = 0; i < 5000; i++) {
        char key[600];
        size_t len = 1 + (size_t)(i * 37) % sizeof key;
        memset(key, 'a' + i % 26, len);
        snprintf(key, 16, "%d", i);
        sl_limit_result_t r;
        CHECK_INT(sl_limiter_take_at(key, len, 1, 0, 1, T0, &r, NULL), SL_OK);
    }
    CHECK(sl_limiter_count() <= 2 * SL_LIMITER_SHARDS);
    fresh();
}

static sl_limit_result_t take_len(const char *key, size_t len) {
    sl_limit_result_t r = {0};
    CHECK_INT(sl_limiter_take_at(key, len, 1, 0, 1, T0, &r, NULL), SL_OK);
    return r;
}

static void test_long_keys(void) {
    fresh();
    static char a[1 << 20], b[1 << 20];
    memset(a, 'k', sizeof a);
    memset(b, 'k', sizeof b);
    /* 300 bytes differing in the last one: two states */
    b[299] = 'x';
    CHECK_INT(take_len(a, 300).allowed, 1);
    CHECK_INT(take_len(a, 300).allowed, 0);
    CHECK_INT(take_len(b, 300).allowed, 1);
    CHECK_INT(take_len(b, 300).allowed, 0);
    /* the same bytes at other lengths beyond the limit, and at exactly the limit */
    CHECK_INT(take_len(a, 301).allowed, 1);
    CHECK_INT(take_len(a, SL_LIMITER_KEY_MAX + 1).allowed, 1);
    CHECK_INT(take_len(a, SL_LIMITER_KEY_MAX).allowed, 1);
    CHECK_INT(take_len(a, SL_LIMITER_KEY_MAX).allowed, 0);
    CHECK_INT(take_len(a, SL_LIMITER_KEY_MAX - 1).allowed, 1);
    /* a megabyte */
    CHECK_INT(take_len(a, sizeof a).allowed, 1);
    CHECK_INT(take_len(a, sizeof a).allowed, 0);
    b[299] = 'k';
    b[sizeof b - 1] = 'x';
    CHECK_INT(take_len(b, sizeof b).allowed, 1);
    CHECK_INT(sl_limiter_count(), 8);
}

/* ---------------------------------------------------------------- concurrency */

/* The stampede: ST_THREADS threads released by one barrier on one fresh key, clock frozen:
 * exactly the capacity is admitted, every trial. */
#define ST_THREADS 8
#define ST_TRIALS 1000

static struct {
    char key[32];
    double capacity;
    bool windowed;
    int got[ST_THREADS];
} st;

static void stampede_call(size_t i) {
    sl_limit_result_t r;
    size_t len = strlen(st.key);
    int rc = st.windowed ? sl_limiter_window_at(st.key, len, st.capacity, 1, 1, T0, &r, NULL)
                         : sl_limiter_take_at(st.key, len, 100, st.capacity - 1, 1, T0, &r, NULL);
    st.got[i] = rc == SL_OK && r.allowed;
}

static void test_stampede(void) {
    fresh();
    stampede_t s;
    stampede_start(&s, ST_THREADS, stampede_call);
    static const struct {
        int capacity;
        bool windowed;
        int trials;
    } runs[] = {{3, false, ST_TRIALS}, {1, false, 200}, {7, false, 200},
                {8, false, 100},       {3, true, 300},  {1, true, 100}};
    for (size_t r = 0; r < SL_ARRAY_LEN(runs); r++) {
        st.capacity = runs[r].capacity;
        st.windowed = runs[r].windowed;
        int hist[ST_THREADS + 1] = {0};
        for (int t = 0; t < runs[r].trials; t++) {
            snprintf(st.key, sizeof st.key, "st-%zu-%d", r, t);
            stampede_trial(&s);
            int n = 0;
            for (size_t i = 0; i < ST_THREADS; i++) n += st.got[i];
            hist[n]++;
        }
        CHECK_INT(hist[runs[r].capacity], runs[r].trials);
        printf("stampede: %d threads on one key, %s of %d, %d trials; admitted:", ST_THREADS,
               runs[r].windowed ? "window" : "bucket", runs[r].capacity, runs[r].trials);
        stampede_print_hist(hist, ST_THREADS);
    }
    stampede_stop(&s);
}

/* Many threads on many keys on a shared clock that moves with every call (so a thread's
 * reading may be older than the state another thread left). Each bucket key admits at
 * most burst + 1 + rate * (the time spanned); each window key at most limit per window
 * spanned (plus one). */
#define MK_THREADS 8
#define MK_KEYS 32 /* the first half buckets, the second windows */
#define MK_OPS 20000
#define MK_TICK (10 * 1000) /* ns per call */
#define MK_RATE 1000.0
#define MK_BURST 4.0
#define MK_LIMIT 50.0
#define MK_WINDOW 0.1

static struct {
    _Atomic uint64_t clock;
    _Atomic uint64_t admitted[MK_KEYS];
} mk;

static void *many_keys_thread(void *arg) {
    uint64_t s = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
    for (int i = 0; i < MK_OPS; i++) {
        int k = (int)(xorshift(&s) % MK_KEYS);
        char key[16];
        int len = snprintf(key, sizeof key, "mk-%d", k);
        uint64_t now = atomic_fetch_add(&mk.clock, MK_TICK);
        sl_limit_result_t r;
        int rc =
            k < MK_KEYS / 2
                ? sl_limiter_take_at(key, (size_t)len, MK_RATE, MK_BURST, 1, now, &r, NULL)
                : sl_limiter_window_at(key, (size_t)len, MK_LIMIT, MK_WINDOW, 1, now, &r, NULL);
        if (rc == SL_OK && r.allowed) atomic_fetch_add(&mk.admitted[k], 1);
    }
    return NULL;
}

static void test_many_threads_many_keys(void) {
    fresh();
    atomic_init(&mk.clock, T0);
    for (int k = 0; k < MK_KEYS; k++) atomic_init(&mk.admitted[k], 0);
    pthread_t th[MK_THREADS];
    for (size_t i = 0; i < MK_THREADS; i++)
        CHECK_INT(pthread_create(&th[i], NULL, many_keys_thread, (void *)i), 0);
    for (size_t i = 0; i < MK_THREADS; i++) pthread_join(th[i], NULL);
    double span = (double)(atomic_load(&mk.clock) - T0) / 1e9;
    double bucket_bound = MK_BURST + 1 + ceil(MK_RATE * span);
    double window_bound = MK_LIMIT * (ceil(span / MK_WINDOW) + 1);
    uint64_t bmin = UINT64_MAX, bmax = 0, wmin = UINT64_MAX, wmax = 0;
    for (int k = 0; k < MK_KEYS; k++) {
        uint64_t a = atomic_load(&mk.admitted[k]);
        bool bucket = k < MK_KEYS / 2;
        CHECK((double)a <= (bucket ? bucket_bound : window_bound));
        /* ~5,000 calls a key over the span: the limit, not the callers, sets the count */
        CHECK((double)a >= 0.9 * (bucket ? MK_RATE * span : MK_LIMIT * span / MK_WINDOW));
        if (bucket)
            bmin = SL_MIN(bmin, a), bmax = SL_MAX(bmax, a);
        else
            wmin = SL_MIN(wmin, a), wmax = SL_MAX(wmax, a);
    }
    printf("many keys: %d threads x %d calls over %.2f s of clock: buckets admitted %llu..%llu "
           "(bound %.0f), windows %llu..%llu (bound %.0f)\n",
           MK_THREADS, MK_OPS, span, (unsigned long long)bmin, (unsigned long long)bmax,
           bucket_bound, (unsigned long long)wmin, (unsigned long long)wmax, window_bound);
}

/* Threads creating and evicting keys of all sizes in a table bounded to one key a shard:
 * the LRU list and the chains stay consistent (ASan, TSan), and the bound holds. */
#define CH_THREADS 4
#define CH_OPS 20000

static void *churn_thread(void *arg) {
    uint64_t s = 0xD1B54A32D192ED03ull * ((uintptr_t)arg + 1);
    char key[400];
    memset(key, 'c', sizeof key);
    for (int i = 0; i < CH_OPS; i++) {
        uint64_t r = xorshift(&s);
        size_t len = 8 + (size_t)(r >> 40) % (sizeof key - 8);
        snprintf(key, 8, "%04d", (int)(r % 4096));
        key[7] = 'c';
        sl_limit_result_t res;
        if (r & 1)
            sl_limiter_take_at(key, len, 10, 1, 1, T0 + (uint64_t)i * MS, &res, NULL);
        else
            sl_limiter_window_at(key, len, 10, 1, 1, T0 + (uint64_t)i * MS, &res, NULL);
    }
    return NULL;
}

static void test_eviction_churn(void) {
    fresh();
    sl_limiter_set_max_keys(SL_LIMITER_SHARDS);
    pthread_t th[CH_THREADS];
    for (size_t i = 0; i < CH_THREADS; i++)
        CHECK_INT(pthread_create(&th[i], NULL, churn_thread, (void *)i), 0);
    for (size_t i = 0; i < CH_THREADS; i++) pthread_join(th[i], NULL);
    CHECK(sl_limiter_count() <= SL_LIMITER_SHARDS);
    fresh();
}

static const check_test_t tests[] = {
#define T(f) {#f, f}
    T(test_bucket_strict_rate),
    T(test_bucket_acceptance_shape),
    T(test_bucket_burst),
    T(test_bucket_lazy_refill),
    T(test_bucket_cost),
    T(test_bucket_changed_parameters),
    T(test_invalid_arguments),
    T(test_window_within_one),
    T(test_window_weighting_at_boundaries),
    T(test_kinds_are_separate),
    T(test_lru_eviction),
    T(test_long_keys),
    T(test_stampede),
    T(test_many_threads_many_keys),
    T(test_eviction_churn),
#undef T
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
