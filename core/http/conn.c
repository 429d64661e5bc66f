/* conn.c — client connections: accept, read, find request heads, keep-alive and timeouts.
 *
 * A connection is IDLE (no bytes of a request yet, idle timer armed, no buffer),
 * HEAD (some bytes of a head arrived: the total header deadline runs) or ACTIVE
 * (a request is being served: http/request.h). Requests on one connection are
 * served strictly one after another, so pipelined requests are answered in
 * order: bytes after the current message wait in the buffer, and reading stops
 * while a request has all it needs from the client.
 *
 * Where a request head is due, the HTTP/2 preface (a client's first bytes, after any PROXY
 * header, with prior knowledge or after ALPN chose h2) hands the connection to an h2
 * session (h2.h) on a listener with http2 on: the connection keeps its socket, reads,
 * timer and close, and every byte it reads goes to the session, through the takeover hook
 * the byte tunnel uses too.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "http/conn.h"

#include "base/log.h"
#include "http/h1_head.h"
#include "http/h2.h"
#include "http/request.h"
#include "proto/proxy_protocol.h"

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void conn_process(sl_conn_t *c);
static const sl_downstream_ops_t h1_ops;

static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    sl_conn_t *c = (sl_conn_t *)h;
    unsigned room;
    char *p = sl_block_room(&c->w->blocks, &c->rbuf, &c->rlen, &c->rpos, &room);
    (void)hint;
    *buf = uv_buf_init(p, room);
}

void sl__conn_start_reading(sl_conn_t *c) {
    if (c->reading || c->state == SL_CONN_CLOSED || c->peer_eof) return;
    /* No room: the request being served must first consume what is buffered. */
    if (c->rbuf && c->rlen == SL_BLOCK_SIZE) return;
    if (sl_stream_read_start(&c->s, conn_alloc, conn_on_read) == 0) c->reading = 1;
}

void sl__conn_stop_reading(sl_conn_t *c) {
    if (!c->reading) return;
    sl_stream_read_stop(&c->s);
    c->reading = 0;
}

static void conn_release_buffer(sl_conn_t *c) {
    if (c->rbuf && c->rpos == c->rlen) {
        sl_block_put(&c->w->blocks, c->rbuf);
        c->rbuf = NULL;
        c->rlen = c->rpos = 0;
    }
}

/* A request that has all its bytes, with none after them, waits on its upstream without the
 * connection's read block: its head moves to its own arena (sl__req_detach_head) and the
 * block goes back to the worker; a read takes one again. A block held for an 80-byte head
 * costs its first page, 4 KiB per request in flight (docs/BENCHMARKS.md, "Memory after a
 * spike"). A request with a body keeps the block to its end: body bytes queued toward the
 * upstream are slices of it. So does an upgrade, whose tunnel reads the block. */
static void conn_park_buffer(sl_conn_t *c) {
    sl_req_t *r = c->ds.req;
    if (!r || !c->rbuf || c->rpos != c->rlen || c->takeover || r->head.body_kind != SL_BODY_NONE ||
        (r->head.flags & SL_H1_CONN_UPGRADE) || r->mode == SL_MODE_TUNNEL)
        return;
    if (sl__req_detach_head(r, c->rbuf) != SL_OK) return;
    r->head_end -= r->head_off;
    r->head_off = 0;
    sl_block_put(&c->w->blocks, c->rbuf);
    c->rbuf = NULL;
    c->rlen = c->rpos = 0;
}

static void conn_on_close(uv_handle_t *h) {
    sl_conn_t *c = h->data;
    if (--c->nclose) return;
    sl_worker_t *w = c->w;
    if (c->h2) sl__h2_free(c->h2);
    sl_tls_peer_free(c->ds.client_cert); /* after the streams: their log phases read it */
    if (c->rbuf) sl_block_put(&w->blocks, c->rbuf);
    free(c);
    w->nconns--;
}

static void conn_close(sl_conn_t *c) {
    if (c->state == SL_CONN_CLOSED) return;
    c->state = SL_CONN_CLOSED;
    sl_worker_t *w = c->w;
    sl_list_remove(&c->link);
    SL_COUNTER_ADD(w->metrics.conns_active[c->ds.lidx], -1);
    sl_stream_end_tls(&c->s);
    c->nclose = 2;
    if (c->h2) {
        c->nclose++;
        sl__h2_close(c->h2, conn_on_close); /* abandons its streams' requests */
    }
    uv_close((uv_handle_t *)&c->s.tcp, conn_on_close);
    uv_close((uv_handle_t *)&c->timer.timer, conn_on_close);
}

void sl__conn_abort(sl_conn_t *c) {
    if (c->state == SL_CONN_CLOSED) return;
    sl_req_t *r = c->ds.req;
    c->ds.req = NULL;
    if (r) sl__req_abort(r);
    conn_close(c);
}

static void tls_count(sl_conn_t *c, int result) {
    SL_COUNTER_ADD(c->w->metrics.tls_hs[c->ds.lidx * SL_TLS_HS_RESULTS + (uint32_t)result], 1);
}

static void conn_on_timer(uv_timer_t *t) {
    sl_conn_t *c = t->data;
    if (c->h2) {
        sl__h2_on_timer(c->h2);
        return;
    }
    if (c->s.tls && !sl_tls_established(c->s.tls)) {
        /* A client that stalled mid-handshake: nothing to answer in plaintext. */
        tls_count(c, SL_TLS_HS_TIMEOUT);
        sl_log_debug("listener %s: TLS handshake from %s timed out", c->ds.lc->name, c->ds.peer);
        conn_close(c);
        return;
    }
    if (c->state == SL_CONN_HEAD && c->proxy) {
        /* Still reading a trusted peer's PROXY header (or the first bytes that tell
         * whether an untrusted one sends one): that peer speaks the PROXY protocol, not
         * HTTP yet (nor TLS), so it gets no 408: the connection is closed without an
         * answer, as for a malformed header, and no request is counted. */
        if (c->proxy == SL_CONN_PP_EXPECT)
            sl_log_warn("listener %s: closing the connection from %s: no complete PROXY protocol header within "
                        "header_timeout", c->ds.lc->name, c->ds.peer);
        conn_close(c);
        return;
    }
    if (c->state == SL_CONN_HEAD) {
        /* The whole head must arrive within header_timeout of its first byte, so a
         * trickle of one byte a second cannot hold the connection open. */
        static const char resp[] = "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                                   "Content-Length: 28\r\nConnection: close\r\n\r\n"
                                   "{\"error\":\"request timeout\"}\n";
        sl_stream_send(&c->s, resp, sizeof(resp) - 1);
        sl_metrics_request(&c->w->metrics, -1, 408, 0);
        conn_close(c);
        return;
    }
    /* Idle keep-alive expired, or a stalled client in the middle of a request. */
    sl__conn_abort(c);
}

int sl__conn_write(sl_conn_t *c, sl_outq_t *q, uv_write_cb cb) { return sl_stream_write(&c->s, q, &c->wreq, cb); }

static void conn_on_shutdown(uv_shutdown_t *sr, int status) {
    sl_conn_t *c = SL_CONTAINER_OF(sr, sl_conn_t, sreq);
    (void)status; /* a client that is gone reads nothing more either way */
    c->wshut = 2;
    if (c->takeover && c->ds.req) c->takeover->on_shutdown(c); /* no req: cancelled by a close */
}

void sl__conn_shutdown(sl_conn_t *c) {
    if (c->wshut || c->state == SL_CONN_CLOSED) return;
    /* libuv sends the FIN after the writes already queued; over TLS, close_notify first,
     * and the FIN once everything before it was written. */
    int rc = sl_stream_shutdown(&c->s, &c->sreq, conn_on_shutdown);
    c->wshut = rc == 0 ? 1 : 2;
}

static void conn_tls_established(sl_tls_t *t) {
    sl_conn_t *c = sl_tls_owner(t);
    tls_count(c, SL_TLS_HS_OK);
    if (c->ds.lc->tls->client_auth) c->ds.client_cert = sl_tls_peer_take(t);
    sl_deadline_set(&c->timer, c->ds.lc->idle_timeout_ms);
}

/* A TLS session that failed before or after its handshake (conn_on_read's error path). */
static void conn_tls_failed(sl_conn_t *c) {
    const char *why = sl_tls_error(c->s.tls);
    if (sl_tls_established(c->s.tls)) {
        sl_log_debug("listener %s: TLS error from %s: %s", c->ds.lc->name, c->ds.peer, why);
        return;
    }
    tls_count(c, SL_TLS_HS_FAILED);
    sl_log_debug("listener %s: TLS handshake from %s failed: %s", c->ds.lc->name, c->ds.peer, why);
    if (sl_tls_plain_http(c->s.tls)) {
        /* Plain HTTP on the TLS port: say so in plain HTTP, as the client will read it. */
        static const char resp[] = "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                                   "Content-Length: 52\r\nConnection: close\r\n\r\n"
                                   "{\"error\":\"plain HTTP request sent to a TLS listener\"}\n";
        uv_buf_t b = uv_buf_init((char *)resp, sizeof(resp) - 1);
        uv_try_write((uv_stream_t *)&c->s.tcp, &b, 1);
    }
}

static void conn_arm(sl_conn_t *c, uint64_t ms) { sl_deadline_set(&c->timer, ms); }

void sl__conn_arm(sl_conn_t *c, uint64_t ms) { conn_arm(c, ms); }

/* Starts the TLS session of a connection on a tls listener, with the bytes already read
 * after a PROXY header (if any) as the first ciphertext. */
static int conn_tls_start(sl_conn_t *c) {
    if (!c->ds.lc->tls->rt || !(c->s.tls = sl_tls_accept(c->ds.lc->tls->rt, (uv_stream_t *)&c->s.tcp, &c->w->tls_pump)))
        return SL_ERROR;
    sl_tls_on_established(c->s.tls, conn_tls_established);
    if (c->rbuf) {
        if (sl_tls_feed(c->s.tls, c->rbuf + c->rpos, c->rlen - c->rpos) != 0) return SL_ERROR;
        c->rpos = c->rlen;
        conn_release_buffer(c);
    }
    c->state = SL_CONN_IDLE;
    conn_arm(c, c->ds.lc->tls->handshake_timeout_ms);
    sl__conn_start_reading(c);
    return SL_OK;
}

void sl__conn_on_accept(uv_stream_t *server, int status) {
    sl_worker_t *w = server->loop->data;
    if (status < 0) return;
    sl_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return;
    c->w = w;
    c->ds.ops = &h1_ops;
    c->ds.lidx = (uint32_t)(uintptr_t)server->data;
    c->ds.lc = &w->cfg->listeners[c->ds.lidx];
    c->ds.secure = c->ds.lc->tls != NULL;
    c->ds.can_upgrade = 1;
    uv_tcp_init(&w->loop, &c->s.tcp);
    sl_deadline_init(&w->loop, &c->timer, c, conn_on_timer);
    c->s.tcp.data = c;
    c->state = SL_CONN_IDLE;
    sl_list_push_front(&w->conns, &c->link);
    w->nconns++;
    SL_COUNTER_ADD(w->metrics.conns_active[c->ds.lidx], 1);
    SL_COUNTER_ADD(w->metrics.accepted, 1);
    if (uv_accept(server, (uv_stream_t *)&c->s.tcp) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->s.tcp, 1);
    sl_downstream_set_port(&c->ds, w->listen_ports[c->ds.lidx]);
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    if (uv_tcp_getpeername(&c->s.tcp, (struct sockaddr *)&ss, &len) == 0) {
        c->ds.trusted = c->ds.lc->ntrusted_proxies &&
                        sl_pp_trusted(c->ds.lc->trusted_proxies, c->ds.lc->ntrusted_proxies, (struct sockaddr *)&ss);
        if (ss.ss_family == AF_INET)
            uv_ip4_name((struct sockaddr_in *)&ss, c->ds.peer, sizeof(c->ds.peer));
        else
            uv_ip6_name((struct sockaddr_in6 *)&ss, c->ds.peer, sizeof(c->ds.peer));
        if (c->ds.lc->accept_proxy)
            c->proxy = sl_pp_trusted(c->ds.lc->proxy_from, c->ds.lc->nproxy_from, (struct sockaddr *)&ss)
                           ? SL_CONN_PP_EXPECT
                           : SL_CONN_PP_REFUSE;
    } else if (c->ds.lc->accept_proxy) {
        c->proxy = SL_CONN_PP_REFUSE;
    }
    sl_h1_init(&c->h1, HTTP_REQUEST, &w->limits[c->ds.lidx]);
    /* A PROXY header comes before the TLS ClientHello: TLS starts once it was read. */
    if (c->ds.lc->tls && !c->proxy) {
        if (conn_tls_start(c) != SL_OK) conn_close(c);
        return;
    }
    conn_arm(c, c->ds.lc->idle_timeout_ms);
    sl__conn_start_reading(c);
}

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    sl_conn_t *c = (sl_conn_t *)s;
    if (c->takeover) {
        /* After a 101 the bytes are the tunnel's, whatever they look like. */
        if (nread > 0) c->rlen += (uint32_t)nread;
        c->takeover->on_read(c, nread);
        return;
    }
    if (nread == 0) {
        /* EAGAIN: nothing read; an idle connection gives its buffer back. */
        if (!c->ds.req) conn_release_buffer(c);
        return;
    }
    if (nread < 0) {
        sl__conn_stop_reading(c);
        if (c->s.tls && nread != UV_EOF) conn_tls_failed(c);
        sl_req_t *r = c->ds.req;
        if (nread == UV_EOF && r && r->body_done && r->resp.written) {
            /* Half-close once the answer began: finish it, then close. */
            c->peer_eof = 1;
            c->ds.closing = 1;
            return;
        }
        /* The client left (closed, or half-closed: nginx's EPOLLRDHUP check takes both the
         * same way) before any of its answer went out: the exchange is dropped at once, the
         * upstream's connection with it, and the request is logged and counted as 499
         * ("client closed request"), whatever status was already decided. */
        if (r && !r->resp.written) r->status = 499;
        sl__conn_abort(c);
        return;
    }
    c->rlen += (uint32_t)nread;
    /* Reads go on while a request is served (pipelined bytes wait in the buffer); only a
     * full buffer stops them, until the request consumes what it holds. */
    if (c->rlen == SL_BLOCK_SIZE) sl__conn_stop_reading(c);
    if (c->ds.req) {
        sl__req_on_client_data(c->ds.req);
        if (c->state != SL_CONN_CLOSED) conn_park_buffer(c);
        return;
    }
    conn_process(c);
}

/* The connection's first bytes, on a listener with accept_proxy_protocol: a trusted peer's
 * PROXY header is taken off the buffer and its source becomes the client address (for
 * X-Forwarded-For, ip-restriction, consistent-hash); from an untrusted peer a PROXY header
 * is refused. SL_OK (c->proxy done), SL_EAGAIN (more bytes needed) or SL_ERROR (close). */
static int conn_proxy_header(sl_conn_t *c) {
    const uint8_t *p = (const uint8_t *)c->rbuf + c->rpos;
    size_t n = c->rlen - c->rpos, used = 0;
    const char *why = NULL;
    if (c->proxy == SL_CONN_PP_EXPECT) {
        sl_pp_info_t pi;
        int rc = sl_pp_parse(p, n, &pi, &used, &why);
        if (rc == SL_EAGAIN) return SL_EAGAIN;
        if (rc == SL_OK) {
            c->rpos += (uint32_t)used;
            if (pi.has_addr && pi.src.sa.sa_family == AF_INET)
                uv_ip4_name(&pi.src.in, c->ds.peer, sizeof(c->ds.peer));
            else if (pi.has_addr)
                uv_ip6_name(&pi.src.in6, c->ds.peer, sizeof(c->ds.peer));
            /* the port the client connected to is the PROXY sender's (a load balancer's) */
            if (pi.has_addr)
                sl_downstream_set_port(&c->ds, ntohs(pi.dst.sa.sa_family == AF_INET ? pi.dst.in.sin_port
                                                                                   : pi.dst.in6.sin6_port));
            why = NULL;
        }
    } else {
        int k = sl_pp_detect(p, n);
        if (k == SL_EAGAIN) return SL_EAGAIN;
        if (k != SL_PP_NONE) why = "a PROXY protocol header from a peer not in accept_proxy_protocol.from";
    }
    if (why) {
        sl_log_warn("listener %s: closing the connection from %s: %s", c->ds.lc->name, c->ds.peer, why);
        return SL_ERROR;
    }
    c->proxy = SL_CONN_PP_DONE;
    return SL_OK;
}

/* ---- HTTP/2: the connection handed to an h2 session (h2.h) ---- */

static void h2_owner_arm(void *owner, uint64_t ms) { conn_arm(owner, ms); }

static void h2_owner_close(void *owner) { conn_close(owner); }

static void h2_owner_linger(void *owner) { sl__conn_shutdown(owner); }

static const sl_h2_owner_t h2_owner = {h2_owner_arm, h2_owner_close, h2_owner_linger};

/* Every byte read goes to the session, which keeps what it needs: the buffer is free again. */
static void h2_on_read(sl_conn_t *c, ssize_t nread) {
    if (nread < 0) {
        conn_close(c);
        return;
    }
    uint32_t from = c->rpos;
    c->rpos = c->rlen;
    if (c->rlen > from) sl__h2_feed(c->h2, c->rbuf + from, c->rlen - from);
    conn_release_buffer(c);
}

static void h2_on_shutdown(sl_conn_t *c) { (void)c; }

static void h2_drain(sl_conn_t *c) { sl__h2_drain(c->h2); }

static const sl_conn_takeover_t h2_takeover = {h2_on_read, h2_on_shutdown, h2_drain};

static void conn_h2_start(sl_conn_t *c) {
    sl_deadline_clear(&c->timer);
    if (!(c->h2 = sl__h2_new(c->w, &c->s, &c->ds, &h2_owner, c))) {
        conn_close(c);
        return;
    }
    c->state = SL_CONN_ACTIVE;
    c->takeover = &h2_takeover;
    h2_on_read(c, 0);
    if (c->state == SL_CONN_CLOSED) return;
    /* The worker drains (a reload, SIGTERM) and this connection's preface came after the
     * drain began: it is drained like those open then, GOAWAY once what the client sent
     * first is taken. Else it would serve on this generation for as long as it lives. */
    if (c->ds.closing || c->w->draining) h2_drain(c);
    sl__conn_start_reading(c);
}

/* Whether the buffered bytes of an idle connection are only the empty lines a server ignores
 * before a request line (RFC 9112 2.2; some clients send one after a POST body): no request
 * has begun, so the connection stays idle (idle_timeout, then a silent close) instead of
 * running the header deadline to a 408. The bytes stay: scan_head skips them, and past its
 * 64 bytes of them refuses the head. A closing connection (a reload, a drain) is left as it
 * was: it waits for the request it may be getting right now. */
static bool conn_empty_lines_only(const sl_conn_t *c) {
    uint32_t n = c->rlen - c->rpos;
    if (c->state != SL_CONN_IDLE || c->proxy || c->ds.closing || c->w->draining || n > 64) return false;
    const char *p = c->rbuf + c->rpos;
    for (uint32_t i = 0; i < n; i += 2)
        if (p[i] != '\r' || (i + 1 < n && p[i + 1] != '\n')) return false;
    return true;
}

/* Reads the next request head from the buffer, if a whole one is there. */
static void conn_process(sl_conn_t *c) {
    assert(!c->ds.req);
    if (c->state == SL_CONN_CLOSED) return;
    if (c->rpos == c->rlen || conn_empty_lines_only(c)) {
        conn_release_buffer(c);
        if (c->ds.closing || c->w->draining) {
            conn_close(c);
            return;
        }
        if (c->state != SL_CONN_IDLE) {
            c->state = SL_CONN_IDLE;
            conn_arm(c, c->ds.lc->idle_timeout_ms);
        }
        sl__conn_start_reading(c);
        return;
    }
    if (c->rpos > 0) {
        /* Move a pipelined remainder to the front: a head must be contiguous. */
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    if (c->state == SL_CONN_IDLE) {
        c->state = SL_CONN_HEAD;
        conn_arm(c, c->ds.lc->header_timeout_ms); /* a PROXY header counts as part of the head */
    }
    if (c->proxy) {
        int rc = conn_proxy_header(c);
        if (rc == SL_EAGAIN) {
            sl__conn_start_reading(c);
        } else if (rc == SL_ERROR) {
            conn_close(c);
        } else if (c->ds.lc->tls) {
            sl__conn_stop_reading(c); /* plaintext reads end here */
            if (conn_tls_start(c) != SL_OK) conn_close(c);
        } else {
            conn_process(c); /* what follows the header, if anything */
        }
        return;
    }
    if (c->ds.lc->http2) {
        /* HTTP/2 with prior knowledge, or after ALPN h2: the connection preface. */
        int pf = sl__h2_preface(c->rbuf, c->rlen);
        if (pf == SL_EAGAIN) {
            sl__conn_start_reading(c);
            return;
        }
        if (pf == SL_OK) {
            conn_h2_start(c);
            return;
        }
    }
    sl_req_t *r = sl__req_new(c->w, &c->ds);
    if (!r) {
        sl__conn_abort(c);
        return;
    }
    size_t used = 0;
    int status = 0;
    int rc = sl_h1_head(&c->h1, c->rbuf, c->rlen, &r->head, &used, &status);
    if (rc == SL_EAGAIN) {
        sl__req_free(r);
        sl__conn_start_reading(c);
        return;
    }
    sl_deadline_clear(&c->timer);
    c->state = SL_CONN_ACTIVE;
    c->ds.req = r;
    r->start_ns = sl_wake_ns(); /* the head arrived by the loop's wake */
    if (rc == SL_ERROR) {
        /* Nothing after a bad head can be trusted to be a request: answer and close. */
        sl__conn_stop_reading(c);
        c->rpos = c->rlen;
        static const char *const bodies[] = {"{\"error\":\"bad request\"}\n"};
        sl__req_respond(r, status, SL_LIT("application/json"),
                        (sl_str_t){bodies[0], strlen(bodies[0])}, true);
        return;
    }
    r->head_off = 0;
    r->head_end = (uint32_t)used;
    c->rpos = (uint32_t)used;
    r->keep_alive = sl__h1_client_keeps_alive(r);
    sl__req_begin(r);
    if (c->state != SL_CONN_CLOSED) conn_park_buffer(c);
}

/* How long an idle keep-alive connection of a replaced generation may wait for its next
 * request (answered with Connection: close) before it is closed. */
#define SL_RETIRE_IDLE_MS 2000

/* A connection of a retiring worker (a reload replaced it) that may still get a request
 * the client is sending right now: it waits a moment for it (answered with Connection:
 * close) instead of closing under it, which the client would see as a reset. */
static void conn_arm_retiring(sl_conn_t *c) {
    conn_arm(c, SL_MIN(c->ds.lc->idle_timeout_ms, (uint64_t)SL_RETIRE_IDLE_MS));
}

static void conn_request_done(sl_conn_t *c) {
    sl_req_t *r = c->ds.req;
    /* r->keep_alive is what the response head told the client (a head written while the
     * connection was closing said Connection: close and cleared it). */
    bool promised = r && r->keep_alive;
    bool keep = promised && !c->ds.closing && !c->w->draining;
    c->ds.req = NULL;
    if (r) sl__req_free(r);
    if (c->state == SL_CONN_CLOSED) return;
    if (!keep && promised && c->w->retiring && !c->peer_eof) {
        /* A reload began while the response was on its way and that response promised
         * keep-alive: the client may be sending its next request right now. As for idle
         * connections at the reload (sl__conn_close_idle), that request is served, with
         * Connection: close, if it comes within a moment. */
        c->state = SL_CONN_IDLE;
        conn_arm_retiring(c);
        if (c->rpos < c->rlen)
            conn_process(c);
        else {
            conn_release_buffer(c);
            sl__conn_start_reading(c);
        }
        return;
    }
    if (!keep) {
        conn_close(c);
        return;
    }
    c->state = SL_CONN_IDLE;
    conn_arm(c, c->ds.lc->idle_timeout_ms);
    conn_process(c);
}

void sl__conn_close_idle(sl_worker_t *w) {
    sl_list_t *n, *next;
    sl_list_foreach_safe(n, next, &w->conns) {
        sl_conn_t *c = SL_LIST_ENTRY(n, sl_conn_t, link);
        c->ds.closing = 1;
        if (c->takeover) {
            c->takeover->drain(c); /* a tunnel: closed at shutdown_timeout, like a TCP session */
        } else if (!c->ds.req) {
            if (w->retiring && c->state == SL_CONN_IDLE) {
                /* A reload: closing an idle keep-alive connection races with a request the
                 * client may be sending on it right now (the client sees a reset). Give it a
                 * moment: its next request is served, with Connection: close. */
                conn_arm_retiring(c);
            } else if (c->state == SL_CONN_HEAD) {
                /* A reload or SIGTERM while a request head is arriving: that request was
                 * sent, so it is served (with Connection: close) once whole, within
                 * header_timeout of its first byte as always (its deadline is armed). */
            } else {
                conn_close(c);
            }
        }
    }
}

/* ---- the downstream a request talks to (downstream.h) ---- */

static sl_conn_t *conn_of(sl_downstream_t *d) { return sl__conn_of(d); }

static bool h1_body_buffered(sl_downstream_t *d) {
    sl_conn_t *c = conn_of(d);
    return c->rpos < c->rlen;
}

static int h1_read_body(sl_downstream_t *d, uint32_t room, sl_body_cb cb, void *ud) {
    sl_conn_t *c = conn_of(d);
    size_t used = 0;
    c->h1.on_data = cb;
    c->h1.ud = ud;
    c->h1.spans_left = room;
    int rc = sl_h1_body(&c->h1, c->rbuf + c->rpos, c->rlen - c->rpos, &used);
    c->rpos += (uint32_t)used;
    return rc;
}

static void h1_wait_body(sl_downstream_t *d) {
    sl_conn_t *c = conn_of(d);
    /* Everything after the head was consumed: the next body bytes go right after it. */
    if (c->rpos == c->rlen) c->rpos = c->rlen = d->req->head_end;
    conn_arm(c, d->lc->idle_timeout_ms);
    sl__conn_start_reading(c);
}

static void h1_pause(sl_downstream_t *d) { sl__conn_stop_reading(conn_of(d)); }

static bool h1_send_continue(sl_downstream_t *d) {
    sl_conn_t *c = conn_of(d);
    /* A fresh connection's socket buffer always takes 25 bytes: no write request needed. */
    if (sl_stream_send(&c->s, "HTTP/1.1 100 Continue\r\n\r\n", 25)) return true;
    sl__conn_abort(c);
    return false;
}

static int h1_write_head(sl_downstream_t *d, sl_req_t *r, sl_str_t ctype, int64_t content_length) {
    return content_length < 0 ? sl__h1_client_head(r) : sl__h1_answer_head(r, ctype, (uint64_t)content_length);
}

static void h1_on_written(uv_write_t *wr, int status) {
    sl_conn_t *c = (sl_conn_t *)wr->handle;
    sl_req_t *r = c->ds.req;
    if (!r) return; /* cancelled by a close */
    sl_deadline_clear(&c->timer);
    sl__req_on_written(r, status);
}

static int h1_write(sl_downstream_t *d, sl_outq_t *q) { return sl__conn_write(conn_of(d), q, h1_on_written); }

static void h1_arm(sl_downstream_t *d, uint64_t ms) {
    sl_conn_t *c = conn_of(d);
    if (ms)
        conn_arm(c, ms);
    else
        sl_deadline_clear(&c->timer);
}

static void h1_finish(sl_downstream_t *d) { conn_request_done(conn_of(d)); }

static void h1_abort(sl_downstream_t *d) {
    sl_conn_t *c = conn_of(d);
    const sl_req_t *r = d->req;
    /* A response cut short whose end the client learns from the close (an HTTP/1.0 client,
     * no length): a reset, never a FIN or a close_notify, which would pass the truncated
     * body off as the whole one (a tcp listener's sessions do the same, tcp_proxy.c). */
    if (r && r->resp.eof_client && r->resp.written && !sl__req_resp_done(r)) {
        uv_os_fd_t fd;
        struct linger lg = {1, 0};
        if (uv_fileno((uv_handle_t *)&c->s.tcp, &fd) == 0) setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        if (c->s.tls) sl_tls_skip_close_notify(c->s.tls);
    }
    sl__conn_abort(c);
}

static const sl_downstream_ops_t h1_ops = {
    .body_buffered = h1_body_buffered,
    .read_body = h1_read_body,
    .wait_body = h1_wait_body,
    .pause = h1_pause,
    .send_continue = h1_send_continue,
    .write_head = h1_write_head,
    .write = h1_write,
    .arm = h1_arm,
    .finish = h1_finish,
    .abort = h1_abort,
};
