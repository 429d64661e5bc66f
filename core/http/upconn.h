/* upconn.h — an HTTP/1.1 connection to an upstream target, and the worker's keep-alive
 * pool of them (pool.c). Internal: sl__ names.
 *
 * Ownership: an upstream connection is owned by its user (`user`: an HTTP/1.1 exchange,
 * exchange_h1.c, or after a 101 the request that owns the tunnel, tunnel.c), or by the
 * worker's idle pool between requests. A pooled connection keeps reading: bytes or EOF
 * arriving while it is idle mean it is no longer at a clean message boundary, and it is
 * closed. It holds no buffer and its timer counts the keep-alive idle timeout.
 */
#ifndef SL_UPCONN_H
#define SL_UPCONN_H

#include <uv.h>

#include "base/bug.h"
#include "base/deadline.h"
#include "base/list.h"
#include "ctx/worker.h"
#include "net/stream.h"
#include "proto/http1.h"

enum { SL_UP_CONNECTING = 1, SL_UP_ACTIVE, SL_UP_IDLE, SL_UP_CLOSED };

/** What the connection's user hears of it while u->user is set (a pooled connection's
 *  events are the pool's own: bytes, EOF or its timer close it). */
typedef struct {
    /** nread > 0 bytes were appended to u->rbuf; 0: nothing now; <0: EOF or an error. */
    void (*on_read)(sl_upconn_t *u, ssize_t nread);
    /** The connection's timer (sl__upconn_arm) expired. */
    void (*on_timeout)(sl_upconn_t *u);
    /** Connected (TCP, then TLS when the target has it), or failed (status < 0; `why`
     *  names a TLS failure, else NULL). */
    void (*on_connected)(sl_upconn_t *u, int status, const char *why);
    /** A write of sl__upconn_write completed. */
    void (*on_written)(sl_upconn_t *u, int status);
} sl_upconn_cb_t;

struct sl_upconn_s {
    sl_stream_t s; /* first: the handle's address is the connection's */
    sl_deadline_t timer;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_shutdown_t sreq; /**< a tunnel's half-close toward the upstream */
    sl_worker_t *w;
    void *user; /**< its user (see above); NULL while pooled */
    const sl_upconn_cb_t *cb; /**< its user's callbacks, while user is set */
    uint32_t upstream, target;
    char *rbuf;
    uint32_t rlen, rpos;
    uint8_t state; /**< SL_UP_* */
    uint8_t reading;
    uint8_t eof;
    uint8_t rd_err; /**< the read that set eof failed (a reset): not the upstream's end */
    uint8_t nclose;
    uint32_t nreqs; /**< exchanges completed on it: >0 means a reused connection */
    sl_h1_t h1;
    sl_list_t pool_link; /**< in its target's pool (ctx/worker.h) while idle */
};

/* pool.c */
/** An idle connection to (upstream, target), or NULL. */
sl_upconn_t *sl__pool_get(sl_worker_t *w, uint32_t upstream, uint32_t target);
/** Parks a clean connection; closes it when the pool is full or draining. */
void sl__pool_put(sl_worker_t *w, sl_upconn_t *u);
/** Closes a connection (pooled or not); it is freed once its handles closed. */
void sl__upconn_close(sl_upconn_t *u);
/** Drain: closes every pooled connection of the worker. */
void sl__pool_close_all(sl_worker_t *w);

/* upconn.c */
/** A new connection of `user` to target t of upstream `upstream` (UINT32_MAX: an
 *  address of a plugin's, never pooled), not yet connecting; NULL when out of memory. */
sl_upconn_t *sl__upconn_new(sl_worker_t *w, void *user, const sl_upconn_cb_t *cb, uint32_t upstream, uint32_t t);
/** Starts connecting u to sa under a timer of timeout_ms (TLS follows when the target
 *  has it, under the same timer): 0, or <0 at once (no callback follows). */
int sl__upconn_connect(sl_upconn_t *u, const struct sockaddr *sa, uint64_t timeout_ms);
/** Takes a pooled connection for `user` (NULL when none). */
sl_upconn_t *sl__upconn_reuse(sl_worker_t *w, void *user, const sl_upconn_cb_t *cb, uint32_t upstream, uint32_t t);
/** Connected (on_connected said so): CONNECTING -> ACTIVE, the connect timer cleared. */
void sl__upconn_ready(sl_upconn_t *u);
void sl__upconn_start_reading(sl_upconn_t *u);
void sl__upconn_stop_reading(sl_upconn_t *u);
/** Gives the read buffer back when it holds nothing. */
void sl__upconn_release_buffer(sl_upconn_t *u);
/** (Re)arms the connection's timer; 0 leaves it as it is. */
void sl__upconn_arm(sl_upconn_t *u, uint64_t ms);
/** Writes q (u->cb->on_written follows a 0), with sl_stream_write's contract. */
int sl__upconn_write(sl_upconn_t *u, sl_outq_t *q);
/** Writes n buffers: 1 written at once (no callback), 0 (u->cb->on_written follows), <0. */
int sl__upconn_writev(sl_upconn_t *u, const uv_buf_t *b, unsigned n);

#endif
