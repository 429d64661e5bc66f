/* proxy.c — a request on its way through an upstream: the two pumps and the upstream
 * connection's events (request.h).
 *
 * The proxy is two pumps. The up pump moves the client's body to the upstream
 * (downstream body -> framed slices -> one writev), and the down pump moves the
 * upstream's response (or a gateway answer already queued) to the client the same way.
 * Each pump has at most one write in flight and stops reading its source until that write
 * completes, so a slow side pauses the fast one (backpressure) and memory per request
 * stays at one read buffer per side. Heads are always rebuilt from parsed fields
 * (h1_head.c).
 *
 * The upstream side is an exchange (exchange.h), whatever its protocol: the pumps call its
 * operations and its events come back through sl__proxy_exchange_cb. What differs between
 * protocols is in the exchange's flags (SL_XF_*), never tested here by protocol name.
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "http/h1_head.h"
#include "http/tunnel.h"
#include "http/request.h"

static void req_finish(sl_req_t *r);
static int response_head(sl_req_t *r);

/* The exchange implementation of the request's upstream: HTTP/2 streams for `protocol: h2`
 * or `h2c`, else HTTP/1.1. A plugin's address (upstream.set) is always HTTP/1.1. */
static const sl_exchange_ops_t *exchange_ops(const sl_req_t *r) {
    if (!r->addr.set && r->upstream >= 0 && sl__req_upstream_conf(r)->protocol != SL_UP_HTTP1)
        return &sl__exchange_h2;
    return &sl__exchange_h1;
}

/* The upstream queue's slices into [old, old + len) now point into `to` (a kept body that
 * moved while a replay had queued it). */
static void upq_rebase(sl_req_t *r, uintptr_t old, size_t len, char *to) {
    for (uint16_t i = 0; i < r->upq.niov; i++) {
        uintptr_t b = (uintptr_t)r->upq.iov[i].base;
        if (b >= old && b < old + len) r->upq.iov[i].base = to + (b - old);
    }
}

/* A streamed body going to an HTTP/2 upstream is kept, up to retry.max_body, so that a
 * stream the upstream refused unprocessed (a GOAWAY) can go again on another connection:
 * in a worker block while it fits one (no allocation for a gRPC call's message), then in
 * the heap buffer. Past the limit it is no longer kept (the buffer stays until the request
 * ends: a replay may have queued it). */
static void keep_for_replay(sl_req_t *r, const char *p, size_t n) {
    size_t kept = r->replay.block ? r->replay.len : r->heap_len;
    if (kept + n > sl__req_upstream_conf(r)->retry.max_body) {
        r->replay.on = 0;
        return;
    }
    if (!r->heap && kept + n <= SL_BLOCK_SIZE) {
        if (!r->replay.block && !(r->replay.block = sl_block_get(&r->w->blocks))) {
            r->replay.on = 0;
            return;
        }
        memcpy(r->replay.block + r->replay.len, p, n);
        r->replay.len += (uint32_t)n;
        return;
    }
    uintptr_t old = (uintptr_t)r->heap;
    size_t old_len = r->heap_len;
    if ((r->replay.block && sl__req_heap_append(r, r->replay.block, r->replay.len) != SL_OK) ||
        sl__req_heap_append(r, p, n) != SL_OK) {
        r->replay.on = 0;
        return;
    }
    if (r->replay.block) { /* the block's bytes moved to the heap buffer */
        upq_rebase(r, (uintptr_t)r->replay.block, r->replay.len, r->heap);
        sl_block_put(&r->w->blocks, r->replay.block);
        r->replay.block = NULL;
        r->replay.len = 0;
    } else if ((uintptr_t)r->heap != old) {
        upq_rebase(r, old, old_len, r->heap);
    }
}

static int on_body_to_upstream(void *ud, const char *p, size_t n) {
    sl_req_t *r = ud;
    r->body_in += n;
    uint64_t max = r->ds->lc->max_body;
    if (max && r->body_in > max) {
        r->body_err = 413;
        return 1;
    }
    if (!sl_outq_span(&r->upq, p, n)) return 1;
    if (r->replay.on) keep_for_replay(r, p, n);
    return 0;
}

void sl__proxy_drop_upstream(sl_req_t *r) {
    for (int i = 0; i < 2; i++) {
        sl_exchange_t *x = &r->at.x[i];
        if (x->state != SL_X_FREE) x->ops->cancel(x);
    }
    if (r->tun.u) sl__tunnel_close_upstream(r);
}

void sl__proxy_requeue(sl_req_t *r) {
    r->upq.writing = 0;
    sl_outq_reset(&r->upq);
    if (!(sl__req_x(r)->ops->flags & SL_XF_FRAMES)) sl_outq_add(&r->upq, r->uphead.base, r->uphead.len);
    if (r->replay.on && r->replay.len)
        sl_outq_add(&r->upq, r->replay.block, r->replay.len);
    else if ((r->body_buffered || r->replay.on) && r->heap_len)
        sl_outq_add(&r->upq, r->heap, r->heap_len);
}

void sl__proxy_start(sl_req_t *r) {
    sl_downstream_t *ds = r->ds;
    const sl_upstream_conf_t *uc = sl__req_upstream_conf(r);
    const sl_retry_conf_t *rc = &uc->retry;
    /* A body a retry may have to send again is read whole first, up to retry.max_body;
     * a bigger (or chunked) one streams once and is never retried. */
    if (!r->body_buffered && (rc->attempts > 1) && r->head.body_kind == SL_BODY_LENGTH &&
        r->head.content_length <= rc->max_body) {
        r->buffer_max = rc->max_body;
        r->replay.wait = 1;
        int st = sl__req_buffer_body(r);
        if (st == SL_EAGAIN || ds->req != r) return; /* sl__req_on_client_data goes on */
        r->replay.wait = 0;
        if (st == SL_ERROR) {
            int code = r->body_err ? r->body_err : 400;
            sl__req_respond_error(r, code, code == 413 ? "body too large" : "bad request body", true);
            return;
        }
    }
    if (r->upstream >= 0 && !r->addr.set) {
        if (sl_tries_init(&r->at.tries, (uint32_t)uc->ntargets, &r->arena) != SL_OK) {
            sl__req_respond_error(r, 502, "out of memory", true);
            return;
        }
        sl__attempt_init(r);
    }
    SL_BUG_ON(sl__req_upstream_busy(r) || r->resp.state != SL_RESP_NONE);
    r->mode = SL_MODE_PROXY;
    r->stage = SL_STAGE_RESPONSE;
    const sl_exchange_ops_t *ops = exchange_ops(r);
    sl__exchange_init(&r->at.x[0], r, ops, &sl__proxy_exchange_cb);
    sl__exchange_init(&r->at.x[1], r, ops, &sl__proxy_exchange_cb);
    bool frames = ops->flags & SL_XF_FRAMES;
    r->upgrade = !frames && sl__h1_upgrade_allowed(r);
    /* A protocol that frames the body itself translates the rebuilt head (h2_up.c) */
    r->upq.chunked = !frames && !r->body_buffered && r->head.body_kind == SL_BODY_CHUNKED;
    r->replay.on = (ops->flags & SL_XF_REFUSALS) && !r->body_buffered && r->head.body_kind != SL_BODY_NONE;
    if (sl__h1_upstream_head(r) != SL_OK) {
        sl__req_respond_error(r, 431, "request head too large", true);
        return;
    }
    if (!frames) sl_outq_add(&r->upq, r->uphead.base, r->uphead.len);
    if (r->body_buffered) {
        if (r->heap_len) sl_outq_add(&r->upq, r->heap, r->heap_len);
    } else {
        sl__req_send_continue(r);
        if (ds->req != r) return;
        /* Frame what the client already sent before connecting: a malformed body found
         * now is answered without the upstream ever seeing a byte. */
        sl__proxy_pump_up(r);
        if (ds->req != r || r->mode != SL_MODE_PROXY) return;
    }
    sl__proxy_connect(r);
}

void sl__proxy_connect(sl_req_t *r) {
    if (r->addr.set) {
        sl__attempt_begin(r, -1, 0, sl_now_ns());
        sl__proxy_connect_target(r);
        return;
    }
    int t = r->at.next_target;
    uint8_t admit = r->at.next_admit;
    r->at.next_target = -1;
    uint64_t now = 0; /* one clock read for the pick and the attempt's start */
    if (t < 0) {
        uint64_t ra = 0;
        t = sl__attempt_pick(r, &admit, &ra, &now);
        if (t == SL_PICK_PLUGIN_ERROR) {
            sl__req_answer_plugin_error(r);
            return;
        }
        if (t < 0) {
            sl__attempt_no_target(r, ra);
            return;
        }
    }
    sl__attempt_begin(r, t, admit, now ? now : sl_now_ns());
    sl__proxy_connect_target(r);
    if (r->mode == SL_MODE_PROXY && sl__req_x(r)->state != SL_X_FREE) sl__hedge_arm(r);
}

void sl__proxy_connect_target(sl_req_t *r) {
    sl_exchange_t *x = sl__req_x(r);
    int rc = x->ops->start(x);
    if (rc < 0)
        sl__proxy_failed(r, 502, SL_FAIL_CONNECT, uv_strerror(rc));
    else if (rc == 0)
        sl__proxy_pump_up(r);
    /* 1: connecting, on_ready follows */
}

/* A gRPC call whose response began and whose upstream then failed: the client gets what
 * it was sent, then UNAVAILABLE as trailers (a reset would read as INTERNAL to a gRPC
 * client). Only an exchange that can be cut short keeps going this way: what the client is
 * being written may point into its buffers until the response ends. */
static bool grpc_fail_mid_response(sl_req_t *r, const char *why) {
    sl_exchange_t *x = sl__req_x(r);
    if (!x->ops->cut || x->state != SL_X_HEAD || !sl__req_resp_head(r) || r->head.major != 2 ||
        !sl__req_is_grpc(r))
        return false;
    sl_h1_header_t *t = sl_arena_alloc(&r->arena, 2 * sizeof(*t));
    char *msg = sl_arena_alloc(&r->arena, strlen(why) + 1);
    if (!t || !msg) return false;
    memcpy(msg, why, strlen(why) + 1);
    t[0] = (sl_h1_header_t){SL_LIT("grpc-status"), SL_LIT("14"), 0};
    t[1] = (sl_h1_header_t){SL_LIT("grpc-message"), {msg, strlen(msg)}, 0};
    r->trailers = t;
    r->ntrailers = 2;
    sl_log_kv(SL_LOG_WARN,
              (const char *[]){"request_id", r->rid, "upstream", sl__req_upstream_conf(r)->name, "target",
                               sl__req_attempt_target(r)},
              3, "upstream failed mid-response: %s (UNAVAILABLE to the gRPC client)", why);
    sl__attempt_outcome(r, SL_OUT_FAILURE);
    x->ops->cut(x);
    sl__proxy_pump_down(r);
    return true;
}

void sl__proxy_failed(sl_req_t *r, int status, int kind, const char *why) {
    SL_BUG_ON(r->mode != SL_MODE_PROXY);
    if (grpc_fail_mid_response(r, why)) return;
    sl_exchange_t *x = sl__req_x(r);
    const sl_upstream_conf_t *uc = sl__req_upstream_conf(r);
    const char *target = sl__req_attempt_target(r);
    bool stale = x->state != SL_X_FREE && x->ops->stale(x);
    x->ops->cancel(x);
    r->upq.writing = 0; /* a write in flight went with the exchange */
    if (sl__req_resp_head(r) && !r->resp.written) {
        /* The rebuilt head never left: the client can still get a clean 502. */
        sl__req_resp_state(r, SL_RESP_NONE);
        sl_outq_reset(&r->clq);
    }
    if (sl__req_resp_head(r)) {
        /* The client already has a status line: it must never get a second one. */
        sl_log_kv(SL_LOG_WARN, (const char *[]){"request_id", r->rid, "upstream", uc->name, "target", target}, 3,
                  "upstream failed mid-response: %s", why);
        sl__attempt_timed(r, 0, sl_now_ns());
        sl__attempt_outcome(r, SL_OUT_FAILURE);
        sl__attempt_release(r);
        r->ds->ops->abort(r->ds);
        return;
    }
    /* A pooled connection the upstream closed just as we reused it: the request never
     * reached an application, so one retry on a fresh connection (same attempt, same
     * target) is safe for a request without a body. */
    if (stale && !r->at.retried && r->head.body_kind == SL_BODY_NONE && status == 502) {
        r->at.retried = 1;
        sl__proxy_requeue(r);
        sl__proxy_connect_target(r);
        return;
    }
    sl__attempt_timed(r, 0, sl_now_ns());
    sl_exchange_t *hx = sl__req_hedge_x(r);
    if (hx->state != SL_X_FREE) { /* the hedge still runs: it becomes the attempt */
        const char *ignored;
        sl__hedge_promote(r, SL_OUT_FAILURE);
        if (hx->ops->peek(hx, &ignored) != SL_EAGAIN) sl__proxy_pump_down(r);
        return;
    }
    sl__hedge_end(r, SL_OUT_CANCEL); /* a hedge timer that has not fired */
    if (sl__attempt_retry(r, kind, status)) {
        sl_log_kv(SL_LOG_INFO, (const char *[]){"request_id", r->rid, "upstream", uc->name}, 2,
                  "%s: retrying on another target", why);
        return;
    }
    sl__attempt_outcome(r, SL_OUT_FAILURE);
    sl__attempt_release(r);
    const sl_route_conf_t *rc = sl__req_route_conf(r);
    sl_log_kv(SL_LOG_WARN,
              (const char *[]){"request_id", r->rid, "route", rc ? rc->name : NULL, "upstream", uc->name, "target", target},
              4, "%s -> %d", why, status);
    sl__req_respond_error(r, status, status == 504 ? "upstream timed out" : "bad gateway", false);
}

/* ---- the exchanges' events (exchange.h) ---- */

static void x_on_ready(sl_exchange_t *x) {
    SL_BUG_ON(x != sl__req_x(x->r)); /* a hedge sends itself (x->whole) */
    sl__proxy_pump_up(x->r);
}

static void x_on_written(sl_exchange_t *x) {
    sl_req_t *r = x->r;
    SL_BUG_ON(x != sl__req_x(r) || !r->upq.writing);
    r->upq.writing = 0;
    sl_outq_reset(&r->upq);
    sl__proxy_pump_up(r);
}

static void x_on_readable(sl_exchange_t *x) {
    sl_req_t *r = x->r;
    if (x != sl__req_x(r)) {
        const char *why = NULL;
        int rc = x->ops->peek(x, &why);
        if (rc == SL_ERROR)
            sl__hedge_failed(r, why);
        else if (rc == SL_OK)
            sl__hedge_answered(r);
        return;
    }
    sl__proxy_pump_down(r);
}

static void x_on_failed(sl_exchange_t *x, int status, int kind, const char *why) {
    if (x != sl__req_x(x->r)) {
        sl__hedge_failed(x->r, why);
        return;
    }
    sl__proxy_failed(x->r, status, kind, why);
}

/* The upstream never processed the request (a GOAWAY's last-stream-id below it,
 * REFUSED_STREAM): the same attempt goes again on another connection when it can. */
static void x_on_refused(sl_exchange_t *x, const char *why) {
    sl_req_t *r = x->r;
    if (x != sl__req_x(r)) {
        sl__hedge_failed(r, why);
        return;
    }
    bool replayable = r->body_buffered || r->replay.on || r->head.body_kind == SL_BODY_NONE;
    if (sl__req_resp_head(r) || !replayable || r->at.refused >= SL_REQ_MAX_REFUSED) {
        sl__proxy_failed(r, 502, SL_FAIL_RESET, why);
        return;
    }
    /* whatever its method: the same attempt, a new connection when the target has none
     * with room */
    r->at.refused++;
    x->ops->cancel(x);
    sl__proxy_requeue(r);
    sl_log_kv(SL_LOG_DEBUG, (const char *[]){"request_id", r->rid, "upstream", sl__req_upstream_conf(r)->name}, 2,
              "%s: sent again on another connection", why);
    sl__proxy_connect_target(r);
}

/* The request's grpc-timeout passed: DEADLINE_EXCEEDED to the client, as trailers. */
static void x_on_deadline(sl_exchange_t *x) {
    sl_req_t *r = x->r;
    if (x != sl__req_x(r)) return; /* the current attempt's exchange answers it */
    sl_log_kv(SL_LOG_INFO, (const char *[]){"request_id", r->rid, "upstream", sl__req_upstream_conf(r)->name}, 2,
              "grpc-timeout passed: DEADLINE_EXCEEDED");
    r->grpc.due = 0;
    if (!sl__req_resp_head(r)) {
        /* the client's deadline, not the target's failure (the answer abandons the attempt):
         * a gRPC request gets it as a trailers-only DEADLINE_EXCEEDED (respond.c) */
        sl__attempt_timed(r, 0, sl_now_ns());
        sl__req_cancel_wait(r); /* a retry's backoff */
        sl__req_respond_error(r, 504, "deadline exceeded", false);
        return;
    }
    /* the head went: the status goes in the trailers, after what the client already has */
    sl_h1_header_t *t = sl_arena_alloc(&r->arena, 2 * sizeof(*t));
    if (!t || !x->ops->cut) {
        r->ds->ops->abort(r->ds);
        return;
    }
    t[0] = (sl_h1_header_t){SL_LIT("grpc-status"), SL_LIT("4"), 0};
    t[1] = (sl_h1_header_t){SL_LIT("grpc-message"), SL_LIT("deadline exceeded"), 0};
    r->trailers = t;
    r->ntrailers = 2;
    x->ops->cut(x);
    sl__proxy_pump_down(r);
}

const sl_exchange_cb_t sl__proxy_exchange_cb = {x_on_ready, x_on_written, x_on_readable,
                                                x_on_failed, x_on_refused, x_on_deadline};

/* ---- client -> upstream ---- */

void sl__proxy_pump_up(sl_req_t *r) {
    sl_downstream_t *ds = r->ds;
    for (;;) {
        if (r->upq.writing) return;
        uint32_t room = sl_outq_room(&r->upq);
        if (!r->body_done && room > 0 && ds->ops->body_buffered(ds)) {
            int rc = ds->ops->read_body(ds, room, on_body_to_upstream, r);
            if (rc == SL_ERROR) {
                int st = r->body_err ? r->body_err : 400;
                if (sl__req_resp_head(r)) {
                    ds->ops->abort(ds);
                    return;
                }
                /* Whatever reached the upstream is abandoned with its connection. */
                sl__req_respond_error(r, st, st == 413 ? "body too large" : "bad request body", true);
                return;
            }
            if (rc == SL_DONE) {
                SL_BUG_ON(r->body_done);
                r->body_done = 1;
                sl_outq_end_chunks(&r->upq);
            }
            continue;
        }
        sl_exchange_t *x = sl__req_x(r);
        /* what arrives while connecting (or before the first attempt) is buffered; a
         * promoted hedge sends its request itself */
        if (x->state != SL_X_OPEN && x->state != SL_X_HEAD) return;
        if (x->whole || x->sent) return;
        if (r->upq.niov == 0) {
            if (r->body_done) {
                SL_BUG_ON(r->upq.writing || r->upq.niov);
                x->sent = 1;
                if (!r->clq.writing) ds->ops->arm(ds, 0);
                x->ops->end_request(x);
                if (!sl__req_resp_head(r)) x->ops->arm(x, sl__req_upstream_conf(r)->read_timeout_ms);
                return;
            }
            /* Waiting on the client, not the upstream: the downstream's inactivity timer
             * covers a client that stops sending, and a slow upload is no upstream timeout. */
            x->ops->arm(x, 0);
            ds->ops->wait_body(ds);
            return;
        }
        int rc = x->ops->write(x, &r->upq);
        if (rc < 0) {
            sl__proxy_failed(r, 502, SL_FAIL_RESET, "upstream write failed");
            return;
        }
        if (rc == 0) {
            /* Backpressure: the client's bytes wait in its buffer, which stops the reads
             * when full; an upstream that takes nothing (its windows shut) is a write
             * timeout. */
            x->ops->arm(x, sl__req_upstream_conf(r)->write_timeout_ms);
            return;
        }
    }
}

/* ---- upstream -> client ---- */

static int on_body_to_client(void *ud, const char *p, size_t n) {
    sl_req_t *r = ud;
    if (SL_UNLIKELY(r->cache != NULL)) sl__cache_req_piece(r, p, n);
    return sl_outq_span(&r->clq, p, n) ? 0 : 1;
}

static int on_body_filtered(void *ud, const char *p, size_t n) {
    sl_req_t *r = ud;
    sl_str_t o;
    if (SL_UNLIKELY(r->cache != NULL)) sl__cache_req_piece(r, p, n);
    if (sl__req_filter_piece(r, p, n, false, &o) != SL_OK) return 1;
    return sl_outq_span(&r->clq, o.p, o.len) ? 0 : 1;
}

void sl__req_on_written(sl_req_t *r, int status) {
    r->clq.writing = 0;
    if (status < 0) {
        r->ds->ops->abort(r->ds);
        return;
    }
    sl_outq_reset(&r->clq);
    sl__proxy_pump_down(r);
}

/* Why a 101 cannot be followed (a 502 instead), or NULL. Only a request forwarded as an
 * upgrade may switch: otherwise the bytes after its head are requests, never tunnel data. */
static const char *switch_refused(const sl_req_t *r) {
    if (!r->upgrade) return "upstream switched protocols unasked";
    if (!r->body_done) return "upstream switched protocols before the request body ended";
    const sl_h1_header_t *up = sl_h1_find(&r->rhead, "upgrade", 7);
    sl_str_t list = up ? up->value : (sl_str_t){"", 0}, tok;
    if (!sl_h1_next_token(&list, &tok)) return "upstream switched protocols without naming one";
    if (tok.len >= 3 && sl_str_ieq((sl_str_t){tok.p, 3}, "h2c", 3) && (tok.len == 3 || tok.p[3] == '/'))
        return "upstream switched to h2c";
    return NULL;
}

/* The 101 head is queued: the request is over as a request (counted, logged, its Lua state
 * released) and its two connections become a tunnel that outlives it. The tunnel stays in
 * its target's in-flight until it closes (sl__req_abort releases the attempt), so
 * least-conn and p2c see open WebSockets. */
static void tunnel_switch(sl_req_t *r) {
    sl_worker_t *w = r->w;
    sl_exchange_t *x = sl__req_x(r);
    uint64_t now = sl_now_ns();
    sl__attempt_timed(r, 101, now);
    x->ops->arm(x, 0);
    SL_BUG_ON(!x->ops->take_conn || r->tun.u);
    r->tun.u = x->ops->take_conn(x);
    sl_metrics_request(&w->metrics, r->route, 101, now - r->start_ns);
    if (r->trace.on) sl__trace_end(r, now);
    sl__req_run_log_phase(r);
    sl__req_cancel_wait(r);
    sl_lua_task_end(r->w, &r->lua);
    r->keep_alive = 0;
    r->resp.written = 1;
    SL_BUG_ON(r->mode != SL_MODE_PROXY || sl__req_x(r)->state != SL_X_FREE);
    r->mode = SL_MODE_TUNNEL;
    sl__tunnel_start(r);
}

/* The exchange's response head: SL_OK once queued, SL_EAGAIN while more bytes are needed,
 * SL_DONE when the request went elsewhere (a failure answered, a retry, a tunnel, a plugin
 * error). */
static int pump_response_head(sl_req_t *r, sl_exchange_t *x) {
    int kind = SL_FAIL_OTHER;
    const char *why = NULL;
    int rc = x->ops->head(x, &kind, &why);
    if (rc == SL_EAGAIN) return SL_EAGAIN;
    if (rc == SL_ERROR) {
        sl__proxy_failed(r, 502, kind, why);
        return SL_DONE;
    }
    if (r->rhead.status == 101) {
        why = switch_refused(r);
        if (why) {
            sl__proxy_failed(r, 502, SL_FAIL_OTHER, why);
            return SL_DONE;
        }
    }
    return response_head(r);
}

/* The upstream's response head is in r->rhead: the attempt's outcome, the header_filter,
 * and the head for the client. SL_OK once queued, SL_DONE when the request went elsewhere. */
static int response_head(sl_req_t *r) {
    r->status = r->rhead.status;
    /* The head arrived by the loop's wake, but never before the attempt began (a reused
     * connection's attempt may begin in the same wakeup, after the wake clock's read). */
    if (sl__attempt_answered(r, SL_MAX(sl_wake_ns(), sl__req_x(r)->att.start_ns))) return SL_DONE; /* a retry took over */
    /* An answer that came before the whole body was sent ends the exchange. */
    if (!r->body_done) r->keep_alive = 0;
    if (SL_UNLIKELY(r->cache != NULL) && sl__cache_req_head(r) == SL_DONE) {
        /* a 5xx with a stale entry to answer instead (stale_if_error) */
        sl__attempt_timed(r, r->status, sl_now_ns());
        sl__req_respond_error(r, r->status, "bad gateway", false);
        return SL_DONE;
    }
    if (r->phases & (1u << SL_PHASE_HEADER_FILTER)) {
        r->in_header_filter = 1;
        if (sl__req_phase(r, SL_PHASE_HEADER_FILTER) == SL_ERROR) {
            sl__req_answer_plugin_error(r);
            return SL_DONE;
        }
    }
    if (SL_UNLIKELY(r->debug != NULL)) sl__req_debug_emit(r);
    if (r->ds->ops->write_head(r->ds, r, (sl_str_t){NULL, 0}, -1) != SL_OK) {
        sl__proxy_failed(r, 502, SL_FAIL_OTHER, "upstream response head too large");
        return SL_DONE;
    }
    sl__req_resp_state(r, SL_RESP_HEAD);
    if (r->rhead.status == 101) {
        tunnel_switch(r);
        return SL_DONE;
    }
    r->resp.eof_body = r->rhead.body_kind == SL_BODY_EOF;
    if (r->rhead.body_kind == SL_BODY_NONE) sl__req_resp_state(r, SL_RESP_DONE);
    return SL_OK;
}

/* The upstream's body ended (its framing, or its close for a close-delimited body): the
 * last piece goes through the body_filter, or the last chunk is queued. */
static void response_body_ended(sl_req_t *r) {
    if (SL_UNLIKELY(r->cache != NULL)) sl__cache_req_ended(r);
    if (sl__req_body_filtered(r)) {
        r->bf_end = 1;
    } else {
        sl__req_resp_state(r, SL_RESP_DONE);
        sl_outq_end_chunks(&r->clq);
    }
}

void sl__proxy_pump_down(sl_req_t *r) {
    sl_downstream_t *ds = r->ds;
    for (;;) {
        if (r->clq.writing) return;
        sl_exchange_t *x = sl__req_x(r);
        bool live = x->state != SL_X_FREE; /* FREE: a gateway answer, or the exchange finished */
        if (live && !sl__req_resp_head(r)) {
            if (pump_response_head(r, x) != SL_OK) return;
            continue;
        }
        /* A filtered body moves one piece at a time: a plugin's output lives in one buffer. */
        bool filtered = sl__req_body_filtered(r);
        if (r->bf_end && !r->clq.niov) {
            sl_str_t o;
            if (sl__req_filter_piece(r, "", 0, true, &o) != SL_OK) {
                ds->ops->abort(ds); /* the head went out: cutting the body off is all that is left */
                return;
            }
            r->bf_end = 0;
            sl__req_resp_state(r, SL_RESP_DONE);
            sl_outq_span(&r->clq, o.p, o.len);
            sl_outq_end_chunks(&r->clq);
            continue;
        }
        if (live && !sl__req_resp_done(r) && !r->bf_end && sl_outq_room(&r->clq) &&
            (!filtered || !r->clq.niov)) {
            const char *why = NULL;
            sl_body_cb cb = filtered ? on_body_filtered : on_body_to_client;
            int rc = x->ops->body(x, filtered ? 1 : sl_outq_room(&r->clq), cb, r, &why);
            if (r->bf_failed) {
                ds->ops->abort(ds);
                return;
            }
            if (rc == SL_ERROR) {
                sl__proxy_failed(r, 502, SL_FAIL_OTHER, why);
                return;
            }
            if (rc == SL_DONE) response_body_ended(r);
            if (rc != SL_EAGAIN) continue;
        }
        if (r->clq.niov) {
            r->resp.written = r->resp.written || sl__req_resp_head(r);
            for (uint16_t i = 0; i < r->clq.niov; i++) r->bytes_out += r->clq.iov[i].len;
            int rc = ds->ops->write(ds, &r->clq);
            if (rc < 0) {
                ds->ops->abort(ds);
                return;
            }
            if (rc == 0) {
                /* Backpressure: nothing more is read while the client's write is in flight.
                 * A response already whole needs none, and the pool would start reading
                 * again at once: stopping then costs two epoll_ctl (libuv re-adds the
                 * descriptor, gets EEXIST, then modifies it) on every HTTP/2 response. */
                if (live && !sl__req_resp_done(r)) x->ops->pause(x);
                ds->ops->arm(ds, ds->lc->idle_timeout_ms); /* a client that stops reading */
                return;
            }
            continue;
        }
        if (sl__req_resp_done(r)) {
            req_finish(r);
            return;
        }
        if (!live) return;
        if (r->bf_end) return; /* the last piece is still being written */
        const char *why = NULL;
        int rc = x->ops->wait(x, &why); /* everything handed went to the client: read on */
        if (rc == SL_DONE) {
            response_body_ended(r);
            continue;
        }
        if (rc == SL_ERROR) sl__proxy_failed(r, 502, SL_FAIL_OTHER, why);
        return;
    }
}

static void req_finish(sl_req_t *r) {
    SL_BUG_ON(!sl__req_resp_done(r) || r->clq.niov || r->clq.writing || r->bf_end);
    sl_worker_t *w = r->w;
    uint64_t now = sl_now_ns(); /* the end is when the last bytes went to the client: read, not the wake clock */
    sl_exchange_t *x = sl__req_x(r);
    if (x->state != SL_X_FREE) {
        bool trailers = x->ops->flags & SL_XF_TRAILERS;
        sl__attempt_timed(r, r->status, now);
        sl__attempt_release(r);
        x->ops->finish(x);
        if (SL_UNLIKELY(r->cache != NULL)) sl__cache_req_finish(r);
        /* gRPC's status is counted where the response ends (only protocols with trailers
         * carry one) */
        if (trailers || r->ntrailers) sl__req_grpc_passed(r);
    } else {
        if (SL_UNLIKELY(r->cache != NULL)) sl__cache_req_finish(r);
        if (r->ntrailers) sl__req_grpc_passed(r);
    }
    sl_metrics_request(&w->metrics, r->route, r->status, now - r->start_ns);
    if (r->trace.on) sl__trace_end(r, now);
    sl__req_run_log_phase(r);
    if (!r->body_done) r->keep_alive = 0;
    r->ds->ops->finish(r->ds);
}
