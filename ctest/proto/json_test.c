/* json_test.c — unit tests for core/proto/json.c: sl_json_valid takes RFC 8259 texts and
 * refuses what libyaml alone reads as JSON (trailing text, a second value or document,
 * YAML quoting, bare words, tags, anchors), which sl_json_parse takes.
 *
 *   json_test [name-substring]
 */
#include "proto/json.h"

#include <string.h>

#include "check.h"
#include "base/common.h"

static bool valid(const char *s) { return sl_json_valid(s, strlen(s)); }

static void test_valid(void) {
    static const char *const ok[] = {
        "{}", "[]", " {\"a\":1} \n", "{\"address\":\"127.0.0.1:9\",\"ttl\":\"10s\",\"weight\":1}",
        "[1,-0,0.5,-1.25e+3,2E-2,true,false,null,\"\"]", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\"",
        "{\"a\":{\"b\":[{\"c\":[]}]}}", "\"caf\xc3\xa9\"", "0", "\t\r\n[ ]\t",
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(ok); i++) {
        CHECK(valid(ok[i]));
        if (!valid(ok[i])) fprintf(stderr, "    refused: %s\n", ok[i]);
    }
}

static void test_invalid(void) {
    static const char *const bad[] = {
        "", " ", "{\"a\":1} x", "{\"a\":1}{\"b\":2}", "{\"a\":1} ]", "{\"a\":1}\n---\n{\"b\":2}",
        "{'a':1}", "{\"a\":10s}", "{a:1}", "{\"a\":1,}", "[1,]", "[,1]", "{\"a\" 1}", "{\"a\":}",
        "{\"a\":1} # c", "!!map {\"a\":1}", "&x {\"a\":1}", "{\"a\":*x}", "01", "1.", ".5", "+1",
        "1e", "0x1", "-", "NaN", "Infinity", "tru", "nul", "\"a", "\"\\x\"", "\"\\u12\"",
        "\"tab\there\"", "{\"a\":1", "[", "}", "\"\\", "{\"a\":1}\x01",
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        CHECK(!valid(bad[i]));
        if (valid(bad[i])) fprintf(stderr, "    taken: %s\n", bad[i]);
    }
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    CHECK(!sl_json_valid(deep, sizeof deep)); /* nesting deeper than 64 */
    CHECK(sl_json_valid(deep + 40, 120));     /* 60 deep */
}

static void test_parse(void) {
    sl_jdoc_t d;
    const char *s = "{\"address\":\"127.0.0.1:9\",\"ttl\":\"10s\"}";
    CHECK(sl_json_parse(&d, s, strlen(s)));
    CHECK_STR(sl_json_str(sl_json_get(&d, d.root, "ttl")), "10s");
    yaml_document_delete(&d.doc);
    s = "routes: [ { name: a } ]\n"; /* sluice push reads its config file with it */
    CHECK(sl_json_parse(&d, s, strlen(s)));
    yaml_document_delete(&d.doc);
}

static const check_test_t tests[] = {
    {"valid", test_valid},
    {"invalid", test_invalid},
    {"parse", test_parse},
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
