/* wbuf_test.c — unit tests for core/base/wbuf.c: bounded and growing buffers, printf, and
 * the JSON string escaper (control characters, quotes, backslash, UTF-8, 0x7f).
 *
 *   wbuf_test [name-substring]
 */
#include "base/wbuf.h"

#include <stdlib.h>
#include <yaml.h>

#include "check.h"

static void test_bounded_refuses_whole(void) {
    char mem[8];
    sl_wbuf_t b = SL_WBUF_BOUNDED(mem, sizeof mem);
    CHECK(SL_WBUF_LIT(&b, "abcde"));
    CHECK(!SL_WBUF_LIT(&b, "fghi")); /* 4 > 3 left: nothing written */
    CHECK_INT(b.len, 5);
    CHECK(b.full && !b.oom && sl_wbuf_failed(&b));
    CHECK(SL_WBUF_LIT(&b, "fgh")); /* exactly fits */
    CHECK_INT(b.len, 8);
    CHECK(memcmp(mem, "abcdefgh", 8) == 0);
    CHECK(sl_wbuf_cstr(&b) == NULL); /* no room for the NUL */
}

static void test_growing(void) {
    sl_wbuf_t b = SL_WBUF_GROWING(0);
    CHECK(sl_wbuf_put(&b, "", 0));
    for (int i = 0; i < 1000; i++) CHECK(sl_wbuf_u64(&b, (uint64_t)i % 10));
    CHECK_INT(b.len, 1000);
    CHECK(b.cap >= 1000);
    CHECK(!sl_wbuf_failed(&b));
    char *s = sl_wbuf_cstr(&b);
    CHECK(s && s[0] == '0' && s[9] == '9' && s[1000] == 0);
    char *owned = sl_wbuf_take(&b);
    CHECK(owned == s);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0 && b.max == 0 && !b.bounded);
    free(owned);
    sl_wbuf_t z = {0}; /* a zeroed buffer grows */
    CHECK(SL_WBUF_LIT(&z, "xyz") && z.len == 3 && z.cap >= 3);
    sl_wbuf_free(&z);
}

static void test_growing_max(void) {
    sl_wbuf_t b = SL_WBUF_GROWING(300);
    char x[200];
    memset(x, 'x', sizeof x);
    CHECK(sl_wbuf_put(&b, x, 200));
    CHECK(sl_wbuf_put(&b, x, 100));
    CHECK(!sl_wbuf_put(&b, x, 1)); /* over max */
    CHECK(b.full && !b.oom);
    CHECK_INT(b.len, 300);
    CHECK(sl_wbuf_take(&b) == NULL); /* a failed buffer hands nothing out (and is freed) */
    CHECK(b.p == NULL);
    sl_wbuf_free(&b);
}

static void test_printf(void) {
    char mem[16];
    sl_wbuf_t b = SL_WBUF_BOUNDED(mem, sizeof mem);
    CHECK(sl_wbuf_printf(&b, "%d-%s", 42, "ab"));
    CHECK_INT(b.len, 5);
    CHECK(!sl_wbuf_printf(&b, "%s", "0123456789ab")); /* 12 bytes + NUL > 11 left */
    CHECK_INT(b.len, 5);
    CHECK(sl_wbuf_printf(&b, "%s", "0123456789")); /* 10 + NUL fits */
    CHECK_INT(b.len, 15);
    CHECK(memcmp(mem, "42-ab0123456789", 15) == 0);

    sl_wbuf_t g = SL_WBUF_GROWING(0);
    char big[5000];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK(sl_wbuf_printf(&g, "[%s]", "a"));
    CHECK(sl_wbuf_printf(&g, "%s|%u", big, 7u));
    CHECK_INT(g.len, 3 + 4999 + 2);
    CHECK(g.p[3] == 'y' && g.p[g.len - 1] == '7' && g.p[g.len - 2] == '|');
    sl_wbuf_free(&g);
}

static char *json(const char *s, size_t n) {
    sl_wbuf_t b = SL_WBUF_GROWING(0);
    sl_wbuf_json_quoted(&b, (sl_str_t){s, n});
    return sl_wbuf_take(&b);
}

static void test_json_escapes(void) {
    char *j = json("a\"b\\c/d", 7);
    CHECK_STR(j, "\"a\\\"b\\\\c/d\"");
    free(j);
    j = json("\b\f\n\r\t", 5);
    CHECK_STR(j, "\"\\b\\f\\n\\r\\t\"");
    free(j);
    j = json("x\0y\x01\x1f\x7f", 6);
    CHECK_STR(j, "\"x\\u0000y\\u0001\\u001f\\u007f\"");
    free(j);
    j = json("", 0);
    CHECK_STR(j, "\"\"");
    free(j);
    /* UTF-8 (é, €, 😀) passes through as it is */
    j = json("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);
    CHECK_STR(j, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
    free(j);
}

/* Every byte 0..0x7f through the escaper, then through a JSON parser (libyaml reads JSON
 * as YAML's flow style): what comes back is what went in. */
static void test_json_round_trip(void) {
    char in[128];
    for (int i = 0; i < 128; i++) in[i] = (char)(i ? i : 1);
    sl_wbuf_t b = SL_WBUF_GROWING(0);
    SL_WBUF_LIT(&b, "{\"k\": ");
    sl_wbuf_json_quoted(&b, (sl_str_t){in, sizeof in});
    SL_WBUF_LIT(&b, "}");
    char *text = sl_wbuf_take(&b);
    for (const char *p = text; *p; p++) CHECK((unsigned char)*p >= 0x20 && *p != 0x7f);
    yaml_parser_t ps;
    yaml_document_t doc;
    yaml_parser_initialize(&ps);
    yaml_parser_set_input_string(&ps, (const unsigned char *)text, strlen(text));
    CHECK(yaml_parser_load(&ps, &doc));
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    CHECK(root && root->type == YAML_MAPPING_NODE);
    if (root && root->type == YAML_MAPPING_NODE) {
        yaml_node_t *v = yaml_document_get_node(&doc, root->data.mapping.pairs.start->value);
        CHECK_INT(v->data.scalar.length, sizeof in);
        CHECK(memcmp(v->data.scalar.value, in, sizeof in) == 0);
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&ps);
    free(text);
}

static void test_json_bounded_stops(void) {
    char mem[6];
    sl_wbuf_t b = SL_WBUF_BOUNDED(mem, sizeof mem);
    CHECK(!sl_wbuf_json_quoted(&b, SL_LIT("ab\ncd")));
    CHECK(sl_wbuf_failed(&b));
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"bounded_refuses_whole", test_bounded_refuses_whole},
        {"growing", test_growing},
        {"growing_max", test_growing_max},
        {"printf", test_printf},
        {"json_escapes", test_json_escapes},
        {"json_round_trip", test_json_round_trip},
        {"json_bounded_stops", test_json_bounded_stops},
    };
    return check_main(tests, SL_ARRAY_LEN(tests), argc, argv);
}
