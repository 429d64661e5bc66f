/* stampede.h — the concurrency tests' release: N threads wait on a barrier, are let go at
 * one instant to call a test's function once each, and the main thread looks at what
 * they did before the next trial. Trials repeat many times; the test counts invariant
 * violations over them (the style rules, Tests).
 *
 *   stampede_t s;
 *   stampede_start(&s, 64, one_call);   // one_call(i): thread i's work for a trial
 *   for (t = 0; t < trials; t++) { set up; stampede_trial(&s); check; }
 *   stampede_stop(&s);
 */
#ifndef SL_STAMPEDE_H
#define SL_STAMPEDE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#include "check.h"

#define STAMPEDE_MAX 64

typedef struct stampede_s stampede_t;

typedef struct {
    stampede_t *s;
    size_t i;
} stampede_arg_t;

struct stampede_s {
    pthread_barrier_t go, done;
    _Atomic bool stop;
    size_t n;
    void (*fn)(size_t i);
    pthread_t th[STAMPEDE_MAX];
    stampede_arg_t args[STAMPEDE_MAX];
};

static void *stampede_thread(void *arg) {
    stampede_arg_t *a = arg;
    stampede_t *s = a->s;
    for (;;) {
        pthread_barrier_wait(&s->go);
        if (atomic_load(&s->stop)) return NULL;
        s->fn(a->i);
        pthread_barrier_wait(&s->done);
    }
}

/** Starts n (at most STAMPEDE_MAX) threads, each waiting for its first trial. */
static inline void stampede_start(stampede_t *s, size_t n, void (*fn)(size_t i)) {
    s->n = n;
    s->fn = fn;
    atomic_init(&s->stop, false);
    pthread_barrier_init(&s->go, NULL, (unsigned)n + 1);
    pthread_barrier_init(&s->done, NULL, (unsigned)n + 1);
    for (size_t i = 0; i < n; i++) {
        s->args[i] = (stampede_arg_t){s, i};
        CHECK_INT(pthread_create(&s->th[i], NULL, stampede_thread, &s->args[i]), 0);
    }
}

/** Releases every thread at once and returns when each made its call. */
static inline void stampede_trial(stampede_t *s) {
    pthread_barrier_wait(&s->go);
    pthread_barrier_wait(&s->done);
}

static inline void stampede_stop(stampede_t *s) {
    atomic_store(&s->stop, true);
    pthread_barrier_wait(&s->go);
    for (size_t i = 0; i < s->n; i++) pthread_join(s->th[i], NULL);
    pthread_barrier_destroy(&s->go);
    pthread_barrier_destroy(&s->done);
}

/** Prints " K in T trials" for each count K of the histogram hist[0..n] that occurred. */
static inline void stampede_print_hist(const int *hist, size_t n) {
    for (size_t k = 0; k <= n; k++)
        if (hist[k]) printf(" %zu in %d trials", k, hist[k]);
    printf("\n");
}

#endif
