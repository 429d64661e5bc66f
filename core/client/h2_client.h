/* h2_client.h — the core's one HTTP/2 client driver: an nghttp2 session in client mode,
 * without a transport. Its users keep their role and move the bytes themselves (who, and
 * on which loop: docs/ARCHITECTURE.md, "The HTTP/2 client driver").
 *
 * The driver owns the session (its options, SETTINGS, nghttp2's callbacks) and turns
 * nghttp2's callbacks into a few events of a response: its final :status (1xx heads are
 * skipped), its header fields, the end of its head, its DATA, its trailers, its end and
 * its stream's close (with the error code, and whether the peer never processed it:
 * REFUSED_STREAM, its HEADERS never sent). Connection events: the peer's SETTINGS (its
 * SETTINGS_MAX_CONCURRENT_STREAMS) and a GOAWAY (its last-stream-id). A request is
 * submitted with a body read through the `read_body` op, paused and resumed.
 *
 * The ops are called from inside nghttp2 (sl_h2c_feed, sl_h2c_send): they should only
 * record what happened and return; a user acts after the driver's call returned. An op
 * calls nothing of this file but sl_h2c_consume and (on_close, freeing its stream)
 * sl_h2c_forget.
 *
 * Streams: the user embeds an sl_h2c_stream_t in its own stream object (zeroed) and gets
 * it back in every op (SL_CONTAINER_OF): no allocation of the driver's per stream. The
 * stream is nghttp2's stream user data from sl_h2c_submit until its close (on_close) or
 * sl_h2c_forget; its fields are the driver's, the user reads them.
 *
 * Flow control: with `manual_window`, the connection's window is given back as DATA
 * arrives and a stream's only when its user says it used the bytes (sl_h2c_consume), so
 * a stream's reader backpressures that stream and no other. Without it, nghttp2 gives
 * windows back itself.
 *
 * Ownership: the session is the embedding object's (sl_h2c_init .. sl_h2c_fini), on one
 * thread; nghttp2's memory comes from `mem` when given (a worker's freelists), else malloc.
 */
#ifndef SL_H2_CLIENT_H
#define SL_H2_CLIENT_H

#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"

/** One stream of a session, embedded in the user's stream object. Read by the user,
 *  written by the driver (sl_h2c_stream_gone aside). */
typedef struct {
    int32_t id;           /**< 0 until submitted */
    uint32_t close_code;  /**< RST_STREAM's (or the session's) error code, once closed */
    uint32_t head_bytes;  /**< the header block being received so far, RFC 9113's count (32 + n + v) */
    uint8_t head_done;    /**< the final (non-1xx) response head arrived */
    uint8_t remote_done;  /**< the peer ended the stream (END_STREAM) */
    uint8_t closed;       /**< nghttp2 closed the stream (or sl_h2c_stream_gone) */
    uint8_t refused;      /**< never processed by the peer: REFUSED_STREAM, or HEADERS never sent */
    uint8_t head_too_big; /**< reset here: a header block of the response passed max_head_bytes */
    uint8_t field_refused; /**< reset here: an op refused a field of the response (SL_H2C_RESET) */
    uint8_t interim;      /**< internal: the HEADERS being received is a 1xx */
    uint8_t deferred;     /**< internal: the body waits for sl_h2c_resume */
} sl_h2c_stream_t;

/** An op's answer refusing a stream's response (a field it cannot keep, bytes past its
 *  window): the stream is reset (INTERNAL_ERROR). nghttp2's own code, so that the driver
 *  hands an op's answer back to nghttp2 as it is (a tail call on every header field). */
#define SL_H2C_RESET NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE

/** What a session tells its user; `ud` is sl_h2c_init's. Any op but `send` (and `read_body`
 *  for a request with a body) may be NULL.
 *  Called only from inside sl_h2c_feed / sl_h2c_send: record, then return. */
typedef struct {
    /** Bytes to write to the peer: how many were taken (all, or fewer), or SL_EAGAIN when
     *  none can be taken now (the rest stays in nghttp2 for the next sl_h2c_send), or
     *  SL_ERROR (the session fails). */
    long (*send)(void *ud, const uint8_t *data, size_t len);
    /** The final response head begins: its :status (200..599). 0, or SL_H2C_RESET. */
    int (*on_status)(void *ud, sl_h2c_stream_t *st, int status);
    /** A field of the final head, pseudo-headers and a 1xx head's fields left out.
     *  Borrowed for the call. 0, or SL_H2C_RESET (nothing else: nghttp2 would end the
     *  session). */
    int (*on_field)(void *ud, sl_h2c_stream_t *st, const uint8_t *name, size_t nl, const uint8_t *value,
                    size_t vl);
    /** A field of the trailers, as on_field. */
    int (*on_trailer)(void *ud, sl_h2c_stream_t *st, const uint8_t *name, size_t nl, const uint8_t *value,
                      size_t vl);
    /** The final head is complete; `end`: no body or trailers follow (on_end follows). */
    void (*on_head)(void *ud, sl_h2c_stream_t *st, bool end);
    /** Body bytes, borrowed for the call. 0: kept (with manual_window, given back later with
     *  sl_h2c_consume); 1: dropped, the driver gives the window back now; SL_H2C_RESET. */
    int (*on_data)(void *ud, sl_h2c_stream_t *st, const uint8_t *data, size_t len);
    /** The peer ended the stream (after the head, the body, or the trailers). */
    void (*on_end)(void *ud, sl_h2c_stream_t *st);
    /** The stream closed (st->close_code, st->refused say how); the driver forgets it: no
     *  op names it again. */
    void (*on_close)(void *ud, sl_h2c_stream_t *st);
    /** The request body: up to `len` bytes into buf. The bytes written, with *eof set when
     *  the body ends with them; 0 without *eof: none yet, the stream waits for sl_h2c_resume. */
    long (*read_body)(void *ud, sl_h2c_stream_t *st, uint8_t *buf, size_t len, bool *eof);
    /** The peer's SETTINGS arrived: its SETTINGS_MAX_CONCURRENT_STREAMS. */
    void (*on_settings)(void *ud, uint32_t max_streams);
    /** A GOAWAY: no new stream; nghttp2 closes the streams above last_id as refused. */
    void (*on_goaway)(void *ud, int32_t last_id, uint32_t code);
} sl_h2c_ops_t;

/** How a session is made; read by sl_h2c_init. */
typedef struct {
    void *mem;                    /**< nghttp2_mem * to allocate with; NULL: malloc */
    bool manual_window;           /**< windows given back by sl_h2c_consume (see above) */
    uint32_t stream_window;       /**< SETTINGS_INITIAL_WINDOW_SIZE sent; 0: nghttp2's 65535 */
    uint32_t conn_window;         /**< the connection's receive window; 0: 65535 */
    uint32_t assume_max_streams;  /**< the peer's concurrent streams before its SETTINGS; 0: nghttp2's */
    uint32_t max_head_bytes;      /**< each header block of a response (a 1xx head, the head, the
                                       trailers), counted as head_bytes; past it the stream is
                                       reset (head_too_big). 0: no limit */
} sl_h2c_opts_t;

/** A session; embed it, never copy it. */
typedef struct {
    nghttp2_session *ss;
    const sl_h2c_ops_t *ops;
    void *ud;
    int32_t last_id;      /**< a GOAWAY's last-stream-id; INT32_MAX before one */
    int32_t cur_id;       /**< the stream whose header block is being received (0: none) ... */
    sl_h2c_stream_t *cur; /**< ... looked up once per block, not once per field */
    uint32_t max_head_bytes;
    uint8_t manual_window;
} sl_h2c_t;

/** Makes the session: SETTINGS (push disabled, the stream window) and the connection's
 *  window wait in its output, after the connection preface nghttp2 writes first.
 *  SL_OK, or SL_ERROR (out of memory) with nothing to fini. `ops` is borrowed for the
 *  session's life. */
int sl_h2c_init(sl_h2c_t *c, const sl_h2c_opts_t *o, const sl_h2c_ops_t *ops, void *ud);
/** Frees the session; its streams are forgotten without an op (no on_close). */
void sl_h2c_fini(sl_h2c_t *c);

/* The calls below are thin over nghttp2 and made per request on the proxy path: inline. */

/** Submits a request on the zeroed stream st: `nva` (pseudo-headers first; borrowed for the
 *  call, HPACK copies it), with a body read through ops->read_body when `body`, else
 *  END_STREAM on the HEADERS. The stream id (st->id), or SL_ERROR. */
int32_t sl_h2c_submit(sl_h2c_t *c, sl_h2c_stream_t *st, const nghttp2_nv *nva, size_t n, bool body);

/** The stream's body has more (or its end): read_body is asked again. */
static inline void sl_h2c_resume(sl_h2c_t *c, sl_h2c_stream_t *st) {
    if (st->deferred && st->id && !st->closed) {
        st->deferred = 0;
        nghttp2_session_resume_data(c->ss, st->id);
    }
}

/** Gives back `n` body bytes to the stream's window (manual_window; ignored when closed). */
static inline void sl_h2c_consume(sl_h2c_t *c, sl_h2c_stream_t *st, size_t n) {
    if (!st->closed && c->manual_window) nghttp2_session_consume_stream(c->ss, st->id, n);
}

/** Resets a submitted stream that is still open with `code` (an RST_STREAM). */
static inline void sl_h2c_reset(sl_h2c_t *c, sl_h2c_stream_t *st, uint32_t code) {
    if (st->id && !st->closed) nghttp2_submit_rst_stream(c->ss, NGHTTP2_FLAG_NONE, st->id, code);
}

/** The user abandons the stream: reset (CANCEL) unless both sides have ended already; it
 *  stays nghttp2's until it closed (on_close). */
static inline void sl_h2c_cancel(sl_h2c_t *c, sl_h2c_stream_t *st) {
    if (!st->id || st->closed) return;
    if (!nghttp2_session_get_stream_local_close(c->ss, st->id) || !st->remote_done)
        nghttp2_submit_rst_stream(c->ss, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
}

/** The driver forgets an open stream now: no op names it again (its user frees it). */
static inline void sl_h2c_forget(sl_h2c_t *c, sl_h2c_stream_t *st) {
    if (c->cur == st) c->cur = NULL, c->cur_id = 0;
    if (c->ss && st->id && !st->closed) nghttp2_session_set_stream_user_data(c->ss, st->id, NULL);
}

/** The transport under the session failed: the stream counts as ended and closed, and
 *  nothing goes to nghttp2 for it any more. */
static inline void sl_h2c_stream_gone(sl_h2c_stream_t *st) {
    st->closed = 1;
    st->remote_done = 1;
}

/** A GOAWAY (error `code`) is submitted: no new stream on either side. */
static inline void sl_h2c_terminate(sl_h2c_t *c, uint32_t code) { nghttp2_session_terminate_session(c->ss, code); }

/** Bytes read from the peer. SL_OK, or SL_ERROR with *why (nghttp2's static text): the
 *  session is broken. The ops were called for what the bytes held. */
static inline int sl_h2c_feed(sl_h2c_t *c, const char *data, size_t len, const char **why) {
    ssize_t rv = nghttp2_session_mem_recv(c->ss, (const uint8_t *)data, len);
    if (SL_LIKELY(rv >= 0)) return SL_OK;
    *why = nghttp2_strerror((int)rv);
    return SL_ERROR;
}

/** Hands what the session has to send to ops->send until it has nothing or send says
 *  SL_EAGAIN. SL_OK, or SL_ERROR with *why. */
static inline int sl_h2c_send(sl_h2c_t *c, const char **why) {
    int rv = nghttp2_session_send(c->ss);
    if (SL_LIKELY(rv == 0)) return SL_OK;
    *why = nghttp2_strerror(rv);
    return SL_ERROR;
}

/** Whether the session still reads, or has something to write; neither: it is over
 *  (a GOAWAY with no stream left, or a fatal error). */
static inline bool sl_h2c_want_read(const sl_h2c_t *c) { return nghttp2_session_want_read(c->ss); }
static inline bool sl_h2c_want_write(const sl_h2c_t *c) { return nghttp2_session_want_write(c->ss); }

/** A stream that did not reach the peer's application for sure: never submitted, or above
 *  the last-stream-id of a GOAWAY. */
static inline bool sl_h2c_unseen(const sl_h2c_t *c, const sl_h2c_stream_t *st) {
    return !st->id || st->id > c->last_id;
}

/** An HTTP/2 error code's name ("CANCEL", "REFUSED_STREAM", ...). */
static inline const char *sl_h2c_code_text(uint32_t code) { return nghttp2_http2_strerror(code); }

#endif
