/* cache_req.c — a request's side of the proxy-cache (request.h, section cache_req.c; the
 * store is upstream/cache.h). Worker thread only. */
#include "http/request.h"
#include "upstream/cache.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/list.h"
#include "base/log.h"
#include "base/wbuf.h"

/* A request's cache state, in its arena (r->cache). */
typedef struct sl_cache_req_s {
    sl_list_t wl;           /**< in the worker's bell's waiters while it waits; else unlinked */
    sl_req_t *r;
    sl_str_t key;           /**< in the request's arena */
    sl_cache_policy_t pol;
    uint64_t token;         /**< the lock's owner id */
    uint8_t armed;          /**< looked up, not answered from the store: the response may be stored */
    uint8_t status;         /**< SL_CACHE_MISS or SL_CACHE_EXPIRED until the head decides */
    uint8_t locked;         /**< this request holds the key's lock */
    uint8_t capturing;      /**< the response is cacheable: its body is being copied */
    uint8_t ended;          /**< the body ended whole */
    sl_cache_entry_t *held; /**< the entry a HIT or STALE answer is sent from */
    sl_cache_entry_t *stale;/**< an expired entry for stale_if_error */
    /* the capture: the upstream's head, then its body */
    int rstatus;
    uint64_t fresh_ns;
    uint64_t age0_ns;       /**< the upstream's Age: the response's age when stored */
    sl_cache_field_t *fields;
    uint16_t nfields;
    sl_str_t vary;
    char *fbuf;             /**< malloc'ed: fields' bytes and array */
    char *body;             /**< malloc'ed: the body so far */
    size_t len, cap;
} sl_cache_req_t;

#define NS_PER_S 1000000000.0

static _Atomic uint64_t next_token = 1;

/* Seconds as ns, at most 2^62 (146 years): a max-age or ttl of centuries overflowed 64 bits
 * (and now + fresh + stale_if_error may not either), storing entries already expired. */
#define SECS_NS_MAX ((uint64_t)1 << 62)
static uint64_t secs_ns(double s) {
    return s <= 0 ? 0 : s >= (double)SECS_NS_MAX / NS_PER_S ? SECS_NS_MAX : (uint64_t)(s * NS_PER_S);
}

void sl__cache_req_ended(sl_req_t *r) { r->cache->ended = 1; }

/* The request's value of header `name` ("" when absent), for Vary keys: every field of that
 * name, joined with ", " (RFC 9111 4.1: `Accept-Language: en` and `Accept-Language: fr`
 * select as `en, fr` does, not as `en`), in the request's arena when there are several. */
static sl_str_t req_header(void *ud, sl_str_t name) {
    sl_req_t *r = ud;
    sl_str_t first = {"", 0};
    size_t n = 0, total = 0;
    for (uint16_t i = 0; i < r->head.nheaders; i++)
        if (sl_str_ieq2(r->head.headers[i].name, name)) {
            if (n++ == 0) first = r->head.headers[i].value;
            total += r->head.headers[i].value.len + 2;
        }
    if (n < 2) return first;
    char *buf = sl_arena_alloc(&r->arena, total);
    if (!buf) return first;
    sl_wbuf_t b = SL_WBUF_BOUNDED(buf, total);
    for (uint16_t i = 0, k = 0; i < r->head.nheaders; i++)
        if (sl_str_ieq2(r->head.headers[i].name, name)) {
            if (k++) sl_wbuf_put(&b, ", ", 2);
            sl_wbuf_str(&b, r->head.headers[i].value);
        }
    return (sl_str_t){buf, b.len};
}

static void count(sl_req_t *r, int status) { sl_metrics_cache(&r->w->metrics, r->route, status); }

static const sl_str_t status_text[] = {
    [SL_CACHE_MISS] = SL_LIT("MISS"),       [SL_CACHE_HIT] = SL_LIT("HIT"),
    [SL_CACHE_EXPIRED] = SL_LIT("EXPIRED"), [SL_CACHE_BYPASS] = SL_LIT("BYPASS"),
    [SL_CACHE_STALE] = SL_LIT("STALE"),
};

static void say(sl_req_t *r, int status) {
    const char *err;
    sl_edits_set(&r->resp_edits, &r->arena, SL_LIT("X-Cache-Status"), status_text[status], &err);
    count(r, status);
}

static sl_cache_req_t *state(sl_req_t *r) {
    if (r->cache) return r->cache;
    sl_cache_req_t *c = sl_arena_alloc(&r->arena, sizeof *c);
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    c->r = r;
    c->token = atomic_fetch_add_explicit(&next_token, 1, memory_order_relaxed);
    r->cache = c;
    return c;
}

/* The entry's field `name` (NULL p when absent). */
static sl_str_t entry_field(const sl_cache_entry_t *e, sl_str_t name) {
    for (uint16_t i = 0; i < e->nfields; i++)
        if (sl_str_ieq2(e->fields[i].name, name)) return e->fields[i].value;
    return (sl_str_t){NULL, 0};
}

/* Whether If-None-Match list `inm` names entity tag `etag`, by the weak comparison
 * (RFC 9110 13.1.2: W/ ignored on both sides), or is "*" (any representation). */
static bool etag_listed(sl_str_t inm, sl_str_t etag) {
    const char *p = inm.p, *end = inm.p + inm.len;
    if (etag.len >= 2 && etag.p[0] == 'W' && etag.p[1] == '/') etag.p += 2, etag.len -= 2;
    /* etag.p NULL (the entry has none): only "*" matches */
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ',')) p++;
        if (p == end) break;
        if (*p == '*') return true;
        if (end - p >= 2 && p[0] == 'W' && p[1] == '/') p += 2;
        if (p == end || *p != '"') return false; /* not an entity tag: no match */
        const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
        if (!q) return false;
        if (etag.p && (size_t)(q + 1 - p) == etag.len && memcmp(p, etag.p, etag.len) == 0) return true;
        p = q + 1;
    }
    return false;
}

/* An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") as a number that orders like the time,
 * or -1 when it is not one. */
static long long fixdate(sl_str_t v) {
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    while (v.len && (v.p[v.len - 1] == ' ' || v.p[v.len - 1] == '\t')) v.len--;
    while (v.len && (v.p[0] == ' ' || v.p[0] == '\t')) v.p++, v.len--;
    const char *s = v.p;
    if (v.len != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' ||
        s[19] != ':' || s[22] != ':' || s[25] != ' ' || memcmp(s + 26, "GMT", 3) != 0)
        return -1;
    static const int digits[] = {5, 6, 12, 13, 14, 15, 17, 18, 20, 21, 23, 24};
    for (size_t i = 0; i < sizeof digits / sizeof digits[0]; i++)
        if (s[digits[i]] < '0' || s[digits[i]] > '9') return -1;
    int mon = -1;
    for (int m = 0; m < 12; m++)
        if (memcmp(s + 8, months + 3 * m, 3) == 0) mon = m;
    if (mon < 0) return -1;
#define D2(i) ((s[i] - '0') * 10 + (s[(i) + 1] - '0'))
    long long year = D2(12) * 100 + D2(14);
    return ((((year * 12 + mon) * 31 + D2(5)) * 24 + D2(17)) * 60 + D2(20)) * 60 + D2(23);
#undef D2
}

/* Whether a GET or HEAD answered from entry e should be a 304 (RFC 9110 13.2.2, RFC 9111
 * 4.3.2, as nginx's cache does): the request's If-None-Match names e's ETag, or, without
 * If-None-Match, its If-Modified-Since is not before e's Last-Modified. Only a 200 entry. */
static bool not_modified(const sl_req_t *r, const sl_cache_entry_t *e) {
    if (e->status != 200) return false;
    sl_str_t m = r->head.method;
    if (!(m.len == 3 && memcmp(m.p, "GET", 3) == 0) && !(m.len == 4 && memcmp(m.p, "HEAD", 4) == 0)) return false;
    sl_str_t etag = entry_field(e, SL_LIT("ETag"));
    bool inm = false;
    for (uint16_t i = 0; i < r->head.nheaders; i++)
        if (sl_str_ieq2(r->head.headers[i].name, SL_LIT("If-None-Match"))) {
            if (etag_listed(r->head.headers[i].value, etag)) return true;
            inm = true;
        }
    if (inm) return false; /* If-Modified-Since is not read then */
    sl_str_t ims = req_header((void *)r, SL_LIT("If-Modified-Since"));
    sl_str_t lm = entry_field(e, SL_LIT("Last-Modified"));
    if (!ims.len || !lm.p) return false;
    long long a = fixdate(lm), b = fixdate(ims);
    return a >= 0 && b >= 0 && a <= b;
}

/* A 304 carries no representation metadata of the body it stands for (as nginx's). */
static bool dropped_in_304(sl_str_t name) {
    return sl_str_ieq2(name, SL_LIT("Content-Type")) || sl_str_ieq2(name, SL_LIT("Content-Encoding")) ||
           sl_str_ieq2(name, SL_LIT("Accept-Ranges"));
}

/* Answers from entry e (held by the request until it ends), as response.exit would: its
 * fields are the response's, its body is sent from the entry (a 304, `nm`: no body). Nothing
 * is copied or checked again: the fields were checked when the upstream's head was parsed,
 * and the entry outlives the request. */
static void answer_from(sl_req_t *r, sl_cache_entry_t *e, int status, bool nm) {
    r->cache->held = e;
    for (uint16_t i = 0; i < e->nfields; i++)
        if (!nm || !dropped_in_304(e->fields[i].name))
            sl_edits_add_borrowed(&r->resp_edits, &r->arena, e->fields[i].name, e->fields[i].value);
    char *age = sl_arena_alloc(&r->arena, 20), *p = age + 20;
    if (age) {
        uint64_t now = sl_wake_ns(), s = ((now > e->stored_at ? now - e->stored_at : 0) + e->age0_ns) / 1000000000u;
        do *--p = (char)('0' + s % 10);
        while (s /= 10);
        sl_edits_add_borrowed(&r->resp_edits, &r->arena, SL_LIT("Age"), (sl_str_t){p, (size_t)(age + 20 - p)});
    }
    sl_edits_add_borrowed(&r->resp_edits, &r->arena, SL_LIT("X-Cache-Status"), status_text[status]);
    count(r, status);
}

/* Whether the request's method is one of pol->methods ("GET HEAD "). */
static bool method_listed(const sl_req_t *r, const sl_cache_policy_t *pol) {
    sl_str_t m = r->head.method;
    const char *l = pol->methods, *e = l + strnlen(l, sizeof pol->methods);
    for (const char *p = l; p + m.len < e; p++)
        if ((p == l || p[-1] == ' ') && p[m.len] == ' ' && memcmp(p, m.p, m.len) == 0) return true;
    return false;
}

/* The default key, "METHOD host/path?query", in the request's arena (a HEAD's is GET's:
 * it is answered from the GET's entry). */
static sl_str_t default_key(sl_req_t *r) {
    sl_str_t m = r->head.method_id == HTTP_HEAD ? SL_LIT("GET") : r->head.method, h = {r->host, r->host_len};
    sl_str_t path = r->over.path.p ? r->over.path : r->head.path;
    sl_str_t q = r->over.query_set ? r->over.query : r->head.query;
    size_t n = m.len + 1 + h.len + path.len + (q.len ? 1 + q.len : 0);
    char *k = sl_arena_alloc(&r->arena, n);
    if (!k) return (sl_str_t){NULL, 0};
    sl_wbuf_t b = SL_WBUF_BOUNDED(k, n);
    sl_wbuf_str(&b, m);
    sl_wbuf_put(&b, " ", 1);
    sl_wbuf_str(&b, h);
    sl_wbuf_str(&b, path);
    if (q.len) {
        sl_wbuf_put(&b, "?", 1);
        sl_wbuf_str(&b, q);
    }
    return (sl_str_t){k, b.len};
}

int sl__cache_req_lookup(sl_req_t *r, sl_str_t key, const sl_cache_policy_t *pol, bool may_wait) {
    if (!method_listed(r, pol)) {
        say(r, SL_CACHE_BYPASS);
        return SL_CACHE_BYPASS;
    }
    sl_cache_req_t *c = state(r);
    if (!c) return SL_CACHE_BYPASS;
    if (!c->key.p) {
        /* the first lookup of the request: its key (a retry after WAIT has the same) */
        if (!key.p) {
            c->key = default_key(r);
        } else {
            char *k = sl_arena_alloc(&r->arena, key.len ? key.len : 1);
            if (k) memcpy(k, key.p, key.len);
            c->key = (sl_str_t){k, key.len};
        }
        if (!c->key.p) return SL_CACHE_BYPASS;
    }
    sl_cache_release(c->stale);
    c->stale = NULL;
    sl_cache_entry_t *hit, *stale;
    bool locked;
    int rc = sl_cache_lookup(c->key, req_header, r, sl_wake_ns(), secs_ns(pol->lock_timeout), c->token, may_wait,
                             &hit, &stale, &locked);
    if (rc == SL_CACHE_HIT) {
        bool nm = not_modified(r, hit);
        r->exit.status = nm ? 304 : hit->status;
        r->exit.body = nm ? (sl_str_t){"", 0} : hit->body;
        answer_from(r, hit, SL_CACHE_HIT, nm);
        return rc;
    }
    if (rc == SL_CACHE_WAIT) return rc;
    if (r->head.method_id == HTTP_HEAD) {
        /* A HEAD is answered from a GET's entry but never fills one (its answer has no
         * body): it goes upstream as it is, and the fill is left to the next GET. */
        if (locked) sl_cache_unlock(c->key, c->token, sl_now_ns(), 0);
        sl_cache_release(stale);
        say(r, rc);
        return rc;
    }
    c->pol = *pol;
    if (c->pol.nstatuses > 16) c->pol.nstatuses = 16;
    c->stale = stale;
    c->locked = locked;
    c->status = (uint8_t)rc;
    c->armed = 1;
    return rc;
}

/* The lock goes: with a pass mark when the response is not cacheable (the next requests go
 * upstream at once), plainly when this fetch was abandoned (the next one takes it). */
static void unlock(sl_cache_req_t *c, bool pass) {
    if (!c->locked) return;
    c->locked = 0;
    sl_cache_unlock(c->key, c->token, sl_now_ns(), pass ? secs_ns(c->pol.lock_timeout) : 0);
}

static void capture_drop(sl_cache_req_t *c) {
    c->capturing = 0;
    free(c->body);
    free(c->fbuf);
    c->body = c->fbuf = NULL;
    c->len = c->cap = 0;
}

/* ---- what the upstream said ---- */

/* Cache-Control's delta-seconds: 0 and *ok, or !*ok for a malformed value. */
static uint64_t delta_seconds(sl_str_t v, bool *ok) {
    if (v.len >= 2 && v.p[0] == '"' && v.p[v.len - 1] == '"') v = (sl_str_t){v.p + 1, v.len - 2};
    uint64_t n = 0;
    *ok = v.len > 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.p[i] < '0' || v.p[i] > '9') {
            *ok = false;
            return 0;
        }
        if (n < 1000000000000ull) n = n * 10 + (uint64_t)(v.p[i] - '0');
    }
    return n;
}

/* Reads the response's Cache-Control: false when it forbids a shared cache to store it
 * (no-store, private, no-cache); *ttl_s gets s-maxage, else max-age, else stays; *shared
 * whether it lets a shared cache keep a response to a request with Authorization (public,
 * s-maxage, must-revalidate: RFC 9111 3.5). */
static bool cache_control(const sl_h1_head_t *h, double *ttl_s, bool *shared) {
    bool have_s = false;
    *shared = false;
    for (uint16_t i = 0; i < h->nheaders; i++) {
        if (!SL_IEQ(h->headers[i].name, "cache-control")) continue;
        sl_str_t list = h->headers[i].value, tok;
        while (sl_h1_next_token(&list, &tok)) {
            sl_str_t name = tok, val = {NULL, 0};
            const char *eq = memchr(tok.p, '=', tok.len);
            if (eq) {
                name.len = (size_t)(eq - tok.p);
                val = (sl_str_t){eq + 1, tok.len - name.len - 1};
            }
            while (name.len && (name.p[name.len - 1] == ' ' || name.p[name.len - 1] == '\t')) name.len--;
            bool ok;
            if (SL_IEQ(name, "no-store") || SL_IEQ(name, "private") || SL_IEQ(name, "no-cache")) return false;
            if (SL_IEQ(name, "public") || SL_IEQ(name, "must-revalidate")) *shared = true;
            if (SL_IEQ(name, "s-maxage")) {
                *shared = true;
                uint64_t n = delta_seconds(val, &ok);
                if (!ok) return false; /* unreadable: not stored */
                *ttl_s = (double)n;
                have_s = true;
            } else if (SL_IEQ(name, "max-age") && !have_s) {
                uint64_t n = delta_seconds(val, &ok);
                if (!ok) return false;
                *ttl_s = (double)n;
            }
        }
    }
    return *ttl_s > 0;
}

/* The upstream's Age in seconds (0 when absent or unreadable): how old the response
 * already is, as seen by the caches before this one (RFC 9111 4.2.3, its age_value). */
static uint64_t upstream_age(const sl_h1_head_t *h) {
    for (uint16_t i = 0; i < h->nheaders; i++) {
        if (!SL_IEQ(h->headers[i].name, "age")) continue;
        bool ok;
        uint64_t n = delta_seconds(h->headers[i].value, &ok);
        return ok ? n : 0;
    }
    return 0;
}

/* Whether the request went upstream with an Authorization field (the client's, unless a
 * plugin cleared it, or one a plugin set). */
static bool sent_authorization(const sl_req_t *r) {
    sl_str_t n = {"authorization", 13};
    if (sl_edits_find(&r->req_edits, n)) return true;
    if (sl_edits_removed(&r->req_edits, n)) return false;
    for (uint16_t i = 0; i < r->head.nheaders; i++)
        if (SL_IEQ(r->head.headers[i].name, "authorization")) return true;
    return false;
}

/* Whether the response may be stored; *ttl_s its freshness left (its lifetime less the
 * upstream's Age in *age_s: one already stale is not stored), *vary its Vary value. */
static bool cacheable(const sl_req_t *r, const sl_cache_policy_t *pol, double *ttl_s, double *age_s, sl_str_t *vary) {
    const sl_h1_head_t *h = &r->rhead;
    bool listed = false, shared;
    for (int i = 0; i < pol->nstatuses; i++) listed |= pol->statuses[i] == h->status;
    if (!listed || h->status == 101) return false;
    if (h->body_kind == SL_BODY_LENGTH && h->content_length > pol->max_body) return false;
    *ttl_s = pol->ttl;
    if (!cache_control(h, ttl_s, &shared)) return false;
    *age_s = (double)upstream_age(h);
    *ttl_s -= *age_s;
    if (*ttl_s <= 0) return false;
    /* an answer to a request with credentials is that client's unless the upstream says
     * otherwise: stored, it would go to every client without them */
    if (!shared && sent_authorization(r)) return false;
    *vary = (sl_str_t){NULL, 0};
    for (uint16_t i = 0; i < h->nheaders; i++) {
        sl_str_t n = h->headers[i].name;
        if (SL_IEQ(n, "set-cookie") && !pol->cache_set_cookie) return false;
        if (SL_IEQ(n, "vary")) {
            if (vary->len) return false; /* several Vary lines: not worth joining */
            *vary = h->headers[i].value;
            if (memchr(vary->p, '*', vary->len)) return false;
        }
    }
    return true;
}

/* Fields an entry keeps: not hop-by-hop, not framing, not the ones answers set afresh. */
static bool kept(const sl_h1_header_t *f) {
    return !f->hop && !SL_IEQ(f->name, "content-length") && !SL_IEQ(f->name, "transfer-encoding") &&
           !SL_IEQ(f->name, "age") && !SL_IEQ(f->name, "x-cache-status");
}

/* Copies the head's kept fields (and the Vary value) into one malloc'ed buffer. */
static bool snapshot(sl_cache_req_t *c, const sl_h1_head_t *h, sl_str_t vary) {
    size_t n = 0, bytes = vary.len;
    for (uint16_t i = 0; i < h->nheaders; i++)
        if (kept(&h->headers[i])) n++, bytes += h->headers[i].name.len + h->headers[i].value.len;
    char *buf = malloc(n * sizeof(sl_cache_field_t) + bytes + 1);
    if (!buf) return false;
    sl_cache_field_t *f = (sl_cache_field_t *)buf;
    char *p = buf + n * sizeof(sl_cache_field_t);
    size_t k = 0;
    for (uint16_t i = 0; i < h->nheaders; i++) {
        const sl_h1_header_t *x = &h->headers[i];
        if (!kept(x)) continue;
        memcpy(p, x->name.p, x->name.len);
        f[k].name = (sl_str_t){p, x->name.len};
        p += x->name.len;
        memcpy(p, x->value.p, x->value.len);
        f[k].value = (sl_str_t){p, x->value.len};
        p += x->value.len;
        k++;
    }
    if (vary.len) memcpy(p, vary.p, vary.len);
    c->vary = (sl_str_t){p, vary.len};
    c->fbuf = buf;
    c->fields = f;
    c->nfields = (uint16_t)n;
    return true;
}

int sl__cache_req_head(sl_req_t *r) {
    sl_cache_req_t *c = r->cache;
    if (!c || !c->armed || c->held) return SL_OK;
    capture_drop(c); /* a retry's response replaces an earlier attempt's */
    c->ended = 0;
    if (r->status >= 500 && c->stale) return SL_DONE;
    double ttl_s, age_s;
    sl_str_t vary;
    if (!cacheable(r, &c->pol, &ttl_s, &age_s, &vary) || !snapshot(c, &r->rhead, vary)) {
        unlock(c, true);
        say(r, SL_CACHE_BYPASS);
        return SL_OK;
    }
    c->rstatus = r->status;
    c->fresh_ns = secs_ns(ttl_s);
    c->age0_ns = secs_ns(age_s);
    c->capturing = 1;
    if (r->rhead.body_kind == SL_BODY_NONE) c->ended = 1;
    say(r, c->status);
    return SL_OK;
}

void sl__cache_req_piece(sl_req_t *r, const char *p, size_t n) {
    sl_cache_req_t *c = r->cache;
    if (!c->capturing || !n) return;
    if (c->len + n > c->pol.max_body) {
        /* longer than max_body (a chunked or close-delimited body): streams on, not stored */
        capture_drop(c);
        unlock(c, true);
        return;
    }
    if (c->len + n > c->cap) {
        size_t cap = SL_MAX(c->cap * 2, SL_MAX(c->len + n, (size_t)4096));
        if (cap > c->pol.max_body) cap = c->pol.max_body;
        char *b = realloc(c->body, cap);
        if (!b) {
            capture_drop(c);
            unlock(c, true);
            return;
        }
        c->body = b;
        c->cap = cap;
    }
    memcpy(c->body + c->len, p, n);
    c->len += n;
}

void sl__cache_req_finish(sl_req_t *r) {
    sl_cache_req_t *c = r->cache;
    if (!c || !c->capturing || !c->ended || r->mode != SL_MODE_PROXY) return;
    uint64_t now = sl_now_ns();
    const sl_route_conf_t *rc = sl__req_route_conf(r);
    sl_cache_put_t put = {
        .key = c->key,
        .route = rc ? (sl_str_t){rc->name, strlen(rc->name)} : (sl_str_t){"", 0},
        .vary = c->vary,
        .status = c->rstatus,
        .fields = c->fields,
        .nfields = c->nfields,
        .body = {c->body, c->len},
        .body_owned = true,
        .fresh_until = now + c->fresh_ns,
        .stale_until = now + c->fresh_ns + secs_ns(c->pol.stale_if_error),
        .stored_at = now,
        .age0_ns = c->age0_ns,
    };
    c->body = NULL; /* the store owns it now, whatever the outcome */
    c->len = c->cap = 0;
    c->locked = 0; /* the insert releases the lock */
    sl_cache_insert(&put, req_header, r, now, secs_ns(c->pol.lock_timeout), c->token);
    capture_drop(c);
}

bool sl__cache_req_stale(sl_req_t *r, int *status, sl_str_t *ctype, sl_str_t *body) {
    sl_cache_req_t *c = r->cache;
    if (!c || !c->stale || c->held || *status < 500 || r->mode != SL_MODE_PROXY) return false;
    sl_cache_entry_t *e = c->stale;
    c->stale = NULL;
    capture_drop(c);
    unlock(c, false);
    memset(&r->resp_edits, 0, sizeof(r->resp_edits));
    answer_from(r, e, SL_CACHE_STALE, false);
    *status = e->status;
    *ctype = (sl_str_t){NULL, 0};
    *body = e->body;
    return true;
}


/* ---- waiting for a lock: the worker's doorbell ----
 *
 * A request whose lookup answered WAIT sleeps on a timer (the plugin's safety-net step)
 * and sits in its worker's list of waiters. The store rings every worker's doorbell (an
 * uv_async_t, thread-safe to send) when a lock some request waited for is released, on
 * whichever worker released it; the rung worker wakes all its waiters, which look again.
 * The list is the worker's own: only its thread touches it. */

typedef struct sl_cache_bell_s {
    uv_async_t async;
    sl_list_t waiters; /* sl_cache_req_t, in the order they began to wait */
} sl_cache_bell_t;

static void bell_ring(void *ud) { uv_async_send(&((sl_cache_bell_t *)ud)->async); }

/* Wakes every waiter of this worker. The list is moved to a local sentinel first: a waiter
 * that waits again joins the worker's list, and one freed meanwhile (a connection closed
 * by another's wakeup) unlinks itself from the local list. */
static void bell_rung(uv_async_t *a) {
    sl_cache_bell_t *b = a->data;
    sl_list_t local;
    sl_list_init(&local);
    sl_list_splice(&local, &b->waiters);
    while (!sl_list_empty(&local)) {
        sl_cache_req_t *c = SL_LIST_FIRST(&local, sl_cache_req_t, wl);
        sl_req_t *r = c->r;
        sl_list_remove(&c->wl);
        sl__req_cancel_wait(r);
        sl__req_wakeup(r);
    }
}

static void bell_closed(uv_handle_t *h) { free(h->data); }

static sl_cache_bell_t *bell_of(sl_worker_t *w) {
    if (w->cache_bell || w->draining) return w->cache_bell;
    sl_cache_bell_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    sl_list_init(&b->waiters);
    uv_async_init(&w->loop, &b->async, bell_rung);
    b->async.data = b;
    uv_unref((uv_handle_t *)&b->async); /* never keeps a draining loop alive */
    if (sl_cache_bell_add(bell_ring, b) != SL_OK) {
        uv_close((uv_handle_t *)&b->async, bell_closed);
        return NULL;
    }
    w->cache_bell = b;
    return b;
}

void sl__cache_bell_close(sl_worker_t *w) {
    sl_cache_bell_t *b = w->cache_bell;
    if (!b) return;
    w->cache_bell = NULL;
    sl_cache_bell_remove(b); /* from here on nobody rings it */
    while (!sl_list_empty(&b->waiters)) sl_list_remove(b->waiters.next); /* their timers go on */
    uv_close((uv_handle_t *)&b->async, bell_closed);
}

static void wait_timed_out(sl_req_t *r) {
    sl_list_remove(&r->cache->wl);
    sl__req_wakeup(r);
}

int sl__cache_req_wait(sl_req_t *r, uint64_t ms) {
    if (sl__req_wait_ms(r, ms, SL_WAIT_SLEEP, wait_timed_out) != SL_OK) return SL_ERROR;
    sl_cache_bell_t *b = bell_of(r->w);
    if (b) sl_list_push_back(&b->waiters, &r->cache->wl); /* without one (draining), the timer alone */
    return SL_OK;
}

void sl__cache_req_free(sl_req_t *r) {
    sl_cache_req_t *c = r->cache;
    sl_list_remove(&c->wl);
    capture_drop(c);
    unlock(c, false);
    sl_cache_release(c->held);
    sl_cache_release(c->stale);
    r->cache = NULL;
}
