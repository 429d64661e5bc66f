/* http_client.h — the core's own HTTP/1.1 requests on a worker's loop, detached from any
 * client request: the core's one client (client/client.h), as sluice.http.request uses it
 * (http_client.c), for senders that nothing waits for (the mirror plugin's copies,
 * http-logger's batches).
 */
#ifndef SL_HTTP_CLIENT_H
#define SL_HTTP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "ctx/worker.h"

/** Called once when a detached exchange is over, on the worker's thread: status is the
 *  response's (its body was read and dropped), or 0 with err (static or the call's text,
 *  valid during the callback: "timeout", "connect: ...", ...). */
typedef void (*sl_http_done_fn)(void *ud, int status, const char *err);

/** Sends req[0..req_len) (a whole HTTP/1.1 request with `Connection: close`; copied) to
 *  host:port (an IP literal, or a name resolved on libuv's pool) and reads the answer
 *  within timeout_ms. SL_OK: done(ud, ...) is called later, exactly once. SL_ERROR with
 *  *err (static or thread-local: valid until the next call): failed at once, no callback.
 *  Worker thread. */
int sl_http_send(sl_worker_t *w, const char *host, size_t host_len, int port, const char *req, size_t req_len,
                 uint64_t timeout_ms, sl_http_done_fn done, void *ud, const char **err);

#endif
