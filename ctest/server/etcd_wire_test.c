/* etcd_wire_test.c — base64, JSON through libyaml (proto/json.c, on etcd's answers), the
 * key set, range answers and snapshots, and list items, as core/server/etcd_wire.c does them. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "server/etcd_wire.h"

static void test_base64(void) {
    const char *cases[] = {"", "a", "ab", "abc", "/sluice/routes/api", "name: x\nmatch: {}\n"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *e = sl__b64_enc(cases[i], strlen(cases[i]));
        size_t n = 99;
        char *d = sl__b64_dec(e, &n);
        CHECK_STR(d, cases[i]);
        CHECK_INT(n, strlen(cases[i]));
        free(e);
        free(d);
    }
    size_t n;
    CHECK(sl__b64_dec("abc", &n) == NULL); /* not a multiple of 4 */
    char *d = sl__b64_dec("L3NsdWljZS9yb3V0ZXMvYQ==", &n);
    CHECK_STR(d, "/sluice/routes/a");
    free(d);
}

static void test_json(void) {
    const char *t = "{\"result\":{\"header\":{\"revision\":\"42\"},\"canceled\":true,\"compact_revision\":\"7\","
                    "\"events\":[{\"type\":\"DELETE\",\"kv\":{\"key\":\"eA==\"}},{\"kv\":{\"key\":\"eQ==\"}}]}}";
    sl_jdoc_t d;
    CHECK(sl_json_parse(&d, t, strlen(t)));
    yaml_node_t *res = sl_json_get(&d, d.root, "result");
    CHECK_INT(sl_json_int(sl_json_get(&d, sl_json_get(&d, res, "header"), "revision")), 42);
    CHECK_STR(sl_json_str(sl_json_get(&d, res, "canceled")), "true");
    CHECK_INT(sl_json_int(sl_json_get(&d, res, "compact_revision")), 7);
    yaml_node_t *evs = sl_json_get(&d, res, "events");
    CHECK_INT(sl_json_len(evs), 2);
    CHECK_STR(sl_json_str(sl_json_get(&d, sl_json_at(&d, evs, 0), "type")), "DELETE");
    CHECK(sl_json_get(&d, sl_json_at(&d, evs, 1), "type") == NULL); /* a PUT has no type */
    CHECK(sl_json_get(&d, res, "missing") == NULL);
    yaml_document_delete(&d.doc);

    sl_wbuf_t b = {0};
    sl__json_quote(&b, "a\"b\\c");
    CHECK_STR(b.p, "\"a\\\"b\\\\c\"");
    free(b.p);
}

/* The credentials etcd's authenticate call sends (and /status's last_error) are quoted by
 * sl__json_quote: a control character in them (a tab in a password, the newlines between
 * errors) is escaped, so that the body is JSON that etcd (here, the reader of its answers)
 * parses back to the same bytes. */
static void test_json_quote_control_characters(void) {
    const char *pass = "p\tw\x01" "d\nx\x7f";
    sl_wbuf_t b = {0};
    sl__eb_puts(&b, "{\"name\":");
    sl__json_quote(&b, "root");
    sl__eb_puts(&b, ",\"password\":");
    sl__json_quote(&b, pass);
    sl__eb_puts(&b, "}");
    CHECK_STR(b.p, "{\"name\":\"root\",\"password\":\"p\\tw\\u0001d\\nx\\u007f\"}");
    sl_jdoc_t d;
    CHECK(sl_json_parse(&d, b.p, b.len));
    if (d.root) {
        CHECK_STR(sl_json_str(sl_json_get(&d, d.root, "password")), pass);
        yaml_document_delete(&d.doc);
    }
    free(b.p);
}

static void test_kvset(void) {
    sl_ekvset_t s = {0};
    const char *keys[] = {"routes/b", "routes/a", "upstreams/u", "global", "routes/c"};
    for (size_t i = 0; i < 5; i++) CHECK(sl__kv_put(&s, keys[i], strdup(keys[i]), strlen(keys[i])));
    CHECK_INT(s.n, 5);
    for (size_t i = 1; i < s.n; i++) CHECK(strcmp(s.a[i - 1].key, s.a[i].key) < 0); /* sorted */
    uint64_t h = sl__kv_hash(&s);
    CHECK(sl__kv_put(&s, "routes/a", strdup("other"), 5));
    CHECK_INT(s.n, 5);
    CHECK_STR(sl__kv_get(&s, "routes/a")->val, "other");
    CHECK(sl__kv_hash(&s) != h);
    CHECK(sl__kv_put(&s, "routes/a", strdup("routes/a"), 8));
    CHECK(sl__kv_hash(&s) == h); /* the content, not the history */
    sl__kv_del(&s, "routes/b");
    sl__kv_del(&s, "routes/zzz");
    CHECK_INT(s.n, 4);
    CHECK(sl__kv_get(&s, "routes/b") == NULL);
    sl__kv_clear(&s);
    CHECK_INT(s.n, 0);
}

static void test_range_and_snapshot(void) {
    /* keys outside PREFIX/ (a neighbour prefix, the prefix itself) are not ours */
    const char *t = "{\"header\":{\"revision\":\"9\"},\"kvs\":["
                    "{\"key\":\"L3NsdWljZS9yb3V0ZXMvYQ==\",\"value\":\"bmFtZTogYQ==\"},"   /* /sluice/routes/a */
                    "{\"key\":\"L3NsdWljZTIveA==\",\"value\":\"eA==\"},"                   /* /sluice2/x */
                    "{\"key\":\"L3NsdWljZS9fcHVzaA==\"}]}";                                /* /sluice/_push, empty */
    sl_ekvset_t s = {0};
    long long rev = 0;
    CHECK(sl__kv_from_range(&s, &rev, "/sluice", t, strlen(t)));
    CHECK_INT(rev, 9);
    CHECK_INT(s.n, 2);
    CHECK_STR(sl__kv_get(&s, "routes/a")->val, "name: a");
    CHECK_STR(sl__kv_get(&s, "_push")->val, "");
    sl_wbuf_t b = {0};
    sl__kv_to_json(&s, "/sluice", rev, &b);
    sl_ekvset_t back = {0};
    long long rev2 = 0;
    CHECK(sl__kv_from_range(&back, &rev2, "/sluice", b.p, b.len)); /* a snapshot reads like a range */
    CHECK_INT(rev2, 9);
    CHECK(sl__kv_hash(&back) == sl__kv_hash(&s));
    free(b.p);
    sl__kv_clear(&s);
    sl__kv_clear(&back);

    sl_wbuf_t r = {0};
    sl__etcd_range_body("/s", true, &r);
    CHECK_STR(r.p, "{\"key\":\"L3Mv\",\"range_end\":\"L3Mw\",\"count_only\":true}"); /* "/s/" .. "/s0" */
    free(r.p);
}

static void test_put_item(void) {
    sl_wbuf_t b = {0};
    CHECK_INT(sl__etcd_put_item(&b, "name: a\nmatch: {}\n\n", 19, 4), 2);
    CHECK_INT(sl__etcd_put_item(&b, "{\"name\":\"b\"}", 12, 4), 1);
    CHECK_INT(sl__etcd_put_item(&b, "", 0, 4), 1);
    CHECK_STR(b.p, "  - name: a\n    match: {}\n  - {\"name\":\"b\"}\n  - {}\n");
    free(b.p);
}

/* A value written as a YAML document of its own (directive, "---", "...", even a second
 * document after it) still makes one item, line for line, meaning what it meant alone. */
static void test_put_item_document_markers(void) {
    sl_wbuf_t b = {0};
    SL_WBUF_LIT(&b, "routes:\n");
    const char *v = "%YAML 1.1\n# c\n---\nname: a\nmatch: {}\n...\n---\nname: b\n";
    CHECK_INT(sl__etcd_put_item(&b, v, strlen(v), 4), 8);
    const char *w = "--- {\"name\": \"c\"}\r\n";
    CHECK_INT(sl__etcd_put_item(&b, w, strlen(w), 4), 1);
    CHECK_STR(b.p, "routes:\n  - #YAML 1.1\n    # c\n       \n    name: a\n    match: {}\n    #...\n    #---\n"
                   "    #name: b\n  -     {\"name\": \"c\"}\n");
    sl_jdoc_t d;
    CHECK(sl_json_parse(&d, b.p, b.len));
    yaml_node_t *list = sl_json_get(&d, d.root, "routes");
    CHECK_INT(sl_json_len(list), 2);
    CHECK_STR(sl_json_str(sl_json_get(&d, sl_json_at(&d, list, 0), "name")), "a");
    CHECK_STR(sl_json_str(sl_json_get(&d, sl_json_at(&d, list, 1), "name")), "c");
    yaml_document_delete(&d.doc);
    free(b.p);
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"base64", test_base64},
        {"json", test_json},
        {"json_quote_control_characters", test_json_quote_control_characters},
        {"kvset", test_kvset},
        {"range_and_snapshot", test_range_and_snapshot},
        {"put_item", test_put_item},
        {"put_item_document_markers", test_put_item_document_markers},
    };
    return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}
