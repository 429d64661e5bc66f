/* exchange.h — one attempt's exchange with an upstream: connect, write the request, read
 * the response head and body, finish or cancel, behind one table whatever the protocol.
 * HTTP/1.1 implements it over an upstream connection and the keep-alive pool
 * (exchange_h1.c, upconn.c, pool.c), HTTP/2 over a stream of a multiplexed connection
 * (h2_up.c). Internal: sl__ names.
 *
 * The request (request.h) holds two exchanges, embedded: the current attempt's and a
 * hedge's while one races it. Operations go down through `ops`; events come up through
 * `cb` (proxy.c's table), never by an implementation calling into proxy.c or attempts.c.
 * As libuv's, a call that fails at once (<0) is followed by no event.
 *
 * States (x->state, checked with SL_BUG_ON at every transition):
 *
 *     FREE --start--> CONNECTING --on_ready--> OPEN --head--> HEAD --finish/cancel--> FREE
 *       \---start (a pooled connection, an HTTP/2 stream)--^       cancel from any state
 *
 * The request direction is x->sent: 0 while the request goes up, 1 once written whole.
 *
 * Ownership: an exchange is owned by its request (embedded in it, never allocated); the
 * connection or stream it drives is borrowed from the worker while state != FREE.
 */
#ifndef SL_EXCHANGE_H
#define SL_EXCHANGE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/bug.h"
#include "http/downstream.h"
#include "net/outq.h"
#include "upstream/attempt.h"

typedef struct sl_exchange_s sl_exchange_t;

enum { SL_X_FREE = 0, SL_X_CONNECTING, SL_X_OPEN, SL_X_HEAD };

/* ops->flags */
/** The protocol frames the request itself: no head bytes and no chunked coding in the
 *  queue toward the upstream, no Upgrade (HTTP/2). */
#define SL_XF_FRAMES 1u
/** The upstream tells a request it never processed (a GOAWAY, REFUSED_STREAM: on_refused):
 *  a streamed body is kept so that it can go again (HTTP/2). */
#define SL_XF_REFUSALS 2u
/** The protocol carries trailers, and with them a gRPC status to count (HTTP/2). */
#define SL_XF_TRAILERS 4u

typedef struct {
    const char *name; /**< "http/1.1", "h2" */
    uint32_t flags;   /**< SL_XF_* */
    /** Starts the exchange on x->att.target of the request's upstream: 0 (it may be written
     *  now), 1 (connecting: cb->on_ready follows), or a libuv error <0 (no event follows).
     *  With x->whole set the exchange sends the whole request itself (the rebuilt head and
     *  a buffered body) and only ever reports on_readable or on_failed. */
    int (*start)(sl_exchange_t *x);
    /** Writes what q holds: 1 taken at once (q emptied), 0 in flight (cb->on_written
     *  follows), <0 failed (no event). */
    int (*write)(sl_exchange_t *x, sl_outq_t *q);
    /** The request is written whole (x->sent was set): the end of the request goes. */
    void (*end_request)(sl_exchange_t *x);
    /** The response head into r->rhead: SL_OK (a final head or a 101), SL_EAGAIN (more
     *  bytes needed; cb->on_readable follows), SL_ERROR (*why and *kind say how). */
    int (*head)(sl_exchange_t *x, int *kind, const char **why);
    /** Whether the upstream began to answer: SL_OK (bytes of an answer arrived), SL_EAGAIN
     *  (nothing yet), SL_ERROR (it ended before answering: *why). Changes nothing. */
    int (*peek)(sl_exchange_t *x, const char **why);
    /** Hands response body to cb, at most `room` pieces (valid until wait): SL_OK handed,
     *  SL_EAGAIN nothing buffered, SL_DONE the body ended, SL_ERROR (cb refused, or the
     *  framing is broken: *why). */
    int (*body)(sl_exchange_t *x, uint32_t room, sl_body_cb cb, void *ud, const char **why);
    /** Everything handed went to the client: read on (on_readable follows). SL_OK waiting,
     *  SL_DONE the upstream's close ended the body, SL_ERROR it cut the body short (*why). */
    int (*wait)(sl_exchange_t *x, const char **why);
    /** The client's write is in flight: reading may pause (backpressure). */
    void (*pause)(sl_exchange_t *x);
    /** (Re)arms the exchange's timeout (0 clears it): cb->on_failed(504) when it passes. */
    void (*arm)(sl_exchange_t *x, uint64_t ms);
    /** The failure that just happened hit a reused keep-alive connection before any byte
     *  of an answer (the upstream closed it as it was reused): safe to send again. */
    bool (*stale)(const sl_exchange_t *x);
    /** The response was read whole and sent on: the connection is kept when clean. -> FREE */
    void (*finish)(sl_exchange_t *x);
    /** Abandoned (a failure, a lost race, the client gone): the connection is closed or
     *  the stream reset. -> FREE */
    void (*cancel)(sl_exchange_t *x);
    /** Cuts the response short and keeps the exchange (body says SL_DONE from now on), or
     *  NULL when the protocol cannot (HTTP/1.1: only closing ends a response early). */
    void (*cut)(sl_exchange_t *x);
    /** Hands the connection over, the exchange ending (a 101: a tunnel owns it from now);
     *  NULL when the protocol has no connection of its own to give. -> FREE */
    struct sl_upconn_s *(*take_conn)(sl_exchange_t *x);
} sl_exchange_ops_t;

/** What an exchange tells its request, each from the loop's own callbacks (never from
 *  inside an ops call). */
typedef struct {
    /** Connected (start said SL_EAGAIN): the request may be written. */
    void (*on_ready)(sl_exchange_t *x);
    /** A write that said 0 completed. */
    void (*on_written)(sl_exchange_t *x);
    /** Response bytes (head or body) arrived, or the upstream's end: call head/body/wait. */
    void (*on_readable)(sl_exchange_t *x);
    /** The exchange failed (SL_FAIL_* kind, the status the client would get, why). */
    void (*on_failed)(sl_exchange_t *x, int status, int kind, const char *why);
    /** The upstream refused the request unprocessed (SL_XF_REFUSALS protocols). */
    void (*on_refused)(sl_exchange_t *x, const char *why);
    /** The request's own deadline (a grpc-timeout) passed. */
    void (*on_deadline)(sl_exchange_t *x);
} sl_exchange_cb_t;

struct sl_exchange_s {
    const sl_exchange_ops_t *ops;
    const sl_exchange_cb_t *cb;
    struct sl_req_s *r;        /**< the request it serves */
    union {                    /**< what the implementation drives, while state != FREE */
        struct sl_upconn_s *up;          /**< HTTP/1.1 */
        struct sl_h2up_stream_s *stream; /**< HTTP/2 */
    } u;
    sl_attempt_t att;          /**< the attempt it carries (upstream/attempt.h) */
    uint8_t state;             /**< SL_X_* */
    uint8_t sent;              /**< the request was written whole */
    uint8_t whole;             /**< the exchange sends the whole request itself (a hedge) */
    /** Tracing (trace.c): the attempt's number, span id and start. */
    uint8_t span_n;
    uint8_t span[8];
    uint64_t span_start_ns;
};

/** The HTTP/1.1 and HTTP/2 implementations. */
extern const sl_exchange_ops_t sl__exchange_h1;
extern const sl_exchange_ops_t sl__exchange_h2;

/** Prepares x (FREE) to serve r with ops and cb. */
static inline void sl__exchange_init(sl_exchange_t *x, struct sl_req_s *r, const sl_exchange_ops_t *ops,
                                     const sl_exchange_cb_t *cb) {
    SL_BUG_ON(x->state != SL_X_FREE);
    x->ops = ops;
    x->cb = cb;
    x->r = r;
    x->sent = 0;
    x->whole = 0;
}

#endif
