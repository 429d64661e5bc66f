/* etcd.c — the fleet's config source: etcd's HTTP/JSON gateway, read, watched, applied.
 *
 * The main thread owns it, like the reload path it feeds. The state is the set of keys
 * under the prefix (relative names: routes/a, plugins/p, global) at a revision. A full
 * read (/v3/kv/range) replaces the set; a watch (/v3/watch from that revision + 1)
 * applies puts and deletes to it. Every change starts a 100 ms debounce; when it ends the
 * set is hashed and, unless the hash is the running generation's, sl_server_reload
 * builds a generation from the local file with the set's entries appended
 * (sl__etcd_build) and applies it or rejects it whole.
 *
 * Nothing is missed: a full read is the truth at its revision and the watch starts right
 * after it. A compaction cancels the watch (compact_revision), etcd gone or restarted
 * ends the stream, a revision lower than ours (etcd wiped or restored) shows in the
 * progress check: each of these goes back to a full read, and the content hash keeps a
 * full read of what is already served from rebuilding anything.
 *
 * The gateway streams one JSON object per line; libyaml (already the config parser)
 * reads JSON, so no JSON library is added. The HTTP exchange uses proto/http1.c's
 * response parser, as http/http_client.c does for plugins; that client is tied to a
 * request's coroutine and buffers a body whole, while a watch is an endless stream on
 * the main loop, so this file has its own small exchange (ec_t).
 */
#include "server/etcd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#include <yaml.h>

#include "base/log.h"
#include "proto/http1.h"
#include "script/plugin.h"
#include "server/server.h"

#define DEBOUNCE_MS 100
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define PROGRESS_MS 2000
#define MAX_BODY (64u << 20)

/* ---- bytes ---- */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} buf_t;

static bool bput(buf_t *b, const void *s, size_t n) {
    if (b->oom) return false;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return !(b->oom = true);
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static bool bputs(buf_t *b, const char *s) { return bput(b, s, strlen(s)); }

__attribute__((format(printf, 2, 3))) static bool bprintf(buf_t *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return n >= 0 && bput(b, tmp, (size_t)SL_MIN((size_t)n, sizeof tmp - 1));
}

static char *b64enc(const void *p, size_t n) {
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (out) EVP_EncodeBlock((unsigned char *)out, p, (int)n);
    return out;
}

/* NUL-terminated copy of the decoded bytes, *n their length; NULL when malformed. */
static char *b64dec(const char *s, size_t *n) {
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

typedef struct {
    yaml_document_t doc;
    yaml_node_t *root;
} jdoc_t;

static bool jparse(jdoc_t *d, const char *s, size_t n) {
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

static yaml_node_t *jget(jdoc_t *d, const yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(&d->doc, pr->key);
        if (k && k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(&d->doc, pr->value);
    }
    return NULL;
}

static const char *jstr(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static long long jint(const yaml_node_t *n) {
    const char *s = jstr(n);
    return s ? strtoll(s, NULL, 10) : 0;
}

static size_t jlen(const yaml_node_t *n) {
    return n && n->type == YAML_SEQUENCE_NODE ? (size_t)(n->data.sequence.items.top - n->data.sequence.items.start)
                                              : 0;
}

static yaml_node_t *jat(jdoc_t *d, const yaml_node_t *n, size_t i) {
    return yaml_document_get_node(&d->doc, n->data.sequence.items.start[i]);
}

static void jstr_out(buf_t *b, const char *s) {
    bputs(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') bput(b, "\\", 1);
        bput(b, s, 1);
    }
    bputs(b, "\"");
}

/* ---- the key set: relative key -> value, sorted by key ---- */

typedef struct {
    char *key; /* relative to prefix + '/' */
    char *val; /* NUL-terminated */
    size_t vlen;
} kv_t;

typedef struct {
    kv_t *a;
    size_t n, cap;
} kvset_t;

static size_t kv_pos(const kvset_t *s, const char *key, bool *found) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(s->a[mid].key, key);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    *found = false;
    return lo;
}

static const kv_t *kv_get(const kvset_t *s, const char *key) {
    bool f;
    size_t i = kv_pos(s, key, &f);
    return f ? &s->a[i] : NULL;
}

/* Takes val (malloc'ed). */
static bool kv_put(kvset_t *s, const char *key, char *val, size_t vlen) {
    bool f;
    size_t i = kv_pos(s, key, &f);
    if (f) {
        free(s->a[i].val);
        s->a[i].val = val, s->a[i].vlen = vlen;
        return true;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        kv_t *a = realloc(s->a, cap * sizeof *a);
        if (!a) return false;
        s->a = a, s->cap = cap;
    }
    char *k = strdup(key);
    if (!k) return false;
    memmove(&s->a[i + 1], &s->a[i], (s->n - i) * sizeof *s->a);
    s->a[i] = (kv_t){k, val, vlen};
    s->n++;
    return true;
}

static void kv_del(kvset_t *s, const char *key) {
    bool f;
    size_t i = kv_pos(s, key, &f);
    if (!f) return;
    free(s->a[i].key);
    free(s->a[i].val);
    memmove(&s->a[i], &s->a[i + 1], (s->n - i - 1) * sizeof *s->a);
    s->n--;
}

static void kv_clear(kvset_t *s) {
    for (size_t i = 0; i < s->n; i++) free(s->a[i].key), free(s->a[i].val);
    free(s->a);
    *s = (kvset_t){0};
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static uint64_t kv_hash(const kvset_t *s) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < s->n; i++) h = fnv(fnv(h, s->a[i].key, strlen(s->a[i].key) + 1), s->a[i].val, s->a[i].vlen + 1);
    return h;
}

/* Reads {"header":{"revision":..},"kvs":[{"key":b64,"value":b64}]} (a range answer, or a
 * snapshot) into s, keys made relative to prefix. */
static bool kv_from_range(kvset_t *s, long long *rev, const char *prefix, const char *text, size_t len) {
    jdoc_t d;
    if (!jparse(&d, text, len)) return false;
    yaml_node_t *h = jget(&d, d.root, "header");
    *rev = jint(h ? jget(&d, h, "revision") : jget(&d, d.root, "revision"));
    yaml_node_t *kvs = jget(&d, d.root, "kvs");
    size_t pl = strlen(prefix);
    bool ok = true;
    for (size_t i = 0; i < jlen(kvs) && ok; i++) {
        yaml_node_t *kv = jat(&d, kvs, i);
        const char *k64 = jstr(jget(&d, kv, "key")), *v64 = jstr(jget(&d, kv, "value"));
        size_t kl = 0, vl = 0;
        char *k = k64 ? b64dec(k64, &kl) : NULL;
        char *v = b64dec(v64 ? v64 : "", &vl);
        if (k && v && kl > pl + 1 && strncmp(k, prefix, pl) == 0 && k[pl] == '/') {
            ok = kv_put(s, k + pl + 1, v, vl);
            v = NULL;
        }
        free(k);
        free(v);
    }
    yaml_document_delete(&d.doc);
    return ok;
}

/* The snapshot: the same shape as a range answer, full keys. */
static void kv_to_json(const kvset_t *s, const char *prefix, long long rev, buf_t *b) {
    bprintf(b, "{\"revision\":\"%lld\",\"kvs\":[", rev);
    for (size_t i = 0; i < s->n; i++) {
        char full[1024];
        int fl = snprintf(full, sizeof full, "%s/%s", prefix, s->a[i].key);
        char *k = b64enc(full, (size_t)SL_MIN(fl, (int)sizeof full - 1)), *v = b64enc(s->a[i].val, s->a[i].vlen);
        if (k && v) bprintf(b, "%s{\"key\":\"", i ? "," : ""), bputs(b, k), bputs(b, "\",\"value\":\""), bputs(b, v), bputs(b, "\"}");
        free(k);
        free(v);
    }
    bputs(b, "]}\n");
}

/* ---- one HTTP/1.1 exchange with etcd's gateway on a libuv loop ---- */

typedef struct ec_s ec_t;
/** A unary call ended: err NULL and c->body the answer, or err. c is freed after it. */
typedef void (*ec_done_cb)(ec_t *c, const char *err);
/** A streamed call (watch): one line (one JSON message) of the body. */
typedef void (*ec_line_cb)(ec_t *c, const char *line, size_t n);

struct ec_s {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t conn;
    uv_write_t wr;
    int open; /* handles not closed yet */
    bool finished, head_done;
    buf_t out, in, body;
    size_t scanned;
    sl_h1_t h1;
    sl_h1_limits_t lim;
    sl_h1_head_t head;
    ec_done_cb on_done;
    ec_line_cb on_line;
    void *ud;
    uint64_t timeout_ms; /* silence allowed: connecting, or between two reads */
    char err[256];
    char rbuf[16384];
};

static void ec_closed(uv_handle_t *h) {
    ec_t *c = h->data;
    if (--c->open) return;
    free(c->out.p);
    free(c->in.p);
    free(c->body.p);
    free(c);
}

static void ec_close(ec_t *c) {
    if (!uv_is_closing((uv_handle_t *)&c->tcp)) uv_close((uv_handle_t *)&c->tcp, ec_closed);
    if (!uv_is_closing((uv_handle_t *)&c->timer)) uv_close((uv_handle_t *)&c->timer, ec_closed);
}

static void ec_finish(ec_t *c, const char *err) {
    if (c->finished) return;
    c->finished = true;
    if (c->on_done) c->on_done(c, err);
    ec_close(c);
}

/** Ends a call without calling it back. */
static void ec_cancel(ec_t *c) {
    if (!c) return;
    c->on_done = NULL;
    c->on_line = NULL;
    c->finished = true;
    ec_close(c);
}

static void ec_failf(ec_t *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    ec_finish(c, c->err);
}

static void ec_timeout(uv_timer_t *t) { ec_failf(t->data, "timed out"); }

static int ec_body(void *ud, const char *p, size_t n) {
    ec_t *c = ud;
    if (c->body.n + n > MAX_BODY || !bput(&c->body, p, n)) return -1;
    if (!c->on_line || c->head.status != 200) return 0;
    /* a stream: hand over each complete line, keep the rest */
    size_t start = 0;
    for (size_t i = c->scanned; i < c->body.n && !c->finished; i++)
        if (c->body.p[i] == '\n') {
            if (i > start) c->on_line(c, c->body.p + start, i - start);
            start = i + 1;
        }
    if (c->finished) return -1;
    memmove(c->body.p, c->body.p + start, c->body.n - start);
    c->body.n -= start;
    c->scanned = c->body.n;
    return 0;
}

static void ec_consume(ec_t *c, const char *p, size_t n) {
    if (!c->head_done) {
        size_t used = 0;
        int st = 0;
        int rc = sl_h1_head(&c->h1, c->in.p, c->in.n, &c->head, &used, &st);
        if (rc == SL_EAGAIN) return;
        if (rc != SL_OK) return ec_failf(c, "malformed response head");
        c->head_done = true;
        if (c->on_line && c->head.status == 200) uv_timer_stop(&c->timer); /* a stream has no end */
        p = c->in.p + used;
        n = c->in.n - used;
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
        if (rc == SL_DONE) done = true;
        else if (rc != SL_OK) return ec_failf(c, "malformed response body");
        p += used, n -= used;
    }
    if (done) {
        if (c->head.status != 200) return ec_failf(c, "HTTP %d: %.200s", c->head.status, c->body.p ? c->body.p : "");
        ec_finish(c, c->on_line ? "the watch stream ended" : NULL);
    }
}

static void ec_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
    (void)hint;
    ec_t *c = h->data;
    if (!c->head_done) {
        if (c->in.cap - c->in.n < 4097 && c->in.cap < 131072) {
            size_t want = c->in.cap ? c->in.cap * 2 : 8192;
            char *p = realloc(c->in.p, want);
            if (p) c->in.p = p, c->in.cap = want;
        }
        *b = c->in.cap > c->in.n + 1 ? uv_buf_init(c->in.p + c->in.n, (unsigned)(c->in.cap - c->in.n - 1))
                                     : uv_buf_init(NULL, 0);
        return;
    }
    *b = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void ec_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    ec_t *c = s->data;
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
        c->in.n += (size_t)nread;
        return ec_consume(c, NULL, 0);
    }
    ec_consume(c, b->base, (size_t)nread);
}

static void ec_written(uv_write_t *w, int status) {
    ec_t *c = w->data;
    if (status < 0 && !c->finished) ec_failf(c, "write: %s", uv_strerror(status));
}

static void ec_connected(uv_connect_t *r, int status) {
    ec_t *c = r->data;
    if (c->finished) return;
    if (status < 0) return ec_failf(c, "connect: %s", uv_strerror(status));
    uv_buf_t b = uv_buf_init(c->out.p, (unsigned)c->out.n);
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
static ec_t *ec_post(uv_loop_t *loop, const char *url, const char *path, const char *body, const char *token,
                     uint64_t timeout_ms, ec_done_cb done, ec_line_cb line, void *ud) {
    struct sockaddr_storage ss;
    char hostport[300];
    if (endpoint_addr(url, &ss, hostport, sizeof hostport) != 0) return NULL;
    ec_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->on_done = done, c->on_line = line, c->ud = ud;
    c->timeout_ms = timeout_ms ? timeout_ms : 2000;
    bprintf(&c->out, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n", path,
            hostport, strlen(body));
    if (token && *token) bputs(&c->out, "Authorization: "), bputs(&c->out, token), bputs(&c->out, "\r\n");
    bputs(&c->out, line ? "\r\n" : "Connection: close\r\n\r\n");
    bputs(&c->out, body);
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
        ec_cancel(c);
        return NULL;
    }
    return c;
}

/* ---- building a generation from the local file and the keys ---- */

static const char *const kinds[] = {"upstreams", "routes", "consumers"}; /* upstreams first: read order */

typedef struct {
    int start; /* first line in the composed text */
    int indent;
    const char *key;
} seg_t;

/* Parses one value alone: a YAML (or JSON) mapping whose `name` is the key's last part
 * (global: only `plugins`). Adds "etcd KEY:L:C: ..." errors. */
static bool check_value(const char *prefix, const kv_t *kv, const char *kind, const char *name, sl_errors_t *errs) {
    char where[600];
    snprintf(where, sizeof where, "etcd %s/%s", prefix, kv->key);
    yaml_parser_t p;
    yaml_document_t d;
    if (!yaml_parser_initialize(&p)) return false;
    yaml_parser_set_input_string(&p, (const unsigned char *)kv->val, kv->vlen);
    if (!yaml_parser_load(&p, &d)) {
        sl_errors_add(errs, where, (int)p.problem_mark.line + 1, (int)p.problem_mark.column + 1, "%s",
                      p.problem ? p.problem : "malformed YAML");
        yaml_parser_delete(&p);
        return false;
    }
    yaml_parser_delete(&p);
    bool ok = true;
    yaml_node_t *root = yaml_document_get_root_node(&d);
    jdoc_t j = {.doc = d, .root = root};
    if (!root || root->type != YAML_MAPPING_NODE) {
        sl_errors_add(errs, where, 1, 1, "expected a mapping (YAML or JSON) with the same keys as in the file");
        ok = false;
    } else if (!kind) {
        for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top; pr++) {
            yaml_node_t *k = yaml_document_get_node(&d, pr->key);
            if (!jstr(k) || strcmp(jstr(k), "plugins") != 0) {
                sl_errors_add(errs, where, (int)k->start_mark.line + 1, (int)k->start_mark.column + 1,
                              "'global' holds only 'plugins' (the global chain)");
                ok = false;
            }
        }
    } else {
        yaml_node_t *n = jget(&j, root, "name");
        if (!jstr(n) || strcmp(jstr(n), name) != 0) {
            int l = n ? (int)n->start_mark.line + 1 : 1, c = n ? (int)n->start_mark.column + 1 : 1;
            sl_errors_add(errs, where, l, c, "name '%s' is not the key's last part '%s'", jstr(n) ? jstr(n) : "",
                          name);
            ok = false;
        }
    }
    yaml_document_delete(&d);
    return ok;
}

/* Writes the plugins/NAME values as NAME.lua into a folder named by their hash (written
 * once, renamed into place: a generation's code never changes under it). */
static int plugin_dir(const char *base, const kvset_t *s, char *out, size_t outlen) {
    uint64_t h = 1469598103934665603ULL;
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (strncmp(s->a[i].key, "plugins/", 8) == 0) {
            h = fnv(fnv(h, s->a[i].key, strlen(s->a[i].key) + 1), s->a[i].val, s->a[i].vlen);
            n++;
        }
    if (!n) return 0;
    mkdir(base, 0700);
    snprintf(out, outlen, "%s/%016llx", base, (unsigned long long)h);
    struct stat st;
    if (stat(out, &st) == 0) return 1;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", out, (int)getpid());
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
    for (size_t i = 0; i < s->n; i++) {
        if (strncmp(s->a[i].key, "plugins/", 8) != 0) continue;
        char f[PATH_MAX + 128];
        snprintf(f, sizeof f, "%s/%s.lua", tmp, s->a[i].key + 8);
        FILE *fp = fopen(f, "wb");
        if (!fp || fwrite(s->a[i].val, 1, s->a[i].vlen, fp) != s->a[i].vlen) {
            if (fp) fclose(fp);
            return -1;
        }
        fclose(fp);
    }
    if (rename(tmp, out) != 0 && stat(out, &st) != 0) return -1;
    return 1;
}

static bool valid_name(const char *s) {
    if (!*s || strlen(s) > 64) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return false;
    return true;
}

/* Appends value v as item of a block list: "  - " then its lines indented by 4. */
static int put_item(buf_t *t, const char *v, size_t vl, int indent) {
    int lines = 0;
    const char *p = v, *end = v + vl;
    while (vl && (end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\r')) end--, vl--;
    bool first = true;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (indent) bputs(t, first ? "  - " : "    ");
        bput(t, p, n);
        bputs(t, "\n");
        lines++;
        first = false;
        p += n + (nl != NULL);
    }
    if (first) bputs(t, indent ? "  - {}\n" : "\n"), lines++;
    return lines;
}

/* Takes line (malloc'ed) into errs. */
static void errs_push(sl_errors_t *errs, char *line) {
    if (!line) return;
    if (errs->n == errs->cap) {
        size_t cap = errs->cap ? errs->cap * 2 : 8;
        char **l = realloc(errs->lines, cap * sizeof *l);
        if (!l) {
            free(line);
            return;
        }
        errs->lines = l, errs->cap = cap;
    }
    errs->lines[errs->n++] = line;
}

static int build(const char *prefix, const char *pbase, const kvset_t *s, const char *path, const char *text,
                 size_t len, sl_config_t **out, sl_errors_t *errs) {
    *out = NULL;
    buf_t t = {0};
    seg_t *segs = calloc(s->n + 1, sizeof *segs);
    size_t nsegs = 0;
    sl_errors_t tmp = {0};
    bool ok = segs != NULL;
    bput(&t, text, len);
    if (len && text[len - 1] != '\n') bputs(&t, "\n");
    int line = 1;
    for (size_t i = 0; i < t.n; i++) line += t.p[i] == '\n';
    int base_line = line; /* the first line after the local file */
    for (size_t k = 0; k < 3 && ok; k++) {
        size_t kl = strlen(kinds[k]);
        bool header = false;
        for (size_t i = 0; i < s->n; i++) {
            const kv_t *kv = &s->a[i];
            if (strncmp(kv->key, kinds[k], kl) != 0 || kv->key[kl] != '/') continue;
            if (!check_value(prefix, kv, kinds[k], kv->key + kl + 1, &tmp)) continue;
            if (!header) bprintf(&t, "%s:\n", kinds[k]), line++, header = true;
            segs[nsegs++] = (seg_t){line, 4, kv->key};
            line += put_item(&t, kv->val, kv->vlen, 4);
        }
    }
    for (size_t i = 0; i < s->n && ok; i++) {
        const kv_t *kv = &s->a[i];
        const char *slash = strchr(kv->key, '/');
        size_t kl = slash ? (size_t)(slash - kv->key) : strlen(kv->key);
        bool known = false;
        for (size_t k = 0; k < 3; k++) known |= strlen(kinds[k]) == kl && !strncmp(kv->key, kinds[k], kl);
        if (kv->key[0] == '_') continue; /* _push: the push's own guard, not config */
        if (!strcmp(kv->key, "global")) {
            if (!check_value(prefix, kv, NULL, NULL, &tmp)) continue;
            segs[nsegs++] = (seg_t){line, 0, kv->key};
            line += put_item(&t, kv->val, kv->vlen, 0);
            continue;
        }
        if (known && slash && valid_name(slash + 1)) continue;
        if (slash && kl == 7 && !strncmp(kv->key, "plugins", 7) && valid_name(slash + 1)) continue;
        char where[600];
        snprintf(where, sizeof where, "etcd %s/%s", prefix, kv->key);
        sl_errors_add(&tmp, where, 1, 1,
                      "unknown key: expected routes/NAME, upstreams/NAME, consumers/NAME, plugins/NAME or global");
    }
    if (t.oom || !ok) sl_errors_add(&tmp, path, 1, 1, "out of memory");
    sl_config_t *cfg = NULL;
    char pdir[PATH_MAX] = "";
    int rc = -1;
    if (tmp.n == 0 && sl_config_parse_composed(path, t.p, t.n, &cfg, &tmp) == 0) {
        int pd = plugin_dir(pbase, s, pdir, sizeof pdir);
        char **pp = pd > 0 ? realloc(cfg->plugin_paths, (cfg->nplugin_paths + 1) * sizeof(char *)) : NULL;
        if (pd < 0 || (pd > 0 && !pp)) {
            sl_errors_add(&tmp, path, 1, 1, "cannot write the plugins from etcd under %s: %s", pbase, strerror(errno));
        } else {
            if (pp) {
                memmove(pp + 1, pp, cfg->nplugin_paths * sizeof(char *));
                pp[0] = strdup(pdir);
                cfg->plugin_paths = pp;
                cfg->nplugin_paths++;
            }
            rc = sl_plugins_check(cfg, &tmp);
        }
    }
    /* Errors: positions in the appended part become the key's own line:col; the plugin
     * folder becomes the plugins/ key. */
    size_t plen = strlen(path), dlen = strlen(pdir);
    for (size_t i = 0; i < tmp.n; i++) {
        const char *l = tmp.lines[i];
        int ln = 0, col = 0, used = 0;
        buf_t b = {0};
        const char *d = dlen ? strstr(l, pdir) : NULL;
        if (!strncmp(l, path, plen) && sscanf(l + plen, ":%d:%d:%n", &ln, &col, &used) == 2 && used &&
            ln >= base_line && nsegs) {
            size_t k = 0;
            while (k + 1 < nsegs && segs[k + 1].start <= ln) k++;
            int c = col - segs[k].indent;
            bprintf(&b, "etcd %s/%s:%d:%d:", prefix, segs[k].key, ln - segs[k].start + 1, c < 1 ? 1 : c);
            bputs(&b, l + plen + used);
        } else if (d) {
            bput(&b, l, (size_t)(d - l));
            bprintf(&b, "etcd %s/plugins", prefix);
            bputs(&b, d + dlen);
        } else {
            bputs(&b, l);
        }
        errs_push(errs, b.p);
    }
    if (rc != 0 && cfg) {
        sl_config_free(cfg);
        cfg = NULL;
    }
    sl_errors_free(&tmp);
    free(segs);
    free(t.p);
    *out = cfg;
    return cfg ? 0 : -1;
}

/* ---- the watcher (main thread) ---- */

struct sl_etcd_s {
    sl_server_t *srv;
    uv_loop_t *loop;
    char **endpoints;
    size_t nendpoints, ep;
    char *prefix, *snapshot, *user, *pass;
    char pbase[PATH_MAX]; /* where plugins/ values become files */
    uint64_t timeout_ms;
    char token[1024];
    kvset_t kvs;
    long long rev;
    uint64_t built_hash; /* of the keys last built (applied or rejected) */
    bool have_built, ready, up, attached, closing;
    uint64_t since_ms; /* up (or down) since, wall clock */
    long long applied_rev;
    uint64_t applied, rejected, full_reads, compactions;
    char last_error[2048];
    ec_t *call, *watch, *probe;
    uv_timer_t retry, debounce, progress;
    uint64_t backoff_ms;
};

static sl_etcd_t g_etcd; /* one source per process */

static uint64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void range_body(const char *prefix, bool count_only, buf_t *b) {
    size_t pl = strlen(prefix);
    char *k = malloc(pl + 2), *e = malloc(pl + 2);
    if (k && e) {
        memcpy(k, prefix, pl), memcpy(e, prefix, pl);
        k[pl] = '/', e[pl] = '0', k[pl + 1] = e[pl + 1] = 0;
        char *k64 = b64enc(k, pl + 1), *e64 = b64enc(e, pl + 1);
        if (k64 && e64) bprintf(b, "{\"key\":\"%s\",\"range_end\":\"%s\"%s}", k64, e64, count_only ? ",\"count_only\":true" : "");
        free(k64);
        free(e64);
    }
    free(k);
    free(e);
}

static void start_read(sl_etcd_t *e);

static void set_up(sl_etcd_t *e, bool up, const char *why) {
    if (e->up == up && e->since_ms) return;
    e->up = up;
    e->since_ms = wall_ms();
    if (up) sl_log_info("etcd %s: connected", e->endpoints[e->ep]);
    else sl_log_warn("etcd %s: unavailable (%s): still serving generation %llu", e->endpoints[e->ep], why,
                     (unsigned long long)(e->srv ? e->srv->generation : 0));
}

static void stop_calls(sl_etcd_t *e) {
    ec_cancel(e->call);
    ec_cancel(e->watch);
    ec_cancel(e->probe);
    e->call = e->watch = e->probe = NULL;
    uv_timer_stop(&e->progress);
}

static void on_retry(uv_timer_t *t) { start_read(t->data); }

static void went_down(sl_etcd_t *e, const char *why) {
    stop_calls(e);
    e->token[0] = 0; /* an expired or revoked token is the likeliest cause: authenticate again */
    set_up(e, false, why);
    e->ep = (e->ep + 1) % e->nendpoints; /* the next endpoint, if there are several */
    e->backoff_ms = e->backoff_ms ? SL_MIN(e->backoff_ms * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
    if (!e->closing) uv_timer_start(&e->retry, on_retry, e->backoff_ms, 0);
}

static void write_snapshot(sl_etcd_t *e) {
    if (!e->snapshot) return;
    buf_t b = {0};
    kv_to_json(&e->kvs, e->prefix, e->rev, &b);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", e->snapshot);
    int fd = b.oom ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && write(fd, b.p, b.n) == (ssize_t)b.n && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    if (!ok || rename(tmp, e->snapshot) != 0) sl_log_warn("cannot write the etcd snapshot %s: %s", e->snapshot, strerror(errno));
    free(b.p);
}

/* The debounce ended: one generation from the keys as they are now. */
static void apply(sl_etcd_t *e) {
    uint64_t h = kv_hash(&e->kvs);
    if (e->have_built && h == e->built_hash) return; /* what is served already */
    if (e->kvs.n == 0 && e->have_built) {
        /* Not even a push's _push key: etcd was wiped, restored empty, or the prefix is
         * wrong. Dropping every route of the fleet is never what that means. */
        sl_log_warn("etcd: %s holds no keys at revision %lld: generation %llu keeps serving until a push", e->prefix,
                    e->rev, (unsigned long long)e->srv->generation);
        return;
    }
    e->built_hash = h;
    e->have_built = true;
    char why[64];
    snprintf(why, sizeof why, "etcd revision %lld", e->rev);
    char *json = NULL;
    if (sl_server_reload(e->srv, why, &json) == SL_OK) {
        e->applied++;
        e->applied_rev = e->rev;
        e->ready = true;
        e->last_error[0] = 0;
        write_snapshot(e);
    } else {
        e->rejected++;
        jdoc_t d;
        const char *msg = NULL;
        if (json && jparse(&d, json, strlen(json))) {
            msg = jstr(jget(&d, d.root, "error"));
            snprintf(e->last_error, sizeof e->last_error, "%s", msg ? msg : json);
            yaml_document_delete(&d.doc);
        } else {
            snprintf(e->last_error, sizeof e->last_error, "%s", json ? json : "rejected");
        }
    }
    free(json);
}

static void on_debounce(uv_timer_t *t) { apply(t->data); }

static void changed(sl_etcd_t *e) {
    if (!uv_is_active((uv_handle_t *)&e->debounce)) uv_timer_start(&e->debounce, on_debounce, DEBOUNCE_MS, 0);
}

static void on_watch_line(ec_t *c, const char *line, size_t n) {
    sl_etcd_t *e = c->ud;
    jdoc_t d;
    if (!jparse(&d, line, n)) return went_down(e, "unreadable watch message");
    yaml_node_t *res = jget(&d, d.root, "result");
    if (!res) {
        yaml_document_delete(&d.doc);
        return went_down(e, "watch error");
    }
    yaml_node_t *canceled = jget(&d, res, "canceled");
    long long compact = jint(jget(&d, res, "compact_revision"));
    if (jstr(canceled) && !strcmp(jstr(canceled), "true")) {
        yaml_document_delete(&d.doc);
        if (compact) {
            e->compactions++;
            sl_log_info("etcd: history compacted at revision %lld while watching from %lld: reading %s again",
                        compact, e->rev + 1, e->prefix);
        }
        stop_calls(e);
        return start_read(e); /* the whole prefix again: nothing in the gap is lost */
    }
    long long rev = jint(jget(&d, jget(&d, res, "header"), "revision"));
    yaml_node_t *evs = jget(&d, res, "events");
    size_t pl = strlen(e->prefix);
    for (size_t i = 0; i < jlen(evs); i++) {
        yaml_node_t *ev = jat(&d, evs, i), *kv = jget(&d, ev, "kv");
        const char *type = jstr(jget(&d, ev, "type"));
        size_t kl = 0, vl = 0;
        char *k = b64dec(jstr(jget(&d, kv, "key")) ? jstr(jget(&d, kv, "key")) : "", &kl);
        if (k && kl > pl + 1 && !strncmp(k, e->prefix, pl) && k[pl] == '/') {
            if (type && !strcmp(type, "DELETE")) {
                kv_del(&e->kvs, k + pl + 1);
            } else {
                const char *v64 = jstr(jget(&d, kv, "value"));
                char *v = b64dec(v64 ? v64 : "", &vl);
                if (v && !kv_put(&e->kvs, k + pl + 1, v, vl)) free(v);
            }
        }
        free(k);
    }
    if (rev > e->rev) e->rev = rev;
    if (jlen(evs)) changed(e);
    yaml_document_delete(&d.doc);
}

static void on_watch_done(ec_t *c, const char *err) {
    sl_etcd_t *e = c->ud;
    e->watch = NULL;
    went_down(e, err ? err : "the watch ended");
}

static void on_progress_done(ec_t *c, const char *err) {
    sl_etcd_t *e = c->ud;
    e->probe = NULL;
    if (err) return went_down(e, err);
    jdoc_t d;
    if (!jparse(&d, c->body.p, c->body.n)) return;
    long long rev = jint(jget(&d, jget(&d, d.root, "header"), "revision"));
    yaml_document_delete(&d.doc);
    if (rev && rev < e->rev) {
        sl_log_warn("etcd: revision went backwards (%lld < %lld): etcd was wiped or restored; reading %s again", rev,
                    e->rev, e->prefix);
        stop_calls(e);
        start_read(e);
    }
}

/* The gateway takes one watch request per stream, so an idle watch cannot be asked for
 * progress on the stream: a count-only read every 2 s checks that etcd answers and that
 * its revision did not go backwards. */
static void on_progress(uv_timer_t *t) {
    sl_etcd_t *e = t->data;
    if (e->probe || !e->watch) return;
    buf_t b = {0};
    range_body(e->prefix, true, &b);
    e->probe = ec_post(e->loop, e->endpoints[e->ep], "/v3/kv/range", b.p ? b.p : "{}", e->token, e->timeout_ms,
                       on_progress_done, NULL, e);
    free(b.p);
}

static void start_watch(sl_etcd_t *e) {
    buf_t b = {0}, r = {0};
    range_body(e->prefix, false, &r);
    /* {"key":..,"range_end":..} -> a create_request from rev + 1 */
    if (r.p && r.n > 2) {
        r.p[r.n - 1] = 0;
        bprintf(&b, "{\"create_request\":%s,\"start_revision\":\"%lld\",\"progress_notify\":true}}", r.p, e->rev + 1);
    }
    free(r.p);
    e->watch = ec_post(e->loop, e->endpoints[e->ep], "/v3/watch", b.p ? b.p : "{}", e->token, e->timeout_ms,
                       on_watch_done, on_watch_line, e);
    free(b.p);
    if (!e->watch) return went_down(e, "cannot start the watch");
    uv_timer_start(&e->progress, on_progress, PROGRESS_MS, PROGRESS_MS);
}

static void on_read_done(ec_t *c, const char *err) {
    sl_etcd_t *e = c->ud;
    e->call = NULL;
    if (err) return went_down(e, err);
    kvset_t s = {0};
    long long rev = 0;
    if (!kv_from_range(&s, &rev, e->prefix, c->body.p, c->body.n)) {
        kv_clear(&s);
        return went_down(e, "unreadable range answer");
    }
    e->full_reads++;
    e->backoff_ms = 0;
    set_up(e, true, NULL);
    kv_clear(&e->kvs);
    e->kvs = s;
    e->rev = rev;
    uv_timer_stop(&e->debounce);
    apply(e); /* a full read is applied at once (unchanged content: nothing happens) */
    if (!e->closing) start_watch(e);
}

static void on_auth_done(ec_t *c, const char *err) {
    sl_etcd_t *e = c->ud;
    e->call = NULL;
    if (err) return went_down(e, err);
    jdoc_t d;
    if (jparse(&d, c->body.p, c->body.n)) {
        const char *tok = jstr(jget(&d, d.root, "token"));
        snprintf(e->token, sizeof e->token, "%s", tok ? tok : "");
        yaml_document_delete(&d.doc);
    }
    if (!e->token[0]) return went_down(e, "authentication answered no token");
    start_read(e);
}

static void start_read(sl_etcd_t *e) {
    if (e->closing) return;
    stop_calls(e);
    buf_t b = {0};
    if (e->user && !e->token[0]) {
        bputs(&b, "{\"name\":"), jstr_out(&b, e->user), bputs(&b, ",\"password\":"), jstr_out(&b, e->pass), bputs(&b, "}");
        e->call = ec_post(e->loop, e->endpoints[e->ep], "/v3/auth/authenticate", b.p ? b.p : "{}", NULL, e->timeout_ms,
                          on_auth_done, NULL, e);
    } else {
        range_body(e->prefix, false, &b);
        e->call = ec_post(e->loop, e->endpoints[e->ep], "/v3/kv/range", b.p ? b.p : "{}", e->token, e->timeout_ms,
                          on_read_done, NULL, e);
    }
    if (b.p) explicit_bzero(b.p, b.n);
    free(b.p);
    if (!e->call) went_down(e, "cannot reach the endpoint");
}

/* ---- the server's side ---- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    buf_t b = {0};
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) bput(&b, tmp, n);
    fclose(f);
    if (!b.p) bput(&b, "", 0);
    *len = b.n;
    return b.p;
}

static void copy_conf(sl_etcd_t *e, const sl_source_conf_t *s) {
    e->nendpoints = s->nendpoints;
    e->endpoints = calloc(s->nendpoints, sizeof(char *));
    for (size_t i = 0; e->endpoints && i < s->nendpoints; i++) e->endpoints[i] = strdup(s->endpoints[i]);
    e->prefix = strdup(s->prefix ? s->prefix : "/sluice");
    e->snapshot = s->snapshot ? strdup(s->snapshot) : NULL;
    e->user = s->username ? strdup(s->username) : NULL;
    e->pass = s->password ? strdup(s->password) : NULL;
    e->timeout_ms = s->timeout_ms;
    if (e->snapshot) snprintf(e->pbase, sizeof e->pbase, "%s.plugins", e->snapshot);
    else snprintf(e->pbase, sizeof e->pbase, "%s/sluice-etcd-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
}

sl_config_t *sl_etcd_boot(sl_config_t *local) {
    sl_etcd_t *e = &g_etcd;
    copy_conf(e, &local->source);
    size_t len = 0, tl = 0;
    char *snap = e->snapshot ? read_file(e->snapshot, &len) : NULL;
    if (!snap) {
        sl_log_info("etcd: no snapshot%s%s: /ready answers 503 until etcd gives a config", e->snapshot ? " at " : "",
                    e->snapshot ? e->snapshot : "");
        return local;
    }
    char *text = read_file(local->path, &tl);
    sl_config_t *cfg = NULL;
    sl_errors_t errs = {0};
    if (text && kv_from_range(&e->kvs, &e->rev, e->prefix, snap, len) &&
        build(e->prefix, e->pbase, &e->kvs, local->path, text, tl, &cfg, &errs) == 0) {
        sl_log_info("etcd: serving the snapshot %s (revision %lld) until etcd answers", e->snapshot, e->rev);
        e->ready = true;
        e->have_built = true;
        e->built_hash = kv_hash(&e->kvs);
        sl_config_free(local);
    } else {
        for (size_t i = 0; i < errs.n; i++) sl_log_err("etcd snapshot %s: %s", e->snapshot, errs.lines[i]);
        kv_clear(&e->kvs);
        e->rev = 0;
        cfg = local;
    }
    sl_errors_free(&errs);
    free(text);
    free(snap);
    return cfg;
}

void sl_etcd_attach(sl_server_t *srv) {
    sl_etcd_t *e = &g_etcd;
    if (!e->nendpoints) return;
    e->srv = srv;
    e->loop = srv->loop;
    srv->etcd = e;
    uv_timer_init(e->loop, &e->retry);
    uv_timer_init(e->loop, &e->debounce);
    uv_timer_init(e->loop, &e->progress);
    e->retry.data = e->debounce.data = e->progress.data = e;
    e->attached = true;
    start_read(e);
}

void sl_etcd_close(sl_server_t *srv) {
    sl_etcd_t *e = srv->etcd;
    if (!e || e->closing) return;
    e->closing = true;
    stop_calls(e);
    uv_close((uv_handle_t *)&e->retry, NULL);
    uv_close((uv_handle_t *)&e->debounce, NULL);
    uv_close((uv_handle_t *)&e->progress, NULL);
}

int sl__etcd_build(sl_etcd_t *e, const char *path, const char *text, size_t len, sl_config_t **out,
                   sl_errors_t *errs) {
    return build(e->prefix, e->pbase, &e->kvs, path, text, len, out, errs);
}

uint64_t sl__etcd_hash(const sl_etcd_t *e) { return kv_hash(&e->kvs); }

bool sl_etcd_ready(const sl_etcd_t *e) { return !e || e->ready; }

char *sl_etcd_status(const sl_etcd_t *e) {
    if (!e) return NULL;
    buf_t b = {0};
    bprintf(&b, ",\"config_source\":{\"kind\":\"etcd\",\"endpoint\":");
    jstr_out(&b, e->endpoints[e->ep]);
    bputs(&b, ",\"prefix\":");
    jstr_out(&b, e->prefix);
    time_t since = (time_t)(e->since_ms / 1000);
    struct tm tm;
    char ts[40] = "";
    if (e->since_ms) strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&since, &tm));
    bprintf(&b, ",\"up\":%s,\"since\":\"%s\",\"revision\":%lld,\"applied_revision\":%lld,\"ready\":%s,"
            "\"applied\":%llu,\"rejected\":%llu,\"full_reads\":%llu,\"compactions\":%llu,\"last_error\":",
            e->up ? "true" : "false", ts, e->rev, e->applied_rev, e->ready ? "true" : "false",
            (unsigned long long)e->applied, (unsigned long long)e->rejected, (unsigned long long)e->full_reads,
            (unsigned long long)e->compactions);
    if (e->last_error[0]) {
        /* JSON-escape the error text (it holds newlines between several errors) */
        bputs(&b, "\"");
        for (const char *p = e->last_error; *p; p++) {
            if (*p == '"' || *p == '\\') bprintf(&b, "\\%c", *p);
            else if ((unsigned char)*p < 0x20) bprintf(&b, "\\u%04x", *p);
            else bput(&b, p, 1);
        }
        bputs(&b, "\"}");
    } else {
        bputs(&b, "null}");
    }
    return b.p;
}

char *sl_etcd_metrics(const sl_etcd_t *e) {
    if (!e) return NULL;
    buf_t b = {0};
    bprintf(&b,
                     "# HELP sluice_config_source_up 1 while the config source (etcd) answers, else 0.\n"
                     "# TYPE sluice_config_source_up gauge\nsluice_config_source_up %d\n"
                     "# HELP sluice_config_source_revision The etcd revision the gateway has seen.\n"
                     "# TYPE sluice_config_source_revision gauge\nsluice_config_source_revision %lld\n",
                     e->up ? 1 : 0, e->rev);
    return b.p;
}

/* ---- push and pull (the command line: a private loop, run to the end) ---- */

typedef struct {
    bool done;
    char *body;
    size_t len;
    char err[300];
} sync_t;

static void sync_done(ec_t *c, const char *err) {
    sync_t *s = c->ud;
    s->done = true;
    if (err) snprintf(s->err, sizeof s->err, "%s", err);
    else if ((s->body = malloc(c->body.n + 1))) memcpy(s->body, c->body.p ? c->body.p : "", c->body.n), s->body[c->body.n] = 0, s->len = c->body.n;
}

static char *call_sync(const char *url, const char *path, const char *body, sync_t *s);

/* push and pull authenticate as etcdctl does, from ETCDCTL_USER="name:password". */
static const char *cli_token(const char *url) {
    static char token[1024];
    static bool done;
    const char *up = getenv("ETCDCTL_USER");
    if (done || !up || !strchr(up, ':')) return token;
    done = true;
    buf_t b = {0};
    char *name = strndup(up, (size_t)(strchr(up, ':') - up));
    bputs(&b, "{\"name\":"), jstr_out(&b, name ? name : ""), bputs(&b, ",\"password\":"), jstr_out(&b, strchr(up, ':') + 1);
    bputs(&b, "}");
    free(name);
    sync_t s;
    char *ans = call_sync(url, "/v3/auth/authenticate", b.p ? b.p : "{}", &s);
    if (b.p) explicit_bzero(b.p, b.n);
    free(b.p);
    jdoc_t d;
    if (ans && jparse(&d, ans, s.len)) {
        const char *tok = jstr(jget(&d, d.root, "token"));
        snprintf(token, sizeof token, "%s", tok ? tok : "");
        yaml_document_delete(&d.doc);
    }
    if (!token[0]) fprintf(stderr, "sluice: etcd %s: authentication as ETCDCTL_USER failed: %s\n", url, ans ? ans : s.err);
    free(ans);
    return token;
}

/* One call, waited for. The answer's body (malloc'ed) or NULL with s->err. */
static char *call_sync(const char *url, const char *path, const char *body, sync_t *s) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *token = strcmp(path, "/v3/auth/authenticate") ? cli_token(url) : NULL;
    *s = (sync_t){0};
    if (!ec_post(&loop, url, path, body, token, 5000, sync_done, NULL, s)) snprintf(s->err, sizeof s->err, "cannot reach %s", url);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    if (!s->body && !s->err[0]) snprintf(s->err, sizeof s->err, "no answer");
    return s->body;
}

static bool read_prefix(const char *url, const char *prefix, kvset_t *kvs, long long *rev) {
    buf_t b = {0};
    range_body(prefix, false, &b);
    sync_t s;
    char *body = call_sync(url, "/v3/kv/range", b.p ? b.p : "{}", &s);
    free(b.p);
    if (!body) {
        fprintf(stderr, "sluice: etcd %s: %s\n", url, s.err);
        return false;
    }
    bool ok = kv_from_range(kvs, rev, prefix, body, s.len);
    if (!ok) fprintf(stderr, "sluice: etcd %s: unreadable answer\n", url);
    free(body);
    return ok;
}

/* The source text of a block node, its continuation lines moved left by its column. */
static char *node_text(const char *text, const yaml_node_t *n) {
    size_t a = n->start_mark.index, z = n->end_mark.index, col = n->start_mark.column;
    while (z > a && (text[z - 1] == '\n' || text[z - 1] == ' ' || text[z - 1] == '\r')) z--;
    buf_t b = {0};
    for (size_t i = a; i < z;) {
        const char *nl = memchr(text + i, '\n', z - i);
        size_t e = nl ? (size_t)(nl - text) : z;
        bput(&b, text + i, e - i);
        bputs(&b, "\n");
        i = e + 1;
        for (size_t k = 0; k < col && i < z && text[i] == ' '; k++) i++;
    }
    return b.p;
}

/* The keys a config file stands for: its routes, upstreams, consumers, global chain and
 * the source of the user plugins it uses. */
static bool desired(const char *file, const sl_config_t *cfg, kvset_t *d) {
    size_t len = 0;
    char *text = read_file(file, &len);
    jdoc_t j;
    if (!text || !jparse(&j, text, len)) {
        free(text);
        return false;
    }
    bool ok = true;
    for (size_t k = 0; k < 3; k++) {
        yaml_node_t *list = jget(&j, j.root, kinds[k]);
        for (size_t i = 0; i < jlen(list); i++) {
            yaml_node_t *m = jat(&j, list, i);
            const char *name = jstr(jget(&j, m, "name"));
            char key[128];
            char *v = name ? node_text(text, m) : NULL;
            snprintf(key, sizeof key, "%s/%s", kinds[k], name ? name : "");
            if (v && !kv_put(d, key, v, strlen(v))) ok = false;
        }
    }
    yaml_node_t *g = jget(&j, j.root, "plugins");
    if (g && jlen(g)) {
        char *seq = node_text(text, g);
        buf_t b = {0};
        bputs(&b, g->data.sequence.style == YAML_FLOW_SEQUENCE_STYLE ? "plugins: " : "plugins:\n");
        for (const char *p = seq; p && *p;) {
            const char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            if (g->data.sequence.style != YAML_FLOW_SEQUENCE_STYLE) bputs(&b, "  ");
            bput(&b, p, n);
            bputs(&b, "\n");
            p += n + (nl != NULL);
        }
        free(seq);
        if (!b.p || !kv_put(d, "global", b.p, b.n)) ok = false;
    }
    yaml_document_delete(&j.doc);
    free(text);
    /* user plugins: every name the config uses, found in a folder of plugin_paths */
    for (size_t r = 0; r <= cfg->nroutes; r++) {
        const sl_plugin_conf_t *ps = r < cfg->nroutes ? cfg->routes[r].plugins : cfg->plugins;
        size_t np = r < cfg->nroutes ? cfg->routes[r].nplugins : cfg->nplugins;
        for (size_t i = 0; i < np; i++) {
            char key[128];
            snprintf(key, sizeof key, "plugins/%s", ps[i].name);
            if (kv_get(d, key)) continue;
            for (size_t s = 0; s + 1 < cfg->nplugin_search; s++) { /* the last folder: built-ins */
                char f[PATH_MAX + 128];
                size_t vl = 0;
                snprintf(f, sizeof f, "%s/%s.lua", cfg->plugin_search[s], ps[i].name);
                char *v = read_file(f, &vl);
                if (v) {
                    if (!kv_put(d, key, v, vl)) ok = false;
                    break;
                }
            }
        }
    }
    return ok;
}

/* prefix/rel in base64; `end`: the key just after it (a range's end that includes it). */
static void put_key(buf_t *b, const char *prefix, const char *rel, bool end) {
    size_t pl = strlen(prefix), rl = strlen(rel);
    char *k = malloc(pl + rl + 2);
    if (!k) return;
    memcpy(k, prefix, pl);
    k[pl] = '/';
    memcpy(k + pl + 1, rel, rl + 1);
    char *k64 = b64enc(k, pl + rl + 1 + end); /* + its NUL */
    if (k64) bputs(b, k64);
    free(k64);
    free(k);
}

static bool keep(const kvset_t *want, const kv_t *kv) { return kv->key[0] == '_' || kv_get(want, kv->key); }

/* Whether want holds a key strictly between a and b. */
static bool want_between(const kvset_t *want, const char *a, const char *b) {
    bool f;
    size_t p = kv_pos(want, a, &f);
    if (f) p++;
    return p < want->n && strcmp(want->a[p].key, b) < 0;
}

int sl_etcd_push(const char *file, const char *url, const char *prefix) {
    sl_config_t *cfg = NULL;
    sl_errors_t errs = {0};
    int rc = sl_config_build(file, NULL, 0, &cfg, &errs); /* exactly as `sluice check` */
    if (rc != 0 || cfg->source.enabled) {
        for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "%s\n", errs.lines[i]);
        if (rc == 0) fprintf(stderr, "sluice push: %s has config_source: push an ordinary config file\n", file);
        sl_errors_free(&errs);
        sl_config_free(cfg);
        return 1;
    }
    sl_errors_free(&errs);
    kvset_t want = {0}, have = {0};
    long long rev = 0;
    bool ok = desired(file, cfg, &want);
    sl_config_free(cfg);
    if (!ok) {
        fprintf(stderr, "sluice push: cannot read %s again\n", file);
        kv_clear(&want);
        return 1;
    }
    if (!read_prefix(url, prefix, &have, &rev)) {
        kv_clear(&want);
        return 1;
    }
    buf_t ops = {0};
    int puts_n = 0, dels = 0, nops = 1; /* _push */
    for (size_t i = 0; i < want.n; i++) {
        const kv_t *h = kv_get(&have, want.a[i].key);
        if (h && h->vlen == want.a[i].vlen && !memcmp(h->val, want.a[i].val, h->vlen)) continue;
        char *v64 = b64enc(want.a[i].val, want.a[i].vlen);
        bputs(&ops, ops.n ? ",{\"request_put\":{\"key\":\"" : "{\"request_put\":{\"key\":\"");
        put_key(&ops, prefix, want.a[i].key, false);
        bprintf(&ops, "\",\"value\":\""), bputs(&ops, v64 ? v64 : ""), bputs(&ops, "\"}}");
        free(v64);
        puts_n++;
        nops++;
    }
    /* Deletes: a run of keys to delete with nothing kept between them is one range delete
     * (etcd caps a transaction's operations, --max-txn-ops, 128 by default). */
    for (size_t i = 0; i < have.n;) {
        if (keep(&want, &have.a[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j + 1 < have.n && !keep(&want, &have.a[j + 1]) && !want_between(&want, have.a[j].key, have.a[j + 1].key))
            j++;
        bputs(&ops, ops.n ? ",{\"request_delete_range\":{\"key\":\"" : "{\"request_delete_range\":{\"key\":\"");
        put_key(&ops, prefix, have.a[i].key, false);
        if (j > i) bputs(&ops, "\",\"range_end\":\""), put_key(&ops, prefix, have.a[j].key, true);
        bputs(&ops, "\"}}");
        dels += (int)(j - i + 1);
        nops++;
        i = j + 1;
    }
    kv_clear(&want);
    kv_clear(&have);
    if (!puts_n && !dels) {
        printf("sluice push: %s under %s is already %s (revision %lld): nothing to write\n", url, prefix, file, rev);
        free(ops.p);
        return 0;
    }
    /* A testing aid: a pause between the read and the write makes two pushes race for sure. */
    const char *pause = getenv("SLUICE_TEST_PUSH_PAUSE_MS");
    if (pause) usleep((useconds_t)atoi(pause) * 1000);
    /* The guard: no key under the prefix changed since the read, and _push (written by
     * every push) is part of it, so of two pushes that read the same revision one fails
     * even when the other only deleted. */
    char marker[200];
    snprintf(marker, sizeof marker, "{\"pushed_at\":%llu,\"pid\":%d}", (unsigned long long)wall_ms(), (int)getpid());
    char *m64 = b64enc(marker, strlen(marker));
    buf_t r = {0}, body = {0};
    range_body(prefix, false, &r);
    if (r.p && r.n > 2) r.p[r.n - 1] = 0;
    bprintf(&body, "{\"compare\":[%s,\"target\":\"MOD\",\"mod_revision\":\"%lld\",\"result\":\"LESS\"}],\"success\":[",
            r.p ? r.p : "{", rev + 1);
    bputs(&body, ops.p);
    bputs(&body, ",{\"request_put\":{\"key\":\"");
    put_key(&body, prefix, "_push", false);
    bputs(&body, "\",\"value\":\""), bputs(&body, m64 ? m64 : ""), bputs(&body, "\"}}]}");
    free(m64);
    free(r.p);
    free(ops.p);
    sync_t s;
    char *ans = body.oom ? NULL : call_sync(url, "/v3/kv/txn", body.p, &s);
    free(body.p);
    if (!ans) {
        fprintf(stderr, "sluice push: etcd %s: %s\n", url, body.oom ? "out of memory" : s.err);
        if (strstr(s.err, "too many operations"))
            fprintf(stderr, "sluice push: this change is %d operations in one transaction; etcd allows 128 unless "
                            "started with a larger --max-txn-ops: raise it, or push the change in steps\n", nops);
        return 1;
    }
    jdoc_t d;
    bool won = false;
    long long nrev = 0;
    if (jparse(&d, ans, s.len)) {
        const char *sc = jstr(jget(&d, d.root, "succeeded"));
        won = sc && !strcmp(sc, "true");
        nrev = jint(jget(&d, jget(&d, d.root, "header"), "revision"));
        yaml_document_delete(&d.doc);
    }
    free(ans);
    if (!won) {
        fprintf(stderr,
                "sluice push: %s under %s changed after this push read it at revision %lld (another push or a "
                "direct write won the race): nothing was written; run it again to push onto the new state\n",
                url, prefix, rev);
        return 1;
    }
    printf("sluice push: %s -> %s%s: %d put, %d deleted, revision %lld\n", file, url, prefix, puts_n, dels, nrev);
    return 0;
}

static void pull_section(buf_t *out, const kvset_t *s, const char *kind) {
    size_t kl = strlen(kind);
    bool header = false;
    for (size_t i = 0; i < s->n; i++) {
        if (strncmp(s->a[i].key, kind, kl) != 0 || s->a[i].key[kl] != '/') continue;
        if (!header) bprintf(out, "%s:\n", kind), header = true;
        put_item(out, s->a[i].val, s->a[i].vlen, 4);
    }
}

int sl_etcd_pull(const char *url, const char *prefix, const char *plugins_dir) {
    kvset_t s = {0};
    long long rev = 0;
    if (!read_prefix(url, prefix, &s, &rev)) return 1;
    buf_t out = {0};
    bprintf(&out, "# sluice pull %s %s at revision %lld\n", url, prefix, rev);
    bputs(&out, "# The process keys (listeners, admin, workers, redis) stay in each gateway's local file;\n"
                "# this listener only makes the file one `sluice check` accepts.\n"
                "listeners:\n  - { name: http, listen: \"127.0.0.1:0\" }\n");
    if (plugins_dir) {
        bputs(&out, "plugin_paths: [");
        jstr_out(&out, plugins_dir);
        bputs(&out, "]\n");
    }
    for (size_t k = 0; k < 3; k++) pull_section(&out, &s, kinds[k]);
    const kv_t *g = kv_get(&s, "global");
    if (g) put_item(&out, g->val, g->vlen, 0);
    int rc = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (strncmp(s.a[i].key, "plugins/", 8) != 0) continue;
        if (!plugins_dir) {
            bprintf(&out, "# %s: %zu bytes of Lua (pull --plugins DIR writes it)\n", s.a[i].key, s.a[i].vlen);
            continue;
        }
        char f[PATH_MAX + 128];
        snprintf(f, sizeof f, "%s/%s.lua", plugins_dir, s.a[i].key + 8);
        mkdir(plugins_dir, 0755);
        FILE *fp = fopen(f, "wb");
        if (!fp || fwrite(s.a[i].val, 1, s.a[i].vlen, fp) != s.a[i].vlen) {
            fprintf(stderr, "sluice pull: cannot write %s: %s\n", f, strerror(errno));
            rc = 1;
        }
        if (fp) fclose(fp);
    }
    fwrite(out.p, 1, out.n, stdout);
    free(out.p);
    kv_clear(&s);
    return rc;
}
