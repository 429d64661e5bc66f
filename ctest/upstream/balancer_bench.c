/* balancer_bench.c — what a pick costs, per balancer kind: ns/op on one thread and on two
 * threads sharing the balancer, and the heap allocations made while picking (0 expected).
 * Built by ctest/CMakeLists.txt in plain builds (it counts allocations with alloc_shim.c
 * compiled in, and sanitizer runtimes own malloc), not run by ctest; scripts/bench runs
 * it. Exit status 1 when any pick allocated.
 *
 *   balancer_bench [picks per thread, default 1000000]
 *
 * Each figure is the best of 5 runs; "allocs" counts over all of them.
 *
 * Setup: 10 targets (weights 1..10 for weighted-round-robin and consistent-hash), all
 * eligible through a predicate that reads an atomic flag per target as health and
 * breaker checks would, p2c EWMAs spread 1..10 ms, 256 distinct hash keys. "pick" is
 * sl_balancer_pick alone; "cycle" adds the begin/end pair the proxy wraps an attempt in.
 */
/* The LD_PRELOAD allocation counter, compiled in: its malloc family replaces libc's in
 * this process and its static `count` is readable here. */
#include "alloc_shim.c"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "upstream/balancer.h"

static uint64_t allocs(void) { return __atomic_load_n(&count, __ATOMIC_RELAXED); }

#define N 10
#define NKEYS 256

static sl_target_live_t live[N];
static _Atomic bool down[N];
static char keys[NKEYS][16];
static size_t key_len[NKEYS];

static bool up(void *ud, uint32_t t) {
    return !atomic_load_explicit(&down[t], memory_order_relaxed);
}

typedef struct {
    sl_balancer_t *b;
    long picks;
    bool cycle;
    pthread_barrier_t *start;
    uint64_t ns, allocs_before, allocs_after;
    int sink;
} run_t;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *run(void *arg) {
    run_t *r = arg;
    uint64_t x = (uint64_t)(uintptr_t)r * 0x9e3779b97f4a7c15ull | 1;
    pthread_barrier_wait(r->start);
    r->allocs_before = allocs();
    uint64_t t0 = now_ns();
    int sink = 0;
    for (long i = 0; i < r->picks; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64: the caller's random draw */
        int k = (int)(i & (NKEYS - 1));
        int t = sl_balancer_pick(r->b, up, NULL, keys[k], key_len[k], x, 0);
        if (r->cycle) {
            sl_balancer_begin(r->b, (uint32_t)t);
            sl_balancer_end(r->b, (uint32_t)t);
        }
        sink += t;
    }
    r->ns = now_ns() - t0;
    r->allocs_after = allocs();
    r->sink = sink;
    return NULL;
}

/* ns per op of the slowest thread, and the allocations made while any thread picked. */
static double measure_once(sl_balancer_t *b, int threads, bool cycle, long picks,
                           uint64_t *nalloc) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    run_t r[2];
    pthread_t th[2];
    for (int i = 0; i < threads; i++) {
        r[i] = (run_t){.b = b, .picks = picks, .cycle = cycle, .start = &start};
        if (i > 0) pthread_create(&th[i], NULL, run, &r[i]);
    }
    run(&r[0]);
    uint64_t ns = r[0].ns, lo = r[0].allocs_before, hi = r[0].allocs_after;
    for (int i = 1; i < threads; i++) {
        pthread_join(th[i], NULL);
        ns = r[i].ns > ns ? r[i].ns : ns;
        lo = r[i].allocs_before < lo ? r[i].allocs_before : lo;
        hi = r[i].allocs_after > hi ? r[i].allocs_after : hi;
    }
    pthread_barrier_destroy(&start);
    *nalloc = hi - lo;
    return (double)ns / (double)picks;
}

/* The best of a few runs: the machine is shared, and noise only ever adds time. */
static double measure(sl_balancer_t *b, int threads, bool cycle, long picks, uint64_t *nalloc) {
    double best = 0;
    *nalloc = 0;
    for (int rep = 0; rep < 5; rep++) {
        uint64_t a;
        double ns = measure_once(b, threads, cycle, picks, &a);
        best = rep == 0 || ns < best ? ns : best;
        *nalloc += a;
    }
    return best;
}

int main(int argc, char **argv) {
    long picks = argc > 1 ? atol(argv[1]) : 1000000;
    static const char *const names[] = {"round-robin", "weighted-round-robin", "least-conn",
                                        "p2c-ewma", "consistent-hash"};
    uint32_t weights[N];
    sl_target_live_t *ptr[N];
    char idbuf[N][32];
    sl_str_t ids[N];
    for (int t = 0; t < N; t++) {
        weights[t] = (uint32_t)t + 1;
        ptr[t] = &live[t];
        ids[t] =
            (sl_str_t){idbuf[t], (size_t)snprintf(idbuf[t], sizeof idbuf[t], "10.0.0.%d:80", t)};
        sl_target_observe(&live[t], (uint64_t)(t + 1) * 1000000, 1);
    }
    for (int k = 0; k < NKEYS; k++)
        key_len[k] = (size_t)snprintf(keys[k], sizeof keys[k], "user-%d", k * 7919);

    printf("%-22s %7s %12s %13s %8s\n", "balancer", "threads", "pick ns/op", "cycle ns/op",
           "allocs");
    uint64_t building = 0;
    bool allocated = false;
    for (int kind = SL_LB_ROUND_ROBIN; kind <= SL_LB_CONSISTENT_HASH; kind++) {
        bool weighted = kind == SL_LB_WEIGHTED_ROUND_ROBIN || kind == SL_LB_CONSISTENT_HASH;
        sl_balancer_conf_t c = {.kind = kind,
                                .ntargets = N,
                                .weights = weighted ? weights : NULL,
                                .ids = ids,
                                .hash_epsilon = 0.25};
        uint64_t a0 = allocs();
        sl_balancer_t *b = sl_balancer_new(&c, ptr);
        if (!b) return 1;
        building += allocs() - a0;
        for (int threads = 1; threads <= 2; threads++) {
            uint64_t a1, a2;
            double pick = measure(b, threads, false, picks, &a1);
            double cycle = measure(b, threads, true, picks, &a2);
            printf("%-22s %7d %12.1f %13.1f %8llu\n", names[kind], threads, pick, cycle,
                   (unsigned long long)(a1 + a2));
            allocated = allocated || a1 + a2 > 0;
        }
        sl_balancer_free(b);
    }
    /* Proof that the counter counts: building the balancers does allocate. */
    printf("(%ld picks per thread, best of 5; allocs over all of them; building the five "
           "balancers made %llu allocations)\n",
           picks, (unsigned long long)building);
    return allocated;
}
