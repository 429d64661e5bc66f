/* root.c — the document: sl_config_parse (YAML text to a node graph, the walk, the errors
 * sorted by position) and the top-level mapping: process keys (workers, worker_cpus,
 * watch, shutdown_timeout, user, group), `admin:`, `redis:`, plugin and lua_routes folders, consumer_header,
 * and the walk into each section in the order references need (upstreams before
 * listeners and routes). */

#include "config/parse.h"
#include "base/common.h"
#include "base/cpu.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <grp.h>
#include <pwd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

static int auto_workers(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    return n > AUTO_WORKERS_CAP ? AUTO_WORKERS_CAP : (int)n;
}

enum {
    G_WORKERS,
    G_WATCH,
    G_SHUTDOWN,
    G_PLUGIN_PATHS,
    G_ADMIN,
    G_PLUGINS,
    G_LISTENERS,
    G_UPSTREAMS,
    G_ROUTES,
    G_LUA_ROUTES,
    G_CONSUMERS,
    G_CONSUMER_HEADER,
    G_REDIS,
    G_RESOLVER,
    G_USER,
    G_GROUP,
    G_METRICS,
    G_TELEMETRY,
    G_CONFIG_SOURCE,
    G_CACHE,
    G_WORKER_CPUS,
    G_N
};
static const char *const top_keys[G_N] = {
    [G_WORKERS] = "workers",
    [G_WATCH] = "watch",
    [G_SHUTDOWN] = "shutdown_timeout",
    [G_PLUGIN_PATHS] = "plugin_paths",
    [G_ADMIN] = "admin",
    [G_PLUGINS] = "plugins",
    [G_LISTENERS] = "listeners",
    [G_UPSTREAMS] = "upstreams",
    [G_ROUTES] = "routes",
    [G_LUA_ROUTES] = "lua_routes",
    [G_CONSUMERS] = "consumers",
    [G_CONSUMER_HEADER] = "consumer_header",
    [G_REDIS] = "redis",
    [G_RESOLVER] = "resolver",
    [G_USER] = "user",
    [G_GROUP] = "group",
    [G_METRICS] = "metrics",
    [G_TELEMETRY] = "telemetry",
    [G_CONFIG_SOURCE] = "config_source",
    [G_CACHE] = "cache",
    [G_WORKER_CPUS] = "worker_cpus",
};
static const char *const top_later[] = {NULL};
enum { RD_ADDRESS, RD_TIMEOUT, RD_USER_ENV, RD_PASS_ENV, RD_DATABASE, RD_N };
static const char *const redis_keys[RD_N] = {"address", "timeout", "username_env", "password_env", "database"};
enum { RS_NAMESERVERS, RS_TIMEOUT, RS_ATTEMPTS, RS_MIN_TTL, RS_MAX_TTL, RS_IPV6, RS_N };
static const char *const resolver_keys[RS_N] = {"nameservers", "timeout", "attempts",
                                                "min_ttl",     "max_ttl", "ipv6"};
enum { CA_SIZE, CA_N };
static const char *const cache_keys[CA_N] = {"size"};
enum { AD_LISTEN, AD_TOKEN_ENV, AD_DEBUG_TOKEN_ENV, AD_N };
static const char *const admin_keys[AD_N] = {"listen", "token_env", "debug_token_env"};
enum { TM_OTLP, TM_SERVICE_NAME, TM_SAMPLE_RATIO, TM_PLUGIN_SPANS, TM_N };
static const char *const telemetry_keys[TM_N] = {"otlp", "service_name", "sample_ratio", "plugin_spans"};
enum { OT_ENDPOINT, OT_HEADERS, OT_TIMEOUT, OT_N };
static const char *const otlp_keys[OT_N] = {"endpoint", "headers", "timeout"};
enum { MT_PLUGIN_TIMING, MT_N };
static const char *const metrics_keys[MT_N] = {"plugin_timing"};

/* `resolver:`: how targets' DNS names are resolved (net/resolver.c). */
static void parse_resolver(sl__cx_t *cx, const yaml_node_t *v, sl_resolver_conf_t *r) {
    sl__field_t f[RS_N];
    sl__cfg_scan_map(cx, v, "'resolver'", resolver_keys, f, RS_N, NULL);
    int64_t n;
    size_t len;
    if (f[RS_NAMESERVERS].val && sl__cfg_list_len(cx, &f[RS_NAMESERVERS], &len) && len) {
        /* c-ares takes "IP:PORT,[IPv6]:PORT" */
        size_t cap = len * 64 + 1, at = 0;
        char *csv = sl__cx_calloc(cx, cap, 1);
        for (size_t i = 0; csv && i < len; i++) {
            const yaml_node_t *it = sl__cfg_seq_at(cx, f[RS_NAMESERVERS].val, i);
            sl_addr_t a = {0};
            if (!it || !sl__cfg_get_addr(cx, it, "nameservers", true, &a)) continue;
            at += (size_t)snprintf(csv + at, cap - at, "%s%s", at ? "," : "", a.text);
            free(a.text);
        }
        r->nameservers = csv;
    }
    if (f[RS_TIMEOUT].val) sl__cfg_get_duration(cx, f[RS_TIMEOUT].val, "timeout", false, &r->timeout_ms);
    if (f[RS_ATTEMPTS].val && sl__cfg_get_int(cx, f[RS_ATTEMPTS].val, "attempts", 1, 10, &n))
        r->attempts = (uint32_t)n;
    if (f[RS_MIN_TTL].val) sl__cfg_get_duration(cx, f[RS_MIN_TTL].val, "min_ttl", false, &r->min_ttl_ms);
    if (f[RS_MAX_TTL].val) sl__cfg_get_duration(cx, f[RS_MAX_TTL].val, "max_ttl", false, &r->max_ttl_ms);
    if (f[RS_IPV6].val) sl__cfg_get_bool(cx, f[RS_IPV6].val, "ipv6", &r->ipv6);
    if (r->max_ttl_ms < r->min_ttl_ms)
        sl__cx_err(cx, f[RS_MAX_TTL].val ? f[RS_MAX_TTL].val : v, "resolver.max_ttl must be at least min_ttl");
}

/* otlp.endpoint: http://HOST[:PORT][/PATH] (no TLS: a collector on the host or its
 * network, as the OpenTelemetry Collector's default OTLP/HTTP receiver listens). */
static void parse_endpoint(sl__cx_t *cx, const yaml_node_t *v, sl_telemetry_conf_t *t) {
    const char *s = sl__cfg_get_text(cx, v, "endpoint", "a URL (http://HOST:PORT/PATH)");
    if (!s) return;
    if (strncmp(s, "http://", 7) != 0) {
        sl__cx_err(cx, v, "otlp.endpoint '%s' must start with http:// (OTLP over HTTP, without TLS)", s);
        return;
    }
    const char *h = s + 7, *slash = strchr(h, '/');
    size_t hl = slash ? (size_t)(slash - h) : strlen(h);
    const char *name = h, *colon;
    size_t namel;
    if (h[0] == '[') { /* an IPv6 literal: http://[::1]:4318/v1/traces */
        const char *close = memchr(h, ']', hl);
        char lit[64];
        namel = close ? (size_t)(close - h - 1) : 0;
        if (namel) memcpy(lit, h + 1, namel < sizeof lit ? namel : sizeof lit - 1);
        struct in6_addr a6;
        if (!close || namel >= sizeof lit || (lit[namel] = 0, inet_pton(AF_INET6, lit, &a6) != 1) ||
            (close + 1 != h + hl && close[1] != ':')) {
            sl__cx_err(cx, v, "otlp.endpoint '%s': a bracketed host must be an IPv6 address ([::1])", s);
            return;
        }
        name = h + 1;
        colon = close + 1 != h + hl ? close + 1 : NULL;
    } else {
        colon = memchr(h, ':', hl);
        namel = colon ? (size_t)(colon - h) : hl;
    }
    long port = 4318;
    if (colon) {
        char *end;
        port = strtol(colon + 1, &end, 10);
        if (end != h + hl || port < 1 || port > 65535) {
            sl__cx_err(cx, v, "otlp.endpoint '%s': the port must be 1-65535", s);
            return;
        }
    }
    if (namel == 0 || namel > 253) {
        sl__cx_err(cx, v, "otlp.endpoint '%s' has no host", s);
        return;
    }
    t->host = sl__cx_calloc(cx, namel + 1, 1);
    if (t->host) memcpy(t->host, name, namel);
    t->port = (uint16_t)port;
    t->path = sl__cx_strdup(cx, slash ? slash : "/v1/traces");
}

/* `telemetry:` (ctx/telemetry.c). */
static void parse_telemetry(sl__cx_t *cx, const yaml_node_t *v, sl_telemetry_conf_t *t) {
    sl__field_t f[TM_N];
    sl__cfg_scan_map(cx, v, "'telemetry'", telemetry_keys, f, TM_N, NULL);
    t->enabled = true;
    t->timeout_ms = 2000;
    t->sample_ratio = 0.01;
    t->port = 4318;
    const yaml_node_t *o = f[TM_OTLP].val;
    if (!o) {
        sl__cx_err(cx, v, "telemetry needs otlp: { endpoint: http://HOST:PORT/v1/traces }");
    } else if (sl__cfg_want_type(cx, o, YAML_MAPPING_NODE, "otlp")) {
        sl__field_t of[OT_N];
        sl__cfg_scan_map(cx, o, "'telemetry.otlp'", otlp_keys, of, OT_N, NULL);
        if (of[OT_ENDPOINT].val)
            parse_endpoint(cx, of[OT_ENDPOINT].val, t);
        else
            sl__cx_err(cx, o, "otlp needs endpoint (http://HOST:PORT/v1/traces)");
        if (of[OT_TIMEOUT].val) sl__cfg_get_duration(cx, of[OT_TIMEOUT].val, "timeout", false, &t->timeout_ms);
        const yaml_node_t *hv = of[OT_HEADERS].val;
        if (hv && sl__cfg_want_type(cx, hv, YAML_MAPPING_NODE, "headers")) {
            size_t n = (size_t)(hv->data.mapping.pairs.top - hv->data.mapping.pairs.start);
            t->headers = sl__cx_calloc(cx, n + 1, sizeof *t->headers);
            for (yaml_node_pair_t *p = hv->data.mapping.pairs.start; t->headers && p < hv->data.mapping.pairs.top; p++) {
                const yaml_node_t *k = sl__cfg_get_node(cx, p->key), *val = sl__cfg_get_node(cx, p->value);
                const char *name = k ? sl__cfg_get_text(cx, k, "headers", "a header name") : NULL;
                const char *value = val ? sl__cfg_get_text(cx, val, name ? name : "headers", "a header value") : NULL;
                if (!name || !value) continue;
                if (!sl__cfg_is_token(name)) {
                    sl__cx_err(cx, k, "otlp.headers: '%s' is not a valid header name", name);
                    continue;
                }
                if (strpbrk(value, "\r\n")) {
                    sl__cx_err(cx, val, "otlp.headers: the value of %s holds a line break", name);
                    continue;
                }
                t->headers[t->nheaders].name = sl__cx_strdup(cx, name);
                t->headers[t->nheaders++].value = sl__cx_strdup(cx, value);
            }
        }
    }
    t->service_name = sl__cx_strdup(cx, "sluice");
    if (f[TM_SERVICE_NAME].val) {
        const char *sn = sl__cfg_get_text(cx, f[TM_SERVICE_NAME].val, "service_name", "a name");
        if (sn) {
            free(t->service_name);
            t->service_name = sl__cx_strdup(cx, sn);
        }
    }
    if (f[TM_SAMPLE_RATIO].val)
        sl__cfg_get_number(cx, f[TM_SAMPLE_RATIO].val, "sample_ratio", 0, 1, &t->sample_ratio);
    if (f[TM_PLUGIN_SPANS].val) sl__cfg_get_bool(cx, f[TM_PLUGIN_SPANS].val, "plugin_spans", &t->plugin_spans);
}

enum { ES_ENDPOINTS, ES_PREFIX, ES_TIMEOUT, ES_SNAPSHOT, ES_USER_ENV, ES_PASS_ENV, ES_N };
static const char *const etcd_keys[ES_N] = {"endpoints", "prefix",       "timeout",
                                            "snapshot",  "username_env", "password_env"};

/* An environment variable's value (credentials never sit in the file), or NULL after an error. */
static char *env_secret(sl__cx_t *cx, const yaml_node_t *v, const char *key) {
    const char *name = sl__cfg_get_text(cx, v, key, "an environment variable name");
    if (!name) return NULL;
    const char *val = getenv(name);
    if (!val || !*val) {
        sl__cx_err(cx, v, "%s: the environment variable %s is %s", key, name, val ? "empty" : "not set");
        return NULL;
    }
    return sl__cx_strdup(cx, val);
}

/* config_source: { etcd: { endpoints, prefix, timeout, snapshot, username_env, password_env } } */
static void parse_source(sl__cx_t *cx, const yaml_node_t *v, const yaml_node_t *root) {
    sl_source_conf_t *s = &cx->cfg->source;
    static const char *const src_keys[1] = {"etcd"};
    sl__field_t sf[1], f[ES_N];
    if (!sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "config_source")) return;
    sl__cfg_scan_map(cx, v, "'config_source'", src_keys, sf, 1, NULL);
    const yaml_node_t *e = sl__cfg_required(cx, v, &sf[0], "'config_source'");
    if (!e || !sl__cfg_want_type(cx, e, YAML_MAPPING_NODE, "etcd")) return;
    sl__cfg_scan_map(cx, e, "'config_source.etcd'", etcd_keys, f, ES_N, NULL);
    s->enabled = true;
    if (f[ES_ENDPOINTS].val) sl__cfg_get_str_list(cx, &f[ES_ENDPOINTS], NULL, &s->endpoints, &s->nendpoints);
    if (!s->nendpoints) sl__cx_err(cx, e, "config_source.etcd needs endpoints (e.g. [http://127.0.0.1:2379])");
    for (size_t i = 0; i < s->nendpoints; i++)
        if (strncmp(s->endpoints[i], "http://", 7) != 0)
            sl__cx_err(cx, f[ES_ENDPOINTS].val, "etcd endpoint '%s' is not an http:// URL", s->endpoints[i]);
    const char *pfx = f[ES_PREFIX].val ? sl__cfg_get_text(cx, f[ES_PREFIX].val, "prefix", "a key prefix") : "/sluice";
    if (pfx && (pfx[0] != '/' || (strlen(pfx) > 1 && pfx[strlen(pfx) - 1] == '/')))
        sl__cx_err(cx, f[ES_PREFIX].val, "etcd prefix '%s' must start with '/' and not end with one", pfx);
    else if (pfx)
        s->prefix = sl__cx_strdup(cx, pfx);
    s->timeout_ms = 2000;
    if (f[ES_TIMEOUT].val) sl__cfg_get_duration(cx, f[ES_TIMEOUT].val, "timeout", false, &s->timeout_ms);
    const char *snap;
    if (f[ES_SNAPSHOT].val && (snap = sl__cfg_get_text(cx, f[ES_SNAPSHOT].val, "snapshot", "a file path")))
        s->snapshot = sl__cfg_resolve_path(cx, snap);
    if (f[ES_USER_ENV].val) s->username = env_secret(cx, f[ES_USER_ENV].val, "username_env");
    if (f[ES_PASS_ENV].val) s->password = env_secret(cx, f[ES_PASS_ENV].val, "password_env");
    if (!s->username != !s->password)
        sl__cx_err(cx, e, "config_source.etcd: username_env and password_env go together");
    /* With a source, what it provides is not in the local file: one place for each thing. */
    static const char *const shared[] = {"routes", "upstreams", "consumers", "plugins"};
    for (size_t i = 0; i < (size_t)(root->data.mapping.pairs.top - root->data.mapping.pairs.start); i++) {
        const yaml_node_pair_t *pr = &root->data.mapping.pairs.start[i];
        const yaml_node_t *k = sl__cfg_get_node(cx, pr->key);
        for (size_t j = 0; k && j < 4; j++)
            if (sl__cfg_scalar_is(k, shared[j]) && !cx->composed)
                sl__cx_err(cx, k, "'%s' lives in etcd with config_source: write it with `sluice push`",
                           shared[j]);
    }
}

/* 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104: only this host can reach the address. */
static bool addr_loopback(const sl_addr_t *a) {
    if (a->ss.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&a->ss;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (a->ss.ss_family != AF_INET6) return false;
    const struct in6_addr *in6 = &((const struct sockaddr_in6 *)&a->ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(in6) || (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127);
}

/* admin.token_env and admin.debug_token_env (`key`): the token comes from the environment
 * so the config file (often in version control, shown in diffs, read by anyone who may
 * read the config) never holds it. True when a token was read into out (out_len). */
static bool env_token(sl__cx_t *cx, const yaml_node_t *v, const char *key, char *out, size_t *out_len) {
    const char *name = sl__cfg_get_text(cx, v, key, "an environment variable name");
    if (!name) return false;
    bool ok = (name[0] < '0' || name[0] > '9') && name[0];
    for (const char *c = name; ok && *c; c++) ok = sl__cfg_name_char(*c, false) && *c != '-';
    if (!ok) {
        sl__cx_err(cx, v, "admin.%s '%s' is not an environment variable name", key, name);
        return false;
    }
    const char *tok = getenv(name);
    size_t len = tok ? strlen(tok) : 0;
    if (len == 0) {
        sl__cx_err(cx, v, "admin.%s: the environment variable %s is %s", key, name, tok ? "empty" : "not set");
        return false;
    }
    if (len > SL_ADMIN_TOKEN_MAX) {
        sl__cx_err(cx, v, "admin.%s: the token in %s is longer than %d bytes", key, name, SL_ADMIN_TOKEN_MAX);
        return false;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)tok[i] <= 0x20 || (unsigned char)tok[i] >= 0x7f) {
            sl__cx_err(cx, v,
                       "admin.%s: the token in %s holds a space, control or non-ASCII "
                       "byte (a bearer token is printable ASCII)",
                       key, name);
            return false;
        }
    memcpy(out, tok, len + 1);
    *out_len = len;
    return true;
}

/* user: / group: (names or numeric ids), resolved here so `sluice check` on the host names
 * a missing account at its line; the switch itself happens at start (server/privileges.c). */
static void run_as(sl__cx_t *cx, const yaml_node_t *uv, const yaml_node_t *gv, sl_config_t *cfg) {
    const char *u = uv ? sl__cfg_get_text(cx, uv, "user", "a user name or id") : NULL;
    const char *g = gv ? sl__cfg_get_text(cx, gv, "group", "a group name or id") : NULL;
    if (gv && !uv) {
        sl__cx_err(cx, gv, "'group' needs 'user': sluice switches both or neither");
        return;
    }
    if (!u || (gv && !g)) return;
    char *end;
    bool found = true; /* a missing user does not hide a missing group */
    const struct passwd *pw = getpwnam(u);
    if (pw) {
        cfg->run_uid = pw->pw_uid;
        cfg->run_gid = pw->pw_gid;
    } else {
        unsigned long id = strtoul(u, &end, 10);
        if (!*u || *end || id >= UINT32_MAX) {
            sl__cx_err(cx, uv, "user '%s' does not exist on this host", u);
            found = false;
        } else {
            cfg->run_uid = (uid_t)id;
            pw = getpwuid(cfg->run_uid);
            cfg->run_gid = pw ? pw->pw_gid : (gid_t)id;
        }
    }
    if (g) {
        const struct group *gr = getgrnam(g);
        unsigned long id = gr ? gr->gr_gid : strtoul(g, &end, 10);
        if (!gr && (!*g || *end || id >= UINT32_MAX)) {
            sl__cx_err(cx, gv, "group '%s' does not exist on this host", g);
            return;
        }
        cfg->run_gid = (gid_t)id;
    }
    if (!found) return;
    if (cfg->run_uid == 0)
        sl__cx_err(cx, uv, "user '%s' is root: name an unprivileged account, or leave 'user' out", u);
    cfg->run_user = sl__cx_strdup(cx, u);
}

/* worker_cpus: `auto` (worker i on the i-th CPU of the process's set, counting round) or a
 * list of CPU numbers from that set (worker i on the (i mod n)-th). */
static void worker_cpus(sl__cx_t *cx, const yaml_node_t *v) {
    sl_config_t *cfg = cx->cfg;
    char have[256];
    cpu_set_t set;
    sl_cpus_allowed(&set);
    sl_cpus_text(&set, have, sizeof have);
    if (v->type == YAML_SCALAR_NODE && strcmp(sl__cfg_sval(v), "auto") == 0) {
        int n = CPU_COUNT(&set) < cfg->workers ? CPU_COUNT(&set) : cfg->workers;
        if (n < 1) n = 1;
        if (!(cfg->worker_cpus = calloc((size_t)n, sizeof(int)))) return;
        for (int i = 0; i < n; i++) cfg->worker_cpus[i] = sl_cpus_nth(i);
        cfg->nworker_cpus = (size_t)n;
        return;
    }
    if (v->type != YAML_SEQUENCE_NODE || sl__cfg_seq_len(v) == 0) {
        sl__cx_err(cx, v, "expected auto or a list of CPU numbers for 'worker_cpus' (this process may run on %s)",
                   have);
        return;
    }
    size_t n = sl__cfg_seq_len(v);
    if (!(cfg->worker_cpus = calloc(n, sizeof(int)))) return;
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *it = sl__cfg_seq_at(cx, v, i);
        int64_t c;
        if (!it || !sl__cfg_get_int(cx, it, "worker_cpus", 0, CPU_SETSIZE - 1, &c)) continue;
        if (!sl_cpus_has((int)c)) {
            sl__cx_err(cx, it, "worker_cpus: CPU %lld is not one this process may run on (it may run on %s)",
                       (long long)c, have);
            continue;
        }
        cfg->worker_cpus[cfg->nworker_cpus++] = (int)c;
    }
}

void sl__cfg_parse_root(sl__cx_t *cx, const yaml_node_t *root) {
    sl_config_t *cfg = cx->cfg;
    const char *where = "the top level";
    if (root->type != YAML_MAPPING_NODE) {
        sl__cx_err(cx, root, "expected a mapping at the top level of the configuration");
        return;
    }
    sl__field_t f[G_N];
    sl__cfg_scan_map(cx, root, where, top_keys, f, G_N, top_later);
    const yaml_node_t *v;

    /* the keys a reload cannot change: where they stand, for its error (reload.c) */
    const yaml_node_t *at;
    cfg->workers_line = (at = f[G_WORKERS].val) ? sl__cfg_line_of(at) : 1;
    cfg->workers_col = at ? sl__cfg_col_of(at) : 1;
    at = f[G_USER].val ? f[G_USER].val : f[G_GROUP].val;
    cfg->user_line = at ? sl__cfg_line_of(at) : 1;
    cfg->user_col = at ? sl__cfg_col_of(at) : 1;

    cfg->workers = auto_workers();
    if ((v = f[G_WORKERS].val) &&
        !(v->type == YAML_SCALAR_NODE && strcmp(sl__cfg_sval(v), "auto") == 0)) {
        int64_t n;
        const char *s = v->type == YAML_SCALAR_NODE ? sl__cfg_sval(v) : "";
        if (!sl__cfg_is_plain(v) || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')))
            sl__cx_err(cx, v, "expected an integer for 'workers' (or auto)");
        else if (sl__cfg_get_int(cx, v, "workers", 1, MAX_WORKERS, &n))
            cfg->workers = (int)n;
    }
    if ((v = f[G_WORKER_CPUS].val)) worker_cpus(cx, v);
    cfg->watch = true;
    if ((v = f[G_WATCH].val)) sl__cfg_get_bool(cx, v, "watch", &cfg->watch);
    cfg->shutdown_timeout_ms = 30 * 1000;
    if (!cfg->consumer_header) cfg->consumer_header = sl__cx_strdup(cx, "X-Consumer");
    if ((v = f[G_SHUTDOWN].val))
        sl__cfg_get_duration(cx, v, "shutdown_timeout", true, &cfg->shutdown_timeout_ms);

    if (f[G_PLUGIN_PATHS].val) {
        sl__cfg_get_str_list(cx, &f[G_PLUGIN_PATHS], NULL, &cfg->plugin_paths, &cfg->nplugin_paths);
    } else if ((cfg->plugin_paths = sl__cx_calloc(cx, 1, sizeof *cfg->plugin_paths))) {
        cfg->nplugin_paths = 1;
        cfg->plugin_paths[0] = sl__cx_strdup(cx, "plugins");
    }

    cfg->admin_enabled = true;
    const yaml_node_t *admin_at = NULL;
    bool token_given = false;
    if ((v = f[G_ADMIN].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "admin")) {
        sl__field_t a[AD_N];
        sl__cfg_scan_map(cx, v, "'admin'", admin_keys, a, AD_N, NULL);
        bool addr_ok = false;
        if ((admin_at = a[AD_LISTEN].val)) {
            if (admin_at->type == YAML_SCALAR_NODE && strcmp(sl__cfg_sval(admin_at), "off") == 0)
                cfg->admin_enabled = false;
            else
                addr_ok = sl__cfg_get_addr(cx, admin_at, "listen", false, &cfg->admin_listen);
        }
        if ((token_given = a[AD_TOKEN_ENV].val != NULL) && !cfg->admin_enabled)
            sl__cx_err(cx, a[AD_TOKEN_ENV].key,
                       "'token_env' does nothing with listen: off (there is no admin API to guard)");
        else if (token_given)
            env_token(cx, a[AD_TOKEN_ENV].val, "token_env", cfg->admin_token, &cfg->admin_token_len);
        if (a[AD_DEBUG_TOKEN_ENV].val)
            env_token(cx, a[AD_DEBUG_TOKEN_ENV].val, "debug_token_env", cfg->debug_token, &cfg->debug_token_len);
        /* Anyone who reaches the admin API may reload the config and read every upstream:
         * off this host it must ask for a token (a missing variable is reported above). */
        if (addr_ok && cfg->admin_enabled && !token_given && !addr_loopback(&cfg->admin_listen))
            sl__cx_err(cx, admin_at,
                       "admin listen %s is not a loopback address: set admin.token_env to the "
                       "environment variable holding a bearer token, or listen on 127.0.0.1 or [::1]",
                       cfg->admin_listen.text);
    }
    at = admin_at ? admin_at : f[G_ADMIN].val;
    cfg->admin_line = at ? sl__cfg_line_of(at) : 1;
    cfg->admin_col = at ? sl__cfg_col_of(at) : 1;
    if (cfg->admin_enabled && !cfg->admin_listen.text) {
        const char *why;
        if (sl__cfg_parse_addr("127.0.0.1:9090", &cfg->admin_listen, &why) == 0)
            cfg->admin_listen.text = sl__cx_strdup(cx, "127.0.0.1:9090");
    }

    cfg->plugin_timing = true;
    if ((v = f[G_METRICS].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "metrics")) {
        sl__field_t mf[MT_N];
        sl__cfg_scan_map(cx, v, "'metrics'", metrics_keys, mf, MT_N, NULL);
        if (mf[MT_PLUGIN_TIMING].val) sl__cfg_get_bool(cx, mf[MT_PLUGIN_TIMING].val, "plugin_timing", &cfg->plugin_timing);
    }
    if ((v = f[G_TELEMETRY].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "telemetry"))
        parse_telemetry(cx, v, &cfg->telemetry);
    sl__cfg_parse_plugins(cx, &f[G_PLUGINS], "the global chain", &cfg->plugins, &cfg->nplugins);
    if ((v = f[G_CONSUMER_HEADER].val)) {
        const char *h = sl__cfg_get_text(cx, v, "consumer_header", "a header name");
        if (h && !sl__cfg_is_token(h))
            sl__cx_err(cx, v, "consumer_header '%s' is not a valid header name", h);
        else if (h && (strcasecmp(h, "host") == 0 || strcasecmp(h, "content-length") == 0 ||
                       strcasecmp(h, "transfer-encoding") == 0 || strcasecmp(h, "connection") == 0))
            sl__cx_err(cx, v, "consumer_header '%s' would overwrite a header the proxy owns", h);
        else if (h) {
            free(cfg->consumer_header);
            cfg->consumer_header = sl__cx_strdup(cx, h);
        }
    }
    cfg->resolver = (sl_resolver_conf_t){.timeout_ms = 1000, .attempts = 2, .min_ttl_ms = 1000,
                                         .max_ttl_ms = 300 * 1000};
    if ((v = f[G_RESOLVER].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "resolver"))
        parse_resolver(cx, v, &cfg->resolver);
    run_as(cx, f[G_USER].val, f[G_GROUP].val, cfg);
    if ((v = f[G_CONFIG_SOURCE].val)) parse_source(cx, v, root);
    cfg->cache_size = UINT64_C(64) << 20; /* upstream/cache.h SL_CACHE_DEFAULT_SIZE */
    if ((v = f[G_CACHE].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "cache")) {
        sl__field_t cf[CA_N];
        sl__cfg_scan_map(cx, v, "'cache'", cache_keys, cf, CA_N, NULL);
        if (cf[CA_SIZE].val) sl__cfg_get_size(cx, cf[CA_SIZE].val, "size", 0, UINT64_C(1) << 40, &cfg->cache_size);
    }
    cfg->redis_timeout_ms = 50;
    if ((v = f[G_REDIS].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "redis")) {
        sl__field_t rf[RD_N];
        sl__cfg_scan_map(cx, v, "'redis'", redis_keys, rf, RD_N, NULL);
        cfg->redis_enabled = true;
        if (rf[RD_ADDRESS].val)
            sl__cfg_get_addr(cx, rf[RD_ADDRESS].val, "address", true, &cfg->redis_address);
        else if (sl__cfg_parse_addr("127.0.0.1:6379", &cfg->redis_address, &(const char *){NULL}) ==
                 0)
            cfg->redis_address.text = sl__cx_strdup(cx, "127.0.0.1:6379");
        if (rf[RD_TIMEOUT].val)
            sl__cfg_get_duration(cx, rf[RD_TIMEOUT].val, "timeout", false, &cfg->redis_timeout_ms);
        if (rf[RD_USER_ENV].val) cfg->redis_username = env_secret(cx, rf[RD_USER_ENV].val, "username_env");
        if (rf[RD_PASS_ENV].val) cfg->redis_password = env_secret(cx, rf[RD_PASS_ENV].val, "password_env");
        if (rf[RD_USER_ENV].val && !rf[RD_PASS_ENV].val)
            sl__cx_err(cx, rf[RD_USER_ENV].key, "redis: username_env needs password_env (AUTH takes both)");
        int64_t db;
        if (rf[RD_DATABASE].val && sl__cfg_get_int(cx, rf[RD_DATABASE].val, "database", 0, INT32_MAX, &db))
            cfg->redis_database = (int)db;
    }
    if (f[G_CONSUMERS].val) {
        size_t n;
        if (sl__cfg_list_len(cx, &f[G_CONSUMERS], &n) && n &&
            (cfg->consumers = sl__cx_calloc(cx, n, sizeof *cfg->consumers))) {
            cfg->nconsumers = n;
            for (size_t i = 0; i < n; i++) {
                const yaml_node_t *m = sl__cfg_list_map(cx, &f[G_CONSUMERS], i);
                if (m) sl__cfg_parse_consumer(cx, m, i);
            }
            sl__cfg_check_consumer_credentials(cx, f[G_CONSUMERS].val);
        }
    }
    if ((v = f[G_LUA_ROUTES].val)) {
        sl__cfg_get_str_list(cx, &f[G_LUA_ROUTES], NULL, &cfg->lua_routes, &cfg->nlua_routes);
        cfg->lua_routes_line = sl__cfg_line_of(v);
        cfg->lua_routes_col = sl__cfg_col_of(v);
    }

    size_t len;
    if ((v = sl__cfg_required(cx, root, &f[G_LISTENERS], where)) &&
        sl__cfg_list_len(cx, &f[G_LISTENERS], &len)) {
        if (len == 0) sl__cx_err(cx, v, "at least one listener is required");
        if ((cfg->listeners = sl__cx_calloc(cx, len, sizeof *cfg->listeners))) {
            cfg->nlisteners = len;
            for (size_t i = 0; i < len; i++) {
                const yaml_node_t *m = sl__cfg_list_map(cx, &f[G_LISTENERS], i);
                if (m) sl__cfg_parse_listener(cx, m, i);
            }
        }
    }
    for (size_t i = 0;
         cfg->admin_enabled && sl__cfg_addr_port(&cfg->admin_listen) && i < cfg->nlisteners; i++) {
        const sl_listener_conf_t *l = &cfg->listeners[i];
        if (!sl__cfg_addr_same(&l->listen, &cfg->admin_listen)) continue;
        if (admin_at)
            sl__cx_err(cx, admin_at, "address %s is already used by the listener at line %d",
                   cfg->admin_listen.text, l->line);
        else
            sl__cx_at(cx, l->line, l->col,
                  "address %s is the default admin address (move the admin "
                  "listener with admin: { listen: ... })",
                  l->listen.text);
    }
    /* upstreams before routes whatever the file order: routes refer to them by name */
    cx->routes_node = f[G_ROUTES].val;
    cx->lua_routes = f[G_LUA_ROUTES].val != NULL || cx->composed;
    if (f[G_UPSTREAMS].val && sl__cfg_list_len(cx, &f[G_UPSTREAMS], &len) &&
        (cfg->upstreams = sl__cx_calloc(cx, len, sizeof *cfg->upstreams))) {
        cfg->nupstreams = len;
        for (size_t i = 0; i < len; i++) {
            const yaml_node_t *m = sl__cfg_list_map(cx, &f[G_UPSTREAMS], i);
            if (m) sl__cfg_parse_upstream(cx, m, i);
        }
    }
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        sl_listener_conf_t *l = &cfg->listeners[i];
        for (size_t k = 0; k < l->nsni_routes; k++) {
            sl_sni_route_conf_t *r = &l->sni_routes[k];
            if (r->upstream_name &&
                (r->upstream = sl__cfg_find_upstream(cfg, r->upstream_name)) < 0)
                sl__cx_at(cx, r->upstream_line, r->upstream_col,
                          "sni_routes[%zu] of listener '%s' names unknown upstream '%s'", k,
                          l->name ? l->name : "?", r->upstream_name);
        }
        sl__cfg_build_sni_names(cx, l);
        if (!l->upstream_name) continue;
        l->upstream = sl__cfg_find_upstream(cfg, l->upstream_name);
        if (l->upstream < 0)
            sl__cx_at(cx, l->upstream_line, l->upstream_col,
                      "listener '%s' names unknown upstream '%s'", l->name ? l->name : "?",
                      l->upstream_name);
        else
            l->connect_timeout_ms = cfg->upstreams[l->upstream].connect_timeout_ms;
    }
    if (f[G_ROUTES].val && sl__cfg_list_len(cx, &f[G_ROUTES], &len) &&
        (cfg->routes = sl__cx_calloc(cx, len, sizeof *cfg->routes))) {
        cfg->nroutes = len;
        for (size_t i = 0; i < len; i++) {
            const yaml_node_t *m = sl__cfg_list_map(cx, &f[G_ROUTES], i);
            if (m) sl__cfg_parse_route(cx, m, i);
        }
    }
    sl__cfg_check_mtls_users(cx);
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points                                                                                */

void sl__cfg_yaml_error(sl__cx_t *cx, const yaml_parser_t *p, const char *text, size_t len) {
    if (p->error == YAML_MEMORY_ERROR) {
        cx->oom = true;
        return;
    }
    if (p->error == YAML_READER_ERROR) {
        /* the reader knows only a byte offset (bad UTF-8, control characters) */
        int line = 1, col = 1;
        for (size_t i = 0; i < p->problem_offset && i < len; i++) {
            col++;
            if (text[i] == '\n') {
                line++;
                col = 1;
            }
        }
        sl__cx_at(cx, line, col, "invalid input: %s", p->problem ? p->problem : "unreadable text");
        return;
    }
    int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
    if (p->context)
        sl__cx_at(cx, line, col, "YAML syntax error: %s (%s at line %d, column %d)",
              p->problem ? p->problem : "invalid YAML", p->context, (int)p->context_mark.line + 1,
              (int)p->context_mark.column + 1);
    else
        sl__cx_at(cx, line, col, "YAML syntax error: %s", p->problem ? p->problem : "invalid YAML");
}

int sl__cfg_cmp_err(const void *a, const void *b) {
    const sl__cx_err_t *x = a, *y = b;
    if (x->line != y->line) return x->line < y->line ? -1 : 1;
    if (x->col != y->col) return x->col < y->col ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int sl_config_parse(const char *path, const char *text, size_t len, sl_config_t **out,
                    sl_errors_t *errs) {
    return sl__config_parse(path, text, len, out, errs, 0);
}

int sl_config_parse_partial(const char *path, const char *text, size_t len, sl_config_t **out,
                            sl_errors_t *errs) {
    return sl__config_parse(path, text, len, out, errs, SL__PARSE_PARTIAL);
}

int sl__config_parse(const char *path, const char *text, size_t len, sl_config_t **out,
                     sl_errors_t *errs, unsigned flags) {
    yaml_parser_t parser;
    yaml_document_t doc;
    bool have_doc = false;
    sl__cx_t cx = {.composed = (flags & SL__PARSE_COMPOSED) != 0};
    bool partial = (flags & SL__PARSE_PARTIAL) != 0;
    int rc = -1;

    *out = NULL;
    if (!yaml_parser_initialize(&parser)) {
        sl_errors_add(errs, path, 1, 1, "out of memory");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!(cx.cfg = sl__cx_calloc(&cx, 1, sizeof *cx.cfg)) ||
        !(cx.cfg->path = sl__cx_strdup(&cx, path ? path : "<config>")))
        goto done;
    if (!yaml_parser_load(&parser, &doc)) {
        sl__cfg_yaml_error(&cx, &parser, text, len);
        goto done;
    }
    have_doc = true;
    cx.doc = &doc;
    sl__cfg_expand_env(&cx, &doc);

    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root)
        sl__cx_at(&cx, 1, 1, "the configuration is empty: 'listeners' is required");
    else
        sl__cfg_parse_root(&cx, root);

    yaml_document_t extra;
    if (!yaml_parser_load(&parser, &extra)) {
        sl__cfg_yaml_error(&cx, &parser, text, len);
    } else {
        yaml_node_t *r2 = yaml_document_get_root_node(&extra);
        if (r2) sl__cx_err(&cx, r2, "only one YAML document is allowed in a configuration");
        yaml_document_delete(&extra);
    }

done:
    if (cx.nerrs == 0 && !cx.oom) {
        *out = cx.cfg;
        rc = 0;
    } else {
        qsort(cx.errs, cx.nerrs, sizeof *cx.errs, sl__cfg_cmp_err);
        for (size_t i = 0; i < cx.nerrs; i++)
            sl_errors_add(errs, path, cx.errs[i].line, cx.errs[i].col, "%s", cx.errs[i].msg);
        if (cx.oom) sl_errors_add(errs, path, 1, 1, "out of memory");
        if (partial && have_doc && !cx.oom)
            *out = cx.cfg; /* the caller checks what did parse, and frees it */
        else
            sl_config_free(cx.cfg);
    }
    for (size_t i = 0; i < cx.nerrs; i++) free(cx.errs[i].msg);
    free(cx.errs);
    free(cx.route_names);
    if (have_doc) yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

int sl_config_parse_composed(const char *path, const char *text, size_t len, sl_config_t **out,
                             sl_errors_t *errs) {
    return sl__config_parse(path, text, len, out, errs, SL__PARSE_COMPOSED);
}
