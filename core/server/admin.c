/* admin.c — a small HTTP/1.1 server for operators, one request per connection.
 *
 * It runs on the main thread, never on a worker, so a scrape or a status call
 * never delays traffic. Requests are tiny: the head is read into a fixed buffer
 * and parsed by the proxy's own parser (proto/http1.h), a body (Content-Length or
 * chunked) is framed by it into a second fixed buffer, the answer is written, and
 * the connection is closed. A head the parser refuses, or one larger than the
 * buffer, is answered with the parser's status (400, 414, 431, ...) and a JSON
 * error. A connection gets ADMIN_IO_TIMEOUT_MS for its request and again for its
 * answer, so idle or slow clients cannot pile up.
 */
#include "server/server.h"
#include "ctx/telemetry.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/log.h"
#include "base/wbuf.h"
#include "http/http_logger.h"
#include "http/mirror.h"
#include "proto/http1.h"
#include "proto/json.h"
#include "server/etcd.h"
#include "upstream/conn_limit.h"
#include "upstream/cache.h"

#define ADMIN_HEAD_MAX 8192
#define ADMIN_BODY_MAX 8192
#define ADMIN_IO_TIMEOUT_MS 5000
/* After a refusal sent before the request was read whole: how long the rest is read and
 * dropped, so that closing with unread bytes does not reset the answer away. */
#define ADMIN_LINGER_MS 1000

static const sl_h1_limits_t admin_limits = {.max_header_size = ADMIN_HEAD_MAX,
                                            .max_request_line = ADMIN_HEAD_MAX / 2};

typedef struct {
    uv_tcp_t tcp;
    uv_timer_t timer; /* the request's deadline, then the answer's */
    uv_write_t wreq;
    uv_shutdown_t sreq;
    sl_server_t *srv;
    int open_handles; /* tcp and timer: freed when both are closed */
    bool closing;
    bool awaiting; /* a reload's answer is due: freed by it, not by the close */
    bool head_done; /* `head` is parsed; the body is being read */
    bool lingering; /* refused mid-request: what the client still sends is dropped */
    bool writing;   /* the answer is being written */
    sl_h1_t h1;
    sl_h1_head_t head; /* slices of buf[0..head_len) */
    sl_h1_header_t spill[SL_H1_MAX_HEADERS]; /* a head's fields beyond the inline ones */
    char buf[ADMIN_HEAD_MAX]; /* the head, then after it each read of the body's bytes */
    size_t len, head_len;
    sl_wbuf_t body; /* bounded, over bodybuf: the body, unframed */
    char bodybuf[ADMIN_BODY_MAX];
    char *out;
    uv_buf_t iov[2];
} admin_conn_t;

static void admin_on_close(uv_handle_t *h) {
    admin_conn_t *a = h->data;
    if (--a->open_handles > 0 || a->awaiting) return;
    free(a->out);
    free(a);
}

/* Idempotent: a write cancelled by the close calls back here too. */
static void admin_close(admin_conn_t *a) {
    if (a->closing) return;
    a->closing = true;
    uv_close((uv_handle_t *)&a->tcp, admin_on_close);
    uv_close((uv_handle_t *)&a->timer, admin_on_close);
}

static void admin_on_timeout(uv_timer_t *t) { admin_close(t->data); }

static void admin_on_shutdown(uv_shutdown_t *sr, int status) {
    admin_conn_t *a = sr->data;
    if (status < 0) admin_close(a); /* else the client's EOF, or the linger timer, closes */
}

static void admin_on_write(uv_write_t *wr, int status) {
    admin_conn_t *a = wr->data;
    a->writing = false;
    if (status < 0 || !a->lingering || a->closing) {
        admin_close(a);
        return;
    }
    /* a FIN after the answer, and the client's remaining bytes read and dropped until its
     * own EOF (admin_on_read) or ADMIN_LINGER_MS */
    a->sreq.data = a;
    uv_timer_start(&a->timer, admin_on_timeout, ADMIN_LINGER_MS, 0);
    if (uv_shutdown(&a->sreq, (uv_stream_t *)&a->tcp, admin_on_shutdown) != 0) admin_close(a);
}

static void admin_send_with(admin_conn_t *a, int status, const char *ctype, const char *extra, char *body,
                            size_t len) {
    char head[320];
    sl_str_t reason = sl_h1_reason(status);
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %.*s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
                     status, (int)reason.len, reason.p, ctype, len, extra);
    /* HEAD: the head GET would get, Content-Length included, and no body (RFC 9110 9.3.2) */
    size_t blen = SL_IEQ(a->head.method, "head") ? 0 : len;
    a->out = malloc((size_t)n + blen);
    if (!a->out) {
        free(body);
        admin_close(a);
        return;
    }
    memcpy(a->out, head, (size_t)n);
    if (blen) memcpy(a->out + n, body, blen);
    free(body);
    a->iov[0] = uv_buf_init(a->out, (unsigned)((size_t)n + blen));
    a->wreq.data = a;
    uv_timer_start(&a->timer, admin_on_timeout, ADMIN_IO_TIMEOUT_MS, 0); /* a client that never reads */
    a->writing = true;
    if (uv_write(&a->wreq, (uv_stream_t *)&a->tcp, a->iov, 1, admin_on_write) != 0) admin_close(a);
}

static void admin_send(admin_conn_t *a, int status, const char *ctype, char *body, size_t len) {
    admin_send_with(a, status, ctype, "", body, len);
}

/* The admin path's pages are growing buffers (base/wbuf.h); tput_fn is the writer that
 * discovery's JSON renderers are handed. */
static void tput_fn(void *ud, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tput_fn(void *ud, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sl_wbuf_vprintf(ud, fmt, ap);
    va_end(ap);
}

static const char *const balancer_label[] = {
    [SL_LB_ROUND_ROBIN] = "round-robin",       [SL_LB_WEIGHTED_ROUND_ROBIN] = "weighted-round-robin",
    [SL_LB_LEAST_CONN] = "least-conn",         [SL_LB_P2C_EWMA] = "p2c-ewma",
    [SL_LB_CONSISTENT_HASH] = "consistent-hash",
};
static const char *const breaker_label[] = {[SL_BREAKER_CLOSED] = "closed", [SL_BREAKER_OPEN] = "open",
                                            [SL_BREAKER_HALF_OPEN] = "half_open"};

/* A target as health sees it: probes first, then a passive ejection. */
static const char *health_label(sl_tstate_t *ts, uint64_t now_ms) {
    if (atomic_load(&ts->probe_down)) return "unhealthy";
    return atomic_load(&ts->ejected_until_ms) > now_ms ? "ejected" : "healthy";
}


static const char *const layer_label[SL_LAYERS] = {[SL_LAYER_HTTP] = "http", [SL_LAYER_TCP] = "tcp"};

/* Can a protocol: tcp listener use upstream u (so its TCP-layer breakers are in use)? One
 * that names it, in `upstream` or `sni_routes`, or one with a preread chain: a plugin may
 * choose any upstream at run time (sluice.upstream.set), and its sessions then open and
 * close that upstream's TCP-layer breakers like any others. */
static bool tcp_upstream(const sl_config_t *cfg, size_t u) {
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        const sl_listener_conf_t *l = &cfg->listeners[i];
        if (l->protocol != SL_PROTO_TCP) continue;
        if (l->upstream == (int)u || l->nplugins) return true;
        for (size_t k = 0; k < l->nsni_routes; k++)
            if (l->sni_routes[k].upstream == (int)u) return true;
    }
    return false;
}

/* Gauges read from the target states (not per-worker counters). */
static void render_target_gauges(sl_server_t *srv, sl_wbuf_t *t) {
    const sl_config_t *cfg = srv->cfg;
    uint64_t now = sl_now_ms();
    sl_wbuf_printf(t, "# HELP sluice_circuit_breaker_state Breaker per target and layer: 0 closed, 1 open, 2 half-open.\n"
            "# TYPE sluice_circuit_breaker_state gauge\n");
    for (size_t u = 0; u < cfg->nupstreams; u++)
        for (int layer = 0; layer < SL_LAYERS; layer++) {
            if (layer == SL_LAYER_TCP && !tcp_upstream(cfg, u)) continue;
            for (size_t k = 0; k < cfg->upstreams[u].ntargets; k++)
                if (sl_slot_up(&cfg->upstreams[u], k))
                sl_wbuf_printf(t, "sluice_circuit_breaker_state{upstream=\"%s\",target=\"%s\",layer=\"%s\"} %d\n",
                     cfg->upstreams[u].name, cfg->upstreams[u].targets[k].addr.text, layer_label[layer],
                     sl_tstate_breaker_now(srv->ug->ups[u].ts[k], &cfg->upstreams[u], layer, now));
        }
    sl_wbuf_printf(t, "# HELP sluice_target_healthy 1 when a target takes new requests (health checks, passive ejection).\n"
            "# TYPE sluice_target_healthy gauge\n");
    for (size_t u = 0; u < cfg->nupstreams; u++)
        for (size_t k = 0; k < cfg->upstreams[u].ntargets; k++)
            if (sl_slot_up(&cfg->upstreams[u], k))
            sl_wbuf_printf(t, "sluice_target_healthy{upstream=\"%s\",target=\"%s\"} %d\n", cfg->upstreams[u].name,
                 cfg->upstreams[u].targets[k].addr.text, sl_tstate_healthy(srv->ug->ups[u].ts[k], now) ? 1 : 0);
}

/* DNS names and the registry (discovery.h's counters; kept across reloads). */
static void render_discovery(sl_server_t *srv, sl_wbuf_t *t) {
    static sl_discovery_stats_t last; /* what a drain's free took with it: counters never go back */
    if (srv->disc) last = *sl_discovery_stats(srv->disc);
    sl_wbuf_printf(t, "# HELP sluice_dns_resolutions_total DNS lookups of targets' names, by result.\n"
            "# TYPE sluice_dns_resolutions_total counter\n");
    for (int r = 0; r < SL_DNS_RESULTS; r++)
        sl_wbuf_printf(t, "sluice_dns_resolutions_total{result=\"%s\"} %llu\n", sl_dns_result_names[r],
             (unsigned long long)last.resolutions[r]);
    sl_wbuf_printf(t, "# HELP sluice_dns_stale_total Failed re-resolutions that kept a name's last good addresses.\n"
            "# TYPE sluice_dns_stale_total counter\nsluice_dns_stale_total %llu\n"
            "# HELP sluice_registry_registrations_total Registry PUTs accepted (registrations and renewals).\n"
            "# TYPE sluice_registry_registrations_total counter\nsluice_registry_registrations_total %llu\n"
            "# HELP sluice_registry_expired_total Registered targets removed because their ttl ran out.\n"
            "# TYPE sluice_registry_expired_total counter\nsluice_registry_expired_total %llu\n",
         (unsigned long long)last.kept, (unsigned long long)last.registrations, (unsigned long long)last.expired);
}

static char *render_status(sl_server_t *srv, size_t *len) {
    const sl_config_t *cfg = srv->cfg;
    sl_wbuf_t t = {0};
    int retiring = sl__reload_retiring(srv);
    sl_wbuf_printf(&t, "{\"generation\":%llu,\"hash\":\"%016llx\",\"draining\":%s,\"retiring_generations\":%d,\"listeners\":[",
         (unsigned long long)srv->generation, (unsigned long long)srv->config_hash,
         sl_server_draining(srv) ? "true" : "false", retiring);
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        sl_wbuf_printf(&t, "%s{\"name\":", i ? "," : "");
        sl_wbuf_json_cstr(&t, cfg->listeners[i].name);
        sl_wbuf_printf(&t, ",\"listen\":");
        sl_wbuf_json_cstr(&t, srv->listen_text[i]);
        const sl_listener_conf_t *l = &cfg->listeners[i];
        if (l->protocol != SL_PROTO_TCP) {
            sl_wbuf_printf(&t, ",\"protocol\":\"http\"}");
            continue;
        }
        sl_wbuf_printf(&t, ",\"protocol\":\"tcp\",\"upstream\":");
        if (l->upstream >= 0)
            sl_wbuf_json_cstr(&t, cfg->upstreams[l->upstream].name);
        else
            sl_wbuf_printf(&t, "null");
        if (l->nsni_routes) {
            sl_wbuf_printf(&t, ",\"sni_routes\":[");
            for (size_t k = 0; k < l->nsni_routes; k++) {
                const sl_sni_route_conf_t *r = &l->sni_routes[k];
                sl_wbuf_printf(&t, "%s{\"sni\":[", k ? "," : "");
                for (size_t j = 0; j < r->nnames; j++) {
                    if (j) sl_wbuf_printf(&t, ",");
                    sl_wbuf_json_cstr(&t, r->names[j]);
                }
                sl_wbuf_printf(&t, "],\"upstream\":");
                sl_wbuf_json_cstr(&t, cfg->upstreams[r->upstream].name);
                sl_wbuf_printf(&t, "}");
            }
            sl_wbuf_printf(&t, "]");
        }
        sl_wbuf_printf(&t, "}");
    }
    sl_wbuf_printf(&t, "],\"last_rejected_reload\":");
    if (srv->last_reject_unix) {
        char when[32];
        time_t ts = (time_t)srv->last_reject_unix;
        struct tm tm;
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&ts, &tm));
        sl_wbuf_printf(&t, "{\"time\":\"%s\",\"trigger\":", when);
        sl_wbuf_json_cstr(&t, srv->last_reject_trigger);
        sl_wbuf_printf(&t, ",\"error\":");
        sl_wbuf_json_cstr(&t, srv->last_reject_error ? srv->last_reject_error : "");
        sl_wbuf_printf(&t, "}");
    } else {
        sl_wbuf_printf(&t, "null");
    }
    /* the global chain: it runs first on every route, and is in no route's own list */
    sl_wbuf_printf(&t, ",\"plugins\":[");
    for (size_t k = 0; k < cfg->nplugins; k++) {
        if (k) sl_wbuf_printf(&t, ",");
        sl_wbuf_json_cstr(&t, cfg->plugins[k].name);
    }
    sl_wbuf_printf(&t, "],\"routes\":[");
    for (size_t i = 0; i < cfg->nroutes; i++) {
        const sl_route_conf_t *r = &cfg->routes[i];
        sl_wbuf_printf(&t, "%s{\"name\":", i ? "," : "");
        sl_wbuf_json_cstr(&t, r->name);
        sl_wbuf_printf(&t, ",\"upstream\":");
        if (r->upstream >= 0)
            sl_wbuf_json_cstr(&t, cfg->upstreams[r->upstream].name);
        else
            sl_wbuf_printf(&t, "null");
        if (r->nsplit) {
            sl_wbuf_printf(&t, ",\"split\":[");
            for (size_t k = 0; k < r->nsplit; k++) {
                const sl_split_conf_t *a = &r->split[k];
                sl_wbuf_printf(&t, "%s{\"upstream\":", k ? "," : "");
                sl_wbuf_json_cstr(&t, cfg->upstreams[a->upstream].name);
                if (a->header || a->cookie) {
                    sl_wbuf_printf(&t, ",\"match\":{\"%s\":", a->header ? "header" : "cookie");
                    sl_wbuf_json_cstr(&t, a->header ? a->header : a->cookie);
                    sl_wbuf_printf(&t, ",\"value\":");
                    sl_wbuf_json_cstr(&t, a->header ? a->header_value : a->cookie_value);
                    sl_wbuf_printf(&t, "}}");
                } else {
                    sl_wbuf_printf(&t, ",\"weight\":%u}", a->weight);
                }
            }
            sl_wbuf_printf(&t, "]");
        }
        sl_wbuf_printf(&t, ",\"plugins\":[");
        for (size_t k = 0; k < r->nplugins; k++) {
            if (k) sl_wbuf_printf(&t, ",");
            sl_wbuf_json_cstr(&t, r->plugins[k].name);
        }
        sl_wbuf_printf(&t, "]}");
    }
    sl_wbuf_printf(&t, "],\"upstreams\":[");
    for (size_t u = 0; u < cfg->nupstreams; u++) {
        const sl_upstream_conf_t *uc = &cfg->upstreams[u];
        sl_wbuf_printf(&t, "%s{\"name\":", u ? "," : "");
        sl_wbuf_json_cstr(&t, uc->name);
        sl_wbuf_printf(&t, ",\"balancer\":\"%s\",\"protocol\":\"%s\",\"targets\":[", balancer_label[uc->balancer],
             uc->tcp_only ? "tcp" : sl_upstream_protocol_name(uc->protocol));
        uint64_t now = sl_now_ms();
        for (size_t k = 0, shown = 0; k < uc->ntargets; k++) {
            if (!sl_slot_up(uc, k)) continue; /* an empty DNS or registry slot */
            sl_tstate_t *ts = srv->ug->ups[u].ts[k];
            sl_wbuf_printf(&t, "%s{\"address\":", shown++ ? "," : "");
            sl_wbuf_json_cstr(&t, uc->targets[k].addr.text);
            if (uc->targets[k].kind != SL_TARGET_STATIC)
                sl_wbuf_printf(&t, ",\"source\":\"%s\"", uc->targets[k].kind == SL_TARGET_DNS ? "dns" : "registry");
            sl_wbuf_printf(&t, ",\"weight\":%u,\"health\":\"%s\",\"breaker\":\"%s\",\"in_flight\":%d,\"ewma_ms\":%.3f",
                 uc->targets[k].weight, health_label(ts, now),
                 breaker_label[sl_tstate_breaker_now(ts, uc, SL_LAYER_HTTP, now)],
                 (int)atomic_load(&ts->live.in_flight), (double)atomic_load(&ts->live.ewma_ns) / 1e6);
            if (tcp_upstream(cfg, u))
                sl_wbuf_printf(&t, ",\"breaker_tcp\":\"%s\"", breaker_label[sl_tstate_breaker_now(ts, uc, SL_LAYER_TCP, now)]);
            if (uc->protocol != SL_UP_HTTP1)
                sl_wbuf_printf(&t, ",\"h2_connections\":%d,\"h2_streams\":%d", (int)atomic_load(&ts->h2_conns),
                     (int)atomic_load(&ts->h2_streams));
            sl_wbuf_printf(&t, "}");
        }
        sl_wbuf_printf(&t, "]");
        if (uc->nnames && srv->disc) {
            sl_wbuf_printf(&t, ",\"names\":");
            sl_discovery_names_json(srv->disc, u, tput_fn, &t);
        }
        if (uc->registry) sl_wbuf_printf(&t, ",\"registry\":{\"max_ttl_ms\":%llu}", (unsigned long long)uc->registry_max_ttl_ms);
        sl_wbuf_printf(&t, "}");
    }
    sl_wbuf_printf(&t, "],\"workers\":[");
    for (int i = 0; i < srv->nworkers; i++) {
        sl_wmetrics_t *m = &srv->workers[i].metrics;
        int64_t active = 0;
        for (size_t l = 0; l < cfg->nlisteners; l++) active += SL_COUNTER_GET(m->conns_active[l]);
        sl_wbuf_printf(&t, "%s{\"id\":%d,\"connections\":%llu,\"connections_active\":%lld,\"requests\":%llu}", i ? "," : "",
             i, (unsigned long long)SL_COUNTER_GET(m->accepted), (long long)active,
             (unsigned long long)SL_COUNTER_GET(m->requests));
    }
    sl_wbuf_printf(&t, "]");
    char *src = sl_etcd_status(srv->etcd);
    if (src) sl_wbuf_cat(&t, src);
    free(src);
    sl_wbuf_printf(&t, "}\n");
    *len = sl_wbuf_failed(&t) ? 0 : t.len;
    return sl_wbuf_take(&t); /* NULL when out of memory */
}

/* ---- the dashboard: /ui (the page) and /ui/data (what it reads) ---- */

extern const char sl_ui_page[];
extern const size_t sl_ui_page_len;

/* The counter tables /metrics and /ui/data sum: the workers' (at most 256), then, while
 * generations are still draining (a reload's old workers, with their open connections and
 * TCP sessions), one table `carry` of what they counted, matched to this config by name.
 * Their counts are folded into their successors only once they stop (reload.c): without
 * them every counter would drop back to what the new generation alone counted, and jump
 * up again at the fold. ms has room for 257; *carried: carry is to be freed. */
static int metrics_tables(sl_server_t *srv, sl_wmetrics_t **ms, sl_wmetrics_t *carry, bool *carried) {
    int n = SL_MIN(srv->nworkers, 256);
    for (int i = 0; i < n; i++) ms[i] = &srv->workers[i].metrics;
    *carried = srv->retired && sl_metrics_init(carry, srv->cfg) == SL_OK;
    if (*carried) {
        for (const sl_retired_t *r = srv->retired; r; r = r->next)
            for (int i = 0; i < r->nworkers; i++) sl_metrics_fold_live(carry, srv->cfg, &r->workers[i].metrics, r->cfg);
        ms[n++] = carry;
    }
    return n;
}

/* {"status": /status, "time": unix s, "routes": [{name, requests, errors, le, buckets}],
 *  "generations": [{generation, hash, time, changed}], "telemetry": {...}} */
static char *render_ui_data(sl_server_t *srv, size_t *len) {
    size_t slen;
    char *status = render_status(srv, &slen);
    sl_wbuf_t t = {0};
    if (!status) return NULL;
    while (slen && status[slen - 1] == '\n') slen--;
    status[slen] = 0;
    sl_wbuf_printf(&t, "{\"time\":%lld,\"status\":%s,\"routes\":[", (long long)time(NULL), status);
    free(status);
    sl_wmetrics_t *ms[257], carry;
    bool carried;
    int n = metrics_tables(srv, ms, &carry, &carried);
    const sl_config_t *cfg = srv->cfg;
    for (size_t r = 0; r < cfg->nroutes; r++) {
        uint64_t reqs, errs;
        sl_hist_t h;
        sl_metrics_route_totals(ms, (size_t)n, r, &reqs, &errs, &h);
        sl_wbuf_printf(&t, "%s{\"name\":", r ? "," : "");
        sl_wbuf_json_cstr(&t, cfg->routes[r].name);
        sl_wbuf_printf(&t, ",\"requests\":%llu,\"errors\":%llu,\"le\":[", (unsigned long long)reqs, (unsigned long long)errs);
        for (int i = 0; i < SL_METRIC_BUCKETS; i++) sl_wbuf_printf(&t, "%s%g", i ? "," : "", sl_metrics_bucket_le(i));
        sl_wbuf_printf(&t, "],\"buckets\":[");
        uint64_t cum = 0;
        for (int i = 0; i < SL_METRIC_BUCKETS; i++) {
            cum += h.buckets[i];
            sl_wbuf_printf(&t, "%s%llu", i ? "," : "", (unsigned long long)cum);
        }
        sl_wbuf_printf(&t, "],\"count\":%llu}", (unsigned long long)h.count);
    }
    if (carried) sl_metrics_free(&carry);
    sl_wbuf_printf(&t, "],\"generations\":[");
    unsigned gn = sizeof srv->gens / sizeof srv->gens[0], shown = 0;
    for (unsigned k = 0; k < gn && k < srv->gen_next; k++) {
        unsigned i = (srv->gen_next - 1 - k) % gn; /* newest first */
        char when[32];
        time_t ts = (time_t)srv->gens[i].unix_s;
        struct tm tm;
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&ts, &tm));
        sl_wbuf_printf(&t, "%s{\"generation\":%llu,\"hash\":\"%016llx\",\"time\":\"%s\",\"changed\":[%s]}", shown++ ? "," : "",
             (unsigned long long)srv->gens[i].generation, (unsigned long long)srv->gens[i].hash, when,
             srv->gens[i].changed ? srv->gens[i].changed : "");
    }
    uint64_t tdrop, texp, tfail;
    sl_telemetry_counters(&tdrop, &texp, &tfail);
    sl_wbuf_printf(&t, "],\"reloads\":{\"applied\":%llu,\"rejected\":%llu},\"telemetry\":{\"exported\":%llu,\"dropped\":%llu}}\n",
         (unsigned long long)srv->reloads_ok, (unsigned long long)srv->reloads_rejected, (unsigned long long)texp,
         (unsigned long long)tdrop);
    *len = sl_wbuf_failed(&t) ? 0 : t.len;
    return sl_wbuf_take(&t); /* NULL when out of memory */
}

/* ---- the registry: /upstreams/NAME/targets ---- */

/* A registration's body: one flat JSON object with "address" (string), "weight"
 * (integer) and "ttl" ("10s", "500ms", "1m", or a number of seconds). */
typedef struct {
    char address[SL_TARGET_TEXT_MAX];
    int64_t weight;
    uint64_t ttl_ms;
    bool has_address, has_ttl;
} registration_t;

static bool parse_ttl(const char *s, uint64_t *ms) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0) || v > 86400.0 * 365) return false;
    double mult = !*end || !strcmp(end, "s") ? 1000 : !strcmp(end, "ms") ? 1 : !strcmp(end, "m") ? 60000
                : !strcmp(end, "h") ? 3600000 : -1;
    if (mult < 0) return false;
    *ms = (uint64_t)(v * mult + 0.5);
    return *ms > 0;
}

/* One key of the registration: NULL, or why not. A JSON string is a quoted scalar of the
 * YAML document, a number a plain one. */
static const char *registration_key(registration_t *r, const char *key, const yaml_node_t *v) {
    if (!v || v->type != YAML_SCALAR_NODE) return "a value must be a string or a number";
    const char *val = (const char *)v->data.scalar.value;
    bool str = v->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE ||
               v->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE;
    if (!strcmp(key, "address")) {
        if (!str) return "address must be a string";
        if (v->data.scalar.length >= sizeof r->address) return "address is too long";
        memcpy(r->address, val, v->data.scalar.length + 1);
        r->has_address = true;
    } else if (!strcmp(key, "weight")) {
        char *end;
        r->weight = str || !*val ? -1 : strtoll(val, &end, 10);
        if (str || !*val || *end) return "weight must be an integer";
    } else if (!strcmp(key, "ttl")) {
        if (!parse_ttl(val, &r->ttl_ms)) return "ttl must be a duration such as \"10s\" or \"500ms\"";
        r->has_ttl = true;
    } else {
        return "unknown key (expected address, weight and ttl)";
    }
    return NULL;
}

/* The body read with the project's JSON reader (libyaml: JSON is YAML's flow style, as
 * for etcd's answers). NULL, or why not. */
static const char *parse_registration(const char *p, size_t len, registration_t *r) {
    *r = (registration_t){.weight = 1};
    sl_jdoc_t d;
    if (!len || !sl_json_valid(p, len) || !sl_json_parse(&d, p, len))
        return "the body must be a JSON object";
    const char *why = NULL;
    if (d.root->type != YAML_MAPPING_NODE || d.root->data.mapping.style != YAML_FLOW_MAPPING_STYLE)
        why = "the body must be a JSON object";
    for (yaml_node_pair_t *pr = why ? NULL : d.root->data.mapping.pairs.start;
         pr && pr < d.root->data.mapping.pairs.top && !why; pr++) {
        const char *key = sl_json_str(yaml_document_get_node(&d.doc, pr->key));
        why = key ? registration_key(r, key, yaml_document_get_node(&d.doc, pr->value)) : "expected a string key";
    }
    yaml_document_delete(&d.doc);
    if (why) return why;
    if (!r->has_address) return "address is required";
    if (!r->has_ttl) return "ttl is required";
    if (r->weight < 1 || r->weight > 1000000) return "weight must be an integer from 1 to 1000000";
    return NULL;
}

/* POST /reload's answer (reload.c): sent, unless the connection went meanwhile. */
static void admin_reloaded(sl_server_t *srv, int rc, char *json, void *ud) {
    (void)srv;
    admin_conn_t *a = ud;
    a->awaiting = false;
    if (a->closing) {
        free(json);
        if (a->open_handles == 0) {
            free(a->out);
            free(a);
        }
        return;
    }
    if (!json) json = strdup("{\"ok\":false}\n");
    admin_send(a, rc == SL_OK ? 200 : 422, "application/json", json, json ? strlen(json) : 0);
}

static void send_json_error(admin_conn_t *a, int status, const char *why) {
    sl_wbuf_t t = {0};
    sl_wbuf_printf(&t, "{\"error\":");
    sl_wbuf_json_cstr(&t, why);
    sl_wbuf_printf(&t, "}\n");
    admin_send(a, status, "application/json", t.p, t.p ? t.len : 0);
}

/* Methods a path takes, as bits: a known path asked with another method is answered 405
 * with Allow, an unknown path 404. */
enum { M_GET = 1, M_PUT = 2, M_POST = 4, M_DELETE = 8 };

static int method_bit(sl_str_t m) {
    if (SL_IEQ(m, "get") || SL_IEQ(m, "head")) return M_GET;
    if (SL_IEQ(m, "put")) return M_PUT;
    if (SL_IEQ(m, "post")) return M_POST;
    if (SL_IEQ(m, "delete")) return M_DELETE;
    return 0;
}

/* 405 with `Allow` (RFC 9110 15.5.6) naming the methods of `methods`, and "METHODS PATH"
 * as the JSON error. */
static void send_405(admin_conn_t *a, int methods, const char *path) {
    static const char *const names[] = {"GET, HEAD", "PUT", "POST", "DELETE"};
    char list[32] = "", extra[64];
    for (int i = 0; i < 4; i++)
        if (methods & (1 << i)) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? ", " : "", names[i]);
    snprintf(extra, sizeof extra, "Allow: %s\r\n", list);
    sl_wbuf_t t = {0};
    sl_wbuf_printf(&t, "{\"error\":");
    char why[160];
    snprintf(why, sizeof why, "%s %s", list, path);
    sl_wbuf_json_cstr(&t, why);
    sl_wbuf_printf(&t, "}\n");
    admin_send_with(a, 405, "application/json", extra, t.p, t.p ? t.len : 0);
}

/* Paths are compared byte for byte: a URL's path is case-sensitive (RFC 3986 6.2.2.1), so
 * "/HEALTH" is not "/health" (it is 404, and not public: admin_public). */
static bool path_is(sl_str_t p, const char *path) { return p.len == strlen(path) && memcmp(p.p, path, p.len) == 0; }

static const struct {
    const char *path;
    int methods;
} admin_paths[] = {
    {"/health", M_GET}, {"/ready", M_GET}, {"/metrics", M_GET}, {"/status", M_GET}, {"/ui", M_GET},
    {"/ui/data", M_GET}, {"/reload", M_POST}, {"/cache", M_DELETE},
};

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = (char)(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* s[0..n) percent-decoded into out[0..cap) ('+' as a space when `form`, as in a query):
 * its length, or -1 when it does not fit. A '%' without two hex digits stays as it is. */
static long pct_decode(const char *s, size_t n, bool form, char *out, size_t cap) {
    size_t o = 0;
    for (const char *v = s, *end = s + n; v < end; v++) {
        if (o == cap) return -1;
        int hi, lo;
        if (*v == '%' && end - v >= 3 && (hi = hexval(v[1])) >= 0 && (lo = hexval(v[2])) >= 0) {
            out[o++] = (char)(hi * 16 + lo);
            v += 2;
        } else {
            out[o++] = form && *v == '+' ? ' ' : *v;
        }
    }
    return (long)o;
}

/* /upstreams/NAME/targets[/ADDRESS] (p without the query). True when it was one. */
static bool admin_registry(admin_conn_t *a, sl_str_t m, sl_str_t p) {
    if (p.len <= 11 || memcmp(p.p, "/upstreams/", 11) != 0) return false;
    const char *name = p.p + 11, *e = p.p + p.len;
    const char *slash = memchr(name, '/', (size_t)(e - name));
    if (!slash || (size_t)(e - slash) < 8 || memcmp(slash, "/targets", 8) != 0) return false;
    const char *rest = slash + 8;
    char up[128], addr[SL_TARGET_TEXT_MAX];
    if ((size_t)(slash - name) >= sizeof up || slash == name) return false;
    snprintf(up, sizeof up, "%.*s", (int)(slash - name), name);
    sl_discovery_t *d = a->srv->disc;
    if (!d) {
        send_json_error(a, 503, "draining");
        return true;
    }
    const char *err = NULL;
    if (rest == e) {
        if (SL_IEQ(m, "get") || SL_IEQ(m, "head")) {
            sl_wbuf_t t = {0};
            if (!sl_discovery_targets_json(d, up, tput_fn, &t)) {
                free(t.p);
                send_json_error(a, 404, "no upstream of that name");
                return true;
            }
            admin_send(a, 200, "application/json", t.p, t.p ? t.len : 0);
            return true;
        }
        if (!SL_IEQ(m, "put")) {
            send_405(a, M_GET | M_PUT, "/upstreams/NAME/targets");
            return true;
        }
        registration_t r;
        const char *why = parse_registration(a->body.p, a->body.len, &r);
        if (why) {
            send_json_error(a, 400, why);
            return true;
        }
        bool created = false;
        int st = sl_discovery_register(d, up, r.address, (uint32_t)r.weight, r.ttl_ms, &created, &err);
        if (st != 200) {
            send_json_error(a, st, err);
            return true;
        }
        sl_wbuf_t t = {0};
        sl_wbuf_printf(&t, "{\"ok\":true,\"registered\":%s,\"address\":", created ? "true" : "false");
        sl_wbuf_json_cstr(&t, r.address);
        sl_wbuf_printf(&t, ",\"ttl_ms\":%llu}\n", (unsigned long long)r.ttl_ms);
        admin_send(a, 200, "application/json", t.p, t.p ? t.len : 0);
        return true;
    }
    if (*rest != '/' || (size_t)(e - rest - 1) >= sizeof addr || e - rest < 2) return false;
    if (!SL_IEQ(m, "delete")) {
        send_405(a, M_DELETE, "/upstreams/NAME/targets/ADDRESS");
        return true;
    }
    /* "[::1]:8080" as a conforming client sends it: '[' and ']' may not stand in a path
     * (RFC 3986 3.3), so they come as %5B and %5D (and ':' maybe as %3A) */
    long al = pct_decode(rest + 1, (size_t)(e - rest - 1), false, addr, sizeof addr - 1);
    if (al < 0 || memchr(addr, 0, (size_t)al)) {
        send_json_error(a, 404, "not a registered target of this upstream");
        return true;
    }
    addr[al] = 0;
    int st = sl_discovery_deregister(d, up, addr, &err);
    if (st != 200)
        send_json_error(a, st, err);
    else {
        char *b = strdup("{\"ok\":true}\n");
        admin_send(a, 200, "application/json", b, b ? strlen(b) : 0);
    }
    return true;
}


/* The value of query argument `name` in q[0..n) (after '?'), form-decoded into out[0..cap):
 *  its length, or -1 when absent or longer than cap. */
static long query_arg(const char *q, size_t n, const char *name, char *out, size_t cap) {
    size_t nl = strlen(name);
    for (const char *p = q, *e = q + n; p < e;) {
        const char *amp = memchr(p, '&', (size_t)(e - p));
        const char *end = amp ? amp : e;
        const char *eq = memchr(p, '=', (size_t)(end - p));
        const char *ke = eq ? eq : end;
        if ((size_t)(ke - p) == nl && memcmp(p, name, nl) == 0) {
            const char *v = eq ? eq + 1 : end;
            return pct_decode(v, (size_t)(end - v), true, out, cap);
        }
        p = end + 1;
    }
    return -1;
}

/* DELETE /cache?key=KEY | ?route=NAME | ?all: purges the proxy-cache store. */
static void admin_cache(admin_conn_t *a, const char *q, size_t qlen) {
    char v[4096];
    long n;
    size_t purged;
    if ((n = query_arg(q, qlen, "key", v, sizeof v)) >= 0)
        purged = sl_cache_purge_key((sl_str_t){v, (size_t)n});
    else if ((n = query_arg(q, qlen, "route", v, sizeof v)) >= 0)
        purged = sl_cache_purge_route((sl_str_t){v, (size_t)n});
    else if (query_arg(q, qlen, "all", v, sizeof v) >= 0)
        purged = sl_cache_purge_all();
    else {
        send_json_error(a, 400, "DELETE /cache needs ?key=KEY, ?route=NAME or ?all");
        return;
    }
    sl_wbuf_t t = {0};
    sl_wbuf_printf(&t, "{\"ok\":true,\"purged\":%zu}\n", purged);
    admin_send(a, 200, "application/json", t.p, t.p ? t.len : 0);
}

static void admin_handle(admin_conn_t *a) {
    sl_server_t *srv = a->srv;
    sl_str_t m = a->head.method, p = a->head.path, q = a->head.query;
    char *body = NULL;
    size_t len = 0;
#define SEND_LIT(st, s)                                                 \
    do {                                                                \
        body = strdup(s);                                               \
        admin_send(a, st, "application/json", body, body ? strlen(s) : 0); \
    } while (0)

    for (size_t i = 0; i < sizeof admin_paths / sizeof admin_paths[0]; i++) {
        if (!path_is(p, admin_paths[i].path) || (admin_paths[i].methods & method_bit(m))) continue;
        send_405(a, admin_paths[i].methods, admin_paths[i].path);
        return;
    }
    if (path_is(p, "/health")) {
        SEND_LIT(200, "{\"status\":\"ok\"}\n");
    } else if (path_is(p, "/ready")) {
        if (sl_server_draining(srv))
            SEND_LIT(503, "{\"ready\":false,\"reason\":\"draining\"}\n");
        else if (!sl_etcd_ready(srv->etcd))
            SEND_LIT(503, "{\"ready\":false,\"reason\":\"no config from etcd or a snapshot yet\"}\n");
        else
            SEND_LIT(200, "{\"ready\":true}\n");
    } else if (path_is(p, "/metrics")) {
        sl_wmetrics_t *ms[257], carry;
        bool carried;
        int n = metrics_tables(srv, ms, &carry, &carried);
        char extra[512];
        sl_wbuf_t gauges = {0};
        render_target_gauges(srv, &gauges);
        snprintf(extra, sizeof(extra),
                 "# HELP sluice_config_generation The config generation being served.\n"
                 "# TYPE sluice_config_generation gauge\nsluice_config_generation %llu\n"
                 "# HELP sluice_reloads_total Config reloads, applied or rejected.\n"
                 "# TYPE sluice_reloads_total counter\n"
                 "sluice_reloads_total{result=\"applied\"} %llu\nsluice_reloads_total{result=\"rejected\"} %llu\n",
                 (unsigned long long)srv->generation, (unsigned long long)srv->reloads_ok,
                 (unsigned long long)srv->reloads_rejected);
        sl_wbuf_printf(&gauges, "%s", extra);
        uint64_t tdrop, texp, tfail;
        sl_telemetry_counters(&tdrop, &texp, &tfail);
        sl_wbuf_printf(&gauges,
             "# HELP sluice_telemetry_spans_dropped_total Spans not exported: the queue was full, or their export failed.\n"
             "# TYPE sluice_telemetry_spans_dropped_total counter\nsluice_telemetry_spans_dropped_total %llu\n"
             "# HELP sluice_telemetry_spans_exported_total Spans the OTLP collector accepted.\n"
             "# TYPE sluice_telemetry_spans_exported_total counter\nsluice_telemetry_spans_exported_total %llu\n"
             "# HELP sluice_telemetry_exports_failed_total OTLP exports that failed (no answer, refused, not 2xx).\n"
             "# TYPE sluice_telemetry_exports_failed_total counter\nsluice_telemetry_exports_failed_total %llu\n",
             (unsigned long long)tdrop, (unsigned long long)texp, (unsigned long long)tfail);
        render_discovery(srv, &gauges);
        sl_wbuf_printf(&gauges,
             "# HELP sluice_cache_bytes Bytes the proxy-cache store holds (cache.size bounds them).\n"
             "# TYPE sluice_cache_bytes gauge\nsluice_cache_bytes %llu\n"
             "# HELP sluice_cache_entries Entries the proxy-cache store holds.\n"
             "# TYPE sluice_cache_entries gauge\nsluice_cache_entries %llu\n",
             (unsigned long long)sl_cache_bytes(), (unsigned long long)sl_cache_count());
        char *src = sl_etcd_metrics(srv->etcd);
        if (src) sl_wbuf_printf(&gauges, "%s", src);
        free(src);
        /* the built-in plugins' process-wide counters (limit-conn, mirror, http-logger) */
        src = sl_conn_limit_metrics();
        if (src) sl_wbuf_printf(&gauges, "%s", src);
        free(src);
        src = sl_mirror_metrics();
        if (src) sl_wbuf_printf(&gauges, "%s", src);
        free(src);
        src = sl_httplog_metrics();
        if (src) sl_wbuf_printf(&gauges, "%s", src);
        free(src);
        int rc = gauges.p ? sl_metrics_render(srv->cfg, ms, (size_t)n, gauges.p, &body, &len) : SL_ERROR;
        free(gauges.p);
        if (carried) sl_metrics_free(&carry);
        if (rc != SL_OK)
            SEND_LIT(503, "{\"error\":\"out of memory\"}\n");
        else
            admin_send(a, 200, "text/plain; version=0.0.4", body, len);
    } else if (path_is(p, "/ui")) {
        admin_send(a, 200, "text/html; charset=utf-8", strdup(sl_ui_page), sl_ui_page_len);
    } else if (path_is(p, "/ui/data")) {
        body = render_ui_data(srv, &len);
        if (!body)
            SEND_LIT(503, "{\"error\":\"out of memory\"}\n");
        else
            admin_send(a, 200, "application/json", body, len);
    } else if (path_is(p, "/status")) {
        body = render_status(srv, &len);
        admin_send(a, 200, "application/json", body, len);
    } else if (path_is(p, "/reload")) {
        /* the answer comes once the new workers serve: no deadline meanwhile */
        uv_timer_stop(&a->timer);
        a->awaiting = true;
        sl_server_reload(srv, "POST /reload", true, admin_reloaded, a);
    } else if (path_is(p, "/cache")) {
        admin_cache(a, q.p ? q.p : "", q.len);
    } else if (!admin_registry(a, m, p)) {
        SEND_LIT(404, "{\"error\":\"not found\"}\n");
    }
#undef SEND_LIT
}

static void admin_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    admin_conn_t *a = h->data;
    (void)hint;
    *buf = uv_buf_init(a->buf + a->len, (unsigned)(sizeof(a->buf) - a->len));
}

/* The credentials of the head's one Authorization field (borrowed from the head); NULL
 * when there is none or more than one. */
static const sl_str_t *admin_authorization(const sl_h1_head_t *hd) {
    const sl_str_t *found = NULL;
    for (uint16_t i = 0; i < hd->nheaders; i++) {
        if (!SL_IEQ(hd->headers[i].name, "authorization")) continue;
        if (found) return NULL;
        found = &hd->headers[i].value;
    }
    return found;
}

/* Whether the head carries `Authorization: Bearer <the configured token>`. The
 * comparison reads every byte of the token whatever the client sent, so its time
 * tells nothing about how many leading bytes matched, nor the token's content. */
static bool admin_authorized(const sl_config_t *cfg, const sl_h1_head_t *hd) {
    const sl_str_t *cred = admin_authorization(hd);
    if (!cred || cred->len < 7 || !sl_str_ieq((sl_str_t){cred->p, 7}, "bearer ", 7)) return false;
    const char *given = cred->p + 7;
    size_t glen = cred->len - 7;
    while (glen && *given == ' ') given++, glen--;
    return sl_secret_equal(cfg->admin_token, cfg->admin_token_len, given, glen);
}

/* /health and /ready answer without a token: orchestrators and load balancers probe
 * them, and they tell nothing but "up". /ui is the page alone (no data): it asks for
 * the token and sends it with /ui/data. */
static bool admin_public(sl_str_t path) {
    return path_is(path, "/health") || path_is(path, "/ready") || path_is(path, "/ui");
}

/* A request refused before it was read whole: its status and a JSON error, then the rest
 * of what the client sends is dropped until it closes (admin_on_write). */
static void admin_refuse(admin_conn_t *a, int status, const char *why) {
    a->lingering = true;
    send_json_error(a, status, why);
}

static const char *refusal(int status) {
    switch (status) {
    case 414: return "request line too long";
    case 431: return "request head too large";
    case 417: return "unsupported Expect";
    case 501: return "unsupported transfer coding";
    case 505: return "unsupported HTTP version";
    default: return "bad request";
    }
}

/* The body's bytes as the parser frames them (Content-Length or chunked). */
static int admin_on_body(void *ud, const char *p, size_t n) {
    admin_conn_t *a = ud;
    return sl_wbuf_put(&a->body, p, n) ? 0 : -1;
}

/* SL_OK: the request is whole; SL_EAGAIN: more bytes are needed; SL_ERROR: it was
 * refused (the answer is on its way). */
static int admin_read_request(admin_conn_t *a) {
    if (!a->head_done) {
        size_t used = 0;
        int status = 400;
        int rc = sl_h1_head(&a->h1, a->buf, a->len, &a->head, &used, &status);
        if (rc == SL_EAGAIN && a->len < sizeof(a->buf)) return SL_EAGAIN;
        if (rc != SL_OK) {
            if (rc == SL_EAGAIN) status = 431; /* the buffer is full and holds no whole head */
            admin_refuse(a, status, refusal(status));
            return SL_ERROR;
        }
        const sl_h1_head_t *hd = &a->head;
        if (hd->body_kind == SL_BODY_LENGTH && hd->content_length > sizeof(a->bodybuf)) {
            admin_refuse(a, 400, "body too large");
            return SL_ERROR;
        }
        a->head_done = true;
        a->head_len = used;
        a->body = SL_WBUF_BOUNDED(a->bodybuf, sizeof(a->bodybuf));
        a->h1.on_data = admin_on_body;
        a->h1.ud = a;
        a->h1.spans_left = UINT32_MAX;
    }
    /* the body's raw bytes pass through buf after the head, one read at a time */
    size_t used = 0;
    int rc = sl_h1_body(&a->h1, a->buf + a->head_len, a->len - a->head_len, &used);
    a->len = a->head_len;
    if (rc == SL_ERROR) {
        admin_refuse(a, 400, a->body.full ? "body too large" : "malformed body");
        return SL_ERROR;
    }
    if (rc == SL_DONE) return SL_OK; /* bytes after the message are ignored: one request a connection */
    if (a->head_len == sizeof(a->buf)) {
        admin_refuse(a, 400, "body too large"); /* no room left to read it into */
        return SL_ERROR;
    }
    return SL_EAGAIN;
}

static void admin_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    admin_conn_t *a = s->data;
    (void)buf;
    if (nread == 0) return;
    if (nread < 0 && a->lingering && a->writing) {
        /* the client half-closed after its refused request: its answer still goes out */
        uv_read_stop(s);
        a->lingering = false;
        return;
    }
    if (nread < 0 || a->closing) {
        admin_close(a);
        return;
    }
    if (a->lingering) return; /* dropped: a->len stays where the refusal left it */
    a->len += (size_t)nread;
    int rc = admin_read_request(a);
    if (rc == SL_EAGAIN) return;
    if (rc == SL_ERROR) {
        a->len = 0; /* from here on every read lands at the buffer's start and is dropped */
        return;
    }
    uv_read_stop(s);
    const sl_config_t *cfg = a->srv->cfg;
    if (cfg->admin_token_len && !admin_public(a->head.path) && !admin_authorized(cfg, &a->head)) {
        char *b = strdup("{\"error\":\"unauthorized: send Authorization: Bearer <admin token>\"}\n");
        admin_send_with(a, 401, "application/json", "WWW-Authenticate: Bearer realm=\"sluice admin\"\r\n", b,
                        b ? strlen(b) : 0);
        return;
    }
    admin_handle(a);
}

static void admin_on_conn(uv_stream_t *server, int status) {
    if (status < 0) return;
    admin_conn_t *a = calloc(1, sizeof(*a));
    if (!a) return;
    a->srv = server->data;
    uv_tcp_init(server->loop, &a->tcp);
    uv_timer_init(server->loop, &a->timer);
    a->tcp.data = a->timer.data = a;
    a->open_handles = 2;
    sl_h1_init(&a->h1, HTTP_REQUEST, &admin_limits);
    a->head.spill = sl_h1_spill_array;
    a->head.spill_ud = a->spill;
    if (uv_accept(server, (uv_stream_t *)&a->tcp) != 0 ||
        uv_read_start((uv_stream_t *)&a->tcp, admin_alloc, admin_on_read) != 0) {
        admin_close(a);
        return;
    }
    uv_timer_start(&a->timer, admin_on_timeout, ADMIN_IO_TIMEOUT_MS, 0);
}

int sl_admin_start(sl_server_t *srv, const char **err) {
    const sl_config_t *cfg = srv->cfg;
    if (!cfg->admin_enabled) return SL_OK;
    uv_tcp_init(srv->loop, &srv->admin_listener);
    srv->admin_listener.data = srv;
    int rc = uv_tcp_bind(&srv->admin_listener, (const struct sockaddr *)&cfg->admin_listen.ss, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&srv->admin_listener, 128, admin_on_conn);
    if (rc != 0) {
        static __thread char msg[256];
        snprintf(msg, sizeof(msg), "admin: cannot listen on %s: %s", cfg->admin_listen.text, uv_strerror(rc));
        *err = msg;
        uv_close((uv_handle_t *)&srv->admin_listener, NULL);
        return SL_ERROR;
    }
    srv->admin_open = true;
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(&srv->admin_listener, (struct sockaddr *)&ss, &len);
    char ip[INET6_ADDRSTRLEN];
    if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
        snprintf(srv->admin_text, sizeof(srv->admin_text), "[%s]:%u", ip,
                 ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    } else {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
        snprintf(srv->admin_text, sizeof(srv->admin_text), "%s:%u", ip, ntohs(((struct sockaddr_in *)&ss)->sin_port));
    }
    return SL_OK;
}

void sl_admin_stop(sl_server_t *srv) {
    if (!srv->admin_open) return;
    srv->admin_open = false;
    uv_close((uv_handle_t *)&srv->admin_listener, NULL);
}
