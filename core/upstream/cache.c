/* cache.c — the proxy-cache store (contract in cache.h). One chained hash table of entries
 * with an LRU list, and a second small one of locks, both behind one mutex: a lookup holds
 * it for a hash probe and a pointer move, never for a copy of a body (a HIT holds the
 * entry instead). DECISIONS.md says why one mutex and not shards. */
#include "upstream/cache.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "base/hash.h"
#include "base/list.h"
#include "base/wbuf.h"

typedef struct lock_s {
    struct lock_s *hnext;
    sl_list_t age; /* FIFO by creation: expired locks go from the oldest end */
    uint64_t hash, token, until;
    uint8_t pass;    /* released without an entry: lookups go upstream unlocked until `until` */
    uint8_t waiters; /* a lookup answered WAIT: ring the doorbells on release */
    size_t klen;
    char key[];
} lock_t;

static struct {
    pthread_mutex_t mu;
    sl_cache_entry_t **buckets;
    size_t nbuckets, n;
    sl_list_t lru; /* entries, most recent first */
    uint64_t bytes, size;
    lock_t **lbuckets;
    sl_list_t locks; /* lock records, oldest first */
    size_t nlocks;
    struct {
        void (*ring)(void *ud);
        void *ud;
    } bells[SL_CACHE_MAX_BELLS];
    size_t nbells;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER, .lru = {&S.lru, &S.lru}, .size = SL_CACHE_DEFAULT_SIZE,
       .locks = {&S.locks, &S.locks}};

#define LOCK_BUCKETS 4096

static bool key_eq(sl_str_t a, const char *p, size_t n) { return a.len == n && memcmp(a.p, p, n) == 0; }

/* ---- entries ---- */

static sl_cache_entry_t **slot(uint64_t h, sl_str_t key) {
    if (!S.nbuckets) return NULL;
    sl_cache_entry_t **pp = &S.buckets[h & (S.nbuckets - 1)];
    while (*pp && !((*pp)->hash == h && key_eq((*pp)->key, key.p, key.len))) pp = &(*pp)->hnext;
    return pp;
}

static sl_cache_entry_t *find(sl_str_t key) {
    sl_cache_entry_t **pp = slot(sl_hash64(key.p, key.len, 0), key);
    return pp ? *pp : NULL;
}

static void lru_unlink(sl_cache_entry_t *e) { sl_list_remove(&e->lru); }

static void lru_front(sl_cache_entry_t *e) { sl_list_push_front(&S.lru, &e->lru); }

static void entry_free(sl_cache_entry_t *e) {
    free((void *)e->body.p);
    free(e);
}

static void unref(sl_cache_entry_t *e) {
    assert(e->refs > 0);
    if (--e->refs == 0) {
        assert(!e->in_table);
        entry_free(e);
    }
}

/* Takes e out of the table; it lives on while holders have it. */
static void remove_entry(sl_cache_entry_t *e) {
    assert(e->in_table);
    sl_cache_entry_t **pp = slot(e->hash, e->key);
    assert(pp && *pp == e);
    *pp = e->hnext;
    e->hnext = NULL;
    lru_unlink(e);
    e->in_table = 0;
    S.n--;
    S.bytes -= e->size;
    unref(e);
}

static void evict_to(uint64_t room) {
    sl_cache_entry_t *old;
    while ((old = SL_LIST_LAST(&S.lru, sl_cache_entry_t, lru)) && S.bytes + room > S.size) remove_entry(old);
}

static bool grow(void) {
    if (S.n < S.nbuckets) return true;
    size_t nb = S.nbuckets ? S.nbuckets * 2 : 256;
    sl_cache_entry_t **b = calloc(nb, sizeof *b);
    if (!b) return S.nbuckets > 0; /* a longer chain, not a failure */
    for (size_t i = 0; i < S.nbuckets; i++) {
        for (sl_cache_entry_t *e = S.buckets[i], *nx; e; e = nx) {
            nx = e->hnext;
            e->hnext = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    }
    free(S.buckets);
    S.buckets = b;
    S.nbuckets = nb;
    return true;
}

static void add_entry(sl_cache_entry_t *e) {
    sl_cache_entry_t *old = find(e->key);
    if (old) remove_entry(old);
    sl_cache_entry_t **pp = slot(e->hash, e->key);
    e->hnext = NULL;
    *pp = e;
    e->in_table = 1;
    e->refs++;
    lru_front(e);
    S.n++;
    S.bytes += e->size;
}

/* ---- locks ---- */

static lock_t **lslot(uint64_t h, sl_str_t key) {
    if (!S.lbuckets && !(S.lbuckets = calloc(LOCK_BUCKETS, sizeof *S.lbuckets))) return NULL;
    lock_t **pp = &S.lbuckets[h & (LOCK_BUCKETS - 1)];
    while (*pp && !((*pp)->hash == h && (*pp)->klen == key.len && memcmp((*pp)->key, key.p, key.len) == 0))
        pp = &(*pp)->hnext;
    return pp;
}

static void lock_remove(lock_t **pp) {
    lock_t *l = *pp;
    *pp = l->hnext;
    sl_list_remove(&l->age);
    S.nlocks--;
    free(l);
}

/* Expired lock records go from the oldest end (bounded work: those are all past), and the
 * oldest of all when there are too many. */
static void locks_trim(uint64_t now) {
    lock_t *l;
    while ((l = SL_LIST_FIRST(&S.locks, lock_t, age)) && (l->until <= now || S.nlocks >= SL_CACHE_MAX_LOCKS)) {
        lock_remove(lslot(l->hash, (sl_str_t){l->key, l->klen}));
    }
}

/* Takes (or renews an expired) lock for key: true when the caller now holds it. */
static bool lock_take(sl_str_t key, uint64_t h, uint64_t token, uint64_t now, uint64_t lock_ns) {
    locks_trim(now);
    lock_t **pp = lslot(h, key);
    if (!pp) return false;
    if (*pp) lock_remove(pp);
    lock_t *l = malloc(sizeof *l + key.len);
    if (!l) return false;
    *l = (lock_t){.hash = h, .token = token, .until = now + lock_ns, .klen = key.len};
    memcpy(l->key, key.p, key.len);
    pp = lslot(h, key);
    *pp = l;
    sl_list_push_back(&S.locks, &l->age);
    S.nlocks++;
    return true;
}

/* ---- the API ---- */

void sl_cache_set_size(uint64_t size) {
    pthread_mutex_lock(&S.mu);
    S.size = size;
    evict_to(0);
    pthread_mutex_unlock(&S.mu);
}

#define LOCKED_READ(expr)                                                                          \
    do {                                                                                           \
        pthread_mutex_lock(&S.mu);                                                                 \
        uint64_t v_ = (expr);                                                                      \
        pthread_mutex_unlock(&S.mu);                                                               \
        return v_;                                                                                 \
    } while (0)

uint64_t sl_cache_size(void) { LOCKED_READ(S.size); }
uint64_t sl_cache_bytes(void) { LOCKED_READ(S.bytes); }
uint64_t sl_cache_count(void) { LOCKED_READ(S.n); }

size_t sl_cache_vary_key(sl_str_t key, sl_str_t vary, sl_cache_header_fn hdr, void *ud, char *buf,
                         size_t cap) {
    sl_wbuf_t b = SL_WBUF_BOUNDED(buf, cap);
    if (!sl_wbuf_str(&b, key)) return 0;
    const char *p = vary.p, *e = vary.p + vary.len;
    while (p < e) {
        while (p < e && (*p == ',' || *p == ' ' || *p == '\t')) p++;
        const char *s = p;
        while (p < e && *p != ',' && *p != ' ' && *p != '\t') p++;
        if (p == s) break;
        sl_str_t name = {s, (size_t)(p - s)};
        if (b.len + 1 + name.len + 1 > cap) return 0;
        buf[b.len++] = '\n';
        for (size_t i = 0; i < name.len; i++) buf[b.len++] = sl_lower(name.p[i]);
        buf[b.len++] = ':';
        if (!sl_wbuf_str(&b, hdr(ud, name))) return 0;
    }
    return b.len;
}

/* Vary keys are built on the stack up to this; a longer one is not cached. */
#define VARY_KEY_MAX 4096

int sl_cache_lookup(sl_str_t key, sl_cache_header_fn hdr, void *ud, uint64_t now, uint64_t lock_ns,
                    uint64_t token, bool may_wait, sl_cache_entry_t **hit, sl_cache_entry_t **stale,
                    bool *locked) {
    char vbuf[VARY_KEY_MAX];
    uint64_t h = sl_hash64(key.p, key.len, 0);
    *hit = *stale = NULL;
    *locked = false;
    pthread_mutex_lock(&S.mu);
    sl_cache_entry_t **pp = slot(h, key), *e = pp ? *pp : NULL;
    if (e && e->vary_node) {
        size_t vl = sl_cache_vary_key(key, e->vary, hdr, ud, vbuf, sizeof vbuf);
        e = vl ? find((sl_str_t){vbuf, vl}) : NULL;
    }
    int rc = SL_CACHE_MISS;
    if (e && now < e->fresh_until) {
        e->refs++;
        lru_unlink(e);
        lru_front(e);
        *hit = e;
        pthread_mutex_unlock(&S.mu);
        return SL_CACHE_HIT;
    }
    if (e) {
        rc = SL_CACHE_EXPIRED;
        if (now < e->stale_until) {
            e->refs++;
            *stale = e;
        }
    }
    lock_t **lp = lslot(h, key), *l = lp ? *lp : NULL;
    if (l && l->until > now) {
        if (!l->pass && may_wait) {
            if (*stale) unref(*stale);
            *stale = NULL;
            l->waiters = 1;
            rc = SL_CACHE_WAIT;
        }
    } else {
        *locked = lock_take(key, h, token, now, lock_ns);
    }
    pthread_mutex_unlock(&S.mu);
    return rc;
}

void sl_cache_release(sl_cache_entry_t *e) {
    if (!e) return;
    pthread_mutex_lock(&S.mu);
    unref(e);
    pthread_mutex_unlock(&S.mu);
}

static void ring_bells(void) {
    for (size_t i = 0; i < S.nbells; i++) S.bells[i].ring(S.bells[i].ud);
}

static void unlock_locked(sl_str_t key, uint64_t token, uint64_t now, uint64_t lock_ns, bool pass) {
    lock_t **pp = lslot(sl_hash64(key.p, key.len, 0), key);
    if (!pp || !*pp || (*pp)->token != token || (*pp)->pass) return;
    if ((*pp)->waiters) ring_bells();
    if (!pass) {
        lock_remove(pp);
        return;
    }
    (*pp)->pass = 1;
    (*pp)->waiters = 0;
    (*pp)->until = now + lock_ns;
}

int sl_cache_bell_add(void (*ring)(void *ud), void *ud) {
    int rc = SL_ERROR;
    pthread_mutex_lock(&S.mu);
    if (S.nbells < SL_CACHE_MAX_BELLS) {
        S.bells[S.nbells].ring = ring;
        S.bells[S.nbells++].ud = ud;
        rc = SL_OK;
    }
    pthread_mutex_unlock(&S.mu);
    return rc;
}

void sl_cache_bell_remove(void *ud) {
    pthread_mutex_lock(&S.mu);
    for (size_t i = 0; i < S.nbells; i++) {
        if (S.bells[i].ud == ud) {
            S.bells[i] = S.bells[--S.nbells];
            break;
        }
    }
    pthread_mutex_unlock(&S.mu);
}

void sl_cache_unlock(sl_str_t key, uint64_t token, uint64_t now, uint64_t pass_ns) {
    pthread_mutex_lock(&S.mu);
    unlock_locked(key, token, now, pass_ns, pass_ns > 0);
    pthread_mutex_unlock(&S.mu);
}

/* One allocation: the structure, key, route, vary value, field array and field bytes. */
static sl_cache_entry_t *entry_new(sl_str_t key, sl_str_t route, sl_str_t vary, const sl_cache_field_t *f,
                                   uint16_t nf) {
    size_t n = sizeof(sl_cache_entry_t) + nf * sizeof(sl_cache_field_t) + key.len + route.len + vary.len;
    for (uint16_t i = 0; i < nf; i++) n += f[i].name.len + f[i].value.len;
    sl_cache_entry_t *e = malloc(n);
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    e->size = n;
    e->fields = (sl_cache_field_t *)(e + 1);
    char *p = (char *)(e->fields + nf);
#define COPY(dst, s)                                                                               \
    do {                                                                                           \
        if ((s).len) memcpy(p, (s).p, (s).len);                                                    \
        (dst) = (sl_str_t){p, (s).len};                                                            \
        p += (s).len;                                                                              \
    } while (0)
    COPY(e->key, key);
    COPY(e->route, route);
    COPY(e->vary, vary);
    for (uint16_t i = 0; i < nf; i++) {
        COPY(e->fields[i].name, f[i].name);
        COPY(e->fields[i].value, f[i].value);
    }
#undef COPY
    e->nfields = nf;
    e->hash = sl_hash64(e->key.p, e->key.len, 0);
    return e;
}

int sl_cache_insert(const sl_cache_put_t *put, sl_cache_header_fn hdr, void *ud, uint64_t now,
                    uint64_t lock_ns, uint64_t token) {
    char vbuf[VARY_KEY_MAX];
    sl_str_t key = put->key;
    bool varied = put->vary.len > 0;
    if (varied) {
        size_t vl = sl_cache_vary_key(put->key, put->vary, hdr, ud, vbuf, sizeof vbuf);
        if (!vl) goto refuse;
        key = (sl_str_t){vbuf, vl};
    }
    sl_cache_entry_t *e = entry_new(key, put->route, (sl_str_t){NULL, 0}, put->fields, put->nfields);
    sl_cache_entry_t *node = varied ? entry_new(put->key, put->route, put->vary, NULL, 0) : NULL;
    if (!e || (varied && !node)) {
        free(e);
        free(node);
        if (put->body_owned) free((void *)put->body.p);
        sl_cache_unlock(put->key, token, now, lock_ns);
        return SL_ERROR;
    }
    if (put->body_owned) {
        e->body = put->body;
    } else if (put->body.len) {
        char *b = malloc(put->body.len);
        if (!b) {
            free(e);
            free(node);
            sl_cache_unlock(put->key, token, now, lock_ns);
            return SL_ERROR;
        }
        memcpy(b, put->body.p, put->body.len);
        e->body = (sl_str_t){b, put->body.len};
    }
    e->size += e->body.len;
    e->status = put->status;
    e->fresh_until = put->fresh_until;
    e->stale_until = put->stale_until;
    e->stored_at = put->stored_at;
    e->age0_ns = put->age0_ns;
    if (node) {
        node->vary_node = 1;
        node->fresh_until = node->stale_until = UINT64_MAX; /* lives as long as LRU keeps it */
    }
    uint64_t need = e->size + (node ? node->size : 0);
    pthread_mutex_lock(&S.mu);
    if (need > S.size || !grow()) {
        unlock_locked(put->key, token, now, lock_ns, true);
        pthread_mutex_unlock(&S.mu);
        entry_free(e);
        free(node);
        return SL_DECLINED;
    }
    /* A key that was a vary node (or a plain entry) before changes its kind here. */
    sl_cache_entry_t *old = find(put->key);
    if (old && (old->vary_node != varied || (varied && !key_eq(old->vary, put->vary.p, put->vary.len))))
        remove_entry(old);
    if (node) {
        sl_cache_entry_t *same = find(put->key);
        if (same) {
            /* the same Vary: keep the node, make it recent */
            lru_unlink(same);
            lru_front(same);
            free(node);
            node = NULL;
            need = e->size;
        }
    }
    evict_to(need);
    if (node) add_entry(node);
    add_entry(e);
    unlock_locked(put->key, token, now, lock_ns, false);
    pthread_mutex_unlock(&S.mu);
    return SL_OK;
refuse:
    if (put->body_owned) free((void *)put->body.p);
    sl_cache_unlock(put->key, token, now, lock_ns);
    return SL_DECLINED;
}

/* Removes every entry `match` accepts. */
static size_t purge_where(bool (*match)(const sl_cache_entry_t *e, sl_str_t arg), sl_str_t arg) {
    size_t n = 0;
    pthread_mutex_lock(&S.mu);
    sl_list_t *it, *nx;
    sl_list_foreach_safe(it, nx, &S.lru) {
        sl_cache_entry_t *e = SL_LIST_ENTRY(it, sl_cache_entry_t, lru);
        if (match(e, arg)) {
            remove_entry(e);
            n++;
        }
    }
    pthread_mutex_unlock(&S.mu);
    return n;
}

/* The key itself, or one of its variants (key + "\n" + ...). */
static bool match_key(const sl_cache_entry_t *e, sl_str_t k) {
    return e->key.len >= k.len && memcmp(e->key.p, k.p, k.len) == 0 &&
           (e->key.len == k.len || e->key.p[k.len] == '\n');
}
static bool match_route(const sl_cache_entry_t *e, sl_str_t r) { return key_eq(e->route, r.p, r.len); }
static bool match_all(const sl_cache_entry_t *e, sl_str_t unused) { return (void)e, (void)unused, true; }

size_t sl_cache_purge_key(sl_str_t key) { return purge_where(match_key, key); }
size_t sl_cache_purge_route(sl_str_t route) { return purge_where(match_route, route); }
size_t sl_cache_purge_all(void) { return purge_where(match_all, (sl_str_t){NULL, 0}); }
