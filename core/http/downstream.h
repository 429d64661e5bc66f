/* downstream.h — the seam between a request and the client side it came from.
 *
 * A request (request.h) never touches the connection it arrived on: it reads its body,
 * sends its response and ends through these operations, and the downstream calls the
 * request back through the sl__req_* entry points of request.h. HTTP/1 (conn.c) is the
 * first implementation; an HTTP/2 stream is meant to be the second, so routing, plugins,
 * balancers, retries and logs serve both unchanged (h2o's lib/core/proxy.c has the same
 * shape: the proxy talks to a generator and a client, never to a socket).
 *
 * Ownership: the downstream owns the request it serves (`req`) from its head to the end
 * of its response. A request that calls an operation which may end it (abort, write
 * errors, send_continue) checks `ds->req == r` afterwards: a downstream whose request
 * was abandoned sets `req` to NULL before the request is freed.
 */
#ifndef SL_DOWNSTREAM_H
#define SL_DOWNSTREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/common.h"
#include "base/wbuf.h"
#include "config/config.h"
#include "net/outq.h"

typedef struct sl_req_s sl_req_t;
typedef struct sl_downstream_s sl_downstream_t;

/** A body piece reader: 0 to go on, non-zero to stop (the piece was refused). */
typedef int (*sl_body_cb)(void *ud, const char *p, size_t n);

typedef struct {
    /* ---- the request body ---- */
    /** Whether body bytes the request has not read yet are buffered. */
    bool (*body_buffered)(sl_downstream_t *d);
    /** Hands buffered body bytes to cb(ud, ...), at most `room` pieces: SL_OK (more may
     *  follow), SL_DONE (the body ended), SL_ERROR (malformed, or cb refused a piece). */
    int (*read_body)(sl_downstream_t *d, uint32_t room, sl_body_cb cb, void *ud);
    /** Nothing buffered and more body is due: read on (sl__req_on_client_data follows). */
    void (*wait_body)(sl_downstream_t *d);
    /** Stops reading from the client (what it sends meanwhile stays in the kernel). */
    void (*pause)(sl_downstream_t *d);
    /** Tells the client to send its body (HTTP/1: 100 Continue). False when it cannot be
     *  said; the downstream is then aborted. */
    bool (*send_continue)(sl_downstream_t *d);

    /* ---- the response ---- */
    /** Queues the response head described by r (r->status and the upstream's r->rhead,
     *  or a gateway answer's content type and length) in r->clq, choosing the body's
     *  framing (r->clq.chunked). SL_OK or SL_ERROR (too large). */
    int (*write_head)(sl_downstream_t *d, sl_req_t *r, sl_str_t ctype, int64_t content_length);
    /** Writes what q holds: 1 written at once, 0 in flight (sl__req_on_written follows),
     *  <0 on error. */
    int (*write)(sl_downstream_t *d, sl_outq_t *q);
    /** (Re)arms the client's inactivity timer; 0 clears it. */
    void (*arm)(sl_downstream_t *d, uint64_t ms);
    /** The request is over (answered, counted, logged): the downstream frees it and goes
     *  on (the next request, idle, or close). */
    void (*finish)(sl_downstream_t *d);
    /** Closes the client side now, abandoning the request (sl__req_abort is called). */
    void (*abort)(sl_downstream_t *d);
} sl_downstream_ops_t;

struct sl_downstream_s {
    const sl_downstream_ops_t *ops;
    sl_req_t *req;                  /**< the request being served, or NULL */
    const sl_listener_conf_t *lc;   /**< the listener it arrived on */
    uint32_t lidx;
    uint8_t closing;                /**< no further request after this one */
    uint8_t secure;                 /**< arrived over TLS */
    uint8_t can_upgrade;            /**< HTTP/1.1: a 101 can turn it into a byte tunnel (tunnel.c) */
    uint8_t trusted;                /**< the peer is one of the listener's trusted_proxies: its
                                         X-Forwarded-Proto/-Host/-Port are kept */
    uint16_t port;                  /**< the port the client connected to (X-Forwarded-Port) */
    uint8_t port_len;               /**< port_text's length */
    char port_text[6];              /**< port as decimal text, made once per connection */
    char peer[48];                  /**< client address as text (X-Forwarded-For, logs) */
    /** mTLS: the certificate the client presented (net/tls.h), owned by the connection
     *  and freed after its last stream; NULL when none (or no tls.client_auth). */
    struct sl_tls_peer_s *client_cert;
};

/** Sets d->port and its text (X-Forwarded-Port), once per connection. */
static inline void sl_downstream_set_port(sl_downstream_t *d, uint16_t port) {
    sl_wbuf_t b = SL_WBUF_BOUNDED(d->port_text, sizeof d->port_text);
    d->port = port;
    sl_wbuf_u64(&b, port);
    d->port_len = (uint8_t)b.len;
}

#endif
