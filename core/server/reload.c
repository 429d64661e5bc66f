/* reload.c — config generations: rebuild, swap worker sets, retire the old ones.
 *
 * A reload builds the new config exactly as a start does (YAML, plugins,
 * schemas). A rejected build changes nothing. An accepted one starts a new set
 * of workers, each with a fresh LuaJIT VM loaded with the new plugins, on
 * dup()s of the very same listening sockets (an unchanged listener keeps its
 * accept queue: no connection is refused), and only then tells the old set to
 * drain: the old workers stop accepting, finish their requests on the old
 * config and VM, and are joined and freed by a poll on the main loop, which also
 * folds their counters into their successors'. New or moved listeners get new
 * sockets, bound before any old one closes.
 */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/thread.h"
#include "base/wbuf.h"
#include "script/plugin.h"
#include "server/etcd.h"
#include "server/listen.h"
#include "upstream/cache.h"
#include "server/server.h"
#include "ctx/telemetry.h"
#include "server/notify.h"

#define SL_WATCH_MAX 256 /* folders watched (config, plugin folders and their folder plugins, the
                           generation's files) */

extern const char sl_default_conf[];
extern const size_t sl_default_conf_len;

static uint64_t hash_file(uint64_t h, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return h;
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) h = sl_fnv1a64(h, buf, n);
    fclose(f);
    return h;
}

/* Hashes one folder's plugin files (NAME.lua, and .lua files one folder down), in name order. */
static uint64_t hash_dir(uint64_t h, const char *dir, int depth) {
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        const char *nm = ents[i]->d_name;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, nm);
        size_t l = strlen(nm);
        if (nm[0] != '.') {
            if (l > 4 && strcmp(nm + l - 4, ".lua") == 0) {
                h = sl_fnv1a64(h, nm, l);
                h = hash_file(h, path);
            } else if (depth == 0 && ents[i]->d_type == DT_DIR) {
                h = hash_dir(h, path, 1);
            }
        }
        free(ents[i]);
    }
    free(ents);
    return h;
}

/* Plugin code: every .lua file of the plugin folders, and the lua_routes files. */
static uint64_t plugin_code_hash(const sl_config_t *cfg) {
    uint64_t h = SL_FNV64_INIT;
    for (size_t i = 0; i < cfg->nplugin_search; i++) h = hash_dir(h, cfg->plugin_search[i], 0);
    for (size_t i = 0; i < cfg->nlua_route_files; i++) h = hash_file(h, cfg->lua_route_files[i]);
    return h;
}

/* ---- the generation's files: what a config reads besides itself and plugin code ---- */

typedef struct {
    const char *kind; /* "cert" (TLS certificates, keys, CA and CRL files), "file" (read by
                         plugins: sluice.files, `*_file` keys) */
    char *path;       /* resolved, owned */
    uint64_t hash;    /* of the content; a file that cannot be read hashes as empty */
} gen_file_t;

typedef struct sl_gen_files_s sl_gen_files_t;
struct sl_gen_files_s {
    gen_file_t *v;
    size_t n, cap;
};

static void files_add(sl_gen_files_t *f, const char *kind, const char *path) {
    if (!path) return;
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->v[i].path, path)) return;
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        gen_file_t *v = realloc(f->v, cap * sizeof *v);
        if (!v) return;
        f->v = v, f->cap = cap;
    }
    char *p = strdup(path);
    if (!p) return;
    f->v[f->n++] = (gen_file_t){kind, p, hash_file(SL_FNV64_INIT, path)};
}

static void files_free(sl_gen_files_t *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free(f->v[i].path);
    free(f->v);
    free(f);
}

/* The files of cfg, each with the hash of its content now. NULL only when out of memory. */
static sl_gen_files_t *gen_files(const sl_config_t *cfg) {
    sl_gen_files_t *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        const sl_tls_listener_conf_t *t = cfg->listeners[i].tls;
        for (size_t j = 0; t && j < t->ncerts; j++) {
            files_add(f, "cert", t->certs[j].cert_path);
            files_add(f, "cert", t->certs[j].key_path);
        }
        const sl_tls_client_auth_conf_t *a = t ? t->client_auth : NULL; /* a replaced CRL */
        if (a) files_add(f, "cert", a->ca_path);
        if (a) files_add(f, "cert", a->crl_path);
    }
    for (size_t u = 0; u < cfg->nupstreams; u++)
        for (size_t j = 0; j < cfg->upstreams[u].ntargets; j++) {
            const sl_tls_target_conf_t *t = cfg->upstreams[u].targets[j].tls;
            if (t) files_add(f, "cert", t->ca_path);
            if (t) files_add(f, "cert", t->cert_path);
            if (t) files_add(f, "cert", t->key_path);
        }
    for (size_t i = 0; i < cfg->nplugin_files; i++) files_add(f, "file", cfg->plugin_files[i]);
    return f;
}

static uint64_t files_hash(const sl_gen_files_t *f) {
    uint64_t h = SL_FNV64_INIT;
    for (size_t i = 0; f && i < f->n; i++) {
        h = sl_fnv1a64(h, f->v[i].path, strlen(f->v[i].path) + 1);
        h = sl_fnv1a64(h, &f->v[i].hash, sizeof f->v[i].hash);
    }
    return h;
}

/* Everything a config reads besides itself: plugin code and the generation's files. */
static uint64_t code_hash(const sl_config_t *cfg) {
    sl_gen_files_t *f = gen_files(cfg);
    uint64_t h = files_hash(f), c = plugin_code_hash(cfg);
    files_free(f);
    return sl_fnv1a64(h, &c, sizeof c);
}

uint64_t sl_config_hash(const sl_config_t *cfg, const char *text, size_t len) {
    uint64_t c = code_hash(cfg);
    return sl_fnv1a64(sl_fnv1a64(SL_FNV64_INIT, text, len), &c, sizeof(c));
}

/* ---- what changed: one signature per route, upstream, listener and consumer ---- */

static uint64_t sig_route(const sl_config_t *c, const sl_route_conf_t *r) {
    uint64_t h = sl_fnv1a64(SL_FNV64_INIT, r->name, strlen(r->name));
    const char *up = r->upstream >= 0 ? c->upstreams[r->upstream].name : "-";
    h = sl_fnv1a64(h, up, strlen(up));
    h = sl_fnv1a64(h, &r->strip_prefix, sizeof(r->strip_prefix));
    for (size_t i = 0; i < r->nhosts; i++) h = sl_fnv1a64(h, r->hosts[i], strlen(r->hosts[i]) + 1);
    for (size_t i = 0; i < r->npaths; i++) h = sl_fnv1a64(h, r->paths[i], strlen(r->paths[i]) + 1);
    for (size_t i = 0; i < r->nmethods; i++) h = sl_fnv1a64(h, r->methods[i], strlen(r->methods[i]) + 1);
    for (size_t i = 0; i < r->nupgrade; i++) h = sl_fnv1a64(h, r->upgrade[i], strlen(r->upgrade[i]) + 1);
    for (size_t i = 0; i < r->nheaders; i++) {
        h = sl_fnv1a64(h, r->headers[i].name, strlen(r->headers[i].name) + 1);
        h = sl_fnv1a64(h, r->headers[i].value, strlen(r->headers[i].value) + 1);
    }
    for (size_t i = 0; i < r->nplugins; i++) {
        h = sl_fnv1a64(h, r->plugins[i].name, strlen(r->plugins[i].name) + 1);
        h = sl_fnv1a64(h, r->plugins[i].config_json, strlen(r->plugins[i].config_json) + 1);
    }
    return h;
}

/* A string, NUL included (NULL hashes as ""): "ab","c" and "a","bc" differ. */
static uint64_t hash_str(uint64_t h, const char *str) {
    return str ? sl_fnv1a64(h, str, strlen(str) + 1) : sl_fnv1a64(h, "", 1);
}

/* A target's `tls:` (none: a marker of its own, so adding `tls: {}` changes the target). */
static uint64_t sig_target_tls(uint64_t h, const sl_tls_target_conf_t *t) {
    if (!t) return sl_fnv1a64(h, "-", 1);
    h = sl_fnv1a64(h, &t->verify, sizeof t->verify);
    return hash_str(hash_str(h, t->ca), t->sni);
}

static uint64_t sig_upstream(const sl_upstream_conf_t *u) {
    uint64_t h = sl_fnv1a64(SL_FNV64_INIT, u->name, strlen(u->name));
    for (size_t i = 0; i < u->ntargets; i++) { /* as written: a dynamic slot's address is not */
        if (u->targets[i].kind != SL_TARGET_STATIC) continue;
        h = sl_fnv1a64(h, u->targets[i].addr.text, strlen(u->targets[i].addr.text) + 1);
        h = sl_fnv1a64(h, &u->targets[i].weight, sizeof(u->targets[i].weight));
        h = sig_target_tls(h, u->targets[i].tls);
    }
    for (size_t i = 0; i < u->nnames; i++) {
        h = sl_fnv1a64(h, u->names[i].entry, strlen(u->names[i].entry) + 1);
        h = sl_fnv1a64(h, &u->names[i].weight, sizeof(u->names[i].weight));
        h = sig_target_tls(h, u->targets[u->names[i].first].tls); /* a name's slots share it */
    }
    h = sl_fnv1a64(h, &u->protocol, sizeof(u->protocol));
    uint64_t reg[3] = {u->registry, u->registry_max_ttl_ms, u->registry_slots};
    h = sl_fnv1a64(h, reg, sizeof(reg));
    uint64_t v[5] = {u->keepalive_max_idle, u->keepalive_idle_timeout_ms, u->connect_timeout_ms,
                     u->read_timeout_ms, u->write_timeout_ms};
    h = sl_fnv1a64(h, v, sizeof(v));
    /* Balancing, retries, breaker and health count too: a reload that changes only them
     * changes the upstream (field by field: the structs have padding). */
    const sl_retry_conf_t *rt = &u->retry;
    const sl_breaker_conf_t *bc = &u->breaker;
    const sl_health_conf_t *hc = &u->health;
    double d[3] = {u->hash_epsilon, bc->failure_ratio, 0};
    uint64_t w[] = {(uint64_t)u->balancer, (uint64_t)u->hash_on, rt->attempts, rt->on_flags, rt->nstatuses,
                    rt->backoff_ms, rt->max_backoff_ms, rt->max_body, rt->hedge_after_ms, bc->enabled,
                    bc->min_requests, bc->window_ms, bc->open_timeout_ms, bc->max_open_timeout_ms,
                    bc->half_open_requests, bc->success_threshold, (uint64_t)hc->active_type,
                    (uint64_t)hc->expect_status, hc->interval_ms, hc->timeout_ms, hc->healthy_threshold,
                    hc->unhealthy_threshold, hc->passive, hc->max_failures, hc->window_ms};
    h = sl_fnv1a64(h, d, sizeof(d));
    h = sl_fnv1a64(h, w, sizeof(w));
    h = sl_fnv1a64(h, rt->statuses, rt->nstatuses * sizeof(rt->statuses[0]));
    if (u->hash_name) h = sl_fnv1a64(h, u->hash_name, strlen(u->hash_name) + 1);
    if (hc->path) h = sl_fnv1a64(h, hc->path, strlen(hc->path) + 1);
    if (hc->service) h = sl_fnv1a64(h, hc->service, strlen(hc->service) + 1);
    return h;
}

static uint64_t sig_listener(const sl_listener_conf_t *l) {
    uint64_t h = sl_fnv1a64(SL_FNV64_INIT, l->listen.text, strlen(l->listen.text) + 1);
    for (size_t j = 0; l->tls && j < l->tls->ncerts; j++) { /* the files' content: a renewed certificate */
        if (l->tls->certs[j].cert_path) h = hash_file(h, l->tls->certs[j].cert_path);
        if (l->tls->certs[j].key_path) h = hash_file(h, l->tls->certs[j].key_path);
    }
    /* every key of the listener (field by field: the structs have padding); the files'
     * content also counts as cert:PATH */
    uint64_t v[] = {(uint64_t)l->protocol, l->max_body, l->max_header_size, l->max_request_line,
                    l->header_timeout_ms, l->idle_timeout_ms, (uint64_t)l->splice, (uint64_t)l->proxy_send,
                    l->accept_proxy, l->nproxy_from, l->ntrusted_proxies, l->http2, l->http2_max_streams};
    h = sl_fnv1a64(h, v, sizeof(v));
    for (size_t i = 0; i < l->nproxy_from; i++) {
        h = sl_fnv1a64(h, l->proxy_from[i].ip, sizeof l->proxy_from[i].ip);
        h = sl_fnv1a64(h, &l->proxy_from[i].bits, 1);
    }
    for (size_t i = 0; i < l->ntrusted_proxies; i++) {
        h = sl_fnv1a64(h, l->trusted_proxies[i].ip, sizeof l->trusted_proxies[i].ip);
        h = sl_fnv1a64(h, &l->trusted_proxies[i].bits, 1);
    }
    /* a tcp listener's upstream, by name (its index moves when upstreams are added) */
    h = hash_str(h, l->upstream_name);
    if (l->tls) {
        const sl_tls_listener_conf_t *t = l->tls;
        uint64_t tv[] = {(uint64_t)t->min_version, t->session_tickets, t->handshake_timeout_ms, t->ncerts};
        h = sl_fnv1a64(h, tv, sizeof(tv));
        h = hash_str(h, t->ciphers);
        for (size_t j = 0; j < t->ncerts; j++) {
            const sl_tls_cert_conf_t *c = &t->certs[j];
            h = hash_str(hash_str(h, c->cert), c->key);
            h = sl_fnv1a64(h, &c->is_default, sizeof c->is_default);
            for (size_t k = 0; k < c->nsni; k++) h = hash_str(h, c->sni[k]);
            h = sl_fnv1a64(h, &c->nsni, sizeof c->nsni);
        }
        if (t->client_auth) {
            const sl_tls_client_auth_conf_t *ca = t->client_auth;
            int cv[2] = {ca->mode, ca->depth};
            h = sl_fnv1a64(h, cv, sizeof(cv));
            h = hash_str(hash_str(h, ca->ca), ca->crl);
        }
    }
    for (size_t i = 0; i < l->nsni_routes; i++) {
        const sl_sni_route_conf_t *r = &l->sni_routes[i];
        for (size_t k = 0; k < r->nnames; k++) h = sl_fnv1a64(h, r->names[k], strlen(r->names[k]) + 1);
        h = sl_fnv1a64(h, r->upstream_name, strlen(r->upstream_name) + 1);
    }
    for (size_t i = 0; i < l->nplugins; i++) {
        h = sl_fnv1a64(h, l->plugins[i].name, strlen(l->plugins[i].name) + 1);
        h = sl_fnv1a64(h, l->plugins[i].config_json, strlen(l->plugins[i].config_json) + 1);
    }
    return h;
}

/* Credentials and groups: a consumer's new key changes what the auth plugins accept. */
static uint64_t sig_consumer(const sl_consumer_conf_t *c) {
    uint64_t h = sl_fnv1a64(SL_FNV64_INIT, c->name, strlen(c->name) + 1);
    if (c->credentials_json) h = sl_fnv1a64(h, c->credentials_json, strlen(c->credentials_json) + 1);
    for (size_t i = 0; i < c->ngroups; i++)
        if (c->groups[i]) h = sl_fnv1a64(h, c->groups[i], strlen(c->groups[i]) + 1);
    return h;
}

typedef struct {
    sl_wbuf_t b;
    int n;
} list_t;

/* Appends "kind:name" as a JSON string (a path may hold any byte: escaped). */
static void list_add(list_t *l, const char *kind, const char *name) {
    if (l->n++) SL_WBUF_LIT(&l->b, ",");
    SL_WBUF_LIT(&l->b, "\"");
    sl_wbuf_cat(&l->b, kind);
    SL_WBUF_LIT(&l->b, ":");
    sl_wbuf_json_str(&l->b, (sl_str_t){name, strlen(name)});
    SL_WBUF_LIT(&l->b, "\"");
}

/* Names of one config's items, sorted, with their index: DIFF pairs old and new items by a
 * merge of two sorted arrays (10,000 routes: a nested loop of strcmp took seconds of the
 * reload, scripts/bench-config-scale). */
typedef struct {
    const char *name;
    size_t i;
} named_t;

static int by_name(const void *a, const void *b) {
    return strcmp(((const named_t *)a)->name, ((const named_t *)b)->name);
}

/* Pairs a[0..na) with b[0..nb) by name (both sorted): pair[k] = the index in b of a[k]'s
 * namesake, or SIZE_MAX. */
static void pair_names(const named_t *a, size_t na, const named_t *b, size_t nb, size_t *pair) {
    size_t j = 0;
    for (size_t k = 0; k < na; k++) {
        while (j < nb && strcmp(b[j].name, a[k].name) < 0) j++;
        pair[a[k].i] = j < nb && strcmp(b[j].name, a[k].name) == 0 ? b[j].i : SIZE_MAX;
    }
}

/* The items of kind that are new, changed (SIG differs) or gone, new ones in the new
 * config's order, then the gone ones in the old one's. */
#define DIFF(kind, OA, ON, NA, NN, NAME, SIG)                                                \
    do {                                                                                     \
        size_t on_ = (ON), nn_ = (NN);                                                       \
        named_t *os_ = malloc((on_ + 1) * sizeof *os_), *ns_ = malloc((nn_ + 1) * sizeof *ns_); \
        size_t *op_ = malloc((on_ + 1) * sizeof *op_), *np_ = malloc((nn_ + 1) * sizeof *np_); \
        if (os_ && ns_ && op_ && np_) {                                                      \
            for (size_t j = 0; j < on_; j++) os_[j] = (named_t){NAME(&(OA)[j]), j};          \
            for (size_t i = 0; i < nn_; i++) ns_[i] = (named_t){NAME(&(NA)[i]), i};          \
            qsort(os_, on_, sizeof *os_, by_name);                                           \
            qsort(ns_, nn_, sizeof *ns_, by_name);                                           \
            pair_names(ns_, nn_, os_, on_, np_);                                             \
            pair_names(os_, on_, ns_, nn_, op_);                                             \
            for (size_t i = 0; i < nn_; i++)                                                 \
                if (np_[i] == SIZE_MAX || SIG(&(OA)[np_[i]]) != SIG(&(NA)[i]))               \
                    list_add(&l, kind, NAME(&(NA)[i]));                                      \
            for (size_t j = 0; j < on_; j++)                                                 \
                if (op_[j] == SIZE_MAX) list_add(&l, kind, NAME(&(OA)[j]));                  \
        }                                                                                    \
        free(os_);                                                                           \
        free(ns_);                                                                           \
        free(op_);                                                                           \
        free(np_);                                                                           \
    } while (0)

#define NAME_OF(x) ((x)->name)

/* "cert:PATH" / "file:PATH" for each file of the new generation that is new or whose
 * content differs from what the running one read. */
static void changed_files(list_t *l, const sl_gen_files_t *of, const sl_gen_files_t *nf) {
    for (size_t i = 0; nf && i < nf->n; i++) {
        bool same = false;
        for (size_t j = 0; of && j < of->n && !same; j++)
            same = !strcmp(of->v[j].path, nf->v[i].path) && of->v[j].hash == nf->v[i].hash;
        if (!same) list_add(l, nf->v[i].kind, nf->v[i].path);
    }
}

/* The top-level settings a reload can change besides the named things above, one
 * signature each: "settings:KEY" when it differs (never its value: a token is a secret). */
static uint64_t h_str(uint64_t h, const char *s) { return s ? sl_fnv1a64(h, s, strlen(s) + 1) : sl_fnv1a64(h, "", 1); }

static uint64_t sig_telemetry(const sl_config_t *c) {
    const sl_telemetry_conf_t *t = &c->telemetry;
    uint64_t v[4] = {t->enabled, t->port, t->timeout_ms, t->plugin_spans};
    uint64_t h = sl_fnv1a64(SL_FNV64_INIT, v, sizeof v);
    h = sl_fnv1a64(h, &t->sample_ratio, sizeof t->sample_ratio);
    h = h_str(h_str(h_str(h, t->host), t->path), t->service_name);
    for (size_t i = 0; i < t->nheaders; i++) h = h_str(h_str(h, t->headers[i].name), t->headers[i].value);
    return h;
}

static uint64_t sig_resolver(const sl_config_t *c) {
    const sl_resolver_conf_t *r = &c->resolver;
    uint64_t v[5] = {r->timeout_ms, r->attempts, r->min_ttl_ms, r->max_ttl_ms, r->ipv6};
    return h_str(sl_fnv1a64(SL_FNV64_INIT, v, sizeof v), r->nameservers);
}

static uint64_t sig_redis(const sl_config_t *c) { /* credentials: read from the environment */
    uint64_t v[3] = {c->redis_enabled, c->redis_timeout_ms, (uint64_t)c->redis_database};
    uint64_t h = h_str(sl_fnv1a64(SL_FNV64_INIT, v, sizeof v), c->redis_address.text);
    return h_str(h_str(h, c->redis_username), c->redis_password);
}

static uint64_t sig_admin(const sl_config_t *c) { /* the tokens: read from the environment */
    uint64_t h = sl_fnv1a64(SL_FNV64_INIT, c->admin_token, c->admin_token_len);
    return sl_fnv1a64(h, c->debug_token, c->debug_token_len);
}

static uint64_t sig_plugin_paths(const sl_config_t *c) {
    uint64_t h = SL_FNV64_INIT;
    for (size_t i = 0; i < c->nplugin_paths; i++) h = h_str(h, c->plugin_paths[i]);
    return h;
}

static uint64_t sig_u64(uint64_t v) { return sl_fnv1a64(SL_FNV64_INIT, &v, sizeof v); }

static void changed_settings(list_t *l, const sl_config_t *o, const sl_config_t *n) {
    struct {
        const char *key;
        uint64_t a, b;
    } s[] = {
        {"telemetry", sig_telemetry(o), sig_telemetry(n)},
        {"metrics", sig_u64(o->plugin_timing), sig_u64(n->plugin_timing)},
        {"resolver", sig_resolver(o), sig_resolver(n)},
        {"redis", sig_redis(o), sig_redis(n)},
        {"cache", sig_u64(o->cache_size), sig_u64(n->cache_size)},
        {"shutdown_timeout", sig_u64(o->shutdown_timeout_ms), sig_u64(n->shutdown_timeout_ms)},
        {"watch", sig_u64(o->watch), sig_u64(n->watch)},
        {"consumer_header", h_str(SL_FNV64_INIT, o->consumer_header), h_str(SL_FNV64_INIT, n->consumer_header)},
        {"admin", sig_admin(o), sig_admin(n)},
        {"plugin_paths", sig_plugin_paths(o), sig_plugin_paths(n)},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(s); i++)
        if (s[i].a != s[i].b) list_add(l, "settings", s[i].key);
}

static char *changed_list(const sl_config_t *o, const sl_config_t *n, bool code_changed,
                          const sl_gen_files_t *of, const sl_gen_files_t *nf) {
    list_t l = {SL_WBUF_GROWING(0), 0};
#define SIG_ROUTE(x) sig_route(((x) >= o->routes && (x) < o->routes + o->nroutes) ? o : n, (x))
    DIFF("route", o->routes, o->nroutes, n->routes, n->nroutes, NAME_OF, SIG_ROUTE);
    DIFF("upstream", o->upstreams, o->nupstreams, n->upstreams, n->nupstreams, NAME_OF, sig_upstream);
    DIFF("listener", o->listeners, o->nlisteners, n->listeners, n->nlisteners, NAME_OF, sig_listener);
    DIFF("consumer", o->consumers, o->nconsumers, n->consumers, n->nconsumers, NAME_OF, sig_consumer);
    uint64_t go = 0, gn = 0;
    for (size_t i = 0; i < o->nplugins; i++) go = sl_fnv1a64(sl_fnv1a64(go, o->plugins[i].name, strlen(o->plugins[i].name) + 1),
                                                   o->plugins[i].config_json, strlen(o->plugins[i].config_json));
    for (size_t i = 0; i < n->nplugins; i++) gn = sl_fnv1a64(sl_fnv1a64(gn, n->plugins[i].name, strlen(n->plugins[i].name) + 1),
                                                   n->plugins[i].config_json, strlen(n->plugins[i].config_json));
    if (go != gn) list_add(&l, "plugins", "global");
    if (code_changed) list_add(&l, "plugin_code", "*");
    changed_settings(&l, o, n);
    changed_files(&l, of, nf);
    char *text = sl_wbuf_take(&l.b);
    return text ? text : strdup("");
}

/* ---- retiring old worker sets ---- */

/* A reload's threads run at nice 19 while a worker is busy, so that a worker sharing their
 * core gets most of it; they still take slices of up to a tick from a queued worker
 * (docs/DECISIONS.md: on one busy core the build's CPU is the worker's wait; `worker_cpus`
 * keeps them off the workers' CPUs, and then they keep normal priority: no worker is
 * there to yield to). While the workers are idle the build runs at nice 0
 * and ends as soon as it can; after SL_RELOAD_BOOST_MS it stays at nice 0 whatever the
 * load, so that a machine busy with more than sluice still gets its reload. The main loop
 * decides every SL_RELOAD_TICK_MS from the workers' thread CPU clocks. Lowering is done
 * only where raising back is allowed (root, or RLIMIT_NICE of 20: privileges.c sets it
 * before leaving root); elsewhere the threads keep normal priority. */
#define SL_RELOAD_BOOST_MS 5000
/* The build's and the reap's stacks (base/thread.h: unmapped at the join): the config
 * parser and the VMs' loading run on them; Lua runs on its own stacks. */
#define SL_RELOAD_STACK (4u << 20)
#define SL_RELOAD_TICK_MS 20
#define SL_RELOAD_MAX_WORKERS 256 /* workers whose load is looked at */
/* A worker that used this share of a tick's CPU time is busy. */
#define SL_RELOAD_BUSY_PERCENT 25

static bool can_restore_priority(void) {
    struct rlimit nl;
    return geteuid() == 0 || (getrlimit(RLIMIT_NICE, &nl) == 0 && nl.rlim_cur >= 20);
}

/* apart: the thread runs on CPUs no worker is pinned to (worker_cpus): it keeps normal
 * priority, there is no worker there to yield to. */
static pid_t low_priority(const char *name, bool apart) {
    pthread_setname_np(pthread_self(), name);
    pid_t tid = (pid_t)syscall(SYS_gettid);
    if (!apart && can_restore_priority()) setpriority(PRIO_PROCESS, (id_t)tid, 19);
    return tid;
}

static void normal_priority(pid_t tid) {
    if (tid > 0) setpriority(PRIO_PROCESS, (id_t)tid, 0);
}

/* What is left of a retired generation once its workers stopped: their VMs and buffers,
 * its config. Freed on a thread of its own at nice 19, like a build: a 10,000-route
 * generation takes tens of milliseconds to free, then malloc_trim walks the heap. */
typedef struct sl_reaper_s {
    struct sl_reaper_s *next;
    sl_thread_t thread;
    pid_t tid; /* (atomic) its thread id once running */
    bool apart; /* on CPUs no worker is pinned to: normal priority (low_priority) */
    sl_worker_t *workers;
    int nworkers;
    int *listen_fds;
    sl_config_t *cfg; /* NULL: not this one's to free */
} reaper_t;

static void reap(reaper_t *rp) {
    for (int i = 0; i < rp->nworkers; i++) sl_worker_destroy(&rp->workers[i]);
    free(rp->workers);
    free(rp->listen_fds);
    if (rp->cfg) sl_config_free(rp->cfg);
}

static void *reaper_main(void *arg) {
    reaper_t *rp = arg;
    __atomic_store_n(&rp->tid, low_priority("sluice-reap", rp->apart), __ATOMIC_RELEASE);
    reap(rp);
    sl_heap_trim(); /* a generation's VMs and buffers are gone: give the pages back */
    return NULL;
}

/* Joins the reapers (all of them: cleanup; else those done). */
static void join_reapers(sl_server_t *srv, bool all) {
    for (reaper_t **pp = &srv->reapers; *pp;) {
        reaper_t *rp = *pp;
        if (!all && !sl_thread_tryjoin(&rp->thread)) {
            pp = &rp->next;
            continue;
        }
        if (all) {
            normal_priority(__atomic_load_n(&rp->tid, __ATOMIC_ACQUIRE)); /* the process is ending */
            sl_thread_join(&rp->thread);
        }
        *pp = rp->next;
        free(rp);
    }
}

/* The retired generation's workers stopped: joined here, the rest freed by a reaper (or
 * here when `now`, or when no thread can start). */
static void free_generation(sl_server_t *srv, sl_retired_t *r, bool now) {
    for (int i = 0; i < r->nworkers; i++) sl_worker_join(&r->workers[i]);
    sl_upgen_free(&srv->treg, r->ug); /* main loop: the target registry is its */
    reaper_t *rp = calloc(1, sizeof(*rp));
    reaper_t tmp = {0};
    reaper_t *use = rp ? rp : &tmp;
    use->workers = r->workers;
    use->nworkers = r->nworkers;
    use->listen_fds = r->listen_fds;
    use->cfg = r->cfg != srv->boot_cfg ? r->cfg : NULL; /* the first generation's belongs to main() */
    use->apart = sl__server_workers_apart(srv);
    if (!now && rp && sl_thread_start(&rp->thread, SL_RELOAD_STACK, reaper_main, rp) == SL_OK) {
        rp->next = srv->reapers;
        srv->reapers = rp;
        return;
    }
    reap(use);
    free(rp);
}

int sl__reload_retiring(const sl_server_t *srv) {
    int n = 0;
    for (const sl_retired_t *r = srv->retired; r; r = r->next) n++;
    for (const reaper_t *rp = srv->reapers; rp; rp = rp->next) n++;
    return n;
}

static void on_retire_poll(uv_timer_t *t) {
    sl_server_t *srv = t->data;
    join_reapers(srv, false);
    sl_retired_t **pp = &srv->retired;
    while (*pp) {
        sl_retired_t *r = *pp;
        bool done = true;
        for (int i = 0; i < r->nworkers; i++) done &= __atomic_load_n(&r->workers[i].stopped, __ATOMIC_ACQUIRE);
        if (!done) {
            pp = &r->next;
            continue;
        }
        /* The old workers' counters are final: their successors carry them on. */
        for (int i = 0; i < r->nworkers && i < srv->nworkers; i++)
            sl_metrics_fold(&srv->workers[i].metrics, srv->cfg, &r->workers[i].metrics, r->cfg);
        *pp = r->next;
        free_generation(srv, r, false);
        free(r);
    }
    if (!srv->retired && !srv->reapers) uv_timer_stop(&srv->retire_poll);
}

/* ---- sockets for the new generation ---- */

/* fds[listener][worker] of the new config: dup()s of an unchanged listener's sockets, new
 * sockets otherwise. texts[] gets each listener's real address. */
static int new_sockets(sl_server_t *srv, const sl_config_t *n, int **out_fds, char (**out_text)[80],
                       char *err, size_t errlen) {
    int nw = srv->nworkers;
    int *fds = malloc((n->nlisteners * (size_t)nw + 1) * sizeof(int));
    char(*texts)[80] = calloc(n->nlisteners + 1, sizeof(*texts));
    if (!fds || !texts) {
        free(fds);
        free(texts);
        snprintf(err, errlen, "out of memory");
        return SL_ERROR;
    }
    for (size_t i = 0; i < n->nlisteners * (size_t)nw; i++) fds[i] = -1;
    const sl_config_t *o = srv->cfg;
    /* The old listener whose sockets each new one takes over (-1: new sockets): the same
     * name and address as written (port 0 included: it keeps the port it got), else the
     * same bound address under another name (a renamed listener). Its own sockets, not new
     * ones beside them in the SO_REUSEPORT group: the connections queued on the old
     * sockets when the old workers close theirs would be reset. */
    ssize_t *from = malloc((n->nlisteners + 1) * sizeof *from);
    bool *taken = calloc(o->nlisteners + 1, sizeof *taken);
    if (!from || !taken) {
        free(from), free(taken), free(fds), free(texts);
        snprintf(err, errlen, "out of memory");
        return SL_ERROR;
    }
    for (size_t i = 0; i < n->nlisteners; i++) {
        from[i] = -1;
        for (size_t j = 0; j < o->nlisteners && from[i] < 0; j++)
            if (!taken[j] && !strcmp(o->listeners[j].name, n->listeners[i].name) &&
                !strcmp(o->listeners[j].listen.text, n->listeners[i].listen.text))
                from[i] = (ssize_t)j, taken[j] = true;
    }
    for (size_t i = 0; i < n->nlisteners; i++) {
        const struct sockaddr_storage *ss = &n->listeners[i].listen.ss;
        in_port_t port = ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
                                                   : ((const struct sockaddr_in *)ss)->sin_port;
        char bound[80];
        sl__addr_text(ss, bound, sizeof bound);
        for (size_t j = 0; j < o->nlisteners && from[i] < 0 && port; j++)
            if (!taken[j] && !strcmp(srv->listen_text[j], bound)) from[i] = (ssize_t)j, taken[j] = true;
    }
    for (size_t i = 0; i < n->nlisteners; i++) {
        const sl_listener_conf_t *nl = &n->listeners[i];
        ssize_t same = from[i];
        if (same >= 0) {
            for (int k = 0; k < nw; k++) fds[i * (size_t)nw + (size_t)k] = dup(srv->listen_fds[(size_t)same * (size_t)nw + (size_t)k]);
            memcpy(texts[i], srv->listen_text[same], sizeof(texts[i]));
            continue;
        }
        if (sl__listen_open(nl, nw, &fds[i * (size_t)nw], texts[i], sizeof(texts[i]), err, errlen) != SL_OK) {
            for (size_t q = 0; q < n->nlisteners * (size_t)nw; q++)
                if (fds[q] >= 0) close(fds[q]);
            free(fds);
            free(texts);
            free(from);
            free(taken);
            return SL_ERROR;
        }
    }
    free(from);
    free(taken);
    *out_fds = fds;
    *out_text = texts;
    return SL_OK;
}

/* ---- the reload ---- */

static char *json_error(sl_server_t *srv, const char *msg) {
    sl_wbuf_t b = SL_WBUF_GROWING(0);
    sl_wbuf_printf(&b, "{\"ok\":false,\"generation\":%llu,\"error\":", (unsigned long long)srv->generation);
    sl_wbuf_json_cstr(&b, msg);
    SL_WBUF_LIT(&b, "}\n");
    return sl_wbuf_take(&b);
}

static int reject(sl_server_t *srv, const char *why, const char *msg, char **json) {
    srv->reloads_rejected++;
    srv->last_reject_unix = (int64_t)time(NULL);
    snprintf(srv->last_reject_trigger, sizeof(srv->last_reject_trigger), "%s", why);
    free(srv->last_reject_error);
    srv->last_reject_error = strdup(msg);
    sl_log_err("reload (%s) rejected, still serving generation %llu: %s", why,
               (unsigned long long)srv->generation, msg);
    if (json) *json = json_error(srv, msg);
    return SL_ERROR;
}

/* A reload asked for: who hears the answer. */
typedef struct sl_reload_wait_s {
    struct sl_reload_wait_s *next;
    sl_reload_cb cb;
    void *ud;
    bool forced;
    char why[48];
} rwait_t;

/* One build: made on its thread (build_main), applied on the main loop (on_built). While
 * it runs, the thread reads srv->cfg and srv->config_hash, which only on_built changes. */
typedef struct sl_reload_job_s {
    sl_server_t *srv;
    rwait_t *waiters;
    char why[48];
    bool forced;
    bool tell;         /* the service manager heard RELOADING=1 */
    sl_thread_t thread;
    pid_t tid;         /* (atomic) the thread's id once running */
    uv_timer_t tick;   /* its priority, decided every SL_RELOAD_TICK_MS (on_tick) */
    bool tick_on;
    int nice;          /* the thread's nice value as last set */
    bool apart;        /* it runs apart from the workers' CPUs (worker_cpus): never lowered */
    uint64_t start_ns, tick_ns;
    uint64_t wcpu[SL_RELOAD_MAX_WORKERS]; /* the served workers' CPU clocks at the last tick */
    uint64_t etcd_hash;
    /* the thread's results */
    sl_config_t *n;    /* the new config (etcd: built on the main loop before the thread) */
    char *err;         /* why it is rejected (malloc'ed), or NULL */
    uint64_t hash;
    bool unchanged;    /* the running generation's content */
    sl_worker_t *ws;   /* the new workers, initialized (their VMs loaded), not started */
    int inited;
    const char *werr;
} sl_reload_job_t;

static char *errors_text(const sl_errors_t *errs) {
    size_t total = 1;
    for (size_t i = 0; i < errs->n; i++) total += strlen(errs->lines[i]) + 1;
    char *msg = malloc(total);
    if (!msg) return strdup("invalid config");
    msg[0] = 0;
    size_t off = 0;
    for (size_t i = 0; i < errs->n; i++)
        off += (size_t)snprintf(msg + off, total - off, "%s%s", i ? "\n" : "", errs->lines[i]);
    return msg;
}

/* The config file's text, or NULL with j->err. */
static char *read_config(sl_reload_job_t *j, size_t *len) {
    const char *path = j->srv->config_path;
    char *text = NULL;
    FILE *f = fopen(path, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (sz >= 0 && (text = malloc((size_t)sz + 1)) && fread(text, 1, (size_t)sz, f) == (size_t)sz) {
            *len = (size_t)sz;
            text[sz] = 0;
        } else {
            free(text);
            text = NULL;
        }
        fclose(f);
    }
    if (!text) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s: cannot read: %s", path, strerror(errno));
        j->err = strdup(msg);
    }
    return text;
}

/* Builds and validates exactly as a start does; j->n, or j->err. The etcd source builds on
 * the main loop (its key set changes there) and hands j->n over. */
static void build_config(sl_reload_job_t *j, char *text, size_t len) {
    sl_server_t *srv = j->srv;
    const char *src = text ? text : sl_default_conf;
    size_t srclen = text ? len : sl_default_conf_len;
    if (!j->n) {
        sl_errors_t errs = {0};
        int rc = sl_config_build(srv->config_path ? srv->config_path : "<embedded default>", src, srclen, &j->n, &errs);
        if (rc != 0) {
            j->err = errors_text(&errs);
            if (j->n) sl_config_free(j->n);
            j->n = NULL;
        }
        sl_errors_free(&errs);
        if (!j->n) return;
    }
    j->hash = sl_config_hash(j->n, src, srclen);
    if (srv->etcd) j->hash = sl_fnv1a64(j->hash, &j->etcd_hash, sizeof j->etcd_hash);
}

/* What a reload cannot change in this build, or NULL; *line and *col: where n writes it. */
static const char *needs_restart(const sl_config_t *o, const sl_config_t *n, int *line, int *col) {
    if (n->workers != o->workers) {
        *line = n->workers_line, *col = n->workers_col;
        return "'workers' changed: a restart applies it";
    }
    if (n->admin_enabled != o->admin_enabled ||
        (n->admin_enabled && strcmp(n->admin_listen.text, o->admin_listen.text) != 0)) {
        *line = n->admin_line, *col = n->admin_col;
        return "the admin listener changed: a restart applies it";
    }
    if ((n->run_user != NULL) != (o->run_user != NULL) ||
        (n->run_user && (n->run_uid != o->run_uid || n->run_gid != o->run_gid))) {
        *line = n->user_line, *col = n->user_col;
        return "'user' or 'group' changed: a restart applies it";
    }
    return NULL;
}

static void *build_main(void *arg) {
    sl_reload_job_t *j = arg;
    sl_server_t *srv = j->srv;
    __atomic_store_n(&j->tid, low_priority("sluice-reload", j->apart), __ATOMIC_RELEASE);
    if (!j->n) { /* (etcd's was built on the main loop) */
        size_t len = 0;
        char *text = NULL;
        if (srv->config_path && !(text = read_config(j, &len))) goto done;
        /* A watch event whose text and files are the running generation's (an editor's
         * second save, the write that a POST /reload already applied): unchanged without
         * parsing (10,000 routes: 30-80 ms of CPU saved). The hash is the one a build of
         * this text would compute: the text, then what the running config reads. */
        if (text && !j->forced && !srv->etcd) {
            j->hash = sl_config_hash(srv->cfg, text, len);
            if (j->hash == srv->config_hash) {
                free(text);
                j->unchanged = true;
                goto done;
            }
        }
        build_config(j, text, len);
        free(text);
        if (!j->n) goto done;
    }
    /* The same content as the running generation (config text and every file it reads):
     * a watch or etcd event that changed nothing is not applied (it would only churn VMs
     * and keep-alive connections). An explicit reload (SIGHUP, POST /reload, `sluice
     * reload`) always builds and swaps a new generation, as nginx and HAProxy do: what a
     * plugin fetched or derived at load (a JWKS, a key list) is read again even where the
     * core could not see that it changed. */
    j->unchanged = j->hash == srv->config_hash;
    if (j->unchanged && !j->forced) {
        sl_config_free(j->n);
        j->n = NULL;
        goto done;
    }
    int line = 1, col = 1;
    const char *restart = needs_restart(srv->cfg, j->n, &line, &col);
    if (restart) {
        const char *path = srv->config_path ? srv->config_path : "<embedded default>";
        size_t cap = strlen(path) + strlen(restart) + 32;
        if ((j->err = malloc(cap))) snprintf(j->err, cap, "%s:%d:%d: %s", path, line, col, restart);
        else j->werr = restart; /* rejected all the same, by apply() */
        goto done;
    }
    /* The new workers with their VMs loaded: the longest part of a reload. */
    int nw = srv->nworkers;
    j->ws = calloc((size_t)nw, sizeof(sl_worker_t));
    j->werr = j->ws ? NULL : "out of memory";
    for (int i = 0; j->ws && i < nw && !j->werr; i++) {
        if (sl_worker_init(&j->ws[i], srv, j->n, i, &j->werr) != SL_OK) break;
        j->inited++;
    }
done:
    uv_async_send(&srv->reload_async);
    return NULL;
}

static void destroy_workers(sl_worker_t *ws, int n) {
    for (int i = 0; i < n; i++) sl_worker_destroy(&ws[i]);
    free(ws);
}

/* Sockets, then workers, of the built generation; then the swap. Main loop. */
static int apply(sl_reload_job_t *j, char **json) {
    sl_server_t *srv = j->srv;
    const char *why = j->why;
    sl_config_t *n = j->n;
    int nw = srv->nworkers;
    if (j->werr) {
        char msg[600];
        snprintf(msg, sizeof(msg), "%s", j->werr);
        destroy_workers(j->ws, j->inited);
        sl_config_free(n);
        return reject(srv, why, msg, json);
    }
    sl_worker_t *ws = j->ws;
    char err[512] = "";
    int *fds = NULL;
    char(*texts)[80] = NULL;
    if (new_sockets(srv, n, &fds, &texts, err, sizeof(err)) != SL_OK) {
        destroy_workers(ws, nw);
        sl_config_free(n);
        return reject(srv, why, err, json);
    }
    sl_upgen_t *ug = sl_upgen_new(&srv->treg, n); /* targets kept by name and address keep their state */
    if (ug) sl_upgen_breakers_turned_on(srv->cfg, ug, sl_now_ms()); /* but a breaker turned on starts closed */
    const char *werr = ug ? NULL : "out of memory";
    /* the new slots filled from what discovery knows, before a worker can pick */
    bool bound = !werr && srv->disc && sl_discovery_bind(srv->disc, ug, &werr) == SL_OK;
    for (int i = 0; i < nw; i++) {
        ws[i].ug = ug;
        ws[i].generation = srv->generation + 1; /* the number it gets when swapped in */
        ws[i].nworkers = nw;
        ws[i].listen_fds = fds;
    }
    int started = 0;
    for (int i = 0; !werr && i < nw; i++) {
        if (sl_worker_start(&ws[i]) != SL_OK) {
            werr = "cannot start a worker";
            break;
        }
        started++;
    }
    if (werr) {
        char msg[600];
        snprintf(msg, sizeof(msg), "%s", werr);
        for (int i = 0; i < started; i++) sl_worker_drain(&ws[i]);
        for (int i = 0; i < started; i++) sl_worker_join(&ws[i]);
        destroy_workers(ws, nw);
        const char *berr;
        if (bound) sl_discovery_bind(srv->disc, srv->ug, &berr); /* back to the generation served */
        sl_upgen_free(&srv->treg, ug);
        for (size_t q = 0; q < n->nlisteners * (size_t)nw; q++)
            if (fds[q] >= 0 && (int)(q % (size_t)nw) >= started) close(fds[q]);
        free(fds);
        free(texts);
        sl_config_free(n);
        return reject(srv, why, msg, json);
    }
    /* The new workers acknowledge by running their loops. */
    int acked = 0;
    for (int spin = 0; spin < 1000 && acked < nw; spin++) {
        acked = 0;
        for (int i = 0; i < nw; i++) acked += __atomic_load_n(&ws[i].running, __ATOMIC_ACQUIRE);
        if (acked < nw) usleep(1000);
    }

    /* Swap, then retire the old set: it stops accepting and drains on its config. */
    sl_retired_t *old = calloc(1, sizeof(*old));
    if (old) {
        old->cfg = srv->cfg;
        old->ug = srv->ug;
        old->workers = srv->workers;
        old->nworkers = nw;
        old->listen_fds = srv->listen_fds;
        old->next = srv->retired;
        srv->retired = old;
    }
    for (int i = 0; i < nw; i++) {
        srv->workers[i].retiring = true; /* read by the worker after the async wakes it */
        sl_worker_drain(&srv->workers[i]);
    }
    uint64_t code = plugin_code_hash(n);
    sl_gen_files_t *files = gen_files(n);
    char *changed = changed_list(srv->cfg, n, code != srv->code_hash, srv->files, files);
    srv->code_hash = code;
    files_free(srv->files);
    srv->files = files;
    /* What the file watch compares with is what now runs (etcd's plugin folder included). */
    if (srv->config_path) {
        uint64_t c = sl_fnv1a64(files_hash(files), &code, sizeof code); /* code_hash(n), from what was read */
        srv->watch_hash = sl_fnv1a64(hash_file(SL_FNV64_INIT, srv->config_path), &c, sizeof c);
    }
    srv->workers = ws;
    srv->cfg = n;
    sl__server_place_main(srv); /* off the CPUs n's workers are pinned to */
    sl_cache_set_size(n->cache_size);
    srv->ug = ug;
    sl_health_stop(&srv->health); /* probers of the old generation; states carry over */
    sl_health_start(&srv->health, srv->loop, &srv->treg, ug);
    srv->listen_fds = fds;
    free(srv->listen_text);
    srv->listen_text = texts;
    if (srv->ready_file && sl__server_write_ready_file(srv) != SL_OK)
        sl_log_err("cannot write ready file %s", srv->ready_file);
    srv->generation++;
    srv->reloads_ok++;
    if (sl_telemetry_configure(&n->telemetry) != SL_OK) sl_log_err("telemetry: cannot start the exporter");
    srv->config_hash = j->hash;
    if (!srv->retire_poll_on) {
        uv_timer_init(srv->loop, &srv->retire_poll);
        srv->retire_poll.data = srv;
        srv->retire_poll_on = true;
    }
    uv_timer_start(&srv->retire_poll, on_retire_poll, 20, 20);

    bool unchanged = j->unchanged;
    sl_log_info("reload (%s): generation %llu applied, hash %016llx%s, changed [%s], %d/%d workers acked", why,
                (unsigned long long)srv->generation, (unsigned long long)j->hash,
                unchanged ? " (content unchanged: plugins loaded again)" : "", changed, acked, nw);
    if (json) {
        size_t cap = strlen(changed) + 256;
        *json = malloc(cap);
        if (*json)
            snprintf(*json, cap,
                     "{\"ok\":true,\"applied\":true,\"unchanged\":%s,\"generation\":%llu,\"hash\":\"%016llx\","
                     "\"changed\":[%s],\"workers_acked\":%d}\n",
                     unchanged ? "true" : "false", (unsigned long long)srv->generation, (unsigned long long)j->hash,
                     changed, acked);
    }
    sl__server_note_generation(srv, changed); /* takes changed */
    sl_server_watch(srv); /* plugin folders may have changed */
    return SL_OK;
}

/* The build's outcome as an answer; main loop. */
static int finish(sl_reload_job_t *j, char **json) {
    sl_server_t *srv = j->srv;
    if (sl_server_draining(srv)) {
        if (j->ws) destroy_workers(j->ws, j->inited);
        if (j->n) sl_config_free(j->n);
        return reject(srv, j->why, "the server is shutting down", json);
    }
    if (j->err) {
        if (j->ws) destroy_workers(j->ws, j->inited);
        if (j->n) sl_config_free(j->n);
        return reject(srv, j->why, j->err, json);
    }
    if (!j->n) { /* the running generation's content, not forced: nothing to apply */
        sl_log_info("reload (%s): content unchanged (hash %016llx), generation %llu keeps serving; nothing applied",
                    j->why, (unsigned long long)j->hash, (unsigned long long)srv->generation);
        if (json && (*json = malloc(192)))
            snprintf(*json, 192,
                     "{\"ok\":true,\"applied\":false,\"unchanged\":true,\"generation\":%llu,\"hash\":\"%016llx\","
                     "\"changed\":[]}\n",
                     (unsigned long long)srv->generation, (unsigned long long)j->hash);
        return SL_OK;
    }
    return apply(j, json);
}

static void start_job(sl_server_t *srv);

static void job_free(uv_handle_t *h) { free(h->data); }

/* CPU time a thread used (ns), or 0. */
static uint64_t thread_cpu_ns(const sl_thread_t *th) {
    clockid_t c;
    struct timespec ts;
    if (!th->stack || pthread_getcpuclockid(th->id, &c) != 0 || clock_gettime(c, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Every SL_RELOAD_TICK_MS while the build runs: nice 19 while a worker of the served
 * generation used SL_RELOAD_BUSY_PERCENT of the tick, else (and from SL_RELOAD_BOOST_MS
 * on) nice 0. */
static void on_tick(uv_timer_t *t) {
    sl_reload_job_t *j = t->data;
    sl_server_t *srv = j->srv;
    pid_t tid = __atomic_load_n(&j->tid, __ATOMIC_ACQUIRE);
    uint64_t now = sl_now_ns();
    bool busy = false;
    for (int i = 0; i < srv->nworkers && i < SL_RELOAD_MAX_WORKERS; i++) {
        uint64_t c = thread_cpu_ns(&srv->workers[i].thread);
        busy |= j->wcpu[i] && now > j->tick_ns &&
                (c - j->wcpu[i]) * 100 >= (now - j->tick_ns) * SL_RELOAD_BUSY_PERCENT;
        j->wcpu[i] = c;
    }
    j->tick_ns = now;
    bool late = now - j->start_ns >= (uint64_t)SL_RELOAD_BOOST_MS * 1000000;
    int want = busy && !late && !j->apart ? 19 : 0;
    if (late) uv_timer_stop(t);
    if (tid <= 0 || want == j->nice || !can_restore_priority()) return;
    if (late && j->nice)
        sl_log_info("reload (%s): still building after %d ms on a busy machine: at normal priority from now on",
                    j->why, SL_RELOAD_BOOST_MS);
    if (setpriority(PRIO_PROCESS, (id_t)tid, want) == 0) j->nice = want;
}

/* Answers every reload the job built for, then starts the next when more were asked. */
static void job_done(sl_reload_job_t *j, int rc, char *json) {
    sl_server_t *srv = j->srv;
    srv->reload_job = NULL;
    if (j->tell) sl_notify("READY=1");
    for (rwait_t *w = j->waiters, *next; w; w = next) {
        next = w->next;
        char *copy = json && next ? strdup(json) : NULL;
        if (w->cb)
            w->cb(srv, rc, next ? copy : json, w->ud);
        else
            free(next ? copy : json);
        if (!next) json = NULL;
        free(w);
    }
    free(json);
    free(j->err);
    if (j->tick_on)
        uv_close((uv_handle_t *)&j->tick, job_free); /* frees j once closed */
    else
        free(j);
    if (srv->reload_queue) start_job(srv);
}

static void on_built(uv_async_t *a) {
    sl_server_t *srv = a->data;
    sl_reload_job_t *j = srv->reload_job;
    if (!j || !j->thread.stack) return;
    sl_thread_join(&j->thread);
    char *json = NULL;
    int rc = finish(j, &json);
    job_done(j, rc, json);
}

/* Takes every reload asked for so far into one build. */
static void start_job(sl_server_t *srv) {
    rwait_t *q = srv->reload_queue;
    srv->reload_queue = NULL;
    bool draining = sl_server_draining(srv);
    sl_reload_job_t *j = draining ? NULL : calloc(1, sizeof(*j));
    if (!j) { /* the askers hear it now */
        for (rwait_t *w = q, *next; w; w = next) {
            next = w->next;
            char *json = NULL;
            int rc = reject(srv, w->why, draining ? "the server is shutting down" : "out of memory", &json);
            if (w->cb)
                w->cb(srv, rc, json, w->ud);
            else
                free(json);
            free(w);
        }
        return;
    }
    j->srv = srv;
    j->waiters = q;
    snprintf(j->why, sizeof j->why, "%s", q->why);
    for (rwait_t *w = q; w; w = w->next) j->forced |= w->forced;
    srv->reload_job = j;
    /* The service manager hears RELOADING=1 before the build and READY=1 after it, accepted
     * or rejected alike: either way the process is serving again (systemd's `reload`
     * returns then). Once draining (STOPPING=1 was sent) nothing more is said. */
    j->tell = !srv->embedded && !sl_server_draining(srv);
    if (j->tell) sl_notify_reloading();
    if (srv->etcd) { /* the local file's process keys and etcd's entries, plugins checked */
        size_t len = 0;
        char *text = srv->config_path ? read_config(j, &len) : NULL;
        if (!j->err) {
            sl_errors_t errs = {0};
            if (sl__etcd_build(srv->etcd, srv->config_path, text ? text : sl_default_conf,
                               text ? len : sl_default_conf_len, &j->n, &errs) != 0) {
                j->err = errors_text(&errs);
                if (j->n) sl_config_free(j->n);
                j->n = NULL;
            }
            sl_errors_free(&errs);
            j->etcd_hash = sl__etcd_hash(srv->etcd);
            if (j->n) build_config(j, text, len); /* the hash */
        }
        free(text);
        if (!j->n) {
            char *json = NULL;
            int rc = finish(j, &json);
            job_done(j, rc, json);
            return;
        }
    }
    j->start_ns = j->tick_ns = sl_now_ns();
    j->apart = sl__server_workers_apart(srv);
    j->nice = !j->apart && can_restore_priority() ? 19 : 0; /* what the thread starts at (low_priority) */
    for (int i = 0; i < srv->nworkers && i < SL_RELOAD_MAX_WORKERS; i++) j->wcpu[i] = thread_cpu_ns(&srv->workers[i].thread);
    if (uv_timer_init(srv->loop, &j->tick) == 0) {
        j->tick.data = j;
        j->tick_on = true;
        uv_timer_start(&j->tick, on_tick, SL_RELOAD_TICK_MS / 2, SL_RELOAD_TICK_MS);
    }
    if (sl_thread_start(&j->thread, SL_RELOAD_STACK, build_main, j) != SL_OK) {
        if (!j->err) j->err = strdup("cannot start the reload thread");
        char *json = NULL;
        int rc = finish(j, &json);
        job_done(j, rc, json);
    }
}

void sl_server_reload(sl_server_t *srv, const char *why, bool forced, sl_reload_cb cb, void *ud) {
    rwait_t *w = calloc(1, sizeof(*w));
    if (!w || sl_server_draining(srv) || !srv->reload_async_on) {
        free(w);
        char *json = NULL;
        int rc = reject(srv, why,
                        sl_server_draining(srv) ? "the server is shutting down" : !w ? "out of memory" : "no reloads in this process",
                        &json);
        if (cb) cb(srv, rc, json, ud);
        else free(json);
        return;
    }
    w->cb = cb;
    w->ud = ud;
    w->forced = forced;
    snprintf(w->why, sizeof w->why, "%s", why);
    rwait_t **pp = &srv->reload_queue;
    while (*pp) pp = &(*pp)->next;
    *pp = w;
    if (!srv->reload_job) start_job(srv);
}

/* ---- watching files ---- */

static void on_debounce(uv_timer_t *t) {
    sl_server_t *srv = t->data;
    uint64_t h = 0;
    /* An editor's save can fire several events, or none that changes content: reload only
     * when the content hash moved. */
    if (srv->config_path) {
        h = hash_file(SL_FNV64_INIT, srv->config_path);
        uint64_t c = code_hash(srv->cfg);
        h = sl_fnv1a64(h, &c, sizeof(c));
    }
    if (h == srv->watch_hash) return;
    srv->watch_hash = h;
    sl_server_reload(srv, "file change", false, NULL, NULL);
}

static void on_fs_event(uv_fs_event_t *h, const char *filename, int events, int status) {
    sl_server_t *srv = h->data;
    if (sl_server_draining(srv)) return;
    uv_timer_start(&srv->watch_debounce, on_debounce, 200, 0);
}

static void watches_free_cb(uv_handle_t *h) { (void)h; }

static void close_watches(sl_server_t *srv) {
    for (size_t i = 0; i < srv->nwatches; i++)
        if (!uv_is_closing((uv_handle_t *)&srv->watches[i]))
            uv_close((uv_handle_t *)&srv->watches[i], watches_free_cb);
    srv->nwatches = 0;
    for (size_t i = 0; i < srv->nwatch_dirs; i++) free(srv->watch_dirs[i]);
    srv->nwatch_dirs = 0;
}

/** Records the first generation's hashes and starts the etcd watch (start). */
void sl__reload_init(sl_server_t *srv) {
    srv->code_hash = plugin_code_hash(srv->cfg);
    srv->files = gen_files(srv->cfg);
    if (srv->config_path) {
        uint64_t c = sl_fnv1a64(files_hash(srv->files), &srv->code_hash, sizeof srv->code_hash);
        srv->watch_hash = sl_fnv1a64(hash_file(SL_FNV64_INIT, srv->config_path), &c, sizeof(c));
    }
    srv->config_hash = srv->config_path ? srv->watch_hash
                                        : sl_config_hash(srv->cfg, sl_default_conf, sl_default_conf_len);
    sl__server_note_generation(srv, NULL);
    uv_async_init(srv->loop, &srv->reload_async, on_built);
    srv->reload_async.data = srv;
    srv->reload_async_on = true;
    if (srv->cfg->source.enabled) sl_etcd_attach(srv); /* config_source: the watch runs on this loop */
}

/** Closes what reload and watch keep open (drain). */
void sl__reload_close(sl_server_t *srv) {
    /* A build in flight ends first; its askers hear that the server is shutting down. */
    if (srv->reload_job && srv->reload_job->thread.stack) {
        normal_priority(__atomic_load_n(&srv->reload_job->tid, __ATOMIC_ACQUIRE));
        sl_thread_join(&srv->reload_job->thread);
        char *json = NULL;
        int rc = finish(srv->reload_job, &json);
        job_done(srv->reload_job, rc, json);
    }
    if (srv->reload_async_on) {
        uv_close((uv_handle_t *)&srv->reload_async, NULL);
        srv->reload_async_on = false;
    }
    close_watches(srv);
    sl_etcd_close(srv);
    if (srv->watch_on) {
        uv_close((uv_handle_t *)&srv->watch_debounce, NULL);
        srv->watch_on = false;
    }
    if (srv->retire_poll_on) {
        uv_close((uv_handle_t *)&srv->retire_poll, NULL);
        srv->retire_poll_on = false;
    }
}

/** Joins and frees retired generations (after the loop ended). */
void sl__reload_free_retired(sl_server_t *srv) {
    while (srv->retired) {
        sl_retired_t *r = srv->retired;
        srv->retired = r->next;
        free_generation(srv, r, true);
        free(r);
    }
    join_reapers(srv, true);
    free(srv->watches);
    srv->watches = NULL;
    for (size_t i = 0; i < srv->nwatch_dirs; i++) free(srv->watch_dirs[i]);
    free(srv->watch_dirs);
    srv->watch_dirs = NULL;
    srv->nwatch_dirs = 0;
    files_free(srv->files);
    srv->files = NULL;
    free(srv->last_reject_error);
    srv->last_reject_error = NULL;
}

/* Watches dir unless it is watched already (a folder that does not exist gets a closed slot). */
static void watch_dir(sl_server_t *srv, const char *dir) {
    for (size_t i = 0; i < srv->nwatch_dirs; i++)
        if (!strcmp(srv->watch_dirs[i], dir)) return;
    if (srv->nwatches >= SL_WATCH_MAX) return;
    char *d = strdup(dir);
    if (!d) return;
    srv->watch_dirs[srv->nwatch_dirs++] = d;
    uv_fs_event_t *e = &srv->watches[srv->nwatches++];
    uv_fs_event_init(srv->loop, e);
    e->data = srv;
    if (uv_fs_event_start(e, on_fs_event, dir, 0) != 0) uv_close((uv_handle_t *)e, watches_free_cb);
}

/* A plugin folder and the folders one down (a folder plugin: NAME/init.lua, a Kong
 * plugin's NAME/handler.lua and schema.lua), whose .lua files are its code as much as
 * NAME.lua is (plugin_code_hash reads them): inotify reports only a watched folder's own
 * entries, so an edit in place of NAME/init.lua reloaded nothing. */
static void watch_dir_and_subdirs(sl_server_t *srv, const char *dir) {
    watch_dir(srv, dir);
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        if (ents[i]->d_name[0] != '.' && ents[i]->d_type == DT_DIR) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", dir, ents[i]->d_name);
            watch_dir(srv, path);
        }
        free(ents[i]);
    }
    free(ents);
}

/* The folder of path (a copy made in buf), for watch_dir. */
static const char *dir_of(const char *path, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", path);
    return dirname(buf);
}

void sl_server_watch(sl_server_t *srv) {
    if (!srv->config_path || !srv->cfg->watch) {
        if (srv->nwatches) close_watches(srv);
        return;
    }
    if (!srv->watch_on) {
        uv_timer_init(srv->loop, &srv->watch_debounce);
        srv->watch_debounce.data = srv;
        srv->watch_on = true;
        srv->watches = calloc(SL_WATCH_MAX, sizeof(uv_fs_event_t));
        srv->watch_dirs = calloc(SL_WATCH_MAX, sizeof(char *));
        if (!srv->watches || !srv->watch_dirs) return;
    }
    if (!srv->watches || !srv->watch_dirs) return;
    /* The config file's folder, the plugin folders, the lua_routes files' folders, and the
     * folders of the generation's files (certificates, files plugins read): a renewed certificate or a rotated JWKS
     * reloads like an edited config. Folders a new generation adds are watched from then
     * on; none is dropped (a folder no longer used only costs a debounce that finds the
     * content unchanged). */
    char buf[4096];
    watch_dir(srv, dir_of(srv->config_path, buf, sizeof buf));
    for (size_t i = 0; i < srv->cfg->nplugin_search; i++) watch_dir_and_subdirs(srv, srv->cfg->plugin_search[i]);
    for (size_t i = 0; i < srv->cfg->nlua_route_files; i++) /* in a folder of their own, maybe */
        watch_dir(srv, dir_of(srv->cfg->lua_route_files[i], buf, sizeof buf));
    for (size_t i = 0; srv->files && i < srv->files->n; i++)
        watch_dir(srv, dir_of(srv->files->v[i].path, buf, sizeof buf));
}
