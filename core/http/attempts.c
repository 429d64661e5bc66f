/* attempts.c — a request's attempts on its upstream's targets: the HTTP side of the
 * attempt model (upstream/attempt.h, shared with TCP): the balancer phase's choice and
 * the hash key, retries after a failure or a named 5xx, and hedging (request.h).
 *
 * An attempt is one try of the request on one target. It starts with a pick among
 * eligible targets and the target breaker's admission; it counts in the target's
 * in-flight until its connection is released; its outcome goes to the breaker and
 * passive health exactly once, on every path: response head, failure, client abort, a
 * gateway answer that replaces it. A plugin's upstream.set(address) has no target: its
 * single attempt is only timed. */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "http/request.h"

void sl__attempt_init(sl_req_t *r) {
    r->at.of = (sl_attempts_of_t){sl__req_upstream_conf(r), &r->w->ug->ups[r->upstream], SL_LAYER_HTTP};
}

/* A header or cookie the request lacks (or sends empty) is no key: the balancer takes a
 * random point of the ring, as HAProxy's `balance hdr()` and Kong fall back to
 * round-robin, instead of sending every such request to the target of "". */
static sl_str_t no_key_if_empty(sl_str_t v) { return v.len ? v : (sl_str_t){NULL, 0}; }

/* What consistent-hash hashes for this request (hash_on). */
static sl_str_t hash_key(const sl_req_t *r, const sl_upstream_conf_t *uc) {
    switch (uc->hash_on) {
    case SL_HASH_HEADER: return no_key_if_empty(sl__req_header_value(r, uc->hash_name));
    case SL_HASH_COOKIE: return no_key_if_empty(sl__req_cookie_value(r, uc->hash_name));
    case SL_HASH_PATH: return r->head.path;
    default: {
        const char *a = r->client_ip ? r->client_ip : r->ds->peer; /* real-ip's, when set */
        return (sl_str_t){a, strlen(a)};
    }
    }
}

int sl__attempt_pick(sl_req_t *r, uint8_t *admit, uint64_t *retry_after_ms, uint64_t *now_ns) {
    *retry_after_ms = 0;
    /* A plugin's balancer phase may name the target; an ineligible or refused choice
     * falls back to the balancer. The clock is read after the phase: the attempt that
     * begins now does not count the plugin's time. */
    if (r->phases & (1u << SL_PHASE_BALANCER)) {
        r->at.lua_target = 0;
        if (sl__req_phase(r, SL_PHASE_BALANCER) == SL_ERROR) return SL_PICK_PLUGIN_ERROR;
        int t = (int)r->at.lua_target - 1;
        *now_ns = sl_now_ns();
        if (sl_attempt_take(&r->at.of, &r->at.tries, t, admit, *now_ns / 1000000u)) return t;
    } else {
        *now_ns = sl_now_ns();
    }
    sl_str_t key = r->at.of.uc->balancer == SL_LB_CONSISTENT_HASH ? hash_key(r, r->at.of.uc) : (sl_str_t){"", 0};
    return sl_attempt_pick(&r->at.of, &r->at.tries, key.p, key.len, admit, retry_after_ms, *now_ns / 1000000u);
}

void sl__attempt_begin(sl_req_t *r, int t, uint8_t admit, uint64_t now_ns) {
    /* an attempt begins on a free exchange, the previous one's target released */
    SL_BUG_ON(sl__req_x(r)->state != SL_X_FREE || sl__req_x(r)->att.in_flight);
    if (r->trace.on) sl__trace_attempt_begin(r);
    if (r->addr.set) {
        sl__req_x(r)->att.start_ns = now_ns;
        return;
    }
    sl_attempt_begin(&r->at.of, &r->at.tries, &sl__req_x(r)->att, t, admit, now_ns);
}

/* An attempt ended: what request debugging (and tracing) record of it. */
static void attempt_ended(sl_req_t *r, int status, uint64_t now) {
    if (SL_UNLIKELY(r->debug != NULL)) sl__req_debug_attempt(r, status, now - sl__req_x(r)->att.start_ns);
    if (r->trace.on) sl__trace_attempt_end(r, status);
}

void sl__attempt_timed(sl_req_t *r, int status, uint64_t now) {
    sl_metrics_upstream(&r->w->metrics, r->upstream, sl__req_x(r)->att.target, status, now - sl__req_x(r)->att.start_ns);
    attempt_ended(r, status, now);
}

void sl__attempt_outcome(sl_req_t *r, int outcome) {
    if (!sl__req_x(r)->att.outcome_due || r->addr.set) return;
    sl_attempt_outcome(&r->at.of, &sl__req_x(r)->att, outcome, sl_now_ms());
}

void sl__attempt_release(sl_req_t *r) {
    if (!sl__req_x(r)->att.in_flight || r->addr.set) return;
    sl_attempt_release(&r->at.of, &sl__req_x(r)->att);
}

void sl__attempt_abandon(sl_req_t *r) {
    if (r->upstream < 0 || !r->w->ug) return;
    sl__hedge_end(r, SL_OUT_CANCEL);
    sl__attempt_outcome(r, SL_OUT_CANCEL);
    sl__attempt_release(r);
    if (r->at.next_target >= 0) {
            sl_attempt_cancel_admission(&r->at.of, r->at.next_target, r->at.next_admit);
        r->at.next_target = -1;
    }
}

/* ---- retries ---- */

static bool method_idempotent(const sl_req_t *r) {
    switch (r->head.method_id) {
    case HTTP_GET: case HTTP_HEAD: case HTTP_OPTIONS: case HTTP_TRACE: case HTTP_PUT: case HTTP_DELETE:
        return true;
    default:
        return false;
    }
}

static bool retry_condition(const sl_retry_conf_t *rc, int kind, int status) {
    if (kind == SL_FAIL_CONNECT) return rc->on_flags & SL_RETRY_ON_CONNECT_ERROR;
    if (kind == SL_FAIL_TIMEOUT) return rc->on_flags & SL_RETRY_ON_TIMEOUT;
    for (uint32_t i = 0; i < rc->nstatuses; i++)
        if (rc->statuses[i] == status) return true;
    return false;
}

static void backoff_done(sl_req_t *r) { sl__proxy_connect(r); }

/* The request's grpc-timeout passed during the backoff: DEADLINE_EXCEEDED now (the
 * answer gives back the retry target's admission), never a late attempt. */
static void backoff_deadline(sl_req_t *r) {
    sl_log_kv(SL_LOG_INFO, (const char *[]){"request_id", r->rid, "upstream", sl__req_upstream_conf(r)->name}, 2,
              "grpc-timeout passed during a retry's backoff: DEADLINE_EXCEEDED");
    sl__req_respond_error(r, 504, "deadline exceeded", false);
}

/* True when a retry took over: the failed attempt is recorded, its connection and
 * response are dropped, and the next attempt starts after a full-jitter backoff. False
 * leaves everything to the caller (the failure goes to the client as it is). */
bool sl__attempt_retry(sl_req_t *r, int kind, int status) {
    const sl_upstream_conf_t *uc = sl__req_upstream_conf(r);
    const sl_retry_conf_t *rc = &uc->retry;
    if (r->addr.set || r->at.tries.attempts >= rc->attempts || r->resp.written || !retry_condition(rc, kind, status))
        return false;
    /* A request whose connection never happened reached no application: any method may go
     * again, and its queued bytes are still unsent. Otherwise only an idempotent request
     * whose body (if any) can be replayed from the buffer. */
    bool never_connected = kind == SL_FAIL_CONNECT;
    if (!never_connected &&
        (!method_idempotent(r) || (r->head.body_kind != SL_BODY_NONE && !r->body_buffered && !r->replay.on)))
        return false;
    sl__attempt_outcome(r, SL_OUT_FAILURE);
    uint64_t ra, picked_at;
    uint8_t admit = 0;
    int t = sl__attempt_pick(r, &admit, &ra, &picked_at);
    if (t < 0) return false; /* nothing left to try: the client gets this failure */
    /* an answer retried for its status is not an upstream exchange counted by the metrics
     * (the failures of sl__proxy_failed were counted there), but it was an attempt */
    if (kind == SL_FAIL_STATUS) attempt_ended(r, status, sl_now_ns());
    SL_BUG_ON(r->at.next_target >= 0); /* one admitted retry target at a time */
    r->at.next_target = t;
    r->at.next_admit = admit;
    sl_metrics_retry(&r->w->metrics, r->upstream,
                     kind == SL_FAIL_CONNECT   ? SL_RETRY_CONNECT
                     : kind == SL_FAIL_TIMEOUT ? SL_RETRY_TIMEOUT
                     : kind == SL_FAIL_RESET   ? SL_RETRY_RESET
                                               : SL_RETRY_STATUS);
    sl__attempt_release(r);
    sl__proxy_drop_upstream(r);
    r->status = 0;
    sl__req_x(r)->sent = 0;
    r->upq.writing = 0;
    if (!never_connected) sl__proxy_requeue(r);
    uint64_t cap = rc->backoff_ms << SL_MIN(r->at.tries.attempts - 1, 20);
    cap = SL_MIN(cap, rc->max_backoff_ms);
    uint64_t delay = cap ? sl_rand64() % (cap + 1) : 0;
    if (delay) {
        uv_update_time(&r->w->loop);
        uint64_t now = uv_now(&r->w->loop), due = sl__req_grpc_due(r, now);
        if (due && due - now <= delay) {
            if (sl__req_wait_ms(r, due - now, SL_WAIT_BACKOFF, backoff_deadline) == SL_OK) return true;
        } else if (sl__req_wait_ms(r, delay, SL_WAIT_BACKOFF, backoff_done) == SL_OK) {
            return true;
        }
    }
    sl__proxy_connect(r);
    return true;
}

void sl__attempt_no_target(sl_req_t *r, uint64_t retry_after_ms) {
    const sl_upstream_conf_t *uc = sl__req_upstream_conf(r);
    if (retry_after_ms) {
        r->at.retry_after_s = (uint32_t)((retry_after_ms + 999) / 1000);
        sl_log_kv(SL_LOG_WARN, (const char *[]){"request_id", r->rid, "upstream", uc->name}, 2,
                  "every target's circuit breaker is open -> 503");
        sl__req_respond_error(r, 503, "circuit breaker open", false);
        return;
    }
    if (sl_upstream_empty(uc)) { /* a name not resolved yet, a registry nobody registered with */
        sl__req_respond_error(r, 503, "no upstream target resolved or registered", false);
        return;
    }
    sl__req_respond_error(r, 502, "no upstream target available", false);
}

const char *sl__req_attempt_target(const sl_req_t *r) {
    if (r->addr.set) return r->addr.text;
    const sl_upstream_conf_t *uc = sl__req_upstream_conf(r);
    int t = sl__req_x(r)->att.target;
    return uc && t >= 0 && (size_t)t < uc->ntargets ? uc->targets[t].addr.text : NULL;
}

bool sl__attempt_answered(sl_req_t *r, uint64_t now_ns) {
    int st = r->rhead.status;
    sl_exchange_t *hx = sl__req_hedge_x(r);
    if (!r->addr.set && st >= 500 && hx->state != SL_X_FREE && !r->resp.written &&
        retry_condition(&sl__req_upstream_conf(r)->retry, SL_FAIL_STATUS, st)) {
        /* A status retry.on names is no answer while the other attempt still runs (the
         * hedge, or the first attempt a hedge's head overtook: sl__hedge_answered): the
         * other becomes the attempt, as after a failure (sl__proxy_failed), instead of
         * being cancelled with no attempt left for a retry. The failure is the target's
         * latency sample (sl_attempt_outcome), not how fast it came. */
        attempt_ended(r, st, sl_now_ns());
        r->status = 0;
        sl__hedge_promote(r, SL_OUT_FAILURE);
        const char *ignored;
        if (hx->ops->peek(hx, &ignored) != SL_EAGAIN) sl__proxy_pump_down(r);
        return true;
    }
    sl__hedge_end(r, SL_OUT_CANCEL); /* this attempt answered first: the other lost */
    if (r->addr.set) return false;
    if (st < 500) sl_attempt_observe(&r->at.of, &sl__req_x(r)->att, now_ns); /* a 5xx: sl_attempt_outcome */
    if (st >= 500 && sl__attempt_retry(r, SL_FAIL_STATUS, st)) return true;
    sl_attempt_outcome(&r->at.of, &sl__req_x(r)->att, st >= 500 ? SL_OUT_FAILURE : SL_OUT_SUCCESS, now_ns / 1000000u);
    return false;
}

/* ---- hedging (retry.hedge_after) ----
 *
 * When the first attempt of an idempotent request (no body, or a buffered one) has not
 * begun to answer after hedge_after, a second attempt goes to another eligible target, on
 * the request's second exchange, whatever the protocol: a connection of its own over
 * HTTP/1.1, a stream over HTTP/2. The first to send a response head wins, unless its
 * status is one retry.on names; the other is cancelled (breaker: cancel, not failure): its
 * connection closed, or its stream reset while the connection goes on serving others. The hedge's exchange sends the whole
 * request itself (x->whole). attempt_swap makes the hedge's exchange the current one for
 * the attempt functions: it flips r->at.cur, nothing moves. */

static void attempt_swap(sl_req_t *r) { r->at.cur ^= 1; }

void sl__hedge_end(sl_req_t *r, int outcome) {
    if (r->wait && r->wait->kind == SL_WAIT_HEDGE) sl__req_cancel_wait(r);
    sl_exchange_t *hx = sl__req_hedge_x(r);
    if (hx->state == SL_X_FREE && !hx->att.outcome_due && !hx->att.in_flight) return;
    attempt_swap(r);
    if (r->trace.on && outcome == SL_OUT_CANCEL) sl__trace_attempt_cancelled(r);
    sl__attempt_outcome(r, outcome);
    sl__attempt_release(r);
    if (hx->state != SL_X_FREE) hx->ops->cancel(hx);
    attempt_swap(r);
}

void sl__hedge_promote(sl_req_t *r, int lost) {
    sl_exchange_t *x = sl__req_x(r), *hx = sl__req_hedge_x(r);
    /* the other exchange sends nothing more through r->upq: a hedge sends itself, and a
     * first attempt waits in the hedge's place only once its request went whole */
    SL_BUG_ON(hx->state == SL_X_FREE || !(hx->whole || hx->sent));
    if (r->trace.on && lost == SL_OUT_CANCEL) sl__trace_attempt_cancelled(r);
    sl__attempt_outcome(r, lost);
    sl__attempt_release(r);
    if (x->state != SL_X_FREE) x->ops->cancel(x);
    r->upq.writing = 0; /* the old exchange's write, if any, was cancelled with it */
    sl_outq_reset(&r->upq);
    attempt_swap(r);
}

void sl__hedge_failed(sl_req_t *r, const char *why) {
    sl_log_kv(SL_LOG_INFO, (const char *[]){"request_id", r->rid, "upstream", sl__req_upstream_conf(r)->name}, 2,
              "hedge attempt failed: %s", why);
    sl__hedge_end(r, SL_OUT_FAILURE);
}

void sl__hedge_answered(sl_req_t *r) {
    if (sl__req_resp_head(r)) return; /* cannot happen: the hedge ends when the other answers */
    sl_log_kv(SL_LOG_DEBUG, (const char *[]){"request_id", r->rid}, 1, "the hedge answered first");
    sl_exchange_t *x = sl__req_x(r);
    if (x->whole || x->sent) {
        /* The exchanges trade places and both go on: the head decides the race
         * (sl__attempt_answered). A status retry.on names is no answer while the other
         * still runs, so a hedge's fast 503 must not cancel a first attempt about to
         * answer 200; any other head ends the other attempt as a lost race. A first
         * attempt still sending its request cannot wait in the hedge's place (its bytes
         * go through r->upq): it loses at the hedge's first byte, as before. */
        attempt_swap(r);
    } else {
        sl__hedge_promote(r, SL_OUT_CANCEL);
    }
    x = sl__req_x(r);
    x->ops->arm(x, sl__req_upstream_conf(r)->read_timeout_ms);
    sl__proxy_pump_down(r);
}

static void hedge_fire(sl_req_t *r) {
    sl_exchange_t *hx = sl__req_hedge_x(r);
    if (sl__req_resp_head(r) || sl__req_x(r)->state == SL_X_FREE || hx->state != SL_X_FREE) return;
    uint64_t ra, now;
    uint8_t admit = 0;
    int t = sl__attempt_pick(r, &admit, &ra, &now);
    if (t < 0) return; /* no other target: the first attempt runs alone */
    SL_BUG_ON(r->at.hedged || hx->att.in_flight);
    r->at.hedged = 1;
    attempt_swap(r);
    sl__attempt_begin(r, t, admit, now);
    hx->whole = 1;
    int rc = hx->ops->start(hx);
    attempt_swap(r);
    if (rc < 0) sl__hedge_failed(r, uv_strerror(rc));
}

void sl__hedge_arm(sl_req_t *r) {
    const sl_retry_conf_t *rc = &sl__req_upstream_conf(r)->retry;
    /* An upgrade is never hedged: two upstreams could both switch protocols. */
    if (!rc->hedge_after_ms || r->at.hedged || r->upgrade || r->at.tries.attempts != 1 || r->addr.set || r->wait ||
        !method_idempotent(r) || (r->head.body_kind != SL_BODY_NONE && !r->body_buffered) ||
        sl__req_upstream_conf(r)->ntargets < 2)
        return;
    sl__req_wait_ms(r, rc->hedge_after_ms, SL_WAIT_HEDGE, hedge_fire);
}
