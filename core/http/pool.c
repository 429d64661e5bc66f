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
    sl_list_remove(&u->pool_link);
    w->ups[u->upstream].idle[u->target].n--;
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
    sl_upconn_t *u = SL_LIST_FIRST(&w->ups[upstream].idle[target].pool, sl_upconn_t, pool_link);
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
    sl_list_push_front(&l->pool, &u->pool_link);
    l->n++;
    /* the connection's timer callback closes it when it fires with no request */
    sl_deadline_set(&u->timer, uc->keepalive_idle_timeout_ms);
}

void sl__pool_close_all(sl_worker_t *w) {
    for (size_t i = 0; i < w->cfg->nupstreams; i++)
        for (size_t t = 0; t < w->cfg->upstreams[i].ntargets; t++)
            while (!sl_list_empty(&w->ups[i].idle[t].pool))
                sl__upconn_close(SL_LIST_FIRST(&w->ups[i].idle[t].pool, sl_upconn_t, pool_link));
}
