/* conn_limit_test.c — unit tests for core/upstream/conn_limit.c: admission against max and
 * burst, release down to a freed entry, keys and routes apart, invalid arguments, and the
 * concurrency tests: the stampede (64 threads released at once on one key, each trial
 * checking that exactly min(64, max + burst) took a slot, max of them admitted and the
 * rest burst, then releasing all at once and checking the key is gone; 1,000 trials over
 * several bounds) and many threads acquiring and releasing at random on a few keys,
 * checking the bound after every acquire and a zero count at the end.
 *
 *   conn_limit_test [name-substring]
 */
#include "upstream/conn_limit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "check.h"
#include "stampede.h"

static int route_a, route_b;

static int acquire(int route, const char *key, uint32_t max, uint32_t burst, sl_conn_slot_t **slot) {
    uint32_t n;
    const char *err = NULL;
    return sl_conn_limit_acquire(route, key, strlen(key), max, burst, slot, &n, &err);
}

static void test_admit_burst_reject(void) {
    sl_conn_slot_t *s[4];
    CHECK_INT(acquire(route_a, "a|k", 2, 1, &s[0]), SL_CONN_ADMITTED);
    CHECK_INT(acquire(route_a, "a|k", 2, 1, &s[1]), SL_CONN_ADMITTED);
    CHECK_INT(acquire(route_a, "a|k", 2, 1, &s[2]), SL_CONN_BURST);
    CHECK_INT(acquire(route_a, "a|k", 2, 1, &s[3]), SL_CONN_REJECTED);
    CHECK(s[3] == NULL);
    CHECK_INT(sl_conn_limit_count("a|k", 3), 3);
    CHECK_INT(sl_conn_limit_in_flight(route_a), 3);
    sl_conn_limit_release(s[1]);
    CHECK_INT(sl_conn_limit_count("a|k", 3), 2);
    /* room under max + burst again, but not under max: burst */
    CHECK_INT(acquire(route_a, "a|k", 2, 1, &s[1]), SL_CONN_BURST);
    for (int i = 0; i < 3; i++) sl_conn_limit_release(s[i]);
    CHECK_INT(sl_conn_limit_count("a|k", 3), 0);
    CHECK_INT(sl_conn_limit_keys(), 0);
    CHECK_INT(sl_conn_limit_in_flight(-1), 0);
}

static void test_keys_and_routes_apart(void) {
    sl_conn_slot_t *x, *y, *z;
    CHECK_INT(acquire(route_a, "k1", 1, 0, &x), SL_CONN_ADMITTED);
    CHECK_INT(acquire(route_b, "k2", 1, 0, &y), SL_CONN_ADMITTED);
    CHECK_INT(acquire(route_a, "k1", 1, 0, &z), SL_CONN_REJECTED);
    CHECK_INT(sl_conn_limit_in_flight(route_a), 1);
    CHECK_INT(sl_conn_limit_in_flight(route_b), 1);
    CHECK_INT(sl_conn_limit_keys(), 2);
    sl_conn_limit_release(x);
    sl_conn_limit_release(y);
    CHECK_INT(sl_conn_limit_keys(), 0);
    /* an empty key is a key */
    CHECK_INT(acquire(route_a, "", 1, 0, &x), SL_CONN_ADMITTED);
    CHECK_INT(acquire(route_a, "", 1, 0, &y), SL_CONN_REJECTED);
    sl_conn_limit_release(x);
    CHECK_INT(sl_conn_limit_route("a", 1), route_a);
    char *m = sl_conn_limit_metrics();
    CHECK(m && strstr(m, "sluice_limit_conn_in_flight{route=\"a\"} 0\n"));
    CHECK(m && strstr(m, "sluice_limit_conn_total{route=\"a\",result=\"rejected\"}"));
    free(m);
}

static void test_invalid_arguments(void) {
    sl_conn_slot_t *s;
    uint32_t n;
    const char *err = NULL;
    CHECK_INT(sl_conn_limit_acquire(route_a, "k", 1, 0, 0, &s, &n, &err), SL_ERROR);
    CHECK(err != NULL);
    CHECK_INT(sl_conn_limit_acquire(-1, "k", 1, 1, 0, &s, &n, &err), SL_ERROR);
    CHECK_INT(sl_conn_limit_acquire(SL_CONN_LIMIT_ROUTES, "k", 1, 1, 0, &s, &n, &err), SL_ERROR);
    CHECK_INT(sl_conn_limit_acquire(route_a, "k", 1, UINT32_MAX, 1, &s, &n, &err), SL_ERROR);
    CHECK(s == NULL);
    CHECK_INT(sl_conn_limit_keys(), 0);
}

/* The stampede: STAMPEDE_THREADS threads released by one barrier on one key. */
#define STAMPEDE_THREADS 64
#define STAMPEDE_TRIALS 1000

static struct {
    uint32_t max, burst;
    int got[STAMPEDE_THREADS];
    sl_conn_slot_t *slot[STAMPEDE_THREADS];
    int releasing;
} st;

static void stampede_call(size_t i) {
    if (st.releasing) {
        sl_conn_limit_release(st.slot[i]);
        st.slot[i] = NULL;
        return;
    }
    st.got[i] = acquire(route_a, "stampede", st.max, st.burst, &st.slot[i]);
}

static void test_stampede(void) {
    stampede_t s;
    stampede_start(&s, STAMPEDE_THREADS, stampede_call);
    static const struct {
        uint32_t max, burst;
        int trials;
    } runs[] = {{4, 0, STAMPEDE_TRIALS}, {4, 2, STAMPEDE_TRIALS}, {1, 0, 200}, {63, 0, 100}, {60, 10, 100}};
    for (size_t r = 0; r < SL_ARRAY_LEN(runs); r++) {
        st.max = runs[r].max, st.burst = runs[r].burst;
        uint32_t room = st.max + st.burst < STAMPEDE_THREADS ? st.max + st.burst : STAMPEDE_THREADS;
        uint32_t want_admit = st.max < room ? st.max : room;
        int violations = 0, leaks = 0;
        for (int t = 0; t < runs[r].trials; t++) {
            st.releasing = 0;
            stampede_trial(&s);
            uint32_t admitted = 0, burst = 0, slots = 0;
            for (size_t i = 0; i < STAMPEDE_THREADS; i++) {
                admitted += st.got[i] == SL_CONN_ADMITTED;
                burst += st.got[i] == SL_CONN_BURST;
                slots += st.slot[i] != NULL;
            }
            if (admitted != want_admit || admitted + burst != room || slots != room ||
                sl_conn_limit_count("stampede", 8) != room)
                violations++;
            /* every holder releases at the same instant */
            st.releasing = 1;
            stampede_trial(&s);
            if (sl_conn_limit_count("stampede", 8) != 0 || sl_conn_limit_keys() != 0 ||
                sl_conn_limit_in_flight(-1) != 0)
                leaks++;
        }
        CHECK_INT(violations, 0);
        CHECK_INT(leaks, 0);
        printf("stampede: %d threads, max %u burst %u, %d trials: %d violations, %d leaks\n",
               STAMPEDE_THREADS, st.max, st.burst, runs[r].trials, violations, leaks);
    }
    stampede_stop(&s);
}

/* Mixed: threads acquire and release at random on MIX_KEYS keys, each holding up to
 * MIX_HELD slots; the key's count seen by an acquire never passes max + burst. */
#define MIX_THREADS 8
#define MIX_ITERS 40000
#define MIX_HELD 4
#define MIX_KEYS 3

static _Atomic int mix_over;

static void *mix_thread(void *arg) {
    uint64_t x = (uintptr_t)arg * 0x9e3779b97f4a7c15ULL + 1;
    sl_conn_slot_t *held[MIX_HELD] = {0};
    char key[8];
    for (int it = 0; it < MIX_ITERS; it++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int i = (int)(x % MIX_HELD);
        if (held[i]) {
            sl_conn_limit_release(held[i]);
            held[i] = NULL;
            continue;
        }
        snprintf(key, sizeof key, "mix%d", (int)((x >> 8) % MIX_KEYS));
        uint32_t n = 0;
        const char *err;
        int rc = sl_conn_limit_acquire(route_b, key, 4, 5, 3, &held[i], &n, &err);
        if ((rc == SL_CONN_ADMITTED || rc == SL_CONN_BURST) && n > 8) atomic_fetch_add(&mix_over, 1);
        if (rc == SL_CONN_ADMITTED && n > 5) atomic_fetch_add(&mix_over, 1);
    }
    for (int i = 0; i < MIX_HELD; i++) sl_conn_limit_release(held[i]);
    return NULL;
}

static void test_many_threads(void) {
    pthread_t th[MIX_THREADS];
    for (uintptr_t i = 0; i < MIX_THREADS; i++) pthread_create(&th[i], NULL, mix_thread, (void *)(i + 1));
    for (int i = 0; i < MIX_THREADS; i++) pthread_join(th[i], NULL);
    CHECK_INT(atomic_load(&mix_over), 0);
    CHECK_INT(sl_conn_limit_keys(), 0);
    CHECK_INT(sl_conn_limit_in_flight(-1), 0);
}

static const check_test_t tests[] = {
#define T(f) {#f, f}
    T(test_admit_burst_reject),
    T(test_keys_and_routes_apart),
    T(test_invalid_arguments),
    T(test_stampede),
    T(test_many_threads),
#undef T
};

int main(int argc, char **argv) {
    route_a = sl_conn_limit_route("a", 1);
    route_b = sl_conn_limit_route("b", 1);
    return check_main(tests, SL_ARRAY_LEN(tests), argc, argv);
}
