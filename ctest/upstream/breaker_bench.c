/* breaker_bench.c — what a breaker costs per attempt: ns per admit+record (or admit+cancel)
 * on one thread and on 2 threads sharing one breaker, and the heap allocations made while
 * measuring (0 expected). Built by ctest/CMakeLists.txt in plain builds, not run by ctest;
 * scripts/bench runs it.
 *
 *   breaker_bench [millions of iterations per thread, default 20]
 *
 * One line per case: `case threads ns/op allocations`. Exit status 1 when any case
 * allocated.
 */

#include "bench_alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "upstream/breaker.h"
#include "base/common.h"

typedef enum {
    CASE_CLOSED_OK,   /* the steady state: admit, record a success in the window */
    CASE_CLOSED_FAIL, /* a failure: also sums the window for the trip decision */
    CASE_PROBE,       /* half-open: take a slot, give it back */
} bench_case_t;

static const char *const case_names[] = {"closed_admit_record_ok", "closed_admit_record_fail",
                                         "half_open_admit_cancel"};

static struct {
    sl_breaker_t b;
    sl_breaker_conf_t c;
    bench_case_t kind;
    uint64_t iters;
    pthread_barrier_t start;
} bench;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *run(void *arg) {
    uint64_t *ns = arg;
    pthread_barrier_wait(&bench.start);
    uint64_t t = now_ns();
    for (uint64_t i = 0; i < bench.iters; i++) {
        /* A clock that moves 1 ms per 1024 attempts: buckets roll over as they would
         * under a few hundred thousand attempts a second per thread. */
        uint64_t now = 1000000 + (i >> 10);
        sl_admit_t a = sl_breaker_admit(&bench.b, &bench.c, now, NULL);
        if (bench.kind == CASE_PROBE)
            sl_breaker_cancel(&bench.b, a);
        else
            sl_breaker_record(&bench.b, &bench.c, a, bench.kind == CASE_CLOSED_OK, now);
    }
    *ns = now_ns() - t;
    return NULL;
}

/* Runs one case on `threads` threads; returns the allocations made while they ran. */
static uint64_t measure(bench_case_t kind, int threads) {
    bench.kind = kind;
    bench.c = (sl_breaker_conf_t){.enabled = true,
                                  .failure_ratio = 0.5,
                                  .min_requests = 20,
                                  .window_ms = 30000,
                                  .open_timeout_ms = 1000,
                                  .max_open_timeout_ms = 60000,
                                  .half_open_requests = 2,
                                  .success_threshold = 2};
    /* failures only: a ratio above 1 never trips, so every record sums the window */
    if (kind == CASE_CLOSED_FAIL) bench.c.failure_ratio = 2.0;
    sl_breaker_init(&bench.b);
    if (kind == CASE_PROBE) {
        /* tripped at 0: half-open from the first admission on */
        bench.c.open_timeout_ms = 0;
        bench.c.min_requests = 1;
        sl_breaker_record(&bench.b, &bench.c, SL_ADMIT_CLOSED, false, 0);
    }
    pthread_t th[2];
    uint64_t ns[2] = {0, 0};
    pthread_barrier_init(&bench.start, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, run, &ns[i]);
    /* every thread is created and waiting: what is counted from here is the loops' */
    uint64_t before = bench_allocs();
    pthread_barrier_wait(&bench.start);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    uint64_t allocs = bench_allocs() - before;
    pthread_barrier_destroy(&bench.start);

    uint64_t total = 0;
    for (int i = 0; i < threads; i++) total += ns[i];
    printf("%-26s %d %8.1f %llu\n", case_names[kind], threads,
           (double)total / threads / (double)bench.iters, (unsigned long long)allocs);
    return allocs;
}

int main(int argc, char **argv) {
    if (!bench_counter_works()) {
        fprintf(stderr, "breaker_bench: the allocation counter counts nothing\n");
        return 1;
    }
    bench.iters = (argc > 1 ? strtoull(argv[1], NULL, 10) : 20) * 1000000;
    if (bench.iters == 0) bench.iters = 1000000;
    printf("%-26s %s %8s %s\n", "case", "threads", "ns/op", "allocations");
    uint64_t allocs = 0;
    for (int k = CASE_CLOSED_OK; k <= CASE_PROBE; k++)
        for (int threads = 1; threads <= 2; threads++) allocs += measure((bench_case_t)k, threads);
    return allocs ? 1 : 0;
}
