/* tls.h — TLS sessions over libuv TCP streams, on worker threads: a listener's
 * connections (server) and connections to upstream targets and plugin HTTP calls (client).
 *
 * A session starts from a context built with the config (config/tls_ctx.h: a listener's
 * sl_tls_server_t, a target's sl_tls_client_t); this header includes that one, so code
 * that opens sessions sees both.
 *
 * Sessions. sl_tls_t wraps a connected uv_tcp_t with libuv's own stream contract, so the
 * owner's read and write code stays the same: sl_tls_read_start(t, alloc_cb, read_cb)
 * delivers plaintext into the owner's buffers through the owner's callbacks (nread > 0,
 * 0 for "nothing now", UV_EOF, or an error), and sl_tls_write() has sl_outq_write's
 * contract. Ciphertext moves through a BIO of sluice's own that reads from and writes to
 * buffers taken from the worker's block pool only while bytes are in flight, so an idle
 * session holds no buffer of ours. While a TLS session is attached, the stream's `data`
 * points to it; sl_tls_close() gives the owner its `data` back before the owner closes
 * the handle, and no callback reaches the owner after it.
 */
#ifndef SL_TLS_H
#define SL_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/block.h"
#include "base/list.h"
#include "config/tls_ctx.h" /* the contexts a session starts from */
#include "sluice.h"          /* sl_client_cert_t */

typedef struct sl_tls_s sl_tls_t;

/** Sessions waiting to deliver bytes already decrypted or buffered (one per worker loop):
 *  a read restarted with bytes in hand is served from the loop, never re-entrantly. */
typedef struct {
    uv_idle_t idle;
    sl_list_t head; /**< sessions (sl_tls_t) to deliver on the loop's next turn, first come first */
    sl_list_t run;  /**< what pump_cb is delivering now (head collects the next turn's) */
    sl_blockpool_t *blocks;
} sl_tls_pump_t;

void sl_tls_pump_init(sl_tls_pump_t *p, uv_loop_t *loop, sl_blockpool_t *blocks);
/** Closes the pump's handle (the loop is ending). */
void sl_tls_pump_close(sl_tls_pump_t *p);

/** A server session on an accepted stream; NULL when out of memory. */
sl_tls_t *sl_tls_accept(sl_tls_server_t *srv, uv_stream_t *s, sl_tls_pump_t *pump);
/** A client session on a connected stream. Call sl_tls_handshake() before anything else.
 *  `name` (NULL: the context's sni or IP) is the server name sent and verified: a DNS
 *  name, or an IP literal verified against the certificate's IP addresses. */
sl_tls_t *sl_tls_connect(sl_tls_client_t *cli, uv_stream_t *s, sl_tls_pump_t *pump, const char *name);

/** Client: runs the handshake; done(t, 0) once established, done(t, <0) on failure
 *  (sl_tls_error() says why). Called at most once, never from inside this call. */
int sl_tls_handshake(sl_tls_t *t, void (*done)(sl_tls_t *t, int status));
/** Server: called once when the handshake completes (the owner re-arms its timers). */
void sl_tls_on_established(sl_tls_t *t, void (*cb)(sl_tls_t *t));

/** Hands the session bytes already read from its socket (what followed a PROXY header). */
int sl_tls_feed(sl_tls_t *t, const char *p, size_t n);
int sl_tls_read_start(sl_tls_t *t, uv_alloc_cb alloc_cb, uv_read_cb read_cb);
void sl_tls_read_stop(sl_tls_t *t);
/** Encrypts bufs and writes them: 1 when the socket took everything at once, 0 when a
 *  write is in flight (cb(wr, status) follows, wr->handle set to the stream), <0 on error. */
int sl_tls_write(sl_tls_t *t, uv_write_t *wr, const uv_buf_t *bufs, unsigned n, uv_write_cb cb);
/** Half-close: close_notify, then the socket's write side is shut down once every byte
 *  before it was written; cb(req, status) as uv_shutdown's. Reading goes on. */
int sl_tls_shutdown_write(sl_tls_t *t, uv_shutdown_t *req, uv_shutdown_cb cb);
/** The owner is about to uv_close the stream: sends close_notify when the session is sound
 *  (best effort, without waiting), restores the stream's `data`; frees the session now,
 *  when its own write ends, or (called from inside one of its callbacks) when that returns. */
void sl_tls_close(sl_tls_t *t);

/** The owner resets the connection: sl_tls_close then sends no close_notify (a truncated
 *  stream must not end the way a whole one does). */
void sl_tls_skip_close_notify(sl_tls_t *t);

bool sl_tls_established(const sl_tls_t *t);
bool sl_tls_session_reused(const sl_tls_t *t);
/** Why the session failed (handshake or record error), or "". */
const char *sl_tls_error(const sl_tls_t *t);
/** Server, before its handshake: the client's first bytes were an HTTP request line's
 *  (an upper-case method token, then a space), not a TLS record: plain HTTP on a TLS port. */
bool sl_tls_plain_http(const sl_tls_t *t);
/** The server name the client asked for (SNI), or NULL. */
const char *sl_tls_servername(const sl_tls_t *t);
/** Whether ALPN chose h2 (an HTTP/2 upstream's handshake). */
bool sl_tls_alpn_h2(const sl_tls_t *t);
/** The owner's pointer, as given to the stream's `data` before the session attached. */
void *sl_tls_owner(const sl_tls_t *t);

/* ---- the client's certificate (a listener's tls.client_auth) ---- */

/** A client certificate with its verification result, as a connection keeps it: taken
 *  from an established server session, owned by the connection, outliving the session
 *  (an abandoned HTTP/2 stream's log phase runs after the TLS session ended). Worker
 *  thread only. */
typedef struct sl_tls_peer_s sl_tls_peer_t;

/** The certificate the client sent, or NULL (none sent, or out of memory). */
sl_tls_peer_t *sl_tls_peer_take(sl_tls_t *t);
/** Fills `out` with the certificate's fields (made into text on the first call, kept with
 *  the peer): SL_OK, or SL_ERROR when out of memory. Pointers are valid while p is. */
int sl_tls_peer_describe(sl_tls_peer_t *p, sl_client_cert_t *out);
/** NULL is fine. */
void sl_tls_peer_free(sl_tls_peer_t *p);

#endif
