/* client.h — the core's one HTTP/1.1 client: one request, one connection, on any libuv loop.
 *
 * Every HTTP/1.1 request the gateway makes on its own behalf goes through it (who, and on
 * which loop: docs/ARCHITECTURE.md, "The HTTP client").
 *
 * A call resolves its host (libuv's thread pool, only for a name that is not an IP
 * literal; its addresses, up to 4, are tried in turn while a connect fails) or takes the
 * caller's address, connects through net/stream.h (TCP, or TLS when given a context),
 * writes the caller's request bytes, and reads the response with proto/http1.h (the
 * same head validator and body framing as for upstream responses):
 * Content-Length, chunked or close-delimited, interim 1xx skipped. One timer bounds the
 * exchange, whole or (idle_timeout) as silence between reads. The connection is not
 * pooled: a request should say `Connection: close`.
 *
 * Calls run on the thread that owns their loop; nothing here is shared between loops.
 */
#ifndef SL_CLIENT_H
#define SL_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "net/tls.h"
#include "proto/http1.h"

typedef struct sl_client_s sl_client_t;

/** What a call is asked to do; read by sl_client_start, which copies what it keeps. */
typedef struct {
    uv_loop_t *loop;
    /** Where to connect: `addr` when set (port included), else `host` (NUL-terminated: an IP
     *  literal, or a name resolved on libuv's pool) and `port`. */
    const struct sockaddr *addr;
    const char *host;
    uint16_t port;
    /** TLS: the context (NULL: plain TCP), the loop's pump, and the name sent and verified
     *  (NULL: the context's sni or IP). With tls_owned the call frees the context when it
     *  goes (a context built for this call alone). */
    sl_tls_client_t *tls;
    sl_tls_pump_t *pump;
    const char *tls_name;
    bool tls_owned;
    /** The whole request (head and body), copied; with req_borrowed not copied: the bytes
     *  stay the caller's, unchanged, until on_done returned or the call was closed. */
    const char *req;
    size_t req_len;
    bool req_borrowed;
    bool head_req;     /**< a HEAD request: its response has no body */
    bool idle_timeout; /**< timeout_ms bounds silence (connecting, between reads), not the whole */
    bool drop_body;    /**< the body is read and dropped (without on_body) */
    bool oneshot;      /**< the call releases itself after on_done returned */
    uint64_t timeout_ms; /**< 0: no timer */
    size_t max_body;     /**< the body kept whole (no on_body, no drop_body): at most this */
    void *ud;
    /** The final response's head arrived (sl_client_head); optional. It may close the call. */
    void (*on_head)(void *ud, sl_client_t *c);
    /** Body bytes as they come, instead of keeping them; optional. Nonzero fails the call
     *  ("response body refused"); it may close the call. */
    int (*on_body)(void *ud, sl_client_t *c, const char *p, size_t n);
    /** The call ended, exactly once unless closed first, never from inside sl_client_start:
     *  err NULL for a whole response (status its status), else why (status 0; static, or
     *  the call's text, valid until the call is closed). */
    void (*on_done)(void *ud, int status, const char *err);
} sl_client_req_t;

/**
 * Starts a call. Returns it, and on_done follows. NULL with *err (static or thread-local:
 * valid until the next call on this thread) when it failed at once; no callback then, and
 * a tls_owned context was freed.
 */
sl_client_t *sl_client_start(const sl_client_req_t *rq, const char **err);

/** Releases a call (not a oneshot one after on_done): before on_done it is cancelled and
 *  nothing calls back. Safe from inside the call's callbacks. Memory goes once its handles
 *  are closed. */
void sl_client_close(sl_client_t *c);

/** The final response's head once on_head was due (fields valid until close), else NULL. */
const sl_h1_head_t *sl_client_head(const sl_client_t *c);

/** The body kept whole (borrowed until close; "" when none). */
const char *sl_client_body(const sl_client_t *c, size_t *len);

/** Re-arms the timer for ms from now (0: stops it, for good: a stream that has no end). */
void sl_client_set_timeout(sl_client_t *c, uint64_t ms);

#endif
