/* block.c — the per-worker block freelist and the request arena built on it. */
#include "base/block.h"

#include <assert.h>
#include <stdlib.h>

char *sl_block_get(sl_blockpool_t *bp) {
    sl_block_free_t *f = bp->free;
    if (f) {
        bp->free = f->next;
        if (--bp->nfree < bp->nfree_min) bp->nfree_min = bp->nfree;
        return (char *)f;
    }
    bp->nfree_min = 0;
    bp->mallocs++;
    return malloc(SL_BLOCK_SIZE);
}

void sl_block_put(sl_blockpool_t *bp, char *b) {
    if (!b) return;
    if (bp->nfree >= bp->max_free) {
        free(b);
        return;
    }
    sl_block_free_t *f = (sl_block_free_t *)b;
    f->next = bp->free;
    bp->free = f;
    bp->nfree++;
}

void sl_blockpool_destroy(sl_blockpool_t *bp) {
    while (bp->free) {
        sl_block_free_t *f = bp->free;
        bp->free = f->next;
        free(f);
    }
    bp->nfree = 0;
}

uint32_t sl_blockpool_trim(sl_blockpool_t *bp) {
    uint32_t idle = SL_MIN(bp->nfree_min, bp->nfree);
    uint32_t n = idle > bp->low_water ? idle - bp->low_water : 0;
    if (n) {
        /* The list's head is the most recently put, the warmest in cache: keep it and
         * free the tail. */
        sl_block_free_t **pp = &bp->free;
        for (uint32_t keep = bp->nfree - n; keep; keep--) pp = &(*pp)->next;
        sl_block_free_t *f = *pp;
        *pp = NULL;
        while (f) {
            sl_block_free_t *next = f->next;
            free(f);
            f = next;
        }
        bp->nfree -= n;
        bp->trimmed += n;
    }
    bp->nfree_min = bp->nfree;
    return n;
}

void sl_arena_init_first(sl_arena_t *a, sl_blockpool_t *bp, char *first, uint32_t size) {
    a->bp = bp;
    a->first = first;
    a->first_size = first ? size : 0;
    a->nblocks = 0;
    a->cur = first;
    a->cap = a->first_size;
    a->used = 0;
}

void sl_arena_init(sl_arena_t *a, sl_blockpool_t *bp) { sl_arena_init_first(a, bp, NULL, 0); }

static bool arena_room(sl_arena_t *a, size_t n) {
    if (a->cur && a->cap - a->used >= n) return true;
    if (n > SL_BLOCK_SIZE || a->nblocks == SL_ARRAY_LEN(a->blocks)) return false;
    char *b = sl_block_get(a->bp);
    if (!b) return false;
    a->blocks[a->nblocks++] = b;
    a->cur = b;
    a->cap = SL_BLOCK_SIZE;
    a->used = 0;
    return true;
}

void *sl_arena_alloc(sl_arena_t *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!arena_room(a, n)) return NULL;
    void *p = a->cur + a->used;
    a->used += (uint32_t)n;
    return p;
}

sl_wbuf_t sl_arena_wbuf(sl_arena_t *a, size_t want) {
    if (!arena_room(a, want)) return SL_WBUF_BOUNDED(NULL, 0);
    return SL_WBUF_BOUNDED(a->cur + a->used, a->cap - a->used);
}

void sl_arena_commit(sl_arena_t *a, size_t n) {
    assert(a->cur && a->used + n <= a->cap);
    a->used += (uint32_t)((n + 15) & ~(size_t)15);
    if (a->used > a->cap) a->used = a->cap;
}

void sl_arena_reset(sl_arena_t *a) {
    for (uint8_t i = 0; i < a->nblocks; i++) sl_block_put(a->bp, a->blocks[i]);
    a->nblocks = 0;
    a->cur = a->first;
    a->cap = a->first_size;
    a->used = 0;
}
