/* bench_alloc.h — the allocation counter of the benchmark programs: ctest/alloc_shim.c
 * compiled in (its malloc family replaces libc's in the process, and its static `count`
 * is readable here), and the check that it really counts. */
#ifndef SL_BENCH_ALLOC_H
#define SL_BENCH_ALLOC_H

#include "alloc_shim.c"

#include <stdbool.h>
#include <stdint.h>

/** Allocations made in this process so far. */
static inline uint64_t bench_allocs(void) { return __atomic_load_n(&count, __ATOMIC_RELAXED); }

/** The counter must see an allocation made here, or its zeros would mean nothing. The
 *  volatile pointer keeps the compiler from treating (and eliding) it as the builtin. */
static inline bool bench_counter_works(void) {
    void *(*volatile alloc)(size_t) = malloc;
    uint64_t before = bench_allocs();
    void *p = alloc(16);
    bool ok = bench_allocs() > before;
    free(p);
    return ok;
}

#endif
