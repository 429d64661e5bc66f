/* http.h — the HTTP layer as the worker sees it: accept, drain, free (http.c). The worker
 * calls down into these; nothing in http/ calls the worker back. */
#ifndef SL_HTTP_H
#define SL_HTTP_H

#include <uv.h>

#include "ctx/worker.h"

/** A listener's accept callback for HTTP listeners (server->data is the listener index). */
void sl_http_on_accept(uv_stream_t *server, int status);
/** Drain: idle client connections close (busy ones after their request, tunnels at
 *  shutdown_timeout) and pooled upstream connections close. */
void sl_http_drain(sl_worker_t *w);
/** After a spike: frees recycled request objects beyond `keep`. */
void sl_http_trim(sl_worker_t *w, uint32_t keep);
/** Frees what the worker's HTTP side keeps between requests (recycled request objects). */
void sl_http_free(sl_worker_t *w);

#endif
