/* limiter.c — the local store of sluice.limit: token buckets (GCRA) and sliding windows in
 * a sharded table with per-shard LRU eviction (the contract is in limiter.h).
 *
 * Why a mutex per shard and not a lock-free table: a take reads and writes several words
 * of one key's state (the TAT; or the window start and two counts) and moves the key in
 * its shard's LRU list, and eviction relinks entries; under a lock all of that is plain
 * code whose exactness the tests can pin down, and the lock is held for a hash-chain
 * walk and a few arithmetic operations. 64 shards keep two workers on different keys
 * from meeting; two workers on one key serialise on it, as they must on its state.
 * limiter_bench measures both cases.
 *
 * Everything the lock protects is computed before it (the key's hash, the periods in ns)
 * or after it (the result fields), from values copied out under it.
 */
#include "upstream/limiter.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/chain.h"
#include "base/common.h"
#include "base/hash.h"
#include "base/list.h"

#define SHARD_BITS 6
_Static_assert((1 << SHARD_BITS) == SL_LIMITER_SHARDS, "SHARD_BITS must match the shard count");

enum { KIND_BUCKET = 1, KIND_WINDOW = 2, KIND_DIGEST = 4 /* a long key's prefix and hash */ };

/* Entries hold keys in multiples of this: every key of up to KEY_STEP bytes (addresses,
 * ids, "route:address") fits every entry, so eviction can always reuse the victim. */
#define KEY_STEP 64
#define DIGEST_PREFIX (SL_LIMITER_KEY_MAX - 8)
#define NS_PER_S 1e9
/* Periods are capped at 2^62 ns (146 years): "never refills" in practice, and TAT and
 * window arithmetic on a monotonic clock below 2^63 cannot overflow. */
#define PERIOD_MAX ((double)(UINT64_C(1) << 62))
/* Window estimates are sums of products of doubles: an estimate that is exactly the limit
 * may come out a few ulps above it. */
#define EPS 1e-9

typedef struct entry_s {
    struct entry_s *next;          /* hash chain */
    sl_list_t lru;                 /* in the shard's LRU list */
    uint64_t hash;
    uint64_t t;       /* bucket: the TAT; window: when the current window began (ns) */
    double cur, prev; /* window: admitted in the current and in the previous window */
    uint16_t klen, kcap;
    uint8_t kind;
    char key[]; /* kcap bytes */
} entry_t;

typedef struct {
    pthread_mutex_t mu;
    entry_t **buckets;
    size_t nbuckets; /* a power of two; 0 until the shard's first key */
    size_t n;
    sl_list_t lru; /* most recently used first */
} __attribute__((aligned(64))) shard_t; /* a cache line of its own: no false sharing */

static shard_t shards[SL_LIMITER_SHARDS];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint64_t seed, digest_seed;
static _Atomic size_t max_keys = SL_LIMITER_MAX_KEYS;

/* Seeded per process: keys come from clients (addresses, header values), and a hash they
 * could predict would let them pile keys into one chain. */
static void init_once(void) {
    for (int i = 0; i < SL_LIMITER_SHARDS; i++) {
        pthread_mutex_init(&shards[i].mu, NULL);
        sl_list_init(&shards[i].lru);
    }
    seed = sl_rand64();
    digest_seed = sl_rand64();
}

/* A key as the table stores and compares it. */
typedef struct {
    const char *p;
    size_t len;
    uint64_t hash;
    uint8_t kind;
    char buf[SL_LIMITER_KEY_MAX]; /* a long key's prefix and hash */
} lim_key_t;

static void key_form(lim_key_t *k, const char *p, size_t len, uint8_t kind) {
    k->hash = sl_hash64(p, len, seed);
    k->kind = kind;
    if (SL_LIKELY(len <= SL_LIMITER_KEY_MAX)) {
        k->p = p, k->len = len;
        return;
    }
    uint64_t d = sl_hash64(p, len, digest_seed);
    memcpy(k->buf, p, DIGEST_PREFIX);
    memcpy(k->buf + DIGEST_PREFIX, &d, 8);
    k->p = k->buf, k->len = SL_LIMITER_KEY_MAX;
    k->kind |= KIND_DIGEST; /* never equal to a stored key of exactly these bytes */
}

static inline shard_t *shard_of(uint64_t hash) { return &shards[hash >> (64 - SHARD_BITS)]; }

static inline size_t shard_cap(void) {
    size_t m = atomic_load_explicit(&max_keys, memory_order_relaxed);
    return (m + SL_LIMITER_SHARDS - 1) / SL_LIMITER_SHARDS;
}

/* The entry of k, made the shard's most recently used; NULL when absent. Shard locked. */
static entry_t *find(shard_t *s, const lim_key_t *k) {
    if (!s->nbuckets) return NULL;
    for (entry_t *e = s->buckets[k->hash & (s->nbuckets - 1)]; e; e = e->next) {
        if (e->hash != k->hash || e->kind != k->kind || e->klen != k->len ||
            memcmp(e->key, k->p, k->len) != 0)
            continue;
        if (s->lru.next != &e->lru) {
            sl_list_remove(&e->lru);
            sl_list_push_front(&s->lru, &e->lru);
        }
        return e;
    }
    return NULL;
}

/* Unlinks the least recently used entry and hands it over. Shard locked, n > 0. */
static entry_t *evict_oldest(shard_t *s) {
    entry_t *e = SL_LIST_LAST(&s->lru, entry_t, lru), **pp = &s->buckets[e->hash & (s->nbuckets - 1)];
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
    sl_list_remove(&e->lru);
    s->n--;
    return e;
}

/* Doubles the chain heads (load factor 1). On failure the chains just get longer. */
static void grow(shard_t *s) {
    _Static_assert(offsetof(entry_t, next) == 0, "the chain link comes first (base/chain.h)");
    sl_chain_grow(&s->buckets, &s->nbuckets, offsetof(entry_t, hash));
}

/* A fresh state for k, its time set to t (the callers': a full bucket, empty windows),
 * evicting to stay within the shard's bound and reusing the victim's memory when the key
 * fits. NULL when out of memory. Shard locked. */
static entry_t *insert(shard_t *s, const lim_key_t *k, uint64_t t) {
    size_t cap = shard_cap();
    entry_t *e = NULL;
    while (s->n >= cap) {
        entry_t *old = evict_oldest(s);
        if (!e && old->kcap >= k->len)
            e = old;
        else
            free(old);
    }
    if (s->n >= s->nbuckets) grow(s);
    if (!s->nbuckets) {
        free(e);
        return NULL;
    }
    if (!e) {
        size_t kcap = k->len ? (k->len + KEY_STEP - 1) / KEY_STEP * KEY_STEP : KEY_STEP;
        if (!(e = malloc(sizeof *e + kcap))) return NULL;
        e->kcap = (uint16_t)kcap;
    }
    e->hash = k->hash;
    e->kind = k->kind;
    e->klen = (uint16_t)k->len;
    memcpy(e->key, k->p, k->len);
    e->t = t;
    e->cur = e->prev = 0;
    e->next = s->buckets[k->hash & (s->nbuckets - 1)];
    s->buckets[k->hash & (s->nbuckets - 1)] = e;
    sl_list_push_front(&s->lru, &e->lru);
    s->n++;
    return e;
}

static int fail(const char **err, const char *msg) {
    if (err) *err = msg;
    return SL_ERROR;
}

/* Locks the key's shard and returns its entry (found, or new with its time set to t), or
 * NULL (unlocked) when a new one can't be had. */
static entry_t *lock_entry(const char *key, size_t len, uint8_t kind, uint64_t t, shard_t **sp) {
    pthread_once(&once, init_once);
    lim_key_t k;
    key_form(&k, key ? key : "", len, kind);
    shard_t *s = *sp = shard_of(k.hash);
    pthread_mutex_lock(&s->mu);
    entry_t *e = find(s, &k);
    if (!e && !(e = insert(s, &k, t))) pthread_mutex_unlock(&s->mu);
    return e;
}

/* A duration in whole ns, rounded down and capped at PERIOD_MAX. */
static inline uint64_t to_ns(double ns) {
    return ns >= PERIOD_MAX ? (uint64_t)PERIOD_MAX : (uint64_t)ns;
}

int sl_limiter_take_at(const char *key, size_t key_len, double rate, double burst, double cost,
                       uint64_t now, sl_limit_result_t *out, const char **err) {
    if (!(rate > 0 && rate <= SL_LIMITER_RATE_MAX))
        return fail(err, "rate must be a number > 0 and <= 1e9 (tokens per second)");
    if (!(burst >= 0 && burst < INFINITY)) return fail(err, "burst must be a finite number >= 0");
    if (!(cost >= 0 && cost <= burst + 1))
        return fail(err, "cost must be a number >= 0 and <= burst + 1");
    if ((!key && key_len) || !out) return fail(err, "no key or no result");

    /* Rounded down each: k tokens' time floor(k * period) >= k * floor(period), so a full
     * bucket admits all of its burst + 1 single takes (limiter.h: long-run rate). A rate
     * of at most 1e9 makes `one` at least 1 ns. */
    double period = NS_PER_S / rate;
    uint64_t one = to_ns(period), cap = to_ns((burst + 1) * period), inc = to_ns(cost * period);

    shard_t *s;
    /* A new bucket: full, its token grid starting now. */
    entry_t *e = lock_entry(key, key_len, KIND_BUCKET, now, &s);
    if (!e) return fail(err, "out of memory for a new rate-limit key");
    /* A TAT in the past is a full bucket. The time since is not banked beyond the
     * capacity, but its part of a token is kept: tokens arrive on a fixed grid of
     * periods (limiter.h), so a late request does not push the next token later. The
     * grid only moves the TAT forward; a thread whose clock read is older than the last
     * take sees the bucket emptier, never fuller. */
    uint64_t base = e->t;
    if (base < now) base = now - (now - base) % one;
    int64_t owed = (int64_t)base - (int64_t)now; /* < 0: full, part of a token on its way */
    int64_t debt = owed + (int64_t)inc;          /* owed after this take */
    bool ok = debt <= (int64_t)cap;
    if (ok && inc) e->t = base + inc;
    pthread_mutex_unlock(&s->mu);

    /* Owed past the capacity only after a reload lowered it (limiter.h). */
    uint64_t lacks = (uint64_t)SL_MAX(ok ? debt : owed, 0);
    out->allowed = ok;
    out->remaining = lacks >= cap ? 0 : SL_MIN((double)((cap - lacks) / one), floor(burst + 1));
    out->reset = (double)lacks / NS_PER_S;
    out->retry_after = ok ? 0 : (double)(debt - (int64_t)cap) / NS_PER_S;
    out->limit = burst + 1;
    return SL_OK;
}

int sl_limiter_window_at(const char *key, size_t key_len, double limit, double window_s,
                         double cost, uint64_t now, sl_limit_result_t *out, const char **err) {
    if (!(limit > 0 && limit < INFINITY)) return fail(err, "limit must be a finite number > 0");
    if (!(window_s > 0 && window_s * NS_PER_S <= PERIOD_MAX))
        return fail(err, "window must be a number of seconds > 0 (at most 146 years)");
    if (!(cost >= 0 && cost <= limit)) return fail(err, "cost must be a number >= 0 and <= limit");
    if ((!key && key_len) || !out) return fail(err, "no key or no result");

    uint64_t w = SL_MAX(to_ns(window_s * NS_PER_S), 1);

    shard_t *s;
    /* A new window: begun at 0, so at least two windows back or the current one, empty. */
    entry_t *e = lock_entry(key, key_len, KIND_WINDOW, 0, &s);
    if (!e) return fail(err, "out of memory for a new rate-limit key");
    uint64_t start = e->t;
    if (now >= start + w) {
        /* The next window keeps this one's count as its previous; any later one, nothing.
         * A start left unaligned by a changed window size is realigned here. */
        e->prev = now < start + 2 * w ? e->cur : 0;
        e->cur = 0;
        e->t = start = now - now % w;
    }
    /* A thread whose clock read is older than the window another thread began counts it
     * from the start: the previous window weighs fully, which errs on refusing. */
    uint64_t elapsed = now > start ? now - start : 0;
    double prev = e->prev, cur = e->cur;
    double used = prev * ((double)(w - elapsed) / (double)w) + cur;
    bool ok = used + cost <= limit + EPS;
    if (ok) {
        e->cur = cur += cost;
        used += cost;
    }
    pthread_mutex_unlock(&s->mu);

    double wait = 0;
    if (!ok) {
        /* The previous window's weight falls linearly through this one; once it is over,
         * this one's count becomes the previous and falls through the next. */
        if (cur + cost <= limit + EPS)
            wait = (double)w * (1 - (limit - cur - cost) / prev) - (double)elapsed;
        else
            wait = (double)(w - elapsed) + (double)w * (1 - (limit - cost) / cur);
        wait = SL_MAX(ceil(wait), 1);
    }
    out->allowed = ok;
    out->remaining = SL_MAX(floor(limit - used + EPS), 0);
    out->reset = (double)(start + w - now) / NS_PER_S;
    out->retry_after = wait / NS_PER_S;
    out->limit = limit;
    return SL_OK;
}

int sl_ffi_limit_take(const char *key, size_t key_len, double rate, double burst, double cost,
                      sl_limit_result_t *out, const char **err) {
    return sl_limiter_take_at(key, key_len, rate, burst, cost, sl_now_ns(), out, err);
}

int sl_ffi_limit_window(const char *key, size_t key_len, double limit, double window_s, double cost,
                        sl_limit_result_t *out, const char **err) {
    return sl_limiter_window_at(key, key_len, limit, window_s, cost, sl_now_ns(), out, err);
}

int sl_limiter_set_max_keys(size_t n) {
    if (n == 0) return SL_ERROR;
    atomic_store_explicit(&max_keys, n, memory_order_relaxed);
    return SL_OK;
}

size_t sl_limiter_max_keys(void) { return atomic_load_explicit(&max_keys, memory_order_relaxed); }

size_t sl_limiter_count(void) {
    pthread_once(&once, init_once);
    size_t n = 0;
    for (int i = 0; i < SL_LIMITER_SHARDS; i++) {
        pthread_mutex_lock(&shards[i].mu);
        n += shards[i].n;
        pthread_mutex_unlock(&shards[i].mu);
    }
    return n;
}

unsigned sl_limiter_shard(const char *key, size_t key_len) {
    pthread_once(&once, init_once);
    return (unsigned)(shard_of(sl_hash64(key ? key : "", key_len, seed)) - shards);
}

void sl_limiter_clear(void) {
    pthread_once(&once, init_once);
    for (int i = 0; i < SL_LIMITER_SHARDS; i++) {
        shard_t *s = &shards[i];
        pthread_mutex_lock(&s->mu);
        sl_list_t *n, *tmp;
        sl_list_foreach_safe(n, tmp, &s->lru) free(SL_LIST_ENTRY(n, entry_t, lru));
        if (s->nbuckets) memset(s->buckets, 0, s->nbuckets * sizeof *s->buckets);
        s->n = 0;
        sl_list_init(&s->lru);
        pthread_mutex_unlock(&s->mu);
    }
}
