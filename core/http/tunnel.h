/* tunnel.h — an HTTP/1.1 client connection and an upstream connection joined byte for
 * byte after a 101 (tunnel.c). Internal: sl__ names. The proxy starts it; from then on
 * the tunnel takes the client connection over from its HTTP/1 parser (conn.h's
 * takeover) and the upstream connection from the proxy (its callbacks). */
#ifndef SL_TUNNEL_H
#define SL_TUNNEL_H

#include <sys/types.h>

typedef struct sl_req_s sl_req_t;

/** The upstream answered 101 to r's upgrade and the 101 head is in r->clq: switch the
 *  client connection and r->tun.u into a byte tunnel. Bytes already buffered on either side
 *  go first. The request object owns the tunnel until sl__req_abort ends it. Only on
 *  a downstream that can upgrade (r->ds->can_upgrade: an HTTP/1 connection). */
void sl__tunnel_start(sl_req_t *r);
/** The tunnel ends (sl__req_abort): its upstream connection r->tun.u closes. */
void sl__tunnel_close_upstream(sl_req_t *r);

#endif
