/* upconn.c — an HTTP/1.1 connection to an upstream target: connect (and TLS), reads into
 * its own buffer, writes, its timer; what happens on each is its user's (u->cb), except
 * for a pooled connection, whose events close it (upconn.h). */
#include "http/upconn.h"

#include <stdio.h>
#include <stdlib.h>

static void up_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    sl_upconn_t *u = (sl_upconn_t *)h;
    unsigned room;
    char *p = sl_block_room(&u->w->blocks, &u->rbuf, &u->rlen, &u->rpos, &room);
    (void)hint;
    *buf = uv_buf_init(p, room);
}

void sl__upconn_release_buffer(sl_upconn_t *u) {
    if (u->rbuf && u->rpos == u->rlen) {
        sl_block_put(&u->w->blocks, u->rbuf);
        u->rbuf = NULL;
    }
}

static void up_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    sl_upconn_t *u = (sl_upconn_t *)s;
    if (!u->user) {
        if (nread == 0) {
            sl__upconn_release_buffer(u);
            return;
        }
        /* Bytes or EOF on a pooled connection: it is no longer at a clean boundary. */
        sl__upconn_close(u);
        return;
    }
    SL_BUG_ON(u->state == SL_UP_IDLE || u->state == SL_UP_CLOSED);
    if (nread > 0) u->rlen += (uint32_t)nread;
    u->cb->on_read(u, nread);
}

void sl__upconn_ready(sl_upconn_t *u) {
    SL_BUG_ON(u->state != SL_UP_CONNECTING);
    u->state = SL_UP_ACTIVE;
    sl_deadline_clear(&u->timer);
    uv_tcp_nodelay(&u->s.tcp, 1);
}

void sl__upconn_start_reading(sl_upconn_t *u) {
    if (u->reading || u->eof || u->state == SL_UP_CLOSED) return;
    if (u->rbuf && u->rlen == SL_BLOCK_SIZE) return;
    if (sl_stream_read_start(&u->s, up_alloc, up_on_read) == 0) u->reading = 1;
}

void sl__upconn_stop_reading(sl_upconn_t *u) {
    if (!u->reading) return;
    sl_stream_read_stop(&u->s);
    u->reading = 0;
}

static void up_on_timer(uv_timer_t *t) {
    sl_upconn_t *u = t->data;
    if (!u->user) {
        sl__upconn_close(u); /* idle keep-alive expired */
        return;
    }
    u->cb->on_timeout(u);
}

void sl__upconn_arm(sl_upconn_t *u, uint64_t ms) {
    if (ms) sl_deadline_set(&u->timer, ms);
}

static void up_on_write(uv_write_t *wr, int status) {
    sl_upconn_t *u = (sl_upconn_t *)wr->handle;
    if (!u->user) return; /* cancelled by a close */
    u->cb->on_written(u, status);
}

int sl__upconn_write(sl_upconn_t *u, sl_outq_t *q) {
    SL_BUG_ON(u->state != SL_UP_ACTIVE);
    return sl_stream_write(&u->s, q, &u->wreq, up_on_write);
}

int sl__upconn_writev(sl_upconn_t *u, const uv_buf_t *b, unsigned n) {
    SL_BUG_ON(u->state != SL_UP_ACTIVE);
    return sl_stream_writev(&u->s, &u->wreq, b, n, up_on_write);
}

/* The connection is ready for the request (TCP connected, TLS established), or failed. */
static void up_connected(sl_upconn_t *u, int status, const char *why) {
    if (!u->user || u->state == SL_UP_CLOSED) return;
    u->cb->on_connected(u, status, why);
}

static void up_on_tls(sl_tls_t *t, int status) {
    sl_upconn_t *u = sl_tls_owner(t);
    char why[256];
    if (status < 0) snprintf(why, sizeof why, "upstream TLS %s", sl_tls_error(t));
    up_connected(u, status, status < 0 ? why : NULL);
}

/* A target's TLS settings, or NULL for plain TCP (and for upstream.set(address)). */
static const sl_tls_target_conf_t *up_tls_conf(const sl_upconn_t *u) {
    const sl_config_t *cfg = u->w->cfg;
    if (u->upstream >= cfg->nupstreams) return NULL;
    const sl_tls_target_conf_t *tc = cfg->upstreams[u->upstream].targets[u->target].tls;
    return tc && tc->rt ? tc : NULL;
}

static void up_on_connect(uv_connect_t *creq, int status) {
    sl_upconn_t *u = SL_CONTAINER_OF(creq, sl_upconn_t, creq);
    if (!u->user || u->state == SL_UP_CLOSED) return;
    const sl_tls_target_conf_t *tc = status >= 0 ? up_tls_conf(u) : NULL;
    if (tc) {
        /* The handshake runs under the connect timeout already armed. */
        u->s.tls = sl_tls_connect(tc->rt, (uv_stream_t *)&u->s.tcp, &u->w->tls_pump, NULL);
        if (u->s.tls && sl_tls_handshake(u->s.tls, up_on_tls) == 0) return;
        char why[256];
        snprintf(why, sizeof why, "upstream TLS %s", u->s.tls ? sl_tls_error(u->s.tls) : "out of memory");
        up_connected(u, UV_EPROTO, why);
        return;
    }
    up_connected(u, status, NULL);
}

sl_upconn_t *sl__upconn_new(sl_worker_t *w, void *user, const sl_upconn_cb_t *cb, uint32_t upstream, uint32_t t) {
    sl_upconn_t *u = calloc(1, sizeof(*u));
    if (!u) return NULL;
    u->w = w;
    u->upstream = upstream;
    u->target = t;
    u->user = user;
    u->cb = cb;
    u->state = SL_UP_CONNECTING;
    uv_tcp_init(&w->loop, &u->s.tcp);
    sl_deadline_init(&w->loop, &u->timer, u, up_on_timer);
    u->s.tcp.data = u;
    w->nupconns++;
    sl_h1_init(&u->h1, HTTP_RESPONSE, w->resp_limits);
    return u;
}

int sl__upconn_connect(sl_upconn_t *u, const struct sockaddr *sa, uint64_t timeout_ms) {
    SL_BUG_ON(u->state != SL_UP_CONNECTING);
    int rc = uv_tcp_connect(&u->creq, &u->s.tcp, sa, up_on_connect);
    if (rc < 0) return rc;
    sl__upconn_arm(u, timeout_ms);
    return 0;
}

sl_upconn_t *sl__upconn_reuse(sl_worker_t *w, void *user, const sl_upconn_cb_t *cb, uint32_t upstream, uint32_t t) {
    sl_upconn_t *u = sl__pool_get(w, upstream, t);
    if (!u) return NULL;
    SL_BUG_ON(u->state != SL_UP_IDLE || u->user);
    u->user = user;
    u->cb = cb;
    u->state = SL_UP_ACTIVE;
    return u;
}
