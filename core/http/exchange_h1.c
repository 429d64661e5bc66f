/* exchange_h1.c — the HTTP/1.1 exchange (exchange.h): one request and its response on an
 * upstream connection (upconn.c), taken from the worker's keep-alive pool (pool.c) or
 * connected for it, and given back to the pool when the response ended at a clean message
 * boundary. The response is parsed in the connection's read buffer (proto/http1.h): head
 * fields and body pieces are slices of it, valid until wait() lets the buffer start over.
 */
#include "base/log.h"
#include "http/h1_head.h"
#include "http/request.h"
#include "http/upconn.h"

static const sl_upconn_cb_t h1_upconn_cb;

static void x_release(sl_exchange_t *x) {
    x->u.up = NULL;
    x->state = SL_X_FREE;
}

/* The whole request at once (a hedge's: the rebuilt head and a buffered body), read timer
 * armed: 0, or <0 when the write failed at once. */
static int send_whole(sl_exchange_t *x) {
    sl_req_t *r = x->r;
    sl_upconn_t *u = x->u.up;
    uv_buf_t b[2] = {uv_buf_init(r->uphead.base, (unsigned)r->uphead.len),
                     uv_buf_init(r->heap, (unsigned)(r->body_buffered ? r->heap_len : 0))};
    sl__upconn_start_reading(u);
    int rc = sl__upconn_writev(u, b, b[1].len ? 2 : 1);
    if (rc < 0) return rc;
    if (rc == 1) x->sent = 1; /* all written at once: no callback follows */
    sl__upconn_arm(u, sl__req_upstream_conf(r)->read_timeout_ms);
    return 0;
}

/* ---- the connection's events ---- */

static void up_on_read(sl_upconn_t *u, ssize_t nread) {
    sl_exchange_t *x = u->user;
    sl_req_t *r = x->r;
    SL_BUG_ON(x->u.up != u || x->state == SL_X_FREE);
    if (nread == 0) {
        /* A read that found nothing: the buffer goes back, unless a write to the client
         * still points into it (a response already whole keeps reading meanwhile). */
        if (x->state == SL_X_HEAD && !r->clq.writing) sl__upconn_release_buffer(u);
        return;
    }
    if (nread < 0) {
        u->eof = 1;
        u->rd_err = nread != UV_EOF;
        sl__upconn_stop_reading(u);
    } else {
        sl__upconn_arm(u, sl__req_upstream_conf(r)->read_timeout_ms);
    }
    x->cb->on_readable(x);
}

static void up_on_timeout(sl_upconn_t *u) {
    sl_exchange_t *x = u->user;
    if (u->state == SL_UP_CONNECTING)
        x->cb->on_failed(x, 504, SL_FAIL_CONNECT, "upstream connect timed out");
    else
        x->cb->on_failed(x, 504, SL_FAIL_TIMEOUT, "upstream timed out");
}

static void up_on_connected(sl_upconn_t *u, int status, const char *why) {
    sl_exchange_t *x = u->user;
    SL_BUG_ON(x->state != SL_X_CONNECTING || x->u.up != u);
    if (status < 0) {
        x->cb->on_failed(x, status == UV_ETIMEDOUT ? 504 : 502, SL_FAIL_CONNECT, why ? why : uv_strerror(status));
        return;
    }
    /* The connect timer's work is done: from here the request arms the write timeout while
     * a write is blocked and the read timeout once the request is sent. */
    sl__upconn_ready(u);
    x->state = SL_X_OPEN;
    sl__upconn_start_reading(u);
    if (!x->whole) {
        x->cb->on_ready(x);
        return;
    }
    if (send_whole(x) < 0) x->cb->on_failed(x, 502, SL_FAIL_RESET, "upstream write failed");
}

static void up_on_written(sl_upconn_t *u, int status) {
    sl_exchange_t *x = u->user;
    SL_BUG_ON(x->state == SL_X_FREE || x->state == SL_X_CONNECTING);
    if (status < 0) {
        x->cb->on_failed(x, 502, SL_FAIL_RESET, "upstream write failed");
        return;
    }
    if (x->whole) {
        x->sent = 1;
        return;
    }
    x->cb->on_written(x);
}

static const sl_upconn_cb_t h1_upconn_cb = {up_on_read, up_on_timeout, up_on_connected, up_on_written};

/* ---- the operations ---- */

static int h1_start(sl_exchange_t *x) {
    SL_BUG_ON(x->state != SL_X_FREE);
    sl_req_t *r = x->r;
    sl_worker_t *w = r->w;
    const sl_upstream_conf_t *uc = sl__req_upstream_conf(r);
    uint32_t up = r->addr.set ? UINT32_MAX : (uint32_t)r->upstream;
    uint32_t t = (uint32_t)x->att.target;
    x->sent = 0;
    sl_upconn_t *u = r->addr.set ? NULL : sl__upconn_reuse(w, x, &h1_upconn_cb, up, t);
    if (u) {
        x->u.up = u;
        x->state = SL_X_OPEN;
        if (!x->whole) {
            sl__upconn_start_reading(u);
            return 0;
        }
        int rc = send_whole(x);
        if (rc < 0) {
            u->user = NULL;
            sl__upconn_close(u);
            x_release(x);
        }
        return rc;
    }
    if (!(u = sl__upconn_new(w, x, &h1_upconn_cb, up, t))) return UV_ENOMEM;
    x->u.up = u;
    x->state = SL_X_CONNECTING;
    const struct sockaddr *sa = r->addr.set ? (const struct sockaddr *)&r->addr.ss
                                            : (const struct sockaddr *)&uc->targets[t].addr.ss;
    int rc = sl__upconn_connect(u, sa, uc->connect_timeout_ms);
    if (rc < 0) {
        u->user = NULL;
        sl__upconn_close(u);
        x_release(x);
        return rc;
    }
    return 1;
}

static int h1_write(sl_exchange_t *x, sl_outq_t *q) {
    SL_BUG_ON((x->state != SL_X_OPEN && x->state != SL_X_HEAD) || x->whole || x->sent);
    return sl__upconn_write(x->u.up, q);
}

static void h1_end_request(sl_exchange_t *x) {
    SL_BUG_ON(!x->sent || x->state == SL_X_FREE); /* the message's own framing ended it */
}

static int h1_head(sl_exchange_t *x, int *kind, const char **why) {
    SL_BUG_ON(x->state != SL_X_OPEN);
    sl_req_t *r = x->r;
    sl_upconn_t *u = x->u.up;
    while (u->rpos < u->rlen) {
        size_t used = 0;
        int st = 0;
        u->h1.req_was_head = r->head.method_id == HTTP_HEAD;
        int rc = sl_h1_head(&u->h1, u->rbuf + u->rpos, u->rlen - u->rpos, &r->rhead, &used, &st);
        if (rc == SL_ERROR) {
            *kind = SL_FAIL_RESET;
            *why = "malformed upstream response";
            return SL_ERROR;
        }
        if (rc != SL_OK) break;
        u->rpos += (uint32_t)used;
        if (r->rhead.status < 200 && r->rhead.status != 101)
            continue; /* interim responses end here: the gateway sent its own 100 */
        x->state = SL_X_HEAD;
        return SL_OK;
    }
    if (u->eof) {
        *kind = SL_FAIL_RESET;
        *why = "upstream closed before answering";
        return SL_ERROR;
    }
    if (u->rlen == SL_BLOCK_SIZE) {
        *kind = SL_FAIL_OTHER;
        *why = "upstream response head too large";
        return SL_ERROR;
    }
    sl__upconn_start_reading(u);
    return SL_EAGAIN;
}

static int h1_peek(sl_exchange_t *x, const char **why) {
    sl_upconn_t *u = x->u.up;
    if (x->state == SL_X_FREE || x->state == SL_X_CONNECTING) return SL_EAGAIN;
    if (u->rpos < u->rlen) return SL_OK;
    if (u->eof) {
        *why = u->rd_err ? "reset before answering" : "closed before answering";
        return SL_ERROR;
    }
    return SL_EAGAIN;
}

static int h1_body(sl_exchange_t *x, uint32_t room, sl_body_cb cb, void *ud, const char **why) {
    SL_BUG_ON(x->state != SL_X_HEAD);
    sl_upconn_t *u = x->u.up;
    if (u->rpos == u->rlen) return SL_EAGAIN;
    size_t used;
    u->h1.on_data = cb;
    u->h1.ud = ud;
    u->h1.spans_left = room;
    int rc = sl_h1_body(&u->h1, u->rbuf + u->rpos, u->rlen - u->rpos, &used);
    u->rpos += (uint32_t)used;
    if (rc == SL_ERROR) {
        *why = "malformed upstream body";
        return SL_ERROR;
    }
    return rc == SL_DONE ? SL_DONE : SL_OK;
}

static int h1_wait(sl_exchange_t *x, const char **why) {
    SL_BUG_ON(x->state != SL_X_HEAD);
    sl_upconn_t *u = x->u.up;
    if (u->eof) {
        /* a close ends a close-delimited body; a reset cuts it short */
        if (x->r->resp.eof_body && !u->rd_err) return SL_DONE;
        *why = u->rd_err ? "upstream reset mid-body" : "upstream closed mid-body";
        return SL_ERROR;
    }
    if (u->rpos == u->rlen) u->rpos = u->rlen = 0;
    sl__upconn_start_reading(u);
    return SL_OK;
}

static void h1_pause(sl_exchange_t *x) { sl__upconn_stop_reading(x->u.up); }

static void h1_arm(sl_exchange_t *x, uint64_t ms) {
    SL_BUG_ON(x->state == SL_X_FREE);
    if (ms)
        sl__upconn_arm(x->u.up, ms);
    else
        sl_deadline_clear(&x->u.up->timer);
}

static bool h1_stale(const sl_exchange_t *x) {
    const sl_upconn_t *u = x->u.up;
    return x->state == SL_X_OPEN && u->nreqs > 0 && u->rlen == 0;
}

static void h1_finish(sl_exchange_t *x) {
    SL_BUG_ON(x->state != SL_X_HEAD);
    sl_req_t *r = x->r;
    sl_worker_t *w = r->w;
    sl_upconn_t *u = x->u.up;
    const sl_upstream_conf_t *uc = sl__req_upstream_conf(r);
    bool clean = x->sent && !u->eof && u->rpos == u->rlen && !r->resp.eof_body &&
                 sl__h1_upstream_keeps_alive(&r->rhead) && uc->keepalive_max_idle > 0 && !w->draining;
    u->user = NULL;
    x_release(x);
    if (!clean) {
        sl__upconn_close(u);
        return;
    }
    u->nreqs++;
    sl_deadline_clear(&u->timer);
    /* Everything read was used: an idle connection holds no block (a read takes one
     * again). Left to the next EAGAIN, a block stays with each pooled connection whose
     * answer came in one read: 4 KiB each after a spike. */
    sl__upconn_release_buffer(u);
    sl__pool_put(w, u);
    if (u->state == SL_UP_IDLE) sl__upconn_start_reading(u); /* to see the upstream close it */
}

static void h1_cancel(sl_exchange_t *x) {
    if (x->state == SL_X_FREE) return;
    sl_upconn_t *u = x->u.up;
    u->user = NULL;
    sl__upconn_close(u);
    x_release(x);
}

static struct sl_upconn_s *h1_take_conn(sl_exchange_t *x) {
    SL_BUG_ON(x->state != SL_X_HEAD);
    sl_upconn_t *u = x->u.up;
    u->user = NULL;
    x_release(x);
    return u;
}

const sl_exchange_ops_t sl__exchange_h1 = {
    .name = "http/1.1",
    .flags = 0,
    .start = h1_start,
    .write = h1_write,
    .end_request = h1_end_request,
    .head = h1_head,
    .peek = h1_peek,
    .body = h1_body,
    .wait = h1_wait,
    .pause = h1_pause,
    .arm = h1_arm,
    .stale = h1_stale,
    .finish = h1_finish,
    .cancel = h1_cancel,
    .cut = NULL,
    .take_conn = h1_take_conn,
};
