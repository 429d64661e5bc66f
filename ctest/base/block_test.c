/* block_test.c — unit tests for core/base/block.c: the freelist trim keeps its low-water
 * mark and every block the interval's busiest moment used, frees the rest, and a steady
 * load around trims takes nothing more from malloc; a connection's read room.
 *
 *   block_test [name-substring]
 */
#include "base/block.h"

#include "check.h"

/* Takes n blocks at once and puts them back: one moment of a load n blocks deep (a
 * spike, when n is large). */
static void load(sl_blockpool_t *bp, uint32_t n) {
    char *b[512];
    for (uint32_t i = 0; i < n; i++) b[i] = sl_block_get(bp);
    for (uint32_t i = 0; i < n; i++) sl_block_put(bp, b[i]);
}

static void test_trim_keeps_low_water(void) {
    sl_blockpool_t bp = {.max_free = 4096, .low_water = 32};
    load(&bp, 300);
    CHECK_INT(bp.nfree, 300);
    CHECK_INT(bp.mallocs, 300);
    /* The interval that held the spike saw the list empty: nothing is idle yet. */
    CHECK_INT(sl_blockpool_trim(&bp), 0);
    CHECK_INT(bp.nfree, 300);
    /* A whole interval with all 300 unused: all but the low-water mark go. */
    CHECK_INT(sl_blockpool_trim(&bp), 268);
    CHECK_INT(bp.nfree, 32);
    CHECK_INT(bp.trimmed, 268);
    /* At the mark, nothing more goes, however long it stays there. */
    CHECK_INT(sl_blockpool_trim(&bp), 0);
    CHECK_INT(sl_blockpool_trim(&bp), 0);
    CHECK_INT(bp.nfree, 32);
    /* The list is still whole: every kept block can be taken. */
    uint32_t n = 0;
    for (sl_block_free_t *f = bp.free; f; f = f->next) n++;
    CHECK_INT(n, 32);
    sl_blockpool_destroy(&bp);
    CHECK_INT(bp.nfree, 0);
}

static void test_trim_keeps_what_the_interval_used(void) {
    sl_blockpool_t bp = {.max_free = 4096, .low_water = 8};
    load(&bp, 200);
    sl_blockpool_trim(&bp); /* starts an interval with 200 free */
    load(&bp, 50);          /* its busiest moment: 50 in use, 150 free */
    CHECK_INT(bp.nfree, 200);
    CHECK_INT(sl_blockpool_trim(&bp), 150 - 8);
    CHECK_INT(bp.nfree, 58);
    /* The same load again: its 50 are there, and the 8 spare stay spare. */
    uint64_t m = bp.mallocs;
    load(&bp, 50);
    CHECK_INT(bp.mallocs, m);
    CHECK_INT(sl_blockpool_trim(&bp), 0);
    CHECK_INT(bp.nfree, 58);
    sl_blockpool_destroy(&bp);
}

static void test_steady_state_mallocs_nothing(void) {
    sl_blockpool_t bp = {.max_free = 4096, .low_water = 4};
    load(&bp, 40);
    uint64_t m = bp.mallocs;
    CHECK_INT(m, 40);
    /* A load swinging between 10 and 40 blocks deep within each interval, for many
     * intervals: trims never take a block the next swing needs. */
    for (int interval = 0; interval < 50; interval++) {
        for (int k = 0; k < 20; k++) load(&bp, k % 2 ? 10 : 40);
        sl_blockpool_trim(&bp);
    }
    CHECK_INT(bp.mallocs, m);
    CHECK_INT(bp.trimmed, 0);
    sl_blockpool_destroy(&bp);
}

static void test_low_water_zero_frees_all_idle(void) {
    sl_blockpool_t bp = {.max_free = 4096, .low_water = 0};
    load(&bp, 10);
    sl_blockpool_trim(&bp);
    CHECK_INT(sl_blockpool_trim(&bp), 10);
    CHECK_INT(bp.nfree, 0);
    CHECK(bp.free == NULL);
    /* An empty pool trims to nothing and still serves. */
    CHECK_INT(sl_blockpool_trim(&bp), 0);
    char *b = sl_block_get(&bp);
    CHECK(b != NULL);
    sl_block_put(&bp, b);
    sl_blockpool_destroy(&bp);
}

static void test_arena_blocks_return_and_trim(void) {
    sl_blockpool_t bp = {.max_free = 4096, .low_water = 2};
    sl_arena_t a[16];
    for (int i = 0; i < 16; i++) {
        sl_arena_init(&a[i], &bp);
        CHECK(sl_arena_alloc(&a[i], 100) != NULL);
    }
    for (int i = 0; i < 16; i++) sl_arena_reset(&a[i]);
    CHECK_INT(bp.nfree, 16);
    sl_blockpool_trim(&bp);
    CHECK_INT(sl_blockpool_trim(&bp), 14);
    CHECK_INT(bp.nfree, 2);
    sl_blockpool_destroy(&bp);
}

/* An arena with a first chunk of its owner's takes a block only for what does not fit, and
 * starts again in the chunk after a reset. */
static void test_arena_first_chunk(void) {
    sl_blockpool_t bp = {.max_free = 16};
    static char first[512];
    sl_arena_t a;
    sl_arena_init_first(&a, &bp, first, sizeof first);
    char *p = sl_arena_alloc(&a, 100);
    CHECK(p == first);
    CHECK(sl_arena_alloc(&a, 300) == first + 112);
    CHECK_INT(a.nblocks, 0);
    sl_wbuf_t b = sl_arena_wbuf(&a, 64);
    CHECK(b.p == first + 416 && b.cap == 96);
    b = sl_arena_wbuf(&a, 200); /* more than the chunk has left: a block */
    CHECK_INT(a.nblocks, 1);
    CHECK(b.p == a.blocks[0] && b.cap == SL_BLOCK_SIZE);
    sl_arena_commit(&a, 200);
    CHECK(sl_arena_alloc(&a, 10) == a.blocks[0] + 208);
    sl_arena_reset(&a);
    CHECK_INT(bp.nfree, 1);
    CHECK(sl_arena_alloc(&a, 10) == first);
    CHECK_INT(bp.mallocs, 1);
    sl_blockpool_destroy(&bp);
}

/* A connection's read room: a block taken only when it has none, its free end after. */
static void test_read_room(void) {
    sl_blockpool_t bp = {.max_free = 16};
    char *rbuf = NULL;
    uint32_t rlen = 7, rpos = 3; /* stale counts of a released buffer */
    unsigned room;
    char *p = sl_block_room(&bp, &rbuf, &rlen, &rpos, &room);
    CHECK(p != NULL && p == rbuf);
    CHECK_INT(rlen, 0);
    CHECK_INT(rpos, 0);
    CHECK_INT(room, SL_BLOCK_SIZE);
    rlen = 100, rpos = 40;
    CHECK(sl_block_room(&bp, &rbuf, &rlen, &rpos, &room) == rbuf + 100);
    CHECK_INT(room, SL_BLOCK_SIZE - 100);
    CHECK_INT(rpos, 40);
    CHECK_INT(bp.mallocs, 1);
    sl_block_put(&bp, rbuf);
    sl_blockpool_destroy(&bp);
}

static const check_test_t tests[] = {
    {"read_room", test_read_room},
    {"arena_first_chunk", test_arena_first_chunk},
    {"trim_keeps_low_water", test_trim_keeps_low_water},
    {"trim_keeps_what_the_interval_used", test_trim_keeps_what_the_interval_used},
    {"steady_state_mallocs_nothing", test_steady_state_mallocs_nothing},
    {"low_water_zero_frees_all_idle", test_low_water_zero_frees_all_idle},
    {"arena_blocks_return_and_trim", test_arena_blocks_return_and_trim},
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
