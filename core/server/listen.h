/* listen.h — the listening sockets of one listener, opened the same way at start and reload. */
#ifndef SL_LISTEN_H
#define SL_LISTEN_H

#include <stddef.h>
#include <sys/socket.h>

#include "base/addr.h"
#include "config/config.h"

/**
 * Opens listener `lc`'s `n` listening sockets, one per worker, all bound to its address with
 * SO_REUSEPORT so the kernel spreads connections across workers. A port 0 is resolved by the
 * first bind and reused for the rest. Every socket carries the same options (TCP_NODELAY
 * among them: accepted sockets inherit it, and the TCP proxy relies on that). fds[0..n) get
 * the descriptors (owned by the caller); text (textlen bytes) gets the bound address, real
 * port included. Returns SL_OK, or SL_ERROR with the reason in err (errlen bytes) and
 * nothing left open. Used by start (server.c) and reload (reload.c) alike. Main thread.
 */
int sl__listen_open(const sl_listener_conf_t *lc, int n, int *fds, char *text, size_t textlen,
                    char *err, size_t errlen);

#endif
