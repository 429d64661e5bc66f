/* upstream_conf.h — what an upstream's section of the config says about choosing and
 * guarding its targets: the balancer kinds, what consistent-hash hashes, the circuit
 * breaker, health checks and retries.
 *
 * Plain values, filled by the config build (config/upstreams.c) and read by the upstream
 * layer (balancer.c, breaker.c, health.c) and the proxies. They live here, below both,
 * so the config never includes the layers that run it.
 */
#ifndef SL_UPSTREAM_CONF_H
#define SL_UPSTREAM_CONF_H

#include <stdbool.h>
#include <stdint.h>

/** Balancer kinds (`balancer:`); balancer.h has how each picks. */
enum {
    SL_LB_ROUND_ROBIN = 0,
    SL_LB_WEIGHTED_ROUND_ROBIN,
    SL_LB_LEAST_CONN,
    SL_LB_P2C_EWMA,
    SL_LB_CONSISTENT_HASH,
};

/** What consistent-hash (and a route's sticky split) hashes. */
enum { SL_HASH_IP = 0, SL_HASH_HEADER, SL_HASH_COOKIE, SL_HASH_PATH };

/** A circuit breaker's `circuit_breaker:` (breaker.h has the state machine). */
typedef struct {
    bool enabled;                 /**< false: admit always, record nothing */
    double failure_ratio;         /**< 0 < r <= 1; default 0.5 */
    uint32_t min_requests;        /**< default 20 */
    uint64_t window_ms;           /**< default 30000 */
    uint64_t open_timeout_ms;     /**< default 1000 */
    uint64_t max_open_timeout_ms; /**< default 60000 */
    uint32_t half_open_requests;  /**< default 2, >= 1 */
    uint32_t success_threshold;   /**< default 2, >= 1 */
} sl_breaker_conf_t;

/** Retry conditions, as bits of sl_retry_conf_t.on_flags (statuses are listed apart). */
enum { SL_RETRY_ON_CONNECT_ERROR = 1 << 0, SL_RETRY_ON_TIMEOUT = 1 << 1 };
#define SL_MAX_RETRY_STATUSES 16

typedef struct {
    uint32_t attempts;          /**< tries in all, the first included; default 1 (no retry) */
    uint32_t on_flags;          /**< SL_RETRY_ON_* */
    uint16_t statuses[SL_MAX_RETRY_STATUSES]; /**< upstream statuses that are retried */
    uint32_t nstatuses;
    uint64_t backoff_ms;        /**< base of the full-jitter backoff; default 25ms */
    uint64_t max_backoff_ms;    /**< default 250ms */
    uint64_t max_body;          /**< request bodies up to this are buffered for replay; 1MiB */
    uint64_t hedge_after_ms;    /**< 0: no hedging */
} sl_retry_conf_t;

/** The protocol spoken to an upstream's targets (`protocol:`): HTTP/1.1, HTTP/2 over TLS
 *  (ALPN h2), or HTTP/2 over cleartext with prior knowledge (http/h2_up.c). */
enum { SL_UP_HTTP1 = 0, SL_UP_H2, SL_UP_H2C };

enum { SL_PROBE_NONE = 0, SL_PROBE_HTTP, SL_PROBE_TCP, SL_PROBE_GRPC };

typedef struct {
    int active_type;            /**< SL_PROBE_*; NONE: no active probes */
    char *path;                 /**< http probe path; default /health */
    char *service;              /**< grpc probe: the HealthCheckRequest's service; NULL: "" (the server) */
    int expect_status;          /**< 0: any 2xx/3xx */
    uint64_t interval_ms, timeout_ms;   /**< default 2s, 1s */
    uint32_t healthy_threshold, unhealthy_threshold; /**< default 2, 3 */
    bool passive;               /**< passive ejection configured */
    uint32_t max_failures;      /**< default 5 */
    uint64_t window_ms;         /**< default 10s */
} sl_health_conf_t;

#endif
