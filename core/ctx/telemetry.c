/* telemetry.c — the span queue and the OTLP/HTTP JSON exporter thread (telemetry.h).
 *
 * The exporter thread POSTs each batch with the core's HTTP client (client/client.h) on a
 * libuv loop of its own, run only while one POST is under way: the thread blocks on the
 * queue's condition variable between batches, as before. */
#include "ctx/telemetry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/wbuf.h"
#include "client/client.h"
#include "proto/traceparent.h"

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sl_span_t *ring; /* [SL_TELEMETRY_QUEUE] */
    uint32_t head, n;
    uint64_t oldest_ms; /* when the oldest queued span came (0: none) */
    bool running, stop;
    pthread_t thread;
    /* the endpoint, under mu (a reload may change it) */
    char *host, *path, *service, *headers; /* headers: "Name: value\r\n" lines */
    uint16_t port;
    uint64_t timeout_ms;
    uint64_t dropped, exported, failed; /* atomics */
} telemetry_t;

static telemetry_t tel = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

void sl_span_str(char *field, size_t cap, const char *p, size_t n) {
    if (n >= cap) n = cap - 1;
    memcpy(field, p, n);
    field[n] = 0;
}

void sl_telemetry_counters(uint64_t *dropped, uint64_t *exported, uint64_t *failed) {
    *dropped = __atomic_load_n(&tel.dropped, __ATOMIC_RELAXED);
    *exported = __atomic_load_n(&tel.exported, __ATOMIC_RELAXED);
    *failed = __atomic_load_n(&tel.failed, __ATOMIC_RELAXED);
}

void sl_telemetry_submit(const sl_span_t *s) {
    pthread_mutex_lock(&tel.mu);
    if (!tel.running || tel.n == SL_TELEMETRY_QUEUE) {
        pthread_mutex_unlock(&tel.mu);
        __atomic_fetch_add(&tel.dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    tel.ring[(tel.head + tel.n) % SL_TELEMETRY_QUEUE] = *s;
    if (tel.n++ == 0) tel.oldest_ms = sl_now_ms();
    if (tel.n == SL_TELEMETRY_BATCH) pthread_cond_signal(&tel.cv);
    pthread_mutex_unlock(&tel.mu);
}

/* ---- the OTLP JSON body ---- */

static void attr_str(sl_wbuf_t *b, bool *first, const char *key, const char *v) {
    if (!*v) return;
    if (!*first) SL_WBUF_LIT(b, ",");
    *first = false;
    SL_WBUF_LIT(b, "{\"key\":");
    sl_wbuf_json_cstr(b, key);
    SL_WBUF_LIT(b, ",\"value\":{\"stringValue\":");
    sl_wbuf_json_cstr(b, v);
    SL_WBUF_LIT(b, "}}");
}

static void attr_int(sl_wbuf_t *b, bool *first, const char *key, unsigned long long v) {
    if (!*first) SL_WBUF_LIT(b, ",");
    *first = false;
    SL_WBUF_LIT(b, "{\"key\":");
    sl_wbuf_json_cstr(b, key);
    sl_wbuf_printf(b, ",\"value\":{\"intValue\":\"%llu\"}}", v);
}

/* server.address and server.port (the semantic conventions' pair) of a target's "ip:port"
 * or "[v6]:port": the address without the port or brackets, the port as a number. */
static void attr_host_port(sl_wbuf_t *b, bool *first, const char *text) {
    char host[96];
    const char *colon = text[0] == '[' ? strstr(text, "]:") : strchr(text, ':');
    if (text[0] != '[' && colon && strchr(colon + 1, ':')) colon = NULL; /* a bare IPv6 address */
    size_t hl = colon ? (size_t)(colon - text) : strlen(text);
    if (text[0] == '[') hl = colon ? hl - 1 : hl;
    snprintf(host, sizeof host, "%.*s", (int)hl, text + (text[0] == '[' && colon));
    attr_str(b, first, "server.address", host);
    const char *port = colon ? colon + (text[0] == '[' ? 2 : 1) : "";
    char *end;
    unsigned long p = strtoul(port, &end, 10);
    if (*port && !*end && p > 0 && p < 65536) attr_int(b, first, "server.port", p);
}

static void put_hex(sl_wbuf_t *b, const uint8_t *p, size_t n) {
    char h[32];
    sl_hex_lower(h, p, n);
    SL_WBUF_LIT(b, "\"");
    sl_wbuf_put(b, h, 2 * n);
    SL_WBUF_LIT(b, "\"");
}

static void encode(sl_wbuf_t *b, const sl_span_t *s, size_t n, const char *service) {
    b->len = 0;
    SL_WBUF_LIT(b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\",\"value\":{\"stringValue\":");
    sl_wbuf_json_cstr(b, service);
    SL_WBUF_LIT(b, "}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"sluice\"},\"spans\":[");
    for (size_t i = 0; i < n; i++, s++) {
        if (i) SL_WBUF_LIT(b, ",");
        SL_WBUF_LIT(b, "{\"traceId\":");
        put_hex(b, s->trace_id, 16);
        SL_WBUF_LIT(b, ",\"spanId\":");
        put_hex(b, s->span_id, 8);
        if (s->has_parent) {
            SL_WBUF_LIT(b, ",\"parentSpanId\":");
            put_hex(b, s->parent_id, 8);
        }
        char name[160];
        if (s->kind == SL_SPAN_SERVER)
            snprintf(name, sizeof name, "%s%s%s", s->method, s->route[0] ? " " : "", s->route);
        else if (s->kind == SL_SPAN_INTERNAL)
            snprintf(name, sizeof name, "%s %s", s->plugin, s->phase);
        else
            snprintf(name, sizeof name, "%s %s", s->method, s->upstream[0] ? s->upstream : "upstream");
        SL_WBUF_LIT(b, ",\"name\":");
        sl_wbuf_json_cstr(b, name);
        sl_wbuf_printf(b, ",\"kind\":%d", s->kind);
        sl_wbuf_printf(b, ",\"startTimeUnixNano\":\"%llu\"", (unsigned long long)s->start_unix_ns);
        sl_wbuf_printf(b, ",\"endTimeUnixNano\":\"%llu\"", (unsigned long long)s->end_unix_ns);
        SL_WBUF_LIT(b, ",\"attributes\":[");
        bool first = true;
        if (s->kind != SL_SPAN_INTERNAL) attr_str(b, &first, "http.request.method", s->method);
        if (s->status) attr_int(b, &first, "http.response.status_code", s->status);
        attr_str(b, &first, "error.type", s->error_type);
        if (s->kind != SL_SPAN_INTERNAL) attr_str(b, &first, "sluice.upstream", s->upstream);
        if (s->kind == SL_SPAN_INTERNAL) {
            attr_str(b, &first, "http.route", s->route);
            attr_str(b, &first, "sluice.plugin", s->plugin);
            attr_str(b, &first, "sluice.phase", s->phase);
        } else if (s->kind == SL_SPAN_SERVER) {
            attr_str(b, &first, "url.path", s->path);
            attr_str(b, &first, "url.scheme", s->secure ? "https" : "http");
            attr_str(b, &first, "http.route", s->route);
            attr_str(b, &first, "server.address", s->server_address);
            if (s->server_port) attr_int(b, &first, "server.port", s->server_port);
            attr_str(b, &first, "client.address", s->client_address);
        } else {
            attr_host_port(b, &first, s->target);
            attr_str(b, &first, "sluice.target", s->target);
            attr_int(b, &first, "sluice.attempt", s->attempt);
            attr_str(b, &first, "sluice.attempt.reason", s->reason);
        }
        SL_WBUF_LIT(b, "]");
        /* STATUS_CODE_ERROR (2) for a failure: the SERVER span on 5xx, a CLIENT span on any
         * error (the HTTP semantic conventions' rule) */
        if (s->error_type[0] || (s->kind == SL_SPAN_SERVER && s->status >= 500) ||
            (s->kind == SL_SPAN_CLIENT && s->status >= 400))
            SL_WBUF_LIT(b, ",\"status\":{\"code\":2}");
        SL_WBUF_LIT(b, "}");
    }
    SL_WBUF_LIT(b, "]}]}]}");
}

/* ---- one POST, bounded by timeout_ms, on the exporter's own loop ---- */

typedef struct {
    int status;
    char *why;
    size_t whylen;
} post_t;

static void post_done(void *ud, int status, const char *err) {
    post_t *pt = ud;
    pt->status = status;
    if (err)
        snprintf(pt->why, pt->whylen, "%s", err);
    else if (status < 200 || status >= 300)
        snprintf(pt->why, pt->whylen, "the collector answered %d", status);
}

/* POSTs body to the endpoint, the request built in req (the exporter's, reused: no
 * allocation per batch once it has grown); true on a 2xx. The host is resolved each time
 * (a name may move); a failure is logged once per state change by the caller. */
static bool post(uv_loop_t *loop, sl_wbuf_t *req, const char *host, uint16_t port, const char *path,
                 const char *headers, const sl_wbuf_t *body, uint64_t timeout_ms, char *why, size_t whylen) {
    req->len = 0;
    sl_wbuf_printf(req,
                   "POST %s HTTP/1.1\r\nHost: %s%s%s:%u\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
                   path, strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", port, body->len,
                   headers ? headers : "");
    sl_wbuf_put(req, body->p, body->len);
    post_t pt = {.why = why, .whylen = whylen};
    sl_client_req_t rq = {.loop = loop,
                          .host = host,
                          .port = port,
                          .req = req->p,
                          .req_len = req->len,
                          .req_borrowed = true, /* the loop runs until the call is gone */
                          .timeout_ms = timeout_ms ? timeout_ms : 1,
                          .drop_body = true,
                          .oneshot = true,
                          .ud = &pt,
                          .on_done = post_done};
    const char *err = "out of memory";
    if (!sl_wbuf_failed(req) && sl_client_start(&rq, &err))
        uv_run(loop, UV_RUN_DEFAULT); /* until the call freed itself */
    else
        snprintf(why, whylen, "%s", err);
    req->oom = false; /* "out of memory" is why; the next batch tries again */
    return pt.status >= 200 && pt.status < 300;
}

static void *exporter_main(void *arg) {
    (void)arg;
    sl_span_t *batch = malloc(SL_TELEMETRY_BATCH * sizeof(sl_span_t));
    sl_wbuf_t body = {0}, req = {0};
    bool failing = false;
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0) {
        free(batch);
        batch = NULL; /* spans are dropped at the stop, as for a collector that is down */
    }
    pthread_mutex_lock(&tel.mu);
    while (batch) {
        /* wait for a full batch, the oldest span's flush time, or stop */
        while (!tel.stop && tel.n < SL_TELEMETRY_BATCH &&
               !(tel.n && sl_now_ms() - tel.oldest_ms >= SL_TELEMETRY_FLUSH_MS)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000L; /* re-check the flush time every 100 ms */
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&tel.cv, &tel.mu, &ts);
        }
        if (tel.n == 0 && tel.stop) break;
        size_t n = SL_MIN((size_t)tel.n, (size_t)SL_TELEMETRY_BATCH);
        for (size_t i = 0; i < n; i++) batch[i] = tel.ring[(tel.head + i) % SL_TELEMETRY_QUEUE];
        tel.head = (tel.head + (uint32_t)n) % SL_TELEMETRY_QUEUE;
        tel.n -= (uint32_t)n;
        tel.oldest_ms = tel.n ? sl_now_ms() : 0;
        char *host = strdup(tel.host), *path = strdup(tel.path), *service = strdup(tel.service);
        char *headers = tel.headers ? strdup(tel.headers) : NULL;
        uint16_t port = tel.port;
        uint64_t timeout = tel.timeout_ms;
        bool last = tel.stop;
        pthread_mutex_unlock(&tel.mu);
        char why[160] = "out of memory";
        bool ok = false;
        if (host && path && service) {
            encode(&body, batch, n, service);
            ok = !sl_wbuf_failed(&body) && post(&loop, &req, host, port, path, headers, &body, timeout, why, sizeof why);
            body.oom = false; /* "out of memory" is why; the next batch tries again */
        }
        if (ok) {
            __atomic_fetch_add(&tel.exported, n, __ATOMIC_RELAXED);
            if (failing) sl_log_info("telemetry: exporting to %s:%u again", host, port);
            failing = false;
        } else {
            /* the batch is lost: a collector that is down must not grow the queue */
            __atomic_fetch_add(&tel.dropped, n, __ATOMIC_RELAXED);
            __atomic_fetch_add(&tel.failed, 1, __ATOMIC_RELAXED);
            if (!failing) sl_log_warn("telemetry: export to %s:%u%s failed: %s (spans are dropped until it works)",
                                      host ? host : "?", port, path ? path : "", why);
            failing = true;
        }
        free(host), free(path), free(service), free(headers);
        pthread_mutex_lock(&tel.mu);
        if (last && !ok) { /* stopping, and the collector does not take them: no more waits */
            __atomic_fetch_add(&tel.dropped, tel.n, __ATOMIC_RELAXED);
            tel.n = 0;
        }
        if (last && tel.n == 0) break;
    }
    pthread_mutex_unlock(&tel.mu);
    if (batch) uv_loop_close(&loop);
    free(batch);
    free(body.p);
    free(req.p);
    return NULL;
}

int sl_telemetry_configure(const sl_telemetry_conf_t *tc) {
    if (!tc->enabled) return SL_OK;
    size_t hl = 1;
    for (size_t i = 0; i < tc->nheaders; i++) hl += strlen(tc->headers[i].name) + strlen(tc->headers[i].value) + 4;
    char *headers = malloc(hl);
    if (!headers) return SL_ERROR;
    size_t off = 0;
    for (size_t i = 0; i < tc->nheaders; i++)
        off += (size_t)snprintf(headers + off, hl - off, "%s: %s\r\n", tc->headers[i].name, tc->headers[i].value);
    headers[off] = 0;
    pthread_mutex_lock(&tel.mu);
    free(tel.host), free(tel.path), free(tel.service), free(tel.headers);
    tel.host = strdup(tc->host ? tc->host : "127.0.0.1");
    tel.path = strdup(tc->path ? tc->path : "/v1/traces");
    tel.service = strdup(tc->service_name ? tc->service_name : "sluice");
    tel.headers = headers;
    tel.port = tc->port;
    tel.timeout_ms = tc->timeout_ms;
    int rc = SL_OK;
    if (!tel.running) {
        tel.ring = tel.ring ? tel.ring : malloc(SL_TELEMETRY_QUEUE * sizeof(sl_span_t));
        tel.stop = false;
        if (!tel.ring || pthread_create(&tel.thread, NULL, exporter_main, NULL) != 0)
            rc = SL_ERROR;
        else
            tel.running = true;
    }
    pthread_mutex_unlock(&tel.mu);
    return rc;
}

void sl_telemetry_stop(void) {
    pthread_mutex_lock(&tel.mu);
    bool running = tel.running;
    tel.stop = true;
    pthread_cond_signal(&tel.cv);
    pthread_mutex_unlock(&tel.mu);
    if (running) pthread_join(tel.thread, NULL);
    pthread_mutex_lock(&tel.mu);
    tel.running = false;
    free(tel.ring), free(tel.host), free(tel.path), free(tel.service), free(tel.headers);
    tel.ring = NULL, tel.host = tel.path = tel.service = tel.headers = NULL;
    tel.n = tel.head = 0;
    pthread_mutex_unlock(&tel.mu);
}
