/* list_test.c — unit tests for core/base/list.h: insertion order, removal from anywhere
 * (also of unlinked and zeroed nodes), iteration that unlinks, and splicing.
 *
 *   list_test [name-substring]
 */
#include "base/list.h"

#include "check.h"

typedef struct {
    int v;
    sl_list_t link;
} item_t;

/* The values of h first to last, as digits; also checks every prev link. */
static const char *values(sl_list_t *h) {
    static char out[32];
    size_t n = 0;
    sl_list_t *it, *prev = h;
    sl_list_foreach(it, h) {
        if (it->prev != prev) return "broken";
        prev = it;
        out[n++] = (char)('0' + SL_LIST_ENTRY(it, item_t, link)->v);
    }
    if (h->prev != prev) return "broken";
    out[n] = 0;
    return out;
}

static void test_push_and_order(void) {
    sl_list_t h;
    sl_list_init(&h);
    CHECK(sl_list_empty(&h));
    CHECK(sl_list_first(&h) == NULL && sl_list_last(&h) == NULL);
    CHECK(SL_LIST_FIRST(&h, item_t, link) == NULL);
    item_t a = {1, {0}}, b = {2, {0}}, c = {3, {0}};
    sl_list_push_back(&h, &a.link);
    sl_list_push_back(&h, &b.link);
    sl_list_push_front(&h, &c.link);
    CHECK_STR(values(&h), "312");
    CHECK(SL_LIST_FIRST(&h, item_t, link) == &c);
    CHECK(SL_LIST_LAST(&h, item_t, link) == &b);
    CHECK(sl_list_linked(&a.link));
}

static void test_remove(void) {
    sl_list_t h;
    sl_list_init(&h);
    item_t it[4] = {{1, {0}}, {2, {0}}, {3, {0}}, {4, {0}}};
    for (int i = 0; i < 4; i++) sl_list_push_back(&h, &it[i].link);
    sl_list_remove(&it[1].link); /* middle */
    CHECK_STR(values(&h), "134");
    sl_list_remove(&it[0].link); /* first */
    sl_list_remove(&it[3].link); /* last */
    CHECK_STR(values(&h), "3");
    CHECK(!sl_list_linked(&it[0].link));
    sl_list_remove(&it[0].link); /* already out: nothing happens */
    CHECK_STR(values(&h), "3");
    item_t z = {9, {0}}; /* zeroed, never linked */
    CHECK(!sl_list_linked(&z.link));
    sl_list_remove(&z.link);
    CHECK(z.link.next == NULL);
    sl_list_remove(&it[2].link);
    CHECK(sl_list_empty(&h));
    sl_list_push_back(&h, &it[1].link); /* a removed node links again */
    CHECK_STR(values(&h), "2");
}

static void test_foreach_safe_unlinks(void) {
    sl_list_t h;
    sl_list_init(&h);
    item_t it[5];
    for (int i = 0; i < 5; i++) {
        it[i].v = i;
        sl_list_push_back(&h, &it[i].link);
    }
    sl_list_t *n, *tmp;
    sl_list_foreach_safe(n, tmp, &h) {
        if (SL_LIST_ENTRY(n, item_t, link)->v % 2 == 0) sl_list_remove(n);
    }
    CHECK_STR(values(&h), "13");
}

static void test_splice(void) {
    sl_list_t a, b;
    sl_list_init(&a);
    sl_list_init(&b);
    item_t it[4] = {{1, {0}}, {2, {0}}, {3, {0}}, {4, {0}}};
    sl_list_splice(&a, &b); /* empty into empty */
    CHECK(sl_list_empty(&a) && sl_list_empty(&b));
    sl_list_push_back(&a, &it[0].link);
    sl_list_push_back(&b, &it[1].link);
    sl_list_push_back(&b, &it[2].link);
    sl_list_splice(&a, &b);
    CHECK_STR(values(&a), "123");
    CHECK(sl_list_empty(&b));
    sl_list_push_back(&b, &it[3].link);
    sl_list_remove(&it[2].link); /* a node unlinks from whatever list holds it now */
    sl_list_splice(&b, &a);
    CHECK_STR(values(&b), "412");
    CHECK(sl_list_empty(&a));
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"push_and_order", test_push_and_order},
        {"remove", test_remove},
        {"foreach_safe_unlinks", test_foreach_safe_unlinks},
        {"splice", test_splice},
    };
    return check_main(tests, SL_ARRAY_LEN(tests), argc, argv);
}
