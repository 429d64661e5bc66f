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
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "http/h1_head.h"
#include "http/h2_up.h"
#include "http/tunnel.h"
#include "http/request.h"

static void req_finish(sl_req_t *r);
static int response_head(sl_req_t *r);

/* The request's upstream speaks HTTP/2 (h2_up.c): its attempts are streams. A plugin's
 * address (upstream.set) is always HTTP/1.1. */
static bool h2_upstream(const sl_req_t *r) {
    return !r->to_address && r->upstream >= 0 && sl__req_upstream_conf(r)->protocol != SL_UP_HTTP1;
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
    size_t kept = r->replay ? r->replay_len : r->heap_len;
    if (kept + n > sl__req_upstream_conf(r)->retry.max_body) {
        r->h2_replay = 0;
        return;
    }
    if (!r->heap && kept + n <= SL_BLOCK_SIZE) {
        if (!r->replay && !(r->replay = sl_block_get(&r->w->blocks))) {
            r->h2_replay = 0;
            return;
        }
        memcpy(r->replay + r->replay_len, p, n);
        r->replay_len += (uint32_t)n;
        return;
    }
    uintptr_t old = (uintptr_t)r->heap;
    size_t old_len = r->heap_len;
    if ((r->replay && sl__req_heap_append(r, r->replay, r->replay_len) != SL_OK) ||
        sl__req_heap_append(r, p, n) != SL_OK) {
        r->h2_replay = 0;
        return;
    }
    if (r->replay) { /* the block's bytes moved to the heap buffer */
        upq_rebase(r, (uintptr_t)r->replay, r->replay_len, r->heap);
        sl_block_put(&r->w->blocks, r->replay);
        r->replay = NULL;
        r->replay_len = 0;
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
    if (r->h2_replay) keep_for_replay(r, p, n);
    return 0;
}

void sl__proxy_drop_upstream(sl_req_t *r) {
    if (r->h2s) sl__h2up_detach(r);
    if (r->up) {
        r->up->req = NULL;
        sl__upconn_close(r->up);
        r->up = NULL;
    }
}

void sl__proxy_requeue(sl_req_t *r) {
    r->upq.writing = 0;
    sl_outq_reset(&r->upq);
    if (!h2_upstream(r)) sl_outq_add(&r->upq, r->uphead.base, r->uphead.len);
    if (r->h2_replay && r->replay_len)
        sl_outq_add(&r->upq, r->replay, r->replay_len);
    else if ((r->body_buffered || r->h2_replay) && r->heap_len)
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
        r->replay_wait = 1;
        int st = sl__req_buffer_body(r);
        if (st == SL_EAGAIN || ds->req != r) return; /* sl__req_on_client_data goes on */
        r->replay_wait = 0;
        if (st == SL_ERROR) {
            int code = r->body_err ? r->body_err : 400;
            sl__req_respond_error(r, code, code == 413 ? "body too large" : "bad request body", true);
            return;
        }
    }
    if (r->upstream >= 0 && !r->to_address) {
        if (sl_tries_init(&r->tries, (uint32_t)uc->ntargets, &r->arena) != SL_OK) {
            sl__req_respond_error(r, 502, "out of memory", true);
            return;
        }
        sl__attempt_init(r);
    }
    r->mode = SL_MODE_PROXY;
    r->stage = SL_STAGE_RESPONSE;
    bool h2 = h2_upstream(r);
    r->upgrade = !h2 && sl__h1_upgrade_allowed(r);
    /* HTTP/2 frames the body itself: the head is translated from the rebuilt one (h2_up.c) */
    r->upq.chunked = !h2 && !r->body_buffered && r->head.body_kind == SL_BODY_CHUNKED;
    r->h2_replay = h2 && !r->body_buffered && r->head.body_kind != SL_BODY_NONE;
    if (sl__h1_upstream_head(r) != SL_OK) {
        sl__req_respond_error(r, 431, "request head too large", true);
        return;
    }
    if (!h2) sl_outq_add(&r->upq, r->uphead.base, r->uphead.len);
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
    if (r->to_address) {
        sl__attempt_begin(r, -1, 0, sl_now_ns());
        sl__proxy_connect_target(r);
        return;
    }
    int t = r->next_target;
    uint8_t admit = r->next_admit;
    r->next_target = -1;
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
    if (r->up) sl__hedge_arm(r);
}

void sl__proxy_connect_target(sl_req_t *r) {
    sl_worker_t *w = r->w;
    const sl_upstream_conf_t *uc = sl__req_upstream_conf(r);
    uint32_t up = r->to_address ? UINT32_MAX : (uint32_t)r->upstream;
    uint32_t t = (uint32_t)r->att.target;
    if (h2_upstream(r)) {
        int rc = sl__h2up_start(r);
        if (rc < 0)
            sl__proxy_failed(r, 502, SL_FAIL_CONNECT, uv_strerror(rc));
        else
            sl__proxy_pump_up(r);
        return;
    }
    sl_upconn_t *u = r->to_address ? NULL : sl__upconn_reuse(w, r, &sl__proxy_upconn_cb, up, t);
    if (u) {
        r->up = u;
        sl__upconn_start_reading(u);
        sl__proxy_pump_up(r);
        return;
    }
    if (!(u = sl__upconn_new(w, r, &sl__proxy_upconn_cb, up, t))) {
        sl__attempt_abandon(r);
        sl__req_respond_error(r, 502, "out of memory", true);
        return;
    }
    r->up = u;
    const struct sockaddr *sa = r->to_address ? (const struct sockaddr *)&r->address
                                              : (const struct sockaddr *)&uc->targets[t].addr.ss;
    int rc = sl__upconn_connect(u, sa, uc->connect_timeout_ms);
    if (rc < 0) sl__proxy_failed(r, 502, SL_FAIL_CONNECT, uv_strerror(rc));
}

/* A gRPC call whose response began over HTTP/2 and whose upstream stream then failed:
 * the client gets what it was sent, then UNAVAILABLE as trailers (a reset would read as
 * INTERNAL to a gRPC client). The stream stays attached, cut short, until the response
 * ends: what the client is being written points into its block. */
static bool grpc_fail_mid_response(sl_req_t *r, const char *why) {
    if (!r->h2s || !r->resp_head || r->head.major != 2 || !sl__req_is_grpc(r)) return false;
    sl_h1_header_t *t = sl_arena_alloc(&r->arena, 2 * sizeof(*t));
    char *msg = sl_arena_alloc(&r->arena, strlen(why) + 1);
    if (!t || !msg) return false;
    memcpy(msg, why, strlen(why) + 1);
    t[0] = (sl_h1_header_t){SL_LIT("grpc-status"), SL_LIT("14"), 0};
    t[1] = (sl_h1_header_t){SL_LIT("grpc-message"), {msg, strlen(msg)}, 0};
    r->trailers = t;
    r->ntrailers = 2;
    sl_log_kv(SL_LOG_WARN, (const char *[]){"request_id", r->rid, "upstream", sl__req_upstream_conf(r)->name}, 2,
              "upstream failed mid-response: %s (UNAVAILABLE to the gRPC client)", why);
    sl__attempt_outcome(r, SL_OUT_FAILURE);
    sl__h2up_expire(r);
    sl__proxy_pump_down(r);
    return true;
}

void sl__proxy_failed(sl_req_t *r, int status, int kind, const char *why) {
    if (grpc_fail_mid_response(r, why)) return;
    sl_upconn_t *u = r->up;
    const sl_upstream_conf_t *uc = sl__req_upstream_conf(r);
    bool reused = u && u->nreqs > 0;
    bool got_bytes = u && (r->resp_head || u->rlen > 0);
    if (r->h2s) sl__h2up_detach(r);
    if (u) {
        u->req = NULL;
        sl__upconn_close(u);
        r->up = NULL;
    }
    if (r->resp_head && !r->resp_written) {
        /* The rebuilt head never left: the client can still get a clean 502. */
        r->resp_head = 0;
        r->resp_done = 0;
        sl_outq_reset(&r->clq);
    }
    if (r->resp_head) {
        /* The client already has a status line: it must never get a second one. */
        sl_log_kv(SL_LOG_WARN, (const char *[]){"request_id", r->rid, "upstream", uc->name}, 2,
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
    if (reused && !got_bytes && !r->retried && r->head.body_kind == SL_BODY_NONE && status == 502) {
        r->retried = 1;
        r->req_sent = 0;
        sl__proxy_requeue(r);
        sl__proxy_connect_target(r);
        return;
    }
    sl__attempt_timed(r, 0, sl_now_ns());
    if (r->hedge.up) { /* the hedge still runs: it becomes the attempt */
        sl__hedge_promote(r, SL_OUT_FAILURE);
        if (r->up->rlen) sl__proxy_pump_down(r);
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
    sl_log_kv(SL_LOG_WARN, (const char *[]){"request_id", r->rid, "route", rc ? rc->name : NULL, "upstream", uc->name},
              3, "%s -> %d", why, status);
    sl__req_respond_error(r, status, status == 504 ? "upstream timed out" : "bad gateway", false);
}

/* ---- the upstream connection's events ---- */

static void up_on_read(sl_upconn_t *u, ssize_t nread) {
    sl_req_t *r = u->req;
    if (nread == 0) {
        /* A read that found nothing: the buffer goes back, unless a write to the client
         * still points into it (a response already whole keeps reading meanwhile). */
        if (r->resp_head && !r->clq.writing) sl__upconn_release_buffer(u);
        return;
    }
    if (u != r->up) {
        sl__hedge_on_read(r, u, nread);
        return;
    }
    if (nread < 0) {
        u->eof = 1;
        u->rd_err = nread != UV_EOF;
        sl__upconn_stop_reading(u);
        sl__proxy_pump_down(r);
        return;
    }
    sl__upconn_arm(u, sl__req_upstream_conf(r)->read_timeout_ms);
    sl__proxy_pump_down(r);
}

static void up_on_timeout(sl_upconn_t *u) {
    sl_req_t *r = u->req;
    if (u != r->up)
        sl__hedge_failed(r, "hedge timed out");
    else if (u->state == SL_UP_CONNECTING)
        sl__proxy_failed(r, 504, SL_FAIL_CONNECT, "upstream connect timed out");
    else
        sl__proxy_failed(r, 504, SL_FAIL_TIMEOUT, "upstream timed out");
}

static void up_on_connected(sl_upconn_t *u, int status, const char *why) {
    sl_req_t *r = u->req;
    if (u != r->up) {
        sl__hedge_on_connect(r, u, status, why);
        return;
    }
    if (status < 0) {
        sl__proxy_failed(r, status == UV_ETIMEDOUT ? 504 : 502, SL_FAIL_CONNECT, why ? why : uv_strerror(status));
        return;
    }
    u->state = SL_UP_ACTIVE;
    /* The connect timer's work is done: from here the pumps arm the write timeout while a
     * write is blocked and the read timeout once the request is sent. */
    sl_deadline_clear(&u->timer);
    uv_tcp_nodelay(&u->s.tcp, 1);
    sl__upconn_start_reading(u);
    sl__proxy_pump_up(r);
}

static void up_on_written(sl_upconn_t *u, int status) {
    sl_req_t *r = u->req;
    r->upq.writing = 0;
    if (status < 0) {
        sl__proxy_failed(r, 502, SL_FAIL_RESET, "upstream write failed");
        return;
    }
    sl_outq_reset(&r->upq);
    sl__proxy_pump_up(r);
}

const sl_upconn_cb_t sl__proxy_upconn_cb = {up_on_read, up_on_timeout, up_on_connected, up_on_written};

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
                if (r->resp_head) {
                    ds->ops->abort(ds);
                    return;
                }
                /* Whatever reached the upstream is abandoned with its connection. */
                sl__req_respond_error(r, st, st == 413 ? "body too large" : "bad request body", true);
                return;
            }
            if (rc == SL_DONE) {
                r->body_done = 1;
                sl_outq_end_chunks(&r->upq);
            }
            continue;
        }
        sl_upconn_t *u = r->up;
        bool h2 = r->h2s != NULL; /* a stream takes bytes before its connection is up */
        if (!h2 && (!u || u->state != SL_UP_ACTIVE)) return; /* what arrives meanwhile is buffered */
        if (r->upq.niov == 0) {
            if (r->body_done) {
                if (!r->req_sent) {
                    r->req_sent = 1;
                    if (!r->clq.writing) ds->ops->arm(ds, 0);
                    uint64_t rto = sl__req_upstream_conf(r)->read_timeout_ms;
                    if (h2) {
                        sl__h2up_end(r);
                        if (!r->resp_head) sl__h2up_arm(r, rto);
                    } else if (!r->resp_head) {
                        sl__upconn_arm(u, rto);
                    }
                }
                return;
            }
            /* Waiting on the client, not the upstream: the downstream's inactivity timer
             * covers a client that stops sending, and a slow upload is no upstream timeout. */
            if (h2)
                sl__h2up_arm(r, 0);
            else
                sl_deadline_clear(&u->timer);
            ds->ops->wait_body(ds);
            return;
        }
        if (h2) {
            /* sl__proxy_h2_written follows; an upstream whose windows stay shut is a
             * write timeout, as a blocked write is over HTTP/1.1 */
            sl__h2up_write(r, &r->upq);
            sl__h2up_arm(r, sl__req_upstream_conf(r)->write_timeout_ms);
            return;
        }
        int rc = sl__upconn_write(u, &r->upq);
        if (rc < 0) {
            sl__proxy_failed(r, 502, SL_FAIL_RESET, "upstream write failed");
            return;
        }
        if (rc == 0) {
            /* Backpressure: the client's bytes wait in its buffer, which stops the reads
             * when full. */
            sl__upconn_arm(u, sl__req_upstream_conf(r)->write_timeout_ms);
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
    uint64_t now = sl_now_ns();
    sl__attempt_timed(r, 101, now);
    sl_deadline_clear(&r->up->timer);
    sl_metrics_request(&w->metrics, r->route, 101, now - r->start_ns);
    if (r->trace.on) sl__trace_end(r, now);
    sl__req_run_log_phase(r);
    sl__req_cancel_wait(r);
    sl_lua_task_end(r->w, &r->lua);
    r->keep_alive = 0;
    r->resp_written = 1;
    r->mode = SL_MODE_TUNNEL;
    sl__tunnel_start(r);
}

/* The upstream's response head, parsed from u's buffer and rebuilt for the client: SL_OK
 * once queued, SL_EAGAIN while more bytes are needed (reading goes on), SL_DONE when the
 * request went elsewhere (a failure answered, a retry, a tunnel, a plugin error). */
static int pump_response_head(sl_req_t *r, sl_upconn_t *u) {
    while (u->rpos < u->rlen) {
        size_t used = 0;
        int st = 0;
        u->h1.req_was_head = r->head.method_id == HTTP_HEAD;
        int rc = sl_h1_head(&u->h1, u->rbuf + u->rpos, u->rlen - u->rpos, &r->rhead, &used, &st);
        if (rc == SL_ERROR) {
            sl__proxy_failed(r, 502, SL_FAIL_RESET, "malformed upstream response");
            return SL_DONE;
        }
        if (rc != SL_OK) break;
        u->rpos += (uint32_t)used;
        if (r->rhead.status == 101) {
            const char *why = switch_refused(r);
            if (why) {
                sl__proxy_failed(r, 502, SL_FAIL_OTHER, why);
                return SL_DONE;
            }
        } else if (r->rhead.status < 200) {
            continue; /* interim responses end here: the gateway sent its own 100 */
        }
        return response_head(r);
    }
    if (u->eof) {
        sl__proxy_failed(r, 502, SL_FAIL_RESET, "upstream closed before answering");
        return SL_DONE;
    }
    if (u->rlen == SL_BLOCK_SIZE) {
        sl__proxy_failed(r, 502, SL_FAIL_OTHER, "upstream response head too large");
        return SL_DONE;
    }
    sl__upconn_start_reading(u);
    return SL_EAGAIN;
}

/* The upstream's response head is in r->rhead (HTTP/1.1: parsed; HTTP/2: from HEADERS):
 * the attempt's outcome, the header_filter, and the head for the client. SL_OK once queued,
 * SL_DONE when the request went elsewhere. */
static int response_head(sl_req_t *r) {
    r->status = r->rhead.status;
    /* The head arrived by the loop's wake, but never before the attempt began (a reused
     * connection's attempt may begin in the same wakeup, after the wake clock's read). */
    if (sl__attempt_answered(r, SL_MAX(sl_wake_ns(), r->att.start_ns))) return SL_DONE; /* a retry took over */
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
    r->resp_head = 1;
    if (r->rhead.status == 101) {
        tunnel_switch(r);
        return SL_DONE;
    }
    r->resp_eof_body = r->rhead.body_kind == SL_BODY_EOF;
    if (r->rhead.body_kind == SL_BODY_NONE) r->resp_done = 1;
    return SL_OK;
}

/* The upstream's body ended (its framing, or its close for a close-delimited body): the
 * last piece goes through the body_filter, or the last chunk is queued. */
static void response_body_ended(sl_req_t *r) {
    if (SL_UNLIKELY(r->cache != NULL)) sl__cache_req_ended(r);
    if (sl__req_body_filtered(r)) {
        r->bf_end = 1;
    } else {
        r->resp_done = 1;
        sl_outq_end_chunks(&r->clq);
    }
}

void sl__proxy_pump_down(sl_req_t *r) {
    sl_downstream_t *ds = r->ds;
    for (;;) {
        if (r->clq.writing) return;
        sl_upconn_t *u = r->up;
        if (r->h2s && !r->resp_head) {
            if (!sl__h2up_head_ready(r) || response_head(r) != SL_OK) return;
            continue;
        }
        if (u && !r->resp_head) {
            if (pump_response_head(r, u) != SL_OK) return;
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
            r->resp_done = 1;
            sl_outq_span(&r->clq, o.p, o.len);
            sl_outq_end_chunks(&r->clq);
            continue;
        }
        if (u && r->resp_head && !r->resp_done && !r->bf_end && u->rpos < u->rlen && sl_outq_room(&r->clq) &&
            (!filtered || !r->clq.niov)) {
            size_t used;
            u->h1.on_data = filtered ? on_body_filtered : on_body_to_client;
            u->h1.ud = r;
            u->h1.spans_left = filtered ? 1 : sl_outq_room(&r->clq);
            int rc = sl_h1_body(&u->h1, u->rbuf + u->rpos, u->rlen - u->rpos, &used);
            u->rpos += (uint32_t)used;
            if (r->bf_failed) {
                ds->ops->abort(ds);
                return;
            }
            if (rc == SL_ERROR) {
                sl__proxy_failed(r, 502, SL_FAIL_OTHER, "malformed upstream body");
                return;
            }
            if (rc == SL_DONE) response_body_ended(r);
            continue;
        }
        if (r->h2s && r->resp_head && !r->resp_done && !r->bf_end && sl_outq_room(&r->clq) &&
            (!filtered || !r->clq.niov)) {
            int rc = sl__h2up_read(r, filtered ? 1 : sl_outq_room(&r->clq), filtered ? on_body_filtered : on_body_to_client, r);
            if (r->bf_failed) {
                ds->ops->abort(ds);
                return;
            }
            if (rc == SL_ERROR) {
                sl__proxy_failed(r, 502, SL_FAIL_OTHER, "response body refused");
                return;
            }
            if (rc == SL_DONE) response_body_ended(r);
            if (rc != SL_EAGAIN) continue;
        }
        if (r->clq.niov) {
            r->resp_written = r->resp_written || r->resp_head;
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
                if (u && !r->resp_done) sl__upconn_stop_reading(u);
                ds->ops->arm(ds, ds->lc->idle_timeout_ms); /* a client that stops reading */
                return;
            }
            continue;
        }
        if (r->resp_done) {
            req_finish(r);
            return;
        }
        if (r->h2s) {
            sl__h2up_wait(r); /* everything handed went to the client: the window goes back */
            return;
        }
        if (!u) return;
        if (r->bf_end) return; /* the last piece is still being written */
        if (u->eof) {
            /* a close ends a close-delimited body; a reset cuts it short */
            if (r->resp_eof_body && !u->rd_err) {
                response_body_ended(r);
                continue;
            }
            sl__proxy_failed(r, 502, SL_FAIL_OTHER, u->rd_err ? "upstream reset mid-body" : "upstream closed mid-body");
            return;
        }
        if (u->rpos == u->rlen) u->rpos = u->rlen = 0;
        sl__upconn_start_reading(u);
        return;
    }
}

static void req_finish(sl_req_t *r) {
    sl_worker_t *w = r->w;
    uint64_t now = sl_now_ns(); /* the end is when the last bytes went to the client: read, not the wake clock */
    sl_upconn_t *u = r->up;
    if (u) {
        const sl_upstream_conf_t *uc = sl__req_upstream_conf(r);
        bool clean = r->req_sent && !u->eof && u->rpos == u->rlen && !r->resp_eof_body &&
                     sl__h1_upstream_keeps_alive(&r->rhead) && uc->keepalive_max_idle > 0 && !w->draining;
        sl__attempt_timed(r, r->status, now);
        sl__attempt_release(r);
        u->req = NULL;
        r->up = NULL;
        if (clean) {
            u->nreqs++;
            sl_deadline_clear(&u->timer);
            /* Everything read was used: an idle connection holds no block (a read takes
             * one again). Left to the next EAGAIN, a block stays with each pooled
             * connection whose answer came in one read: 4 KiB each after a spike. */
            sl__upconn_release_buffer(u);
            sl__pool_put(w, u);
            if (u->state == SL_UP_IDLE) sl__upconn_start_reading(u); /* to see the upstream close it */
        } else {
            sl__upconn_close(u);
        }
    }
    if (SL_UNLIKELY(r->cache != NULL)) sl__cache_req_finish(r);
    /* gRPC's status is counted where the response ends (only HTTP/2 upstreams carry one) */
    if (r->h2s || r->ntrailers) sl__req_grpc_passed(r);
    if (r->h2s) {
        sl__attempt_timed(r, r->status, now);
        sl__attempt_release(r);
        sl__h2up_detach(r);
    }
    sl_metrics_request(&w->metrics, r->route, r->status, now - r->start_ns);
    if (r->trace.on) sl__trace_end(r, now);
    sl__req_run_log_phase(r);
    if (!r->body_done) r->keep_alive = 0;
    r->ds->ops->finish(r->ds);
}

/* ---- HTTP/2 upstream streams (h2_up.c) ---- */

void sl__proxy_h2_written(sl_req_t *r) {
    r->upq.writing = 0;
    sl_outq_reset(&r->upq);
    sl__proxy_pump_up(r);
}

void sl__proxy_h2_refused(sl_req_t *r, const char *why) {
    bool replayable = r->body_buffered || r->h2_replay || r->head.body_kind == SL_BODY_NONE;
    if (r->resp_head || !replayable || r->h2_refused >= SL_H2UP_MAX_REFUSED) {
        sl__proxy_failed(r, 502, SL_FAIL_RESET, why);
        return;
    }
    /* The upstream never processed it: the same attempt goes again on another connection
     * (a new one when the target has none with room), whatever its method. */
    r->h2_refused++;
    sl__h2up_detach(r);
    r->req_sent = 0;
    sl__proxy_requeue(r);
    sl_log_kv(SL_LOG_DEBUG, (const char *[]){"request_id", r->rid, "upstream", sl__req_upstream_conf(r)->name}, 2,
              "%s: sent again on another connection", why);
    sl__proxy_connect_target(r);
}

void sl__proxy_grpc_deadline(sl_req_t *r) {
    sl_log_kv(SL_LOG_INFO, (const char *[]){"request_id", r->rid, "upstream", sl__req_upstream_conf(r)->name}, 2,
              "grpc-timeout passed: DEADLINE_EXCEEDED");
    r->grpc_due = 0;
    if (!r->resp_head) {
        /* the client's deadline, not the target's failure (the answer abandons the attempt):
         * a gRPC request gets it as a trailers-only DEADLINE_EXCEEDED (respond.c) */
        sl__attempt_timed(r, 0, sl_now_ns());
        sl__req_cancel_wait(r); /* a retry's backoff */
        sl__req_respond_error(r, 504, "deadline exceeded", false);
        return;
    }
    /* the head went: the status goes in the trailers, after what the client already has */
    sl_h1_header_t *t = sl_arena_alloc(&r->arena, 2 * sizeof(*t));
    if (!t) {
        r->ds->ops->abort(r->ds);
        return;
    }
    t[0] = (sl_h1_header_t){SL_LIT("grpc-status"), SL_LIT("4"), 0};
    t[1] = (sl_h1_header_t){SL_LIT("grpc-message"), SL_LIT("deadline exceeded"), 0};
    r->trailers = t;
    r->ntrailers = 2;
    sl__h2up_expire(r);
    sl__proxy_pump_down(r);
}
