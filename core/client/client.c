/* client.c — one HTTP/1.1 request on one connection, on any libuv loop (client.h).
 *
 * Lifetime: a call is malloc'ed (its handles outlive whatever started it). It is freed
 * when three things are over: its handles are closed, a pending getaddrinfo has called
 * back, and its owner released it (sl_client_close, or on_done returned for a oneshot
 * call). Handles close through libuv's deferred callbacks, so a call that finishes or is
 * closed inside one of its own callbacks stays in memory until that callback's caller
 * has returned: the read path checks `finished` after every callback it makes.
 */
#include "client/client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/stream.h"
#include "sluice.h"

/** Largest response head accepted, as for upstream responses. */
#define MAX_HEAD (64 * 1024)
/** Addresses of a name tried (localhost is often ::1 then 127.0.0.1, and a server may
 *  listen on one of them only). */
#define SL_CLIENT_ADDRS 4

struct sl_client_s {
    sl_stream_t s; /**< first: the tcp handle's address is the call's */
    uv_timer_t timer;
    uv_connect_t connect;
    uv_write_t write;
    uv_getaddrinfo_t gai;
    sl_client_req_t rq; /**< the caller's, its pointers to bytes replaced by copies below */
    char name[256];     /**< the host to resolve */
    /** A resolved name's addresses, tried in turn while a connect is refused or fails. */
    struct sockaddr_storage addrs[SL_CLIENT_ADDRS];
    uint8_t naddrs, addr_i;
    char tls_name[256]; /**< the TLS server name, when the caller gave one */
    uint8_t tcp_open, timer_open, gai_pending, held; /* see the lifetime note above */
    uint8_t finished, head_done, too_big, refused;
    int status;
    const char *err; /**< static text, or errbuf */
    char errbuf[160];
    char *out; /**< the request bytes (a copy, or the caller's), until written */
    size_t out_len;
    char *in; /**< response bytes: the head stays here, its fields point into it */
    size_t in_len, in_cap;
    char *body;
    size_t body_len, body_cap;
    sl_h1_t h1;
    sl_h1_limits_t limits;
    sl_h1_head_t head;
    sl_h1_header_t spill[SL_H1_MAX_HEADERS]; /**< the head's fields beyond its inline room */
    char rbuf[16384];                        /**< body reads (the head's bytes stay put in `in`) */
};

/* The request bytes are written (or the call is over): a copy goes. */
static void drop_out(sl_client_t *c) {
    if (!c->rq.req_borrowed) free(c->out);
    c->out = NULL;
}

static void maybe_free(sl_client_t *c) {
    if (c->tcp_open || c->timer_open || c->gai_pending || c->held) return;
    if (c->rq.tls_owned) sl_tls_client_free(c->rq.tls);
    drop_out(c);
    free(c->in);
    free(c->body);
    free(c);
}

static void on_tcp_closed(uv_handle_t *h) {
    sl_client_t *c = h->data;
    c->tcp_open = 0;
    maybe_free(c);
}

static void on_timer_closed(uv_handle_t *h) {
    sl_client_t *c = h->data;
    c->timer_open = 0;
    maybe_free(c);
}

static void close_handles(sl_client_t *c) {
    sl_stream_end_tls(&c->s);
    if (c->tcp_open && !uv_is_closing((uv_handle_t *)&c->s.tcp))
        uv_close((uv_handle_t *)&c->s.tcp, on_tcp_closed);
    if (c->timer_open && !uv_is_closing((uv_handle_t *)&c->timer))
        uv_close((uv_handle_t *)&c->timer, on_timer_closed);
    if (c->gai_pending) uv_cancel((uv_req_t *)&c->gai); /* if it runs already, its callback still comes */
}

/* The exchange is over (err NULL: a complete response). */
static void finish(sl_client_t *c, const char *err) {
    if (c->finished) return;
    c->finished = 1;
    c->err = err;
    close_handles(c);
    if (c->rq.on_done) c->rq.on_done(c->rq.ud, err ? 0 : c->status, err);
    if (c->rq.oneshot) {
        c->held = 0;
        maybe_free(c);
    }
}

static void finish_fmt(sl_client_t *c, const char *what, int uverr) {
    snprintf(c->errbuf, sizeof(c->errbuf), "%s: %s", what, uv_strerror(uverr));
    finish(c, c->errbuf);
}

static void on_timeout(uv_timer_t *t) { finish(t->data, "timeout"); }

/* ---- reading the response ---- */

static int on_data(void *ud, const char *p, size_t n) {
    sl_client_t *c = ud;
    if (c->rq.on_body) {
        if (c->rq.on_body(c->rq.ud, c, p, n) != 0) {
            c->refused = 1;
            return -1;
        }
        return c->finished ? -1 : 0; /* closed from inside: stop here */
    }
    if (c->rq.drop_body) return 0;
    if (c->body_len + n > c->rq.max_body) {
        c->too_big = 1;
        return -1;
    }
    if (c->body_len + n > c->body_cap) {
        size_t cap = SL_MAX(c->body_cap * 2, 16384);
        while (cap < c->body_len + n) cap *= 2;
        cap = SL_MIN(cap, c->rq.max_body);
        char *nb = realloc(c->body, cap);
        if (!nb) return -1;
        c->body = nb;
        c->body_cap = cap;
    }
    memcpy(c->body + c->body_len, p, n);
    c->body_len += n;
    return 0;
}

/* Parses what arrived (the head's bytes in `in`, or body bytes p[0..n)). */
static void consume(sl_client_t *c, const char *p, size_t n) {
    while (!c->head_done) {
        size_t used = 0;
        int st = 0;
        int rc = sl_h1_head(&c->h1, c->in, c->in_len, &c->head, &used, &st);
        if (rc == SL_EAGAIN) return;
        if (rc != SL_OK) return finish(c, "malformed response head");
        if (c->head.status >= 100 && c->head.status < 200) {
            if (c->head.status == 101) return finish(c, "unexpected 101 Switching Protocols");
            /* an interim response (100, 103): the final one follows */
            memmove(c->in, c->in + used, c->in_len - used);
            c->in_len -= used;
            sl_h1_init(&c->h1, HTTP_RESPONSE, &c->limits);
            c->h1.req_was_head = c->rq.head_req;
            continue;
        }
        c->head_done = 1;
        c->status = c->head.status;
        /* the body bytes that came with the head; the head's bytes stay where they are */
        p = c->in + used;
        n = c->in_len - used;
        c->in_len = used;
        c->h1.on_data = on_data;
        c->h1.ud = c;
        if (c->rq.on_head) {
            c->rq.on_head(c->rq.ud, c);
            if (c->finished) return;
        }
        if (c->head.body_kind == SL_BODY_NONE) return finish(c, NULL);
    }
    while (n > 0) {
        size_t used = 0;
        c->h1.spans_left = UINT32_MAX;
        int rc = sl_h1_body(&c->h1, p, n, &used);
        if (c->finished) return; /* closed from inside on_body */
        if (rc == SL_DONE) return finish(c, NULL);
        if (rc != SL_OK)
            return finish(c, c->too_big   ? "response body larger than max_body"
                             : c->refused ? "response body refused"
                                          : "malformed response body");
        p += used;
        n -= used;
    }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    (void)hint;
    sl_client_t *c = SL_CONTAINER_OF((uv_tcp_t *)h, sl_client_t, s.tcp);
    if (!c->head_done) {
        if (c->in_cap - c->in_len < 4096 && c->in_cap < MAX_HEAD + 4096) {
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
    sl_client_t *c = SL_CONTAINER_OF((uv_tcp_t *)s, sl_client_t, s.tcp);
    if (c->finished || nread == 0) return;
    if (nread == UV_ENOBUFS) return finish(c, "out of memory");
    if (nread == UV_EOF) {
        if (c->head_done && c->head.body_kind == SL_BODY_EOF) return finish(c, NULL);
        return finish(c, c->head_done ? "connection closed before the response body ended"
                                      : "connection closed before a response");
    }
    if (nread < 0) return finish_fmt(c, "read", (int)nread);
    if (c->rq.idle_timeout && c->rq.timeout_ms) uv_timer_start(&c->timer, on_timeout, c->rq.timeout_ms, 0);
    if (!c->head_done) {
        c->in_len += (size_t)nread; /* sl_h1_head enforces the head limit */
        return consume(c, NULL, 0);
    }
    consume(c, buf->base, (size_t)nread);
}

/* ---- connecting and writing ---- */

static void on_written(uv_write_t *wr, int status) {
    sl_client_t *c = wr->data;
    drop_out(c);
    if (c->finished) return;
    if (status < 0) finish_fmt(c, "write", status);
}

/* Connected (and, with TLS, the handshake done): the request goes out. */
static void send_request(sl_client_t *c) {
    uv_buf_t b = uv_buf_init(c->out, (unsigned)c->out_len);
    c->write.data = c;
    int rc = sl_stream_writev(&c->s, &c->write, &b, 1, on_written);
    if (rc == 1) drop_out(c); /* taken at once (TLS): no callback follows */
    if (rc >= 0) rc = sl_stream_read_start(&c->s, on_alloc, on_read);
    if (rc < 0) finish_fmt(c, "write", rc);
}

static void on_tls(sl_tls_t *t, int status) {
    sl_client_t *c = sl_tls_owner(t);
    if (c->finished) return;
    if (status < 0) {
        snprintf(c->errbuf, sizeof(c->errbuf), "tls %s", sl_tls_error(t));
        return finish(c, c->errbuf);
    }
    send_request(c);
}

static void connect_next(sl_client_t *c, const struct sockaddr *sa);

/* The handle of a failed connect is closed: the name's next address. */
static void on_tcp_closed_next(uv_handle_t *h) {
    sl_client_t *c = h->data;
    c->tcp_open = 0;
    if (c->finished) return maybe_free(c);
    connect_next(c, (const struct sockaddr *)&c->addrs[c->addr_i]);
}

static void on_connected(uv_connect_t *cr, int status) {
    sl_client_t *c = cr->data;
    if (c->finished) return;
    if (status < 0 && c->addr_i + 1 < c->naddrs) {
        c->addr_i++;
        uv_close((uv_handle_t *)&c->s.tcp, on_tcp_closed_next);
        return;
    }
    if (status < 0) return finish_fmt(c, "connect", status);
    if (c->rq.idle_timeout && c->rq.timeout_ms) uv_timer_start(&c->timer, on_timeout, c->rq.timeout_ms, 0);
    uv_tcp_nodelay(&c->s.tcp, 1);
    if (!c->rq.tls) return send_request(c);
    c->s.tls = sl_tls_connect(c->rq.tls, (uv_stream_t *)&c->s.tcp, c->rq.pump, c->rq.tls_name);
    if (!c->s.tls || sl_tls_handshake(c->s.tls, on_tls) != 0) {
        snprintf(c->errbuf, sizeof(c->errbuf), "tls %s", c->s.tls ? sl_tls_error(c->s.tls) : "out of memory");
        finish(c, c->errbuf);
    }
}

/* Starts a connect; a failure that comes at once is returned (uv error, *what the step),
 * never called back, so sl_client_start can return it without finish() running. */
static int start_connect(sl_client_t *c, const struct sockaddr *sa, const char **what) {
    *what = "socket";
    int rc = uv_tcp_init(c->rq.loop, &c->s.tcp);
    if (rc < 0) return rc;
    c->tcp_open = 1;
    c->s.tcp.data = c;
    c->connect.data = c;
    *what = "connect";
    return uv_tcp_connect(&c->connect, &c->s.tcp, sa, on_connected);
}

/* start_connect from a callback: a failure finishes the call. */
static void connect_next(sl_client_t *c, const struct sockaddr *sa) {
    const char *what;
    int rc = start_connect(c, sa, &what);
    if (rc < 0) finish_fmt(c, what, rc);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res) {
    sl_client_t *c = g->data;
    c->gai_pending = 0;
    if (c->finished) {
        uv_freeaddrinfo(res);
        maybe_free(c);
        return;
    }
    c->naddrs = 0;
    for (struct addrinfo *a = res; status >= 0 && a && c->naddrs < SL_CLIENT_ADDRS; a = a->ai_next) {
        if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) || a->ai_addrlen > sizeof c->addrs[0]) continue;
        struct sockaddr_storage *ss = &c->addrs[c->naddrs++];
        memcpy(ss, a->ai_addr, a->ai_addrlen);
        if (a->ai_family == AF_INET)
            ((struct sockaddr_in *)ss)->sin_port = htons(c->rq.port);
        else
            ((struct sockaddr_in6 *)ss)->sin6_port = htons(c->rq.port);
    }
    if (c->naddrs == 0)
        finish_fmt(c, "resolve", status < 0 ? status : UV_EAI_NONAME);
    else
        connect_next(c, (const struct sockaddr *)&c->addrs[0]);
    uv_freeaddrinfo(res);
}

/* Connects to the caller's address, an IP literal, or a name once resolved. A failure
 * that comes at once is returned as start_connect returns it. */
static int start(sl_client_t *c, const struct sockaddr *addr, const char **what) {
    struct sockaddr_storage ss;
    if (addr) return start_connect(c, addr, what);
    if (uv_ip4_addr(c->name, c->rq.port, (struct sockaddr_in *)&ss) == 0 ||
        uv_ip6_addr(c->name, c->rq.port, (struct sockaddr_in6 *)&ss) == 0)
        return start_connect(c, (struct sockaddr *)&ss, what);
    c->gai.data = c;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    *what = "resolve";
    int rc = uv_getaddrinfo(c->rq.loop, &c->gai, on_resolved, c->name, NULL, &hints);
    if (rc == 0) c->gai_pending = 1;
    return rc;
}

sl_client_t *sl_client_start(const sl_client_req_t *rq, const char **err) {
    static __thread char msg[160];
    sl_client_t *c = calloc(1, sizeof(*c));
    char *out = rq->req_borrowed ? (char *)rq->req : malloc(rq->req_len ? rq->req_len : 1);
    const char *why = !c || !out ? "out of memory" : NULL;
    if (!why && !rq->addr && (!rq->host || !*rq->host || strlen(rq->host) >= sizeof c->name || !rq->port))
        why = "bad host or port";
    if (!why && rq->tls_name && strlen(rq->tls_name) >= sizeof c->tls_name) why = "TLS name too long";
    if (why) {
        if (rq->tls_owned) sl_tls_client_free(rq->tls);
        free(c);
        if (!rq->req_borrowed) free(out);
        *err = why;
        return NULL;
    }
    if (!rq->req_borrowed) memcpy(out, rq->req, rq->req_len);
    c->rq = *rq;
    c->rq.req = NULL;
    c->rq.host = NULL;
    c->rq.addr = NULL; /* used within this call only */
    if (rq->host) snprintf(c->name, sizeof c->name, "%s", rq->host);
    if (rq->tls_name) c->rq.tls_name = strcpy(c->tls_name, rq->tls_name); /* length checked above */
    c->out = out;
    c->out_len = rq->req_len;
    c->held = 1;
    c->limits = (sl_h1_limits_t){.max_header_size = MAX_HEAD, .max_request_line = MAX_HEAD};
    sl_h1_init(&c->h1, HTTP_RESPONSE, &c->limits);
    c->h1.req_was_head = rq->head_req;
    c->head.spill = sl_h1_spill_array;
    c->head.spill_ud = c->spill;

    uv_timer_init(rq->loop, &c->timer);
    c->timer.data = c;
    c->timer_open = 1;
    if (rq->timeout_ms) {
        uv_update_time(rq->loop); /* the cached loop time may be a whole iteration old */
        uv_timer_start(&c->timer, on_timeout, rq->timeout_ms, 0);
    }
    const char *what;
    int rc = start(c, rq->addr, &what);
    if (rc < 0) { /* failed before anything could call back; c goes once its handles close */
        snprintf(msg, sizeof msg, "%s: %s", what, uv_strerror(rc));
        *err = msg;
        c->finished = 1;
        close_handles(c);
        c->held = 0;
        maybe_free(c);
        return NULL;
    }
    return c;
}

void sl_client_close(sl_client_t *c) {
    if (!c) return;
    c->held = 0;
    c->finished = 1;
    close_handles(c);
    maybe_free(c);
}

const sl_h1_head_t *sl_client_head(const sl_client_t *c) { return c->head_done ? &c->head : NULL; }

const char *sl_client_body(const sl_client_t *c, size_t *len) {
    *len = c->body_len;
    return c->body ? c->body : "";
}

void sl_client_set_timeout(sl_client_t *c, uint64_t ms) {
    if (c->finished) return;
    c->rq.timeout_ms = ms;
    if (ms)
        uv_timer_start(&c->timer, on_timeout, ms, 0);
    else
        uv_timer_stop(&c->timer);
}
