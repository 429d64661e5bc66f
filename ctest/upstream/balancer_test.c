/* balancer_test.c — unit tests for core/balancer.c: each kind's order and shares, that an
 * ineligible target is never returned, least-conn's and p2c's preferences, the EWMA's
 * decay by time, consistent hashing's stability and bounded-load cap, and picks with
 * begin/end from many threads at once (also built under ThreadSanitizer, see
 * ctest/CMakeLists.txt). */
#include "upstream/balancer.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (fabs(a_ - b_) <= (tol))                                                                \
            passed++;                                                                              \
        else {                                                                                     \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: %s ~ %s failed: %.9g != %.9g (tolerance %g)\n", __FILE__,      \
                    __LINE__, #a, #b, a_, b_, (double)(tol));                                      \
        }                                                                                          \
    } while (0)

#define MAXT 16
#define MS 1000000ull
#define SEC 1000000000ull
/* the picks' clock: just after the samples the tests take at SEC */
#define NOW (SEC + MS)

/* A set of targets: their live numbers and which are down. */
typedef struct {
    sl_target_live_t live[MAXT];
    sl_target_live_t *ptr[MAXT];
    _Atomic bool down[MAXT];
} fx_t;

static bool up(void *ud, uint32_t t) {
    fx_t *f = ud;
    return !atomic_load_explicit(&f->down[t], memory_order_relaxed);
}

static void fx_init(fx_t *f) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < MAXT; i++) f->ptr[i] = &f->live[i];
}

static sl_balancer_t *lb(fx_t *f, int kind, uint32_t n, const uint32_t *weights) {
    sl_balancer_conf_t c = {.kind = kind, .ntargets = n, .weights = weights, .hash_epsilon = 0.25};
    sl_balancer_t *b = sl_balancer_new(&c, f->ptr);
    CHECK(b != NULL);
    return b;
}

static uint64_t rnd_state = 0x853c49e6748fea9bull;
static uint64_t rnd(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int pick(sl_balancer_t *b, fx_t *f) {
    return sl_balancer_pick(b, up, f, NULL, 0, rnd(&rnd_state), NOW);
}

static int pick_key(sl_balancer_t *b, fx_t *f, const char *key) {
    return sl_balancer_pick(b, up, f, key, strlen(key), rnd(&rnd_state), NOW);
}

static void test_round_robin(void) {
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = lb(&f, SL_LB_ROUND_ROBIN, 4, NULL);
    for (int i = 0; i < 8; i++) CHECK_INT(sl_balancer_pick(b, NULL, NULL, NULL, 0, 0, NOW), i % 4);
    int n[4] = {0};
    for (int i = 0; i < 4000; i++) n[pick(b, &f)]++;
    for (int t = 0; t < 4; t++) CHECK_INT(n[t], 1000);

    /* An ineligible target's turns are spread, not handed to its successor. */
    f.down[2] = true;
    memset(n, 0, sizeof n);
    for (int i = 0; i < 3000; i++) n[pick(b, &f)]++;
    CHECK_INT(n[0], 1000);
    CHECK_INT(n[1], 1000);
    CHECK_INT(n[2], 0);
    CHECK_INT(n[3], 1000);
    for (int t = 0; t < 4; t++) f.down[t] = true;
    CHECK_INT(pick(b, &f), -1);
    sl_balancer_free(b);
}

static void test_wrr_interleaving(void) {
    /* nginx's smooth sequence for 5,1,1, and the same for 10,2,2 (reduced by the gcd). */
    static const uint32_t w1[] = {5, 1, 1}, w2[] = {10, 2, 2};
    const uint32_t *ws[] = {w1, w2};
    for (int k = 0; k < 2; k++) {
        fx_t f;
        fx_init(&f);
        sl_balancer_t *b = lb(&f, SL_LB_WEIGHTED_ROUND_ROBIN, 3, ws[k]);
        char seq[15] = {0};
        for (int i = 0; i < 14; i++) seq[i] = (char)('a' + pick(b, &f));
        if (strcmp(seq, "aabacaaaabacaa") == 0)
            passed++;
        else {
            failed++;
            fprintf(stderr, "%s:%d: weights %u,%u,%u gave %s, want aabacaa twice\n", __FILE__,
                    __LINE__, ws[k][0], ws[k][1], ws[k][2], seq);
        }
        sl_balancer_free(b);
    }
}

/* Each eligible target's share of `picks` is within 1% of its weight's share. */
static void check_shares(sl_balancer_t *b, fx_t *f, uint32_t n, const uint32_t *w, int picks) {
    int got[MAXT] = {0};
    double wsum = 0;
    for (uint32_t t = 0; t < n; t++)
        if (!f->down[t]) wsum += w[t];
    int bad = 0;
    for (int i = 0; i < picks; i++) {
        int t = pick(b, f);
        if (t < 0 || f->down[t])
            bad++;
        else
            got[t]++;
    }
    CHECK_INT(bad, 0);
    for (uint32_t t = 0; t < n; t++) {
        double want = f->down[t] ? 0 : (double)picks * w[t] / wsum;
        CHECK_NEAR(got[t], want, want * 0.01);
    }
}

static void test_wrr_shares(void) {
    static const uint32_t w[] = {1, 2, 3, 7, 13};
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = lb(&f, SL_LB_WEIGHTED_ROUND_ROBIN, 5, w);
    check_shares(b, &f, 5, w, 100000);
    f.down[4] = true; /* the heaviest: its slots go to the others by their weights */
    check_shares(b, &f, 5, w, 100000);
    f.down[4] = false;
    f.down[0] = true;
    check_shares(b, &f, 5, w, 100000);
    sl_balancer_free(b);

    /* Weights whose schedule would be too long are scaled: large shares stay within 1%. */
    static const uint32_t big[] = {100003, 50000, 30001};
    fx_init(&f);
    b = lb(&f, SL_LB_WEIGHTED_ROUND_ROBIN, 3, big);
    check_shares(b, &f, 3, big, 100000);
    sl_balancer_free(b);
}

static bool pattern_up(void *ud, uint32_t t) { return (*(uint32_t *)ud >> t) & 1; }

static void test_ineligible_never_returned(void) {
    static const uint32_t w[] = {1, 4, 2, 1, 9, 1, 3};
    static const int kinds[] = {SL_LB_ROUND_ROBIN, SL_LB_WEIGHTED_ROUND_ROBIN, SL_LB_LEAST_CONN,
                                SL_LB_P2C_EWMA, SL_LB_CONSISTENT_HASH};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        fx_t f;
        fx_init(&f);
        sl_balancer_t *b = lb(&f, kinds[k], 7, w);
        int bad = 0;
        /* every subset of the 7 targets as the eligible ones, the empty one included */
        for (uint32_t mask = 0; mask < 128; mask++) {
            for (int i = 0; i < 50; i++) {
                char key[16];
                snprintf(key, sizeof key, "k%d", i);
                int t = sl_balancer_pick(b, pattern_up, &mask, key, strlen(key), rnd(&rnd_state), NOW);
                if (mask == 0 ? t != -1 : (t < 0 || !((mask >> t) & 1))) bad++;
                if (t >= 0 && i % 3 == 0) sl_balancer_begin(b, (uint32_t)t); /* some load */
            }
            for (int t = 0; t < 7; t++) atomic_store(&f.live[t].in_flight, 0);
        }
        if (bad) fprintf(stderr, "kind %d returned an ineligible target %d times\n", kinds[k], bad);
        CHECK_INT(bad, 0);
        sl_balancer_free(b);
    }
}

/* A pick that finds no eligible target takes no turn. sluice asks once for a healthy target
 * and, when there is none, again ignoring health ("tried anyway"): if the first, empty pick
 * took a counter value, every request would advance the sequence by two, and with all
 * targets unhealthy round-robin over 2 targets would send everything to one of them, and
 * weighted-round-robin would walk its schedule in steps of two (weights 3,2,1: 1:1:1). */
static bool none_up(void *ud, uint32_t t) {
    (void)ud;
    (void)t;
    return false;
}

static void test_empty_pick_takes_no_turn(void) {
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = lb(&f, SL_LB_ROUND_ROBIN, 2, NULL);
    int n[2] = {0};
    for (int i = 0; i < 1000; i++) {
        CHECK_INT(sl_balancer_pick(b, none_up, NULL, NULL, 0, 0, NOW), -1);
        n[pick(b, &f)]++;
    }
    CHECK_INT(n[0], 500);
    CHECK_INT(n[1], 500);
    sl_balancer_free(b);

    static const uint32_t w[] = {3, 2, 1};
    fx_init(&f);
    b = lb(&f, SL_LB_WEIGHTED_ROUND_ROBIN, 3, w);
    char seq[13] = {0};
    for (int i = 0; i < 12; i++) {
        CHECK_INT(sl_balancer_pick(b, none_up, NULL, NULL, 0, 0, NOW), -1);
        seq[i] = (char)('a' + pick(b, &f));
    }
    CHECK_STR(seq, "abacbaabacba"); /* nginx's smooth sequence for 3,2,1, twice */
    sl_balancer_free(b);
}

/* consistent-hash without a key (hash_on header or cookie the request lacks): a random
 * point of the ring per pick, so such requests spread by weight instead of all taking the
 * point of "" (HAProxy and Kong fall back to round-robin there). */
static void test_hash_no_key(void) {
    static const uint32_t w[] = {1, 1, 2};
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = lb(&f, SL_LB_CONSISTENT_HASH, 3, w);
    int n[3] = {0};
    for (int i = 0; i < 40000; i++) n[sl_balancer_pick(b, up, &f, NULL, 0, rnd(&rnd_state), NOW)]++;
    CHECK_NEAR(n[0], 10000, 1000);
    CHECK_NEAR(n[1], 10000, 1000);
    CHECK_NEAR(n[2], 20000, 1000);
    sl_balancer_free(b);
}

static void test_least_conn(void) {
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = lb(&f, SL_LB_LEAST_CONN, 3, NULL);
    sl_balancer_begin(b, 0);
    sl_balancer_begin(b, 0);
    sl_balancer_begin(b, 1);
    int n[3] = {0};
    for (int i = 0; i < 100; i++) n[pick(b, &f)]++;
    CHECK_INT(n[2], 100); /* the idle one */
    for (int i = 0; i < 3; i++) sl_balancer_begin(b, 2);
    CHECK_INT(pick(b, &f), 1);
    f.down[1] = true;
    CHECK_INT(pick(b, &f), 0);
    f.down[1] = false;
    sl_balancer_end(b, 0);
    sl_balancer_end(b, 0);
    sl_balancer_end(b, 1);
    for (int i = 0; i < 3; i++) sl_balancer_end(b, 2);

    /* All idle: the random start spreads them. */
    memset(n, 0, sizeof n);
    for (int i = 0; i < 3000; i++) n[pick(b, &f)]++;
    for (int t = 0; t < 3; t++) CHECK(n[t] > 800);
    sl_balancer_free(b);

    /* Equal counts go to the higher weight. */
    static const uint32_t w[] = {1, 3, 1};
    b = lb(&f, SL_LB_LEAST_CONN, 3, w);
    for (int i = 0; i < 100; i++) CHECK_INT(pick(b, &f), 1);
    sl_balancer_free(b);
}

static void test_p2c(void) {
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = lb(&f, SL_LB_P2C_EWMA, 2, NULL);
    sl_target_observe(&f.live[0], 1 * MS, SEC);
    sl_target_observe(&f.live[1], 10 * MS, SEC);
    /* Two targets: both are always the candidates (distinct), so the fast one always wins. */
    int n[5] = {0};
    for (int i = 0; i < 1000; i++) n[pick(b, &f)]++;
    CHECK_INT(n[0], 1000);
    /* The slow one gets traffic only once the fast one's in-flight attempts make it the
     * slower: 1 ms * (1 + 8) < 10 ms < 1 ms * (1 + 10). */
    for (int i = 0; i < 8; i++) sl_balancer_begin(b, 0);
    for (int i = 0; i < 100; i++) CHECK_INT(pick(b, &f), 0);
    sl_balancer_begin(b, 0);
    sl_balancer_begin(b, 0);
    for (int i = 0; i < 100; i++) CHECK_INT(pick(b, &f), 1);
    for (int i = 0; i < 10; i++) sl_balancer_end(b, 0);
    CHECK_INT(pick(b, &f), 0);
    sl_balancer_free(b);

    /* Five targets: the fast one wins each pair it is in (2 of 5 pairs); the slowest never. */
    fx_init(&f);
    b = lb(&f, SL_LB_P2C_EWMA, 5, NULL);
    for (int t = 0; t < 5; t++) sl_target_observe(&f.live[t], (t ? 10 * t : 1) * MS, SEC);
    memset(n, 0, sizeof n);
    for (int i = 0; i < 10000; i++) n[pick(b, &f)]++;
    CHECK_NEAR(n[0], 4000, 300);
    CHECK_INT(n[4], 0);
    CHECK(n[0] > n[1] && n[1] > n[2] && n[2] > n[3]);

    /* A target without a sample is tried at once while idle, and not flooded once busy. */
    atomic_store(&f.live[2].ewma_ns, 0.0);
    int got = 0;
    for (int i = 0; i < 1000; i++) got += pick(b, &f) == 2;
    CHECK_NEAR(got, 400, 100); /* every pair it is in */
    sl_balancer_begin(b, 2);
    got = 0;
    for (int i = 0; i < 1000; i++) got += pick(b, &f) == 2;
    CHECK_INT(got, 0);
    sl_balancer_end(b, 2);
    sl_balancer_free(b);

    /* A target that fails fast (refused: no latency to speak of) is no fast target: its
     * failures are samples of at least SL_LB_FAILURE_NS, and an estimate with no sample
     * for SL_EWMA_TAU_NS is forgotten, so it is asked again now and then. */
    fx_init(&f);
    b = lb(&f, SL_LB_P2C_EWMA, 3, NULL);
    sl_target_observe(&f.live[0], 2 * MS, SEC);
    sl_target_observe(&f.live[1], 3 * MS, SEC);
    sl_target_observe_failure(&f.live[2], 50000, SEC); /* 50 us, refused */
    CHECK(atomic_load(&f.live[2].ewma_ns) >= (double)SL_LB_FAILURE_NS);
    got = 0;
    for (int i = 0; i < 1000; i++) got += pick(b, &f) == 2;
    CHECK_INT(got, 0);
    /* a healthy target that starts failing: its failures pull it above the others */
    sl_target_observe_failure(&f.live[0], 100000, SEC + 100 * MS);
    CHECK(atomic_load(&f.live[0].ewma_ns) > 3e6);
    int forgot = 0;
    for (int i = 0; i < 1000; i++)
        forgot += sl_balancer_pick(b, up, &f, NULL, 0, rnd(&rnd_state), SEC + 2 * SL_EWMA_TAU_NS) == 2;
    CHECK(forgot > 0); /* every estimate is stale: all idle, all tried */
    sl_balancer_free(b);
}

static double ewma(const sl_target_live_t *l) { return atomic_load(&l->ewma_ns); }

static void test_ewma_decays_by_time(void) {
    const double tau = (double)SL_EWMA_TAU_NS;
    sl_target_live_t a = {0}, b = {0}, c = {0}, d = {0};
    sl_target_observe(&a, 10 * MS, SEC);
    CHECK_NEAR(ewma(&a), 10e6, 0);
    CHECK_INT(atomic_load(&a.ewma_at_ns), SEC);

    /* The same two samples, 1 ms apart and 100 s apart. */
    sl_target_observe(&b, 10 * MS, SEC);
    sl_target_observe(&a, 20 * MS, SEC + 1 * MS);
    sl_target_observe(&b, 20 * MS, SEC + 100 * SEC);
    double wa = exp(-1e6 / tau), wb = exp(-100e9 / tau);
    CHECK_NEAR(ewma(&a), 10e6 * wa + 20e6 * (1 - wa), 1e-3);
    CHECK_NEAR(ewma(&b), 10e6 * wb + 20e6 * (1 - wb), 1e-3);
    CHECK(ewma(&a) < 10.01e6);
    CHECK(ewma(&b) > 19.999e6);

    /* Samples at the instant of the last one, or before it, weigh nothing: a burst of them
     * does not wipe the history as a count-based EWMA would. */
    double before = ewma(&a);
    for (int i = 0; i < 1000; i++) sl_target_observe(&a, 5 * SEC, SEC + 1 * MS);
    sl_target_observe(&a, 5 * SEC, SEC);
    CHECK_NEAR(ewma(&a), before, 0);
    CHECK_INT(atomic_load(&a.ewma_at_ns), SEC + 1 * MS);

    /* 1000 samples over a second weigh what one sample at its end weighs. */
    sl_target_observe(&c, 10 * MS, SEC);
    sl_target_observe(&d, 10 * MS, SEC);
    for (int i = 1; i <= 1000; i++) sl_target_observe(&c, 20 * MS, SEC + (uint64_t)i * MS);
    sl_target_observe(&d, 20 * MS, 2 * SEC);
    CHECK_NEAR(ewma(&c), ewma(&d), 1e-3);
    CHECK_NEAR(ewma(&d), 10e6 * exp(-1e9 / tau) + 20e6 * (1 - exp(-1e9 / tau)), 1e-3);
}

static void ids_init(sl_str_t *ids, char names[][32], int n, int first) {
    for (int i = 0; i < n; i++) {
        int len = snprintf(names[i], 32, "10.0.0.%d:8080", first + i);
        ids[i] = (sl_str_t){names[i], (size_t)len};
    }
}

static sl_balancer_t *ring(fx_t *f, uint32_t n, const sl_str_t *ids, const uint32_t *w,
                           double eps) {
    sl_balancer_conf_t c = {.kind = SL_LB_CONSISTENT_HASH,
                            .ntargets = n,
                            .weights = w,
                            .ids = ids,
                            .hash_epsilon = eps};
    sl_balancer_t *b = sl_balancer_new(&c, f->ptr);
    CHECK(b != NULL);
    return b;
}

#define NKEYS 10000

static void keys_map(sl_balancer_t *b, fx_t *f, int *out) {
    for (int i = 0; i < NKEYS; i++) {
        char key[32];
        snprintf(key, sizeof key, "user-%d", i);
        out[i] = pick_key(b, f, key);
    }
}

static void test_hash_stability(void) {
    static int before[NKEYS], after[NKEYS];
    char names[11][32];
    sl_str_t ids[11];
    ids_init(ids, names, 11, 1);
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = ring(&f, 10, ids, NULL, 0.25);
    keys_map(b, &f, before);
    keys_map(b, &f, after);
    CHECK(memcmp(before, after, sizeof before) == 0); /* same key, same target */
    int share[10] = {0};
    for (int i = 0; i < NKEYS; i++) share[before[i]]++;
    for (int t = 0; t < 10; t++) CHECK_NEAR(share[t], NKEYS / 10, NKEYS / 10 * 0.2);

    /* One of ten ineligible, each in turn: only its keys move. Over the ten removals
     * exactly 90% of the keys stay: each removal keeps 1 - its share. */
    int kept_total = 0, worst = NKEYS;
    for (int gone = 0; gone < 10; gone++) {
        f.down[gone] = true;
        keys_map(b, &f, after);
        f.down[gone] = false;
        int kept = 0, wrong = 0;
        for (int i = 0; i < NKEYS; i++) {
            kept += after[i] == before[i];
            wrong += before[i] != gone && after[i] != before[i];
        }
        CHECK_INT(wrong, 0);
        CHECK_INT(kept, NKEYS - share[gone]);
        kept_total += kept;
        worst = kept < worst ? kept : worst;
    }
    CHECK_INT(kept_total, 9 * NKEYS);
    CHECK(worst >= NKEYS * 88 / 100);
    printf("consistent-hash, 1 of 10 ineligible: %.2f%% of keys kept on average, %.2f%% at worst\n",
           kept_total / 10.0 / NKEYS * 100, worst * 100.0 / NKEYS);

    /* A ring rebuilt without one target (the others shift index, keep their address). */
    sl_str_t ids9[9];
    for (int i = 0, j = 0; i < 10; i++)
        if (i != 3) ids9[j++] = ids[i];
    sl_balancer_t *b9 = ring(&f, 9, ids9, NULL, 0.25);
    keys_map(b9, &f, after);
    int kept = 0, wrong = 0;
    for (int i = 0; i < NKEYS; i++) {
        int was = before[i], now = after[i] + (after[i] >= 3);
        kept += was == now;
        wrong += was != 3 && was != now;
    }
    CHECK_INT(wrong, 0);
    CHECK_INT(kept, NKEYS - share[3]);
    sl_balancer_free(b9);

    /* A ring rebuilt with one target more: keys move only to it, >= 90% stay. */
    sl_balancer_t *b11 = ring(&f, 11, ids, NULL, 0.25);
    keys_map(b11, &f, after);
    kept = wrong = 0;
    for (int i = 0; i < NKEYS; i++) {
        kept += after[i] == before[i];
        wrong += after[i] != before[i] && after[i] != 10;
    }
    CHECK_INT(wrong, 0);
    CHECK(kept >= NKEYS * 90 / 100);
    printf("consistent-hash, 10 -> 11 targets: %.2f%% of keys kept\n", kept * 100.0 / NKEYS);
    sl_balancer_free(b11);

    /* Without ids the index is the identity: a rebuilt ring is the same ring. */
    sl_balancer_t *x = ring(&f, 10, NULL, NULL, 0.25), *y = ring(&f, 10, NULL, NULL, 0.25);
    keys_map(x, &f, before);
    keys_map(y, &f, after);
    CHECK(memcmp(before, after, sizeof before) == 0);
    sl_balancer_free(x);
    sl_balancer_free(y);
    sl_balancer_free(b);
}

static void test_hash_weights(void) {
    static int map[NKEYS];
    static const uint32_t w[] = {3, 1};
    char names[2][32];
    sl_str_t ids[2];
    ids_init(ids, names, 2, 1);
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = ring(&f, 2, ids, w, 0.25);
    keys_map(b, &f, map);
    int n0 = 0;
    for (int i = 0; i < NKEYS; i++) n0 += map[i] == 0;
    CHECK_NEAR(n0, NKEYS * 0.75, NKEYS * 0.05);
    sl_balancer_free(b);
}

/* ceil((1 + eps) * (load + 1) * w / wsum) over the eligible targets, in integers: eps is
 * num/den - 1. */
static int64_t cap_of(fx_t *f, uint32_t n, const uint32_t *w, uint32_t t, int64_t num,
                      int64_t den) {
    int64_t load = 0, wsum = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (f->down[i]) continue;
        load += atomic_load(&f->live[i].in_flight);
        wsum += w[i];
    }
    int64_t x = num * (load + 1) * w[t], y = den * wsum;
    return (x + y - 1) / y;
}

/* Skewed keys against a loaded ring: every pick stays within its target's cap. */
static void test_hash_bounded_load(void) {
    static const uint32_t w[] = {1, 1, 2, 1, 1, 1, 3, 1, 1, 1};
    static const struct {
        double eps;
        int64_t num, den;
    } eps[] = {{0.25, 5, 4}, {0, 1, 1}, {1, 2, 1}};
    char names[10][32];
    sl_str_t ids[10];
    ids_init(ids, names, 10, 1);
    for (size_t e = 0; e < sizeof eps / sizeof eps[0]; e++) {
        fx_t f;
        fx_init(&f);
        sl_balancer_t *b = ring(&f, 10, ids, w, eps[e].eps);
        int over = 0, bad = 0, spilled = 0, hot_home = pick_key(b, &f, "hot");
        uint64_t s = 42;
        for (int i = 0; i < 20000; i++) {
            if (i == 10000) f.down[hot_home] = true; /* and the hot key's home goes away */
            char key[32];
            uint64_t r = rnd(&s) % 100;
            if (r < 70)
                snprintf(key, sizeof key, "hot");
            else if (r < 90)
                snprintf(key, sizeof key, "warm-%d", (int)(r % 5));
            else
                snprintf(key, sizeof key, "cold-%d", (int)(rnd(&s) % 100000));
            int t = pick_key(b, &f, key);
            if (t < 0 || f.down[t]) {
                bad++;
                continue;
            }
            int64_t load = atomic_load(&f.live[t].in_flight);
            if (load + 1 > cap_of(&f, 10, w, (uint32_t)t, eps[e].num, eps[e].den)) over++;
            if (r < 70 && t != hot_home) spilled++;
            sl_balancer_begin(b, (uint32_t)t);
            /* Attempts end at random, so the load churns around a few hundred. */
            for (int j = 0; j < 2; j++) {
                uint32_t u = (uint32_t)(rnd(&s) % 10);
                if (rnd(&s) % 100 < 49 && atomic_load(&f.live[u].in_flight) > 0)
                    sl_balancer_end(b, u);
            }
        }
        CHECK_INT(bad, 0);
        CHECK_INT(over, 0);
        CHECK(spilled > 0); /* the hot key did overflow its home */
        for (int t = 0; t < 10; t++)
            while (atomic_load(&f.live[t].in_flight) > 0) sl_balancer_end(b, (uint32_t)t);
        sl_balancer_free(b);
    }
}

/* No epsilon (the config's default): a key stays on its own target however loaded it is,
 * while that target is eligible; then the next point takes it, and it comes back. */
static void test_hash_uncapped(void) {
    char names[5][32];
    sl_str_t ids[5];
    ids_init(ids, names, 5, 1);
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = ring(&f, 5, ids, NULL, INFINITY);
    int home = pick_key(b, &f, "user-7"), moved = 0;
    for (int i = 0; i < 1000; i++) {
        int t = pick_key(b, &f, "user-7");
        if (t != home) moved++;
        sl_balancer_begin(b, (uint32_t)t); /* all in flight at once, on one target */
    }
    CHECK_INT(moved, 0);
    f.down[home] = true;
    int away = pick_key(b, &f, "user-7");
    CHECK(away >= 0 && away != home);
    f.down[home] = false;
    CHECK_INT(pick_key(b, &f, "user-7"), home);
    while (atomic_load(&f.live[home].in_flight) > 0) sl_balancer_end(b, (uint32_t)home);
    sl_balancer_free(b);
}

/* Loads that race past every cap between the totals and the ring walk (here the
 * predicate's side effect plays the racing threads): the least full target is taken,
 * never -1 while one is eligible. */
static bool raise_loads(void *ud, uint32_t t) {
    fx_t *f = ud;
    if (t == 2) {
        atomic_store(&f->live[0].in_flight, 5000);
        atomic_store(&f->live[1].in_flight, 3000);
        atomic_store(&f->live[2].in_flight, 10);
    }
    return true;
}

static void test_hash_all_over_cap(void) {
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = ring(&f, 3, NULL, NULL, 0.25);
    for (int i = 0; i < 100; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        for (int t = 0; t < 3; t++) atomic_store(&f.live[t].in_flight, 0);
        /* totals: load 10, cap ceil(1.25 * 11 / 3) = 5 for each; fills 5001/5, 3001/5, 11/5 */
        CHECK_INT(sl_balancer_pick(b, raise_loads, &f, key, strlen(key), 0, NOW), 2);
    }
    sl_balancer_free(b);
}

/* Past SL_LB_SNAP_MAX targets the ring walk asks the predicate per point. */
static bool every_seventh(void *ud, uint32_t t) { return t % 7 == 3; }

static void test_hash_large_upstream(void) {
    enum { N = 1500 };
    static sl_target_live_t live[N];
    static sl_target_live_t *ptr[N];
    for (int t = 0; t < N; t++) ptr[t] = &live[t];
    sl_balancer_conf_t c = {
        .kind = SL_LB_CONSISTENT_HASH, .ntargets = N, .hash_epsilon = 0.25, .vnodes = 8};
    sl_balancer_t *b = sl_balancer_new(&c, ptr);
    CHECK(b != NULL);
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        int t = sl_balancer_pick(b, every_seventh, NULL, key, strlen(key), 0, NOW);
        if (t < 0 || t % 7 != 3) bad++;
        if (t >= 0) sl_balancer_begin(b, (uint32_t)t);
    }
    CHECK_INT(bad, 0);
    for (int t = 0; t < N; t++) atomic_store(&live[t].in_flight, 0);
    sl_balancer_free(b);
}

/* Many threads picking with begin/end at once: counts stay exact. */
#define NTHREADS 8
#define PICKS 20000

typedef struct {
    sl_balancer_t *b;
    fx_t *f;
    uint64_t seed;
    bool flap; /* one thread toggles a target's eligibility while the others pick */
    int got[MAXT];
    _Atomic uint64_t *clock;
} worker_t;

static void *worker(void *arg) {
    worker_t *w = arg;
    int held[3] = {-1, -1, -1}; /* up to three attempts in flight per thread */
    for (int i = 0; i < PICKS; i++) {
        if (w->flap) atomic_store(&w->f->down[i % 3], (i / 3) % 2);
        char key[16];
        snprintf(key, sizeof key, "k%d", i % 97);
        int t = sl_balancer_pick(w->b, up, w->f, key, strlen(key), rnd(&w->seed), NOW);
        if (held[i % 3] >= 0) {
            uint32_t h = (uint32_t)held[i % 3];
            uint64_t now = atomic_fetch_add(w->clock, 1000);
            sl_target_observe(&w->f->live[h], 1000 + (w->seed % 5000), now);
            sl_balancer_end(w->b, h);
        }
        held[i % 3] = t;
        if (t < 0) continue;
        w->got[t]++;
        sl_balancer_begin(w->b, (uint32_t)t);
    }
    for (int k = 0; k < 3; k++)
        if (held[k] >= 0) sl_balancer_end(w->b, (uint32_t)held[k]);
    return NULL;
}

static void run_threads(int kind, const uint32_t *weights, uint32_t n, bool flap, int *total) {
    fx_t f;
    fx_init(&f);
    sl_balancer_t *b = lb(&f, kind, n, weights);
    _Atomic uint64_t now = SEC;
    worker_t w[NTHREADS];
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (worker_t){
            .b = b, .f = &f, .seed = (uint64_t)i * 7919, .flap = flap && i == 0, .clock = &now};
        CHECK_INT(pthread_create(&th[i], NULL, worker, &w[i]), 0);
    }
    memset(total, 0, MAXT * sizeof *total);
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        for (uint32_t t = 0; t < n; t++) total[t] += w[i].got[t];
    }
    for (uint32_t t = 0; t < n; t++) CHECK_INT(atomic_load(&f.live[t].in_flight), 0);
    sl_balancer_free(b);
}

static void test_threads(void) {
    int total[MAXT];
    /* Every pick takes one counter value: the shares stay exact across threads. */
    run_threads(SL_LB_ROUND_ROBIN, NULL, 4, false, total);
    for (int t = 0; t < 4; t++) CHECK_INT(total[t], NTHREADS * PICKS / 4);
    static const uint32_t w[] = {5, 1, 1, 1};
    run_threads(SL_LB_WEIGHTED_ROUND_ROBIN, w, 4, false, total);
    for (int t = 0; t < 4; t++) CHECK_INT(total[t], NTHREADS * PICKS / 8 * (int)w[t]);
    for (int kind = SL_LB_ROUND_ROBIN; kind <= SL_LB_CONSISTENT_HASH; kind++) {
        run_threads(kind, w, 4, true, total);
        int sum = 0;
        for (int t = 0; t < 4; t++) sum += total[t];
        CHECK_INT(sum, NTHREADS * PICKS); /* target 3 never flaps: no pick fails */
    }
}

int main(void) {
    test_round_robin();
    test_wrr_interleaving();
    test_wrr_shares();
    test_ineligible_never_returned();
    test_empty_pick_takes_no_turn();
    test_least_conn();
    test_p2c();
    test_ewma_decays_by_time();
    test_hash_stability();
    test_hash_weights();
    test_hash_bounded_load();
    test_hash_uncapped();
    test_hash_all_over_cap();
    test_hash_no_key();
    test_hash_large_upstream();
    test_threads();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
