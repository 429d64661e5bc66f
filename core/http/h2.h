/* h2.h — an HTTP/2 server connection (nghttp2 for framing, HPACK and flow control): the
 * second implementation of the downstream a request talks to (downstream.h). Each HTTP/2
 * stream embeds an sl_downstream_t, so routing, plugins, balancers, retries, limits, logs
 * and metrics serve it unchanged; h1_head.c builds the upstream head from r->head, which a
 * stream fills from its HEADERS (an HTTP/2 upstream gets it translated: h2_up.c), and
 * the response's trailers (r->trailers) follow its last DATA. Internal: sl__ names.
 *
 * Ownership: the client connection that recognised HTTP/2 (conn.c: the connection preface
 * after ALPN h2 or with prior knowledge) keeps its socket, its timer, its reads and its
 * close; it hands every byte it reads to the session and the session writes through the
 * stream it was given. The session owns its streams, their request objects and buffers
 * (worker blocks: one output block per connection, one body block per stream whose
 * request body is arriving). This header does not know conn.h: the owner is reached
 * through sl_h2_owner_t, so conn.c -> h2.c is the only edge.
 */
#ifndef SL_H2_H
#define SL_H2_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "base/list.h"
#include "ctx/worker.h"
#include "http/downstream.h"
#include "net/stream.h"

typedef struct sl_h2_s sl_h2_t;

/** A stream's events waiting for its session's run (bits the session's file defines) and
 *  its place in the session's queue: streams run in the order of their first event. The
 *  client side (h2.c) and the upstream side (h2_up.c) both queue their streams so. */
typedef struct {
    sl_list_t link;
    uint8_t bits;
} sl__h2_ev_t;

static inline void sl__h2_ev_push(sl_list_t *queue, sl__h2_ev_t *e, uint8_t bits) {
    if (!sl_list_linked(&e->link)) sl_list_push_back(queue, &e->link);
    e->bits |= bits;
}

/** Takes a stream out of the queue: the events it had (0: none). */
static inline uint8_t sl__h2_ev_take(sl__h2_ev_t *e) {
    uint8_t bits = e->bits;
    sl_list_remove(&e->link);
    e->bits = 0;
    return bits;
}

/** What the session asks of the connection that owns it. */
typedef struct {
    /** (Re)arms the connection's timer to fire in ms (sl__h2_on_timer follows). */
    void (*arm)(void *owner, uint64_t ms);
    /** Closes the connection now (sl__h2_close is called from it). */
    void (*close)(void *owner);
    /** Half-closes the connection after what was written (a FIN; through TLS a
     *  close_notify first) and goes on reading until the client closes: the session
     *  closes it at the latest when its timer fires next. */
    void (*linger)(void *owner);
} sl_h2_owner_t;

/** nghttp2's allocator over the calling thread's freelists (nghttp2_mem *): every session
 *  of a worker uses it, the upstream ones too (h2_up.c). */
void *sl__h2_mem(void);
/** A zeroed piece from those freelists, and its return. */
void *sl__h2_calloc(size_t n);
void sl__h2_mem_free(void *p);

/** nghttp2's send callback for a session writing through one output block at a time:
 *  copies what fits into *out (a block taken from `blocks` when NULL) after *olen bytes.
 *  The bytes taken, NGHTTP2_ERR_WOULDBLOCK when the block is full, or
 *  NGHTTP2_ERR_CALLBACK_FAILURE without memory. */
ssize_t sl__h2_out_put(sl_blockpool_t *blocks, char **out, uint32_t *olen, const uint8_t *data, size_t len);

/** The 24 bytes every HTTP/2 connection starts with (RFC 9113 3.4). */
#define SL_H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define SL_H2_PREFACE_LEN 24

/** Whether p[0..n) starts the preface: SL_OK (all 24 bytes are there), SL_EAGAIN (a
 *  prefix of it: more bytes decide), SL_ERROR (not HTTP/2). */
int sl__h2_preface(const char *p, size_t n);

/** A session over s for a connection of listener `tmpl->lidx` (its lc, secure, trusted,
 *  port and peer are copied into every stream's downstream). NULL when out of memory. */
sl_h2_t *sl__h2_new(sl_worker_t *w, sl_stream_t *s, const sl_downstream_t *tmpl, const sl_h2_owner_t *ops,
                    void *owner);
/** Bytes read from the client (the preface first). False: the connection must close. */
bool sl__h2_feed(sl_h2_t *h, const char *p, size_t n);
/** The owner's timer fired. */
void sl__h2_on_timer(sl_h2_t *h);
/** The worker drains: GOAWAY with the last stream id; in-flight streams finish, then the
 *  connection closes. */
void sl__h2_drain(sl_h2_t *h);
/** The connection closes: every request is abandoned and the session's handle (`cb` gets
 *  it, with the owner as its data) is closed. */
void sl__h2_close(sl_h2_t *h, uv_close_cb cb);
/** Frees the session once its handle was closed. */
void sl__h2_free(sl_h2_t *h);

#endif
