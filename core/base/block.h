/* block.h — fixed-size buffers from a per-worker freelist.
 *
 * Read buffers and per-request arenas are SL_BLOCK_SIZE blocks. A worker keeps
 * up to `max_free` released blocks for reuse, so the steady state allocates
 * nothing; connections hold a block only while bytes are in flight.
 *
 * Trimming. A spike fills the freelist (4,000 requests in flight leave thousands of
 * blocks behind); kept forever, that is the spike's memory for the life of the worker.
 * The worker calls sl_blockpool_trim every SL_BLOCK_TRIM_INTERVAL_MS. A trim frees
 * the blocks that stayed unused for the whole interval beyond `low_water`: the fewest
 * free blocks seen since the previous trim (`nfree_min`), less low_water. Blocks that
 * a load used at any moment of the interval stay, so a steady load (whatever its
 * swings within an interval) keeps every block it needs and still allocates nothing;
 * only a list that stayed above low_water for a whole interval shrinks, down to
 * low_water plus what the interval's busiest moment took. Handing the freed pages back
 * to the OS is the caller's (the worker's timer: malloc_trim).
 * Owner: one worker thread; never shared.
 */
#ifndef SL_BLOCK_H
#define SL_BLOCK_H

#include "base/common.h"
#include "base/wbuf.h"

#define SL_BLOCK_SIZE (64 * 1024)

typedef struct sl_block_free_s {
    struct sl_block_free_s *next;
} sl_block_free_t;

typedef struct {
    sl_block_free_t *free;
    uint32_t nfree, max_free;
    uint32_t low_water; /**< free blocks a trim always keeps */
    uint32_t nfree_min; /**< the fewest free blocks since the last trim */
    uint64_t mallocs; /**< blocks ever taken from malloc: steady state keeps this flat */
    uint64_t trimmed; /**< blocks ever freed by trims */
} sl_blockpool_t;

/** The worker's trim period, and the free blocks a trim keeps (2 MiB). */
#define SL_BLOCK_TRIM_INTERVAL_MS 2000
#define SL_BLOCK_LOW_WATER 32

/** Returns a block of SL_BLOCK_SIZE bytes, or NULL when memory is exhausted. */
char *sl_block_get(sl_blockpool_t *bp);
void sl_block_put(sl_blockpool_t *bp, char *b);

/** A connection's read room: the free end of its read buffer *rbuf, whose first *rlen bytes
 *  are filled (*rpos of them consumed). A buffer-less connection (idle ones hold none) takes
 *  a block from bp first, empty. *room is the room's size; NULL and 0 when out of memory. */
static inline char *sl_block_room(sl_blockpool_t *bp, char **rbuf, uint32_t *rlen, uint32_t *rpos, unsigned *room) {
    if (!*rbuf) {
        *rlen = *rpos = 0;
        if (!(*rbuf = sl_block_get(bp))) {
            *room = 0;
            return NULL;
        }
    }
    *room = SL_BLOCK_SIZE - *rlen;
    return *rbuf + *rlen;
}
void sl_blockpool_destroy(sl_blockpool_t *bp);
/** Frees the free blocks beyond low_water that stayed unused since the previous call
 *  (see the top of this file) and starts the next interval. Returns the blocks freed.
 *  Owner thread. */
uint32_t sl_blockpool_trim(sl_blockpool_t *bp);

/**
 * A bump arena over blocks, for the bytes a request builds (rebuilt heads,
 * canned bodies). Freed in one step by sl_arena_reset. Allocations larger than
 * a block fail.
 *
 * An arena may start in a small chunk of its owner's (sl_arena_init_first: the request
 * embeds one), so that a request whose bytes fit in it takes no block at all: a block
 * held while a request waits on its upstream costs its first page (4 KiB) for ~300 bytes.
 * An allocation that does not fit in the current chunk takes a block (the rest of the
 * chunk is left unused).
 */
typedef struct {
    sl_blockpool_t *bp;
    char *first;         /**< the owner's first chunk, or NULL; borrowed */
    uint32_t first_size;
    uint8_t nblocks;
    uint32_t used, cap;  /**< in the current chunk */
    char *cur;           /**< the current chunk: `first` or blocks[nblocks - 1]; NULL: none */
    char *blocks[8];
} sl_arena_t;

void sl_arena_init(sl_arena_t *a, sl_blockpool_t *bp);
/** An arena whose first `size` bytes are first[] (borrowed for the arena's life). */
void sl_arena_init_first(sl_arena_t *a, sl_blockpool_t *bp, char *first, uint32_t size);
void *sl_arena_alloc(sl_arena_t *a, size_t n);
/** Room left in the current chunk, at least `want` bytes, for building output in place
 *  ({NULL, 0, 0} when out of memory). */
sl_wbuf_t sl_arena_wbuf(sl_arena_t *a, size_t want);
/** Commits `n` bytes of the last sl_arena_wbuf. */
void sl_arena_commit(sl_arena_t *a, size_t n);
void sl_arena_reset(sl_arena_t *a);

#endif
