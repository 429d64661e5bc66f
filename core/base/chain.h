/* chain.h — the one operation the core's chained hash tables (upstream/limiter.c,
 * upstream/conn_limit.c) share: doubling the bucket heads. Each table keeps its own entry
 * type; an entry's chain link (a pointer to the next entry) is its first member and its
 * 64-bit hash sits at `hash_off`. Links and hashes are read and written with memcpy, so
 * no entry is accessed through another struct type.
 */
#ifndef SL_CHAIN_H
#define SL_CHAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/** Doubles the *nbuckets heads at *buckets_p (an `entry **`; 16 at first, a power of two)
 *  and relinks every entry by its hash. When the allocation fails nothing changes (the
 *  chains just get longer). The caller holds the table's lock. */
static inline void sl_chain_grow(void *buckets_p, size_t *nbuckets, size_t hash_off) {
    void **old;
    memcpy(&old, buckets_p, sizeof old);
    size_t nb = *nbuckets ? *nbuckets * 2 : 16;
    void **b = calloc(nb, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < *nbuckets; i++) {
        for (void *e = old[i], *next; e; e = next) {
            uint64_t h;
            memcpy(&next, e, sizeof next);
            memcpy(&h, (const char *)e + hash_off, sizeof h);
            memcpy(e, &b[h & (nb - 1)], sizeof(void *));
            b[h & (nb - 1)] = e;
        }
    }
    free(old);
    memcpy(buckets_p, &b, sizeof b);
    *nbuckets = nb;
}

#endif
