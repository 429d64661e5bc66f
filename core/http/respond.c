/* respond.c — answers the gateway makes itself (errors, a plugin's exit, the 500 of a
 * plugin that raised), the body_filter over response pieces, and reading a request body
 * whole when a plugin or a replayable retry needs it (request.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/wbuf.h"
#include "http/request.h"
#include "proto/grpc_status.h"

/* A body a plugin asked for is buffered whole, up to this (or the listener's max_body). */
#define SL_BUFFER_MAX_BODY (8u << 20)

/* Runs the route's body_filter chain over one piece of the response body; *out is what
 * the client gets (the piece itself when no plugin replaced it). The output stays valid
 * until the next call: callers queue one filtered piece at a time. */
int sl__req_filter_piece(sl_req_t *r, const char *p, size_t n, bool eof, sl_str_t *out) {
    r->bf_in = p;
    r->bf_in_len = n;
    r->bf_eof = eof;
    r->bf_set = 0;
    if (sl__req_phase(r, SL_PHASE_BODY_FILTER) == SL_ERROR) {
        r->bf_failed = 1;
        return SL_ERROR;
    }
    *out = r->bf_set ? (sl_str_t){r->bf_buf, r->bf_len} : (sl_str_t){p, n};
    return SL_OK;
}

/* ---- gateway-made answers ---- */

/* A filter failed on a plugin's or the gateway's answer: a plain 500 replaces it, without
 * the header edits made for the answer it replaces. */
static void respond_plain_500(sl_req_t *r, bool close) {
    static const char body[] = "{\"error\":\"plugin error\"}\n";
    memset(&r->resp_edits, 0, sizeof(r->resp_edits));
    r->grpc.answer = 0; /* its grpc-status went with the edits: the 500 becomes UNKNOWN */
    sl__req_respond(r, 500, SL_LIT("application/json"), SL_LIT(body), close);
}

/* ---- gateway-made answers to gRPC requests ---- */

/* The longest grpc-message the gateway makes (after percent-encoding). */
#define SL_GRPC_MESSAGE_MAX 512

bool sl__req_is_grpc(const sl_req_t *r) { return sl_grpc_is_ctype(sl__req_header_value(r, "content-type")); }

void sl__req_grpc_status(sl_req_t *r, sl_str_t value) {
    int code = sl_grpc_code_parse(value);
    if (code >= 0) sl_metrics_grpc(&r->w->metrics, r->route, code);
}

static const sl_h1_header_t *find_field(const sl_h1_header_t *f, uint16_t n, const char *lower, size_t len) {
    for (uint16_t i = 0; i < n; i++)
        if (sl_str_ieq(f[i].name, lower, len)) return &f[i];
    return NULL;
}

void sl__req_grpc_passed(sl_req_t *r) {
    const sl_h1_header_t *gs = find_field(r->trailers, r->ntrailers, "grpc-status", 11);
    if (!gs) gs = find_field(r->rhead.headers, r->rhead.nheaders, "grpc-status", 11);
    if (gs) sl__req_grpc_status(r, gs->value);
}

/* Turns a gateway-made answer to a gRPC request into a trailers-only gRPC error: HTTP 200,
 * the gRPC content type, grpc-status (the plugin's own when it set one, else `code`, else
 * the HTTP status mapped) and grpc-message (the plugin's, else the answer's body as text).
 * A gRPC client reads an HTTP error status only as "UNKNOWN/UNAVAILABLE: received http
 * status", and a body as a malformed message: the gateway says what it means instead.
 * Headers plugins set (WWW-Authenticate, Retry-After, X-RateLimit-*) go along as
 * metadata; the Content-Type a JSON exit set is replaced. False when out of memory. */
static bool grpc_error(sl_req_t *r, int status, int code, sl_str_t msg) {
    sl_hdr_edits_t *ed = &r->resp_edits;
    const char *err = NULL;
    sl_str_t ct = sl__req_header_value(r, "content-type");
    /* grpc-web clients want their own type back (the grpc-web plugin's header_filter may
     * still change it); gRPC's variants (+proto) are all application/grpc to a client. */
    sl_str_t rct = ct.len > 20 && sl_str_ieq((sl_str_t){ct.p, 20}, "application/grpc-web", 20) ? ct
                                                                                         : SL_LIT("application/grpc");
    if (sl_edits_set(ed, &r->arena, SL_LIT("content-type"), rct, &err) != SL_OK) return false;
    if (!sl_edits_find(ed, SL_LIT("grpc-status"))) {
        char num[4];
        sl_wbuf_t b = SL_WBUF_BOUNDED(num, sizeof num);
        sl_wbuf_u64(&b, (uint64_t)(code >= 0 ? code : sl_grpc_code_of_http(status)));
        if (sl_edits_set(ed, &r->arena, SL_LIT("grpc-status"), (sl_str_t){num, b.len}, &err) != SL_OK) return false;
        if (!sl_edits_find(ed, SL_LIT("grpc-message"))) {
            while (msg.len && (msg.p[msg.len - 1] == '\n' || msg.p[msg.len - 1] == '\r')) msg.len--;
            if (!msg.len) msg = sl_h1_reason(status);
            char *enc = sl_arena_alloc(&r->arena, SL_GRPC_MESSAGE_MAX);
            if (!enc) return false;
            size_t n = sl_grpc_message_encode(msg, enc, SL_GRPC_MESSAGE_MAX);
            if (n && sl_edits_set(ed, &r->arena, SL_LIT("grpc-message"), (sl_str_t){enc, n}, &err) != SL_OK)
                return false;
        }
    }
    r->grpc.answer = 1;
    return true;
}

/* sl__req_respond, with the gRPC code a gRPC request gets (-1: the status's mapping). */
static void respond(sl_req_t *r, int status, sl_str_t ctype, sl_str_t body, bool close, int grpc_code,
                    sl_str_t grpc_msg) {
    sl_downstream_t *ds = r->ds;
    sl__attempt_abandon(r);
    sl__proxy_drop_upstream(r);
    /* stale_if_error: a failed upstream's answer is replaced by an expired entry */
    if (SL_UNLIKELY(r->cache != NULL) && status >= 500) sl__cache_req_stale(r, &status, &ctype, &body);
    SL_BUG_ON(sl__req_upstream_busy(r)); /* the gateway answers alone */
    r->mode = SL_MODE_LOCAL;
    bool grpc = r->grpc.answer || sl__req_is_grpc(r);
    if (grpc && !r->grpc.answer && status != 200) {
        if (!grpc_error(r, status, grpc_code, grpc_msg)) {
            ds->ops->abort(ds);
            return;
        }
        status = 200;
        ctype = (sl_str_t){NULL, 0};
        body.len = 0;
    }
    r->status = status;
    if ((r->phases & (1u << SL_PHASE_HEADER_FILTER)) && !r->in_header_filter && ds->req == r) {
        r->in_header_filter = 1;
        if (sl__req_phase(r, SL_PHASE_HEADER_FILTER) == SL_ERROR && status != 500) {
            respond_plain_500(r, close);
            return;
        }
    }
    /* A body we did not read to its end cannot be skipped safely: close after answering. */
    if (close || !r->body_done) r->keep_alive = 0;
    if (!r->keep_alive) ds->ops->pause(ds);
    /* 204 and 304 carry no body and no Content-Length, whatever a plugin asked for. */
    bool bodiless = status == 204 || status == 304;
    if (bodiless) body.len = 0;
    /* A gateway-made body is whole: the body_filter chain sees it as one last piece. A
     * filter that fails here can still be answered with a plain 500. */
    if (sl__req_body_filtered(r) && !bodiless && r->head.method_id != HTTP_HEAD && !r->bf_failed && ds->req == r) {
        if (sl__req_filter_piece(r, body.p, body.len, true, &body) != SL_OK && status != 500) {
            respond_plain_500(r, close);
            return;
        }
    }
    if (SL_UNLIKELY(r->debug != NULL)) sl__req_debug_emit(r);
    if (grpc) { /* counted once the answer is final (a failed filter may still replace it) */
        const sl_field_t *gs = sl_edits_find(&r->resp_edits, SL_LIT("grpc-status"));
        if (gs) sl__req_grpc_status(r, gs->value);
    }
    if (ds->ops->write_head(ds, r, ctype, (int64_t)body.len) != SL_OK) {
        ds->ops->abort(ds);
        return;
    }
    if (body.len && r->head.method_id != HTTP_HEAD) sl_outq_add(&r->clq, body.p, body.len);
    sl__req_resp_state(r, SL_RESP_DONE);
    sl__proxy_pump_down(r);
}

void sl__req_respond(sl_req_t *r, int status, sl_str_t ctype, sl_str_t body, bool close) {
    respond(r, status, ctype, body, close, -1, body);
}

void sl__req_respond_error(sl_req_t *r, int status, const char *msg, bool close) {
    char *body = sl_arena_alloc(&r->arena, 128);
    if (!body) {
        r->ds->ops->abort(r->ds);
        return;
    }
    int n = snprintf(body, 128, "{\"error\":\"%s\"}\n", msg);
    /* The gateway's own 504 is its deadline passing (the route's timeout, or the client's
     * grpc-timeout when smaller): DEADLINE_EXCEEDED, not the mapping's UNAVAILABLE. */
    respond(r, status, SL_LIT("application/json"), (sl_str_t){body, (size_t)n}, close,
            status == 504 ? SL_GRPC_DEADLINE_EXCEEDED : -1, (sl_str_t){msg, strlen(msg)});
}

void sl__req_answer_exit(sl_req_t *r) {
    r->stage = SL_STAGE_RESPONSE;
    sl__req_respond(r, r->exit.status, (sl_str_t){NULL, 0}, r->exit.body, false);
}

void sl__req_answer_plugin_error(sl_req_t *r) {
    static const char body[] = "{\"error\":\"plugin error\"}\n";
    r->stage = SL_STAGE_RESPONSE;
    memset(&r->resp_edits, 0, sizeof(r->resp_edits));
    sl__req_respond(r, 500, SL_LIT("application/json"), SL_LIT(body), false);
}

/* ---- reading the body whole ---- */

static int on_body_to_buffer(void *ud, const char *p, size_t n) {
    sl_req_t *r = ud;
    r->body_in += n;
    uint64_t limit = r->buffer_max ? r->buffer_max : SL_BUFFER_MAX_BODY;
    uint64_t max = r->ds->lc->max_body ? SL_MIN(r->ds->lc->max_body, limit) : limit;
    if (r->heap_len + n > max) {
        r->body_err = 413;
        return 1;
    }
    return sl__req_heap_append(r, p, n) == SL_OK ? 0 : 1;
}

int sl__req_heap_append(sl_req_t *r, const char *p, size_t n) {
    if (r->heap_len + n > r->heap_cap) {
        size_t cap = SL_MAX(r->heap_cap * 2, SL_MAX(r->heap_len + n, (size_t)4096));
        char *np = realloc(r->heap, cap);
        if (!np) return SL_ERROR;
        r->heap = np;
        r->heap_cap = cap;
    }
    memcpy(r->heap + r->heap_len, p, n);
    r->heap_len += n;
    return SL_OK;
}

int sl__req_buffer_pump(sl_req_t *r) {
    sl_downstream_t *ds = r->ds;
    while (!r->body_done && ds->ops->body_buffered(ds)) {
        int rc = ds->ops->read_body(ds, 1u << 30, on_body_to_buffer, r);
        if (rc == SL_ERROR) {
            if (!r->body_err) r->body_err = 400;
            return SL_ERROR;
        }
        if (rc == SL_DONE) r->body_done = 1;
    }
    if (r->body_done) {
        r->body_buffered = 1;
        return SL_OK;
    }
    ds->ops->wait_body(ds);
    return SL_EAGAIN;
}

int sl__req_buffer_body(sl_req_t *r) {
    if (r->body_buffered) return SL_OK;
    if (r->body_err) return SL_ERROR;
    if (r->mode != SL_MODE_BUFFER) {
        r->mode = SL_MODE_BUFFER;
        sl__req_send_continue(r);
        if (r->ds->req != r) return SL_ERROR;
    }
    return sl__req_buffer_pump(r);
}

/* The gateway reads the body itself, so it says 100 Continue itself (as nginx does). */
void sl__req_send_continue(sl_req_t *r) {
    sl_downstream_t *ds = r->ds;
    if (!(r->head.flags & SL_H1_EXPECT_CONTINUE) || r->body_done || ds->ops->body_buffered(ds)) return;
    r->head.flags &= ~(uint32_t)SL_H1_EXPECT_CONTINUE;
    ds->ops->send_continue(ds);
}
