/* router.c — the route matcher: host tables, radix trees of path prefixes, method bitsets.
 *
 * A route becomes one entry per (host, path prefix) pair. Entries are grouped in lists by
 * host: one per exact host, one per wildcard suffix (".example.com" for *.example.com),
 * one for the routes without hosts. Each list is a radix tree over its prefixes: a node
 * holds the entries whose prefix ends exactly there, sorted by (more conditions, file
 * order). A request walks the tree along its path once; the deepest node with entries
 * holds the longest matching prefix, and each node links to the nearest ancestor with
 * entries (`up`), so the candidates come out in precedence order without a stack. Only
 * those candidates pay for their method and header checks.
 *
 * Everything lives in a few arrays addressed by index (nodes, entries, bytes), so the
 * router is a handful of allocations however many routes it holds, and a lookup
 * allocates nothing.
 */
#include "config/router.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

#define NONE UINT32_MAX

typedef struct {
    uint32_t route;   /* index of the route in the config */
    uint32_t strip;   /* bytes strip_prefix removes (the prefix's length, or 0) */
    uint32_t mset;    /* word offset of the method bitset in msets; NONE: any method */
    uint32_t hdr;     /* header conditions: hdrs[hdr .. hdr + nhdr) */
    uint16_t nhdr;
    uint8_t lua;      /* the route's match is a Lua function */
} entry_t;

typedef struct {
    uint32_t label, label_len; /* the edge from the parent: bytes[label .. +label_len) */
    uint32_t child, nchild;    /* children: nodes[child .. child + nchild), by first byte */
    uint32_t up;               /* the nearest proper ancestor with entries, or NONE */
    uint32_t ent, nent;        /* entries[ent .. ent + nent), in precedence order */
} node_t;

typedef struct {
    uint32_t name, name_len, value, value_len; /* in bytes */
} hdr_t;

/* Open addressing over (bytes offset, length) keys; val NONE marks an empty slot. */
typedef struct {
    uint32_t key, len, val;
} slot_t;
typedef struct {
    slot_t *v;
    uint32_t mask, n; /* n: keys held (a request skips an empty table: no hash to compute) */
} table_t;

struct sl_router_s {
    node_t *nodes;
    uint8_t *first; /* first[i]: the first byte of node i's label (siblings are searched with memchr) */
    uint32_t nnodes, cnodes;
    entry_t *ents;
    uint32_t nents, cents;
    hdr_t *hdrs;
    uint32_t nhdrs, chdrs;
    uint64_t *msets;
    uint32_t nmsets, cmsets;
    char *bytes;
    uint32_t nbytes, cbytes;
    table_t exact, wild, methods; /* host -> tree root; ".suffix" -> tree root; method -> bit */
    uint32_t none;                /* the tree of the routes without hosts, or NONE */
    bool oom;
};

/* ---- growth of the arrays (build time only) ---- */

static bool grow(sl_router_t *rt, void **p, uint32_t *cap, uint32_t need, size_t size) {
    if (need <= *cap) return true;
    uint32_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *n = realloc(*p, (size_t)c * size);
    if (!n) {
        rt->oom = true;
        return false;
    }
    *p = n;
    *cap = c;
    return true;
}

static uint32_t put_bytes(sl_router_t *rt, const char *p, size_t n) {
    if (rt->nbytes + n + 1 > UINT32_MAX / 2 || !grow(rt, (void **)&rt->bytes, &rt->cbytes, rt->nbytes + (uint32_t)n + 1, 1))
        return rt->oom = true, 0;
    uint32_t off = rt->nbytes;
    if (n) memcpy(rt->bytes + off, p, n);
    rt->bytes[off + n] = 0;
    rt->nbytes += (uint32_t)n + 1;
    return off;
}

/* ---- byte-string tables ---- */

static uint64_t hash(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static bool table_init(sl_router_t *rt, table_t *t, size_t n) {
    uint32_t cap = 8;
    while (cap < n * 2) cap <<= 1;
    if (!(t->v = malloc(cap * sizeof *t->v))) return rt->oom = true, false;
    for (uint32_t i = 0; i < cap; i++) t->v[i].val = NONE;
    t->mask = cap - 1;
    return true;
}

static slot_t *table_slot(const sl_router_t *rt, const table_t *t, const char *p, size_t n) {
    for (uint32_t k = (uint32_t)hash(p, n) & t->mask;; k = (k + 1) & t->mask) {
        slot_t *s = &t->v[k];
        if (s->val == NONE || (s->len == n && memcmp(rt->bytes + s->key, p, n) == 0)) return s;
    }
}

static uint32_t table_get(const sl_router_t *rt, const table_t *t, const char *p, size_t n) {
    return t->n ? table_slot(rt, t, p, n)->val : NONE;
}

/* ---- build ---- */

/* An entry before its list is a tree: the prefix it ends at, and the entry. */
typedef struct {
    const char *prefix;
    uint32_t plen, nconds;
    entry_t e;
} item_t;

typedef struct {
    slot_t *slot; /* its key's slot in rt->exact or rt->wild; NULL: the list without hosts */
    item_t *items;
    uint32_t n, cap;
} list_t;

/* Sorted by prefix bytes (a prefix before every longer string it begins), then more
 * conditions first, then file order: the tree build reads each prefix's entries as one
 * run, already in precedence order. */
static int item_cmp(const void *a_, const void *b_) {
    const item_t *a = a_, *b = b_;
    uint32_t n = a->plen < b->plen ? a->plen : b->plen;
    int c = n ? memcmp(a->prefix, b->prefix, n) : 0;
    if (c) return c;
    if (a->plen != b->plen) return a->plen < b->plen ? -1 : 1;
    if (a->nconds != b->nconds) return a->nconds > b->nconds ? -1 : 1;
    return a->e.route < b->e.route ? -1 : a->e.route > b->e.route;
}

static uint32_t new_nodes(sl_router_t *rt, uint32_t n) {
    if (!grow(rt, (void **)&rt->nodes, &rt->cnodes, rt->nnodes + n, sizeof *rt->nodes)) return NONE;
    uint32_t cap = rt->cnodes;
    uint8_t *f = realloc(rt->first, cap);
    if (!f) return rt->oom = true, NONE;
    rt->first = f;
    uint32_t at = rt->nnodes;
    rt->nnodes += n;
    return at;
}

/* Fills node `at` from items[lo..hi) (sorted, all sharing their first d bytes, which are
 * the node's whole prefix): its entries are the run of items whose prefix is exactly d
 * bytes long; the rest split into children by their byte at d, each child's label running
 * to the longest prefix its items share. */
static void build_node(sl_router_t *rt, uint32_t at, item_t *it, uint32_t lo, uint32_t hi, uint32_t d,
                       uint32_t up) {
    uint32_t j = lo;
    while (j < hi && it[j].plen == d) j++;
    if (!grow(rt, (void **)&rt->ents, &rt->cents, rt->nents + (j - lo), sizeof *rt->ents)) return;
    rt->nodes[at].ent = rt->nents;
    rt->nodes[at].nent = j - lo;
    for (uint32_t i = lo; i < j; i++) rt->ents[rt->nents++] = it[i].e;
    uint32_t below = j > lo ? at : up;
    uint32_t nchild = 0;
    for (uint32_t i = j; i < hi; i++)
        if (i == j || it[i].prefix[d] != it[i - 1].prefix[d]) nchild++;
    rt->nodes[at].nchild = nchild;
    if (!nchild) return;
    uint32_t c = new_nodes(rt, nchild);
    if (c == NONE) return;
    rt->nodes[at].child = c;
    for (uint32_t a = j, k = 0; a < hi; k++) {
        uint32_t b = a + 1;
        while (b < hi && it[b].prefix[d] == it[a].prefix[d]) b++;
        /* the group's common prefix: that of its first and last items (they are sorted) */
        uint32_t l = d + 1, m = it[a].plen < it[b - 1].plen ? it[a].plen : it[b - 1].plen;
        while (l < m && it[a].prefix[l] == it[b - 1].prefix[l]) l++;
        uint32_t label = put_bytes(rt, it[a].prefix + d, l - d);
        if (rt->oom) return;
        rt->nodes[c + k] = (node_t){.label = label, .label_len = l - d, .up = below};
        rt->first[c + k] = (uint8_t)it[a].prefix[d];
        build_node(rt, c + k, it, a, b, l, below);
        if (rt->oom) return;
        a = b;
    }
}

static uint32_t build_tree(sl_router_t *rt, list_t *l) {
    qsort(l->items, l->n, sizeof *l->items, item_cmp);
    uint32_t root = new_nodes(rt, 1);
    if (root == NONE) return NONE;
    rt->nodes[root] = (node_t){.up = NONE};
    rt->first[root] = 0;
    build_node(rt, root, l->items, 0, l->n, 0, NONE);
    return root;
}

/* The same count as the Lua reference's conditions(): a match function is one condition on
 * top of the "/" it implies when the route has no paths. */
static uint32_t conditions(const sl_route_def_t *r) {
    uint32_t n = r->match_fn ? (r->npaths ? 1 : 2) : 0;
    return n + (r->nhosts > 0) + (r->npaths > 0) + (r->nmethods > 0) + r->nheaders;
}

/* The list of an exact host or a wildcard suffix (its tables map the key to the list's
 * position while the routes are collected, to the tree's root afterwards), or the list of
 * the routes without hosts (key NULL). */
static list_t *find_list(sl_router_t *rt, list_t **ls, uint32_t *n, uint32_t *cap, const char *key, bool wild) {
    slot_t *s = NULL;
    if (key) {
        s = table_slot(rt, wild ? &rt->wild : &rt->exact, key, strlen(key));
        if (s->val != NONE) return &(*ls)[s->val];
    } else if (rt->none != NONE) {
        return &(*ls)[rt->none];
    }
    if (*n == *cap) {
        uint32_t c = *cap ? *cap * 2 : 8;
        list_t *v = realloc(*ls, c * sizeof *v);
        if (!v) return NULL;
        *ls = v;
        *cap = c;
    }
    if (s) {
        s->len = (uint32_t)strlen(key);
        s->key = put_bytes(rt, key, s->len);
        s->val = *n;
        (wild ? &rt->wild : &rt->exact)->n++;
    } else {
        rt->none = *n;
    }
    (*ls)[*n] = (list_t){.slot = s};
    return &(*ls)[(*n)++];
}

static bool list_add(list_t *l, item_t it) {
    if (l->n == l->cap) {
        uint32_t c = l->cap ? l->cap * 2 : 8;
        item_t *v = realloc(l->items, c * sizeof *v);
        if (!v) return false;
        l->items = v;
        l->cap = c;
    }
    l->items[l->n++] = it;
    return true;
}

/* The method's bit, given an id per distinct method of the config. */
static uint32_t method_id(sl_router_t *rt, const char *m) {
    size_t n = strlen(m);
    slot_t *s = table_slot(rt, &rt->methods, m, n);
    if (s->val == NONE) {
        s->key = put_bytes(rt, m, n);
        s->len = (uint32_t)n;
        s->val = rt->methods.n++;
    }
    return s->val;
}

/* One method bitset per route that lists methods. */
static uint32_t method_set(sl_router_t *rt, const sl_route_def_t *r, uint32_t words) {
    if (!r->nmethods) return NONE;
    if (!grow(rt, (void **)&rt->msets, &rt->cmsets, rt->nmsets + words, sizeof *rt->msets)) return NONE;
    uint32_t at = rt->nmsets;
    memset(rt->msets + at, 0, words * sizeof *rt->msets);
    for (uint32_t i = 0; i < r->nmethods; i++) {
        uint32_t id = table_get(rt, &rt->methods, r->methods[i], strlen(r->methods[i]));
        rt->msets[at + id / 64] |= 1ull << (id % 64);
    }
    rt->nmsets += words;
    return at;
}

/* lists: a list per host key and one for no host, each item one (route, prefix) pair. */
static bool collect(sl_router_t *rt, const sl_route_def_t *routes, size_t n, list_t **ls, uint32_t *nls,
                    uint32_t *cls) {
    size_t nmeth = 0, nhost = 0;
    for (size_t i = 0; i < n; i++) {
        nmeth += routes[i].nmethods;
        nhost += routes[i].nhosts;
    }
    if (!table_init(rt, &rt->methods, nmeth) || !table_init(rt, &rt->exact, nhost) ||
        !table_init(rt, &rt->wild, nhost))
        return false;
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < routes[i].nmethods; k++) method_id(rt, routes[i].methods[k]);
    uint32_t words = rt->methods.n ? (rt->methods.n + 63) / 64 : 1;
    for (size_t i = 0; i < n && !rt->oom; i++) {
        const sl_route_def_t *r = &routes[i];
        entry_t e = {.route = (uint32_t)i, .mset = method_set(rt, r, words), .hdr = rt->nhdrs,
                     .nhdr = (uint16_t)r->nheaders, .lua = r->match_fn};
        if (!grow(rt, (void **)&rt->hdrs, &rt->chdrs, rt->nhdrs + r->nheaders, sizeof *rt->hdrs)) return false;
        for (uint32_t k = 0; k < r->nheaders; k++) {
            const char *name = r->headers[2 * k], *value = r->headers[2 * k + 1];
            size_t nl = strlen(name), vl = strlen(value);
            hdr_t h = {.name_len = (uint32_t)nl, .value_len = (uint32_t)vl};
            h.name = put_bytes(rt, name, nl);
            h.value = put_bytes(rt, value, vl);
            rt->hdrs[rt->nhdrs++] = h;
        }
        uint32_t nconds = conditions(r);
        /* no paths: every path (prefix ""), or "/" for a match function, as in the reference */
        const char *dflt = r->match_fn ? "/" : "";
        uint32_t npaths = r->npaths ? r->npaths : 1;
        uint32_t nhosts = r->nhosts ? r->nhosts : 1;
        for (uint32_t h = 0; h < nhosts; h++) {
            const char *host = r->nhosts ? r->hosts[h] : NULL;
            bool wild = host && host[0] == '*' && host[1] == '.';
            const char *key = host ? host + wild : NULL; /* a wildcard's key is ".suffix" */
            list_t *l = find_list(rt, ls, nls, cls, key, wild);
            if (!l) return rt->oom = true, false;
            for (uint32_t p = 0; p < npaths; p++) {
                const char *prefix = r->npaths ? r->paths[p] : dflt;
                item_t it = {.prefix = prefix, .plen = (uint32_t)strlen(prefix), .nconds = nconds, .e = e};
                it.e.strip = r->strip_prefix ? it.plen : 0;
                if (!list_add(l, it)) return rt->oom = true, false;
            }
        }
    }
    return !rt->oom;
}

sl_router_t *sl_router_build(const sl_route_def_t *routes, size_t n, const char **err) {
    sl_router_t *rt = calloc(1, sizeof *rt);
    list_t *ls = NULL;
    uint32_t nls = 0, cls = 0;
    if (!rt) goto fail;
    rt->none = NONE;
    if (!collect(rt, routes, n, &ls, &nls, &cls)) goto fail;
    uint32_t none = rt->none;
    rt->none = NONE;
    for (uint32_t i = 0; i < nls && !rt->oom; i++) {
        uint32_t root = build_tree(rt, &ls[i]);
        if (root == NONE) goto fail;
        if (ls[i].slot) ls[i].slot->val = root;
        else if (i == none) rt->none = root;
    }
    if (rt->oom) goto fail;
    for (uint32_t i = 0; i < nls; i++) free(ls[i].items);
    free(ls);
    return rt;
fail:
    for (uint32_t i = 0; i < nls; i++) free(ls[i].items);
    free(ls);
    sl_router_free(rt);
    *err = "out of memory compiling the routes";
    return NULL;
}

void sl_router_free(sl_router_t *rt) {
    if (!rt) return;
    free(rt->nodes);
    free(rt->first);
    free(rt->ents);
    free(rt->hdrs);
    free(rt->msets);
    free(rt->bytes);
    free(rt->exact.v);
    free(rt->wild.v);
    free(rt->methods.v);
    free(rt);
}

/* ---- lookup ---- */

/* The child of node n whose label starts with byte b, or NONE. Few children (the common
 * case: "/" under the root, a handful of stems) are compared in a loop, more with memchr:
 * a libc call costs more than a short loop. */
static inline uint32_t child_of(const sl_router_t *rt, const node_t *n, unsigned char b) {
    const uint8_t *f = rt->first + n->child;
    if (n->nchild <= 8) {
        for (uint32_t i = 0; i < n->nchild; i++)
            if (f[i] == b) return n->child + i;
        return NONE;
    }
    const uint8_t *hit = memchr(f, b, n->nchild);
    return hit ? (uint32_t)(hit - rt->first) : NONE;
}

/* The deepest node of tree `root` whose whole prefix begins path and that holds entries. */
static uint32_t deepest(const sl_router_t *rt, uint32_t root, const char *path, size_t plen) {
    const node_t *nodes = rt->nodes;
    uint32_t best = nodes[root].nent ? root : NONE, cur = root;
    size_t pos = 0;
    while (pos < plen && nodes[cur].nchild) {
        uint32_t c = child_of(rt, &nodes[cur], (unsigned char)path[pos]);
        if (c == NONE) break;
        const node_t *n = &nodes[c];
        if (n->label_len > plen - pos) break;
        /* the first byte matched already; labels are short, so byte by byte */
        const char *l = rt->bytes + n->label, *p = path + pos;
        uint32_t i = 1;
        while (i < n->label_len && l[i] == p[i]) i++;
        if (i < n->label_len) break;
        pos += n->label_len;
        cur = c;
        if (n->nent) best = c;
    }
    return best;
}

/* The first header of q named like h (case-insensitive) has h's value, byte for byte. */
static bool header_holds(const sl_router_t *rt, const hdr_t *h, const sl_route_query_t *q) {
    sl_str_t name = {rt->bytes + h->name, h->name_len};
    const char *at = (const char *)q->headers;
    for (uint32_t i = 0; i < q->nheaders; i++, at += q->header_stride) {
        sl_route_header_t x;
        memcpy(&x, at, sizeof x); /* the caller's struct may be a larger one that starts alike */
        if (!sl_str_ieq2((sl_str_t){x.name, x.name_len}, name)) continue;
        return x.value_len == h->value_len && memcmp(x.value, rt->bytes + h->value, x.value_len) == 0;
    }
    return false;
}

static bool entry_holds(const sl_router_t *rt, const entry_t *e, const sl_route_query_t *q, uint32_t method) {
    if (e->mset != NONE && (method == NONE || !((rt->msets[e->mset + method / 64] >> (method % 64)) & 1)))
        return false;
    for (uint32_t i = 0; i < e->nhdr; i++)
        if (!header_holds(rt, &rt->hdrs[e->hdr + i], q)) return false;
    return true;
}

enum { T_START, T_EXACT, T_WILD, T_NONE, T_DONE };

/* Moves c to the next host class that has a tree with candidates for q: false at the end. */
static bool next_tree(const sl_router_t *rt, const sl_route_query_t *q, sl_route_cursor_t *c) {
    uint32_t root = NONE;
    while (root == NONE) {
        switch (c->tier) {
        case T_START:
            c->method = table_get(rt, &rt->methods, q->method, q->method_len);
            c->tier = T_EXACT;
            root = table_get(rt, &rt->exact, q->host, q->host_len);
            break;
        case T_EXACT:
            c->tier = rt->wild.n ? T_WILD : T_NONE;
            c->dot = 0;
            if (c->tier == T_NONE) {
                root = rt->none;
                break;
            }
            /* fall through */
        case T_WILD: {
            /* the suffixes at each '.' after the first byte, longest first: *.a.b.c before *.b.c */
            size_t from = (size_t)c->dot + 1;
            const char *d = from < q->host_len ? memchr(q->host + from, '.', q->host_len - from) : NULL;
            if (!d) {
                c->tier = T_NONE;
                root = rt->none;
                break;
            }
            c->dot = (int32_t)(d - q->host);
            root = table_get(rt, &rt->wild, d, q->host_len - (size_t)c->dot);
            break;
        }
        default:
            c->tier = T_DONE;
            return false;
        }
        if (root != NONE) root = deepest(rt, root, q->path, q->path_len);
    }
    c->node = root;
    c->k = 0;
    return true;
}

int sl_router_next(const sl_router_t *rt, const sl_route_query_t *q, sl_route_cursor_t *c) {
    if (c->tier == T_START && !next_tree(rt, q, c)) return -1;
    while (c->tier != T_DONE) {
        for (uint32_t n = c->node; n != NONE; n = c->node = rt->nodes[n].up, c->k = 0) {
            const node_t *node = &rt->nodes[n];
            while (c->k < node->nent) {
                const entry_t *e = &rt->ents[node->ent + c->k++];
                if (!entry_holds(rt, e, q, c->method)) continue;
                c->strip = e->strip;
                c->lua = e->lua;
                return (int)e->route;
            }
        }
        if (!next_tree(rt, q, c)) return -1;
    }
    return -1;
}
