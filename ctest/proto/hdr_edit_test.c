/* hdr_edit_test.c — unit tests for core/proto/hdr_edit.c: what plugins' header edits accept
 * and refuse (the value check works eight bytes at a time: every position of a bad byte is
 * tried), and what set, add and clear leave (set's name in its own case, one removed entry).
 *
 * Run: hdr_edit_test [substring]   — runs the tests whose name contains the substring.
 */
#include "proto/hdr_edit.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

static sl_blockpool_t blocks = {.max_free = 4};

static int set(sl_hdr_edits_t *e, sl_arena_t *a, const char *n, const char *v, size_t vl, const char **err) {
    return sl_edits_set(e, a, (sl_str_t){n, strlen(n)}, (sl_str_t){v, vl}, err);
}

/* A bad byte at every position of values of every length up to 40 is refused; the same
 * values with a tab, a space or obs-text (0x80 and up) there are accepted. */
static void test_values(void) {
    sl_arena_t a;
    sl_arena_init(&a, &blocks);
    static const unsigned char bad[] = {0, 1, '\r', '\n', 0x1f, 0x7f};
    static const unsigned char good[] = {'\t', ' ', '~', 0x80, 0xfe, 0xff};
    char v[40];
    for (size_t len = 1; len <= sizeof v; len++)
        for (size_t at = 0; at < len; at++) {
            memset(v, 'x', sizeof v);
            for (size_t k = 0; k < sizeof bad; k++) {
                sl_hdr_edits_t e = {0};
                const char *err = NULL;
                v[at] = (char)bad[k];
                CHECK_INT(set(&e, &a, "X-A", v, len, &err), SL_ERROR);
                CHECK(err != NULL && strstr(err, "controls") != NULL);
                CHECK_INT(e.nadded, 0);
            }
            for (size_t k = 0; k < sizeof good; k++) {
                sl_hdr_edits_t e = {0};
                const char *err = NULL;
                v[at] = (char)good[k];
                CHECK_INT(set(&e, &a, "X-A", v, len, &err), SL_OK);
                CHECK_INT(e.nadded, 1);
                CHECK(e.nadded == 1 && e.added[0].value.len == len && memcmp(e.added[0].value.p, v, len) == 0);
            }
            sl_arena_reset(&a); /* an arena is a request's: bounded */
        }
    sl_arena_reset(&a);
}

static void test_names(void) {
    sl_arena_t a;
    sl_arena_init(&a, &blocks);
    sl_hdr_edits_t e = {0};
    const char *err = NULL;
    static const char *owned[] = {"Content-Length", "transfer-encoding", "Connection", "keep-alive",
                                  "TE", "trailer", "Upgrade"};
    for (size_t i = 0; i < SL_ARRAY_LEN(owned); i++) CHECK_INT(set(&e, &a, owned[i], "1", 1, &err), SL_ERROR);
    CHECK_INT(set(&e, &a, "bad name", "1", 1, &err), SL_ERROR);
    CHECK_INT(set(&e, &a, "", "1", 1, &err), SL_ERROR);
    CHECK_INT(e.nadded + e.nremoved, 0);
    CHECK_INT(set(&e, &a, "Tea", "1", 1, &err), SL_OK); /* te's length differs */
    sl_arena_reset(&a);
}

/* set = clear + add: one removed entry per name whatever the case, the added field in the
 * case of the last set; add keeps every field; clear drops the added ones. */
static void test_set_add_clear(void) {
    sl_arena_t a;
    sl_arena_init(&a, &blocks);
    sl_hdr_edits_t e = {0};
    const char *err = NULL;
    CHECK_INT(set(&e, &a, "x-a", "1", 1, &err), SL_OK);
    CHECK_INT(set(&e, &a, "X-A", "2", 1, &err), SL_OK);
    CHECK_INT(e.nremoved, 1);
    CHECK_INT(e.nadded, 1);
    CHECK(e.added[0].name.len == 3 && memcmp(e.added[0].name.p, "X-A", 3) == 0);
    CHECK(e.added[0].value.len == 1 && e.added[0].value.p[0] == '2');
    CHECK(sl_edits_removed(&e, (sl_str_t){"X-a", 3}));
    CHECK_INT(sl_edits_add(&e, &a, (sl_str_t){"X-A", 3}, (sl_str_t){"3", 1}, &err), SL_OK);
    CHECK_INT(e.nadded, 2);
    const sl_field_t *f = sl_edits_find(&e, (sl_str_t){"x-A", 3});
    CHECK(f != NULL && f->value.p[0] == '2');
    CHECK_INT(sl_edits_clear(&e, &a, (sl_str_t){"x-a", 3}, &err), SL_OK);
    CHECK_INT(e.nadded, 0);
    CHECK_INT(e.nremoved, 1);
    /* many names: the arrays grow */
    char n[16];
    for (int i = 0; i < 100; i++) {
        snprintf(n, sizeof n, "X-%d", i);
        CHECK_INT(set(&e, &a, n, "v", 1, &err), SL_OK);
    }
    CHECK_INT(e.nadded, 100);
    CHECK_INT(e.nremoved, 101);
    CHECK(sl_edits_find(&e, (sl_str_t){"x-99", 4}) != NULL);
    sl_arena_reset(&a);
}

static const check_test_t tests[] = {
    {"values", test_values},
    {"names", test_names},
    {"set_add_clear", test_set_add_clear},
};

int main(int argc, char **argv) {
    int rc = check_main(tests, SL_ARRAY_LEN(tests), argc, argv);
    sl_blockpool_destroy(&blocks);
    return rc;
}
