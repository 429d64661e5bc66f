/* stream.h — a connection's byte stream: a TCP socket, with a TLS session over it when the
 * connection has one. The one place where TLS or plain TCP is chosen: its owners (client
 * connections, upstream connections, tunnels, the plugin HTTP client) read, write, shut
 * down and close through it and never ask which it is.
 *
 * Contract (libuv's): reads are delivered to the owner's alloc/read callbacks with the
 * stream's handle as the uv_stream_t (plaintext when TLS); a write returns 1 when
 * everything was taken at once (no callback follows), 0 when it is in flight (the
 * callback follows, with wr->handle the stream's handle) or <0 on error, and a call that
 * fails never calls back. Owned by its connection; worker thread only.
 */
#ifndef SL_STREAM_H
#define SL_STREAM_H

#include <stdbool.h>
#include <uv.h>

#include "net/outq.h"
#include "net/tls.h"

typedef struct {
    uv_tcp_t tcp; /**< first: the handle's address is the stream's (and its owner's) */
    sl_tls_t *tls; /**< the TLS session over tcp, or NULL for plain TCP */
} sl_stream_t;

int sl_stream_read_start(sl_stream_t *s, uv_alloc_cb alloc_cb, uv_read_cb read_cb);
void sl_stream_read_stop(sl_stream_t *s);
/** Writes what q holds (q->writing is set while in flight; q is emptied when taken at once). */
int sl_stream_write(sl_stream_t *s, sl_outq_t *q, uv_write_t *wr, uv_write_cb cb);
/** Writes n buffers (the array may go once the call returns; the bytes stay the caller's
 *  until the callback). */
int sl_stream_writev(sl_stream_t *s, uv_write_t *wr, const uv_buf_t *bufs, unsigned n, uv_write_cb cb);
/** Writes a few bytes now, without a callback (100 Continue, a 408): false when the
 *  socket could not take them all at once. */
bool sl_stream_send(sl_stream_t *s, const char *p, size_t n);
/** Half-close after what was written: a FIN (through TLS, close_notify first). 0 or <0;
 *  cb follows a 0. */
int sl_stream_shutdown(sl_stream_t *s, uv_shutdown_t *req, uv_shutdown_cb cb);
/** Ends the TLS session, if any (close_notify, and no callback of it reaches the owner
 *  afterwards); the owner closes s->tcp itself, with the close callback it needs. */
void sl_stream_end_tls(sl_stream_t *s);

#endif
