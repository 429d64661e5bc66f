/* listeners.c — `listeners:`: address, protocol, limits and timeouts, the PROXY protocol
 * (`proxy_protocol`, `accept_proxy_protocol`) and a tcp listener's `sni_routes` with the
 * lookup table sl_sni_route reads. The `tls:` of an http listener is tls_conf.c's. */

#include "config/parse.h"
#include "base/common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    L_NAME,
    L_LISTEN,
    L_PROTOCOL,
    L_MAX_BODY,
    L_MAX_HEADER,
    L_MAX_LINE,
    L_HEADER_TO,
    L_IDLE_TO,
    L_UPSTREAM,
    L_SPLICE,
    L_PROXY_SEND,
    L_PROXY_ACCEPT,
    L_TLS,
    L_SNI_ROUTES,
    L_PLUGINS,
    L_TRUSTED,
    L_HTTP2,
    L_N
};
static const char *const listener_keys[L_N] = {
    [L_NAME] = "name",
    [L_LISTEN] = "listen",
    [L_PROTOCOL] = "protocol",
    [L_MAX_BODY] = "max_body",
    [L_MAX_HEADER] = "max_header_size",
    [L_MAX_LINE] = "max_request_line",
    [L_HEADER_TO] = "header_timeout",
    [L_IDLE_TO] = "idle_timeout",
    [L_UPSTREAM] = "upstream",
    [L_SPLICE] = "splice",
    [L_PROXY_SEND] = "proxy_protocol",
    [L_PROXY_ACCEPT] = "accept_proxy_protocol",
    [L_TLS] = "tls",
    [L_SNI_ROUTES] = "sni_routes",
    [L_PLUGINS] = "plugins",
    [L_TRUSTED] = "trusted_proxies",
    [L_HTTP2] = "http2",
};

enum { H2_ENABLED, H2_MAX_STREAMS, H2_N };
static const char *const http2_keys[H2_N] = {"enabled", "max_concurrent_streams"};

/* `http2: false`, `http2: true` or `http2: {enabled, max_concurrent_streams}`. */
static void parse_http2(sl__cx_t *cx, const sl__field_t *f, const yaml_node_t *v, bool tcp,
                        const char *owner, sl_listener_conf_t *l) {
    if (tcp) {
        sl__cx_err(cx, f->key, "'http2' belongs to protocol: http listeners");
        return;
    }
    if (v->type == YAML_SCALAR_NODE) {
        sl__cfg_get_bool(cx, v, "http2", &l->http2);
        return;
    }
    if (!sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "http2")) return;
    char where[192];
    snprintf(where, sizeof where, "'http2' of %s", owner);
    sl__field_t hf[H2_N];
    sl__cfg_scan_map(cx, v, where, http2_keys, hf, H2_N, NULL);
    const yaml_node_t *x;
    if ((x = hf[H2_ENABLED].val)) sl__cfg_get_bool(cx, x, "enabled", &l->http2);
    int64_t n;
    if ((x = hf[H2_MAX_STREAMS].val) && sl__cfg_get_int(cx, x, "max_concurrent_streams", 1, 10000, &n))
        l->http2_max_streams = (uint32_t)n;
    if (x && !l->http2)
        sl__cx_err(cx, hf[H2_MAX_STREAMS].key, "'max_concurrent_streams' does nothing with enabled: false");
}

/* "10.0.0.0/8", "::1", "192.168.1.7" -> an sl_cidr_t; false with an error. */
static bool get_cidr(sl__cx_t *cx, const yaml_node_t *v, sl_cidr_t *out);

/* A list of addresses or CIDRs (the field f): *out and *n, at least one when required. */
static void get_cidrs(sl__cx_t *cx, const sl__field_t *f, const yaml_node_t *fv, const char *none, sl_cidr_t **out,
                      size_t *nout) {
    size_t n;
    if (!fv || !sl__cfg_list_len(cx, f, &n)) return;
    if (n == 0 && none) sl__cx_err(cx, fv, "%s", none);
    if (n && (*out = sl__cx_calloc(cx, n, sizeof **out))) {
        *nout = n;
        for (size_t i = 0; i < n; i++) {
            const yaml_node_t *it = sl__cfg_seq_at(cx, fv, i);
            if (it) get_cidr(cx, it, &(*out)[i]);
        }
    }
}

static bool get_cidr(sl__cx_t *cx, const yaml_node_t *v, sl_cidr_t *out) {
    const char *s = sl__cfg_get_text(cx, v, "from", "an address or CIDR");
    if (!s) return false;
    char host[64];
    const char *slash = strchr(s, '/');
    size_t hl = slash ? (size_t)(slash - s) : strlen(s);
    if (hl == 0 || hl >= sizeof host) goto bad;
    memcpy(host, s, hl);
    host[hl] = 0;
    bool v6 = strchr(host, ':') != NULL;
    memset(out, 0, sizeof *out);
    if (v6) {
        if (inet_pton(AF_INET6, host, out->ip) != 1) goto bad;
    } else {
        out->ip[10] = out->ip[11] = 0xff;
        if (inet_pton(AF_INET, host, out->ip + 12) != 1) goto bad;
    }
    long bits = v6 ? 128 : 32;
    if (slash) {
        char *end;
        bits = strtol(slash + 1, &end, 10);
        if (*end || end == slash + 1 || bits < 0 || bits > (v6 ? 128 : 32)) goto bad;
    }
    out->bits = (uint8_t)(v6 ? bits : bits + 96);
    return true;
bad:
    sl__cx_err(cx, v, "'%s' is not an address or CIDR", s);
    return false;
}

enum { PP_SEND, PP_N };
static const char *const proxy_send_keys[PP_N] = {"send"};
enum { PA_FROM, PA_N };
static const char *const proxy_accept_keys[PA_N] = {"from"};

enum { SR_SNI, SR_UPSTREAM, SR_N };
static const char *const sni_route_keys[SR_N] = {"sni", "upstream"};

/* A TLS server name to route on or to pick a certificate by: a host name or a "*." wildcard,
 * as a route's hosts (lower-cased and without a trailing dot, like them), but never an IP
 * literal: RFC 6066 forbids those in SNI. */
bool sl__cfg_check_sni(sl__cx_t *cx, const yaml_node_t *v, char *s) {
    if (!sl__cfg_check_host(cx, v, s)) return false;
    struct in_addr a4;
    if (s[0] == '[' || inet_pton(AF_INET, s, &a4) == 1) {
        sl__cx_err(cx, v, "sni '%s': an IP address is never a TLS server name (RFC 6066)", s);
        return false;
    }
    return true;
}

/* `sni_routes:` of a tcp listener: each entry's names and upstream name (resolved with
 * the listener's own upstream, once the upstreams are parsed). */
static void parse_sni_routes(sl__cx_t *cx, const sl__field_t *f, const char *where,
                             sl_listener_conf_t *l) {
    size_t len;
    if (!sl__cfg_list_len(cx, f, &len)) return;
    if (len == 0) {
        sl__cx_err(cx, f->val, "'sni_routes' of %s needs at least one entry", where);
        return;
    }
    if (!(l->sni_routes = sl__cx_calloc(cx, len, sizeof *l->sni_routes))) return;
    l->nsni_routes = len;
    for (size_t i = 0; i < len; i++) {
        sl_sni_route_conf_t *r = &l->sni_routes[i];
        r->upstream = -1;
        const yaml_node_t *m = sl__cfg_list_map(cx, f, i);
        if (!m) continue;
        char sub[192];
        snprintf(sub, sizeof sub, "sni_routes[%zu] of %s", i, where);
        sl__field_t rf[SR_N];
        sl__cfg_scan_map(cx, m, sub, sni_route_keys, rf, SR_N, NULL);
        r->line = sl__cfg_line_of(m);
        r->col = sl__cfg_col_of(m);
        const yaml_node_t *v = sl__cfg_required(cx, m, &rf[SR_SNI], sub);
        if (v) {
            sl__cfg_get_str_list(cx, &rf[SR_SNI], sl__cfg_check_sni, &r->names, &r->nnames);
            if (v->type == YAML_SEQUENCE_NODE && r->nnames == 0)
                sl__cx_err(cx, v, "'sni' of %s needs at least one name", sub);
        }
        /* a name listed twice (in this entry or an earlier one) is an error at the second */
        for (size_t k = 0; k < r->nnames; k++) {
            if (!r->names[k]) continue;
            bool dup = false;
            for (size_t j = 0; j <= i && !dup; j++) {
                const sl_sni_route_conf_t *o = &l->sni_routes[j];
                for (size_t q = 0; q < (j == i ? k : o->nnames) && !dup; q++)
                    dup = o->names[q] && strcmp(o->names[q], r->names[k]) == 0;
            }
            if (dup)
                sl__cx_err(cx, sl__cfg_seq_at(cx, v, k), "sni '%s' is listed twice in %s",
                           r->names[k], where);
        }
        if ((v = sl__cfg_required(cx, m, &rf[SR_UPSTREAM], sub)) &&
            sl__cfg_get_string(cx, v, "upstream", &r->upstream_name)) {
            r->upstream_line = sl__cfg_line_of(v);
            r->upstream_col = sl__cfg_col_of(v);
        }
    }
}

int sl_sni_route(const sl_listener_conf_t *l, const char *name, size_t nlen, int *result) {
    return sl_sni_lookup(l->sni_names, l->nsni_exact, l->nsni_wild, l->upstream, name, nlen,
                         result);
}

static int cmp_sni_exact(const void *a, const void *b) {
    const sl_sni_name_t *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return memcmp(x->name, y->name, x->len);
}

static int cmp_sni_wild(const void *a, const void *b) {
    const sl_sni_name_t *x = a, *y = b;
    return x->len == y->len ? 0 : x->len > y->len ? -1 : 1;
}

/* The lookup table of sl_sni_route (sni.h's sl_sni_lookup): exact names sorted for a
 * binary search, then the wildcards' suffixes longest first. After the upstream names were
 * resolved. */
void sl__cfg_build_sni_names(sl__cx_t *cx, sl_listener_conf_t *l) {
    size_t n = 0;
    for (size_t i = 0; i < l->nsni_routes; i++) n += l->sni_routes[i].nnames;
    if (!n || !(l->sni_names = sl__cx_calloc(cx, n, sizeof *l->sni_names))) return;
    size_t ne = 0, nw = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < l->nsni_routes; i++) {
            const sl_sni_route_conf_t *r = &l->sni_routes[i];
            for (size_t k = 0; k < r->nnames; k++) {
                const char *s = r->names[k];
                if (!s || (s[0] == '*') != (pass == 1)) continue;
                sl_sni_name_t *e = &l->sni_names[pass ? ne + nw++ : ne++];
                e->name = pass ? s + 1 : s;
                e->len = (uint32_t)strlen(e->name);
                e->upstream = r->upstream;
            }
        }
    }
    qsort(l->sni_names, ne, sizeof *l->sni_names, cmp_sni_exact);
    qsort(l->sni_names + ne, nw, sizeof *l->sni_names, cmp_sni_wild);
    l->nsni_exact = ne;
    l->nsni_wild = nw;
}

void sl__cfg_parse_listener(sl__cx_t *cx, const yaml_node_t *m, size_t idx) {
    sl_listener_conf_t *l = &cx->cfg->listeners[idx];
    char where[128];
    sl__cfg_describe(cx, m, "listener", "listeners", idx, where, sizeof where);
    sl__field_t f[L_N];
    sl__cfg_scan_map(cx, m, where, listener_keys, f, L_N, NULL);
    l->line = sl__cfg_line_of(m);
    l->col = sl__cfg_col_of(m);
    l->protocol = SL_PROTO_HTTP;
    l->max_body = 0;
    l->max_header_size = 32 * 1024;
    l->max_request_line = 8 * 1024;
    l->header_timeout_ms = 10 * 1000;
    l->idle_timeout_ms = 60 * 1000;
    l->http2 = true;
    l->http2_max_streams = 100;

    const yaml_node_t *v = sl__cfg_required(cx, m, &f[L_NAME], where);
    if (v && sl__cfg_get_name(cx, v, "listener", true, &l->name)) {
        for (size_t i = 0; i < idx; i++)
            if (cx->cfg->listeners[i].name && strcmp(cx->cfg->listeners[i].name, l->name) == 0)
                sl__cx_err(cx, v, "duplicate listener name '%s' (first defined at line %d)",
                           l->name, cx->cfg->listeners[i].line);
    }
    if ((v = sl__cfg_required(cx, m, &f[L_LISTEN], where)) &&
        sl__cfg_get_addr(cx, v, "listen", false, &l->listen)) {
        for (size_t i = 0; i < idx; i++)
            if (sl__cfg_addr_same(&cx->cfg->listeners[i].listen, &l->listen) &&
                sl__cfg_addr_port(&l->listen))
                sl__cx_err(cx, v, "address %s is already used by the listener at line %d",
                       l->listen.text, cx->cfg->listeners[i].line);
    }
    l->upstream = -1;
    if ((v = f[L_PROTOCOL].val)) {
        const char *s = sl__cfg_get_text(cx, v, "protocol", "a string");
        if (s && strcmp(s, "tcp") == 0)
            l->protocol = SL_PROTO_TCP;
        else if (s && strcmp(s, "http") != 0)
            sl__cx_err(cx, v, "unknown protocol '%s' (expected http or tcp)", s);
    }
    bool tcp = l->protocol == SL_PROTO_TCP;
    if (tcp) l->idle_timeout_ms = 300 * 1000;
    if ((v = f[L_UPSTREAM].val)) {
        if (!tcp)
            sl__cx_err(cx, f[L_UPSTREAM].key,
                       "'upstream' belongs to protocol: tcp listeners (http routes name theirs)");
        else if (sl__cfg_get_string(cx, v, "upstream", &l->upstream_name)) {
            l->upstream_line = sl__cfg_line_of(v);
            l->upstream_col = sl__cfg_col_of(v);
        }
    } else if (tcp && !f[L_SNI_ROUTES].val && !f[L_PLUGINS].val) {
        sl__cx_err(
            cx, m,
            "missing required key 'upstream' in %s (protocol: tcp, no sni_routes or plugins)",
            where);
    }
    /* the connect timeout of a session sent to an address (a preread plugin's choice); the
     * listener's upstream, when it has one, sets it below */
    l->connect_timeout_ms = 2 * 1000;
    if (f[L_PLUGINS].val) {
        if (!tcp)
            sl__cx_err(cx, f[L_PLUGINS].key,
                       "'plugins' belongs to protocol: tcp listeners (the preread phase; "
                       "http routes list their own plugins)");
        else
            sl__cfg_parse_plugins(cx, &f[L_PLUGINS], where, &l->plugins, &l->nplugins);
    }
    if (f[L_SNI_ROUTES].val) {
        if (!tcp)
            sl__cx_err(cx, f[L_SNI_ROUTES].key,
                       "'sni_routes' belongs to protocol: tcp listeners (http routes match hosts)");
        else
            parse_sni_routes(cx, &f[L_SNI_ROUTES], where, l);
    }
    if ((v = f[L_SPLICE].val)) {
        const char *s = sl__cfg_get_text(cx, v, "splice", "a string");
        if (!tcp)
            sl__cx_err(cx, f[L_SPLICE].key, "'splice' belongs to protocol: tcp listeners");
        else if (s && strcmp(s, "off") == 0)
            l->splice = SL_SPLICE_OFF;
        else if (s && strcmp(s, "auto") != 0)
            sl__cx_err(cx, v, "unknown splice '%s' (expected auto or off)", s);
    }
    if ((v = f[L_PROXY_SEND].val) &&
        sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "proxy_protocol")) {
        char sub[192];
        snprintf(sub, sizeof sub, "'proxy_protocol' of %s", where);
        sl__field_t pf[PP_N];
        sl__cfg_scan_map(cx, v, sub, proxy_send_keys, pf, PP_N, NULL);
        const yaml_node_t *sv = sl__cfg_required(cx, v, &pf[PP_SEND], sub);
        const char *s = sv ? sl__cfg_get_text(cx, sv, "send", "a string") : NULL;
        if (!tcp)
            sl__cx_err(cx, f[L_PROXY_SEND].key,
                       "'proxy_protocol' belongs to protocol: tcp listeners");
        else if (s && strcmp(s, "v1") == 0)
            l->proxy_send = SL_PROXY_V1;
        else if (s && strcmp(s, "v2") == 0)
            l->proxy_send = SL_PROXY_V2;
        else if (s)
            sl__cx_err(cx, sv, "unknown PROXY protocol version '%s' (expected v1 or v2)", s);
    }
    if ((v = f[L_PROXY_ACCEPT].val) &&
        sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "accept_proxy_protocol")) {
        char sub[192];
        snprintf(sub, sizeof sub, "'accept_proxy_protocol' of %s", where);
        sl__field_t pf[PA_N];
        sl__cfg_scan_map(cx, v, sub, proxy_accept_keys, pf, PA_N, NULL);
        const yaml_node_t *fv = sl__cfg_required(cx, v, &pf[PA_FROM], sub);
        get_cidrs(cx, &pf[PA_FROM], fv, "'from' needs at least one address or CIDR (the trusted senders)",
                  &l->proxy_from, &l->nproxy_from);
        l->accept_proxy = true;
    }
    if ((v = f[L_TRUSTED].val)) {
        if (tcp)
            sl__cx_err(cx, f[L_TRUSTED].key,
                       "'trusted_proxies' belongs to protocol: http listeners (X-Forwarded-* headers)");
        else
            get_cidrs(cx, &f[L_TRUSTED], v, NULL, &l->trusted_proxies, &l->ntrusted_proxies);
    }
    if ((v = f[L_TLS].val) && sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "tls")) {
        if (tcp)
            sl__cx_err(cx, f[L_TLS].key,
                       "'tls' (termination) belongs to protocol: http listeners; a tcp listener "
                       "passes TLS through untouched");
        else
            sl__cfg_parse_tls(cx, v, where, l);
    }
    if ((v = f[L_HTTP2].val)) parse_http2(cx, &f[L_HTTP2], v, tcp, where, l);
    if (tcp) l->http2 = false;
    /* ALPN offers h2 (then http/1.1) only where HTTP/2 is on. */
    if (l->tls && l->tls->rt) sl_tls_server_offer_h2(l->tls->rt, l->http2);
    /* A tcp session reads no HTTP head or body; it waits for first bytes only for a PROXY
     * header or a ClientHello. */
    for (int i = L_MAX_BODY; tcp && i <= L_MAX_LINE; i++)
        if (f[i].val)
            sl__cx_err(cx, f[i].key, "'%s' belongs to protocol: http listeners (a tcp session has no "
                       "HTTP head or body)", f[i].name);
    uint64_t n;
    if ((v = f[L_MAX_BODY].val)) sl__cfg_get_size(cx, v, "max_body", 0, UINT64_MAX, &l->max_body);
    if ((v = f[L_MAX_HEADER].val) && sl__cfg_get_size(cx, v, "max_header_size", 1, UINT32_MAX, &n))
        l->max_header_size = (uint32_t)n;
    if ((v = f[L_MAX_LINE].val) && sl__cfg_get_size(cx, v, "max_request_line", 1, UINT32_MAX, &n))
        l->max_request_line = (uint32_t)n;
    if ((v = f[L_HEADER_TO].val))
        sl__cfg_get_duration(cx, v, "header_timeout", false, &l->header_timeout_ms);
    if ((v = f[L_IDLE_TO].val))
        sl__cfg_get_duration(cx, v, "idle_timeout", false, &l->idle_timeout_ms);
}
