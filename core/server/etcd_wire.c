/* etcd_wire.c — etcd's HTTP/JSON gateway, spoken on a libuv loop (see etcd_wire.h).
 *
 * The gateway streams one JSON object per line; libyaml (already the config parser)
 * reads JSON, so no JSON library is added. The HTTP exchange is the core's one client
 * (client/client.h), its body streamed here: kept whole for a unary call, handed over
 * line by line for a watch, whose stream has no end (its timer stops at the head).
 */
#include "server/etcd_wire.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "base/hash.h"

#define MAX_BODY (64u << 20)

/* ---- bytes ---- */

char *sl__b64_enc(const void *p, size_t n) {
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (out) EVP_EncodeBlock((unsigned char *)out, p, (int)n);
    return out;
}

/* NUL-terminated copy of the decoded bytes, *n their length; NULL when malformed. */
char *sl__b64_dec(const char *s, size_t *n) {
    size_t l = strlen(s);
    if (l % 4) return NULL;
    char *out = malloc(l / 4 * 3 + 1);
    if (!out) return NULL;
    int k = l ? EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)s, (int)l) : 0;
    if (k < 0) {
        free(out);
        return NULL;
    }
    size_t pad = (l && s[l - 1] == '=') + (l > 1 && s[l - 2] == '=');
    *n = (size_t)k - pad;
    out[*n] = 0;
    return out;
}

/* ---- the key set: relative key -> value, sorted by key ---- */

size_t sl__kv_pos(const sl_ekvset_t *s, const char *key, bool *found) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(s->a[mid].key, key);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

const sl_ekv_t *sl__kv_get(const sl_ekvset_t *s, const char *key) {
    bool f;
    size_t i = sl__kv_pos(s, key, &f);
    return f ? &s->a[i] : NULL;
}

/* Takes val (malloc'ed). */
bool sl__kv_put(sl_ekvset_t *s, const char *key, char *val, size_t vlen) {
    bool f;
    size_t i = sl__kv_pos(s, key, &f);
    if (f) {
        free(s->a[i].val);
        s->a[i].val = val, s->a[i].vlen = vlen;
        return true;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        sl_ekv_t *a = realloc(s->a, cap * sizeof *a);
        if (!a) return false;
        s->a = a, s->cap = cap;
    }
    char *k = strdup(key);
    if (!k) return false;
    memmove(&s->a[i + 1], &s->a[i], (s->n - i) * sizeof *s->a);
    s->a[i] = (sl_ekv_t){k, val, vlen};
    s->n++;
    return true;
}

void sl__kv_del(sl_ekvset_t *s, const char *key) {
    bool f;
    size_t i = sl__kv_pos(s, key, &f);
    if (!f) return;
    free(s->a[i].key);
    free(s->a[i].val);
    memmove(&s->a[i], &s->a[i + 1], (s->n - i - 1) * sizeof *s->a);
    s->n--;
}

void sl__kv_clear(sl_ekvset_t *s) {
    for (size_t i = 0; i < s->n; i++) free(s->a[i].key), free(s->a[i].val);
    free(s->a);
    *s = (sl_ekvset_t){0};
}

uint64_t sl__kv_hash(const sl_ekvset_t *s) {
    uint64_t h = SL_FNV64_INIT;
    for (size_t i = 0; i < s->n; i++)
        h = sl_fnv1a64(sl_fnv1a64(h, s->a[i].key, strlen(s->a[i].key) + 1), s->a[i].val, s->a[i].vlen + 1);
    return h;
}

/* Reads {"header":{"revision":..},"kvs":[{"key":b64,"value":b64}]} (a range answer, or a
 * snapshot) into s, keys made relative to prefix. */
bool sl__kv_from_range(sl_ekvset_t *s, long long *rev, const char *prefix, const char *text, size_t len) {
    sl_jdoc_t d;
    if (!sl_json_parse(&d, text, len)) return false;
    yaml_node_t *h = sl_json_get(&d, d.root, "header");
    *rev = sl_json_int(h ? sl_json_get(&d, h, "revision") : sl_json_get(&d, d.root, "revision"));
    yaml_node_t *kvs = sl_json_get(&d, d.root, "kvs");
    size_t pl = strlen(prefix);
    bool ok = true;
    for (size_t i = 0; i < sl_json_len(kvs) && ok; i++) {
        yaml_node_t *kv = sl_json_at(&d, kvs, i);
        const char *k64 = sl_json_str(sl_json_get(&d, kv, "key")), *v64 = sl_json_str(sl_json_get(&d, kv, "value"));
        size_t kl = 0, vl = 0;
        char *k = k64 ? sl__b64_dec(k64, &kl) : NULL;
        char *v = sl__b64_dec(v64 ? v64 : "", &vl);
        if (k && v && kl > pl + 1 && strncmp(k, prefix, pl) == 0 && k[pl] == '/') {
            ok = sl__kv_put(s, k + pl + 1, v, vl);
            v = NULL;
        }
        free(k);
        free(v);
    }
    yaml_document_delete(&d.doc);
    return ok;
}

/* The snapshot: the same shape as a range answer, full keys. */
void sl__kv_to_json(const sl_ekvset_t *s, const char *prefix, long long rev, sl_wbuf_t *b) {
    sl_wbuf_printf(b, "{\"revision\":\"%lld\",\"kvs\":[", rev);
    for (size_t i = 0; i < s->n; i++) {
        char full[1024];
        int fl = snprintf(full, sizeof full, "%s/%s", prefix, s->a[i].key);
        char *k = sl__b64_enc(full, (size_t)SL_MIN(fl, (int)sizeof full - 1)),
             *v = sl__b64_enc(s->a[i].val, s->a[i].vlen);
        if (k && v)
            sl_wbuf_printf(b, "%s{\"key\":\"", i ? "," : ""), sl__eb_puts(b, k), sl__eb_puts(b, "\",\"value\":\""),
                sl__eb_puts(b, v), sl__eb_puts(b, "\"}");
        free(k);
        free(v);
    }
    sl__eb_puts(b, "]}\n");
}

/* ---- one HTTP/1.1 exchange with etcd's gateway on a libuv loop ---- */

static void ec_free(sl_ec_t *c) {
    sl_client_close(c->call);
    free(c->body.p);
    free(c);
}

/** Ends a call without calling it back. */
void sl__ec_cancel(sl_ec_t *c) {
    if (!c) return;
    c->on_done = NULL;
    c->on_line = NULL;
    c->cancelled = true;
    if (!c->in_cb) ec_free(c); /* else the callback that runs frees it when it returns */
}

static void ec_head(void *ud, sl_client_t *call) {
    sl_ec_t *c = ud;
    c->status = sl_client_head(call)->status;
    if (c->on_line && c->status == 200) sl_client_set_timeout(call, 0); /* a stream has no end */
}

static int ec_body(void *ud, sl_client_t *call, const char *p, size_t n) {
    (void)call;
    sl_ec_t *c = ud;
    if (c->body.len + n > MAX_BODY || !sl__eb_put(&c->body, p, n)) return -1;
    if (!c->on_line || c->status != 200) return 0;
    /* a stream: hand over each complete line, keep the rest */
    size_t start = 0;
    c->in_cb++;
    for (size_t i = c->scanned; i < c->body.len && !c->cancelled; i++)
        if (c->body.p[i] == '\n') {
            if (i > start) c->on_line(c, c->body.p + start, i - start);
            start = i + 1;
        }
    c->in_cb--;
    if (c->cancelled) {
        ec_free(c);
        return -1;
    }
    memmove(c->body.p, c->body.p + start, c->body.len - start);
    c->body.len -= start;
    c->scanned = c->body.len;
    return 0;
}

static void ec_done(void *ud, int status, const char *err) {
    sl_ec_t *c = ud;
    if (!err && status != 200) {
        snprintf(c->err, sizeof c->err, "HTTP %d: %.200s", status, c->body.p ? c->body.p : "");
        err = c->err;
    } else if (!err && c->on_line) {
        err = "the watch stream ended";
    }
    c->in_cb++;
    if (c->on_done) c->on_done(c, err);
    ec_free(c);
}

/* "http://host:port[/...]" -> hostport (the Host header), host (brackets dropped) and port
 * (2379 when none is given). A name is resolved by the client, on libuv's pool: the main
 * loop does not wait for DNS. */
static int endpoint_parts(const char *url, char *hostport, size_t hplen, char *host, size_t hostlen, uint16_t *port) {
    const char *h = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
    size_t n = strcspn(h, "/");
    if (n == 0 || n >= hplen) return -1;
    memcpy(hostport, h, n);
    hostport[n] = 0;
    const char *colon = strrchr(hostport, ':');
    bool has_port = colon && !strchr(colon, ']');
    size_t hl = has_port ? (size_t)(colon - hostport) : n;
    if (hl == 0 || hl >= hostlen) return -1;
    memcpy(host, hostport, hl);
    host[hl] = 0;
    if (host[0] == '[' && hl > 1 && host[hl - 1] == ']') memmove(host, host + 1, hl - 2), host[hl - 2] = 0;
    char *end = NULL;
    long v = has_port ? strtol(colon + 1, &end, 10) : 2379;
    if ((has_port && (end == colon + 1 || *end)) || v < 1 || v > 65535) return -1;
    *port = (uint16_t)v;
    return 0;
}

/* POSTs body to path at url. NULL when nothing could start (a malformed url, no memory: then
 * no callback); a name that does not resolve fails through the callback. */
sl_ec_t *sl__ec_post(uv_loop_t *loop, const char *url, const char *path, const char *body, const char *token,
                     uint64_t timeout_ms, sl_ec_done_cb done, sl_ec_line_cb line, void *ud) {
    char hostport[300], host[256];
    uint16_t port;
    if (endpoint_parts(url, hostport, sizeof hostport, host, sizeof host, &port) != 0) return NULL;
    sl_ec_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->on_done = done, c->on_line = line, c->ud = ud;
    sl_wbuf_t out = {0};
    sl_wbuf_printf(&out, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n",
                   path, hostport, strlen(body));
    if (token && *token) sl__eb_puts(&out, "Authorization: "), sl__eb_puts(&out, token), sl__eb_puts(&out, "\r\n");
    sl__eb_puts(&out, line ? "\r\n" : "Connection: close\r\n\r\n");
    sl__eb_puts(&out, body);
    sl_client_req_t rq = {.loop = loop,
                          .host = host,
                          .port = port,
                          .req = out.p,
                          .req_len = out.len,
                          .idle_timeout = true, /* a large answer is not a slow one */
                          .timeout_ms = timeout_ms ? timeout_ms : 2000,
                          .ud = c,
                          .on_head = ec_head,
                          .on_body = ec_body,
                          .on_done = ec_done};
    const char *err = NULL;
    if (!out.oom) c->call = sl_client_start(&rq, &err);
    free(out.p);
    if (!c->call) {
        free(c);
        return NULL;
    }
    return c;
}

/* ---- shared by the watcher and the command line ---- */

const char *const sl__etcd_kinds[3] = {"upstreams", "routes", "consumers"}; /* upstreams first: read order */

bool sl__etcd_valid_name(const char *s) {
    if (!*s || strlen(s) > 64) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return false;
    return true;
}

void sl__etcd_range_body(const char *prefix, bool count_only, sl_wbuf_t *b) {
    size_t pl = strlen(prefix);
    char *k = malloc(pl + 2), *e = malloc(pl + 2);
    if (k && e) {
        memcpy(k, prefix, pl), memcpy(e, prefix, pl);
        k[pl] = '/', e[pl] = '0', k[pl + 1] = e[pl + 1] = 0;
        char *k64 = sl__b64_enc(k, pl + 1), *e64 = sl__b64_enc(e, pl + 1);
        if (k64 && e64)
            sl_wbuf_printf(b, "{\"key\":\"%s\",\"range_end\":\"%s\"%s}", k64, e64,
                          count_only ? ",\"count_only\":true" : "");
        free(k64);
        free(e64);
    }
    free(k);
    free(e);
}

char *sl__etcd_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    sl_wbuf_t b = {0};
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) sl__eb_put(&b, tmp, n);
    fclose(f);
    if (!b.p) sl__eb_put(&b, "", 0);
    *len = b.len;
    return b.p;
}

/* A column-0 "---" or "..." line (YAML's document markers). */
static bool doc_marker(const char *p, size_t n, char c) {
    return n >= 3 && p[0] == c && p[1] == c && p[2] == c && (n == 3 || p[3] == ' ' || p[3] == '\t' || p[3] == '\r');
}

/* Appends value v as item of a block list: "  - " then its lines indented by 4 (with
 * indent 0, as they are). A value is a YAML document of its own: its directives (%YAML),
 * its "---" and what ends it ("...", or a second document) cannot stand inside the
 * composed file, so they become blanks and comments there, one line for one (the key's
 * own line numbers hold), and the value means what it meant on its own. */
int sl__etcd_put_item(sl_wbuf_t *t, const char *v, size_t vl, int indent) {
    int lines = 0;
    const char *p = v, *end = v + vl;
    while (vl && (end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\r')) end--, vl--;
    bool first = true, head = true, over = false;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (indent) sl__eb_puts(t, first ? "  - " : "    ");
        if (over || (p[0] == '%' && head)) { /* a directive, or anything after the document */
            sl__eb_puts(t, "#");
            sl__eb_put(t, p + (p[0] == '%'), n - (p[0] == '%'));
        } else if (doc_marker(p, n, '-') && head) { /* the document's start: what follows it stays */
            sl__eb_puts(t, "   ");
            sl__eb_put(t, p + 3, n - 3);
            head = false;
        } else if (doc_marker(p, n, '.') || doc_marker(p, n, '-')) { /* its end, or a second one */
            sl__eb_puts(t, "#");
            sl__eb_put(t, p, n);
            over = true;
        } else {
            sl__eb_put(t, p, n);
            if (n && p[0] != '#' && p[0] != ' ' && p[0] != '\t' && p[0] != '\r') head = false;
        }
        sl__eb_puts(t, "\n");
        lines++;
        first = false;
        p += n + (nl != NULL);
    }
    if (first) sl__eb_puts(t, indent ? "  - {}\n" : "\n"), lines++;
    return lines;
}
