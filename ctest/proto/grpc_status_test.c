/* grpc_status_test.c — unit tests for core/proto/grpc_status.c: the gRPC content types, the
 * HTTP-to-gRPC status table, grpc-status parsing and grpc-message percent-encoding.
 *
 * Run: grpc_status_test [substring]
 */
#include "proto/grpc_status.h"

#include <string.h>

#include "check.h"

static sl_str_t S(const char *s) { return (sl_str_t){s, strlen(s)}; }

static void test_ctype(void) {
    CHECK(sl_grpc_is_ctype(S("application/grpc")));
    CHECK(sl_grpc_is_ctype(S("application/grpc+proto")));
    CHECK(sl_grpc_is_ctype(S("Application/GRPC-Web")));
    CHECK(sl_grpc_is_ctype(S("application/grpc-web-text+proto")));
    CHECK(sl_grpc_is_ctype(S("application/grpc; charset=x")));
    CHECK(!sl_grpc_is_ctype(S("application/grpcx")));
    CHECK(!sl_grpc_is_ctype(S("application/json")));
    CHECK(!sl_grpc_is_ctype(S("application/grp")));
    CHECK(!sl_grpc_is_ctype(S("")));
}

static void test_http_table(void) {
    CHECK_INT(sl_grpc_code_of_http(400), 13);
    CHECK_INT(sl_grpc_code_of_http(401), 16);
    CHECK_INT(sl_grpc_code_of_http(403), 7);
    CHECK_INT(sl_grpc_code_of_http(404), 12);
    CHECK_INT(sl_grpc_code_of_http(429), 14);
    CHECK_INT(sl_grpc_code_of_http(502), 14);
    CHECK_INT(sl_grpc_code_of_http(503), 14);
    CHECK_INT(sl_grpc_code_of_http(504), 14);
    CHECK_INT(sl_grpc_code_of_http(500), 2);
    CHECK_INT(sl_grpc_code_of_http(413), 2);
    CHECK_INT(sl_grpc_code_of_http(302), 2);
}

static void test_parse(void) {
    CHECK_INT(sl_grpc_code_parse(S("0")), 0);
    CHECK_INT(sl_grpc_code_parse(S("16")), 16);
    CHECK_INT(sl_grpc_code_parse(S("17")), -1);
    CHECK_INT(sl_grpc_code_parse(S("")), -1);
    CHECK_INT(sl_grpc_code_parse(S("1a")), -1);
    CHECK_INT(sl_grpc_code_parse(S("100")), -1);
    CHECK_INT(sl_grpc_code_parse(S("-1")), -1);
    CHECK_STR(sl_grpc_code_name(4), "DEADLINE_EXCEEDED");
    CHECK_STR(sl_grpc_code_name(16), "UNAUTHENTICATED");
    CHECK_STR(sl_grpc_code_name(17), "");
}

static void test_message(void) {
    char out[16];
    size_t n = sl_grpc_message_encode(S("a b%c\n\xc3\xa9"), out, sizeof out);
    CHECK_INT(n, 16);
    CHECK(memcmp(out, "a b%25c%0A%C3%A9", 16) == 0);
    /* an escape that does not fit is left out whole */
    n = sl_grpc_message_encode(S("ab\n"), out, 4);
    CHECK_INT(n, 2);
    CHECK(memcmp(out, "ab", 2) == 0);
    n = sl_grpc_message_encode(S("{\"e\":\"x\"}"), out, sizeof out);
    CHECK_INT(n, 9);
}

static const check_test_t tests[] = {
    {"ctype", test_ctype}, {"http_table", test_http_table}, {"parse", test_parse}, {"message", test_message}};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
