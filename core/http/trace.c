/* trace.c — a request's OpenTelemetry spans (telemetry: in the config): one SERVER span
 * per request, one CLIENT span per upstream attempt, W3C traceparent continued or
 * started. Spans go to the process's queue (ctx/telemetry.c) when the request is
 * sampled; ids are made and propagated whether or not it is.
 *
 * The upstream gets the current attempt's span as its parent: the traceparent is one of
 * the request's header edits, and a retry rewrites the 16 hex digits of its span id in
 * the kept upstream head (r->uphead) before the head is sent again. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ctx/telemetry.h"
#include "http/request.h"
#include "proto/traceparent.h"

static const sl_str_t tp_name = {"traceparent", sizeof("traceparent") - 1};

static void random_id(uint8_t *p, size_t n) {
    for (;;) {
        uint64_t a = sl_rand64(), b = sl_rand64();
        memcpy(p, &a, n < 8 ? n : 8);
        if (n > 8) memcpy(p + 8, &b, n - 8);
        for (size_t i = 0; i < n; i++)
            if (p[i]) return; /* an all-zero id is invalid */
    }
}

/* Continues the client's traceparent or starts a trace (sampled at `ratio`), and sets the
 * traceparent the upstream gets with sl__req_x(r)->span as its parent. The core's tracing
 * and the traceparent plugin both come here. */
static void trace_context(sl_req_t *r, double ratio) {
    sl_traceparent_t tp;
    sl_str_t v = sl__req_header_value(r, "traceparent");
    if (v.len && sl_traceparent_parse(v, &tp)) {
        memcpy(r->trace.trace_id, tp.trace_id, 16);
        memcpy(r->trace.parent, tp.span_id, 8);
        r->trace.has_parent = 1;
        r->trace.sampled = tp.flags & 1; /* parent-based: the caller decided */
    } else {
        random_id(r->trace.trace_id, 16);
        /* a trace started here: sample_ratio of them are recorded */
        r->trace.sampled = (double)(sl_rand64() >> 11) * 0x1.0p-53 < ratio;
    }
    random_id(r->trace.server, 8);
    random_id(sl__req_x(r)->span, 8); /* the first attempt's, named in the upstream head now */
    char *out = sl_arena_alloc(&r->arena, SL_TRACEPARENT_LEN);
    if (!out) return;
    sl_traceparent_format(out, r->trace.trace_id, sl__req_x(r)->span, r->trace.sampled);
    const char *err;
    sl_edits_set(&r->req_edits, &r->arena, tp_name, (sl_str_t){out, SL_TRACEPARENT_LEN}, &err);
    /* a tracestate without its traceparent means nothing; with one it passes unchanged */
    if (!r->trace.has_parent) sl_edits_clear(&r->req_edits, &r->arena, SL_LIT("tracestate"), &err);
}

void sl__trace_begin(sl_req_t *r) {
    const sl_telemetry_conf_t *tc = &r->w->cfg->telemetry;
    if (!tc->enabled) return;
    r->trace.on = 1;
    trace_context(r, tc->sample_ratio);
}

int sl_ffi_traceparent(sl_req_t *r, double sample_ratio, char *out) {
    /* With telemetry: the request has its context already (and the upstream its header):
     * the plugin only reads it. Without, the plugin's call makes it, once per request. */
    uint8_t made = 0;
    for (int i = 0; i < 16; i++) made |= r->trace.trace_id[i];
    if (!made) trace_context(r, sample_ratio);
    sl_hex_lower(out, r->trace.trace_id, 16);
    sl_hex_lower(out + 32, sl__req_x(r)->span, 8);
    return SL_OK;
}

/* The span id digits of the traceparent in the kept upstream head, or NULL. */
static char *head_span_digits(sl_req_t *r) {
    static const char key[] = "\r\ntraceparent: 00-";
    char *p = r->uphead.base;
    size_t n = r->uphead.len, k = sizeof(key) - 1;
    for (size_t i = 0; p && i + k + 32 + 1 + 16 <= n; i++)
        if (p[i] == '\r' && memcmp(p + i, key, k) == 0) return p + i + k + 33;
    return NULL;
}

void sl__trace_attempt_begin(sl_req_t *r) {
    sl__req_x(r)->span_start_ns = sl_now_ns();
    sl__req_x(r)->span_n = ++r->trace.nattempts;
    if (sl__req_x(r)->span_n == 1) return; /* the first uses the id already in the head */
    random_id(sl__req_x(r)->span, 8);
    char *d = head_span_digits(r);
    if (d) sl_hex_lower(d, sl__req_x(r)->span, 8);
}

/* Wall-clock ns of a monotonic time (sl_now_ns), for OTLP's UnixNano fields. */
static uint64_t unix_ns(uint64_t mono, uint64_t now_mono, uint64_t now_unix) { return now_unix - (now_mono - mono); }

static uint64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void span_common(sl_req_t *r, sl_span_t *s) {
    memset(s, 0, sizeof(*s));
    memcpy(s->trace_id, r->trace.trace_id, 16);
    sl_span_str(s->method, sizeof s->method, r->head.method.p, r->head.method.len);
    const sl_route_conf_t *rc = sl__req_route_conf(r);
    if (rc) sl_span_str(s->route, sizeof s->route, rc->name, strlen(rc->name));
    if (r->upstream >= 0) {
        const char *u = r->w->cfg->upstreams[r->upstream].name;
        sl_span_str(s->upstream, sizeof s->upstream, u, strlen(u));
    }
}

static void attempt_span(sl_req_t *r, int status, bool cancelled);

void sl__trace_attempt_end(sl_req_t *r, int status) { attempt_span(r, status, false); }

void sl__trace_attempt_cancelled(sl_req_t *r) { attempt_span(r, 0, true); }

static void attempt_span(sl_req_t *r, int status, bool cancelled) {
    if (!r->trace.sampled || !sl__req_x(r)->span_n) return;
    sl_span_t s;
    span_common(r, &s);
    memcpy(s.span_id, sl__req_x(r)->span, 8);
    memcpy(s.parent_id, r->trace.server, 8);
    s.has_parent = 1;
    s.kind = SL_SPAN_CLIENT;
    s.status = (uint16_t)status;
    s.attempt = sl__req_x(r)->span_n;
    /* the hedge is the attempt begun while the first raced (hedge_after); later ones retry */
    const char *reason = sl__req_x(r)->span_n == 1 ? "first" : r->at.hedged && sl__req_x(r)->span_n == 2 ? "hedge" : "retry";
    sl_span_str(s.reason, sizeof s.reason, reason, strlen(reason));
    const char *target = sl__req_attempt_target(r);
    if (!target) target = "";
    sl_span_str(s.target, sizeof s.target, target, strlen(target));
    if (cancelled) sl_span_str(s.error_type, sizeof s.error_type, "cancelled", 9);
    else if (!status) sl_span_str(s.error_type, sizeof s.error_type, "no_response", 11);
    else if (status >= 500) snprintf(s.error_type, sizeof s.error_type, "%d", status);
    uint64_t now = sl_now_ns(), wall = realtime_ns();
    s.start_unix_ns = unix_ns(sl__req_x(r)->span_start_ns, now, wall);
    s.end_unix_ns = wall;
    sl_telemetry_submit(&s);
}

void sl__trace_plugin(sl_req_t *r, int pos, int phase, uint64_t ns) {
    sl_span_t s;
    span_common(r, &s);
    random_id(s.span_id, 8);
    memcpy(s.parent_id, r->trace.server, 8);
    s.has_parent = 1;
    s.kind = SL_SPAN_INTERNAL;
    const sl_config_t *cfg = r->w->cfg;
    const sl_route_conf_t *rc = sl__req_route_conf(r);
    const char *name = sl_config_chain_name(cfg, rc, (size_t)pos);
    const char *ph = sl_metrics_phase_name(phase);
    sl_span_str(s.plugin, sizeof s.plugin, name, strlen(name));
    sl_span_str(s.phase, sizeof s.phase, ph, strlen(ph));
    s.end_unix_ns = realtime_ns();
    s.start_unix_ns = s.end_unix_ns - ns;
    sl_telemetry_submit(&s);
}

void sl__trace_end(sl_req_t *r, uint64_t now) {
    if (!r->trace.sampled) return;
    sl_span_t s;
    span_common(r, &s);
    memcpy(s.span_id, r->trace.server, 8);
    if ((s.has_parent = r->trace.has_parent)) memcpy(s.parent_id, r->trace.parent, 8);
    s.kind = SL_SPAN_SERVER;
    s.status = (uint16_t)r->status;
    s.secure = r->ds->secure;
    s.server_port = (uint16_t)r->ds->port;
    sl_span_str(s.path, sizeof s.path, r->head.path.p, r->head.path.len);
    sl_span_str(s.server_address, sizeof s.server_address, r->host ? r->host : "", r->host ? r->host_len : 0);
    sl_span_str(s.client_address, sizeof s.client_address, r->ds->peer, strlen(r->ds->peer));
    if (r->status >= 500) snprintf(s.error_type, sizeof s.error_type, "%d", r->status);
    else if (r->status == 499) sl_span_str(s.error_type, sizeof s.error_type, "client_closed", 13);
    uint64_t wall = realtime_ns() - (sl_now_ns() - now);
    s.start_unix_ns = unix_ns(r->start_ns, now, wall);
    s.end_unix_ns = wall;
    sl_telemetry_submit(&s);
}
