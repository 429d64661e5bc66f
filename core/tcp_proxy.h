/* tcp_proxy.h — the L4 path: `protocol: tcp` listeners and their sessions (DESIGN.md,
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
 * Ownership: the listener sockets handed to sl__tcp_listen, the sessions and the pipe
 * pool belong to the worker; everything here runs on the worker's thread, except
 * sl__tcp_listen, called by sl_worker_start before the thread runs its loop.
 */
#ifndef SL_TCP_PROXY_H
#define SL_TCP_PROXY_H

#include <stddef.h>

typedef struct sl_worker_s sl_worker_t;

/** Serves tcp listener `lidx` of the worker's config on the bound, listening,
 *  non-blocking socket `fd`, which the worker now owns (closed at drain). 0, or a
 *  negative libuv error. */
int sl__tcp_listen(sl_worker_t *w, size_t lidx, int fd);

/** Drain (shutdown or a reload's retirement): stops accepting and closes the listening
 *  sockets; open sessions go on for the config's shutdown_timeout, then are closed. The
 *  worker's TCP handles are all closed once its last session ends. */
void sl__tcp_drain(sl_worker_t *w);

/** After the worker's loop ended: releases the session freelist and the pipe pool. */
void sl__tcp_free(sl_worker_t *w);

#endif
