/* routes.c — `routes:`: matches (hosts, paths, methods, headers), the upstream or a
 * canary/match split, prefix stripping, Upgrade and the route's plugins. */

#include "config/parse.h"
#include "base/common.h"
#include "base/hash.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

bool sl__cfg_check_host(sl__cx_t *cx, const yaml_node_t *v, char *s) {
    for (char *p = s; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p | 0x20);
    /* An absolute name ("api.example.com.") is the same host: requests' Host and TLS server
     * names are compared without their trailing dot, so one kept here would never match. */
    size_t len = strlen(s);
    if (len >= 2 && s[len - 1] == '.' && s[len - 2] != '.' && s[len - 2] != '*') s[len - 1] = '\0';
    const char *name = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
    if (strchr(name, '*') || strcmp(s, "*.") == 0) {
        sl__cx_err(cx, v,
                   "host '%s': '*' is only allowed as a whole first label, as in *.example.com", s);
        return false;
    }
    if (name[0] == '[') {
        struct in6_addr a6;
        char buf[64];
        size_t n = strlen(name);
        if (n >= 3 && n - 2 < sizeof buf && name[n - 1] == ']' && name == s) {
            memcpy(buf, name + 1, n - 2);
            buf[n - 2] = '\0';
            if (inet_pton(AF_INET6, buf, &a6) == 1) return true;
        }
        sl__cx_err(cx, v, "host '%s' is not a valid bracketed IPv6 address", s);
        return false;
    }
    if (strchr(name, ':')) {
        sl__cx_err(cx, v, "host '%s': hosts match without the port", s);
        return false;
    }
    for (const char *p = name; *p; p++) {
        if (!sl__cfg_name_char(*p, true)) {
            sl__cx_err(cx, v, "host '%s' is not a valid host name", s);
            return false;
        }
    }
    if (!*name) {
        sl__cx_err(cx, v, "host must not be empty");
        return false;
    }
    return true;
}

static bool check_path(sl__cx_t *cx, const yaml_node_t *v, char *s) {
    if (s[0] != '/') {
        sl__cx_err(cx, v, "path '%s' must start with '/'", s);
        return false;
    }
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '?' || *p == '#') {
            sl__cx_err(cx, v, "path '%s' must not contain spaces, control characters, '?' or '#'",
                       s);
            return false;
        }
    }
    return true;
}

static bool check_method(sl__cx_t *cx, const yaml_node_t *v, char *s) {
    if (!sl__cfg_is_token(s)) {
        sl__cx_err(cx, v, "method '%s' is not a valid HTTP method token", s);
        return false;
    }
    for (char *p = s; *p; p++)
        if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 'a' + 'A');
    return true;
}

static void parse_match_headers(sl__cx_t *cx, const yaml_node_t *m, sl_route_conf_t *r) {
    size_t len = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
    if (!(r->headers = sl__cx_calloc(cx, len, sizeof *r->headers))) return;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = sl__cfg_get_node(cx, p->key), *v = sl__cfg_get_node(cx, p->value);
        if (!k || !v) continue;
        const char *name = sl__cfg_get_text(cx, k, "headers", "a string key");
        if (!name) continue;
        if (!sl__cfg_is_token(name)) {
            sl__cx_err(cx, k, "header name '%s' is not a valid token", name);
            continue;
        }
        bool dup = false;
        for (size_t i = 0; i < r->nheaders && !dup; i++) {
            if (strcasecmp(r->headers[i].name, name) == 0) {
                sl__cx_err(cx, k, "header '%s' is matched twice (header names ignore case)", name);
                dup = true;
            }
        }
        if (dup) continue;
        const char *val = sl__cfg_is_null(v) ? NULL : sl__cfg_get_text(cx, v, name, "a string");
        if (!val) {
            if (sl__cfg_is_null(v)) sl__cx_err(cx, k, "header '%s' needs a value to match", name);
            continue;
        }
        for (const char *c = val; *c; c++) {
            if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f) {
                sl__cx_err(cx, v, "header value for '%s' contains a control character", name);
                val = NULL;
                break;
            }
        }
        if (!val) continue;
        sl_kv_t *kv = &r->headers[r->nheaders];
        kv->name = sl__cx_strdup(cx, name);
        kv->value = sl__cx_strdup(cx, val);
        r->nheaders++; /* counted even when a strdup failed, so the free loop sees both */
    }
}

enum { M_HOSTS, M_PATHS, M_METHODS, M_HEADERS, M_N };
static const char *const match_keys[M_N] = {"hosts", "paths", "methods", "headers"};

enum { R_NAME, R_MATCH, R_UPSTREAM, R_SPLIT, R_STRIP, R_UPGRADE, R_PLUGINS, R_N };
static const char *const route_keys[R_N] = {"name",         "match",   "upstream", "split",
                                            "strip_prefix", "upgrade", "plugins"};

/* An `upgrade:` entry: "*", or a protocol (RFC 9110 7.8: token ["/" token]), lower-cased.
 * h2c is refused here: an upstream that switched to HTTP/2 on a connection sluice proxies
 * as HTTP/1.1 would get bytes sluice cannot police, so it is never forwarded at all. */
static bool check_upgrade(sl__cx_t *cx, const yaml_node_t *v, char *s) {
    for (char *p = s; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    if (strcmp(s, "*") == 0) return true;
    char *slash = strchr(s, '/');
    if (slash) *slash = '\0';
    bool ok = sl__cfg_is_token(s) && (!slash || sl__cfg_is_token(slash + 1));
    bool h2c = strcmp(s, "h2c") == 0;
    if (slash) *slash = '/';
    if (!ok) {
        sl__cx_err(cx, v, "upgrade protocol '%s' is not a token (NAME or NAME/VERSION)", s);
        return false;
    }
    if (h2c) {
        sl__cx_err(cx, v, "upgrade: h2c is never forwarded (sluice speaks HTTP/1.1 to upstreams)");
        return false;
    }
    return true;
}

int sl__cfg_find_upstream(const sl_config_t *cfg, const char *s) {
    for (size_t i = 0; s && i < cfg->nupstreams; i++)
        if (cfg->upstreams[i].name && strcmp(cfg->upstreams[i].name, s) == 0) return (int)i;
    return -1;
}

enum { SP_UPSTREAM, SP_WEIGHT, SP_MATCH, SP_N };
static const char *const split_keys[SP_N] = {"upstream", "weight", "match"};
enum { SM_HEADERS, SM_COOKIES, SM_N };
static const char *const split_match_keys[SM_N] = {"headers", "cookies"};

/* One `NAME: VALUE` pair of a split arm's match (headers or cookies). */
static void parse_split_pair(sl__cx_t *cx, const yaml_node_t *m, const char *key, char **name,
                             char **value) {
    if (!sl__cfg_want_type(cx, m, YAML_MAPPING_NODE, key)) return;
    size_t n = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
    if (n != 1) {
        sl__cx_err(cx, m, "'%s' of a split arm takes exactly one NAME: VALUE", key);
        return;
    }
    const yaml_node_pair_t *p = m->data.mapping.pairs.start;
    const yaml_node_t *k = sl__cfg_get_node(cx, p->key), *v = sl__cfg_get_node(cx, p->value);
    if (!k || !v || !sl__cfg_get_string(cx, k, key, name)) return;
    if (!sl__cfg_is_token(*name)) sl__cx_err(cx, k, "'%s' is not a valid %s name", *name, key);
    sl__cfg_get_string(cx, v, key, value);
}

static void parse_split(sl__cx_t *cx, const sl__field_t *fs, const char *where,
                        sl_route_conf_t *r) {
    size_t len;
    if (!sl__cfg_list_len(cx, fs, &len)) return;
    if (len == 0) {
        sl__cx_err(cx, fs->val, "split needs at least one arm");
        return;
    }
    if (!(r->split = sl__cx_calloc(cx, len, sizeof *r->split))) return;
    r->nsplit = len;
    uint64_t total = 0;
    bool incomplete = false;
    for (size_t i = 0; i < len; i++) {
        const yaml_node_t *m = sl__cfg_list_map(cx, fs, i);
        if (!m) continue;
        sl_split_conf_t *a = &r->split[i];
        char sub[256];
        snprintf(sub, sizeof sub, "split[%zu] of %s", i, where);
        sl__field_t f[SP_N];
        sl__cfg_scan_map(cx, m, sub, split_keys, f, SP_N, NULL);
        a->line = sl__cfg_line_of(m);
        a->col = sl__cfg_col_of(m);
        a->upstream = -1;
        const yaml_node_t *v = sl__cfg_required(cx, m, &f[SP_UPSTREAM], sub);
        const char *s = v ? sl__cfg_get_text(cx, v, "upstream", "a string") : NULL;
        if (s && (a->upstream = sl__cfg_find_upstream(cx->cfg, s)) < 0)
            sl__cx_err(cx, v, "%s names unknown upstream '%s'", sub, s);
        int64_t w;
        if ((v = f[SP_WEIGHT].val) && sl__cfg_get_int(cx, v, "weight", 0, 1000000, &w))
            a->weight = (uint32_t)w;
        if ((v = f[SP_MATCH].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "match")) {
            sl__field_t mf[SM_N];
            char msub[288];
            snprintf(msub, sizeof msub, "'split[%zu].match' of %s", i, where);
            sl__cfg_scan_map(cx, v, msub, split_match_keys, mf, SM_N, NULL);
            if (mf[SM_HEADERS].val)
                parse_split_pair(cx, mf[SM_HEADERS].val, "headers", &a->header, &a->header_value);
            if (mf[SM_COOKIES].val)
                parse_split_pair(cx, mf[SM_COOKIES].val, "cookies", &a->cookie, &a->cookie_value);
            if (!mf[SM_HEADERS].val && !mf[SM_COOKIES].val)
                sl__cx_err(cx, v, "a split match needs headers or cookies");
        } else if (!f[SP_WEIGHT].val) {
            sl__cx_err(cx, m, "%s needs a weight or a match", sub);
            incomplete = true;
        }
        if (f[SP_MATCH].val && f[SP_WEIGHT].val) {
            sl__cx_err(cx, f[SP_WEIGHT].key, "%s takes a weight or a match, not both", sub);
            incomplete = true;
        }
        if (!f[SP_MATCH].val) total += a->weight;
    }
    if (total == 0 && !incomplete)
        sl__cx_err(cx, fs->val, "split needs an arm without match whose weight is above 0");
}

/* The route before idx named name, or -1: an open-addressed table of route index + 1 over
 * the names seen so far, sized for every route at the first (a nested loop of strcmp was
 * 5 * 10^7 comparisons at 10,000 routes, in every start and reload). Without memory for
 * the table: the loop. Records idx under name when it is new. */
static long earlier_route(sl__cx_t *cx, const sl_config_t *cfg, size_t idx, const char *name) {
    if (!cx->route_names && cfg->nroutes) {
        size_t cap = 16;
        while (cap < cfg->nroutes * 2) cap <<= 1;
        if ((cx->route_names = calloc(cap, sizeof *cx->route_names))) cx->route_names_cap = cap;
    }
    if (!cx->route_names_cap) {
        for (size_t i = 0; i < idx; i++)
            if (cfg->routes[i].name && strcmp(cfg->routes[i].name, name) == 0) return (long)i;
        return -1;
    }
    uint64_t h = sl_hash64(name, strlen(name), 0);
    size_t mask = cx->route_names_cap - 1;
    for (size_t k = (size_t)h & mask;; k = (k + 1) & mask) {
        uint32_t v = cx->route_names[k];
        if (!v) {
            cx->route_names[k] = (uint32_t)idx + 1;
            return -1;
        }
        if (strcmp(cfg->routes[v - 1].name, name) == 0) return (long)v - 1;
    }
}

void sl__cfg_parse_route(sl__cx_t *cx, const yaml_node_t *m, size_t idx) {
    sl_config_t *cfg = cx->cfg;
    sl_route_conf_t *r = &cfg->routes[idx];
    char where[128];
    sl__cfg_describe(cx, m, "route", "routes", idx, where, sizeof where);
    sl__field_t f[R_N];
    sl__cfg_scan_map(cx, m, where, route_keys, f, R_N, NULL);
    r->line = sl__cfg_line_of(m);
    r->col = sl__cfg_col_of(m);
    r->upstream = -1;
    r->lua_file = -1;

    const yaml_node_t *v = sl__cfg_required(cx, m, &f[R_NAME], where);
    if (v && sl__cfg_get_name(cx, v, "route", true, &r->name)) {
        long first = earlier_route(cx, cfg, idx, r->name);
        if (strcmp(r->name, SL_ROUTE_NONE) == 0)
            sl__cx_err(cx, v, SL_ROUTE_NONE_MSG);
        else if (first >= 0)
            sl__cx_err(cx, v, "duplicate route name '%s' (first defined at line %d)", r->name,
                       cfg->routes[first].line);
    }
    if ((v = f[R_MATCH].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "match")) {
        sl__field_t mf[M_N];
        sl__cfg_scan_sub(cx, v, "match", where, match_keys, mf, M_N);
        if (mf[M_HOSTS].val)
            sl__cfg_get_str_list(cx, &mf[M_HOSTS], sl__cfg_check_host, &r->hosts, &r->nhosts);
        if (mf[M_PATHS].val)
            sl__cfg_get_str_list(cx, &mf[M_PATHS], check_path, &r->paths, &r->npaths);
        if (mf[M_METHODS].val)
            sl__cfg_get_str_list(cx, &mf[M_METHODS], check_method, &r->methods, &r->nmethods);
        if (mf[M_HEADERS].val &&
            sl__cfg_want_type(cx, mf[M_HEADERS].val, YAML_MAPPING_NODE, "headers"))
            parse_match_headers(cx, mf[M_HEADERS].val, r);
    }
    bool has_upstream = false;
    if ((v = f[R_UPSTREAM].val)) {
        has_upstream = true;
        const char *s = sl__cfg_get_text(cx, v, "upstream", "a string");
        r->upstream = sl__cfg_find_upstream(cfg, s);
        if (s && r->upstream < 0) sl__cx_err(cx, v, "%s names unknown upstream '%s'", where, s);
    }
    if (f[R_SPLIT].val) {
        if (has_upstream)
            sl__cx_err(cx, f[R_SPLIT].key, "%s has both upstream and split: keep one", where);
        has_upstream = true;
        parse_split(cx, &f[R_SPLIT], where, r);
    }
    if ((v = f[R_STRIP].val) && sl__cfg_get_bool(cx, v, "strip_prefix", &r->strip_prefix) &&
        r->strip_prefix && r->npaths == 0)
        sl__cx_err(cx, v, "strip_prefix needs match.paths to know what to strip");
    if (f[R_UPGRADE].val)
        sl__cfg_get_str_list(cx, &f[R_UPGRADE], check_upgrade, &r->upgrade, &r->nupgrade);
    /* every upstream the route may send a request to must be one an Upgrade reaches */
    for (size_t i = 0; r->nupgrade && i <= r->nsplit; i++) {
        int up = i < r->nsplit ? r->split[i].upstream : r->upstream;
        const sl_upstream_conf_t *uc = up >= 0 ? &cfg->upstreams[up] : NULL;
        if (uc && uc->protocol != SL_UP_HTTP1) {
            sl__cx_err(cx, f[R_UPGRADE].key, "%s: " SL_UPGRADE_H2_FMT, where, uc->name,
                       sl_upstream_protocol_name(uc->protocol));
            break;
        }
    }
    sl__cfg_parse_plugins(cx, &f[R_PLUGINS], where, &r->plugins, &r->nplugins);
    /* a `plugins:` of the wrong type has its own error already */
    bool bad_plugins = f[R_PLUGINS].val && f[R_PLUGINS].val->type != YAML_SEQUENCE_NODE;
    if (!has_upstream && r->nplugins == 0 && !bad_plugins)
        sl__cx_err(cx, m, "%s needs an upstream or at least one plugin", where);
}
