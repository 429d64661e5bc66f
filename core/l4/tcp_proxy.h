/* tcp_proxy.h — the L4 path: `protocol: tcp` listeners and their sessions (the design,
 * "TCP (L4) path").
 *
 * A session joins one client connection to one upstream target chosen by the upstream's
 * balancer and its TCP-layer breaker, and moves bytes both ways: by splice(2) through a
 * pipe from the worker's pool while a direction streams, by read/write through a block
 * otherwise (and always with `splice: off`). Each direction ends on its own (EOF becomes
 * shutdown(SHUT_WR) toward the other side); the session ends when both have, on idle
 * timeout, or on an error. PROXY protocol headers are sent to the upstream and read
 * from trusted peers (proxy_protocol.h).
 *
 * Before it connects, a session may preread: the PROXY header (accept_proxy_protocol)
 * and the TLS ClientHello (sni_routes, sni.h) are read into the session's block, which
 * then goes to the upstream first; the listener's Lua preread chain (`plugins:`,
 * lua_host.h) runs once over a struct sl_session_s view and may pick the upstream, an
 * address, or close. Without any of these a session connects at accept.
 *
 * Ownership: the listener sockets handed to sl__tcp_listen, the sessions and the pipe
 * pool belong to the worker; everything here runs on the worker's thread, except
 * sl__tcp_listen, called by sl_worker_start before the thread runs its loop.
 */
#ifndef SL_TCP_PROXY_H
#define SL_TCP_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proxy_protocol.h"

typedef struct sl_worker_s sl_worker_t;

/** Where a session goes when a preread plugin named an address, not an upstream. */
#define SL_TCP_DIRECT (-2)

/**
 * What a tcp listener's preread plugins see of a session and may change (sluice.session,
 * sluice.upstream.set; sluice.h's opaque sl_session_t). It lives on the worker's stack for
 * the one synchronous call of sl_lua_preread: a pointer to it is never kept.
 */
struct sl_session_s {
    sl_worker_t *w;
    uint32_t lidx;
    int cfd;                     /**< the client's socket (session.close's message goes there) */
    const sl_sockaddr_t *peer;   /**< the client, or the source its PROXY header gave */
    const char *sni;             /**< the ClientHello's server name (borrowed), NULL when none */
    size_t sni_len;
    int upstream;                /**< in: the sni_routes or listener choice (-1: none); out: the
                                      plugins' choice, or SL_TCP_DIRECT with `addr` */
    sl_sockaddr_t addr;          /**< upstream.set("IP:PORT") */
    char addr_text[64];
    bool closed;                 /**< session.close() was called */
};

/** Serves tcp listener `lidx` of the worker's config on the bound, listening,
 *  non-blocking socket `fd`, which the worker now owns (closed at drain). 0, or a
 *  negative libuv error. */
int sl__tcp_listen(sl_worker_t *w, size_t lidx, int fd);

/** Drain (shutdown or a reload's retirement): stops accepting and closes the listening
 *  sockets; open sessions go on for the config's shutdown_timeout, then are closed. The
 *  worker's TCP handles are all closed once its last session ends. */
void sl__tcp_drain(sl_worker_t *w);

/** Draining: closes the open sessions now, as shutdown_timeout would (resets where bytes
 *  still wait). No-op when none is open or the worker is not draining. */
void sl__tcp_cut(sl_worker_t *w);

/** After the worker's loop ended: releases the session freelist and the pipe pool. */
void sl__tcp_free(sl_worker_t *w);

#endif
