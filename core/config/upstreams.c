/* upstreams.c — `upstreams:`: targets, balancer and hashing, keep-alive, timeouts, health
 * checks, circuit breaker and retries. A target's `tls:` is tls_conf.c's. */

#include "config/parse.h"
#include "base/common.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first tcp listener that sends sessions to upstream `name` (its `upstream` or an entry
 * of its sni_routes), or NULL. Listeners are parsed before upstreams. A tcp session reads
 * only the balancer, the targets' addresses, health, the breaker and timeouts.connect of
 * its upstream: the keys no session reads are errors on such an upstream, unless an http
 * route names it too (an upstream a preread plugin picks by name at run time is not known
 * here). */
static bool names_upstream(const sl__cx_t *cx, const yaml_node_t *m, const char *name);

/* Whether an http route of the top level's `routes` names upstream `name` (as `upstream`
 * or in a `split` arm), or may (lua_routes, a composed config): such an upstream serves
 * HTTP too, and its HTTP keys are not unused. */
static bool http_user(const sl__cx_t *cx, const char *name) {
    if (cx->lua_routes) return true;
    const yaml_node_t *seq = cx->routes_node;
    if (!seq || seq->type != YAML_SEQUENCE_NODE) return false;
    for (const yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++) {
        const yaml_node_t *route = yaml_document_get_node(cx->doc, *it);
        if (!route || route->type != YAML_MAPPING_NODE) continue;
        if (names_upstream(cx, route, name)) return true;
        for (const yaml_node_pair_t *p = route->data.mapping.pairs.start; p < route->data.mapping.pairs.top; p++) {
            const yaml_node_t *k = yaml_document_get_node(cx->doc, p->key);
            const yaml_node_t *v = yaml_document_get_node(cx->doc, p->value);
            if (!k || !v || !sl__cfg_scalar_is(k, "split") || v->type != YAML_SEQUENCE_NODE) continue;
            for (const yaml_node_item_t *a = v->data.sequence.items.start; a < v->data.sequence.items.top; a++) {
                const yaml_node_t *arm = yaml_document_get_node(cx->doc, *a);
                if (arm && arm->type == YAML_MAPPING_NODE && names_upstream(cx, arm, name)) return true;
            }
        }
    }
    return false;
}

/* Whether mapping m has `upstream: NAME`. */
static bool names_upstream(const sl__cx_t *cx, const yaml_node_t *m, const char *name) {
    for (const yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(cx->doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(cx->doc, p->value);
        if (k && v && sl__cfg_scalar_is(k, "upstream") && v->type == YAML_SCALAR_NODE &&
            strcmp(sl__cfg_sval(v), name) == 0)
            return true;
    }
    return false;
}

static const sl_listener_conf_t *tcp_user(const sl__cx_t *cx, const char *name) {
    const sl_config_t *cfg = cx->cfg;
    if (!name || http_user(cx, name)) return NULL;
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        const sl_listener_conf_t *l = &cfg->listeners[i];
        if (l->protocol != SL_PROTO_TCP) continue;
        if (l->upstream_name && strcmp(l->upstream_name, name) == 0) return l;
        for (size_t k = 0; k < l->nsni_routes; k++)
            if (l->sni_routes[k].upstream_name && strcmp(l->sni_routes[k].upstream_name, name) == 0)
                return l;
    }
    return NULL;
}

/* `key` (at node at) of an upstream tcp listener l uses, which its sessions never read. */
static void tcp_unused(sl__cx_t *cx, const yaml_node_t *at, const char *key, const sl_listener_conf_t *l,
                       const char *why) {
    sl__cx_err(cx, at, "'%s' does nothing for tcp listener '%s', which uses this upstream: %s", key,
               l->name ? l->name : "?", why);
}

enum { T_ADDRESS, T_WEIGHT, T_TLS, T_N };
static const char *const target_keys[T_N] = {"address", "weight", "tls"};

/* A DNS name as a target's host: letters, digits, '-', '_' and dots, at most 253. */
static bool host_name(const char *h, size_t n) {
    if (n == 0 || n > 253 || h[0] == '.' || h[0] == '-') return false;
    bool letter = false;
    for (size_t i = 0; i < n; i++) {
        if (!sl__cfg_name_char(h[i], true)) return false;
        letter |= (h[i] < '0' || h[i] > '9') && h[i] != '.';
    }
    return letter; /* "10.0.0" is a mistyped IP, not a name */
}

/* One entry of `targets:`: an IP address (static), or NAME:PORT (*host set, owned: the
 * caller makes its slots). t->addr.text is the address as written either way. */
static void parse_target(sl__cx_t *cx, const yaml_node_t *m, const char *upstream, size_t idx,
                         sl_target_conf_t *ents, char **host, uint16_t *port,
                         const sl_upstream_conf_t *u, const sl_listener_conf_t *tcp) {
    sl_target_conf_t *t = &ents[idx];
    char where[192];
    snprintf(where, sizeof where, "targets[%zu] of %s", idx, upstream);
    sl__field_t f[T_N];
    sl__cfg_scan_map(cx, m, where, target_keys, f, T_N, NULL);
    t->weight = 1;
    const yaml_node_t *v = sl__cfg_required(cx, m, &f[T_ADDRESS], where);
    const char *s = v ? sl__cfg_get_text(cx, v, "address", "an address") : NULL;
    const char *colon = s ? strrchr(s, ':') : NULL;
    sl_addr_t probe = {0};
    const char *why;
    if (s && colon && s[0] != '[' && sl__cfg_parse_addr(s, &probe, &why) != 0 &&
        host_name(s, (size_t)(colon - s))) {
        /* NAME:PORT: resolved at run time */
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (!colon[1] || *end || p < 1 || p > 65535) {
            sl__cx_err(cx, v, "target address '%s' needs a port from 1 to 65535", s);
        } else if ((*host = sl__cx_strdup(cx, s))) {
            (*host)[colon - s] = 0;
            for (char *c = *host; *c; c++) *c = (char)tolower((unsigned char)*c);
            *port = (uint16_t)p;
            t->addr.text = sl__cx_strdup(cx, s);
            for (size_t i = 0; i < idx; i++)
                if (ents[i].addr.text && strcasecmp(ents[i].addr.text, s) == 0)
                    sl__cx_err(cx, v, "target %s is listed twice in %s", s, upstream);
        }
    } else if (v && sl__cfg_get_addr(cx, v, "address", true, &t->addr)) {
        for (size_t i = 0; i < idx; i++)
            if (sl__cfg_addr_same(&ents[i].addr, &t->addr))
                sl__cx_err(cx, v, "target %s is listed twice in %s", t->addr.text, upstream);
    }
    int64_t w;
    if ((v = f[T_WEIGHT].val) && sl__cfg_get_int(cx, v, "weight", 1, MAX_WEIGHT, &w)) {
        t->weight = (uint32_t)w;
        /* round-robin, least-conn and p2c-ewma give no share by weight: a weight there
         * would silently do nothing. */
        if (w != 1 && u->balancer != SL_LB_WEIGHTED_ROUND_ROBIN &&
            u->balancer != SL_LB_CONSISTENT_HASH)
            sl__cx_err(cx, v, "weight %lld needs balancer weighted-round-robin or consistent-hash",
                   (long long)w);
    }
    if ((v = f[T_TLS].val)) {
        char tls_where[224];
        snprintf(tls_where, sizeof tls_where, "'targets[%zu].tls' of %s", idx, upstream);
        sl__cfg_parse_target_tls(cx, v, tls_where, t);
    }
    if (v && tcp)
        tcp_unused(cx, f[T_TLS].key, "tls", tcp,
                   "a tcp listener relays the client's bytes as they are and never speaks TLS to a target");
}

/* Lays out the slots: each static entry's, each name's SL_DNS_SLOTS (empty until it
 * resolves) and the registry's (empty until a backend registers). Takes the entries'
 * fields over; frees the entry arrays. */
static void make_slots(sl__cx_t *cx, sl_upstream_conf_t *u, sl_target_conf_t *ents, char **hosts,
                       const uint16_t *ports, const int *lines, const int *cols, size_t n) {
    size_t nslots = 0, nnames = 0;
    for (size_t i = 0; i < n; i++) {
        nslots += hosts[i] ? SL_DNS_SLOTS : 1;
        nnames += hosts[i] != NULL;
    }
    u->registry_first = nslots;
    if (u->registry) nslots += u->registry_slots;
    u->targets = nslots ? sl__cx_calloc(cx, nslots, sizeof *u->targets) : NULL;
    u->names = nnames ? sl__cx_calloc(cx, nnames, sizeof *u->names) : NULL;
    if ((nslots && !u->targets) || (nnames && !u->names)) {
        for (size_t i = 0; i < n; i++) {
            free(ents[i].addr.text);
            free(hosts[i]);
            if (!u->targets) sl_tls_target_conf_free(ents[i].tls);
        }
        return;
    }
    u->ntargets = nslots;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!hosts[i]) {
            u->targets[k++] = ents[i];
            continue;
        }
        sl_dns_name_conf_t *nm = &u->names[u->nnames];
        nm->host = hosts[i];
        nm->entry = ents[i].addr.text;
        nm->port = ports[i];
        nm->weight = ents[i].weight;
        nm->first = k;
        nm->line = lines[i];
        nm->col = cols[i];
        for (size_t j = 0; j < SL_DNS_SLOTS; j++, k++) {
            sl_target_conf_t *t = &u->targets[k];
            t->kind = SL_TARGET_DNS;
            t->name = (int32_t)u->nnames;
            t->weight = ents[i].weight;
            t->tls = ents[i].tls;
            t->tls_borrowed = j > 0;
            t->addr.text = t->text;
        }
        u->nnames++;
    }
    for (; k < nslots; k++) {
        sl_target_conf_t *t = &u->targets[k];
        t->kind = SL_TARGET_REGISTERED;
        t->name = -1;
        t->weight = 1;
        t->addr.text = t->text;
    }
    for (size_t i = 0; i < u->ntargets; i++)
        if (u->targets[i].kind == SL_TARGET_STATIC) atomic_init(&u->targets[i].up, 1);
}

static const char *const balancer_names[] = {
    [SL_LB_ROUND_ROBIN] = "round-robin",
    [SL_LB_WEIGHTED_ROUND_ROBIN] = "weighted-round-robin",
    [SL_LB_LEAST_CONN] = "least-conn",
    [SL_LB_P2C_EWMA] = "p2c-ewma",
    [SL_LB_CONSISTENT_HASH] = "consistent-hash",
};

/* "ip", "path", "header:NAME", "cookie:NAME" (consistent-hash keys). */
static bool get_hash_on(sl__cx_t *cx, const yaml_node_t *v, const char *key, int *kind,
                        char **name) {
    const char *s = sl__cfg_get_text(cx, v, key, "a string");
    if (!s) return false;
    const char *arg = NULL;
    if (strcmp(s, "ip") == 0) {
        *kind = SL_HASH_IP;
    } else if (strcmp(s, "path") == 0) {
        *kind = SL_HASH_PATH;
    } else if (strncmp(s, "header:", 7) == 0) {
        *kind = SL_HASH_HEADER;
        arg = s + 7;
    } else if (strncmp(s, "cookie:", 7) == 0) {
        *kind = SL_HASH_COOKIE;
        arg = s + 7;
    } else {
        sl__cx_err(cx, v, "unknown %s '%s' (expected ip, path, header:NAME or cookie:NAME)", key,
                   s);
        return false;
    }
    if (arg && !sl__cfg_is_token(arg)) {
        sl__cx_err(cx, v, "%s '%s' needs a header or cookie name after the colon", key, s);
        return false;
    }
    if (arg && !(*name = sl__cx_strdup(cx, arg))) return false;
    return true;
}

enum { HA_TYPE, HA_PATH, HA_EXPECT, HA_INTERVAL, HA_TIMEOUT, HA_HEALTHY, HA_UNHEALTHY, HA_SERVICE, HA_N };
static const char *const active_keys[HA_N] = {
    "type", "path", "expect_status", "interval", "timeout", "healthy_threshold",
    "unhealthy_threshold", "service"};
enum { HP_MAX_FAILURES, HP_WINDOW, HP_N };
static const char *const passive_keys[HP_N] = {"max_failures", "window"};
enum { H_ACTIVE, H_PASSIVE, H_N };
static const char *const health_keys[H_N] = {"active", "passive"};

static void parse_health(sl__cx_t *cx, const yaml_node_t *m, const char *where,
                         sl_health_conf_t *h) {
    sl__field_t f[H_N];
    sl__cfg_scan_sub(cx, m, "health", where, health_keys, f, H_N);
    const yaml_node_t *v;
    int64_t n;
    if ((v = f[H_ACTIVE].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "active")) {
        sl__field_t a[HA_N];
        sl__cfg_scan_sub(cx, v, "health.active", where, active_keys, a, HA_N);
        h->active_type = SL_PROBE_HTTP;
        if (a[HA_TYPE].val) {
            const char *t = sl__cfg_get_text(cx, a[HA_TYPE].val, "type", "a string");
            if (t && strcmp(t, "tcp") == 0)
                h->active_type = SL_PROBE_TCP;
            else if (t && strcmp(t, "grpc") == 0)
                h->active_type = SL_PROBE_GRPC;
            else if (t && strcmp(t, "http") != 0)
                sl__cx_err(cx, a[HA_TYPE].val, "unknown probe type '%s' (expected http, tcp or grpc)", t);
        }
        if ((v = a[HA_SERVICE].val)) {
            free(h->service);
            h->service = NULL;
            if (h->active_type != SL_PROBE_GRPC)
                sl__cx_err(cx, v, "service is for a grpc probe (type: grpc)");
            else if (sl__cfg_get_string(cx, v, "service", &h->service) && strlen(h->service) > 200)
                sl__cx_err(cx, v, "service name longer than 200 bytes");
        }
        if ((v = a[HA_PATH].val)) {
            free(h->path);
            h->path = NULL;
            if (sl__cfg_get_string(cx, v, "path", &h->path) &&
                (h->path[0] != '/' || strpbrk(h->path, " \r\n\t")))
                sl__cx_err(cx, v, "probe path '%s' must start with '/' and contain no spaces",
                           h->path);
            if (h->active_type == SL_PROBE_TCP) sl__cx_err(cx, v, "a tcp probe has no path");
            if (h->active_type == SL_PROBE_GRPC)
                sl__cx_err(cx, v, "a grpc probe has no path (it calls grpc.health.v1.Health/Check; service: names what it checks)");
        }
        if ((v = a[HA_EXPECT].val) && sl__cfg_get_int(cx, v, "expect_status", 100, 599, &n))
            h->expect_status = (int)n;
        if (v && h->active_type != SL_PROBE_HTTP) sl__cx_err(cx, v, "expect_status is for an http probe");
        if ((v = a[HA_INTERVAL].val))
            sl__cfg_get_duration(cx, v, "interval", false, &h->interval_ms);
        if ((v = a[HA_TIMEOUT].val)) sl__cfg_get_duration(cx, v, "timeout", false, &h->timeout_ms);
        if ((v = a[HA_HEALTHY].val) && sl__cfg_get_int(cx, v, "healthy_threshold", 1, 100, &n))
            h->healthy_threshold = (uint32_t)n;
        if ((v = a[HA_UNHEALTHY].val) && sl__cfg_get_int(cx, v, "unhealthy_threshold", 1, 100, &n))
            h->unhealthy_threshold = (uint32_t)n;
    }
    if ((v = f[H_PASSIVE].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "passive")) {
        sl__field_t p[HP_N];
        sl__cfg_scan_sub(cx, v, "health.passive", where, passive_keys, p, HP_N);
        h->passive = true;
        if ((v = p[HP_MAX_FAILURES].val) && sl__cfg_get_int(cx, v, "max_failures", 1, 1000000, &n))
            h->max_failures = (uint32_t)n;
        if ((v = p[HP_WINDOW].val)) sl__cfg_get_duration(cx, v, "window", false, &h->window_ms);
    }
}

enum { CB_RATIO, CB_MIN, CB_WINDOW, CB_OPEN, CB_MAX_OPEN, CB_HALF, CB_SUCCESS, CB_N };
static const char *const breaker_keys[CB_N] = {
    "failure_ratio",    "min_requests",       "window",           "open_timeout",
    "max_open_timeout", "half_open_requests", "success_threshold"};

static void parse_breaker(sl__cx_t *cx, const yaml_node_t *m, const char *where,
                          sl_breaker_conf_t *b) {
    sl__field_t f[CB_N];
    sl__cfg_scan_sub(cx, m, "circuit_breaker", where, breaker_keys, f, CB_N);
    b->enabled = true;
    const yaml_node_t *v;
    int64_t n;
    if ((v = f[CB_RATIO].val))
        sl__cfg_get_number(cx, v, "failure_ratio", 0.01, 1.0, &b->failure_ratio);
    if ((v = f[CB_MIN].val) && sl__cfg_get_int(cx, v, "min_requests", 1, 1000000, &n))
        b->min_requests = (uint32_t)n;
    if ((v = f[CB_WINDOW].val)) sl__cfg_get_duration(cx, v, "window", false, &b->window_ms);
    if ((v = f[CB_OPEN].val))
        sl__cfg_get_duration(cx, v, "open_timeout", false, &b->open_timeout_ms);
    if ((v = f[CB_MAX_OPEN].val))
        sl__cfg_get_duration(cx, v, "max_open_timeout", false, &b->max_open_timeout_ms);
    if ((v = f[CB_HALF].val) && sl__cfg_get_int(cx, v, "half_open_requests", 1, 10000, &n))
        b->half_open_requests = (uint32_t)n;
    if ((v = f[CB_SUCCESS].val) && sl__cfg_get_int(cx, v, "success_threshold", 1, 10000, &n))
        b->success_threshold = (uint32_t)n;
    if (b->max_open_timeout_ms < b->open_timeout_ms)
        sl__cx_err(cx, f[CB_MAX_OPEN].val ? f[CB_MAX_OPEN].val : m,
               "max_open_timeout must be at least open_timeout");
}

enum { RT_ATTEMPTS, RT_ON, RT_BACKOFF, RT_MAX_BACKOFF, RT_MAX_BODY, RT_HEDGE, RT_N };
static const char *const retry_keys[RT_N] = {"attempts", "on", "backoff", "max_backoff", "max_body",
                                             "hedge_after"};

static const char *const protocol_names[] = {"http1", "h2", "h2c"};

const char *sl_upstream_protocol_name(int protocol) {
    return protocol >= 0 && protocol < (int)SL_ARRAY_LEN(protocol_names) ? protocol_names[protocol] : "?";
}

/* `retry:`. Its keys act only where something reads them: `on`, `backoff` and
 * `max_backoff` when a request may be tried again (attempts above 1); `max_body` there
 * too on HTTP/1.1 (on HTTP/2 it also bounds the body kept to replay a stream a GOAWAY
 * refused); `hedge_after` on every protocol (a hedge is a second exchange: a connection
 * over HTTP/1.1, a stream over HTTP/2). A key that
 * would do nothing is an error at the key. Called after `protocol:` was read. */
static void parse_retry(sl__cx_t *cx, const yaml_node_t *m, const char *where, sl_upstream_conf_t *u) {
    sl_retry_conf_t *r = &u->retry;
    sl__field_t f[RT_N];
    sl__cfg_scan_sub(cx, m, "retry", where, retry_keys, f, RT_N);
    const yaml_node_t *v;
    int64_t n;
    bool attempts_bad = false; /* then it is no "attempts: 1" to judge the other keys by */
    if ((v = f[RT_ATTEMPTS].val)) {
        if (sl__cfg_get_int(cx, v, "attempts", 1, 10, &n))
            r->attempts = (uint32_t)n;
        else
            attempts_bad = true;
    }
    size_t len;
    if (f[RT_ON].val && sl__cfg_list_len(cx, &f[RT_ON], &len)) {
        r->on_flags = 0;
        r->nstatuses = 0;
        for (size_t i = 0; i < len; i++) {
            const yaml_node_t *it = sl__cfg_seq_at(cx, f[RT_ON].val, i);
            if (!it) continue;
            if (sl__cfg_is_plain(it) && strcmp(sl__cfg_sval(it), "connect_error") == 0) {
                r->on_flags |= SL_RETRY_ON_CONNECT_ERROR;
            } else if (sl__cfg_is_plain(it) && strcmp(sl__cfg_sval(it), "timeout") == 0) {
                r->on_flags |= SL_RETRY_ON_TIMEOUT;
            } else if (sl__cfg_is_plain(it) && isdigit((unsigned char)sl__cfg_sval(it)[0])) {
                if (sl__cfg_get_int(cx, it, "on", 500, 599, &n)) {
                    if (r->nstatuses == SL_MAX_RETRY_STATUSES)
                        sl__cx_err(cx, it, "at most %d statuses in 'on'", SL_MAX_RETRY_STATUSES);
                    else
                        r->statuses[r->nstatuses++] = (uint16_t)n;
                }
            } else {
                sl__cx_err(cx, it,
                           "unknown retry condition '%s' (expected a 5xx status, connect_error or "
                           "timeout)",
                           it->type == YAML_SCALAR_NODE ? sl__cfg_sval(it) : "?");
            }
        }
    }
    if ((v = f[RT_BACKOFF].val)) sl__cfg_get_duration(cx, v, "backoff", true, &r->backoff_ms);
    if ((v = f[RT_MAX_BACKOFF].val))
        sl__cfg_get_duration(cx, v, "max_backoff", true, &r->max_backoff_ms);
    if ((v = f[RT_MAX_BODY].val))
        sl__cfg_get_size(cx, v, "max_body", 0, MAX_RETRY_BODY, &r->max_body);
    if ((v = f[RT_HEDGE].val)) sl__cfg_get_duration(cx, v, "hedge_after", true, &r->hedge_after_ms);
    if (r->max_backoff_ms < r->backoff_ms)
        sl__cx_err(cx, f[RT_MAX_BACKOFF].val ? f[RT_MAX_BACKOFF].val : m,
                   "max_backoff must be at least backoff");
    if (r->attempts > 1 || attempts_bad) return;
    static const int once_keys[] = {RT_ON, RT_BACKOFF, RT_MAX_BACKOFF, RT_MAX_BODY};
    for (size_t i = 0; i < SL_ARRAY_LEN(once_keys); i++) {
        const sl__field_t *k = &f[once_keys[i]];
        if (!k->val || (once_keys[i] == RT_MAX_BODY && u->protocol != SL_UP_HTTP1)) continue;
        sl__cx_err(cx, k->key,
                   "'%s' does nothing with attempts: 1 (no request is tried again; attempts "
                   "counts the first try)",
                   k->name);
    }
}

/* `protocol:`. HTTP/2 over TLS needs every target's `tls:` (h2c is the cleartext one), and
 * its client contexts offer ALPN h2 alone: a target that answers without it is refused
 * when it connects (h2_up.c), never spoken HTTP/1.1 to. */
static void parse_protocol(sl__cx_t *cx, const yaml_node_t *v, sl_upstream_conf_t *u) {
    const char *s = sl__cfg_get_text(cx, v, "protocol", "a string");
    size_t i = 0;
    while (s && i < SL_ARRAY_LEN(protocol_names) && strcmp(s, protocol_names[i]) != 0) i++;
    if (!s) return;
    if (i == SL_ARRAY_LEN(protocol_names)) {
        sl__cx_err(cx, v, "unknown protocol '%s' (expected http1, h2 or h2c)", s);
        return;
    }
    u->protocol = (uint8_t)i;
    for (size_t k = 0; k < u->ntargets && u->targets; k++) {
        sl_target_conf_t *t = &u->targets[k];
        if (u->protocol == SL_UP_H2 && !t->tls && t->kind != SL_TARGET_REGISTERED) {
            sl__cx_err(cx, v, "protocol h2 needs tls: on every target (h2c is HTTP/2 without TLS)");
            return;
        }
        if (u->protocol == SL_UP_H2C && t->tls) {
            sl__cx_err(cx, v, "protocol h2c is cleartext: a target with tls: wants protocol h2");
            return;
        }
        if (u->protocol == SL_UP_H2 && t->tls && !t->tls_borrowed && t->tls->rt) sl_tls_client_offer_h2(t->tls->rt);
    }
}

enum { K_MAX_IDLE, K_IDLE_TO, K_N };
static const char *const keepalive_keys[K_N] = {"max_idle", "idle_timeout"};
enum { TO_CONNECT, TO_READ, TO_WRITE, TO_N };
static const char *const timeout_keys[TO_N] = {"connect", "read", "write"};

enum { RG_ENABLED, RG_MAX_TTL, RG_MAX_TARGETS, RG_N };
static const char *const registry_keys[RG_N] = {"enabled", "max_ttl", "max_targets"};

enum { U_NAME, U_BALANCER, U_HASH_ON, U_HASH_EPS, U_TARGETS, U_KEEPALIVE, U_TIMEOUTS, U_HEALTH,
       U_BREAKER, U_RETRY, U_REGISTRY, U_PROTOCOL, U_N };
static const char *const upstream_keys[U_N] = {"name",     "balancer",  "hash_on", "hash_epsilon",
                                               "targets",  "keepalive", "timeouts", "health",
                                               "circuit_breaker", "retry", "registry", "protocol"};

void sl__cfg_parse_upstream(sl__cx_t *cx, const yaml_node_t *m, size_t idx) {
    sl_upstream_conf_t *u = &cx->cfg->upstreams[idx];
    char where[128];
    sl__cfg_describe(cx, m, "upstream", "upstreams", idx, where, sizeof where);
    sl__field_t f[U_N];
    sl__cfg_scan_map(cx, m, where, upstream_keys, f, U_N, NULL);
    u->line = sl__cfg_line_of(m);
    u->col = sl__cfg_col_of(m);
    u->balancer = SL_LB_ROUND_ROBIN;
    u->hash_on = SL_HASH_IP;
    u->hash_epsilon = INFINITY; /* bounded loads only when asked for */
    u->health = (sl_health_conf_t){.interval_ms = 2000, .timeout_ms = 1000, .healthy_threshold = 2,
                                   .unhealthy_threshold = 3, .max_failures = 5, .window_ms = 10000};
    u->breaker = (sl_breaker_conf_t){.failure_ratio = 0.5, .min_requests = 20, .window_ms = 30000,
                                     .open_timeout_ms = 1000, .max_open_timeout_ms = 60000,
                                     .half_open_requests = 2, .success_threshold = 2};
    u->retry = (sl_retry_conf_t){.attempts = 1,
                                 .on_flags = SL_RETRY_ON_CONNECT_ERROR | SL_RETRY_ON_TIMEOUT,
                                 .statuses = {502, 503, 504},
                                 .nstatuses = 3,
                                 .backoff_ms = 25,
                                 .max_backoff_ms = 250,
                                 .max_body = 1024 * 1024};
    u->keepalive_max_idle = 64;
    u->keepalive_idle_timeout_ms = 60 * 1000;
    u->connect_timeout_ms = 2 * 1000;
    u->read_timeout_ms = 30 * 1000;
    u->write_timeout_ms = 30 * 1000;

    const yaml_node_t *v = sl__cfg_required(cx, m, &f[U_NAME], where);
    if (v && sl__cfg_get_name(cx, v, "upstream", true, &u->name)) {
        for (size_t i = 0; i < idx; i++)
            if (cx->cfg->upstreams[i].name && strcmp(cx->cfg->upstreams[i].name, u->name) == 0)
                sl__cx_err(cx, v, "duplicate upstream name '%s' (first defined at line %d)",
                           u->name, cx->cfg->upstreams[i].line);
    }
    const sl_listener_conf_t *tcp = tcp_user(cx, u->name);
    u->tcp_only = tcp != NULL;
    if ((v = f[U_BALANCER].val)) {
        const char *s = sl__cfg_get_text(cx, v, "balancer", "a string");
        size_t i = 0;
        while (s && i < SL_ARRAY_LEN(balancer_names) && strcmp(s, balancer_names[i]) != 0) i++;
        if (s && i < SL_ARRAY_LEN(balancer_names))
            u->balancer = (int)i;
        else if (s)
            sl__cx_err(cx, v,
                   "unknown balancer '%s' (expected round-robin, weighted-round-robin, "
                   "least-conn, p2c-ewma or consistent-hash)",
                   s);
    }
    if ((v = f[U_HASH_ON].val) && get_hash_on(cx, v, "hash_on", &u->hash_on, &u->hash_name)) {
        if (u->balancer != SL_LB_CONSISTENT_HASH)
            sl__cx_err(cx, v, "hash_on needs balancer consistent-hash");
        else if (tcp && u->hash_on != SL_HASH_IP)
            tcp_unused(cx, f[U_HASH_ON].key, "hash_on", tcp,
                       "consistent-hash hashes a tcp session's client IP (a session has no path, "
                       "header or cookie)");
    }
    if ((v = f[U_HASH_EPS].val) &&
        sl__cfg_get_number(cx, v, "hash_epsilon", 0.0, 100.0, &u->hash_epsilon) &&
        u->balancer != SL_LB_CONSISTENT_HASH)
        sl__cx_err(cx, v, "hash_epsilon needs balancer consistent-hash");
    u->registry_max_ttl_ms = 60 * 1000;
    u->registry_slots = 32;
    if ((v = f[U_REGISTRY].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "registry")) {
        sl__field_t r[RG_N];
        sl__cfg_scan_sub(cx, v, "registry", where, registry_keys, r, RG_N);
        u->registry = true;
        if (r[RG_ENABLED].val) sl__cfg_get_bool(cx, r[RG_ENABLED].val, "enabled", &u->registry);
        if (r[RG_MAX_TTL].val)
            sl__cfg_get_duration(cx, r[RG_MAX_TTL].val, "max_ttl", false, &u->registry_max_ttl_ms);
        int64_t n;
        if (r[RG_MAX_TARGETS].val &&
            sl__cfg_get_int(cx, r[RG_MAX_TARGETS].val, "max_targets", 1, 1024, &n))
            u->registry_slots = (uint32_t)n;
        for (int i = RG_MAX_TTL; !u->registry && i < RG_N; i++)
            if (r[i].val)
                sl__cx_err(cx, r[i].key, "'%s' does nothing with enabled: false", r[i].name);
    }
    size_t len;
    if ((v = sl__cfg_required(cx, m, &f[U_TARGETS], where)) &&
        sl__cfg_list_len(cx, &f[U_TARGETS], &len)) {
        if (len == 0 && !u->registry)
            sl__cx_err(cx, v, "%s needs at least one target (or registry: { enabled: true })", where);
        sl_target_conf_t *ents = sl__cx_calloc(cx, len + 1, sizeof *ents);
        char **hosts = sl__cx_calloc(cx, len + 1, sizeof *hosts);
        uint16_t *ports = sl__cx_calloc(cx, len + 1, sizeof *ports);
        int *lines = sl__cx_calloc(cx, 2 * (len + 1), sizeof *lines);
        if (ents && hosts && ports && lines) {
            for (size_t i = 0; i < len; i++) {
                const yaml_node_t *t = sl__cfg_list_map(cx, &f[U_TARGETS], i);
                if (!t) continue;
                lines[i] = sl__cfg_line_of(t);
                lines[len + 1 + i] = sl__cfg_col_of(t);
                parse_target(cx, t, where, i, ents, &hosts[i], &ports[i], u, tcp);
            }
            make_slots(cx, u, ents, hosts, ports, lines, lines + len + 1, len);
        }
        free(ents);
        free(hosts);
        free(ports);
        free(lines);
    }
    if (tcp && f[U_KEEPALIVE].val) {
        tcp_unused(cx, f[U_KEEPALIVE].key, "keepalive", tcp, "a tcp session's connection is never pooled");
    } else if ((v = f[U_KEEPALIVE].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "keepalive")) {
        sl__field_t k[K_N];
        sl__cfg_scan_sub(cx, v, "keepalive", where, keepalive_keys, k, K_N);
        int64_t n;
        if (k[K_MAX_IDLE].val &&
            sl__cfg_get_int(cx, k[K_MAX_IDLE].val, "max_idle", 0, MAX_KEEPALIVE_IDLE, &n))
            u->keepalive_max_idle = (uint32_t)n;
        if (k[K_IDLE_TO].val)
            sl__cfg_get_duration(cx, k[K_IDLE_TO].val, "idle_timeout", false, &u->keepalive_idle_timeout_ms);
    }
    if ((v = f[U_TIMEOUTS].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "timeouts")) {
        sl__field_t t[TO_N];
        sl__cfg_scan_sub(cx, v, "timeouts", where, timeout_keys, t, TO_N);
        if (t[TO_CONNECT].val)
            sl__cfg_get_duration(cx, t[TO_CONNECT].val, "connect", false, &u->connect_timeout_ms);
        if (t[TO_READ].val)
            sl__cfg_get_duration(cx, t[TO_READ].val, "read", false, &u->read_timeout_ms);
        if (t[TO_WRITE].val)
            sl__cfg_get_duration(cx, t[TO_WRITE].val, "write", false, &u->write_timeout_ms);
        for (int i = TO_READ; tcp && i <= TO_WRITE; i++)
            if (t[i].val)
                tcp_unused(cx, t[i].key, i == TO_READ ? "timeouts.read" : "timeouts.write", tcp,
                           "a tcp session that moves no byte either way is closed at the listener's "
                           "idle_timeout");
    }
    if ((v = f[U_HEALTH].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "health"))
        parse_health(cx, v, where, &u->health);
    if ((v = f[U_BREAKER].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "circuit_breaker"))
        parse_breaker(cx, v, where, &u->breaker);
    if (tcp && f[U_PROTOCOL].val)
        tcp_unused(cx, f[U_PROTOCOL].key, "protocol", tcp,
                   "a tcp listener relays bytes and speaks no HTTP to the targets");
    else if ((v = f[U_PROTOCOL].val))
        parse_protocol(cx, v, u);
    if (tcp && f[U_RETRY].val)
        tcp_unused(cx, f[U_RETRY].key, "retry", tcp,
                   "a failed connect is tried once more on another target, whatever retry says");
    else if ((v = f[U_RETRY].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "retry"))
        parse_retry(cx, v, where, u);
    /* A grpc probe over TLS offers ALPN from the upstream's TLS settings: h2 only with h2. */
    for (size_t i = 0; u->health.active_type == SL_PROBE_GRPC && u->protocol != SL_UP_H2 && i < u->ntargets; i++)
        if (u->targets[i].tls) {
            sl__cx_err(cx, f[U_HEALTH].val, "a grpc probe of a TLS target needs protocol: h2 (gRPC servers "
                                            "want ALPN h2, which only protocol h2 offers)");
            break;
        }
    if (u->health.active_type == SL_PROBE_HTTP && !u->health.path)
        u->health.path = sl__cx_strdup(cx, "/health");
}
