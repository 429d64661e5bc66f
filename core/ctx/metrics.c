/* metrics.c — counters and histograms per worker, rendered in Prometheus text format. */
#include "ctx/metrics.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/wbuf.h"

static const double bucket_le[SL_METRIC_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                   0.1,    0.25,  0.5,    1,     2.5,  5,     10};
/* The same bounds in ns, so a hot path compares integers. */
static const uint64_t bucket_ns[SL_METRIC_BUCKETS] = {500000,    1000000,    2500000,    5000000,   10000000,
                                                      25000000,  50000000,   100000000,  250000000, 500000000,
                                                      1000000000, 2500000000, 5000000000, 10000000000};
/* A plugin's phase call takes microseconds unless it waits: its buckets start lower. */
static const double plugin_le[SL_METRIC_BUCKETS] = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                                   0.0025,  0.005,    0.01,    0.025,  0.05,    0.1,    1};
static const uint64_t plugin_ns[SL_METRIC_BUCKETS] = {10000,   25000,   50000,   100000,   250000,   500000,   1000000,
                                                      2500000, 5000000, 10000000, 25000000, 50000000, 100000000, 1000000000};

const char *const sl_tcp_end_label[SL_TCP_ENDS] = {"closed",   "reset",   "connect_failed", "unavailable", "no_route",
                                                  "rejected", "timeout", "shutdown",       "error"};

/* ---- counts by status (sl_codes_t) ---- */

static void codes_free(sl_codes_t *k) {
    if (!k) return;
    for (size_t b = 0; b < SL_METRIC_COL_BLOCKS; b++) free(k->block[b]);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

static sl_codes_t *codes_new(size_t rows) {
    sl_codes_t *k = calloc(1, sizeof(*k));
    if (!k) return NULL;
    k->rows = rows;
    pthread_mutex_init(&k->mu, NULL);
    if (!(k->block[0] = calloc(rows * SL_METRIC_COLS_BLOCK, sizeof(uint64_t)))) {
        codes_free(k);
        return NULL;
    }
    return k;
}

/* The column (+ 1) of status index ci (status - 100), given now if it has none; 0 when its
 * block could not be allocated (the count is lost, nothing else). */
static unsigned codes_col(sl_codes_t *k, int ci) {
    unsigned c = __atomic_load_n(&k->col[ci], __ATOMIC_ACQUIRE);
    if (SL_LIKELY(c)) return c;
    pthread_mutex_lock(&k->mu);
    c = k->col[ci];
    uint32_t n = k->ncols;
    if (!c) {
        size_t b = n / SL_METRIC_COLS_BLOCK;
        if (!k->block[b]) {
            uint64_t *p = calloc(k->rows * SL_METRIC_COLS_BLOCK, sizeof(uint64_t));
            if (p) __atomic_store_n(&k->block[b], p, __ATOMIC_RELEASE);
        }
        if (k->block[b]) {
            k->code[n] = (uint16_t)ci;
            __atomic_store_n(&k->ncols, n + 1, __ATOMIC_RELEASE);
            c = n + 1;
            __atomic_store_n(&k->col[ci], (uint16_t)c, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&k->mu);
    return c;
}

static uint64_t *codes_slot(const sl_codes_t *k, size_t row, unsigned c) {
    unsigned i = c - 1;
    return &k->block[i / SL_METRIC_COLS_BLOCK][row * SL_METRIC_COLS_BLOCK + i % SL_METRIC_COLS_BLOCK];
}

static void codes_add(sl_codes_t *k, size_t row, int ci, uint64_t v) {
    unsigned c = codes_col(k, ci);
    if (c) SL_COUNTER_ADD(*codes_slot(k, row, c), v);
}

uint64_t sl_codes_get(const sl_codes_t *k, size_t row, int status) {
    if (status < 100 || status > 599 || row >= k->rows) return 0;
    unsigned c = __atomic_load_n(&k->col[status - 100], __ATOMIC_ACQUIRE);
    return c ? SL_COUNTER_GET(*codes_slot(k, row, c)) : 0;
}

/* Row fr of `from` added into row tr of `to`, status by status (the counts that moved). */
static void codes_fold(sl_codes_t *to, size_t tr, const sl_codes_t *from, size_t fr) {
    uint32_t n = __atomic_load_n(&from->ncols, __ATOMIC_ACQUIRE);
    for (unsigned c = 1; c <= n; c++) {
        uint64_t v = SL_COUNTER_GET(*codes_slot(from, fr, c));
        if (v) codes_add(to, tr, from->code[c - 1], v);
    }
}

/* used[s] set for every status index some worker's table (at `field`) gave a column. */
static void codes_used(sl_wmetrics_t *const *ms, size_t n, size_t field, bool used[SL_METRIC_CODES]) {
    memset(used, 0, SL_METRIC_CODES);
    for (size_t w = 0; w < n; w++) {
        const sl_codes_t *k = *(sl_codes_t *const *)((const char *)ms[w] + field);
        uint32_t nc = __atomic_load_n(&k->ncols, __ATOMIC_ACQUIRE);
        for (uint32_t c = 0; c < nc; c++) used[k->code[c]] = true;
    }
}

/* ---- a worker's counters ---- */

int sl_metrics_init(sl_wmetrics_t *m, const sl_config_t *cfg) {
    memset(m, 0, sizeof(*m));
    m->nroutes = cfg->nroutes + 1;
    m->target_base = calloc(cfg->nupstreams + 1, sizeof(size_t));
    for (size_t u = 0; u < cfg->nupstreams; u++) {
        m->target_base[u] = m->ntargets;
        m->ntargets += cfg->upstreams[u].ntargets;
    }
    m->req_codes = codes_new(m->nroutes);
    m->req_dur = calloc(m->nroutes, sizeof(sl_hist_t));
    m->up_codes = codes_new(m->ntargets + 1);
    m->up_dur = calloc(m->ntargets + 1, sizeof(sl_hist_t));
    m->up_noresp = calloc(m->ntargets + 1, sizeof(uint64_t));
    m->conns_active = calloc(cfg->nlisteners + 1, sizeof(int64_t));
    m->tcp_bytes = calloc((cfg->nlisteners + 1) * 2, sizeof(uint64_t));
    m->tls_hs = calloc((cfg->nlisteners + 1) * SL_TLS_HS_RESULTS, sizeof(uint64_t));
    m->tcp_sni = calloc((cfg->nlisteners + 1) * SL_SNI_RESULTS, sizeof(uint64_t));
    m->tcp_end = calloc((cfg->nlisteners + 1) * SL_TCP_ENDS, sizeof(uint64_t));
    m->tcp_connect_fail = calloc(m->ntargets + 1, sizeof(uint64_t));
    m->h2_streams = calloc(cfg->nlisteners + 1, sizeof(int64_t));
    m->h2_goaway = calloc((cfg->nlisteners + 1) * SL_H2_GOAWAY_REASONS, sizeof(uint64_t));
    m->plugin_errors = calloc(m->nroutes * SL_METRIC_MAX_CHAIN, sizeof(uint64_t));
    m->lplugin_errors = calloc((cfg->nlisteners + 1) * SL_METRIC_MAX_CHAIN, sizeof(uint64_t));
    m->nupstreams = cfg->nupstreams;
    m->retries = calloc((cfg->nupstreams + 1) * SL_RETRY_REASONS, sizeof(uint64_t));
    m->ratelimit = calloc(m->nroutes * SL_RL_RESULTS, sizeof(uint64_t));
    m->cache = calloc(m->nroutes * SL_CACHE_STATUSES, sizeof(uint64_t));
    m->grpc = calloc(m->nroutes * SL_METRIC_GRPC_CODES, sizeof(uint64_t));
    m->plugin_base = calloc(m->nroutes, sizeof(size_t));
    m->plugin_len = calloc(m->nroutes, 1);
    size_t rows = 0;
    for (size_t r = 0; m->plugin_base && m->plugin_len && r < cfg->nroutes; r++) {
        m->plugin_base[r] = rows;
        m->plugin_len[r] = (uint8_t)SL_MIN(cfg->nplugins + cfg->routes[r].nplugins, (size_t)SL_METRIC_MAX_CHAIN);
        rows += m->plugin_len[r];
    }
    if (cfg->plugin_timing && rows && !(m->plugin_dur = calloc(rows * SL_METRIC_PHASES, sizeof(sl_hist_t)))) {
        sl_metrics_free(m);
        return SL_ERROR;
    }
    if (!m->retries || !m->ratelimit || !m->cache || !m->grpc || !m->plugin_base || !m->plugin_len || !m->target_base || !m->req_codes || !m->req_dur || !m->up_codes || !m->up_dur || !m->up_noresp || !m->plugin_errors || !m->lplugin_errors ||
        !m->conns_active || !m->tcp_bytes || !m->tcp_sni || !m->tcp_end || !m->tcp_connect_fail || !m->tls_hs || !m->h2_streams || !m->h2_goaway) {
        sl_metrics_free(m);
        return SL_ERROR;
    }
    return SL_OK;
}

void sl_metrics_free(sl_wmetrics_t *m) {
    free(m->target_base);
    codes_free(m->req_codes);
    free(m->req_dur);
    codes_free(m->up_codes);
    free(m->up_dur);
    free(m->up_noresp);
    free(m->conns_active);
    free(m->tcp_bytes);
    free(m->tls_hs);
    free(m->tcp_sni);
    free(m->tcp_end);
    free(m->tcp_connect_fail);
    free(m->h2_streams);
    free(m->h2_goaway);
    free(m->plugin_errors);
    free(m->lplugin_errors);
    free(m->retries);
    free(m->ratelimit);
    free(m->cache);
    free(m->grpc);
    free(m->plugin_base);
    free(m->plugin_len);
    free(m->plugin_dur);
    memset(m, 0, sizeof(*m));
}

static void hist_add_at(sl_hist_t *h, const uint64_t *le_ns, uint64_t dur_ns) {
    int i = 0;
    while (i < SL_METRIC_BUCKETS && dur_ns > le_ns[i]) i++;
    if (i < SL_METRIC_BUCKETS) SL_COUNTER_ADD(h->buckets[i], 1);
    SL_COUNTER_ADD(h->sum_ns, dur_ns);
    SL_COUNTER_ADD(h->count, 1);
}

static void hist_add(sl_hist_t *h, uint64_t dur_ns) { hist_add_at(h, bucket_ns, dur_ns); }

void sl__metrics_hist_plugin(sl_hist_t *h, uint64_t ns) { hist_add_at(h, plugin_ns, ns); }

static int code_index(int status) {
    return (status >= 100 && status <= 599) ? status - 100 : -1;
}

void sl_metrics_request(sl_wmetrics_t *m, int route, int status, uint64_t dur_ns) {
    size_t r = route < 0 ? m->nroutes - 1 : (size_t)route;
    int ci = code_index(status);
    if (ci >= 0) codes_add(m->req_codes, r, ci, 1);
    hist_add(&m->req_dur[r], dur_ns);
    SL_COUNTER_ADD(m->requests, 1);
}

void sl_metrics_upstream(sl_wmetrics_t *m, int upstream, int target, int status, uint64_t dur_ns) {
    if (upstream < 0 || target < 0) return; /* a plugin-chosen address has no series */
    size_t t = m->target_base[upstream] + (size_t)target;
    int ci = code_index(status);
    if (ci >= 0)
        codes_add(m->up_codes, t, ci, 1);
    else /* no response: refused, reset, timed out; shown as code="0" */
        SL_COUNTER_ADD(m->up_noresp[t], 1);
    hist_add(&m->up_dur[t], dur_ns);
}

void sl_metrics_listener_plugin_error(sl_wmetrics_t *m, uint32_t lidx, int pos) {
    if (pos < 0 || pos >= SL_METRIC_MAX_CHAIN) return;
    SL_COUNTER_ADD(m->lplugin_errors[lidx * SL_METRIC_MAX_CHAIN + (size_t)pos], 1);
}

void sl_metrics_plugin_error(sl_wmetrics_t *m, int route, int pos) {
    size_t r = route < 0 ? m->nroutes - 1 : (size_t)route;
    if (pos < 0 || pos >= SL_METRIC_MAX_CHAIN) return;
    SL_COUNTER_ADD(m->plugin_errors[r * SL_METRIC_MAX_CHAIN + (size_t)pos], 1);
}

void sl_metrics_retry(sl_wmetrics_t *m, int upstream, int reason) {
    if (upstream < 0 || (size_t)upstream >= m->nupstreams || reason < 0 || reason >= SL_RETRY_REASONS) return;
    SL_COUNTER_ADD(m->retries[(size_t)upstream * SL_RETRY_REASONS + (size_t)reason], 1);
}

static const char *const retry_reasons[SL_RETRY_REASONS] = {"connect_error", "timeout", "reset", "status"};
static const char *const rl_results[SL_RL_RESULTS] = {"allowed", "limited", "failopen"};

void sl_metrics_ratelimit(sl_wmetrics_t *m, int route, int result) {
    size_t r = route < 0 ? m->nroutes - 1 : (size_t)route;
    if (result < 0 || result >= SL_RL_RESULTS) return;
    SL_COUNTER_ADD(m->ratelimit[r * SL_RL_RESULTS + (size_t)result], 1);
}

static const char *const cache_statuses[SL_CACHE_STATUSES] = {"MISS", "HIT", "EXPIRED", "BYPASS", "STALE"};

void sl_metrics_cache(sl_wmetrics_t *m, int route, int status) {
    size_t r = route < 0 ? m->nroutes - 1 : (size_t)route;
    if (status < 0 || status >= SL_CACHE_STATUSES) return;
    SL_COUNTER_ADD(m->cache[r * SL_CACHE_STATUSES + (size_t)status], 1);
}

void sl_metrics_grpc(sl_wmetrics_t *m, int route, int code) {
    size_t r = route < 0 ? m->nroutes - 1 : (size_t)route;
    if (code < 0 || code >= SL_METRIC_GRPC_CODES) return;
    SL_COUNTER_ADD(m->grpc[r * SL_METRIC_GRPC_CODES + (size_t)code], 1);
}

/* The index of route `name` in c, looked for first at `hint` (its index in the old config:
 * a reload mostly keeps the order), so a fold of 10,000 routes is not 10,000 scans. */
static int route_named(const sl_config_t *c, const char *name, size_t hint) {
    if (hint < c->nroutes && strcmp(c->routes[hint].name, name) == 0) return (int)hint;
    for (size_t i = 0; i < c->nroutes; i++)
        if (strcmp(c->routes[i].name, name) == 0) return (int)i;
    return -1;
}

/* to[i] += from[i] for the counters that moved. Most of a retired worker's counters are
 * zero (most routes quiet): skipping them saves the locked adds, and leaves the
 * successor's untouched pages unmapped. */
static void fold_counters(uint64_t *to, const uint64_t *from, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint64_t v = SL_COUNTER_GET(from[i]);
        if (v) SL_COUNTER_ADD(to[i], v);
    }
}

static void fold_hist(sl_hist_t *to, const sl_hist_t *from) {
    if (!SL_COUNTER_GET(from->count)) return;
    fold_counters(to->buckets, from->buckets, SL_METRIC_BUCKETS);
    SL_COUNTER_ADD(to->sum_ns, SL_COUNTER_GET(from->sum_ns));
    SL_COUNTER_ADD(to->count, SL_COUNTER_GET(from->count));
}

void sl_metrics_fold(sl_wmetrics_t *to, const sl_config_t *tcfg, const sl_wmetrics_t *from,
                     const sl_config_t *fcfg) {
    for (size_t r = 0; r < from->nroutes; r++) {
        /* the last slot is "none" in both */
        int tr = r + 1 == from->nroutes ? (int)to->nroutes - 1 : route_named(tcfg, fcfg->routes[r].name, r);
        if (tr < 0) continue; /* a route that is gone takes its series with it */
        codes_fold(to->req_codes, (size_t)tr, from->req_codes, r);
        fold_hist(&to->req_dur[tr], &from->req_dur[r]);
        fold_counters(&to->ratelimit[(size_t)tr * SL_RL_RESULTS], &from->ratelimit[r * SL_RL_RESULTS], SL_RL_RESULTS);
        fold_counters(&to->cache[(size_t)tr * SL_CACHE_STATUSES], &from->cache[r * SL_CACHE_STATUSES],
                      SL_CACHE_STATUSES);
        fold_counters(&to->grpc[(size_t)tr * SL_METRIC_GRPC_CODES], &from->grpc[r * SL_METRIC_GRPC_CODES],
                      SL_METRIC_GRPC_CODES);
        if (r + 1 == from->nroutes) continue;
        const sl_route_conf_t *fr = &fcfg->routes[r], *trc = &tcfg->routes[tr];
        for (size_t pos = 0; pos < SL_METRIC_MAX_CHAIN; pos++) {
            size_t fn = fcfg->nplugins + fr->nplugins, tn = tcfg->nplugins + trc->nplugins;
            if (pos >= fn || pos >= tn) break;
            const char *a = pos < fcfg->nplugins ? fcfg->plugins[pos].name : fr->plugins[pos - fcfg->nplugins].name;
            const char *b = pos < tcfg->nplugins ? tcfg->plugins[pos].name : trc->plugins[pos - tcfg->nplugins].name;
            if (strcmp(a, b) != 0) continue;
            SL_COUNTER_ADD(to->plugin_errors[(size_t)tr * SL_METRIC_MAX_CHAIN + pos],
                           SL_COUNTER_GET(from->plugin_errors[r * SL_METRIC_MAX_CHAIN + pos]));
            if (to->plugin_dur && from->plugin_dur)
                for (size_t ph = 0; ph < SL_METRIC_PHASES; ph++)
                    fold_hist(&to->plugin_dur[(to->plugin_base[tr] + pos) * SL_METRIC_PHASES + ph],
                              &from->plugin_dur[(from->plugin_base[r] + pos) * SL_METRIC_PHASES + ph]);
        }
    }
    for (size_t u = 0; u < fcfg->nupstreams; u++) {
        const sl_upstream_conf_t *fu = &fcfg->upstreams[u];
        for (size_t v = 0; v < tcfg->nupstreams; v++) {
            const sl_upstream_conf_t *tu = &tcfg->upstreams[v];
            if (strcmp(fu->name, tu->name) != 0) continue;
            for (size_t k = 0; k < SL_RETRY_REASONS; k++)
                SL_COUNTER_ADD(to->retries[v * SL_RETRY_REASONS + k],
                               SL_COUNTER_GET(from->retries[u * SL_RETRY_REASONS + k]));
            for (size_t a = 0; a < fu->ntargets; a++)
                for (size_t b = 0; b < tu->ntargets; b++) {
                    if (!fu->targets[a].addr.text[0] ||
                        strcmp(fu->targets[a].addr.text, tu->targets[b].addr.text) != 0)
                        continue;
                    size_t ft = from->target_base[u] + a, tt = to->target_base[v] + b;
                    codes_fold(to->up_codes, tt, from->up_codes, ft);
                    SL_COUNTER_ADD(to->up_noresp[tt], SL_COUNTER_GET(from->up_noresp[ft]));
                    SL_COUNTER_ADD(to->tcp_connect_fail[tt], SL_COUNTER_GET(from->tcp_connect_fail[ft]));
                    fold_hist(&to->up_dur[tt], &from->up_dur[ft]);
                }
        }
    }
    for (size_t l = 0; l < fcfg->nlisteners; l++)
        for (size_t k = 0; k < tcfg->nlisteners; k++)
            if (strcmp(fcfg->listeners[l].name, tcfg->listeners[k].name) == 0) {
                for (size_t dir = 0; dir < 2; dir++)
                    SL_COUNTER_ADD(to->tcp_bytes[k * 2 + dir], SL_COUNTER_GET(from->tcp_bytes[l * 2 + dir]));
                for (size_t res = 0; res < SL_TLS_HS_RESULTS; res++)
                    SL_COUNTER_ADD(to->tls_hs[k * SL_TLS_HS_RESULTS + res],
                                   SL_COUNTER_GET(from->tls_hs[l * SL_TLS_HS_RESULTS + res]));
                for (size_t g = 0; g < SL_H2_GOAWAY_REASONS; g++)
                    SL_COUNTER_ADD(to->h2_goaway[k * SL_H2_GOAWAY_REASONS + g],
                                   SL_COUNTER_GET(from->h2_goaway[l * SL_H2_GOAWAY_REASONS + g]));
                for (size_t r = 0; r < SL_SNI_RESULTS; r++)
                    SL_COUNTER_ADD(to->tcp_sni[k * SL_SNI_RESULTS + r],
                                   SL_COUNTER_GET(from->tcp_sni[l * SL_SNI_RESULTS + r]));
                for (size_t r = 0; r < SL_TCP_ENDS; r++)
                    SL_COUNTER_ADD(to->tcp_end[k * SL_TCP_ENDS + r],
                                   SL_COUNTER_GET(from->tcp_end[l * SL_TCP_ENDS + r]));
                const sl_listener_conf_t *fl = &fcfg->listeners[l], *tl = &tcfg->listeners[k];
                for (size_t pos = 0; pos < fl->nplugins && pos < tl->nplugins && pos < SL_METRIC_MAX_CHAIN; pos++)
                    if (strcmp(fl->plugins[pos].name, tl->plugins[pos].name) == 0)
                        SL_COUNTER_ADD(to->lplugin_errors[k * SL_METRIC_MAX_CHAIN + pos],
                                       SL_COUNTER_GET(from->lplugin_errors[l * SL_METRIC_MAX_CHAIN + pos]));
            }
    SL_COUNTER_ADD(to->accepted, SL_COUNTER_GET(from->accepted));
    SL_COUNTER_ADD(to->requests, SL_COUNTER_GET(from->requests));
}

void sl_metrics_fold_live(sl_wmetrics_t *to, const sl_config_t *tcfg, const sl_wmetrics_t *from,
                          const sl_config_t *fcfg) {
    sl_metrics_fold(to, tcfg, from, fcfg);
    for (size_t l = 0; l < fcfg->nlisteners; l++)
        for (size_t k = 0; k < tcfg->nlisteners; k++)
            if (strcmp(fcfg->listeners[l].name, tcfg->listeners[k].name) == 0) {
                SL_COUNTER_ADD(to->conns_active[k], SL_COUNTER_GET(from->conns_active[l]));
                SL_COUNTER_ADD(to->h2_streams[k], SL_COUNTER_GET(from->h2_streams[l]));
            }
}

static void render_hist_le(sl_wbuf_t *t, const char *name, const char *labels, const sl_hist_t *sum,
                           const double *le) {
    uint64_t cum = 0;
    for (int i = 0; i < SL_METRIC_BUCKETS; i++) {
        cum += sum->buckets[i];
        sl_wbuf_printf(t, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, le[i], (unsigned long long)cum);
    }
    sl_wbuf_printf(t, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)sum->count);
    sl_wbuf_printf(t, "%s_sum{%s} %.9f\n", name, labels, (double)sum->sum_ns / 1e9);
    sl_wbuf_printf(t, "%s_count{%s} %llu\n", name, labels, (unsigned long long)sum->count);
}

static void render_hist(sl_wbuf_t *t, const char *name, const char *labels, const sl_hist_t *sum) {
    render_hist_le(t, name, labels, sum, bucket_le);
}

static void add_hist(sl_hist_t *out, const sl_hist_t *h) {
    for (int i = 0; i < SL_METRIC_BUCKETS; i++) out->buckets[i] += SL_COUNTER_GET(h->buckets[i]);
    out->sum_ns += SL_COUNTER_GET(h->sum_ns);
    out->count += SL_COUNTER_GET(h->count);
}

static void sum_hist(sl_hist_t *out, sl_wmetrics_t *const *ms, size_t n, bool upstream, size_t idx) {
    memset(out, 0, sizeof(*out));
    for (size_t w = 0; w < n; w++) {
        add_hist(out, upstream ? &ms[w]->up_dur[idx] : &ms[w]->req_dur[idx]);
    }
}

double sl_metrics_bucket_le(int i) { return bucket_le[i]; }

void sl_metrics_route_totals(sl_wmetrics_t *const *ms, size_t n, size_t r, uint64_t *requests, uint64_t *errors,
                             sl_hist_t *dur) {
    *requests = *errors = 0;
    for (size_t w = 0; w < n; w++) {
        const sl_codes_t *k = ms[w]->req_codes;
        uint32_t nc = __atomic_load_n(&k->ncols, __ATOMIC_ACQUIRE);
        for (unsigned c = 1; c <= nc; c++) {
            uint64_t v = SL_COUNTER_GET(*codes_slot(k, r, c));
            *requests += v;
            if (k->code[c - 1] + 100 >= 500) *errors += v;
        }
    }
    sum_hist(dur, ms, n, false, r);
}

/* A chain: the global plugins (for a route) then the owner's own. */
typedef struct {
    const sl_plugin_conf_t *first;
    size_t nfirst;
    const sl_plugin_conf_t *own;
    size_t nown;
} chain_t;

static const char *chain_at(const chain_t *c, size_t pos) {
    return pos < c->nfirst ? c->first[pos].name : c->own[pos - c->nfirst].name;
}

/* sluice_plugin_errors_total of one chain (row `row` of the workers' route counters, or of
 * their tcp listener counters): one series per (owner, plugin name), a plugin used twice in
 * a chain sums. */
/* One listener's counters by result ([nlisteners][nres] arrays at `field` of each worker's
 * metrics), summed over workers: METRIC{listener="NAME",LABEL="..."} lines. */
static void render_listener_results(sl_wbuf_t *t, const char *metric, const char *listener, size_t l,
                                    sl_wmetrics_t *const *ms, size_t n, size_t field, const char *label,
                                    const char *const *results, size_t nres) {
    for (size_t res = 0; res < nres; res++) {
        uint64_t v = 0;
        for (size_t w = 0; w < n; w++) {
            const uint64_t *arr = *(uint64_t *const *)((const char *)ms[w] + field);
            v += SL_COUNTER_GET(arr[l * nres + res]);
        }
        sl_wbuf_printf(t, "%s{listener=\"%s\",%s=\"%s\"} %llu\n", metric, listener, label, results[res],
                (unsigned long long)v);
    }
}

static void render_chain_errors(sl_wbuf_t *t, const char *owner, const chain_t *c, sl_wmetrics_t *const *ms,
                                size_t n, bool listener, size_t row) {
    size_t chain = SL_MIN(c->nfirst + c->nown, (size_t)SL_METRIC_MAX_CHAIN);
    for (size_t pos = 0; pos < chain; pos++) {
        const char *pn = chain_at(c, pos);
        bool seen = false;
        for (size_t q = 0; q < pos && !seen; q++) seen = strcmp(chain_at(c, q), pn) == 0;
        if (seen) continue;
        uint64_t v = 0;
        for (size_t q = pos; q < chain; q++) {
            if (strcmp(chain_at(c, q), pn) != 0) continue;
            for (size_t w = 0; w < n; w++) {
                const uint64_t *errs = listener ? ms[w]->lplugin_errors : ms[w]->plugin_errors;
                v += SL_COUNTER_GET(errs[row * SL_METRIC_MAX_CHAIN + q]);
            }
        }
        sl_wbuf_printf(t, "sluice_plugin_errors_total{route=\"%s\",plugin=\"%s\"} %llu\n", owner, pn,
                (unsigned long long)v);
    }
}

static const char *const phase_names[SL_METRIC_PHASES] = {"rewrite", "access", "header_filter", "body_filter",
                                                           "log",     "preread", "balancer"};

const char *sl_metrics_phase_name(int phase) {
    return phase >= 0 && phase < SL_METRIC_PHASES ? phase_names[phase] : "?";
}

/* sluice_plugin_duration_seconds of route r: one series per (plugin name, phase) with
 * calls, a plugin used twice in the chain summed. */
static void render_chain_durations(sl_wbuf_t *t, const char *owner, const chain_t *c, sl_wmetrics_t *const *ms,
                                   size_t n, size_t r) {
    size_t chain = SL_MIN(c->nfirst + c->nown, (size_t)SL_METRIC_MAX_CHAIN);
    char labels[512];
    for (size_t pos = 0; pos < chain; pos++) {
        const char *pn = chain_at(c, pos);
        bool seen = false;
        for (size_t q = 0; q < pos && !seen; q++) seen = strcmp(chain_at(c, q), pn) == 0;
        if (seen) continue;
        for (size_t ph = 0; ph < SL_METRIC_PHASES; ph++) {
            sl_hist_t h = {0};
            for (size_t q = pos; q < chain; q++)
                if (strcmp(chain_at(c, q), pn) == 0)
                    for (size_t w = 0; w < n; w++)
                        add_hist(&h, &ms[w]->plugin_dur[(ms[w]->plugin_base[r] + q) * SL_METRIC_PHASES + ph]);
            if (!h.count) continue;
            snprintf(labels, sizeof labels, "route=\"%s\",plugin=\"%s\",phase=\"%s\"", owner, pn, phase_names[ph]);
            render_hist_le(t, "sluice_plugin_duration_seconds", labels, &h, plugin_le);
        }
    }
}

/* A per-route counter array of the workers' metrics (the uint64_t * at `field`, [nroutes][nk])
 * as `name{route, label}`, the non-zero ones. */
static void render_route_counts(sl_wbuf_t *t, const sl_config_t *cfg, sl_wmetrics_t *const *ms, size_t n,
                                size_t field, const char *name, const char *label,
                                const char *const *values, size_t nk) {
    for (size_t r = 0; r < cfg->nroutes; r++)
        for (size_t k = 0; k < nk; k++) {
            uint64_t v = 0;
            for (size_t w = 0; w < n; w++) {
                const uint64_t *a = *(uint64_t *const *)((const char *)ms[w] + field);
                v += SL_COUNTER_GET(a[r * nk + k]);
            }
            if (v) sl_wbuf_printf(t, "%s{route=\"%s\",%s=\"%s\"} %llu\n", name, cfg->routes[r].name, label, values[k],
                           (unsigned long long)v);
        }
}

int sl_metrics_render(const sl_config_t *cfg, sl_wmetrics_t *const *ms, size_t n, const char *extra,
                      char **out, size_t *len) {
    sl_wbuf_t t = {0}; /* the admin thread's page (not a hot path) */
    if (!sl_wbuf_reserve(&t, 16384)) return SL_ERROR;
    size_t nroutes = cfg->nroutes + 1;
    char labels[512];
    bool used[SL_METRIC_CODES];

    sl_wbuf_printf(&t, "# HELP sluice_requests_total Requests answered, by route and status code.\n"
                "# TYPE sluice_requests_total counter\n");
    codes_used(ms, n, offsetof(sl_wmetrics_t, req_codes), used);
    for (size_t r = 0; r < nroutes; r++) {
        const char *rn = r < cfg->nroutes ? cfg->routes[r].name : "none";
        for (int c = 0; c < SL_METRIC_CODES; c++) {
            if (!used[c]) continue;
            uint64_t v = 0;
            for (size_t w = 0; w < n; w++) v += sl_codes_get(ms[w]->req_codes, r, c + 100);
            if (v) sl_wbuf_printf(&t, "sluice_requests_total{route=\"%s\",code=\"%d\"} %llu\n", rn, c + 100, (unsigned long long)v);
        }
    }
    sl_wbuf_printf(&t, "# HELP sluice_request_duration_seconds Time from request head to the end of the response.\n"
                "# TYPE sluice_request_duration_seconds histogram\n");
    for (size_t r = 0; r < nroutes; r++) {
        sl_hist_t h;
        sum_hist(&h, ms, n, false, r);
        if (!h.count && r == nroutes - 1) continue;
        snprintf(labels, sizeof(labels), "route=\"%s\"", r < cfg->nroutes ? cfg->routes[r].name : "none");
        render_hist(&t, "sluice_request_duration_seconds", labels, &h);
    }
    sl_wbuf_printf(&t, "# HELP sluice_upstream_requests_total Upstream exchanges by target and status (0: no response).\n"
                "# TYPE sluice_upstream_requests_total counter\n");
    codes_used(ms, n, offsetof(sl_wmetrics_t, up_codes), used);
    for (size_t u = 0; u < cfg->nupstreams; u++) {
        const sl_upstream_conf_t *uc = &cfg->upstreams[u];
        for (size_t k = 0; k < uc->ntargets; k++) {
            if (!uc->targets[k].addr.text[0]) continue; /* a DNS or registry slot never filled */
            size_t ti = ms[0]->target_base[u] + k;
            uint64_t none = 0;
            for (size_t w = 0; w < n; w++) none += SL_COUNTER_GET(ms[w]->up_noresp[ti]);
            if (none) sl_wbuf_printf(&t, "sluice_upstream_requests_total{upstream=\"%s\",target=\"%s\",code=\"0\"} %llu\n",
                              uc->name, uc->targets[k].addr.text, (unsigned long long)none);
            for (int c = 0; c < SL_METRIC_CODES; c++) {
                if (!used[c]) continue;
                uint64_t v = 0;
                for (size_t w = 0; w < n; w++) v += sl_codes_get(ms[w]->up_codes, ti, c + 100);
                if (v) sl_wbuf_printf(&t, "sluice_upstream_requests_total{upstream=\"%s\",target=\"%s\",code=\"%d\"} %llu\n",
                               uc->name, uc->targets[k].addr.text, c + 100, (unsigned long long)v);
            }
        }
    }
    sl_wbuf_printf(&t, "# HELP sluice_upstream_duration_seconds Time from upstream request to the end of its response.\n"
                "# TYPE sluice_upstream_duration_seconds histogram\n");
    for (size_t u = 0; u < cfg->nupstreams; u++) {
        const sl_upstream_conf_t *uc = &cfg->upstreams[u];
        for (size_t k = 0; k < uc->ntargets; k++) {
            if (!uc->targets[k].addr.text[0]) continue;
            sl_hist_t h;
            sum_hist(&h, ms, n, true, ms[0]->target_base[u] + k);
            snprintf(labels, sizeof(labels), "upstream=\"%s\",target=\"%s\"", uc->name, uc->targets[k].addr.text);
            render_hist(&t, "sluice_upstream_duration_seconds", labels, &h);
        }
    }
    sl_wbuf_printf(&t, "# HELP sluice_ratelimit_total Rate-limit decisions by route: allowed, limited, or failopen (store down).\n"
                "# TYPE sluice_ratelimit_total counter\n");
    render_route_counts(&t, cfg, ms, n, offsetof(sl_wmetrics_t, ratelimit), "sluice_ratelimit_total", "result",
                        rl_results, SL_RL_RESULTS);
    sl_wbuf_printf(&t, "# HELP sluice_cache_total What the proxy-cache did, by route: HIT, MISS, EXPIRED, BYPASS, STALE.\n"
                "# TYPE sluice_cache_total counter\n");
    render_route_counts(&t, cfg, ms, n, offsetof(sl_wmetrics_t, cache), "sluice_cache_total", "status",
                        cache_statuses, SL_CACHE_STATUSES);
    sl_wbuf_printf(&t, "# HELP sluice_grpc_responses_total gRPC responses by route and the grpc-status the client got "
                "(passed through from the upstream, or made by the gateway).\n"
                "# TYPE sluice_grpc_responses_total counter\n");
    for (size_t r = 0; r < nroutes; r++)
        for (size_t k = 0; k < SL_METRIC_GRPC_CODES; k++) {
            uint64_t v = 0;
            for (size_t w = 0; w < n; w++) v += SL_COUNTER_GET(ms[w]->grpc[r * SL_METRIC_GRPC_CODES + k]);
            if (v) sl_wbuf_printf(&t, "sluice_grpc_responses_total{route=\"%s\",grpc_status=\"%zu\"} %llu\n",
                           r < cfg->nroutes ? cfg->routes[r].name : "none", k, (unsigned long long)v);
        }
    sl_wbuf_printf(&t, "# HELP sluice_retries_total Upstream attempts made again on another target, by reason.\n"
                "# TYPE sluice_retries_total counter\n");
    for (size_t u = 0; u < cfg->nupstreams; u++)
        for (size_t k = 0; k < SL_RETRY_REASONS; k++) {
            uint64_t v = 0;
            for (size_t w = 0; w < n; w++) v += SL_COUNTER_GET(ms[w]->retries[u * SL_RETRY_REASONS + k]);
            sl_wbuf_printf(&t, "sluice_retries_total{upstream=\"%s\",reason=\"%s\"} %llu\n", cfg->upstreams[u].name,
                    retry_reasons[k], (unsigned long long)v);
        }
    sl_wbuf_printf(&t, "# HELP sluice_connections_active Open client connections by listener.\n"
                "# TYPE sluice_connections_active gauge\n");
    for (size_t l = 0; l < cfg->nlisteners; l++) {
        int64_t v = 0;
        for (size_t w = 0; w < n; w++) v += SL_COUNTER_GET(ms[w]->conns_active[l]);
        sl_wbuf_printf(&t, "sluice_connections_active{listener=\"%s\"} %lld\n", cfg->listeners[l].name, (long long)v);
    }
    sl_wbuf_printf(&t, "# HELP sluice_tcp_bytes_total Bytes of TCP sessions by listener: in (from clients), out (from upstreams).\n"
                "# TYPE sluice_tcp_bytes_total counter\n");
    for (size_t l = 0; l < cfg->nlisteners; l++) {
        if (cfg->listeners[l].protocol != SL_PROTO_TCP) continue;
        for (size_t dir = 0; dir < 2; dir++) {
            uint64_t v = 0;
            for (size_t w = 0; w < n; w++) v += SL_COUNTER_GET(ms[w]->tcp_bytes[l * 2 + dir]);
            sl_wbuf_printf(&t, "sluice_tcp_bytes_total{listener=\"%s\",direction=\"%s\"} %llu\n", cfg->listeners[l].name,
                    dir ? "out" : "in", (unsigned long long)v);
        }
    }
    sl_wbuf_printf(&t, "# HELP sluice_tcp_sessions_total Sessions of tcp listeners by how they ended.\n"
                "# TYPE sluice_tcp_sessions_total counter\n");
    for (size_t l = 0; l < cfg->nlisteners; l++)
        if (cfg->listeners[l].protocol == SL_PROTO_TCP)
            render_listener_results(&t, "sluice_tcp_sessions_total", cfg->listeners[l].name, l, ms, n,
                                    offsetof(sl_wmetrics_t, tcp_end), "result", sl_tcp_end_label, SL_TCP_ENDS);
    sl_wbuf_printf(&t, "# HELP sluice_tcp_connect_failures_total Connections tcp listeners could not make to a target "
                "(refused, unreachable, timed out).\n"
                "# TYPE sluice_tcp_connect_failures_total counter\n");
    for (size_t u = 0; u < cfg->nupstreams; u++) {
        const sl_upstream_conf_t *uc = &cfg->upstreams[u];
        for (size_t k = 0; k < uc->ntargets; k++) {
            uint64_t v = 0;
            for (size_t w = 0; w < n; w++) v += SL_COUNTER_GET(ms[w]->tcp_connect_fail[ms[0]->target_base[u] + k]);
            if (v && uc->targets[k].addr.text[0])
                sl_wbuf_printf(&t, "sluice_tcp_connect_failures_total{upstream=\"%s\",target=\"%s\"} %llu\n", uc->name,
                        uc->targets[k].addr.text, (unsigned long long)v);
        }
    }
    static const char *const hs_results[SL_TLS_HS_RESULTS] = {"ok", "failed", "timeout"};
    sl_wbuf_printf(&t, "# HELP sluice_tls_handshakes_total TLS handshakes on listeners with tls, by result.\n"
                "# TYPE sluice_tls_handshakes_total counter\n");
    for (size_t l = 0; l < cfg->nlisteners; l++)
        if (cfg->listeners[l].tls)
            render_listener_results(&t, "sluice_tls_handshakes_total", cfg->listeners[l].name, l, ms, n,
                                    offsetof(sl_wmetrics_t, tls_hs), "result", hs_results, SL_TLS_HS_RESULTS);
    sl_wbuf_printf(&t, "# HELP sluice_tcp_sni_total Sessions of tcp listeners with sni_routes, by how the TLS "
                "server name routed them (route, default) or why they were closed (no_route, not_tls, timeout).\n"
                "# TYPE sluice_tcp_sni_total counter\n");
    for (size_t l = 0; l < cfg->nlisteners; l++)
        if (cfg->listeners[l].nsni_routes)
            render_listener_results(&t, "sluice_tcp_sni_total", cfg->listeners[l].name, l, ms, n,
                                    offsetof(sl_wmetrics_t, tcp_sni), "result", sl_sni_result_label, SL_SNI_RESULTS);
    static const char *const goaway_reasons[SL_H2_GOAWAY_REASONS] = {
        "drain",        "idle",           "protocol_error",    "flow_control_error", "frame_size_error",
        "stream_closed", "compression_error", "enhance_your_calm", "internal_error",     "other"};
    sl_wbuf_printf(&t, "# HELP sluice_http2_streams_active Open HTTP/2 streams by listener.\n"
                "# TYPE sluice_http2_streams_active gauge\n");
    for (size_t l = 0; l < cfg->nlisteners; l++) {
        if (cfg->listeners[l].protocol != SL_PROTO_HTTP || !cfg->listeners[l].http2) continue;
        int64_t v = 0;
        for (size_t w = 0; w < n; w++) v += SL_COUNTER_GET(ms[w]->h2_streams[l]);
        sl_wbuf_printf(&t, "sluice_http2_streams_active{listener=\"%s\"} %lld\n", cfg->listeners[l].name, (long long)v);
    }
    sl_wbuf_printf(&t, "# HELP sluice_http2_goaway_total GOAWAY frames sent to HTTP/2 clients, by listener and reason "
                "(drain, idle, or the connection error's code).\n"
                "# TYPE sluice_http2_goaway_total counter\n");
    for (size_t l = 0; l < cfg->nlisteners; l++)
        if (cfg->listeners[l].protocol == SL_PROTO_HTTP && cfg->listeners[l].http2)
            render_listener_results(&t, "sluice_http2_goaway_total", cfg->listeners[l].name, l, ms, n,
                                    offsetof(sl_wmetrics_t, h2_goaway), "reason", goaway_reasons,
                                    SL_H2_GOAWAY_REASONS);
    sl_wbuf_printf(&t, "# HELP sluice_plugin_errors_total Lua errors raised by plugins, by route and plugin.\n"
                "# TYPE sluice_plugin_errors_total counter\n");
    for (size_t r = 0; r < cfg->nroutes; r++) {
        const sl_route_conf_t *rc = &cfg->routes[r];
        chain_t c = {cfg->plugins, cfg->nplugins, rc->plugins, rc->nplugins};
        render_chain_errors(&t, rc->name, &c, ms, n, false, r);
    }
    /* tcp listeners' preread chains: route="listener:NAME" (names cannot hold ':', so it never
     * meets a route's) */
    for (size_t l = 0; l < cfg->nlisteners; l++) {
        const sl_listener_conf_t *lc = &cfg->listeners[l];
        if (!lc->nplugins) continue;
        char label[160];
        snprintf(label, sizeof label, "listener:%s", lc->name);
        chain_t c = {NULL, 0, lc->plugins, lc->nplugins};
        render_chain_errors(&t, label, &c, ms, n, true, l);
    }
    if (n && ms[0]->plugin_dur) {
        sl_wbuf_printf(&t, "# HELP sluice_plugin_duration_seconds Time of each plugin's phase calls (waits included), "
                    "by route, plugin and phase.\n"
                    "# TYPE sluice_plugin_duration_seconds histogram\n");
        for (size_t r = 0; r < cfg->nroutes; r++) {
            const sl_route_conf_t *rc = &cfg->routes[r];
            chain_t c = {cfg->plugins, cfg->nplugins, rc->plugins, rc->nplugins};
            render_chain_durations(&t, rc->name, &c, ms, n, r);
        }
    }
    if (extra) sl_wbuf_cat(&t, extra);
    if (sl_wbuf_failed(&t) || !sl_wbuf_cstr(&t)) {
        free(t.p);
        return SL_ERROR;
    }
    *out = t.p;
    *len = t.len;
    return SL_OK;
}

char *sl_metrics_result_counters(const char *name, const char *help, const char *const *results,
                                 _Atomic uint64_t *counts, int n) {
    uint64_t v[8], any = 0;
    if (n > 8) return NULL;
    for (int i = 0; i < n; i++) any |= v[i] = atomic_load_explicit(&counts[i], memory_order_relaxed);
    if (!any) return NULL;
    size_t cap = 1024, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    len += (size_t)snprintf(out + len, cap - len, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s{result=\"%s\"} %llu\n", name, results[i],
                                (unsigned long long)v[i]);
    return out;
}
