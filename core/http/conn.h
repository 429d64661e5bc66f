/* conn.h — an HTTP/1.1 client connection: the first implementation of the downstream a
 * request talks to (downstream.h). Internal: sl__ names.
 *
 * Ownership: a connection is owned by its worker and lives from accept to close; it owns
 * the request it serves (ds.req). Its read buffer (`rbuf`, a block) holds the current
 * request head at [0, req->head_end), body bytes after it, and pipelined bytes after the
 * message end. It is released whenever the connection is idle with nothing buffered, so an
 * idle keep-alive connection holds no buffer; and once a request without a body has all
 * its bytes and nothing follows them, its head is copied into the request's arena and the
 * block released while the request waits on its upstream (conn.c, conn_park_buffer).
 */
#ifndef SL_CONN_H
#define SL_CONN_H

#include <uv.h>

#include "base/deadline.h"
#include "base/list.h"
#include "ctx/worker.h"
#include "http/downstream.h"
#include "net/stream.h"
#include "proto/http1.h"

enum { SL_CONN_IDLE = 0, SL_CONN_HEAD, SL_CONN_ACTIVE, SL_CONN_CLOSED };
/* A connection's first bytes on a listener with accept_proxy_protocol: a trusted peer's
 * PROXY header is due (it is taken off), or an untrusted peer's must not be one. */
enum { SL_CONN_PP_DONE = 0, SL_CONN_PP_EXPECT, SL_CONN_PP_REFUSE };

struct sl_conn_s {
    sl_stream_t s;   /* first: the handle's address is the connection's */
    sl_downstream_t ds;
    sl_deadline_t timer;
    uv_write_t wreq; /* here, not in the request: a cancelled write calls back after the request is gone */
    uv_shutdown_t sreq; /* sl__conn_shutdown's; here for the same reason as wreq */
    sl_worker_t *w;
    char *rbuf;          /**< block or NULL */
    uint32_t rlen, rpos; /**< filled bytes; bytes consumed by the parser */
    uint8_t state;       /**< SL_CONN_* */
    uint8_t reading;
    uint8_t peer_eof;
    uint8_t nclose;      /**< handles still closing */
    uint8_t proxy;       /**< accept_proxy_protocol, before the first request: SL_CONN_PP_* */
    uint8_t wshut;       /**< sl__conn_shutdown: 1 asked, 2 done (or failed); nothing more is written */
    sl_h1_t h1;
    /** Who reads the connection instead of the HTTP/1 parser: the byte tunnel after a
     *  101 (tunnel.c), or NULL. */
    const struct sl_conn_takeover_s *takeover;
    /** The HTTP/2 session the connection was handed to after its preface (h2.h), or NULL. */
    struct sl_h2_s *h2;
    sl_list_t link; /**< in w->conns while open */
};

/** What takes a connection over from the HTTP/1 parser (tunnel.c, after a 101): its
 *  reads, the completion of its half-close, and the worker's drain. */
typedef struct sl_conn_takeover_s {
    /** nread bytes were appended to c->rbuf (0: nothing now; <0: EOF or an error). */
    void (*on_read)(sl_conn_t *c, ssize_t nread);
    /** sl__conn_shutdown completed (c->wshut is 2). */
    void (*on_shutdown)(sl_conn_t *c);
    /** The worker drains. */
    void (*drain)(sl_conn_t *c);
} sl_conn_takeover_t;

/** A listener's accept callback (server.data is the listener's index). */
void sl__conn_on_accept(uv_stream_t *server, int status);
/** Drain: idle connections close (after a grace period when the worker is retiring),
 *  busy ones close after their request, tunnels at shutdown_timeout. */
void sl__conn_close_idle(sl_worker_t *w);

/* For what takes the connection over (tunnel.c). */
void sl__conn_start_reading(sl_conn_t *c);
void sl__conn_stop_reading(sl_conn_t *c);
/** Writes a queue toward the client, with sl_stream_write's contract. */
int sl__conn_write(sl_conn_t *c, sl_outq_t *q, uv_write_cb cb);
/** Half-closes the connection toward the client after what was written (a FIN; through
 *  TLS a close_notify first). Reads go on. Once per connection; later calls do nothing.
 *  c->wshut becomes 2 when it completed (or could not be started); what took the
 *  connection over then hears of it through its on_shutdown, never from inside this
 *  call. */
void sl__conn_shutdown(sl_conn_t *c);
/** The connection of a downstream known to be HTTP/1 (a request forwarded as an upgrade). */
static inline sl_conn_t *sl__conn_of(sl_downstream_t *d) { return SL_CONTAINER_OF(d, sl_conn_t, ds); }
/** (Re)arms the connection's inactivity timer: on expiry an active request is abandoned. */
void sl__conn_arm(sl_conn_t *c, uint64_t ms);
/** Closes a client connection now, abandoning any request. */
void sl__conn_abort(sl_conn_t *c);

#endif
