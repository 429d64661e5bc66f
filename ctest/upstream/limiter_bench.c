/* limiter_bench.c — what a rate-limit take costs: ns per sl_ffi_limit_take (or _window),
 * the real clock read included, on one thread and on 2 threads, and the heap allocations
 * made while measuring (0 expected: the table is warmed first, and a table past its bound
 * reuses evicted entries). Built by ctest/CMakeLists.txt in plain builds, not run by
 * ctest.
 *
 *   limiter_bench [millions of iterations per thread, default 10]
 *
 * One line per case: `case threads ns/op allocations`, ns/op the best of 3 runs. Exit
 * status 1 when any case allocated.
 */

#include "bench_alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "base/common.h"
#include "upstream/limiter.h"

typedef enum {
    CASE_ONE_KEY,   /* every thread on one key: 2 threads contend for its shard */
    CASE_OWN_KEY,   /* each thread its own key */
    CASE_MANY_KEYS, /* each thread cycling through 10,000 keys of its own */
    CASE_EVICTING,  /* 100,000 keys through a table bounded to 6,400: each take evicts */
    CASE_WINDOW,    /* the sliding window, each thread its own key */
} bench_case_t;

static const char *const case_names[] = {"take_one_key", "take_own_key", "take_many_keys",
                                         "take_evicting", "window_own_key"};

#define NKEYS 100000
#define MANY 10000
#define EVICT_BOUND 6400

static struct {
    bench_case_t kind;
    uint64_t iters;
    pthread_barrier_t start;
    char keys[2][NKEYS][24]; /* per thread: "t<thread>-<i>" */
    uint8_t lens[2][NKEYS];
    uint64_t ns[2]; /* per thread: its loop's time */
} bench;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One call of the case, on key i of thread t. A rate no loop reaches: every take is
 * admitted and does the whole update. */
static void one(int t, uint64_t i) {
    sl_limit_result_t r;
    int th = bench.kind == CASE_ONE_KEY ? 0 : t;
    uint64_t k = bench.kind == CASE_MANY_KEYS  ? i % MANY
                 : bench.kind == CASE_EVICTING ? i % NKEYS
                                               : 0;
    const char *key = bench.keys[th][k];
    if (bench.kind == CASE_WINDOW)
        sl_ffi_limit_window(key, bench.lens[th][k], 1e15, 1, 1, &r, NULL);
    else
        sl_ffi_limit_take(key, bench.lens[th][k], 1e9, 1e9, 1, &r, NULL);
}

static void *run(void *arg) {
    int t = (int)(intptr_t)arg;
    pthread_barrier_wait(&bench.start);
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < bench.iters; i++) one(t, i);
    bench.ns[t] = now_ns() - t0;
    return NULL;
}

/* Runs one case on `threads` threads: ns per call per thread, *allocs the allocations
 * made while they ran. */
static double measure_once(bench_case_t kind, int threads, uint64_t *allocs) {
    bench.kind = kind;
    sl_limiter_clear();
    sl_limiter_set_max_keys(kind == CASE_EVICTING ? EVICT_BOUND : SL_LIMITER_MAX_KEYS);
    /* warm: every key the case uses exists (or, evicting, the table is full) */
    uint64_t warm = kind == CASE_MANY_KEYS ? MANY : kind == CASE_EVICTING ? NKEYS : 1;
    for (int t = 0; t < threads; t++)
        for (uint64_t i = 0; i < warm; i++) one(t, i);

    pthread_t th[2];
    pthread_barrier_init(&bench.start, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, run, (void *)(intptr_t)i);
    /* every thread is created and waiting: what is counted from here is the loops' */
    uint64_t before = bench_allocs();
    pthread_barrier_wait(&bench.start);
    uint64_t total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        total += bench.ns[i];
    }
    *allocs += bench_allocs() - before;
    pthread_barrier_destroy(&bench.start);
    return (double)total / threads / (double)bench.iters;
}

/* The best of 3 runs (the machines this runs on are shared: the others' load only ever
 * adds time); returns the allocations of all 3. */
static uint64_t measure(bench_case_t kind, int threads) {
    uint64_t allocs = 0;
    double best = measure_once(kind, threads, &allocs);
    for (int i = 0; i < 2; i++) best = SL_MIN(best, measure_once(kind, threads, &allocs));
    printf("%-16s %d %8.1f %llu\n", case_names[kind], threads, best, (unsigned long long)allocs);
    return allocs;
}

int main(int argc, char **argv) {
    if (!bench_counter_works()) {
        fprintf(stderr, "limiter_bench: the allocation counter counts nothing\n");
        return 1;
    }
    bench.iters = (argc > 1 ? strtoull(argv[1], NULL, 10) : 10) * 1000000;
    if (bench.iters == 0) bench.iters = 1000000;
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < NKEYS; i++)
            bench.lens[t][i] =
                (uint8_t)snprintf(bench.keys[t][i], sizeof bench.keys[t][i], "t%d-%d", t, i);
    printf("%-16s %s %8s %s\n", "case", "threads", "ns/op", "allocations");
    uint64_t allocs = 0;
    for (int k = CASE_ONE_KEY; k <= CASE_WINDOW; k++)
        for (int threads = 1; threads <= 2; threads++) allocs += measure((bench_case_t)k, threads);
    return allocs ? 1 : 0;
}
