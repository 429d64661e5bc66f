/* cache_test.c — unit tests for core/upstream/cache.c on an injected clock: HIT/MISS/
 * EXPIRED and stale windows, LRU eviction under the size bound (never above it), entries
 * larger than the store refused, held entries surviving eviction and purge, Vary nodes,
 * purge by key (with variants), route and all, the lock (WAIT, pass marks, expiry, only
 * the owner releases it), the doorbells (rung once per released lock that had a waiter,
 * never after removal), and the concurrency tests: 32 threads released at once on one
 * missing key (exactly one takes the lock, the rest WAIT), 500 trials; and 16 threads
 * hammering lookups, inserts, releases and purges of a few keys while every HIT's body is
 * checked against its key (invariant violations counted, 0 expected).
 *
 *   cache_test [name-substring]
 */
#include "upstream/cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sluice.h"
#include "stampede.h"

#define MS UINT64_C(1000000)
#define SEC (1000 * MS)
#define T0 (1000 * SEC)

static sl_str_t S(const char *s) { return (sl_str_t){s, strlen(s)}; }

/* request headers for Vary: "name=value" pairs in a NULL-ended array */
static sl_str_t hdr(void *ud, sl_str_t name) {
    for (const char **p = ud; p && *p; p++) {
        const char *eq = strchr(*p, '=');
        if ((size_t)(eq - *p) == name.len && strncasecmp(*p, name.p, name.len) == 0) return S(eq + 1);
    }
    return S("");
}

static int put_at(const char *key, const char *route, const char *vary, const char *body, uint64_t now,
                  uint64_t fresh, uint64_t stale, uint64_t token, const char **headers) {
    sl_cache_field_t f[] = {{SL_LIT("Content-Type"), SL_LIT("text/plain")}};
    sl_cache_put_t p = {.key = S(key), .route = S(route), .vary = S(vary ? vary : ""), .status = 200,
                        .fields = f, .nfields = 1, .body = S(body), .fresh_until = now + fresh,
                        .stale_until = now + fresh + stale, .stored_at = now};
    return sl_cache_insert(&p, hdr, (void *)headers, now, SEC, token);
}

static int look(const char *key, uint64_t now, uint64_t token, bool may_wait, sl_cache_entry_t **hit,
                sl_cache_entry_t **stale, bool *locked, const char **headers) {
    return sl_cache_lookup(S(key), hdr, (void *)headers, now, SEC, token, may_wait, hit, stale, locked);
}

static void reset(uint64_t size) {
    sl_cache_purge_all();
    sl_cache_set_size(size);
}

static void test_hit_miss_expired(void) {
    reset(1 << 20);
    sl_cache_entry_t *hit, *stale;
    bool locked;
    CHECK_INT(look("k", T0, 1, true, &hit, &stale, &locked, NULL), SL_CACHE_MISS);
    CHECK(locked && !hit && !stale);
    CHECK_INT(put_at("k", "r", NULL, "hello", T0, 10 * SEC, 5 * SEC, 1, NULL), SL_OK);
    CHECK_INT(look("k", T0 + SEC, 2, true, &hit, &stale, &locked, NULL), SL_CACHE_HIT);
    CHECK(hit && hit->body.len == 5 && memcmp(hit->body.p, "hello", 5) == 0 && hit->status == 200);
    CHECK(hit->nfields == 1 && SL_IEQ(hit->fields[0].name, "content-type"));
    sl_cache_release(hit);
    /* expired, within the stale window: EXPIRED with the stale entry, lock taken */
    CHECK_INT(look("k", T0 + 12 * SEC, 3, true, &hit, &stale, &locked, NULL), SL_CACHE_EXPIRED);
    CHECK(stale && locked && stale->body.len == 5);
    sl_cache_release(stale);
    sl_cache_unlock(S("k"), 3, T0 + 12 * SEC, 0);
    /* past the stale window: EXPIRED without one */
    CHECK_INT(look("k", T0 + 16 * SEC, 4, true, &hit, &stale, &locked, NULL), SL_CACHE_EXPIRED);
    CHECK(!stale && locked);
    sl_cache_unlock(S("k"), 4, T0 + 16 * SEC, 0);
}

static void test_lru_size_bound(void) {
    char body[1000];
    memset(body, 'b', sizeof body - 1);
    body[sizeof body - 1] = 0;
    reset(20000);
    uint64_t worst = 0;
    char key[32];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "key%d", i);
        CHECK_INT(put_at(key, "r", NULL, body, T0, 60 * SEC, 0, 0, NULL), SL_OK);
        if (sl_cache_bytes() > worst) worst = sl_cache_bytes();
        /* keep key0 recent: it must survive */
        sl_cache_entry_t *hit, *stale;
        bool locked;
        if (look("key0", T0, 9, false, &hit, &stale, &locked, NULL) == SL_CACHE_HIT) sl_cache_release(hit);
    }
    CHECK(worst <= 20000);
    CHECK(sl_cache_count() >= 10 && sl_cache_count() < 20);
    sl_cache_entry_t *hit, *stale;
    bool locked;
    CHECK_INT(look("key0", T0, 9, false, &hit, &stale, &locked, NULL), SL_CACHE_HIT);
    sl_cache_release(hit);
    CHECK_INT(look("key99", T0, 9, false, &hit, &stale, &locked, NULL), SL_CACHE_HIT);
    sl_cache_release(hit);
    CHECK_INT(look("key1", T0, 9, false, &hit, &stale, &locked, NULL), SL_CACHE_MISS);
    sl_cache_unlock(S("key1"), 9, T0, 0);
    /* an entry larger than the whole store is refused; the store is unchanged */
    char *huge = malloc(30000);
    memset(huge, 'h', 29999);
    huge[29999] = 0;
    uint64_t before = sl_cache_bytes();
    CHECK_INT(put_at("huge", "r", NULL, huge, T0, 60 * SEC, 0, 0, NULL), SL_DECLINED);
    CHECK_INT(sl_cache_bytes(), before);
    free(huge);
    /* shrinking evicts down to the new size */
    sl_cache_set_size(5000);
    CHECK(sl_cache_bytes() <= 5000);
    sl_cache_set_size(1 << 20);
}

static void test_held_survives(void) {
    reset(1 << 20);
    CHECK_INT(put_at("h", "r", NULL, "held body", T0, 60 * SEC, 0, 0, NULL), SL_OK);
    sl_cache_entry_t *hit, *stale;
    bool locked;
    CHECK_INT(look("h", T0, 1, false, &hit, &stale, &locked, NULL), SL_CACHE_HIT);
    CHECK_INT(sl_cache_purge_key(S("h")), 1);
    CHECK_INT(sl_cache_count(), 0);
    CHECK_INT(sl_cache_bytes(), 0);
    /* the holder still reads it (ASan would flag a use after free) */
    CHECK(hit->body.len == 9 && memcmp(hit->body.p, "held body", 9) == 0);
    sl_cache_release(hit);
    /* replaced while held: the old one lives on for its holder */
    CHECK_INT(put_at("h", "r", NULL, "one", T0, 60 * SEC, 0, 0, NULL), SL_OK);
    CHECK_INT(look("h", T0, 1, false, &hit, &stale, &locked, NULL), SL_CACHE_HIT);
    CHECK_INT(put_at("h", "r", NULL, "two", T0, 60 * SEC, 0, 0, NULL), SL_OK);
    CHECK(memcmp(hit->body.p, "one", 3) == 0);
    sl_cache_release(hit);
    CHECK_INT(look("h", T0, 1, false, &hit, &stale, &locked, NULL), SL_CACHE_HIT);
    CHECK(memcmp(hit->body.p, "two", 3) == 0);
    sl_cache_release(hit);
}

static void test_vary(void) {
    reset(1 << 20);
    const char *en[] = {"Accept-Language=en", NULL}, *fr[] = {"accept-language=fr", NULL};
    CHECK_INT(put_at("v", "r", "Accept-Language", "english", T0, 60 * SEC, 0, 0, en), SL_OK);
    CHECK_INT(put_at("v", "r", "Accept-Language", "french", T0, 60 * SEC, 0, 0, fr), SL_OK);
    CHECK_INT(sl_cache_count(), 3); /* the node and two variants */
    sl_cache_entry_t *hit, *stale;
    bool locked;
    CHECK_INT(look("v", T0, 1, false, &hit, &stale, &locked, en), SL_CACHE_HIT);
    CHECK(hit && memcmp(hit->body.p, "english", 7) == 0);
    sl_cache_release(hit);
    CHECK_INT(look("v", T0, 1, false, &hit, &stale, &locked, fr), SL_CACHE_HIT);
    CHECK(hit && memcmp(hit->body.p, "french", 6) == 0);
    sl_cache_release(hit);
    CHECK_INT(look("v", T0, 1, false, &hit, &stale, &locked, NULL), SL_CACHE_MISS);
    sl_cache_unlock(S("v"), 1, T0, 0);
    char buf[64];
    size_t n = sl_cache_vary_key(S("v"), S("Accept-Language, X-A"), hdr, (void *)en, buf, sizeof buf);
    CHECK(n == strlen("v\naccept-language:en\nx-a:") && memcmp(buf, "v\naccept-language:en\nx-a:", n) == 0);
    CHECK_INT(sl_cache_vary_key(S("v"), S("Accept-Language"), hdr, (void *)en, buf, 8), 0);
    /* a response without Vary replaces the node and its variants stop being reachable */
    CHECK_INT(put_at("v", "r", NULL, "plain", T0, 60 * SEC, 0, 0, NULL), SL_OK);
    CHECK_INT(look("v", T0, 1, false, &hit, &stale, &locked, en), SL_CACHE_HIT);
    CHECK(hit && memcmp(hit->body.p, "plain", 5) == 0);
    sl_cache_release(hit);
}

static void test_purge(void) {
    reset(1 << 20);
    const char *en[] = {"accept-language=en", NULL};
    put_at("GET a/x", "ra", NULL, "1", T0, 60 * SEC, 0, 0, NULL);
    put_at("GET a/xy", "ra", NULL, "2", T0, 60 * SEC, 0, 0, NULL);
    put_at("GET a/v", "rb", "accept-language", "3", T0, 60 * SEC, 0, 0, en);
    put_at("GET b/", "rb", NULL, "4", T0, 60 * SEC, 0, 0, NULL);
    CHECK_INT(sl_cache_purge_key(S("GET a/x")), 1); /* not GET a/xy: a key is not a prefix */
    CHECK_INT(sl_cache_purge_key(S("GET a/v")), 2); /* the node and its variant */
    CHECK_INT(sl_cache_purge_route(S("ra")), 1);
    CHECK_INT(sl_cache_count(), 1);
    CHECK_INT(sl_cache_purge_all(), 1);
    CHECK_INT(sl_cache_bytes(), 0);
}

static void test_locks(void) {
    reset(1 << 20);
    sl_cache_entry_t *hit, *stale;
    bool locked;
    CHECK_INT(look("l", T0, 1, true, &hit, &stale, &locked, NULL), SL_CACHE_MISS);
    CHECK(locked);
    CHECK_INT(look("l", T0, 2, true, &hit, &stale, &locked, NULL), SL_CACHE_WAIT);
    CHECK_INT(look("l", T0, 2, false, &hit, &stale, &locked, NULL), SL_CACHE_MISS); /* gave up waiting */
    CHECK(!locked);
    sl_cache_unlock(S("l"), 2, T0, SEC); /* not the owner: nothing changes */
    CHECK_INT(look("l", T0, 3, true, &hit, &stale, &locked, NULL), SL_CACHE_WAIT);
    /* the owner releases with a pass mark: no one waits or locks for lock_ns */
    sl_cache_unlock(S("l"), 1, T0, SEC);
    CHECK_INT(look("l", T0 + 10 * MS, 3, true, &hit, &stale, &locked, NULL), SL_CACHE_MISS);
    CHECK(!locked);
    /* after it, the next miss takes the lock again */
    CHECK_INT(look("l", T0 + 2 * SEC, 4, true, &hit, &stale, &locked, NULL), SL_CACHE_MISS);
    CHECK(locked);
    /* a lock not released in lock_ns expires: the next miss takes it */
    CHECK_INT(look("l", T0 + 4 * SEC, 5, true, &hit, &stale, &locked, NULL), SL_CACHE_MISS);
    CHECK(locked);
    /* the insert by the owner releases it: waiters then HIT */
    CHECK_INT(put_at("l", "r", NULL, "filled", T0 + 4 * SEC, 60 * SEC, 0, 5, NULL), SL_OK);
    CHECK_INT(look("l", T0 + 4 * SEC, 6, true, &hit, &stale, &locked, NULL), SL_CACHE_HIT);
    sl_cache_release(hit);
    /* an abandoned fetch (unlock without pass) lets the next miss lock at once */
    sl_cache_purge_all();
    CHECK_INT(look("l", T0 + 5 * SEC, 7, true, &hit, &stale, &locked, NULL), SL_CACHE_MISS);
    sl_cache_unlock(S("l"), 7, T0 + 5 * SEC, 0);
    CHECK_INT(look("l", T0 + 5 * SEC, 8, true, &hit, &stale, &locked, NULL), SL_CACHE_MISS);
    CHECK(locked);
    sl_cache_unlock(S("l"), 8, T0 + 5 * SEC, 0);
}

static int rings;
static void count_ring(void *ud) { (void)ud, rings++; }

static void test_bells(void) {
    reset(1 << 20);
    int tag;
    CHECK_INT(sl_cache_bell_add(count_ring, &tag), SL_OK);
    sl_cache_entry_t *hit, *stale;
    bool locked;
    rings = 0;
    /* a lock nobody waited for rings nothing when released */
    look("b1", T0, 1, true, &hit, &stale, &locked, NULL);
    CHECK_INT(put_at("b1", "r", NULL, "x", T0, 60 * SEC, 0, 1, NULL), SL_OK);
    CHECK_INT(rings, 0);
    /* one that had a waiter rings once, whether stored or given up */
    look("b2", T0, 2, true, &hit, &stale, &locked, NULL);
    CHECK_INT(look("b2", T0, 3, true, &hit, &stale, &locked, NULL), SL_CACHE_WAIT);
    CHECK_INT(put_at("b2", "r", NULL, "x", T0, 60 * SEC, 0, 2, NULL), SL_OK);
    CHECK_INT(rings, 1);
    look("b3", T0, 4, true, &hit, &stale, &locked, NULL);
    CHECK_INT(look("b3", T0, 5, true, &hit, &stale, &locked, NULL), SL_CACHE_WAIT);
    sl_cache_unlock(S("b3"), 5, T0, SEC); /* not the owner: no release, no ring */
    CHECK_INT(rings, 1);
    sl_cache_unlock(S("b3"), 4, T0, SEC);
    CHECK_INT(rings, 2);
    /* removed: never rung again */
    sl_cache_bell_remove(&tag);
    look("b4", T0, 6, true, &hit, &stale, &locked, NULL);
    look("b4", T0, 7, true, &hit, &stale, &locked, NULL);
    sl_cache_unlock(S("b4"), 6, T0, 0);
    CHECK_INT(rings, 2);
}

/* ---- concurrency ---- */

#define NTH 32
static atomic_int st_locked, st_wait, st_other;

static void stampede_one(size_t i) {
    sl_cache_entry_t *hit, *stale;
    bool locked;
    int rc = look("stampede", T0, 1000 + i, true, &hit, &stale, &locked, NULL);
    if (rc == SL_CACHE_MISS && locked) atomic_fetch_add(&st_locked, 1);
    else if (rc == SL_CACHE_WAIT) atomic_fetch_add(&st_wait, 1);
    else atomic_fetch_add(&st_other, 1);
    if (hit) sl_cache_release(hit);
    if (stale) sl_cache_release(stale);
}

static void test_stampede(void) {
    reset(1 << 20);
    stampede_t s;
    stampede_start(&s, NTH, stampede_one);
    int violations = 0, trials = 500;
    for (int t = 0; t < trials; t++) {
        atomic_store(&st_locked, 0);
        atomic_store(&st_wait, 0);
        atomic_store(&st_other, 0);
        stampede_trial(&s);
        if (atomic_load(&st_locked) != 1 || atomic_load(&st_wait) != NTH - 1 || atomic_load(&st_other) != 0)
            violations++;
        /* release the lock for the next trial: whoever holds it, an expired lock time later */
        sl_cache_entry_t *hit, *stale;
        bool locked;
        look("stampede", T0 + 10 * SEC, 1, false, &hit, &stale, &locked, NULL);
        sl_cache_unlock(S("stampede"), 1, T0 + 10 * SEC, 0);
    }
    stampede_stop(&s);
    printf("stampede: %d threads on one missing key, %d trials: %d with other than 1 lock + %d WAIT\n", NTH,
           trials, violations, NTH - 1);
    CHECK_INT(violations, 0);
}

#define HAMMER_THREADS 16
#define HAMMER_OPS 20000
static atomic_int hammer_bad;

/* Each key's body is the key repeated: a HIT whose body is not its key's is a violation. */
static void *hammer(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    char key[16], body[512];
    for (int i = 0; i < HAMMER_OPS; i++) {
        int k = (int)(rand_r(&seed) % 8);
        snprintf(key, sizeof key, "hk%d", k);
        sl_cache_entry_t *hit, *stale;
        bool locked;
        uint64_t token = ((uint64_t)(uintptr_t)arg << 32) | (uint64_t)i;
        int op = (int)(rand_r(&seed) % 10);
        if (op < 6) {
            int rc = look(key, T0, token, false, &hit, &stale, &locked, NULL);
            if (rc == SL_CACHE_HIT) {
                size_t kl = strlen(key);
                bool ok = hit->body.len == 64 * kl;
                for (size_t j = 0; ok && j < hit->body.len; j += kl) ok = memcmp(hit->body.p + j, key, kl) == 0;
                if (!ok || hit->key.len != kl || memcmp(hit->key.p, key, kl) != 0) atomic_fetch_add(&hammer_bad, 1);
                sl_cache_release(hit);
            }
            if (stale) sl_cache_release(stale);
            if (locked) sl_cache_unlock(S(key), token, T0, 0);
        } else if (op < 9) {
            size_t kl = strlen(key);
            for (size_t j = 0; j < 64; j++) memcpy(body + j * kl, key, kl);
            body[64 * kl] = 0;
            put_at(key, "h", NULL, body, T0, 60 * SEC, 0, token, NULL);
        } else {
            sl_cache_purge_key(S(key));
        }
    }
    return NULL;
}

static void test_hammer(void) {
    reset(8 * 1024); /* small: evictions all the time */
    pthread_t th[HAMMER_THREADS];
    for (uintptr_t i = 0; i < HAMMER_THREADS; i++) pthread_create(&th[i], NULL, hammer, (void *)(i + 1));
    for (int i = 0; i < HAMMER_THREADS; i++) pthread_join(th[i], NULL);
    printf("hammer: %d threads x %d lookups/inserts/purges on 8 keys: %d wrong bodies, %llu bytes <= %d\n",
           HAMMER_THREADS, HAMMER_OPS, atomic_load(&hammer_bad), (unsigned long long)sl_cache_bytes(), 8 * 1024);
    CHECK_INT(atomic_load(&hammer_bad), 0);
    CHECK(sl_cache_bytes() <= 8 * 1024);
    sl_cache_purge_all();
    CHECK_INT(sl_cache_bytes(), 0);
    CHECK_INT(sl_cache_count(), 0);
}

int main(int argc, char **argv) {
    struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"hit_miss_expired", test_hit_miss_expired}, {"lru_size_bound", test_lru_size_bound},
        {"held_survives", test_held_survives},       {"vary", test_vary},
        {"purge", test_purge},                       {"locks", test_locks},
        {"bells", test_bells},
        {"stampede", test_stampede},                 {"hammer", test_hammer},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(tests); i++) {
        if (argc > 1 && !strstr(tests[i].name, argv[1])) continue;
        tests[i].fn();
    }
    sl_cache_purge_all();
    printf("cache_test: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
