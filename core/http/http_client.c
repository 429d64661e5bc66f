/* http_client.c — sluice.http.request: a plugin's own HTTP/1.1 request, on the worker's loop.
 *
 * The plugin's coroutine yields while the call resolves the host (libuv's thread
 * pool, only for a name that is not an IP literal), connects, writes the request
 * Lua built and validated, and reads the response with the same head validator
 * and body framing the proxy uses for upstream responses (http1.c). One timer
 * bounds the whole exchange. The connection is not pooled: the request says
 * `Connection: close`, and the response may be delimited by that close.
 *
 * Lifetime: the call is malloc'ed (its handles outlive a request that ends
 * first). It is freed when three things are over: its handles are closed, a
 * pending getaddrinfo has called back, and the request no longer holds it
 * (sl_ffi_http_done after Lua copied the result, or the request ended).
 *
 * The same call also runs detached from any request (sl_http_send, http_client.h): the
 * core's own fire-and-forget senders (the mirror plugin's copies, http-logger's batches)
 * get a C callback instead of a wakeup, and the response body is read and discarded.
 */
#include <stdlib.h>

#include "http/http_client.h"

#include "proto/http1.h"
#include "http/request.h"
#include "base/log.h"
#include "script/lua_host.h"
#include "sluice.h"
#include "net/tls.h"

/** Largest response head accepted, as for upstream responses. */
#define HC_MAX_HEAD (64 * 1024)

typedef struct sl_http_call_s {
    sl_wait_t base;
    sl_worker_t *w;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect;
    uv_write_t write;
    uv_getaddrinfo_t gai;
    sl_tls_client_t *tls_ctx;  /**< https: the context (the worker's, or own_ctx) */
    sl_tls_client_t *own_ctx;  /**< https with a `ca` file: a context of this call's own */
    sl_tls_t *tls;
    char name[256];            /**< the url's host: the TLS server name */
    uint8_t tcp_open, timer_open, gai_pending, held; /* see the lifetime note above */
    uint8_t finished, head_done, req_was_head, too_big;
    uint8_t starting; /**< inside sl_ffi_http_request: a failure is returned, not woken up */
    uint8_t discard;  /**< detached: the body is read and dropped */
    sl_http_done_fn done; /**< detached: called once when the exchange is over */
    void *done_ud;
    uint16_t port;
    int status;
    const char *err;           /**< static text, or errbuf */
    char errbuf[160];
    char *out;                 /**< the request bytes, then freed */
    size_t out_len;
    char *in;                  /**< response bytes: the head stays here, fields point into it */
    size_t in_len, in_cap;
    char *body;
    size_t body_len, body_cap, max_body;
    sl_h1_t h1;
    sl_h1_limits_t limits;
    sl_h1_head_t head;
    sl_h1_header_t spill[SL_H1_MAX_HEADERS]; /**< the head's fields beyond its inline room */
    char rbuf[16384]; /**< body reads (the head's bytes stay put in `in`) */
} sl_http_call_t;

static void call_maybe_free(sl_http_call_t *c) {
    if (c->tcp_open || c->timer_open || c->gai_pending || c->held) return;
    free(c->out);
    free(c->in);
    free(c->body);
    sl_tls_client_free(c->own_ctx);
    free(c);
}

static void on_tcp_closed(uv_handle_t *h) {
    sl_http_call_t *c = h->data;
    c->tcp_open = 0;
    call_maybe_free(c);
}

static void on_timer_closed(uv_handle_t *h) {
    sl_http_call_t *c = h->data;
    c->timer_open = 0;
    call_maybe_free(c);
}

static void close_handles(sl_http_call_t *c) {
    if (c->tls) {
        sl_tls_close(c->tls);
        c->tls = NULL;
    }
    if (c->tcp_open && !uv_is_closing((uv_handle_t *)&c->tcp)) uv_close((uv_handle_t *)&c->tcp, on_tcp_closed);
    if (c->timer_open && !uv_is_closing((uv_handle_t *)&c->timer))
        uv_close((uv_handle_t *)&c->timer, on_timer_closed);
    if (c->gai_pending) uv_cancel((uv_req_t *)&c->gai); /* if it runs already, its callback still comes */
}

/* The exchange is over (err NULL: a complete response). Wakes the waiting plugin,
 * which reads the result and releases the call. Nothing may touch c after the wakeup
 * except through a close callback: the request may have ended inside it. */
static void finish(sl_http_call_t *c, const char *err) {
    if (c->finished) return;
    c->finished = 1;
    c->err = err;
    close_handles(c);
    if (c->done) { /* detached: nothing waits; the call goes once its handles are closed */
        if (!c->starting) c->done(c->done_ud, err ? 0 : c->status, err);
        c->held = 0;
        call_maybe_free(c);
        return;
    }
    sl_req_t *r = c->base.r;
    if (r && !c->starting) sl__req_wakeup(r);
}

static void finish_fmt(sl_http_call_t *c, const char *what, int uverr) {
    snprintf(c->errbuf, sizeof(c->errbuf), "%s: %s", what, uv_strerror(uverr));
    finish(c, c->errbuf);
}

static void on_timeout(uv_timer_t *t) { finish(t->data, "timeout"); }

/* ---- reading the response ---- */

static int on_body(void *ud, const char *p, size_t n) {
    sl_http_call_t *c = ud;
    if (c->discard) return 0;
    if (c->body_len + n > c->max_body) {
        c->too_big = 1;
        return -1;
    }
    if (c->body_len + n > c->body_cap) {
        size_t cap = SL_MAX(c->body_cap * 2, 16384);
        while (cap < c->body_len + n) cap *= 2;
        char *nb = realloc(c->body, SL_MIN(cap, c->max_body));
        if (!nb) return -1;
        c->body = nb;
        c->body_cap = SL_MIN(cap, c->max_body);
    }
    memcpy(c->body + c->body_len, p, n);
    c->body_len += n;
    return 0;
}

/* Parses what arrived; returns true when the call finished. */
static bool consume(sl_http_call_t *c, const char *p, size_t n) {
    while (!c->head_done) {
        size_t used = 0;
        int st = 0;
        int rc = sl_h1_head(&c->h1, c->in, c->in_len, &c->head, &used, &st);
        if (rc == SL_EAGAIN) return false;
        if (rc != SL_OK) {
            finish(c, "malformed response head");
            return true;
        }
        if (c->head.status >= 100 && c->head.status < 200) {
            if (c->head.status == 101) {
                finish(c, "unexpected 101 Switching Protocols");
                return true;
            }
            /* an interim response (100, 103): the final one follows */
            memmove(c->in, c->in + used, c->in_len - used);
            c->in_len -= used;
            sl_h1_init(&c->h1, HTTP_RESPONSE, &c->limits);
            c->h1.req_was_head = c->req_was_head;
            continue;
        }
        c->head_done = 1;
        c->status = c->head.status;
        /* the body bytes that came with the head; the head's bytes stay where they are */
        p = c->in + used;
        n = c->in_len - used;
        c->in_len = used;
        c->h1.on_data = on_body;
        c->h1.ud = c;
        if (c->head.body_kind == SL_BODY_NONE) {
            finish(c, NULL);
            return true;
        }
    }
    while (n > 0) {
        size_t used = 0;
        c->h1.spans_left = UINT32_MAX;
        int rc = sl_h1_body(&c->h1, p, n, &used);
        if (rc == SL_DONE) {
            finish(c, NULL);
            return true;
        }
        if (rc != SL_OK) {
            finish(c, c->too_big ? "response body larger than max_body" : "malformed response body");
            return true;
        }
        p += used;
        n -= used;
    }
    return false;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    (void)hint;
    sl_http_call_t *c = SL_CONTAINER_OF((uv_tcp_t *)h, sl_http_call_t, tcp);
    if (!c->head_done) {
        if (c->in_cap - c->in_len < 4096 && c->in_cap < HC_MAX_HEAD + 4096) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
            char *ni = realloc(c->in, cap);
            if (ni) c->in = ni, c->in_cap = cap;
        }
        *buf = uv_buf_init(c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
        return;
    }
    *buf = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    sl_http_call_t *c = SL_CONTAINER_OF((uv_tcp_t *)s, sl_http_call_t, tcp);
    if (c->finished || nread == 0) return;
    if (nread == UV_ENOBUFS) {
        finish(c, "out of memory");
        return;
    }
    if (nread == UV_EOF) {
        if (c->head_done && c->head.body_kind == SL_BODY_EOF)
            finish(c, NULL);
        else
            finish(c, c->head_done ? "connection closed before the response body ended"
                                   : "connection closed before a response");
        return;
    }
    if (nread < 0) {
        finish_fmt(c, "read", (int)nread);
        return;
    }
    if (!c->head_done) {
        c->in_len += (size_t)nread; /* sl_h1_head enforces the head limit */
        consume(c, NULL, 0);
        return;
    }
    consume(c, buf->base, (size_t)nread);
}

/* ---- connecting and writing ---- */

static void on_written(uv_write_t *wr, int status) {
    sl_http_call_t *c = wr->data;
    free(c->out);
    c->out = NULL;
    if (c->finished) return;
    if (status < 0) finish_fmt(c, "write", status);
}

/* Connected (and, for https, the handshake done): the request goes out. */
static void send_request(sl_http_call_t *c) {
    uv_buf_t b = uv_buf_init(c->out, (unsigned)c->out_len);
    c->write.data = c;
    int rc;
    if (c->tls) {
        rc = sl_tls_write(c->tls, &c->write, &b, 1, on_written);
        if (rc == 1) {
            free(c->out);
            c->out = NULL;
        }
        if (rc >= 0) rc = sl_tls_read_start(c->tls, on_alloc, on_read);
    } else {
        rc = uv_write(&c->write, (uv_stream_t *)&c->tcp, &b, 1, on_written);
        if (rc == 0) rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    }
    if (rc < 0) finish_fmt(c, "write", rc);
}

static void on_tls(sl_tls_t *t, int status) {
    sl_http_call_t *c = sl_tls_owner(t);
    if (c->finished) return;
    if (status < 0) {
        snprintf(c->errbuf, sizeof(c->errbuf), "tls %s", sl_tls_error(t));
        finish(c, c->errbuf);
        return;
    }
    send_request(c);
}

static void on_connected(uv_connect_t *cr, int status) {
    sl_http_call_t *c = cr->data;
    if (c->finished) return;
    if (status < 0) {
        finish_fmt(c, "connect", status);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (c->tls_ctx) {
        c->tls = sl_tls_connect(c->tls_ctx, (uv_stream_t *)&c->tcp, &c->w->tls_pump, c->name);
        if (!c->tls || sl_tls_handshake(c->tls, on_tls) != 0) {
            snprintf(c->errbuf, sizeof(c->errbuf), "tls %s", c->tls ? sl_tls_error(c->tls) : "out of memory");
            finish(c, c->errbuf);
        }
        return;
    }
    send_request(c);
}

static void start_connect(sl_http_call_t *c, const struct sockaddr *sa) {
    int rc = uv_tcp_init(&c->w->loop, &c->tcp);
    if (rc < 0) {
        finish_fmt(c, "socket", rc);
        return;
    }
    c->tcp_open = 1;
    c->tcp.data = c;
    c->connect.data = c;
    rc = uv_tcp_connect(&c->connect, &c->tcp, sa, on_connected);
    if (rc < 0) finish_fmt(c, "connect", rc);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res) {
    sl_http_call_t *c = g->data;
    c->gai_pending = 0;
    if (c->finished) {
        uv_freeaddrinfo(res);
        call_maybe_free(c);
        return;
    }
    if (status < 0 || !res) {
        finish_fmt(c, "resolve", status < 0 ? status : UV_EAI_NONAME);
    } else {
        if (res->ai_family == AF_INET)
            ((struct sockaddr_in *)res->ai_addr)->sin_port = htons(c->port);
        else
            ((struct sockaddr_in6 *)res->ai_addr)->sin6_port = htons(c->port);
        start_connect(c, res->ai_addr);
    }
    uv_freeaddrinfo(res);
}

/* ---- the FFI ABI ---- */

static sl_http_call_t *call_of(sl_req_t *r) {
    return r->wait && r->wait->kind == SL_WAIT_HTTP ? SL_CONTAINER_OF(r->wait, sl_http_call_t, base) : NULL;
}

static void cancel_call(sl_wait_t *wt) {
    sl_http_call_t *c = SL_CONTAINER_OF(wt, sl_http_call_t, base);
    c->base.r = NULL;
    c->held = 0;
    c->finished = 1;
    close_handles(c);
    call_maybe_free(c);
}

static int start(sl_http_call_t *c, const char *name);

/* The https context of a call: the worker's (system trust store, verified or not), or a
 * context of its own for a `ca` file. NULL with *err. */
static sl_tls_client_t *https_context(sl_http_call_t *c, int verify, const char *ca, const char **err) {
    static __thread char msg[600];
    sl_tls_target_conf_t tc = {.verify = verify != 0, .ca = (char *)ca, .ca_path = (char *)ca};
    if (ca && *ca && verify) {
        c->own_ctx = sl_tls_client_build(&tc, NULL, msg, sizeof msg);
        if (!c->own_ctx) *err = msg;
        return c->own_ctx;
    }
    tc.ca = tc.ca_path = NULL;
    sl_tls_client_t **slot = &c->w->http_tls[verify ? 1 : 0];
    if (!*slot && !(*slot = sl_tls_client_build(&tc, NULL, msg, sizeof msg))) *err = msg;
    return *slot;
}

/* A call's state with its request bytes copied and its timer armed; NULL with *err. */
static sl_http_call_t *call_new(sl_worker_t *w, const char *name, int port, const char *req, size_t req_len,
                                int is_head, double timeout_ms, double max_body, int tls, int verify,
                                const char *ca, const char **err) {
    sl_http_call_t *c = calloc(1, sizeof(*c));
    char *out = malloc(req_len ? req_len : 1);
    if (!c || !out) {
        free(c);
        free(out);
        *err = "out of memory";
        return NULL;
    }
    memcpy(out, req, req_len);
    c->w = w;
    snprintf(c->name, sizeof c->name, "%s", name);
    if (tls && !(c->tls_ctx = https_context(c, verify, ca, err))) {
        sl_tls_client_free(c->own_ctx);
        free(c);
        free(out);
        return NULL;
    }
    c->held = 1;
    c->out = out;
    c->out_len = req_len;
    c->port = (uint16_t)port;
    c->req_was_head = is_head ? 1 : 0;
    c->max_body = max_body > 0 ? (size_t)max_body : 0;
    c->limits = (sl_h1_limits_t){.max_header_size = HC_MAX_HEAD, .max_request_line = HC_MAX_HEAD};
    sl_h1_init(&c->h1, HTTP_RESPONSE, &c->limits);
    c->h1.req_was_head = c->req_was_head;
    c->head.spill = sl_h1_spill_array;
    c->head.spill_ud = c->spill;

    uv_timer_init(&w->loop, &c->timer);
    c->timer.data = c;
    c->timer_open = 1;
    uv_update_time(&w->loop); /* the cached loop time may be a whole iteration old */
    uv_timer_start(&c->timer, on_timeout, timeout_ms > 0 ? (uint64_t)timeout_ms : 1, 0);
    return c;
}

int sl_ffi_http_request(sl_req_t *r, const char *host, size_t host_len, int port, const char *req,
                        size_t req_len, int is_head, double timeout_ms, double max_body, int tls, int verify,
                        const char *ca, const char **err) {
    static __thread char msg[160];
    if (r->lua.phase != SL_PHASE_REWRITE && r->lua.phase != SL_PHASE_ACCESS) {
        *err = "http.request works in rewrite and access only";
        return SL_ERROR;
    }
    if (r->wait) {
        *err = "already waiting";
        return SL_ERROR;
    }
    char name[256];
    if (host_len == 0 || host_len >= sizeof(name) || port < 1 || port > 65535) {
        *err = "bad host or port";
        return SL_ERROR;
    }
    memcpy(name, host, host_len);
    name[host_len] = 0;
    sl_http_call_t *c = call_new(r->w, name, port, req, req_len, is_head, timeout_ms, max_body, tls, verify, ca, err);
    if (!c) return SL_ERROR;
    c->base.r = r;
    c->base.kind = SL_WAIT_HTTP;
    c->base.cancel = cancel_call;
    r->wait = &c->base;
    c->starting = 1;
    start(c, name);
    c->starting = 0;
    if (c->finished) { /* failed before anything could call back: no yield */
        snprintf(msg, sizeof(msg), "%s", c->err);
        *err = msg;
        sl_ffi_http_done(r);
        return SL_ERROR;
    }
    return SL_OK;
}

int sl_http_send(sl_worker_t *w, const char *host, size_t host_len, int port, const char *req, size_t req_len,
                 uint64_t timeout_ms, sl_http_done_fn done, void *ud, const char **err) {
    char name[256];
    if (host_len == 0 || host_len >= sizeof(name) || port < 1 || port > 65535) {
        *err = "bad host or port";
        return SL_ERROR;
    }
    memcpy(name, host, host_len);
    name[host_len] = 0;
    sl_http_call_t *c = call_new(w, name, port, req, req_len, 0, (double)timeout_ms, 0, 0, 0, NULL, err);
    if (!c) return SL_ERROR;
    c->held = 1;
    c->discard = 1;
    c->done = done;
    c->done_ud = ud;
    c->starting = 1;
    start(c, name);
    c->starting = 0;
    if (c->finished) { /* failed at once (socket, connect): no callback comes, and c goes
                          * once its handles are closed */
        static __thread char msg[160];
        snprintf(msg, sizeof msg, "%s", c->err);
        *err = msg;
        return SL_ERROR;
    }
    return SL_OK;
}

static int start(sl_http_call_t *c, const char *name) {
    struct sockaddr_storage ss;
    if (uv_ip4_addr(name, c->port, (struct sockaddr_in *)&ss) == 0 ||
        uv_ip6_addr(name, c->port, (struct sockaddr_in6 *)&ss) == 0) {
        start_connect(c, (struct sockaddr *)&ss);
        return SL_OK;
    }
    c->gai.data = c;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int rc = uv_getaddrinfo(&c->w->loop, &c->gai, on_resolved, name, NULL, &hints);
    if (rc < 0) {
        finish_fmt(c, "resolve", rc);
        return SL_ERROR;
    }
    c->gai_pending = 1;
    return SL_OK;
}

int sl_ffi_http_result(sl_req_t *r, int *status, int *nheaders, const char **body, size_t *body_len,
                       const char **err) {
    sl_http_call_t *c = call_of(r);
    if (!c || !c->finished) {
        *err = "no finished http call";
        return SL_ERROR;
    }
    if (c->err) {
        *err = c->err;
        return SL_ERROR;
    }
    *status = c->status;
    *nheaders = c->head.nheaders;
    *body = c->body ? c->body : "";
    *body_len = c->body_len;
    return SL_OK;
}

int sl_ffi_http_header_at(sl_req_t *r, int i, const char **name, size_t *name_len, const char **value,
                          size_t *value_len) {
    sl_http_call_t *c = call_of(r);
    if (!c || !c->head_done || i < 0 || i >= c->head.nheaders) return SL_ERROR;
    const sl_h1_header_t *h = &c->head.headers[i];
    *name = h->name.p;
    *name_len = h->name.len;
    *value = h->value.p ? h->value.p : "";
    *value_len = h->value.len;
    return SL_OK;
}

void sl_ffi_http_done(sl_req_t *r) {
    sl_http_call_t *c = call_of(r);
    if (!c) return;
    r->wait = NULL;
    c->base.r = NULL;
    c->held = 0;
    close_handles(c);
    call_maybe_free(c);
}
