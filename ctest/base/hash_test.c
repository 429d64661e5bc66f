/* hash_test.c — unit tests for core/base/hash.h: FNV-1a's published values and its
 * continuation, and sl_hash64's values pinned (seed 0 is the consistent-hash ring's: a
 * changed value moves keys to other targets) and equal for equal bytes wherever they sit.
 *
 *   hash_test [name-substring]
 */
#include "base/hash.h"

#include <stdlib.h>

#include "base/common.h"
#include "check.h"

static void test_fnv1a64(void) {
    CHECK(sl_fnv1a64(SL_FNV64_INIT, "", 0) == 0xcbf29ce484222325ull);
    CHECK(sl_fnv1a64(SL_FNV64_INIT, "a", 1) == 0xaf63dc4c8601ec8cull);
    CHECK(sl_fnv1a64(SL_FNV64_INIT, "foobar", 6) == 0x85944171f73967e8ull);
    /* incremental: pieces give the whole's hash */
    CHECK(sl_fnv1a64(sl_fnv1a64(SL_FNV64_INIT, "foo", 3), "bar", 3) == 0x85944171f73967e8ull);
}

/* The values the consistent-hash balancer had before its hash moved to base/ (the ring
 * maps these keys to the same targets as before). */
static void test_hash64_pinned(void) {
    static const struct {
        const char *key;
        uint64_t h;
    } pins[] = {
        {"", 0xe220a8397b1dcdafull},
        {"a", 0x134268759688c202ull},
        {"user-42", 0x811d9a0dc0e4ccd5ull},
        {"10.0.0.1:8080", 0x9ef819b803e3db35ull},
        {"/api/v1/orders?id=12345", 0x85ea1366516306bdull},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(pins); i++) {
        uint64_t h = sl_hash64(pins[i].key, strlen(pins[i].key), 0);
        if (h != pins[i].h) fprintf(stderr, "key '%s': %016llx\n", pins[i].key, (unsigned long long)h);
        CHECK(h == pins[i].h);
    }
}

/* The tail read with overlapping word loads equals a byte-wise little-endian read, for
 * every length and alignment; and a seed changes the value. */
static void test_hash64_tail_and_seed(void) {
    unsigned char buf[64];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 37 + 11);
    for (size_t n = 0; n < 8; n++) {
        uint64_t want = 0;
        for (size_t i = 0; i < n; i++) want |= (uint64_t)buf[3 + i] << (8 * i);
        CHECK(sl__tail_le64(buf + 3, n) == want);
    }
    for (size_t n = 0; n <= 40; n++) {
        unsigned char *copy = malloc(n + 1);
        memcpy(copy + 1, buf + 5, n);
        CHECK(sl_hash64(buf + 5, n, 7) == sl_hash64(copy + 1, n, 7)); /* alignment */
        CHECK(sl_hash64(buf + 5, n, 7) != sl_hash64(buf + 5, n, 8));
        if (n) CHECK(sl_hash64(buf + 5, n, 0) != sl_hash64(buf + 5, n - 1, 0));
        free(copy);
    }
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"fnv1a64", test_fnv1a64},
        {"hash64_pinned", test_hash64_pinned},
        {"hash64_tail_and_seed", test_hash64_tail_and_seed},
    };
    return check_main(tests, SL_ARRAY_LEN(tests), argc, argv);
}
