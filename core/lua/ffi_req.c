/* ffi_req.c — the request/response/upstream/log/sleep functions of the FFI ABI (core/sluice.h).
 *
 * All run on a worker thread during a phase call of the request they are given.
 * Returned pointers stay valid until the phase call returns.
 */
#include <arpa/inet.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "http/request.h"
#include "base/log.h"
#include "net/tls.h"
#include "script/lua_host.h"
#include "sluice.h"
#include "upstream/upstreams.h"

int sl_ffi_abi_version(void) { return SL_ABI_VERSION; }

static int out(sl_str_t s, const char **p, size_t *len) {
    *p = s.p ? s.p : "";
    *len = s.len;
    return SL_OK;
}

int sl_ffi_req_get_method(sl_req_t *r, const char **p, size_t *len) { return out(r->head.method, p, len); }
int sl_ffi_req_get_path(sl_req_t *r, const char **p, size_t *len) {
    return out(r->over.path.p ? r->over.path : r->head.path, p, len);
}
int sl_ffi_req_get_query(sl_req_t *r, const char **p, size_t *len) {
    return out(r->over.query_set ? r->over.query : r->head.query, p, len);
}
int sl_ffi_req_orig_path(sl_req_t *r, const char **p, size_t *len) { return out(r->head.path, p, len); }
int sl_ffi_req_orig_query(sl_req_t *r, const char **p, size_t *len) { return out(r->head.query, p, len); }
int sl_ffi_req_get_host(sl_req_t *r, const char **p, size_t *len) {
    return out((sl_str_t){r->host, r->host_len}, p, len);
}
/* The client address: the real-ip plugin's when it set one, else the socket's peer. */
static sl_str_t client_addr(const sl_req_t *r) {
    const char *a = r->client_ip ? r->client_ip : r->ds->peer;
    return (sl_str_t){a, strlen(a)};
}

int sl_ffi_req_client_ip(sl_req_t *r, const char **p, size_t *len) { return out(client_addr(r), p, len); }
int sl_ffi_req_id(sl_req_t *r, const char **p, size_t *len) { return out((sl_str_t){r->rid, r->rid_len}, p, len); }

int sl_ffi_req_is_tls(sl_req_t *r) { return r->ds->secure ? 1 : 0; }

int sl_ffi_req_client_cert(sl_req_t *r, sl_client_cert_t *out) {
    return r->ds->client_cert ? sl_tls_peer_describe(r->ds->client_cert, out) : SL_DECLINED;
}

/* ---- the query string, decoded on demand into the caller's buffer ---- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes s[0..n) ('+' is a space, %XX a byte, a malformed % stays as written) into
 * out[0..cap); returns the decoded length, which may exceed cap (then nothing past cap
 * was written). */
static size_t form_decode(const char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++, o++) {
        char c = s[i];
        int hi, lo;
        if (c == '+') {
            c = ' ';
        } else if (c == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 && (lo = hexval(s[i + 2])) >= 0) {
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        if (o < cap) out[o] = c;
    }
    return o;
}

/* The argument at *off of query q: its key and value spans (*has_value 0 for `?flag`);
 * moves *off past it. false at the end. Empty pieces (`a=1&&b=2`) are skipped. */
static bool query_next(sl_str_t q, size_t *off, sl_str_t *k, sl_str_t *v, int *has_value) {
    while (*off < q.len) {
        const char *p = q.p + *off;
        const char *amp = memchr(p, '&', q.len - *off);
        size_t n = amp ? (size_t)(amp - p) : q.len - *off;
        *off += n + 1;
        if (n == 0) continue;
        const char *eq = memchr(p, '=', n);
        *k = (sl_str_t){p, eq ? (size_t)(eq - p) : n};
        *v = eq ? (sl_str_t){eq + 1, n - k->len - 1} : (sl_str_t){p + n, 0};
        *has_value = eq != NULL;
        return true;
    }
    return false;
}

static sl_str_t req_query(sl_req_t *r) { return r->over.query_set ? r->over.query : r->head.query; }

int sl_ffi_req_get_query_arg(sl_req_t *r, const char *name, size_t nl, char *buf, size_t cap, size_t *len) {
    sl_str_t q = req_query(r), k, v;
    size_t off = 0;
    int has_value;
    char key[256];
    while (query_next(q, &off, &k, &v, &has_value)) {
        size_t kl = form_decode(k.p, k.len, key, sizeof key);
        if (kl != nl || kl > sizeof key || memcmp(key, name, nl) != 0) continue;
        if (!has_value) return 1;
        *len = form_decode(v.p, v.len, buf, cap);
        return *len <= cap ? SL_OK : SL_ERROR;
    }
    return SL_DECLINED;
}

int sl_ffi_req_query_next(sl_req_t *r, size_t *off, char *buf, size_t cap, size_t *klen, size_t *vlen) {
    sl_str_t q = req_query(r), k, v;
    int has_value;
    size_t at = *off;
    if (!query_next(q, off, &k, &v, &has_value)) return SL_DECLINED;
    *klen = form_decode(k.p, k.len, buf, cap);
    *vlen = form_decode(v.p, v.len, *klen < cap ? buf + *klen : buf, *klen < cap ? cap - *klen : 0);
    if (*klen + *vlen > cap) {
        *off = at; /* the caller grows its buffer and asks again */
        return SL_ERROR;
    }
    return has_value ? SL_OK : 1;
}

/* ---- the client's address, through trusted proxies ---- */

/* s as an address (a bare IPv4 or IPv6, "[v6]", "[v6]:port" or "v4:port"): the span of
 * the address itself in *ip and its sockaddr in *ss. */
static bool parse_ip(sl_str_t s, sl_str_t *ip, struct sockaddr_storage *ss) {
    char tmp[64];
    while (s.len && (s.p[0] == ' ' || s.p[0] == '\t')) s.p++, s.len--;
    while (s.len && (s.p[s.len - 1] == ' ' || s.p[s.len - 1] == '\t')) s.len--;
    if (s.len && s.p[0] == '[') {
        const char *close = memchr(s.p, ']', s.len);
        if (!close) return false;
        s = (sl_str_t){s.p + 1, (size_t)(close - s.p - 1)};
    } else if (memchr(s.p, '.', s.len)) {
        const char *colon = memchr(s.p, ':', s.len);
        if (colon) s.len = (size_t)(colon - s.p);
    }
    if (s.len == 0 || s.len >= sizeof tmp) return false;
    memcpy(tmp, s.p, s.len);
    tmp[s.len] = 0;
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, tmp, &a4->sin_addr) == 1)
        a4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, tmp, &a6->sin6_addr) == 1)
        a6->sin6_family = AF_INET6;
    else
        return false;
    *ip = s;
    return true;
}

int sl_ffi_req_server_port(sl_req_t *r) { return r->ds->port; }

int sl_ffi_req_trusted_ip(sl_req_t *r, const char *ip, size_t len) {
    sl_str_t span;
    struct sockaddr_storage ss;
    if (!parse_ip((sl_str_t){ip, len}, &span, &ss)) return SL_ERROR;
    const sl_listener_conf_t *lc = r->ds->lc;
    return lc->ntrusted_proxies && sl_pp_trusted(lc->trusted_proxies, lc->ntrusted_proxies, (struct sockaddr *)&ss)
               ? 1
               : 0;
}

/* The peer's address, or, when the peer is one of the listener's trusted_proxies, the
 * X-Forwarded-For entry nearest the right that is not a trusted proxy itself (each proxy
 * appends the address it saw): what a client cannot forge past the proxies the operator
 * trusts. An entry that is not an address ends the walk at the last good one; an empty
 * one ("a, ", "a,,b") is skipped, as nginx's realip module skips it. */
int sl_ffi_client_get_ip(sl_req_t *r, const char **p, size_t *len) {
    const sl_downstream_t *ds = r->ds;
    sl_str_t best = {ds->peer, strlen(ds->peer)};
    if (r->client_ip) return out(client_addr(r), p, len); /* real-ip decided already */
    if (!ds->trusted) return out(best, p, len);
    static const sl_str_t xff = {"X-Forwarded-For", 15};
    for (int i = (int)r->head.nheaders - 1; i >= 0; i--) {
        if (!sl_str_ieq2(r->head.headers[i].name, xff)) continue;
        sl_str_t v = r->head.headers[i].value;
        while (v.len) {
            const char *comma = v.p + v.len;
            while (comma > v.p && comma[-1] != ',') comma--;
            sl_str_t entry = {comma, (size_t)(v.p + v.len - comma)};
            v.len = comma > v.p ? (size_t)(comma - 1 - v.p) : 0;
            while (entry.len && (entry.p[0] == ' ' || entry.p[0] == '\t')) entry.p++, entry.len--;
            if (entry.len == 0) continue;
            sl_str_t ip;
            struct sockaddr_storage ss;
            if (!parse_ip(entry, &ip, &ss)) return out(best, p, len);
            best = ip;
            if (!sl_pp_trusted(ds->lc->trusted_proxies, ds->lc->ntrusted_proxies, (struct sockaddr *)&ss))
                return out(best, p, len);
        }
    }
    return out(best, p, len);
}
int sl_ffi_req_set_id(sl_req_t *r, const char *id, size_t len, const char **err) {
    if (len == 0 || len >= sizeof(r->rid)) {
        *err = "id must be 1 to 32 characters";
        return SL_ERROR;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)id[i] <= 0x20 || (unsigned char)id[i] >= 0x7f) {
            *err = "id must be visible ASCII";
            return SL_ERROR;
        }
    memcpy(r->rid, id, len);
    r->rid[len] = 0;
    r->rid_len = (uint8_t)len;
    return SL_OK;
}

int sl_ffi_req_route(sl_req_t *r, const char **p, size_t *len) {
    const char *n = r->route >= 0 ? r->w->cfg->routes[r->route].name : "";
    return out((sl_str_t){n, strlen(n)}, p, len);
}

/* The request as plugins see it: original fields not cleared, then added ones. */
int sl_ffi_req_get_header(sl_req_t *r, const char *name, size_t name_len, const char **p, size_t *len) {
    sl_str_t n = {name, name_len};
    const sl_field_t *f = sl_edits_find(&r->req_edits, n);
    if (f) return out(f->value, p, len);
    if (sl_edits_removed(&r->req_edits, n)) return SL_DECLINED;
    for (uint16_t i = 0; i < r->head.nheaders; i++)
        if (sl_str_ieq2(r->head.headers[i].name, n)) return out(r->head.headers[i].value, p, len);
    return SL_DECLINED;
}

int sl_ffi_req_header_count(sl_req_t *r) { return r->head.nheaders + r->req_edits.nadded; }

int sl_ffi_req_header_at(sl_req_t *r, int i, const char **name, size_t *name_len, const char **value,
                         size_t *value_len) {
    if (i < 0) return SL_DECLINED;
    if (i < r->head.nheaders) {
        const sl_h1_header_t *h = &r->head.headers[i];
        if (sl_edits_removed(&r->req_edits, h->name)) return SL_DECLINED;
        out(h->name, name, name_len);
        return out(h->value, value, value_len);
    }
    i -= r->head.nheaders;
    if (i >= r->req_edits.nadded) return SL_DECLINED;
    out(r->req_edits.added[i].name, name, name_len);
    return out(r->req_edits.added[i].value, value, value_len);
}

static bool head_editable(sl_req_t *r, const char **err) {
    if (r->upq.niov || sl__req_x(r)->sent || sl__req_upstream_busy(r)) {
        *err = "the request head was already sent upstream";
        return false;
    }
    return true;
}

int sl_ffi_req_set_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl, const char **err) {
    if (!head_editable(r, err)) return SL_ERROR;
    return sl_edits_set(&r->req_edits, &r->arena, (sl_str_t){n, nl}, (sl_str_t){v, vl}, err);
}

/* Host is the one field every HTTP/1.1 request carries exactly once: one more would send
 * the upstream two (its 400, or a lever between two readers that pick different ones) and
 * none would be its 400 too. As Kong's add_header does, adding Host replaces it; clearing
 * it is refused. */
static bool is_host(const char *n, size_t nl) { return SL_IEQ(((sl_str_t){n, nl}), "host"); }

int sl_ffi_req_add_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl, const char **err) {
    if (!head_editable(r, err)) return SL_ERROR;
    if (is_host(n, nl)) return sl_edits_set(&r->req_edits, &r->arena, (sl_str_t){n, nl}, (sl_str_t){v, vl}, err);
    return sl_edits_add(&r->req_edits, &r->arena, (sl_str_t){n, nl}, (sl_str_t){v, vl}, err);
}

int sl_ffi_req_clear_header(sl_req_t *r, const char *n, size_t nl, const char **err) {
    if (!head_editable(r, err)) return SL_ERROR;
    if (is_host(n, nl)) {
        *err = "Host is required upstream: set_header(\"Host\", value) replaces it";
        return SL_ERROR;
    }
    return sl_edits_clear(&r->req_edits, &r->arena, (sl_str_t){n, nl}, err);
}

int sl_ffi_req_set_path(sl_req_t *r, const char *p, size_t len, const char **err) {
    if (!head_editable(r, err)) return SL_ERROR;
    if (len == 0 || p[0] != '/') {
        *err = "path must start with '/'";
        return SL_ERROR;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= 0x20 || c == 0x7f || c == '?' || c == '#') {
            *err = "path must not contain spaces, controls, '?' or '#'";
            return SL_ERROR;
        }
    }
    char *copy = sl_arena_alloc(&r->arena, len);
    if (!copy) {
        *err = "out of memory";
        return SL_ERROR;
    }
    memcpy(copy, p, len);
    r->over.path = (sl_str_t){copy, len};
    r->strip = 0;
    return SL_OK;
}

int sl_ffi_req_set_query(sl_req_t *r, const char *q, size_t len, const char **err) {
    if (!head_editable(r, err)) return SL_ERROR;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)q[i];
        if (c <= 0x20 || c == 0x7f || c == '#') {
            *err = "query must not contain spaces, controls or '#'";
            return SL_ERROR;
        }
    }
    char *copy = len ? sl_arena_alloc(&r->arena, len) : (char *)"";
    if (!copy) {
        *err = "out of memory";
        return SL_ERROR;
    }
    if (len) memcpy(copy, q, len);
    r->over.query = (sl_str_t){copy, len};
    r->over.query_set = 1;
    return SL_OK;
}

int sl_ffi_req_get_body(sl_req_t *r, const char **p, size_t *len, const char **err) {
    if (r->lua.phase != SL_PHASE_REWRITE && r->lua.phase != SL_PHASE_ACCESS) {
        *err = "the body can be read in rewrite and access only";
        return SL_ERROR;
    }
    int rc = sl__req_buffer_body(r);
    if (rc == SL_EAGAIN) return SL_EAGAIN;
    if (rc != SL_OK) {
        *err = r->body_err == 413 ? "request body too large" : "bad request body";
        return SL_ERROR;
    }
    *p = r->heap_len ? r->heap : NULL;
    *len = r->heap_len;
    return SL_OK;
}

int sl_ffi_req_set_body_max(sl_req_t *r, uint64_t max, const char **err) {
    if (r->lua.phase != SL_PHASE_REWRITE && r->lua.phase != SL_PHASE_ACCESS) {
        *err = "the body limit can be set in rewrite and access only";
        return SL_ERROR;
    }
    /* A body already read whole keeps its buffer; the caller compares its length. */
    if (!r->body_buffered) r->buffer_max = max ? max : 1; /* 0 means the default: 1 byte is too many */
    return SL_OK;
}

int sl_ffi_req_set_body(sl_req_t *r, const char *p, size_t len, const char **err) {
    if (r->lua.phase != SL_PHASE_REWRITE && r->lua.phase != SL_PHASE_ACCESS) {
        *err = "the body can be set in rewrite and access only";
        return SL_ERROR;
    }
    if (!r->body_buffered) {
        *err = "read the body (get_body) before replacing it";
        return SL_ERROR;
    }
    if (len > r->heap_cap) {
        char *np = realloc(r->heap, len);
        if (!np) {
            *err = "out of memory";
            return SL_ERROR;
        }
        r->heap = np;
        r->heap_cap = len;
    }
    if (len) memcpy(r->heap, p, len);
    r->heap_len = len;
    return SL_OK;
}

int sl_ffi_req_set_client_ip(sl_req_t *r, const char *ip, size_t len, const char **err) {
    if (r->lua.phase != SL_PHASE_REWRITE && r->lua.phase != SL_PHASE_ACCESS) {
        *err = "the client address can be set in rewrite and access only";
        return SL_ERROR;
    }
    char tmp[INET6_ADDRSTRLEN];
    unsigned char bin[sizeof(struct in6_addr)];
    if (len == 0 || len >= sizeof tmp) {
        *err = "not an IP address";
        return SL_ERROR;
    }
    memcpy(tmp, ip, len);
    tmp[len] = 0;
    if (inet_pton(AF_INET, tmp, bin) != 1 && inet_pton(AF_INET6, tmp, bin) != 1) {
        *err = "not an IP address";
        return SL_ERROR;
    }
    char *copy = sl_arena_alloc(&r->arena, len + 1);
    if (!copy) {
        *err = "out of memory";
        return SL_ERROR;
    }
    memcpy(copy, tmp, len + 1);
    r->client_ip = copy;
    return SL_OK;
}

int sl_ffi_resp_exit(sl_req_t *r, int status, const char *body, size_t len, const char **err) {
    if (r->lua.phase != SL_PHASE_REWRITE && r->lua.phase != SL_PHASE_ACCESS &&
        r->lua.phase != SL_PHASE_PREREAD) {
        *err = "response.exit works in rewrite and access only";
        return SL_ERROR;
    }
    if (status < 200 || status > 599) {
        *err = "status must be 200..599 (an interim 1xx is never a final answer)";
        return SL_ERROR;
    }
    char *copy = NULL;
    if (len) {
        /* Small bodies live in the arena; large ones (an echo of a big body) on the heap. */
        copy = len <= 4096 ? sl_arena_alloc(&r->arena, len) : NULL;
        if (!copy) {
            free(r->exit.alloc);
            copy = r->exit.alloc = malloc(len);
        }
        if (!copy) {
            *err = "out of memory";
            return SL_ERROR;
        }
        memcpy(copy, body, len);
    }
    r->exit.status = status;
    r->exit.body = (sl_str_t){copy, len};
    return SL_OK;
}

int sl_ffi_resp_get_status(sl_req_t *r) {
    if (r->exit.status) return r->exit.status;
    return r->status;
}

/* r->status is the upstream's from its head on (proxy.c) until the gateway answers alone
 * (LOCAL); rhead is not cleared between requests, so r->status says whether it is this
 * one's. */
int sl_ffi_resp_upstream_status(sl_req_t *r) {
    if (r->exit.status || !r->status || (r->mode != SL_MODE_PROXY && r->mode != SL_MODE_TUNNEL)) return 0;
    return r->rhead.status;
}

int sl_ffi_resp_get_header(sl_req_t *r, const char *n, size_t nl, const char **p, size_t *len) {
    sl_str_t name = {n, nl};
    const sl_field_t *f = sl_edits_find(&r->resp_edits, name);
    if (f) return out(f->value, p, len);
    if (sl_edits_removed(&r->resp_edits, name) || r->mode != SL_MODE_PROXY || !r->status) return SL_DECLINED;
    for (uint16_t i = 0; i < r->rhead.nheaders; i++)
        if (!r->rhead.headers[i].hop && sl_str_ieq2(r->rhead.headers[i].name, name))
            return out(r->rhead.headers[i].value, p, len);
    return SL_DECLINED;
}

/* The response as plugins see it: the upstream's fields (not hop-by-hop, not cleared),
 * then added ones; a response the chain makes (exit) has only added ones. */
static bool resp_has_head(const sl_req_t *r) { return r->mode == SL_MODE_PROXY && r->status; }

int sl_ffi_resp_header_count(sl_req_t *r) {
    return (resp_has_head(r) ? r->rhead.nheaders : 0) + r->resp_edits.nadded;
}

int sl_ffi_resp_header_at(sl_req_t *r, int i, const char **name, size_t *name_len, const char **value,
                          size_t *value_len) {
    int nh = resp_has_head(r) ? r->rhead.nheaders : 0;
    if (i < 0) return SL_DECLINED;
    if (i < nh) {
        const sl_h1_header_t *h = &r->rhead.headers[i];
        if (h->hop || sl_edits_removed(&r->resp_edits, h->name)) return SL_DECLINED;
        out(h->name, name, name_len);
        return out(h->value, value, value_len);
    }
    i -= nh;
    if (i >= r->resp_edits.nadded) return SL_DECLINED;
    out(r->resp_edits.added[i].name, name, name_len);
    return out(r->resp_edits.added[i].value, value, value_len);
}

static bool resp_editable(sl_req_t *r, const char **err) {
    if (sl__req_resp_head(r)) {
        *err = "the response head was already sent";
        return false;
    }
    return true;
}

int sl_ffi_resp_set_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl, const char **err) {
    if (!resp_editable(r, err)) return SL_ERROR;
    return sl_edits_set(&r->resp_edits, &r->arena, (sl_str_t){n, nl}, (sl_str_t){v, vl}, err);
}

int sl_ffi_resp_add_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl, const char **err) {
    if (!resp_editable(r, err)) return SL_ERROR;
    return sl_edits_add(&r->resp_edits, &r->arena, (sl_str_t){n, nl}, (sl_str_t){v, vl}, err);
}

int sl_ffi_resp_clear_header(sl_req_t *r, const char *n, size_t nl, const char **err) {
    if (!resp_editable(r, err)) return SL_ERROR;
    return sl_edits_clear(&r->resp_edits, &r->arena, (sl_str_t){n, nl}, err);
}

int sl_ffi_upstream_set(sl_req_t *r, const char *name, size_t len, const char **err) {
    if (sl__req_upstream_busy(r) || r->stage > SL_STAGE_ACCESS) {
        *err = "the upstream was already chosen";
        return SL_ERROR;
    }
    _Static_assert(sizeof(r->addr.text) == SL_ADDR_TEXT_MAX, "an address text is SL_ADDR_TEXT_MAX");
    int up;
    if (sl_upstream_resolve(r->w->cfg, name, len, &up, &r->addr.ss, r->addr.text, err) != SL_OK)
        return SL_ERROR;
    r->upstream = up;
    r->addr.set = up < 0;
    return SL_OK;
}

int sl_ffi_req_set_consumer(sl_req_t *r, const char *name, size_t len, const char **err) {
    if (len >= sizeof(r->consumer)) {
        *err = "a consumer name is 1 to 64 characters";
        return SL_ERROR;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] < 0x21 || (unsigned char)name[i] > 0x7e) {
            *err = "a consumer name is visible ASCII";
            return SL_ERROR;
        }
    memcpy(r->consumer, name, len);
    r->consumer[len] = 0;
    r->consumer_len = (uint8_t)len;
    return SL_OK;
}

void sl_ffi_ratelimit_count(sl_req_t *r, int result) { sl_metrics_ratelimit(&r->w->metrics, r->route, result); }

/* ---- balancer phase and breaker state ---- */

int sl_ffi_balancer_count(sl_req_t *r) {
    return r->upstream >= 0 ? (int)r->w->cfg->upstreams[r->upstream].ntargets : 0;
}

int sl_ffi_balancer_target(sl_req_t *r, int i, sl_target_info_t *out) {
    if (r->upstream < 0 || i < 0 || i >= sl_ffi_balancer_count(r)) return SL_ERROR;
    const sl_upstream_conf_t *uc = &r->w->cfg->upstreams[r->upstream];
    sl_tstate_t *ts = r->w->ug->ups[r->upstream].ts[i];
    uint64_t now = sl_now_ms();
    *out = (sl_target_info_t){
        .address = sl_slot_up(uc, (size_t)i) ? uc->targets[i].addr.text : "", /* "": an empty DNS/registry slot */
        .weight = (int)uc->targets[i].weight,
        .healthy = sl_tstate_healthy(ts, now),
        .breaker = sl_tstate_breaker_now(ts, uc, SL_LAYER_HTTP, now),
        .in_flight = (int)atomic_load_explicit(&ts->live.in_flight, memory_order_relaxed),
        .tried = r->at.tries.words > 0 && sl_tries_has(r->at.tries.tried, (uint32_t)i),
        .ewma_ms = atomic_load_explicit(&ts->live.ewma_ns, memory_order_relaxed) / 1e6,
    };
    return SL_OK;
}

static int target_named(const sl_upstream_conf_t *uc, const char *addr, size_t len) {
    for (size_t i = 0; i < uc->ntargets; i++)
        if (strlen(uc->targets[i].addr.text) == len && memcmp(uc->targets[i].addr.text, addr, len) == 0) return (int)i;
    return -1;
}

int sl_ffi_balancer_set_target(sl_req_t *r, const char *addr, size_t len, const char **err) {
    if (r->lua.phase != SL_PHASE_BALANCER) {
        *err = "set_target works in the balancer phase only";
        return SL_ERROR;
    }
    int t = r->upstream >= 0 ? target_named(&r->w->cfg->upstreams[r->upstream], addr, len) : -1;
    if (t < 0) {
        *err = "no target with that address in the request's upstream";
        return SL_ERROR;
    }
    r->at.lua_target = (uint16_t)(t + 1);
    return SL_OK;
}

int sl_ffi_breaker_state(sl_req_t *r, const char *up, size_t ul, const char *target, size_t tl, const char **err) {
    const sl_config_t *cfg = r->w->cfg;
    for (size_t u = 0; u < cfg->nupstreams; u++) {
        if (strlen(cfg->upstreams[u].name) != ul || memcmp(cfg->upstreams[u].name, up, ul) != 0) continue;
        int t = target_named(&cfg->upstreams[u], target, tl);
        if (t < 0) {
            *err = "no target with that address in that upstream";
            return SL_ERROR;
        }
        return sl_tstate_breaker_now(r->w->ug->ups[u].ts[t], &cfg->upstreams[u], SL_LAYER_HTTP, sl_now_ms());
    }
    *err = "no upstream of that name";
    return SL_ERROR;
}

int sl_ffi_body_chunk(sl_req_t *r, const char **p, size_t *len, int *eof) {
    *eof = r->bf_eof;
    return out((sl_str_t){r->bf_in, r->bf_in_len}, p, len);
}

int sl_ffi_body_set(sl_req_t *r, const char *p, size_t len, const char **err) {
    if (r->lua.phase != SL_PHASE_BODY_FILTER) {
        *err = "the body can be replaced in body_filter only";
        return SL_ERROR;
    }
    if (len > r->bf_cap) {
        size_t cap = SL_MAX(len, 4096);
        char *nb = realloc(r->bf_buf, cap);
        if (!nb) {
            *err = "out of memory";
            return SL_ERROR;
        }
        r->bf_buf = nb;
        r->bf_cap = cap;
    }
    if (len) memcpy(r->bf_buf, p, len); /* an empty piece may come before any buffer exists */
    r->bf_len = len;
    r->bf_set = 1;
    return SL_OK;
}

int sl_ffi_sleep(sl_req_t *r, uint64_t ms, const char **err) {
    if (r->lua.phase != SL_PHASE_REWRITE && r->lua.phase != SL_PHASE_ACCESS) {
        *err = "sleep works in rewrite and access only";
        return SL_ERROR;
    }
    if (r->wait) {
        *err = "already waiting";
        return SL_ERROR;
    }
    if (sl__req_sleep(r, ms) != SL_OK) {
        *err = "out of memory";
        return SL_ERROR;
    }
    return SL_OK;
}

void sl_ffi_log(sl_req_t *r, int level, const char *plugin, const char *msg, size_t len) {
    if (level < SL_LOG_DEBUG || level > SL_LOG_ERR) level = SL_LOG_INFO;
    const char *route = r && r->route >= 0 ? r->w->cfg->routes[r->route].name : NULL;
    sl_log_kv(level, (const char *[]){"route", route, "plugin", plugin, "request_id", r ? r->rid : NULL}, 3,
              "%.*s", (int)SL_MIN(len, 1800), msg);
}

int sl_ffi_req_stats(sl_req_t *r, sl_req_stats_t *st) {
    const sl_config_t *cfg = r->w->cfg;
    st->status = r->status;
    st->bytes_in = r->body_in + r->head_end - r->head_off;
    st->bytes_out = r->bytes_out;
    st->duration_ms = (double)(sl_now_ns() - r->start_ns) / 1e6;
    st->upstream = r->upstream >= 0 ? cfg->upstreams[r->upstream].name : "";
    st->target = r->addr.set ? r->addr.text
                 : r->upstream >= 0 && sl__req_x(r)->att.target >= 0 ? cfg->upstreams[r->upstream].targets[sl__req_x(r)->att.target].addr.text
                                                      : "";
    st->route = r->route >= 0 ? cfg->routes[r->route].name : "";
    return SL_OK;
}

void sl_ffi_random_hex(char *out, size_t n) {
    static const char hex[] = "0123456789abcdef";
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 16 == 0) v = sl_rand64();
        out[i] = hex[(v >> ((i % 16) * 4)) & 15];
    }
}

double sl_ffi_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sl_ffi_plugin_timed(sl_req_t *r, int pos) {
    if (!r) r = sl_lua_current();
    if (!r) return;
    uint64_t now = sl_ticks(), ns = sl_ticks_ns(now - r->lua.mark);
    r->lua.mark = now;
    sl_metrics_plugin_time(&r->w->metrics, r->route, pos, r->lua.phase, ns);
    if (SL_UNLIKELY(r->debug != NULL)) sl__req_debug_plugin(r, pos, r->lua.phase, ns);
    if (r->trace.sampled && r->w->cfg->telemetry.plugin_spans) sl__trace_plugin(r, pos, r->lua.phase, ns);
}
