/* h2_up.h — HTTP/2 connections to upstream targets (`protocol: h2` over TLS with ALPN h2,
 * `h2c` with prior knowledge), multiplexed: a request's attempt is one stream. nghttp2 in
 * client mode; the conventions of the server side (h2.c): nghttp2's callbacks only record
 * events, the session acts on them after nghttp2 returned, buffers are worker blocks and
 * nghttp2's memory comes from the worker thread's freelists. Internal: sl__ names.
 *
 * Ownership: a connection belongs to the worker (a list per target, in the target's
 * sl_idle_list_t); a stream belongs to its connection, and to the request using it while
 * r->h2s points at it. A connection takes streams up to the peer's
 * SETTINGS_MAX_CONCURRENT_STREAMS, then the next request opens another connection. A
 * GOAWAY retires it (no new stream; the streams it names go on, the ones above its
 * last-stream-id are refused: sl__proxy_h2_refused). With no stream it is closed after the
 * upstream's keepalive.idle_timeout.
 *
 * The request side mirrors an HTTP/1.1 upconn's (proxy.c): the request's body goes up from
 * r->upq (sl__h2up_write, sl__proxy_h2_written when taken); the response head is put into
 * r->rhead, its body is read out of the stream's block (sl__h2up_read) and its trailers
 * into r->trailers; what happens next is proxy.c's (sl__proxy_pump_down and friends).
 */
#ifndef SL_H2_UP_H
#define SL_H2_UP_H

#include <stdbool.h>
#include <stdint.h>

#include "http/downstream.h"
#include "http/request.h"

typedef struct sl_h2up_stream_s sl_h2up_stream_t;

/** Replays of one request whose streams were refused unprocessed (a GOAWAY's
 *  last-stream-id below them, REFUSED_STREAM): safe whatever the method, bounded against
 *  an upstream that refuses everything. */
#define SL_H2UP_MAX_REFUSED 10

/** Starts r's current attempt (r->att.target of r->upstream) on a stream: a connection with
 *  room, or a new one. SL_OK (events follow), or <0 at once (no event follows). */
int sl__h2up_start(sl_req_t *r);
/** The response head arrived (r->rhead and r->status are set). */
bool sl__h2up_head_ready(const sl_req_t *r);
/** Hands q's bytes to the stream (q->writing set; sl__proxy_h2_written follows). */
void sl__h2up_write(sl_req_t *r, sl_outq_t *q);
/** The request body is over: END_STREAM follows what was written. */
void sl__h2up_end(sl_req_t *r);
/** Hands buffered response body to cb, at most `room` pieces (spans valid until
 *  sl__h2up_wait): SL_OK (pieces handed), SL_EAGAIN (nothing buffered), SL_DONE (the body
 *  ended; trailers, if any, are in r->trailers), SL_ERROR (cb refused). */
int sl__h2up_read(sl_req_t *r, uint32_t room, sl_body_cb cb, void *ud);
/** Everything handed was written to the client: the block starts over and its bytes go
 *  back to the upstream's window. */
void sl__h2up_wait(sl_req_t *r);
/** (Re)arms the stream's read timeout (0 clears it). */
void sl__h2up_arm(sl_req_t *r, uint64_t ms);
/** The stream is cut short (a grpc-timeout passed mid-response): reset toward the upstream,
 *  and sl__h2up_read says SL_DONE from now on. */
void sl__h2up_expire(sl_req_t *r);
/** The request leaves its stream (r->h2s = NULL): a stream still open is reset (CANCEL). */
void sl__h2up_detach(sl_req_t *r);
/** Drain: idle connections close now, busy ones when their last stream ends. */
void sl__h2up_drain(sl_worker_t *w);

#endif
