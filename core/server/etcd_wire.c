/* etcd_wire.c — etcd's HTTP/JSON gateway, spoken on a libuv loop (see etcd_wire.h).
 *
 * The gateway streams one JSON object per line; libyaml (already the config parser)
 * reads JSON, so no JSON library is added. The HTTP exchange uses proto/http1.c's
 * response parser, as http/http_client.c does for plugins; that client is tied to a
 * request's coroutine and buffers a body whole, while a watch is an endless stream on
 * the main loop, so the etcd source has this small exchange of its own.
 */
#include "server/etcd_wire.h"

#include <netdb.h>
#include <openssl/evp.h>
#include <stdarg.h>
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

/* ---- JSON, read with libyaml (JSON is YAML's flow style) ---- */

bool sl__json_parse(sl_jdoc_t *d, const char *s, size_t n) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return false;
    yaml_parser_set_input_string(&p, (const unsigned char *)s, n);
    bool ok = yaml_parser_load(&p, &d->doc);
    yaml_parser_delete(&p);
    if (!ok) return false;
    d->root = yaml_document_get_root_node(&d->doc);
    if (!d->root) yaml_document_delete(&d->doc);
    return d->root != NULL;
}

yaml_node_t *sl__json_get(sl_jdoc_t *d, const yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(&d->doc, pr->key);
        if (k && k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(&d->doc, pr->value);
    }
    return NULL;
}

const char *sl__json_str(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

long long sl__json_int(const yaml_node_t *n) {
    const char *s = sl__json_str(n);
    return s ? strtoll(s, NULL, 10) : 0;
}

size_t sl__json_len(const yaml_node_t *n) {
    return n && n->type == YAML_SEQUENCE_NODE ? (size_t)(n->data.sequence.items.top - n->data.sequence.items.start) : 0;
}

yaml_node_t *sl__json_at(sl_jdoc_t *d, const yaml_node_t *n, size_t i) {
    return yaml_document_get_node(&d->doc, n->data.sequence.items.start[i]);
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
    if (!sl__json_parse(&d, text, len)) return false;
    yaml_node_t *h = sl__json_get(&d, d.root, "header");
    *rev = sl__json_int(h ? sl__json_get(&d, h, "revision") : sl__json_get(&d, d.root, "revision"));
    yaml_node_t *kvs = sl__json_get(&d, d.root, "kvs");
    size_t pl = strlen(prefix);
    bool ok = true;
    for (size_t i = 0; i < sl__json_len(kvs) && ok; i++) {
        yaml_node_t *kv = sl__json_at(&d, kvs, i);
        const char *k64 = sl__json_str(sl__json_get(&d, kv, "key")), *v64 = sl__json_str(sl__json_get(&d, kv, "value"));
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

static void ec_closed(uv_handle_t *h) {
    sl_ec_t *c = h->data;
    if (--c->open) return;
    free(c->out.p);
    free(c->in.p);
    free(c->body.p);
    free(c);
}

static void ec_close(sl_ec_t *c) {
    if (!uv_is_closing((uv_handle_t *)&c->tcp)) uv_close((uv_handle_t *)&c->tcp, ec_closed);
    if (!uv_is_closing((uv_handle_t *)&c->timer)) uv_close((uv_handle_t *)&c->timer, ec_closed);
}

static void ec_finish(sl_ec_t *c, const char *err) {
    if (c->finished) return;
    c->finished = true;
    if (c->on_done) c->on_done(c, err);
    ec_close(c);
}

/** Ends a call without calling it back. */
void sl__ec_cancel(sl_ec_t *c) {
    if (!c) return;
    c->on_done = NULL;
    c->on_line = NULL;
    c->finished = true;
    ec_close(c);
}

static void ec_failf(sl_ec_t *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    ec_finish(c, c->err);
}

static void ec_timeout(uv_timer_t *t) { ec_failf(t->data, "timed out"); }

static int ec_body(void *ud, const char *p, size_t n) {
    sl_ec_t *c = ud;
    if (c->body.len + n > MAX_BODY || !sl__eb_put(&c->body, p, n)) return -1;
    if (!c->on_line || c->head.status != 200) return 0;
    /* a stream: hand over each complete line, keep the rest */
    size_t start = 0;
    for (size_t i = c->scanned; i < c->body.len && !c->finished; i++)
        if (c->body.p[i] == '\n') {
            if (i > start) c->on_line(c, c->body.p + start, i - start);
            start = i + 1;
        }
    if (c->finished) return -1;
    memmove(c->body.p, c->body.p + start, c->body.len - start);
    c->body.len -= start;
    c->scanned = c->body.len;
    return 0;
}

static void ec_consume(sl_ec_t *c, const char *p, size_t n) {
    if (!c->head_done) {
        size_t used = 0;
        int st = 0;
        int rc = sl_h1_head(&c->h1, c->in.p, c->in.len, &c->head, &used, &st);
        if (rc == SL_EAGAIN) return;
        if (rc != SL_OK) return ec_failf(c, "malformed response head");
        c->head_done = true;
        if (c->on_line && c->head.status == 200) uv_timer_stop(&c->timer); /* a stream has no end */
        p = c->in.p + used;
        n = c->in.len - used;
        c->h1.on_data = ec_body;
        c->h1.ud = c;
        if (c->head.body_kind == SL_BODY_NONE) return ec_finish(c, NULL);
    }
    bool done = false;
    while (n > 0 && !done) {
        size_t used = 0;
        c->h1.spans_left = UINT32_MAX;
        int rc = sl_h1_body(&c->h1, p, n, &used);
        if (c->finished) return;
        if (rc == SL_DONE)
            done = true;
        else if (rc != SL_OK)
            return ec_failf(c, "malformed response body");
        p += used, n -= used;
    }
    if (done) {
        if (c->head.status != 200) return ec_failf(c, "HTTP %d: %.200s", c->head.status, c->body.p ? c->body.p : "");
        ec_finish(c, c->on_line ? "the watch stream ended" : NULL);
    }
}

static void ec_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
    (void)hint;
    sl_ec_t *c = h->data;
    if (!c->head_done) {
        /* c->in.max bounds the head; past it, what room is left (then none: too large) */
        if (c->in.cap - c->in.len < 4097) sl_wbuf_reserve(&c->in, 8192);
        *b = c->in.cap > c->in.len + 1 ? uv_buf_init(c->in.p + c->in.len, (unsigned)(c->in.cap - c->in.len - 1))
                                     : uv_buf_init(NULL, 0);
        return;
    }
    *b = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void ec_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    sl_ec_t *c = s->data;
    if (c->finished || nread == 0) return;
    /* a large answer is not a slow one: the timeout is for silence */
    if (nread > 0 && !(c->head_done && c->on_line)) uv_timer_start(&c->timer, ec_timeout, c->timeout_ms, 0);
    if (nread < 0) {
        if (nread == UV_ENOBUFS) return ec_failf(c, "response head too large");
        if (nread == UV_EOF && c->head_done && c->head.body_kind == SL_BODY_EOF && !c->on_line)
            return ec_finish(c, c->head.status == 200 ? NULL : "error answer");
        return ec_failf(c, "%s", nread == UV_EOF ? "connection closed" : uv_strerror((int)nread));
    }
    if (!c->head_done) {
        c->in.len += (size_t)nread;
        return ec_consume(c, NULL, 0);
    }
    ec_consume(c, b->base, (size_t)nread);
}

static void ec_written(uv_write_t *w, int status) {
    sl_ec_t *c = w->data;
    if (status < 0 && !c->finished) ec_failf(c, "write: %s", uv_strerror(status));
}

static void ec_connected(uv_connect_t *r, int status) {
    sl_ec_t *c = r->data;
    if (c->finished) return;
    if (status < 0) return ec_failf(c, "connect: %s", uv_strerror(status));
    uv_buf_t b = uv_buf_init(c->out.p, (unsigned)c->out.len);
    c->wr.data = c;
    int rc = uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, ec_written);
    if (rc == 0) rc = uv_read_start((uv_stream_t *)&c->tcp, ec_alloc, ec_read);
    if (rc < 0) ec_failf(c, "write: %s", uv_strerror(rc));
}

/* "http://host:port[/...]" -> an address (names resolved here: the main thread, not
 * the data path). */
static int endpoint_addr(const char *url, struct sockaddr_storage *ss, char *hostport, size_t hplen) {
    const char *h = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
    size_t n = strcspn(h, "/");
    if (n == 0 || n >= hplen) return -1;
    memcpy(hostport, h, n);
    hostport[n] = 0;
    char host[256];
    const char *colon = strrchr(hostport, ':');
    const char *port = colon && !strchr(colon, ']') ? colon + 1 : "2379";
    size_t hl = colon && !strchr(colon, ']') ? (size_t)(colon - hostport) : n;
    if (hl >= sizeof host) return -1;
    memcpy(host, hostport, hl);
    host[hl] = 0;
    if (host[0] == '[' && hl > 1 && host[hl - 1] == ']') memmove(host, host + 1, hl - 2), host[hl - 2] = 0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0 || !res) return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

/* POSTs body to path at url. NULL when nothing could start (then no callback). */
sl_ec_t *sl__ec_post(uv_loop_t *loop, const char *url, const char *path, const char *body, const char *token,
                     uint64_t timeout_ms, sl_ec_done_cb done, sl_ec_line_cb line, void *ud) {
    struct sockaddr_storage ss;
    char hostport[300];
    if (endpoint_addr(url, &ss, hostport, sizeof hostport) != 0) return NULL;
    sl_ec_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->in.max = 131072; /* the response head's limit (the body has its own, MAX_BODY) */
    c->on_done = done, c->on_line = line, c->ud = ud;
    c->timeout_ms = timeout_ms ? timeout_ms : 2000;
    sl_wbuf_printf(&c->out, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n",
                  path, hostport, strlen(body));
    if (token && *token)
        sl__eb_puts(&c->out, "Authorization: "), sl__eb_puts(&c->out, token), sl__eb_puts(&c->out, "\r\n");
    sl__eb_puts(&c->out, line ? "\r\n" : "Connection: close\r\n\r\n");
    sl__eb_puts(&c->out, body);
    if (c->out.oom) {
        free(c->out.p);
        free(c);
        return NULL;
    }
    c->lim = (sl_h1_limits_t){.max_header_size = 65536, .max_request_line = 65536};
    sl_h1_init(&c->h1, HTTP_RESPONSE, &c->lim);
    uv_tcp_init(loop, &c->tcp);
    uv_timer_init(loop, &c->timer);
    c->tcp.data = c->timer.data = c->conn.data = c;
    c->open = 2;
    uv_timer_start(&c->timer, ec_timeout, c->timeout_ms, 0);
    int rc = uv_tcp_connect(&c->conn, &c->tcp, (struct sockaddr *)&ss, ec_connected);
    if (rc < 0) {
        sl__ec_cancel(c);
        return NULL;
    }
    return c;
}

/* ---- shared by the watcher and the command line ---- */

const char *const sl__etcd_kinds[3] = {"upstreams", "routes", "consumers"}; /* upstreams first: read order */

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

/* Appends value v as item of a block list: "  - " then its lines indented by 4. */
int sl__etcd_put_item(sl_wbuf_t *t, const char *v, size_t vl, int indent) {
    int lines = 0;
    const char *p = v, *end = v + vl;
    while (vl && (end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\r')) end--, vl--;
    bool first = true;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (indent) sl__eb_puts(t, first ? "  - " : "    ");
        sl__eb_put(t, p, n);
        sl__eb_puts(t, "\n");
        lines++;
        first = false;
        p += n + (nl != NULL);
    }
    if (first) sl__eb_puts(t, indent ? "  - {}\n" : "\n"), lines++;
    return lines;
}
