/* shdict.c — sluice.shared: one process-wide dictionary shared by all workers.
 *
 * 64 shards, each a chained hash table behind its own mutex: a worker holds one
 * shard lock for one short operation (no allocation of the lock-held path for
 * incr of an existing key). Expired entries are dropped lazily when touched, and
 * each shard is bounded: at SHARD_MAX entries a new key sweeps the shard's expired ones
 * (at most once a second) or, failing that, is refused. Values are numbers (double) or strings up to 64 KiB.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "base/common.h"
#include "base/hash.h"
#include "sluice.h"

#define NSHARDS 64
#define NBUCKETS 1024
#define SHARD_MAX 65536
#define MAX_KEY 1024
#define MAX_VAL 65536

typedef struct entry_s {
    struct entry_s *next;
    uint64_t hash;
    double expires; /* 0 = never */
    double num;
    char *str;      /* NULL for a number */
    uint32_t klen, slen;
    char key[];
} entry_t;

typedef struct {
    pthread_mutex_t mu;
    entry_t *buckets[NBUCKETS];
    uint32_t n;
    double swept_at; /* the last sweep of a full shard (at most one a second) */
} shard_t;

static shard_t shards[NSHARDS];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_shards(void) {
    for (int i = 0; i < NSHARDS; i++) pthread_mutex_init(&shards[i].mu, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Finds the entry (dropping it when expired). Caller holds the shard lock. */
static entry_t **lookup(shard_t *s, uint64_t h, const char *k, size_t kl, double now) {
    entry_t **pp = &s->buckets[(h >> 6) % NBUCKETS];
    while (*pp) {
        entry_t *e = *pp;
        if (e->hash == h && e->klen == kl && memcmp(e->key, k, kl) == 0) {
            if (e->expires && e->expires <= now) {
                *pp = e->next;
                free(e->str);
                free(e);
                s->n--;
                continue; /* keys are unique: the walk ends at an empty slot */
            }
            return pp;
        }
        pp = &e->next;
    }
    return pp;
}

static shard_t *shard_of(uint64_t h) {
    pthread_once(&once, init_shards);
    return &shards[h % NSHARDS];
}

int sl_ffi_shdict_get(const char *k, size_t kl, double *num, const char **str, size_t *sl, char *buf,
                      size_t bufsz) {
    uint64_t h = sl_hash64(k, kl, 0);
    shard_t *s = shard_of(h);
    int rc = SL_DECLINED;
    pthread_mutex_lock(&s->mu);
    entry_t *e = *lookup(s, h, k, kl, now_s());
    if (e && !e->str) {
        *num = e->num;
        rc = SL_SHDICT_NUMBER;
    } else if (e && e->slen <= bufsz) {
        memcpy(buf, e->str, e->slen);
        *str = buf;
        *sl = e->slen;
        rc = SL_SHDICT_STRING;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Drops every expired entry of a full shard: an entry is otherwise dropped only when its
 * own key is touched, so keys set with a ttl and never read again filled the shard for good
 * ("full" for every new key, their memory kept). Caller holds the shard lock. */
static void sweep(shard_t *s, double now) {
    s->swept_at = now;
    for (int b = 0; b < NBUCKETS; b++) {
        entry_t **pp = &s->buckets[b];
        while (*pp) {
            entry_t *e = *pp;
            if (e->expires && e->expires <= now) {
                *pp = e->next;
                free(e->str);
                free(e);
                s->n--;
            } else {
                pp = &e->next;
            }
        }
    }
}

static int store(shard_t *s, entry_t **slot, uint64_t h, const char *k, size_t kl, int is_num, double num,
                 const char *v, size_t vl, double ttl, double now, const char **err) {
    entry_t *e = *slot;
    char *copy = NULL;
    if (!is_num) {
        copy = malloc(vl ? vl : 1);
        if (!copy) goto oom;
        memcpy(copy, v, vl);
    }
    if (!e && s->n >= SHARD_MAX && (s->swept_at == 0 || now - s->swept_at >= 1.0)) {
        sweep(s, now);
        slot = lookup(s, h, k, kl, now); /* the old slot may have been a swept entry's */
    }
    if (!e) {
        if (s->n >= SHARD_MAX) {
            free(copy);
            *err = "shared dictionary is full";
            return SL_ERROR;
        }
        e = malloc(sizeof(*e) + kl);
        if (!e) {
            free(copy);
            goto oom;
        }
        e->hash = h;
        e->klen = (uint32_t)kl;
        memcpy(e->key, k, kl);
        e->str = NULL;
        e->next = NULL;
        *slot = e;
        s->n++;
    }
    free(e->str);
    e->str = copy;
    e->slen = (uint32_t)vl;
    e->num = num;
    e->expires = ttl > 0 ? now + ttl : 0;
    return SL_OK;
oom:
    *err = "out of memory";
    return SL_ERROR;
}

static int check_kv(size_t kl, size_t vl, const char **err) {
    if (kl == 0 || kl > MAX_KEY) {
        *err = "key must be 1 to 1024 bytes";
        return SL_ERROR;
    }
    if (vl > MAX_VAL) {
        *err = "value must be at most 64 KiB";
        return SL_ERROR;
    }
    return SL_OK;
}

int sl_ffi_shdict_set(const char *k, size_t kl, int is_num, double num, const char *v, size_t vl, double ttl,
                      const char **err) {
    if (check_kv(kl, is_num ? 0 : vl, err)) return SL_ERROR;
    uint64_t h = sl_hash64(k, kl, 0);
    shard_t *s = shard_of(h);
    pthread_mutex_lock(&s->mu);
    double now = now_s();
    int rc = store(s, lookup(s, h, k, kl, now), h, k, kl, is_num, num, v, vl, ttl, now, err);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int sl_ffi_shdict_incr(const char *k, size_t kl, double delta, int has_init, double init, double ttl,
                       double *out, const char **err) {
    if (check_kv(kl, 0, err)) return SL_ERROR;
    uint64_t h = sl_hash64(k, kl, 0);
    shard_t *s = shard_of(h);
    int rc = SL_OK;
    pthread_mutex_lock(&s->mu);
    double now = now_s();
    entry_t **slot = lookup(s, h, k, kl, now);
    entry_t *e = *slot;
    if (e && e->str) {
        *err = "not a number";
        rc = SL_ERROR;
    } else if (e) {
        e->num += delta;
        *out = e->num;
    } else if (!has_init) {
        *err = "not found";
        rc = SL_ERROR;
    } else {
        rc = store(s, slot, h, k, kl, 1, init + delta, NULL, 0, ttl, now, err);
        if (rc == SL_OK) *out = init + delta;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int sl_ffi_shdict_delete(const char *k, size_t kl) {
    uint64_t h = sl_hash64(k, kl, 0);
    shard_t *s = shard_of(h);
    pthread_mutex_lock(&s->mu);
    entry_t **slot = lookup(s, h, k, kl, now_s());
    entry_t *e = *slot;
    if (e) {
        *slot = e->next;
        free(e->str);
        free(e);
        s->n--;
    }
    pthread_mutex_unlock(&s->mu);
    return SL_OK;
}
