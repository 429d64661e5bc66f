/* tunnel.c — a client connection and an upstream connection joined byte for byte after a 101.
 *
 * Each direction moves what its source's read buffer holds (the connection's own 64 KiB
 * block: c->rbuf, u->rbuf) to the other side with one write at a time, through the
 * request's queues (upq toward the upstream, clq toward the client). While a write is in
 * flight its source stops reading (backpressure); when it completes the buffer is reused
 * from its start, and a buffer left empty goes back to the worker's pool, so an idle
 * tunnel holds none. Nothing is allocated per message.
 *
 * A direction ends when its source sends EOF and its last bytes are written: the other
 * side gets a shutdown (a FIN) while the other direction keeps flowing. The tunnel ends
 * when both shutdowns completed, on an error on either side, after the listener's
 * idle_timeout without a byte either way, or at shutdown_timeout once the worker drains.
 * Ending is sl__conn_abort(): the client connection closes, and with it the request that
 * owns the tunnel and its upstream connection (never pooled).
 *
 * Both sides are net/ streams (TLS or not, the tunnel does not know): the client's through
 * conn.c (sl__conn_write, sl__conn_start/stop_reading, sl__conn_shutdown, read into the
 * connection's buffer), the upstream's through upconn.c: the HTTP/1.1 exchange hands its
 * connection over at the switch (take_conn, r->tun.u) and the tunnel takes its callbacks.
 */
#include "http/tunnel.h"

#include "http/conn.h"
#include "http/request.h"
#include "http/upconn.h"

static sl_conn_t *conn_of(const sl_req_t *r) { return sl__conn_of(r->ds); }

/* Time left before the tunnel is closed for idleness (or for a worker's drain). */
static uint64_t idle_ms(const sl_req_t *r) {
    uint64_t ms = r->ds->lc->idle_timeout_ms;
    if (r->tun.drain_at) {
        uint64_t now = uv_now(&r->w->loop);
        ms = SL_MIN(ms, r->tun.drain_at > now ? r->tun.drain_at - now : 1);
    }
    return ms;
}

static void arm(sl_req_t *r) { sl__conn_arm(conn_of(r), idle_ms(r)); }

static void end(sl_req_t *r) { sl__conn_abort(conn_of(r)); }

static void on_up_written(sl_upconn_t *u, int status);

static void on_up_shutdown(uv_shutdown_t *sr, int status) {
    sl_upconn_t *u = SL_CONTAINER_OF(sr, sl_upconn_t, sreq);
    sl_req_t *r = u->user;
    (void)status; /* a peer that is gone has nothing more to read: done all the same */
    if (!r) return;
    r->tun.up_shut = 2;
    if (r->tun.cl_shut == 2) end(r);
}

static void on_client_shutdown(sl_conn_t *c) {
    sl_req_t *r = c->ds.req;
    r->tun.cl_shut = 2;
    if (r->tun.up_shut == 2) end(r);
}

/* client -> upstream. False when the tunnel ended (r is gone). */
static bool pump_up(sl_req_t *r) {
    sl_conn_t *c = conn_of(r);
    sl_upconn_t *u = r->tun.u;
    if (r->tun.up_shut) return true;
    if (r->upq.writing) {
        sl__conn_stop_reading(c);
        return true;
    }
    if (c->rpos < c->rlen) {
        sl_outq_reset(&r->upq);
        sl_outq_add(&r->upq, c->rbuf + c->rpos, c->rlen - c->rpos);
        r->tun.cu_end = c->rlen;
        int rc = sl__upconn_write(u, &r->upq);
        if (rc < 0) {
            end(r);
            return false;
        }
        if (rc == 0) { /* the upstream is slow: the client waits */
            sl__conn_stop_reading(c);
            return true;
        }
    }
    c->rpos = c->rlen = 0;
    if (r->tun.cl_eof) {
        r->tun.up_shut = 1;
        int src = sl_stream_shutdown(&u->s, &u->sreq, on_up_shutdown);
        if (src != 0) {
            r->tun.up_shut = 2;
            if (r->tun.cl_shut == 2) {
                end(r);
                return false;
            }
        }
        return true;
    }
    sl__conn_start_reading(c);
    return true;
}

/* upstream -> client. False when the tunnel ended (r is gone). */
static bool pump_down(sl_req_t *r);

static void on_cl_written(uv_write_t *wr, int status) {
    sl_conn_t *c = SL_CONTAINER_OF(wr, sl_conn_t, wreq);
    sl_req_t *r = c->ds.req;
    if (!r) return; /* cancelled by a close */
    r->clq.writing = 0;
    if (status < 0) {
        end(r);
        return;
    }
    sl_outq_reset(&r->clq);
    r->tun.u->rpos = r->tun.uc_end;
    arm(r);
    pump_down(r);
}

static bool pump_down(sl_req_t *r) {
    sl_conn_t *c = conn_of(r);
    sl_upconn_t *u = r->tun.u;
    if (r->tun.cl_shut) return true;
    if (r->clq.writing) {
        sl__upconn_stop_reading(u);
        return true;
    }
    /* The first call sends the 101 head queued in clq along with what followed it. */
    if (u->rpos < u->rlen) sl_outq_add(&r->clq, u->rbuf + u->rpos, u->rlen - u->rpos);
    r->tun.uc_end = u->rlen;
    if (r->clq.niov) {
        int rc = sl__conn_write(c, &r->clq, on_cl_written);
        if (rc < 0) {
            end(r);
            return false;
        }
        if (rc == 0) { /* the client is slow: the upstream waits */
            sl__upconn_stop_reading(u);
            return true;
        }
    }
    u->rpos = u->rlen = 0;
    if (r->tun.up_eof) {
        r->tun.cl_shut = 1;
        sl__conn_shutdown(c); /* its completion calls on_client_shutdown */
        if (c->wshut == 2) { /* could not even start: done all the same */
            r->tun.cl_shut = 2;
            if (r->tun.up_shut == 2) {
                end(r);
                return false;
            }
        }
        return true;
    }
    sl__upconn_start_reading(u);
    return true;
}

static void on_up_read(sl_upconn_t *u, ssize_t nread);
static void on_up_timeout(sl_upconn_t *u) { end(u->user); }
static void on_up_connected(sl_upconn_t *u, int status, const char *why) {}

static const sl_upconn_cb_t tunnel_up_cb = {on_up_read, on_up_timeout, on_up_connected, on_up_written};
static void on_client_read(sl_conn_t *c, ssize_t nread);
static void on_client_shutdown(sl_conn_t *c);
static void drain(sl_conn_t *c);
static const sl_conn_takeover_t tunnel_takeover = {on_client_read, on_client_shutdown, drain};

void sl__tunnel_start(sl_req_t *r) {
    sl_conn_t *c = conn_of(r);
    sl_upconn_t *u = r->tun.u;
    SL_BUG_ON(!r->ds->can_upgrade || !u || u->state != SL_UP_ACTIVE);
    c->takeover = &tunnel_takeover;
    u->user = r;
    u->cb = &tunnel_up_cb;
    r->tun.cu_end = c->rpos; /* the upgrade's head may still be in flight toward the upstream */
    r->tun.cl_eof = c->peer_eof;
    r->tun.up_eof = u->eof;
    if (r->w->draining) r->tun.drain_at = uv_now(&r->w->loop) + r->w->cfg->shutdown_timeout_ms;
    arm(r);
    if (!pump_down(r)) return;
    pump_up(r);
}

void sl__tunnel_close_upstream(sl_req_t *r) {
    sl_upconn_t *u = r->tun.u;
    r->tun.u = NULL;
    u->user = NULL;
    sl__upconn_close(u);
}

/* A write toward the upstream completed (the upgrade's head may have been in flight at
 * the switch). */
static void on_up_written(sl_upconn_t *u, int status) {
    sl_req_t *r = u->user;
    r->upq.writing = 0;
    if (status < 0) {
        end(r);
        return;
    }
    sl_outq_reset(&r->upq);
    conn_of(r)->rpos = r->tun.cu_end;
    arm(r);
    pump_up(r);
}

static void on_client_read(sl_conn_t *c, ssize_t nread) {
    sl_req_t *r = c->ds.req;
    if (nread == 0) {
        /* EAGAIN: a drained buffer goes back to the pool until the next bytes. */
        if (c->rbuf && c->rpos == c->rlen && !r->upq.writing) {
            sl_block_put(&c->w->blocks, c->rbuf);
            c->rbuf = NULL;
            c->rlen = c->rpos = 0;
        }
        return;
    }
    if (nread < 0) {
        sl__conn_stop_reading(c);
        if (nread != UV_EOF) {
            end(r);
            return;
        }
        c->peer_eof = 1;
        r->tun.cl_eof = 1;
    } else {
        arm(r);
    }
    pump_up(r);
}

static void on_up_read(sl_upconn_t *u, ssize_t nread) {
    sl_req_t *r = u->user;
    if (nread == 0) {
        sl__upconn_release_buffer(u);
        return;
    }
    if (nread < 0) {
        sl__upconn_stop_reading(u);
        if (nread != UV_EOF) {
            end(r);
            return;
        }
        u->eof = 1;
        r->tun.up_eof = 1;
    } else {
        arm(r);
    }
    pump_down(r);
}

/* The worker drains: the tunnel ends at the latest shutdown_timeout from now. */
static void drain(sl_conn_t *c) {
    sl_req_t *r = c->ds.req;
    if (r->tun.drain_at) return;
    r->tun.drain_at = uv_now(&r->w->loop) + r->w->cfg->shutdown_timeout_ms;
    arm(r);
}
