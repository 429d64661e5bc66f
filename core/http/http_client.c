/* http_client.c — sluice.http.request and the detached senders, on the worker's loop, over
 * the core's one HTTP/1.1 client (client/client.h).
 *
 * A plugin's call: its coroutine yields while the client resolves, connects, writes the
 * request Lua built and validated, and reads the response (one timer bounds the whole);
 * on_done wakes the request, and Lua reads the outcome through sl_ffi_http_result and
 * sl_ffi_http_header_at before sl_ffi_http_done releases the call. The request holds a
 * small wait object of its own; the client's state goes once its handles are closed, so
 * a request that ends first only closes it (cancel_call).
 *
 * Detached (sl_http_send, http_client.h): the core's own fire-and-forget senders (the
 * mirror plugin's copies, http-logger's batches) get a C callback instead of a wakeup, and
 * the response body is read and dropped.
 */
#include <stdio.h>
#include <stdlib.h>

#include "http/http_client.h"

#include "client/client.h"
#include "http/request.h"
#include "sluice.h"

typedef struct {
    sl_wait_t base;
    sl_client_t *c;
    int status;
    const char *err; /**< the client's text: valid until sl_client_close */
    uint8_t finished;
} sl_http_call_t;

static sl_http_call_t *call_of(sl_req_t *r) {
    return r->wait && r->wait->kind == SL_WAIT_HTTP ? SL_CONTAINER_OF(r->wait, sl_http_call_t, base) : NULL;
}

/* The exchange is over: wakes the waiting plugin, which reads the result and releases the
 * call. Nothing may touch hc after the wakeup: the request may have ended inside it. */
static void call_done(void *ud, int status, const char *err) {
    sl_http_call_t *hc = ud;
    hc->finished = 1;
    hc->status = status;
    hc->err = err;
    sl__req_wakeup(hc->base.r);
}

static void cancel_call(sl_wait_t *wt) {
    sl_http_call_t *hc = SL_CONTAINER_OF(wt, sl_http_call_t, base);
    sl_client_close(hc->c);
    free(hc);
}

/* The https context of a call: the worker's (system trust store, verified or not), or a
 * context of its own for a `ca` file (*owned). NULL with *err. */
static sl_tls_client_t *https_context(sl_worker_t *w, int verify, const char *ca, bool *owned, const char **err) {
    static __thread char msg[600];
    sl_tls_target_conf_t tc = {.verify = verify != 0, .ca = (char *)ca, .ca_path = (char *)ca};
    sl_tls_client_t *ctx;
    *owned = ca && *ca && verify;
    if (*owned) {
        if (!(ctx = sl_tls_client_build(&tc, NULL, msg, sizeof msg))) *err = msg;
        return ctx;
    }
    tc.ca = tc.ca_path = NULL;
    sl_tls_client_t **slot = &w->http_tls[verify ? 1 : 0];
    if (!*slot && !(*slot = sl_tls_client_build(&tc, NULL, msg, sizeof msg))) *err = msg;
    return *slot;
}

/* host[0..host_len) as a C string in name[256]; false when it does not fit or the port is
 * out of range. */
static bool endpoint(char name[256], const char *host, size_t host_len, int port, const char **err) {
    if (host_len == 0 || host_len >= 256 || port < 1 || port > 65535) {
        *err = "bad host or port";
        return false;
    }
    memcpy(name, host, host_len);
    name[host_len] = 0;
    return true;
}

int sl_ffi_http_request(sl_req_t *r, const char *host, size_t host_len, int port, const char *req,
                        size_t req_len, int is_head, double timeout_ms, double max_body, int tls, int verify,
                        const char *ca, const char **err) {
    if (r->lua.phase != SL_PHASE_REWRITE && r->lua.phase != SL_PHASE_ACCESS) {
        *err = "http.request works in rewrite and access only";
        return SL_ERROR;
    }
    if (r->wait) {
        *err = "already waiting";
        return SL_ERROR;
    }
    char name[256];
    if (!endpoint(name, host, host_len, port, err)) return SL_ERROR;
    sl_client_req_t rq = {.loop = &r->w->loop,
                          .host = name,
                          .port = (uint16_t)port,
                          .req = req,
                          .req_len = req_len,
                          .head_req = is_head != 0,
                          .timeout_ms = timeout_ms > 0 ? (uint64_t)timeout_ms : 1,
                          .max_body = max_body > 0 ? (size_t)max_body : 0,
                          .on_done = call_done};
    if (tls) {
        if (!(rq.tls = https_context(r->w, verify, ca, &rq.tls_owned, err))) return SL_ERROR;
        rq.pump = &r->w->tls_pump;
        rq.tls_name = name;
    }
    sl_http_call_t *hc = calloc(1, sizeof(*hc));
    if (!hc) {
        if (rq.tls_owned) sl_tls_client_free(rq.tls);
        *err = "out of memory";
        return SL_ERROR;
    }
    rq.ud = hc;
    if (!(hc->c = sl_client_start(&rq, err))) { /* failed at once: no yield */
        free(hc);
        return SL_ERROR;
    }
    hc->base.r = r;
    hc->base.kind = SL_WAIT_HTTP;
    hc->base.cancel = cancel_call;
    r->wait = &hc->base;
    return SL_OK;
}

int sl_http_send(sl_worker_t *w, const char *host, size_t host_len, int port, const char *req, size_t req_len,
                 uint64_t timeout_ms, sl_http_done_fn done, void *ud, const char **err) {
    char name[256];
    if (!endpoint(name, host, host_len, port, err)) return SL_ERROR;
    sl_client_req_t rq = {.loop = &w->loop,
                          .host = name,
                          .port = (uint16_t)port,
                          .req = req,
                          .req_len = req_len,
                          .timeout_ms = timeout_ms ? timeout_ms : 1,
                          .drop_body = true,
                          .oneshot = true,
                          .ud = ud,
                          .on_done = done};
    return sl_client_start(&rq, err) ? SL_OK : SL_ERROR;
}

int sl_ffi_http_result(sl_req_t *r, int *status, int *nheaders, const char **body, size_t *body_len,
                       const char **err) {
    sl_http_call_t *hc = call_of(r);
    if (!hc || !hc->finished) {
        *err = "no finished http call";
        return SL_ERROR;
    }
    if (hc->err) {
        *err = hc->err;
        return SL_ERROR;
    }
    *status = hc->status;
    *nheaders = sl_client_head(hc->c)->nheaders;
    *body = sl_client_body(hc->c, body_len);
    return SL_OK;
}

int sl_ffi_http_header_at(sl_req_t *r, int i, const char **name, size_t *name_len, const char **value,
                          size_t *value_len) {
    sl_http_call_t *hc = call_of(r);
    const sl_h1_head_t *head = hc ? sl_client_head(hc->c) : NULL;
    if (!head || i < 0 || i >= head->nheaders) return SL_ERROR;
    const sl_h1_header_t *h = &head->headers[i];
    *name = h->name.p;
    *name_len = h->name.len;
    *value = h->value.p ? h->value.p : "";
    *value_len = h->value.len;
    return SL_OK;
}

void sl_ffi_http_done(sl_req_t *r) {
    sl_http_call_t *hc = call_of(r);
    if (!hc) return;
    r->wait = NULL;
    sl_client_close(hc->c);
    free(hc);
}
