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
 * The client side is reached only through sl__conn_write, sl__conn_start/stop_reading and
 * sl__conn_shutdown, and read through conn.c's buffer: the seam TLS slots into.
 */
#include "http/http_conn.h"
#include "net/tls.h"

/* Time left before the tunnel is closed for idleness (or for a worker's drain). */
static uint64_t idle_ms(const sl_req_t *r) {
    uint64_t ms = r->c->lc->idle_timeout_ms;
    if (r->tun.drain_at) {
        uint64_t now = uv_now(&r->w->loop);
        ms = SL_MIN(ms, r->tun.drain_at > now ? r->tun.drain_at - now : 1);
    }
    return ms;
}

static void arm(sl_req_t *r) { sl__conn_arm(r->c, idle_ms(r)); }

static void end(sl_req_t *r) { sl__conn_abort(r->c); }

static void on_up_written(uv_write_t *wr, int status) {
    sl_upconn_t *u = SL_CONTAINER_OF(wr, sl_upconn_t, wreq);
    if (u->req) sl__tunnel_on_upstream_written(u->req, status); /* NULL: cancelled by a close */
}

static void on_up_shutdown(uv_shutdown_t *sr, int status) {
    sl_upconn_t *u = SL_CONTAINER_OF(sr, sl_upconn_t, sreq);
    sl_req_t *r = u->req;
    (void)status; /* a peer that is gone has nothing more to read: done all the same */
    if (!r) return;
    r->tun.up_shut = 2;
    if (r->tun.cl_shut == 2) end(r);
}

void sl__tunnel_on_client_shutdown(sl_req_t *r) {
    r->tun.cl_shut = 2;
    if (r->tun.up_shut == 2) end(r);
}

/* client -> upstream. False when the tunnel ended (r is gone). */
static bool pump_up(sl_req_t *r) {
    sl_conn_t *c = r->c;
    sl_upconn_t *u = r->up;
    if (r->tun.up_shut) return true;
    if (r->upq.writing) {
        sl__conn_stop_reading(c);
        return true;
    }
    if (c->rpos < c->rlen) {
        sl__outq_reset(&r->upq);
        sl__outq_add(&r->upq, c->rbuf + c->rpos, c->rlen - c->rpos);
        r->tun.cu_end = c->rlen;
        int rc = sl__stream_write(&r->upq, (uv_stream_t *)&u->tcp, u->tls, &u->wreq, on_up_written);
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
        int src = u->tls ? sl_tls_shutdown_write(u->tls, &u->sreq, on_up_shutdown)
                         : uv_shutdown(&u->sreq, (uv_stream_t *)&u->tcp, on_up_shutdown);
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
    sl_req_t *r = c->req;
    if (!r) return; /* cancelled by a close */
    r->clq.writing = 0;
    if (status < 0) {
        end(r);
        return;
    }
    sl__outq_reset(&r->clq);
    r->up->rpos = r->tun.uc_end;
    arm(r);
    pump_down(r);
}

static bool pump_down(sl_req_t *r) {
    sl_conn_t *c = r->c;
    sl_upconn_t *u = r->up;
    if (r->tun.cl_shut) return true;
    if (r->clq.writing) {
        sl__up_stop_reading(u);
        return true;
    }
    /* The first call sends the 101 head queued in clq along with what followed it. */
    if (u->rpos < u->rlen) sl__outq_add(&r->clq, u->rbuf + u->rpos, u->rlen - u->rpos);
    r->tun.uc_end = u->rlen;
    if (r->clq.niov) {
        int rc = sl__conn_write(c, &r->clq, on_cl_written);
        if (rc < 0) {
            end(r);
            return false;
        }
        if (rc == 0) { /* the client is slow: the upstream waits */
            sl__up_stop_reading(u);
            return true;
        }
    }
    u->rpos = u->rlen = 0;
    if (r->tun.up_eof) {
        r->tun.cl_shut = 1;
        sl__conn_shutdown(c); /* its completion calls sl__tunnel_on_client_shutdown */
        if (c->wshut == 2) { /* could not even start: done all the same */
            r->tun.cl_shut = 2;
            if (r->tun.up_shut == 2) {
                end(r);
                return false;
            }
        }
        return true;
    }
    sl__up_start_reading(u);
    return true;
}

void sl__tunnel_start(sl_req_t *r) {
    sl_conn_t *c = r->c;
    sl_upconn_t *u = r->up;
    c->tunnel = 1;
    r->tun.cu_end = c->rpos; /* the upgrade's head may still be in flight toward the upstream */
    r->tun.cl_eof = c->peer_eof;
    r->tun.up_eof = u->eof;
    if (r->w->draining) r->tun.drain_at = uv_now(&r->w->loop) + r->w->cfg->shutdown_timeout_ms;
    arm(r);
    if (!pump_down(r)) return;
    pump_up(r);
}

void sl__tunnel_on_upstream_written(sl_req_t *r, int status) {
    r->upq.writing = 0;
    if (status < 0) {
        end(r);
        return;
    }
    sl__outq_reset(&r->upq);
    r->c->rpos = r->tun.cu_end;
    arm(r);
    pump_up(r);
}

void sl__tunnel_on_client_read(sl_req_t *r, ssize_t nread) {
    sl_conn_t *c = r->c;
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

void sl__tunnel_on_upstream_read(sl_req_t *r, ssize_t nread) {
    sl_upconn_t *u = r->up;
    if (nread < 0) {
        sl__up_stop_reading(u);
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

void sl__tunnel_drain(sl_req_t *r) {
    if (r->tun.drain_at) return;
    r->tun.drain_at = uv_now(&r->w->loop) + r->w->cfg->shutdown_timeout_ms;
    arm(r);
}
