/* pool.c — per-worker keep-alive pools of upstream connections, one list per target.
 *
 * A pooled connection keeps reading: bytes or EOF arriving while it is idle mean
 * it is no longer at a clean message boundary, and it is closed (upconn.c).
 * It holds no buffer and its timer counts the keep-alive idle timeout.
 */
#include <stdlib.h>

#include "http/upconn.h"

static void upconn_on_close(uv_handle_t *h) {
    sl_upconn_t *u = h->data;
    if (--u->nclose) return;
    sl_worker_t *w = u->w;
    if (u->rbuf) sl_block_put(&w->blocks, u->rbuf);
    free(u);
    w->nupconns--;
}

static void pool_unlink(sl_worker_t *w, sl_upconn_t *u) {
    sl_idle_list_t *l = &w->ups[u->upstream].idle[u->target];
    if (u->pool_prev)
        u->pool_prev->pool_next = u->pool_next;
    else
        l->head = u->pool_next;
    if (u->pool_next) u->pool_next->pool_prev = u->pool_prev;
    u->pool_next = u->pool_prev = NULL;
    l->n--;
}

void sl__upconn_close(sl_upconn_t *u) {
    if (u->state == SL_UP_CLOSED) return;
    SL_BUG_ON(u->state == SL_UP_IDLE && u->user);
    if (u->state == SL_UP_IDLE) pool_unlink(u->w, u);
    u->state = SL_UP_CLOSED;
    u->user = NULL;
    u->nclose = 2;
    sl_stream_end_tls(&u->s);
    uv_close((uv_handle_t *)&u->s.tcp, upconn_on_close);
    uv_close((uv_handle_t *)&u->timer.timer, upconn_on_close);
}

sl_upconn_t *sl__pool_get(sl_worker_t *w, uint32_t upstream, uint32_t target) {
    sl_idle_list_t *l = &w->ups[upstream].idle[target];
    sl_upconn_t *u = l->head;
    if (!u) return NULL;
    SL_BUG_ON(u->state != SL_UP_IDLE);
    pool_unlink(w, u);
    sl_deadline_clear(&u->timer);
    u->rlen = u->rpos = 0;
    return u;
}

void sl__pool_put(sl_worker_t *w, sl_upconn_t *u) {
    const sl_upstream_conf_t *uc = &w->cfg->upstreams[u->upstream];
    sl_idle_list_t *l = &w->ups[u->upstream].idle[u->target];
    SL_BUG_ON(u->state != SL_UP_ACTIVE || u->rpos != u->rlen); /* a clean boundary only */
    if (w->draining || l->n >= uc->keepalive_max_idle) {
        sl__upconn_close(u);
        return;
    }
    if (u->rbuf) {
        sl_block_put(&w->blocks, u->rbuf);
        u->rbuf = NULL;
    }
    u->rlen = u->rpos = 0;
    u->state = SL_UP_IDLE;
    u->user = NULL;
    u->pool_prev = NULL;
    u->pool_next = l->head;
    if (l->head) l->head->pool_prev = u;
    l->head = u;
    l->n++;
    /* the connection's timer callback closes it when it fires with no request */
    sl_deadline_set(&u->timer, uc->keepalive_idle_timeout_ms);
}

void sl__pool_close_all(sl_worker_t *w) {
    for (size_t i = 0; i < w->cfg->nupstreams; i++)
        for (size_t t = 0; t < w->cfg->upstreams[i].ntargets; t++)
            while (w->ups[i].idle[t].head) sl__upconn_close(w->ups[i].idle[t].head);
}
