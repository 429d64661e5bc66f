/* metrics.h — per-worker counters, summed by the main thread at scrape time.
 *
 * Each worker writes only its own counters (single writer, relaxed atomic
 * stores, no lock prefix); the admin thread reads them with relaxed loads.
 * Labels come only from config names, never from request data.
 */
#ifndef SL_METRICS_H
#define SL_METRICS_H

#include <pthread.h>

#include "base/common.h"
#include "config/config.h"
#include "proto/sni.h"

/** Results of a TLS handshake on a listener: ok, failed (bad bytes, no common version or
 *  cipher, plaintext), timeout (header_timeout/handshake_timeout passed mid-handshake). */
enum { SL_TLS_HS_OK = 0, SL_TLS_HS_FAILED, SL_TLS_HS_TIMEOUT, SL_TLS_HS_RESULTS };
#define SL_METRIC_CODES 500 /* status 100..599 */
#define SL_METRIC_BUCKETS 14
#define SL_METRIC_MAX_CHAIN 32
#define SL_METRIC_GRPC_CODES 17 /* gRPC status 0..16 (proto/grpc_status.h) */

/** Why a request was retried: the `reason` label of sluice_retries_total. */
enum { SL_RETRY_CONNECT, SL_RETRY_TIMEOUT, SL_RETRY_RESET, SL_RETRY_STATUS, SL_RETRY_REASONS };

/** Why a GOAWAY frame went to an HTTP/2 client: the `reason` label of
 *  sluice_http2_goaway_total. DRAIN and IDLE are sluice's own (NO_ERROR); the others name
 *  the error code of a connection error (most decided by nghttp2, ENHANCE_YOUR_CALM also by
 *  sluice's flood bounds). */
enum {
    SL_H2_GOAWAY_DRAIN,
    SL_H2_GOAWAY_IDLE,
    SL_H2_GOAWAY_PROTOCOL_ERROR,
    SL_H2_GOAWAY_FLOW_CONTROL_ERROR,
    SL_H2_GOAWAY_FRAME_SIZE_ERROR,
    SL_H2_GOAWAY_STREAM_CLOSED,
    SL_H2_GOAWAY_COMPRESSION_ERROR,
    SL_H2_GOAWAY_ENHANCE_YOUR_CALM,
    SL_H2_GOAWAY_INTERNAL_ERROR,
    SL_H2_GOAWAY_OTHER,
    SL_H2_GOAWAY_REASONS
};

/** How a session of a tcp listener ended: the `result` label of sluice_tcp_sessions_total.
 *  closed: both sides finished (FIN each way); reset: a side reset or failed mid-session;
 *  connect_failed: no connection to the upstream could be made (every attempt refused or
 *  timed out); unavailable: no target could take it (breakers open, none left to try);
 *  no_route: nothing chose an upstream (sni_routes without a match, no plugin choice);
 *  rejected: refused before routing (a bad or missing PROXY header, sni_routes and not TLS,
 *  a preread plugin's close); timeout: header_timeout or idle_timeout passed; shutdown: cut
 *  at shutdown_timeout; error: the gateway's own failure (descriptors, memory). */
enum {
    SL_TCP_END_CLOSED,
    SL_TCP_END_RESET,
    SL_TCP_END_CONNECT_FAILED,
    SL_TCP_END_UNAVAILABLE,
    SL_TCP_END_NO_ROUTE,
    SL_TCP_END_REJECTED,
    SL_TCP_END_TIMEOUT,
    SL_TCP_END_SHUTDOWN,
    SL_TCP_END_ERROR,
    SL_TCP_ENDS
};
extern const char *const sl_tcp_end_label[SL_TCP_ENDS];

/** A rate-limit decision: the `result` label of sluice_ratelimit_total. */
/* SL_RL_ALLOWED, _LIMITED, _FAILOPEN are in sluice.h (plugins count through the ABI). */
#define SL_RL_RESULTS (SL_RL_FAILOPEN + 1)
/** What the proxy-cache did: the `status` label of sluice_cache_total (SL_CACHE_MISS ..
 *  SL_CACHE_STALE of sluice.h). */
#define SL_CACHE_STATUSES (SL_CACHE_STALE + 1)

#define SL_COUNTER_ADD(x, v) __atomic_fetch_add(&(x), (v), __ATOMIC_RELAXED)
#define SL_COUNTER_GET(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/** Counts by HTTP status, one row per route (or target), kept in columns: a status gets the
 *  next column the first time its table counts it, and a block of 8 columns is allocated
 *  when its first column is given ([rows][8] counters; the first at init). A worker sees a
 *  handful of statuses, so a row is 8 counters, not 500: a fold, a render and the pages a
 *  10,000-route table maps stay small. The worker counts; the main thread reads (render)
 *  and, while folding a retired worker in, counts too: a column is given under `mu` (rare),
 *  its block published before its status's `col` (release), counters are atomic adds. */
#define SL_METRIC_COLS_BLOCK 8
#define SL_METRIC_COL_BLOCKS ((SL_METRIC_CODES + SL_METRIC_COLS_BLOCK - 1) / SL_METRIC_COLS_BLOCK)
typedef struct {
    size_t rows;
    uint32_t ncols;                        /**< columns given (acquire) */
    uint16_t col[SL_METRIC_CODES];         /**< [status - 100]: its column + 1; 0: none yet */
    uint16_t code[SL_METRIC_CODES];        /**< [column]: its status - 100 */
    uint64_t *block[SL_METRIC_COL_BLOCKS]; /**< [column / 8]: [rows][8] counters, or NULL */
    pthread_mutex_t mu;                    /**< held while a column is given */
} sl_codes_t;

typedef struct {
    uint64_t buckets[SL_METRIC_BUCKETS]; /**< cumulative counts are computed at render */
    uint64_t sum_ns, count;
} sl_hist_t;

/** Phases a plugin's duration is kept for: SL_PHASE_REWRITE .. SL_PHASE_BALANCER. */
#define SL_METRIC_PHASES 7

typedef struct {
    size_t nroutes;        /**< config routes + 1 ("none": no route matched or rejected) */
    size_t ntargets;       /**< all targets of all upstreams */
    size_t *target_base;   /**< [nupstreams]: first global target index of each upstream */
    sl_codes_t *req_codes; /**< [nroutes] rows */
    sl_hist_t *req_dur;    /**< [nroutes] */
    sl_codes_t *up_codes;  /**< [ntargets + 1] rows */
    sl_hist_t *up_dur;     /**< [ntargets] */
    uint64_t *up_noresp;   /**< [ntargets]: exchanges that got no response */
    int64_t *conns_active; /**< [nlisteners] */
    uint64_t *tls_hs;      /**< [nlisteners][SL_TLS_HS_RESULTS]: TLS handshakes by result */
    uint64_t *tcp_bytes;   /**< [nlisteners][2]: tcp sessions' bytes read from the client (in)
                                and from the upstream (out), counted as they are read */
    uint64_t *tcp_end;     /**< [nlisteners][SL_TCP_ENDS]: how tcp sessions ended */
    uint64_t *tcp_connect_fail; /**< [ntargets]: tcp listeners' connects to a target that failed */
    uint64_t *tcp_sni;     /**< [nlisteners][SL_SNI_RESULTS]: how sessions of listeners with
                                sni_routes were routed or closed (sni.h) */
    int64_t *h2_streams;   /**< [nlisteners]: open HTTP/2 streams (gauge) */
    uint64_t *h2_goaway;   /**< [nlisteners][SL_H2_GOAWAY_REASONS]: GOAWAY frames sent */
    uint64_t *plugin_errors; /**< [nroutes][SL_METRIC_MAX_CHAIN], by position in the chain */
    uint64_t *lplugin_errors; /**< [nlisteners][SL_METRIC_MAX_CHAIN]: tcp listeners' preread chains */
    uint64_t *retries;     /**< [nupstreams][SL_RETRY_REASONS] */
    uint64_t *ratelimit;   /**< [nroutes][SL_RL_RESULTS] */
    uint64_t *cache;       /**< [nroutes][SL_CACHE_STATUSES] */
    uint64_t *grpc;        /**< [nroutes][SL_METRIC_GRPC_CODES]: grpc-status values clients got */
    size_t *plugin_base;   /**< [nroutes]: first row of each route's chain in plugin_dur */
    uint8_t *plugin_len;   /**< [nroutes]: its chain's length (global + own, capped) */
    sl_hist_t *plugin_dur; /**< [sum of chain lengths][SL_METRIC_PHASES]; NULL when
                                metrics.plugin_timing is off */
    size_t nupstreams;
    uint64_t accepted, requests;
} sl_wmetrics_t;

int sl_metrics_init(sl_wmetrics_t *m, const sl_config_t *cfg);
void sl_metrics_free(sl_wmetrics_t *m);

/** The count of `status` in row `row` of k (any thread; 0 for a status never counted). */
uint64_t sl_codes_get(const sl_codes_t *k, size_t row, int status);

/** Records one finished request; route -1 means "none". Worker thread only. */
void sl_metrics_request(sl_wmetrics_t *m, int route, int status, uint64_t dur_ns);
/** Records one upstream exchange; code 0 when no response arrived. Worker thread only. */
void sl_metrics_upstream(sl_wmetrics_t *m, int upstream, int target, int status, uint64_t dur_ns);

/** Counts a retry of `upstream` for `reason` (SL_RETRY_*). Worker thread only. */
void sl_metrics_retry(sl_wmetrics_t *m, int upstream, int reason);

/** Counts a rate-limit decision on `route` (SL_RL_*). Worker thread only. */
void sl_metrics_ratelimit(sl_wmetrics_t *m, int route, int result);
/** Counts what the proxy-cache did for a request on `route` (SL_CACHE_*). Worker thread only. */
void sl_metrics_cache(sl_wmetrics_t *m, int route, int status);

/** Counts a gRPC response with status `code` (0..16) on `route` (-1: none):
 *  sluice_grpc_responses_total. Worker thread only. */
void sl_metrics_grpc(sl_wmetrics_t *m, int route, int code);

/** Records one call of the plugin at chain position `pos` of `route` in `phase`
 *  (SL_PHASE_*) that took `ns`: sluice_plugin_duration_seconds. No lock, no allocation.
 *  Worker thread only. */
static inline void sl_metrics_plugin_time(sl_wmetrics_t *m, int route, int pos, int phase, uint64_t ns);

/** Counts a plugin error at chain position `pos` of `route`. Worker thread only. */
void sl_metrics_plugin_error(sl_wmetrics_t *m, int route, int pos);
/** The same for position `pos` of tcp listener `lidx`'s preread chain. Worker thread only. */
void sl_metrics_listener_plugin_error(sl_wmetrics_t *m, uint32_t lidx, int pos);

/** Adds the totals of `from` (built for config `fcfg`) into `to` (config `tcfg`), matching
 *  routes, upstream targets and listeners by name. Main thread, after `from`'s worker ended. */
void sl_metrics_fold(sl_wmetrics_t *to, const sl_config_t *tcfg, const sl_wmetrics_t *from,
                     const sl_config_t *fcfg);
/** The same from a worker that may still run (a retired generation's, draining), with its
 *  listeners' gauges (open connections, HTTP/2 streams) too: for /metrics to show what the
 *  old generation counted while it drains. Main thread; `from` is read with relaxed loads. */
void sl_metrics_fold_live(sl_wmetrics_t *to, const sl_config_t *tcfg, const sl_wmetrics_t *from,
                          const sl_config_t *fcfg);

/**
 * Renders the Prometheus text of all workers into a malloc'ed buffer (*out, *len).
 * Main thread. `extra` is appended verbatim (process-level gauges).
 */
int sl_metrics_render(const sl_config_t *cfg, sl_wmetrics_t *const *ms, size_t n, const char *extra,
                      char **out, size_t *len);

/** Route `r`'s totals over workers: requests, 5xx answers, and the duration histogram
 *  (bounds from sl_metrics_bucket_le). Any thread (relaxed loads). */
void sl_metrics_route_totals(sl_wmetrics_t *const *ms, size_t n, size_t r, uint64_t *requests, uint64_t *errors,
                             sl_hist_t *dur);
/** The upper bound (seconds) of request-duration bucket i < SL_METRIC_BUCKETS. */
double sl_metrics_bucket_le(int i);

/** "rewrite", "access", ... for SL_PHASE_* (static strings). */
const char *sl_metrics_phase_name(int phase);

void sl__metrics_hist_plugin(sl_hist_t *h, uint64_t ns);

static inline void sl_metrics_plugin_time(sl_wmetrics_t *m, int route, int pos, int phase, uint64_t ns) {
    if (!m->plugin_dur || route < 0 || (size_t)route + 1 >= m->nroutes || pos < 0 ||
        pos >= m->plugin_len[route] || phase < 0 || phase >= SL_METRIC_PHASES)
        return;
    sl__metrics_hist_plugin(&m->plugin_dur[(m->plugin_base[route] + (size_t)pos) * SL_METRIC_PHASES + (size_t)phase], ns);
}

/** Prometheus text of one counter family labelled `result` from n process-wide atomic
 *  counters (mirror, http-logger): malloc'ed, or NULL when every count is 0 (or out of
 *  memory). */
char *sl_metrics_result_counters(const char *name, const char *help, const char *const *results,
                                 _Atomic uint64_t *counts, int n);

#endif
