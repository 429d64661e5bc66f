/* request.c — a request's life outside the proxy itself: its object, routing, the Lua
 * stages (rewrite, access, then content), waits, the log phase, abort and free
 * (request.h). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "config/router.h"
#include "http/request.h"
#include "proto/grpc_timeout.h"
#include "proto/compress.h"
#include "upstream/conn_limit.h"

/* A plugin's upstream.set(address): the request goes to that address on a connection of
 * its own (no pool, balancer, breaker or retry: none of them know the address), with the
 * default timeouts. */
const sl_upstream_conf_t sl__address_upstream = {
    .name = "(address)",
    .connect_timeout_ms = 2000,
    .read_timeout_ms = 30000,
    .write_timeout_ms = 30000,
    .keepalive_max_idle = 0,
    .retry = {.attempts = 1},
};

/* A head's fields beyond its inline room go to the request's arena (http1.h). */
static sl_h1_header_t *head_spill(void *arena) {
    return sl_arena_alloc(arena, SL_H1_MAX_HEADERS * sizeof(sl_h1_header_t));
}

sl_req_t *sl__req_new(sl_worker_t *w, sl_downstream_t *ds) {
    sl_req_t *r = w->free_reqs;
    if (r) {
        w->free_reqs = r->free_next;
        w->nfree_reqs--;
    } else {
        r = malloc(sizeof(*r));
        if (!r) return NULL;
    }
    /* Only the scalar part is cleared: the two heads are filled by the parser, the arena's
     * first chunk and the write queues are set up below. */
    memset(r, 0, offsetof(sl_req_t, head));
    memset(&r->head_off, 0, sizeof(*r) - offsetof(sl_req_t, head_off));
    r->ds = ds;
    r->w = w;
    r->route = -1;
    r->upstream = -1;
    r->at.x[0].att.target = r->at.x[1].att.target = -1;
    r->at.next_target = -1;
    r->host = "";
    sl_arena_init_first(&r->arena, &w->blocks, r->arena_first, sizeof(r->arena_first));
    r->head.spill = r->rhead.spill = head_spill;
    r->head.spill_ud = r->rhead.spill_ud = &r->arena;
    r->head.nheaders = r->rhead.nheaders = 0;
    sl_outq_init(&r->upq);
    sl_outq_init(&r->clq);
    r->head.headers = r->head.inline_headers;
    r->rhead.headers = r->rhead.inline_headers;
    return r;
}


static void rebase(sl_str_t *s, const char *from, size_t n, char *to) {
    if (s->p >= from && s->p <= from + n) s->p = to + (s->p - from);
}

int sl__req_detach_head(sl_req_t *r, const char *base) {
    sl_h1_head_t *h = &r->head;
    const char *from = base + r->head_off;
    size_t n = r->head_end - r->head_off;
    char *to = sl_arena_alloc(&r->arena, n);
    if (!to) return SL_ERROR;
    memcpy(to, from, n);
    sl_str_t *fields[] = {&h->method, &h->target, &h->path, &h->query, &h->authority, &h->reason, &h->host};
    for (size_t i = 0; i < SL_ARRAY_LEN(fields); i++) rebase(fields[i], from, n, to);
    for (uint16_t i = 0; i < h->nheaders; i++) {
        rebase(&h->headers[i].name, from, n, to);
        rebase(&h->headers[i].value, from, n, to);
    }
    sl_str_t host = {r->host, r->host_len}; /* normalize_host's, when it kept the head's bytes */
    rebase(&host, from, n, to);
    r->host = host.p;
    return SL_OK;
}

/* ---- request start ---- */

/* Eight lower-case hex digits of x, lowest nibble first, in one 64-bit word (SWAR: each
 * nibble spread into a byte of its own, then '0' added, and 39 more to those above 9):
 * about 20 instructions where a digit at a time through a table took 8 a digit. */
static void hex8(char *out, uint32_t x) {
    uint64_t n = x;
    n = (n | n << 16) & 0x0000ffff0000ffffull;
    n = (n | n << 8) & 0x00ff00ff00ff00ffull;
    n = (n | n << 4) & 0x0f0f0f0f0f0f0f0full;
    uint64_t above9 = ((n + 0x0606060606060606ull) >> 4) & 0x0101010101010101ull;
    n += 0x3030303030303030ull + above9 * 39;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    n = __builtin_bswap64(n);
#endif
    memcpy(out, &n, 8); /* byte i (in memory order: the i-th character) holds nibble i */
}

static void make_request_id(sl_req_t *r) {
    const sl_h1_header_t *x = sl_h1_find(&r->head, "x-request-id", 12);
    bool usable = x && x->value.len > 0 && x->value.len < sizeof(r->rid);
    for (size_t i = 0; usable && i < x->value.len; i++)
        usable = (unsigned char)x->value.p[i] > 0x20 && (unsigned char)x->value.p[i] < 0x7f;
    if (usable) { /* a client's id is kept when it can be one: 1..32 visible ASCII characters */
        memcpy(r->rid, x->value.p, x->value.len);
        r->rid_len = (uint8_t)x->value.len;
        return;
    }
    /* xorshift64* per worker: unique within a process, unpredictable enough for tracing. */
    sl_worker_t *w = r->w;
    uint64_t v[2];
    for (int i = 0; i < 2; i++) {
        uint64_t s = w->rid_seed;
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        w->rid_seed = s;
        v[i] = s * 0x2545F4914F6CDD1DULL;
    }
    v[1] ^= ++w->rid_seq;
    for (int k = 0; k < 4; k++) hex8(r->rid + 8 * k, (uint32_t)(v[k / 2] >> (32 * (k % 2))));
    r->rid_len = 32;
}

static void normalize_host(sl_req_t *r) {
    sl_str_t h = r->head.host.len ? r->head.host : r->head.authority;
    size_t n = h.len;
    if (n && h.p[0] == '[') {
        const char *e = memchr(h.p, ']', n);
        n = e ? (size_t)(e - h.p + 1) : n;
    } else if (n) { /* no Host at all (HTTP/1.0): nothing to search, and h.p may be NULL */
        const char *colon = memchr(h.p, ':', n);
        if (colon) n = (size_t)(colon - h.p);
        /* "a.example.com." is the same name fully qualified (RFC 1034 3.1), and routes
         * like "a.example.com" (nginx drops the dot too) */
        if (n > 1 && h.p[n - 1] == '.') n--;
    }
    if (n > SL_REQ_HOST_MAX) n = SL_REQ_HOST_MAX;
    /* Lower-case already (nearly every client's): the head's own bytes, which live as long
     * as the request (sl__req_detach_head moves r->host with the head); a copy otherwise. */
    size_t up = 0;
    while (up < n && !(h.p[up] >= 'A' && h.p[up] <= 'Z')) up++;
    if (up == n) {
        r->host = n ? h.p : "";
        r->host_len = (uint16_t)n;
        return;
    }
    char *lower = sl_arena_alloc(&r->arena, n);
    if (!lower) n = 0; /* out of memory: matched as no Host, which routes by path alone */
    for (size_t i = 0; i < n; i++) lower[i] = sl_lower(h.p[i]);
    r->host = lower ? lower : "";
    r->host_len = (uint16_t)n;
}

/* The value of cookie `name` in the request's Cookie header(s), or an empty string. */
sl_str_t sl__req_cookie_value(const sl_req_t *r, const char *name) {
    size_t nl = strlen(name);
    for (uint16_t i = 0; i < r->head.nheaders; i++) {
        const sl_h1_header_t *h = &r->head.headers[i];
        if (!SL_IEQ(h->name, "cookie")) continue;
        const char *p = h->value.p, *end = p + h->value.len;
        while (p < end) {
            while (p < end && (*p == ' ' || *p == ';')) p++;
            const char *eq = memchr(p, '=', (size_t)(end - p));
            const char *semi = memchr(p, ';', (size_t)(end - p));
            if (!semi) semi = end;
            if (eq && eq < semi && (size_t)(eq - p) == nl && memcmp(p, name, nl) == 0)
                return (sl_str_t){eq + 1, (size_t)(semi - eq - 1)};
            p = semi;
        }
    }
    return (sl_str_t){"", 0};
}

sl_str_t sl__req_header_value(const sl_req_t *r, const char *name) {
    sl_str_t n = {name, strlen(name)};
    for (uint16_t i = 0; i < r->head.nheaders; i++)
        if (sl_str_ieq2(r->head.headers[i].name, n)) return r->head.headers[i].value;
    return (sl_str_t){"", 0};
}

/* A route's split: the first arm whose match (a header or cookie value) fits, else an arm
 * drawn by weight among those without a match. */
static int split_pick(const sl_req_t *r, const sl_route_conf_t *rc) {
    uint64_t total = 0;
    for (size_t i = 0; i < rc->nsplit; i++) {
        const sl_split_conf_t *a = &rc->split[i];
        if (!a->header && !a->cookie) {
            total += a->weight;
            continue;
        }
        sl_str_t v = a->header ? sl__req_header_value(r, a->header) : sl__req_cookie_value(r, a->cookie);
        const char *want = a->header ? a->header_value : a->cookie_value;
        if (v.len == strlen(want) && memcmp(v.p, want, v.len) == 0) return a->upstream;
    }
    uint64_t x = total ? sl_rand64() % total : 0;
    for (size_t i = 0; i < rc->nsplit; i++) {
        const sl_split_conf_t *a = &rc->split[i];
        if (a->header || a->cookie) continue;
        if (x < a->weight) return a->upstream;
        x -= a->weight;
    }
    return rc->upstream;
}

static bool phase_finished(sl_req_t *r, int rc);

/* Runs the request from its current stage: rewrite, access (each may wait), content. */
static void req_run(sl_req_t *r) {
    for (;;) {
        int phase;
        switch (r->stage) {
        case SL_STAGE_REWRITE:
            phase = SL_PHASE_REWRITE;
            break;
        case SL_STAGE_ACCESS:
            phase = SL_PHASE_ACCESS;
            break;
        case SL_STAGE_CONTENT: {
            const sl_route_conf_t *rc = sl__req_route_conf(r);
            if (r->upstream < 0 && !r->addr.set) r->upstream = rc->nsplit ? split_pick(r, rc) : rc->upstream;
            if (r->upstream < 0 && !r->addr.set) {
                sl_log_kv(SL_LOG_WARN, (const char *[]){"route", rc->name, "request_id", r->rid}, 2,
                          "the route's chain gave no answer and it has no upstream");
                r->stage = SL_STAGE_RESPONSE;
                sl__req_respond_error(r, 503, "no answer", false);
                return;
            }
            sl__proxy_start(r);
            return;
        }
        default:
            return;
        }
        if ((r->phases & (1u << phase)) && !phase_finished(r, sl__req_phase(r, phase))) return;
        r->stage++;
    }
}

/* Acts on a phase's outcome: true when the request moves on to its next stage. */
static bool phase_finished(sl_req_t *r, int rc) {
    switch (rc) {
    case SL_EAGAIN: /* the coroutine waits: sl__req_wakeup continues */
        return false;
    case SL_ERROR:
        sl__req_answer_plugin_error(r);
        return false;
    case SL_DONE:
        sl__req_answer_exit(r);
        return false;
    default:
        return true;
    }
}

void sl__req_wakeup(sl_req_t *r) {
    if (!phase_finished(r, sl_lua_resume(r->w, &r->lua, (sl_lua_who_t){r, r->route, r->rid}))) return;
    r->stage++;
    req_run(r);
}

/* The parsed head's headers are read by the router as sl_route_header_t: the same fields
 * first, then more (header_stride steps over them). */
_Static_assert(offsetof(sl_h1_header_t, name) == offsetof(sl_route_header_t, name) &&
                   offsetof(sl_h1_header_t, value) == offsetof(sl_route_header_t, value) &&
                   sizeof(sl_str_t) == sizeof(const char *) + sizeof(size_t),
               "sl_h1_header_t starts like sl_route_header_t");

/* The request's route (-1: none) and the path bytes its strip_prefix removes, from the
 * generation's C router; Lua runs only for a candidate whose match is a Lua function. */
static int route_request(sl_req_t *r, uint32_t *strip) {
    sl_str_t path = r->over.path.p ? r->over.path : r->head.path; /* as get_path reads it */
    sl_route_query_t q = {.host = r->host, .host_len = r->host_len,
                          .method = r->head.method.p, .method_len = r->head.method.len,
                          .path = path.p, .path_len = path.len,
                          .headers = (const sl_route_header_t *)(const void *)r->head.headers,
                          .nheaders = r->head.nheaders, .header_stride = sizeof(sl_h1_header_t)};
    sl_route_cursor_t c = {0};
    int idx;
    while ((idx = sl_router_next(r->w->cfg->router, &q, &c)) >= 0 && c.lua && !sl_lua_route_match(r->w, r, idx)) {
    }
    *strip = idx >= 0 ? c.strip : 0;
    return idx;
}

void sl__req_begin(sl_req_t *r) {
    sl_worker_t *w = r->w;
    r->body_done = r->head.body_kind == SL_BODY_NONE;
    normalize_host(r);
    make_request_id(r);
    sl__req_debug_begin(r);
    sl__trace_begin(r);

    uint32_t strip = 0;
    r->route = route_request(r, &strip);
    r->strip = strip;
    if (r->route < 0) {
        static const char body[] = "{\"error\":\"no route\"}";
        sl__req_respond(r, 404, SL_LIT("application/json"), SL_LIT(body), false);
        return;
    }
    r->phases = sl_lua_route_phases(w, r->route);
    if (r->head.body_kind == SL_BODY_LENGTH && r->ds->lc->max_body && r->head.content_length > r->ds->lc->max_body) {
        sl__req_respond_error(r, 413, "body too large", true);
        return;
    }
    r->stage = SL_STAGE_REWRITE;
    req_run(r);
}

void sl__req_on_client_data(sl_req_t *r) {
    if (!r->body_done) {
        if (r->mode == SL_MODE_PROXY && !r->body_buffered) {
            sl__proxy_pump_up(r);
            return;
        }
        if (r->mode == SL_MODE_BUFFER) {
            int rc = sl__req_buffer_pump(r);
            if (rc == SL_EAGAIN) return;
            if (r->replay.wait) {
                if (rc == SL_ERROR) r->ds->ops->pause(r->ds);
                sl__proxy_start(r); /* whole now (or failed: start_proxy answers) */
                return;
            }
            if (r->lua.waiting) {
                /* the plugin waiting in get_body learns the outcome when it runs again */
                if (rc == SL_ERROR) r->ds->ops->pause(r->ds);
                sl__req_wakeup(r);
            }
            return;
        }
    }
    /* Bytes of a pipelined request: they wait in the buffer until this one is answered
     * (HTTP/1 stops reading only when the buffer is full: stopping and restarting reads
     * on every request costs two epoll_ctl calls). */
}

/* The log phase runs after the response went out, on every path; it cannot wait. */
void sl__req_run_log_phase(sl_req_t *r) {
    if (r->logged || !(r->phases & (1u << SL_PHASE_LOG))) return;
    r->logged = 1;
    sl__req_phase(r, SL_PHASE_LOG);
}

void sl__req_abort(sl_req_t *r) {
    sl__attempt_abandon(r);
    sl__proxy_drop_upstream(r);
    if (r->status == 0) r->status = 499; /* the client left before an answer (nginx's 499) */
    /* A tunnel's request was counted (and logged) at its 101. */
    if (r->mode != SL_MODE_TUNNEL) {
        uint64_t now = sl_now_ns();
        sl_metrics_request(&r->w->metrics, r->route, r->status, now - r->start_ns);
        if (r->trace.on) sl__trace_end(r, now);
    }
    sl__req_cancel_wait(r);
    if (!r->lua.waiting) sl__req_run_log_phase(r); /* a coroutine suspended mid-phase is abandoned */
    sl__req_free(r);
}

void sl__req_free(sl_req_t *r) {
    sl_worker_t *w = r->w;
    SL_BUG_ON(sl__req_upstream_busy(r));
    sl__req_cancel_wait(r);
    sl_lua_task_end(r->w, &r->lua);
    while (r->slots.n) sl_conn_limit_release(r->slots.v[--r->slots.n]);
    if (r->cache) sl__cache_req_free(r); /* before the arena it lives in is reset */
    sl_arena_reset(&r->arena);
    free(r->heap);
    r->heap = NULL;
    if (r->replay.block) sl_block_put(&w->blocks, r->replay.block);
    r->replay.block = NULL;
    free(r->exit.alloc);
    r->exit.alloc = NULL;
    free(r->bf_buf);
    r->bf_buf = NULL;
    sl_compress_free(r->compress);
    r->compress = NULL;
    if (w->nfree_reqs < 1024) {
        r->free_next = w->free_reqs;
        w->free_reqs = r;
        w->nfree_reqs++;
    } else {
        free(r);
    }
}

/* ---- timed waits (a plugin's sleep, a retry's backoff, a hedge) ---- */

typedef struct {
    sl_wait_t base;
    uv_timer_t timer;
    void (*fire)(sl_req_t *r);
} sl_timed_wait_t;

static void timed_wait_closed(uv_handle_t *h) { free(h->data); }

static void timed_wait_fired(uv_timer_t *t) {
    sl_timed_wait_t *tw = t->data;
    sl_req_t *r = tw->base.r;
    uv_close((uv_handle_t *)t, timed_wait_closed);
    if (!r) return;
    r->wait = NULL;
    tw->fire(r);
}

static void timed_wait_cancel(sl_wait_t *wt) {
    sl_timed_wait_t *tw = SL_CONTAINER_OF(wt, sl_timed_wait_t, base);
    uv_timer_stop(&tw->timer);
    uv_close((uv_handle_t *)&tw->timer, timed_wait_closed);
}

int sl__req_wait_ms(sl_req_t *r, uint64_t ms, int kind, void (*fire)(sl_req_t *r)) {
    sl_timed_wait_t *tw = malloc(sizeof(*tw));
    if (!tw) return SL_ERROR;
    uv_timer_init(&r->w->loop, &tw->timer);
    tw->timer.data = tw;
    tw->base = (sl_wait_t){.r = r, .kind = kind, .cancel = timed_wait_cancel};
    tw->fire = fire;
    r->wait = &tw->base;
    /* The loop's clock is cached from the start of this iteration: refresh it, or the
     * wait could end early by the time spent in this iteration so far. */
    uv_update_time(&r->w->loop);
    uv_timer_start(&tw->timer, timed_wait_fired, ms, 0);
    return SL_OK;
}

uint64_t sl__req_grpc_due(const sl_req_t *r, uint64_t now) {
    const sl_h1_header_t *x = sl_h1_find(&r->head, "grpc-timeout", 12);
    uint64_t ms;
    if (!x || !sl_grpc_timeout_ms(x->value, &ms)) return 0;
    uint64_t spent = (sl_now_ns() - r->start_ns) / 1000000;
    return now + (ms > spent ? ms - spent : 1);
}

/* The grpc-timeout passed while a plugin slept: the client gets DEADLINE_EXCEEDED now (a
 * trailers-only answer to a gRPC request, as when it passes waiting on the upstream); the
 * rest of the chain's rewrite/access never runs, its later phases do. */
static void sleep_deadline(sl_req_t *r) {
    sl_log_kv(SL_LOG_INFO, (const char *[]){"request_id", r->rid}, 1,
              "grpc-timeout passed during a plugin's sleep: DEADLINE_EXCEEDED");
    sl_lua_task_abandon(r->w, &r->lua);
    r->stage = SL_STAGE_RESPONSE;
    sl__req_respond_error(r, 504, "deadline exceeded", false);
}

int sl__req_sleep(sl_req_t *r, uint64_t ms) {
    uv_update_time(&r->w->loop);
    uint64_t now = uv_now(&r->w->loop), due = sl__req_grpc_due(r, now);
    if (due && due - now < ms) return sl__req_wait_ms(r, due - now, SL_WAIT_SLEEP, sleep_deadline);
    return sl__req_wait_ms(r, ms, SL_WAIT_SLEEP, sl__req_wakeup);
}

void sl__req_cancel_wait(sl_req_t *r) {
    sl_wait_t *wt = r->wait;
    if (!wt) return;
    r->wait = NULL;
    wt->r = NULL;
    wt->cancel(wt);
}
