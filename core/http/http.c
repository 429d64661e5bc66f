/* http.c — the HTTP layer's entry points for the worker (http.h). */
#include "http/http.h"

#include <stdlib.h>

#include "http/conn.h"
#include "http/h2_up.h"
#include "http/request.h"
#include "http/upconn.h"

void sl_http_on_accept(uv_stream_t *server, int status) { sl__conn_on_accept(server, status); }

void sl_http_drain(sl_worker_t *w) {
    sl__cache_bell_close(w);
    sl__conn_close_idle(w);
    sl__pool_close_all(w);
    sl__h2up_drain(w);
}

void sl_http_trim(sl_worker_t *w, uint32_t keep) {
    while (w->nfree_reqs > keep) {
        sl_req_t *r = w->free_reqs;
        w->free_reqs = r->free_next;
        w->nfree_reqs--;
        free(r);
    }
}

void sl_http_free(sl_worker_t *w) { sl_http_trim(w, 0); }
