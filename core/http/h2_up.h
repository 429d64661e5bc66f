/* h2_up.h — HTTP/2 connections to upstream targets (`protocol: h2` over TLS with ALPN h2,
 * `h2c` with prior knowledge), multiplexed: an attempt's exchange (exchange.h) is one
 * stream. nghttp2 in client mode; the conventions of the server side (h2.c): nghttp2's
 * callbacks only record events, the session acts on them after nghttp2 returned, buffers
 * are worker blocks and nghttp2's memory comes from the worker thread's freelists.
 * Internal: sl__ names.
 *
 * Ownership: a connection belongs to the worker (a list per target, in the target's
 * sl_idle_list_t); a stream belongs to its connection, and to the exchange using it while
 * x->u.stream points at it. A connection takes streams up to the peer's
 * SETTINGS_MAX_CONCURRENT_STREAMS, then the next exchange opens another connection. A
 * GOAWAY retires it (no new stream; the streams it names go on, the ones above its
 * last-stream-id are refused: the exchange's on_refused). With no stream it is closed after
 * the upstream's keepalive.idle_timeout. An exchange that is cancelled (a lost hedge race,
 * a client gone) resets its stream; the connection stays for the others.
 *
 * The exchange's operations (sl__exchange_h2): the request's body goes up from the queue
 * the request writes (the data provider copies it; on_written once taken) or, for a hedge,
 * from its buffered body at once; the response head is put into r->rhead, its body is read
 * out of the stream's block and its trailers into r->trailers.
 */
#ifndef SL_H2_UP_H
#define SL_H2_UP_H

#include <stdbool.h>
#include <stdint.h>

#include "http/exchange.h"
#include "ctx/worker.h"

typedef struct sl_h2up_stream_s sl_h2up_stream_t;

/** Drain: idle connections close now, busy ones when their last stream ends. */
void sl__h2up_drain(sl_worker_t *w);

#endif
