/* conn_limit.c — requests in flight per key in a sharded table (the contract is in
 * conn_limit.h).
 *
 * Why entries are freed at 0 instead of kept in an LRU like limiter.c's: a key's whole
 * state is its count, and a count of 0 is the same as no entry, so nothing is lost by
 * freeing it, and the table never holds more than the keys in flight (no eviction, which
 * here would forget slots that are still held). A slot is the entry itself: release finds
 * its shard from the stored hash, without hashing the key again.
 *
 * The table's mutex per shard is held for a chain walk and an increment; the route gauges
 * and counters are relaxed atomics beside it (read only by the metrics).
 */
#include "upstream/conn_limit.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/chain.h"
#include "base/common.h"
#include "base/hash.h"

#define SHARD_BITS 6
_Static_assert((1 << SHARD_BITS) == SL_CONN_LIMIT_SHARDS, "SHARD_BITS must match the shard count");
#define ROUTE_NAME_MAX 128

struct sl_conn_slot_s {
    struct sl_conn_slot_s *next; /* hash chain */
    uint64_t hash;
    uint32_t count; /* > 0 while the entry exists */
    uint16_t route;
    uint32_t klen;
    char key[];
};
typedef struct sl_conn_slot_s entry_t;

typedef struct {
    pthread_mutex_t mu;
    entry_t **buckets;
    size_t nbuckets; /* a power of two; 0 until the shard's first key */
    size_t n;
} __attribute__((aligned(64))) shard_t;

typedef struct {
    char name[ROUTE_NAME_MAX];
    _Atomic int64_t in_flight;
    _Atomic uint64_t results[SL_CONN_RESULTS];
} route_t;

static shard_t shards[SL_CONN_LIMIT_SHARDS];
static _Atomic size_t nkeys;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint64_t seed;

static route_t routes[SL_CONN_LIMIT_ROUTES];
static _Atomic int nroutes;
static pthread_mutex_t routes_mu = PTHREAD_MUTEX_INITIALIZER;

static void init_once(void) {
    for (int i = 0; i < SL_CONN_LIMIT_SHARDS; i++) pthread_mutex_init(&shards[i].mu, NULL);
    seed = sl_rand64();
}

static inline shard_t *shard_of(uint64_t hash) { return &shards[hash >> (64 - SHARD_BITS)]; }

int sl_conn_limit_route(const char *name, size_t len) {
    if (len >= ROUTE_NAME_MAX) len = ROUTE_NAME_MAX - 1;
    pthread_mutex_lock(&routes_mu);
    int n = atomic_load(&nroutes), found = -1;
    for (int i = 0; i < n && found < 0; i++)
        if (strlen(routes[i].name) == len && memcmp(routes[i].name, name, len) == 0) found = i;
    if (found < 0 && n < SL_CONN_LIMIT_ROUTES - 1) {
        memcpy(routes[n].name, name, len);
        routes[n].name[len] = 0;
        atomic_store(&nroutes, n + 1);
        found = n;
    }
    if (found < 0) { /* the last row is "other", for every name past the table */
        found = SL_CONN_LIMIT_ROUTES - 1;
        if (!routes[found].name[0]) memcpy(routes[found].name, "other", 6);
        if (n < SL_CONN_LIMIT_ROUTES) atomic_store(&nroutes, SL_CONN_LIMIT_ROUTES);
    }
    pthread_mutex_unlock(&routes_mu);
    return found;
}

static void count_result(int route, int result) {
    atomic_fetch_add_explicit(&routes[route].results[result], 1, memory_order_relaxed);
}

/* Doubles the chain heads (load factor 1). On failure the chains just get longer. */
static void grow(shard_t *s) {
    _Static_assert(offsetof(entry_t, next) == 0, "the chain link comes first (base/chain.h)");
    sl_chain_grow(&s->buckets, &s->nbuckets, offsetof(entry_t, hash));
}

static entry_t *find(shard_t *s, uint64_t hash, const char *key, size_t len) {
    if (!s->nbuckets) return NULL;
    for (entry_t *e = s->buckets[hash & (s->nbuckets - 1)]; e; e = e->next)
        if (e->hash == hash && e->klen == len && memcmp(e->key, key, len) == 0) return e;
    return NULL;
}

int sl_conn_limit_acquire(int route, const char *key, size_t len, uint32_t max, uint32_t burst,
                          sl_conn_slot_t **slot, uint32_t *in_flight, const char **err) {
    *slot = NULL;
    if (route < 0 || route >= atomic_load(&nroutes) || max < 1 || (!key && len) || len > UINT32_MAX ||
        (uint64_t)max + burst > UINT32_MAX) {
        if (err) *err = "limit-conn: bad route, key, max or burst";
        return SL_ERROR;
    }
    pthread_once(&once, init_once);
    if (!key) key = "";
    uint64_t hash = sl_hash64(key, len, seed);
    shard_t *s = shard_of(hash);
    pthread_mutex_lock(&s->mu);
    entry_t *e = find(s, hash, key, len);
    uint32_t now = e ? e->count : 0;
    int res;
    if (now >= max + burst) {
        res = SL_CONN_REJECTED;
    } else {
        if (!e) {
            /* fetch_add then check: racing threads may pass the bound by a few, never grow
             * without one */
            if (atomic_fetch_add(&nkeys, 1) >= SL_CONN_LIMIT_MAX_KEYS ||
                (s->n >= s->nbuckets && (grow(s), !s->nbuckets)) ||
                !(e = malloc(sizeof *e + (len ? len : 1)))) {
                atomic_fetch_sub(&nkeys, 1);
                pthread_mutex_unlock(&s->mu);
                count_result(route, SL_CONN_FAILOPEN);
                if (in_flight) *in_flight = 0;
                return SL_CONN_FAILOPEN;
            }
            e->hash = hash;
            e->count = 0;
            e->route = (uint16_t)route;
            e->klen = (uint32_t)len;
            memcpy(e->key, key, len);
            e->next = s->buckets[hash & (s->nbuckets - 1)];
            s->buckets[hash & (s->nbuckets - 1)] = e;
            s->n++;
        }
        res = now < max ? SL_CONN_ADMITTED : SL_CONN_BURST;
        now = ++e->count;
        *slot = e;
    }
    pthread_mutex_unlock(&s->mu);
    if (*slot) atomic_fetch_add_explicit(&routes[(*slot)->route].in_flight, 1, memory_order_relaxed);
    count_result(route, res);
    if (in_flight) *in_flight = now;
    return res;
}

void sl_conn_limit_release(sl_conn_slot_t *e) {
    if (!e) return;
    shard_t *s = shard_of(e->hash);
    int route = e->route;
    pthread_mutex_lock(&s->mu);
    /* a release without its acquire would corrupt a count that other requests rely on */
    assert(e->count > 0 && "a limit-conn slot released twice");
    if (--e->count == 0) {
        entry_t **pp = &s->buckets[e->hash & (s->nbuckets - 1)];
        while (*pp != e) pp = &(*pp)->next;
        *pp = e->next;
        s->n--;
        free(e);
        atomic_fetch_sub(&nkeys, 1);
    }
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_sub_explicit(&routes[route].in_flight, 1, memory_order_relaxed);
}

size_t sl_conn_limit_keys(void) { return atomic_load(&nkeys); }

int64_t sl_conn_limit_in_flight(int route) {
    int n = atomic_load(&nroutes);
    int64_t v = 0;
    for (int i = 0; i < n; i++)
        if (route < 0 || route == i) v += atomic_load_explicit(&routes[i].in_flight, memory_order_relaxed);
    return v;
}

uint32_t sl_conn_limit_count(const char *key, size_t len) {
    pthread_once(&once, init_once);
    uint64_t hash = sl_hash64(key, len, seed);
    shard_t *s = shard_of(hash);
    pthread_mutex_lock(&s->mu);
    entry_t *e = find(s, hash, key, len);
    uint32_t c = e ? e->count : 0;
    pthread_mutex_unlock(&s->mu);
    return c;
}

char *sl_conn_limit_metrics(void) {
    static const char *const names[SL_CONN_RESULTS] = {"admitted", "burst", "rejected", "failopen"};
    int n = atomic_load(&nroutes);
    if (!n) return NULL;
    size_t cap = 512 + (size_t)n * (ROUTE_NAME_MAX + 64) * (SL_CONN_RESULTS + 1), len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
#define PUT(...) len += (size_t)snprintf(out + len, cap - len, __VA_ARGS__)
    PUT("# HELP sluice_limit_conn_in_flight Requests holding a limit-conn slot now, by route.\n"
        "# TYPE sluice_limit_conn_in_flight gauge\n");
    for (int i = 0; i < n; i++)
        if (routes[i].name[0])
            PUT("sluice_limit_conn_in_flight{route=\"%s\"} %lld\n", routes[i].name,
                (long long)atomic_load_explicit(&routes[i].in_flight, memory_order_relaxed));
    PUT("# HELP sluice_limit_conn_total limit-conn decisions by route: admitted (under max), burst "
        "(over max, within burst), rejected, failopen (the table of keys was full).\n"
        "# TYPE sluice_limit_conn_total counter\n");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < SL_CONN_RESULTS; k++) {
            uint64_t v = atomic_load_explicit(&routes[i].results[k], memory_order_relaxed);
            if (v && routes[i].name[0])
                PUT("sluice_limit_conn_total{route=\"%s\",result=\"%s\"} %llu\n", routes[i].name, names[k],
                    (unsigned long long)v);
        }
#undef PUT
    return out;
}
