/* conn.c — client connections: accept, read, find request heads, keep-alive and timeouts.
 *
 * A connection is IDLE (no bytes of a request yet, idle timer armed, no buffer),
 * HEAD (some bytes of a head arrived: the total header deadline runs) or ACTIVE
 * (a request is being served by proxy_http.c). Requests on one connection are
 * served strictly one after another, so pipelined requests are answered in
 * order: bytes after the current message wait in the buffer, and reading stops
 * while a request has all it needs from the client.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <stdlib.h>

#include "http/http_conn.h"
#include "base/log.h"
#include "proto/proxy_protocol.h"
#include "server/server.h"
#include "net/tls.h"

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void conn_process(sl_conn_t *c);

static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    sl_conn_t *c = (sl_conn_t *)h;
    if (!c->rbuf) {
        c->rbuf = sl_block_get(&c->w->blocks);
        c->rlen = c->rpos = 0;
        if (!c->rbuf) {
            *buf = uv_buf_init(NULL, 0);
            return;
        }
    }
    *buf = uv_buf_init(c->rbuf + c->rlen, SL_BLOCK_SIZE - c->rlen);
}

void sl__conn_start_reading(sl_conn_t *c) {
    if (c->reading || c->state == SL_CONN_CLOSED || c->peer_eof) return;
    /* No room: the request being served must first consume what is buffered. */
    if (c->rbuf && c->rlen == SL_BLOCK_SIZE) return;
    int rc = c->tls ? sl_tls_read_start(c->tls, conn_alloc, conn_on_read)
                    : uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_on_read);
    if (rc == 0) c->reading = 1;
}

void sl__conn_stop_reading(sl_conn_t *c) {
    if (!c->reading) return;
    if (c->tls)
        sl_tls_read_stop(c->tls);
    else
        uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
}

static void conn_release_buffer(sl_conn_t *c) {
    if (c->rbuf && c->rpos == c->rlen) {
        sl_block_put(&c->w->blocks, c->rbuf);
        c->rbuf = NULL;
        c->rlen = c->rpos = 0;
    }
}

static void conn_on_close(uv_handle_t *h) {
    sl_conn_t *c = h->data;
    if (--c->nclose) return;
    sl_worker_t *w = c->w;
    if (c->rbuf) sl_block_put(&w->blocks, c->rbuf);
    free(c);
    w->nconns--;
    sl__worker_maybe_stop(w);
}

static void conn_close(sl_conn_t *c) {
    if (c->state == SL_CONN_CLOSED) return;
    c->state = SL_CONN_CLOSED;
    sl_worker_t *w = c->w;
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    SL_COUNTER_ADD(w->metrics.conns_active[c->lidx], -1);
    if (c->tls) {
        sl_tls_close(c->tls);
        c->tls = NULL;
    }
    c->nclose = 2;
    uv_close((uv_handle_t *)&c->tcp, conn_on_close);
    uv_close((uv_handle_t *)&c->timer.timer, conn_on_close);
}

void sl__conn_abort(sl_conn_t *c) {
    if (c->state == SL_CONN_CLOSED) return;
    sl_req_t *r = c->req;
    c->req = NULL;
    if (r) sl__req_abort(r);
    conn_close(c);
}

static void tls_count(sl_conn_t *c, int result) {
    SL_COUNTER_ADD(c->w->metrics.tls_hs[c->lidx * SL_TLS_HS_RESULTS + (uint32_t)result], 1);
}

static void conn_on_timer(uv_timer_t *t) {
    sl_conn_t *c = t->data;
    if (c->tls && !sl_tls_established(c->tls)) {
        /* A client that stalled mid-handshake: nothing to answer in plaintext. */
        tls_count(c, SL_TLS_HS_TIMEOUT);
        sl_log_debug("listener %s: TLS handshake from %s timed out", c->lc->name, c->peer);
        conn_close(c);
        return;
    }
    if (c->state == SL_CONN_HEAD) {
        /* The whole head must arrive within header_timeout of its first byte, so a
         * trickle of one byte a second cannot hold the connection open. */
        static const char resp[] = "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                                   "Content-Length: 28\r\nConnection: close\r\n\r\n"
                                   "{\"error\":\"request timeout\"}\n";
        sl__conn_send(c, resp, sizeof(resp) - 1);
        sl_metrics_request(&c->w->metrics, -1, 408, 0);
        conn_close(c);
        return;
    }
    /* Idle keep-alive expired, or a stalled client in the middle of a request. */
    sl__conn_abort(c);
}

int sl__conn_write(sl_conn_t *c, sl_outq_t *q, uv_write_cb cb) {
    return sl__stream_write(q, (uv_stream_t *)&c->tcp, c->tls, &c->wreq, cb);
}

static void conn_on_shutdown(uv_shutdown_t *sr, int status) {
    sl_conn_t *c = SL_CONTAINER_OF(sr, sl_conn_t, sreq);
    (void)status; /* a client that is gone reads nothing more either way */
    c->wshut = 2;
    if (c->tunnel && c->req) sl__tunnel_on_client_shutdown(c->req); /* no req: cancelled by a close */
}

void sl__conn_shutdown(sl_conn_t *c) {
    if (c->wshut || c->state == SL_CONN_CLOSED) return;
    /* libuv sends the FIN after the writes already queued; over TLS, close_notify first,
     * and the FIN once everything before it was written. */
    int rc = c->tls ? sl_tls_shutdown_write(c->tls, &c->sreq, conn_on_shutdown)
                    : uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, conn_on_shutdown);
    c->wshut = rc == 0 ? 1 : 2;
}

bool sl__conn_send(sl_conn_t *c, const char *p, size_t n) {
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    if (c->tls) return sl_tls_write(c->tls, &c->wreq, &b, 1, NULL) >= 0;
    return uv_try_write((uv_stream_t *)&c->tcp, &b, 1) == (int)n;
}

static void conn_tls_established(sl_tls_t *t) {
    sl_conn_t *c = sl_tls_owner(t);
    tls_count(c, SL_TLS_HS_OK);
    sl_deadline_set(&c->timer, c->lc->idle_timeout_ms);
}

/* A TLS session that failed before or after its handshake (conn_on_read's error path). */
static void conn_tls_failed(sl_conn_t *c) {
    const char *why = sl_tls_error(c->tls);
    if (sl_tls_established(c->tls)) {
        sl_log_debug("listener %s: TLS error from %s: %s", c->lc->name, c->peer, why);
        return;
    }
    tls_count(c, SL_TLS_HS_FAILED);
    sl_log_debug("listener %s: TLS handshake from %s failed: %s", c->lc->name, c->peer, why);
    if (strstr(why, "http request")) {
        /* Plain HTTP on the TLS port: say so in plain HTTP, as the client will read it. */
        static const char resp[] = "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                                   "Content-Length: 52\r\nConnection: close\r\n\r\n"
                                   "{\"error\":\"plain HTTP request sent to a TLS listener\"}\n";
        uv_buf_t b = uv_buf_init((char *)resp, sizeof(resp) - 1);
        uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    }
}

static void conn_arm(sl_conn_t *c, uint64_t ms) { sl_deadline_set(&c->timer, ms); }

void sl__conn_arm(sl_conn_t *c, uint64_t ms) { conn_arm(c, ms); }

/* Starts the TLS session of a connection on a tls listener, with the bytes already read
 * after a PROXY header (if any) as the first ciphertext. */
static int conn_tls_start(sl_conn_t *c) {
    if (!c->lc->tls->rt || !(c->tls = sl_tls_accept(c->lc->tls->rt, (uv_stream_t *)&c->tcp, &c->w->tls_pump)))
        return SL_ERROR;
    sl_tls_on_established(c->tls, conn_tls_established);
    if (c->rbuf) {
        if (sl_tls_feed(c->tls, c->rbuf + c->rpos, c->rlen - c->rpos) != 0) return SL_ERROR;
        c->rpos = c->rlen;
        conn_release_buffer(c);
    }
    c->state = SL_CONN_IDLE;
    conn_arm(c, c->lc->tls->handshake_timeout_ms);
    sl__conn_start_reading(c);
    return SL_OK;
}

void sl__conn_on_accept(uv_stream_t *server, int status) {
    sl_worker_t *w = server->loop->data;
    if (status < 0) return;
    sl_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return;
    c->w = w;
    c->lidx = (uint32_t)(uintptr_t)server->data;
    c->lc = &w->cfg->listeners[c->lidx];
    uv_tcp_init(&w->loop, &c->tcp);
    sl_deadline_init(&w->loop, &c->timer, c, conn_on_timer);
    c->tcp.data = c;
    c->state = SL_CONN_IDLE;
    c->next = w->conns;
    if (w->conns) w->conns->prev = c;
    w->conns = c;
    w->nconns++;
    SL_COUNTER_ADD(w->metrics.conns_active[c->lidx], 1);
    SL_COUNTER_ADD(w->metrics.accepted, 1);
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET)
            uv_ip4_name((struct sockaddr_in *)&ss, c->peer, sizeof(c->peer));
        else
            uv_ip6_name((struct sockaddr_in6 *)&ss, c->peer, sizeof(c->peer));
        if (c->lc->accept_proxy)
            c->proxy = sl_pp_trusted(c->lc->proxy_from, c->lc->nproxy_from, (struct sockaddr *)&ss)
                           ? SL_CONN_PP_EXPECT
                           : SL_CONN_PP_REFUSE;
    } else if (c->lc->accept_proxy) {
        c->proxy = SL_CONN_PP_REFUSE;
    }
    sl_h1_init(&c->h1, HTTP_REQUEST, &w->limits[c->lidx]);
    /* A PROXY header comes before the TLS ClientHello: TLS starts once it was read. */
    if (c->lc->tls && !c->proxy) {
        if (conn_tls_start(c) != SL_OK) conn_close(c);
        return;
    }
    conn_arm(c, c->lc->idle_timeout_ms);
    sl__conn_start_reading(c);
}

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    sl_conn_t *c = (sl_conn_t *)s;
    if (c->tunnel) {
        /* After a 101 the bytes are the tunnel's, whatever they look like. */
        if (nread > 0) c->rlen += (uint32_t)nread;
        sl__tunnel_on_client_read(c->req, nread);
        return;
    }
    if (nread == 0) {
        /* EAGAIN: nothing read; an idle connection gives its buffer back. */
        if (!c->req) conn_release_buffer(c);
        return;
    }
    if (nread < 0) {
        sl__conn_stop_reading(c);
        if (c->tls && nread != UV_EOF) conn_tls_failed(c);
        if (nread == UV_EOF && c->req && c->req->body_done) {
            /* Half-close after a complete request: answer it, then close. */
            c->peer_eof = 1;
            c->closing = 1;
            return;
        }
        sl__conn_abort(c);
        return;
    }
    c->rlen += (uint32_t)nread;
    /* Reads go on while a request is served (pipelined bytes wait in the buffer); only a
     * full buffer stops them, until the request consumes what it holds. */
    if (c->rlen == SL_BLOCK_SIZE) sl__conn_stop_reading(c);
    if (c->req) {
        sl__req_on_client_data(c->req);
        return;
    }
    conn_process(c);
}

static sl_req_t *req_new(sl_conn_t *c) {
    sl_worker_t *w = c->w;
    sl_req_t *r = w->free_reqs;
    if (r) {
        w->free_reqs = r->free_next;
        w->nfree_reqs--;
    } else {
        r = malloc(sizeof(*r));
        if (!r) return NULL;
    }
    /* Only the scalar part is cleared: the two heads are filled by the parser. */
    memset(r, 0, offsetof(sl_req_t, head));
    memset(&r->head_off, 0, sizeof(*r) - offsetof(sl_req_t, head_off));
    r->c = c;
    r->w = w;
    r->route = -1;
    r->upstream = -1;
    r->target = -1;
    r->next_target = -1;
    sl_arena_init(&r->arena, &w->blocks);
    return r;
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
                uv_ip4_name(&pi.src.in, c->peer, sizeof(c->peer));
            else if (pi.has_addr)
                uv_ip6_name(&pi.src.in6, c->peer, sizeof(c->peer));
            why = NULL;
        }
    } else {
        int k = sl_pp_detect(p, n);
        if (k == SL_EAGAIN) return SL_EAGAIN;
        if (k != SL_PP_NONE) why = "a PROXY protocol header from a peer not in accept_proxy_protocol.from";
    }
    if (why) {
        sl_log_warn("listener %s: closing the connection from %s: %s", c->lc->name, c->peer, why);
        return SL_ERROR;
    }
    c->proxy = SL_CONN_PP_DONE;
    return SL_OK;
}

/* Reads the next request head from the buffer, if a whole one is there. */
static void conn_process(sl_conn_t *c) {
    assert(!c->req);
    if (c->state == SL_CONN_CLOSED) return;
    if (c->rpos == c->rlen) {
        conn_release_buffer(c);
        if (c->closing || c->w->draining) {
            conn_close(c);
            return;
        }
        if (c->state != SL_CONN_IDLE) {
            c->state = SL_CONN_IDLE;
            conn_arm(c, c->lc->idle_timeout_ms);
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
        conn_arm(c, c->lc->header_timeout_ms); /* a PROXY header counts as part of the head */
    }
    if (c->proxy) {
        int rc = conn_proxy_header(c);
        if (rc == SL_EAGAIN) {
            sl__conn_start_reading(c);
        } else if (rc == SL_ERROR) {
            conn_close(c);
        } else if (c->lc->tls) {
            sl__conn_stop_reading(c); /* plaintext reads end here */
            if (conn_tls_start(c) != SL_OK) conn_close(c);
        } else {
            conn_process(c); /* what follows the header, if anything */
        }
        return;
    }
    sl_req_t *r = req_new(c);
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
    c->req = r;
    r->start_ns = sl_now_ns();
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
    sl__req_begin(r);
}

void sl__conn_request_done(sl_conn_t *c) {
    sl_req_t *r = c->req;
    bool keep = r && r->keep_alive && !c->closing && !c->w->draining;
    c->req = NULL;
    if (r) sl__req_free(r);
    if (!keep || c->state == SL_CONN_CLOSED) {
        conn_close(c);
        return;
    }
    c->state = SL_CONN_IDLE;
    conn_arm(c, c->lc->idle_timeout_ms);
    conn_process(c);
}

/* How long an idle keep-alive connection of a replaced generation may wait for its next
 * request (answered with Connection: close) before it is closed. */
#define SL_RETIRE_IDLE_MS 2000

void sl__worker_close_idle_conns(sl_worker_t *w) {
    sl_conn_t *c = w->conns;
    while (c) {
        sl_conn_t *next = c->next;
        c->closing = 1;
        if (c->tunnel) {
            sl__tunnel_drain(c->req); /* closed at shutdown_timeout, like a TCP session */
        } else if (!c->req) {
            if (w->retiring && c->state == SL_CONN_IDLE) {
                /* A reload: closing an idle keep-alive connection races with a request the
                 * client may be sending on it right now (the client sees a reset). Give it a
                 * moment: its next request is served, with Connection: close. */
                conn_arm(c, SL_MIN(c->lc->idle_timeout_ms, (uint64_t)SL_RETIRE_IDLE_MS));
            } else {
                conn_close(c);
            }
        }
        c = next;
    }
}
