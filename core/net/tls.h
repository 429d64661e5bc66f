/* tls.h — TLS for the HTTP path: listeners' certificates chosen by SNI, TLS to upstream
 * targets, and one TLS session over a libuv TCP stream.
 *
 * Contexts. A listener's `tls:` builds one sl_tls_server_t (an SSL_CTX per certificate,
 * the names that select each, the default) when the config is built, so `sluice check`
 * and a reload catch an unreadable file or a key that does not match its certificate,
 * and certificates change with the config generation (a connection keeps the context it
 * was accepted with). A target's `tls:` builds one sl_tls_client_t (verification, CA,
 * SNI, and the last session the target gave, for resumption). Both are immutable after
 * the build apart from the client's session slot (a mutex) and are shared by workers.
 * Session-ticket keys are process-wide: every worker and every generation encrypts with
 * the current key, and a key stays valid for decryption for two rotation periods.
 *
 * Sessions. sl_tls_t wraps a connected uv_tcp_t with libuv's own stream contract, so the
 * owner's read and write code stays the same: sl_tls_read_start(t, alloc_cb, read_cb)
 * delivers plaintext into the owner's buffers through the owner's callbacks (nread > 0,
 * 0 for "nothing now", UV_EOF, or an error), and sl_tls_write() has sl__outq_write's
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

typedef struct sl_tls_server_s sl_tls_server_t;
typedef struct sl_tls_client_s sl_tls_client_t;
typedef struct sl_tls_s sl_tls_t;

/** One `certificates:` entry of a listener's `tls:`. */
typedef struct {
    char *cert, *key;          /**< as written */
    char *cert_path, *key_path;/**< resolved against the config file's folder */
    char **sni; size_t nsni;   /**< names (exact or "*.suffix"); none: the certificate's own */
    bool is_default;           /**< `default: true` (else the first entry is the default) */
    int line, col;
} sl_tls_cert_conf_t;

enum { SL_TLS_V12 = 0, SL_TLS_V13 = 1 };

/** A listener's `tls:`. */
typedef struct {
    sl_tls_cert_conf_t *certs; size_t ncerts;
    int min_version;           /**< SL_TLS_V12 (default) or SL_TLS_V13 */
    char *ciphers;             /**< TLS 1.2 cipher list; NULL: the built-in AEAD list */
    bool session_tickets;      /**< default true */
    uint64_t handshake_timeout_ms; /**< default 10s */
    sl_tls_server_t *rt;       /**< built contexts, owned */
    int line, col;
} sl_tls_listener_conf_t;

/** A target's `tls:`. */
typedef struct {
    bool verify;               /**< default true */
    char *ca, *ca_path;        /**< NULL: the system's trust store */
    char *sni;                 /**< server name sent and verified; NULL: the address's IP is verified */
    sl_tls_client_t *rt;       /**< built context, owned */
    int line, col;
} sl_tls_target_conf_t;

/** Builds a listener's contexts. NULL with a message in err (and *bad set to the index of
 *  the certificates entry at fault, or -1). */
sl_tls_server_t *sl_tls_server_build(const sl_tls_listener_conf_t *c, char *err, size_t errlen, int *bad);
void sl_tls_server_free(sl_tls_server_t *s);
/** Builds a target's client context; `ip` is the target's address text without port. */
sl_tls_client_t *sl_tls_client_build(const sl_tls_target_conf_t *c, const char *ip, char *err, size_t errlen);
void sl_tls_client_free(sl_tls_client_t *c);

/** Sessions waiting to deliver bytes already decrypted or buffered (one per worker loop):
 *  a read restarted with bytes in hand is served from the loop, never re-entrantly. */
typedef struct {
    uv_idle_t idle;
    sl_tls_t *head;
    sl_tls_t *run;  /**< what pump_cb is delivering now (head collects the next turn's) */
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

bool sl_tls_established(const sl_tls_t *t);
bool sl_tls_session_reused(const sl_tls_t *t);
/** Why the session failed (handshake or record error), or "". */
const char *sl_tls_error(const sl_tls_t *t);
/** The server name the client asked for (SNI), or NULL. */
const char *sl_tls_servername(const sl_tls_t *t);
/** The owner's pointer, as given to the stream's `data` before the session attached. */
void *sl_tls_owner(const sl_tls_t *t);

#endif
