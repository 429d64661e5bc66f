/* tls_conf.c — the `tls:` sections: an http listener's (certificates, versions, ciphers,
 * tickets, client certificates) and a target's (verification, CA, SNI). Each builds its
 * contexts (tls_ctx.c) as it is parsed, so an unreadable file or a mismatched key is a
 * config error at its line. */

#include "config/parse.h"

#include <arpa/inet.h>
#include "base/common.h"

#include <stdio.h>
#include <string.h>

enum { TC_CERT, TC_KEY, TC_SNI, TC_DEFAULT, TC_N };
static const char *const tls_cert_keys[TC_N] = {"cert", "key", "sni", "default"};
enum { TL_CERTS, TL_MIN_VERSION, TL_CIPHERS, TL_TICKETS, TL_HS_TIMEOUT, TL_CLIENT_AUTH, TL_N };
static const char *const tls_keys[TL_N] = {"certificates",    "min_version",       "ciphers",
                                           "session_tickets", "handshake_timeout", "client_auth"};
enum { CA_CA, CA_MODE, CA_DEPTH, CA_CRL, CA_N };
static const char *const client_auth_keys[CA_N] = {"ca", "mode", "depth", "crl"};

/* Drops an absolute name's trailing dot ("api.example.com."): RFC 6066 sends the name
 * without it, and certificates name hosts without it (curl strips it for both). */
static void drop_final_dot(char *s) {
    size_t n = strlen(s);
    if (n >= 2 && s[n - 1] == '.' && s[n - 2] != '.') s[n - 1] = 0;
}

/* A target's `sni`: the name sent and verified, lower-cased and without a trailing dot.
 * One host name: a wildcard or an IP address would go out as SNI, which carries neither
 * (RFC 6066 3), and be checked as a host name no certificate has. */
static bool check_sni_name(sl__cx_t *cx, const yaml_node_t *v, char *s) {
    bool ok = *s != 0;
    for (char *q = s; *q; q++) *q = (char)((*q >= 'A' && *q <= 'Z') ? *q + 32 : *q);
    drop_final_dot(s);
    if (s[0] == '*') {
        sl__cx_err(cx, v, "sni '%s': a target's sni is one host name, not a wildcard", s);
        return false;
    }
    for (const char *p = s; *p && ok; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.';
    if (!ok) {
        sl__cx_err(cx, v, "'%s' is not a server name (a DNS name)", s);
        return false;
    }
    struct in_addr a4;
    if (inet_pton(AF_INET, s, &a4) == 1) {
        sl__cx_err(cx, v,
                   "sni '%s': an IP address is never a TLS server name (RFC 6066); without sni the "
                   "target's IP address is what is verified",
                   s);
        return false;
    }
    return true;
}

static void parse_tls_cert(sl__cx_t *cx, const yaml_node_t *m, size_t idx, const char *owner,
                           sl_tls_cert_conf_t *c) {
    char where[192];
    snprintf(where, sizeof where, "'tls.certificates[%zu]' of %s", idx, owner);
    sl__field_t f[TC_N];
    sl__cfg_scan_map(cx, m, where, tls_cert_keys, f, TC_N, NULL);
    c->line = sl__cfg_line_of(m);
    c->col = sl__cfg_col_of(m);
    const yaml_node_t *v;
    if ((v = sl__cfg_required(cx, m, &f[TC_CERT], where)) &&
        sl__cfg_get_string(cx, v, "cert", &c->cert))
        c->cert_path = sl__cfg_resolve_path(cx, c->cert);
    if ((v = sl__cfg_required(cx, m, &f[TC_KEY], where)) &&
        sl__cfg_get_string(cx, v, "key", &c->key))
        c->key_path = sl__cfg_resolve_path(cx, c->key);
    /* sni_routes' rules: a name a ClientHello can carry, compared as the client's is */
    if (f[TC_SNI].val) sl__cfg_get_str_list(cx, &f[TC_SNI], sl__cfg_check_sni, &c->sni, &c->nsni);
    if ((v = f[TC_DEFAULT].val)) sl__cfg_get_bool(cx, v, "default", &c->is_default);
}

/* `client_auth:` (mTLS). The files are read when the contexts are built. */
static void parse_client_auth(sl__cx_t *cx, const yaml_node_t *m, const char *owner,
                              sl_tls_listener_conf_t *t) {
    if (!sl__cfg_want_type(cx, m, YAML_MAPPING_NODE, "client_auth")) return;
    sl_tls_client_auth_conf_t *a = sl__cx_calloc(cx, 1, sizeof *a);
    if (!a) return;
    t->client_auth = a;
    a->line = sl__cfg_line_of(m);
    a->col = sl__cfg_col_of(m);
    a->depth = 1;
    char where[192];
    snprintf(where, sizeof where, "'tls.client_auth' of %s", owner);
    sl__field_t f[CA_N];
    sl__cfg_scan_map(cx, m, where, client_auth_keys, f, CA_N, NULL);
    const yaml_node_t *v;
    if ((v = sl__cfg_required(cx, m, &f[CA_CA], where)) &&
        sl__cfg_get_string(cx, v, "ca", &a->ca))
        a->ca_path = sl__cfg_resolve_path(cx, a->ca);
    if ((v = f[CA_CRL].val) && sl__cfg_get_string(cx, v, "crl", &a->crl))
        a->crl_path = sl__cfg_resolve_path(cx, a->crl);
    if ((v = f[CA_MODE].val)) {
        const char *s = sl__cfg_get_text(cx, v, "mode", "a string");
        if (s && strcmp(s, "optional") == 0)
            a->mode = SL_CLIENT_AUTH_OPTIONAL;
        else if (s && strcmp(s, "required") != 0)
            sl__cx_err(cx, v, "mode '%s' is not one of required, optional", s);
    }
    int64_t depth;
    if ((v = f[CA_DEPTH].val) && sl__cfg_get_int(cx, v, "depth", 0, 32, &depth))
        a->depth = (int)depth;
}

void sl__cfg_parse_tls(sl__cx_t *cx, const yaml_node_t *m, const char *owner, sl_listener_conf_t *l) {
    sl_tls_listener_conf_t *t = sl__cx_calloc(cx, 1, sizeof *t);
    if (!t) return;
    l->tls = t;
    t->line = sl__cfg_line_of(m);
    t->col = sl__cfg_col_of(m);
    t->session_tickets = true;
    t->handshake_timeout_ms = 10 * 1000;
    int errs_before = (int)cx->nerrs;
    char where[192];
    snprintf(where, sizeof where, "'tls' of %s", owner);
    sl__field_t f[TL_N];
    sl__cfg_scan_map(cx, m, where, tls_keys, f, TL_N, NULL);
    const yaml_node_t *v;
    size_t n = 0;
    if ((v = sl__cfg_required(cx, m, &f[TL_CERTS], where)) &&
        sl__cfg_list_len(cx, &f[TL_CERTS], &n)) {
        if (n == 0) sl__cx_err(cx, v, "'certificates' needs at least one entry");
        if (n && (t->certs = sl__cx_calloc(cx, n, sizeof *t->certs))) {
            t->ncerts = n;
            size_t ndef = 0;
            for (size_t i = 0; i < n; i++) {
                const yaml_node_t *cm = sl__cfg_list_map(cx, &f[TL_CERTS], i);
                if (!cm) continue;
                parse_tls_cert(cx, cm, i, owner, &t->certs[i]);
                if (t->certs[i].is_default && ++ndef > 1)
                    sl__cx_err(cx, cm, "only one certificate may be the default");
            }
        }
    }
    if ((v = f[TL_MIN_VERSION].val)) {
        const char *s = sl__cfg_get_text(cx, v, "min_version", "a string");
        if (s && (strcmp(s, "1.3") == 0 || strcmp(s, "TLSv1.3") == 0))
            t->min_version = SL_TLS_V13;
        else if (s && strcmp(s, "1.2") != 0 && strcmp(s, "TLSv1.2") != 0)
            sl__cx_err(cx, v, "min_version '%s' is not allowed (1.2 or 1.3; never below 1.2)", s);
    }
    if ((v = f[TL_CIPHERS].val) && sl__cfg_get_string(cx, v, "ciphers", &t->ciphers) &&
        t->min_version == SL_TLS_V13)
        sl__cx_err(cx, f[TL_CIPHERS].key,
                   "'ciphers' does nothing with min_version 1.3 (it lists TLS 1.2 suites; TLS 1.3 "
                   "uses OpenSSL's AEAD suites)");
    if ((v = f[TL_TICKETS].val)) sl__cfg_get_bool(cx, v, "session_tickets", &t->session_tickets);
    if ((v = f[TL_HS_TIMEOUT].val))
        sl__cfg_get_duration(cx, v, "handshake_timeout", false, &t->handshake_timeout_ms);
    if ((v = f[TL_CLIENT_AUTH].val)) parse_client_auth(cx, v, owner, t);
    if ((int)cx->nerrs != errs_before || cx->oom) return;
    char err[512];
    int bad = -1;
    t->rt = sl_tls_server_build(t, err, sizeof err, &bad);
    if (!t->rt) {
        if (bad >= 0)
            sl__cx_at(cx, t->certs[bad].line, t->certs[bad].col, "%s", err);
        else if (bad == -2 && f[TL_CIPHERS].val)
            sl__cx_err(cx, f[TL_CIPHERS].val, "%s", err);
        else if (bad == -3 && t->client_auth)
            sl__cx_at(cx, t->client_auth->line, t->client_auth->col, "client_auth: %s", err);
        else
            sl__cx_at(cx, t->line, t->col, "%s", err);
    }
}

/* mtls-auth reads the certificate tls.client_auth verified: a config using it where no http
 * listener asks for one would answer every request 401. Routes are reachable from every
 * http listener, so one listener with client_auth is enough (requests arriving on the
 * others get the 401). Lua routes load after this check and are not part of it. */
static void check_mtls_chain(sl__cx_t *cx, const sl_plugin_conf_t *p, size_t n, const char *where) {
    for (size_t i = 0; i < n; i++)
        if (p[i].name && strcmp(p[i].name, "mtls-auth") == 0)
            sl__cx_at(cx, p[i].name_line, p[i].name_col,
                      "%s, plugin 'mtls-auth': no http listener has tls.client_auth, so no "
                      "request carries a verified client certificate (every one would get 401)",
                      where);
}

void sl__cfg_check_mtls_users(sl__cx_t *cx) {
    const sl_config_t *cfg = cx->cfg;
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        const sl_listener_conf_t *l = &cfg->listeners[i];
        if (l->protocol == SL_PROTO_HTTP && l->tls && l->tls->client_auth) return;
    }
    check_mtls_chain(cx, cfg->plugins, cfg->nplugins, "the global chain");
    for (size_t r = 0; r < cfg->nroutes; r++) {
        char where[128];
        const char *name = cfg->routes[r].name ? cfg->routes[r].name : "?";
        snprintf(where, sizeof where, "route '%s'", name);
        check_mtls_chain(cx, cfg->routes[r].plugins, cfg->routes[r].nplugins, where);
    }
}

enum { TT_VERIFY, TT_CA, TT_SNI, TT_CERT, TT_KEY, TT_N };
static const char *const target_tls_keys[TT_N] = {"verify", "ca", "sni", "cert", "key"};

/* A target's `tls:` (a mapping, or `true` for the defaults). */
void sl__cfg_parse_target_tls(sl__cx_t *cx, const yaml_node_t *v, const char *where,
                              sl_target_conf_t *t) {
    bool on = true;
    if (v->type == YAML_SCALAR_NODE) {
        if (!sl__cfg_get_bool(cx, v, "tls", &on) || !on) return;
    } else if (!sl__cfg_want_type(cx, v, YAML_MAPPING_NODE, "tls")) {
        return;
    }
    sl_tls_target_conf_t *c = sl__cx_calloc(cx, 1, sizeof *c);
    if (!c) return;
    t->tls = c;
    c->verify = true;
    c->line = sl__cfg_line_of(v);
    c->col = sl__cfg_col_of(v);
    int errs_before = (int)cx->nerrs;
    if (v->type == YAML_MAPPING_NODE) {
        sl__field_t f[TT_N];
        sl__cfg_scan_map(cx, v, where, target_tls_keys, f, TT_N, NULL);
        const yaml_node_t *x;
        if ((x = f[TT_VERIFY].val)) sl__cfg_get_bool(cx, x, "verify", &c->verify);
        if ((x = f[TT_CA].val) && sl__cfg_get_string(cx, x, "ca", &c->ca))
            c->ca_path = sl__cfg_resolve_path(cx, c->ca);
        if ((x = f[TT_SNI].val) && sl__cfg_get_string(cx, x, "sni", &c->sni))
            check_sni_name(cx, x, c->sni);
        if (f[TT_CA].val && !c->verify)
            sl__cx_err(cx, f[TT_CA].key, "'ca' has no use with verify: false");
        if ((x = f[TT_CERT].val) && sl__cfg_get_string(cx, x, "cert", &c->cert))
            c->cert_path = sl__cfg_resolve_path(cx, c->cert);
        if ((x = f[TT_KEY].val) && sl__cfg_get_string(cx, x, "key", &c->key))
            c->key_path = sl__cfg_resolve_path(cx, c->key);
        if (!f[TT_CERT].val != !f[TT_KEY].val)
            sl__cx_err(cx, f[TT_CERT].val ? f[TT_CERT].key : f[TT_KEY].key,
                       "a client certificate needs both 'cert' and 'key'");
    }
    if ((int)cx->nerrs != errs_before || cx->oom || !t->addr.text) return;
    /* the address's host part: what is verified when no sni is given */
    char ip[64];
    const char *a = t->addr.text, *colon = strrchr(a, ':');
    size_t hl = colon ? (size_t)(colon - a) : strlen(a);
    if (a[0] == '[' && hl >= 2) {
        a++;
        hl -= 2;
    }
    snprintf(ip, sizeof ip, "%.*s", (int)SL_MIN(hl, sizeof ip - 1), a);
    if (strcmp(ip, "localhost") == 0) snprintf(ip, sizeof ip, "127.0.0.1");
    /* A DNS name (`address: NAME:PORT`): the name is what is sent as SNI and verified,
     * unless `sni:` says otherwise. */
    struct in6_addr any;
    bool literal = inet_pton(AF_INET, ip, &any) == 1 || inet_pton(AF_INET6, ip, &any) == 1;
    if (!literal && !c->sni) {
        if (!(c->sni = sl__cx_strdup(cx, ip))) return;
        drop_final_dot(c->sni);
    }
    char err[512];
    if (!(c->rt = sl_tls_client_build(c, literal ? ip : NULL, err, sizeof err)))
        sl__cx_at(cx, c->line, c->col, "%s", err);
}

