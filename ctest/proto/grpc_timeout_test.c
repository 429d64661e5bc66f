/* grpc_timeout_test.c — unit tests for core/proto/grpc_timeout.c: every unit, rounding,
 * and the malformed values that are ignored.
 *
 * Run: grpc_timeout_test [substring]
 */
#include "proto/grpc_timeout.h"

#include <string.h>

#include "check.h"

static sl_str_t S(const char *s) { return (sl_str_t){s, strlen(s)}; }

static uint64_t ms_of(const char *s) {
    uint64_t ms = 12345;
    return sl_grpc_timeout_ms(S(s), &ms) ? ms : UINT64_MAX;
}

static void test_units(void) {
    CHECK_INT(ms_of("2H"), 7200000);
    CHECK_INT(ms_of("3M"), 180000);
    CHECK_INT(ms_of("1S"), 1000);
    CHECK_INT(ms_of("250m"), 250);
    CHECK_INT(ms_of("99999999m"), 99999999);
    CHECK_INT(ms_of("1500u"), 2);  /* rounded up */
    CHECK_INT(ms_of("1000u"), 1);
    CHECK_INT(ms_of("1n"), 1);     /* never 0: a deadline is never earlier than asked */
    CHECK_INT(ms_of("0m"), 0);
}

static void test_malformed(void) {
    CHECK_INT(ms_of(""), UINT64_MAX);
    CHECK_INT(ms_of("S"), UINT64_MAX);
    CHECK_INT(ms_of("10"), UINT64_MAX);       /* no unit */
    CHECK_INT(ms_of("10s"), UINT64_MAX);      /* units are case-sensitive: s is not S */
    CHECK_INT(ms_of("123456789m"), UINT64_MAX); /* nine digits */
    CHECK_INT(ms_of("-1S"), UINT64_MAX);
    CHECK_INT(ms_of("1 S"), UINT64_MAX);
}

static const check_test_t tests[] = {{"units", test_units}, {"malformed", test_malformed}};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
