/* shdict_test.c — unit tests for core/upstream/shdict.c (sluice.shared): a shard filled
 * with keys whose ttl ran out takes new keys again (the expired ones are swept), while a
 * shard full of live keys still refuses.
 *
 *   shdict_test [name-substring]
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/common.h"
#include "base/hash.h"
#include "check.h"
#include "sluice.h"

#define NSHARDS 64     /* shdict.c's */
#define SHARD_MAX 65536

static unsigned next_key;

/* The next key of the form PREFIX<n> that lands in `shard`. */
static size_t key_in(unsigned shard, const char *prefix, char *buf, size_t cap) {
    for (;;) {
        size_t n = (size_t)snprintf(buf, cap, "%s%u", prefix, next_key++);
        if (sl_hash64(buf, n, 0) % NSHARDS == shard) return n;
    }
}

static int set(const char *k, size_t kl, double ttl, const char **err) {
    *err = NULL;
    return sl_ffi_shdict_set(k, kl, 1, 1.0, NULL, 0, ttl, err);
}

static void pause_ms(long ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_expired_keys_make_room(void) {
    char k[64];
    const char *err;
    int fails = 0;
    for (int i = 0; i < SHARD_MAX; i++) fails += set(k, key_in(3, "exp", k, sizeof k), 0.001, &err) != SL_OK;
    CHECK_INT(fails, 0);
    pause_ms(20); /* every one of them expired */
    /* a new key of that shard: the expired ones are swept, not a full shard */
    int rc = set(k, key_in(3, "new", k, sizeof k), 0, &err);
    CHECK_INT(rc, SL_OK);
    CHECK(err == NULL);
    /* and the room is all there: another shard's worth of live keys fits, bar the one */
    fails = 0;
    for (int i = 0; i < SHARD_MAX - 1; i++) fails += set(k, key_in(3, "live", k, sizeof k), 0, &err) != SL_OK;
    CHECK_INT(fails, 0);
    /* full of live keys: refused, with the error */
    rc = set(k, key_in(3, "over", k, sizeof k), 0, &err);
    CHECK_INT(rc, SL_ERROR);
    CHECK_STR(err, "shared dictionary is full");
    /* other shards are not affected */
    rc = set(k, key_in(4, "other", k, sizeof k), 0, &err);
    CHECK_INT(rc, SL_OK);
}

static const check_test_t tests[] = {
    {"expired_keys_make_room", test_expired_keys_make_room},
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
