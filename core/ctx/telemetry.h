/* telemetry.h — OpenTelemetry spans: a bounded queue the workers fill, and one exporter
 * thread that batches them to an OTLP/HTTP collector in the JSON encoding.
 *
 * Process-wide: the queue outlives config generations (a reload's new workers and the
 * retiring ones submit into the same queue). A worker's submit takes the queue's mutex
 * for one copy of a span, only for sampled requests; the exporter thread holds it only
 * to take a batch. A collector that is down or slow delays only the exporter thread:
 * while it waits the queue fills and further spans are dropped and counted.
 */
#ifndef SL_TELEMETRY_H
#define SL_TELEMETRY_H

#include "config/config.h"

/** Spans held at most; a span submitted to a full queue is dropped (counted). */
#define SL_TELEMETRY_QUEUE 2048
/** Spans per export at most; a batch also goes when the oldest waited SL_TELEMETRY_FLUSH_MS. */
#define SL_TELEMETRY_BATCH 512
#define SL_TELEMETRY_FLUSH_MS 2000

enum { SL_SPAN_INTERNAL = 1, SL_SPAN_SERVER = 2, SL_SPAN_CLIENT = 3 }; /* OTLP's SpanKind numbers */

/** One finished span, copied whole into the queue (strings cut to their fields). */
typedef struct {
    uint8_t trace_id[16], span_id[8], parent_id[8];
    uint8_t kind;         /**< SL_SPAN_* */
    uint8_t has_parent;
    uint16_t status;      /**< http.response.status_code; 0: no response */
    uint8_t attempt;      /**< CLIENT: sluice.attempt, 1-based */
    uint8_t secure;       /**< SERVER: the request came over TLS (url.scheme https) */
    uint16_t server_port; /**< SERVER: the listener's port (server.port) */
    uint64_t start_unix_ns, end_unix_ns;
    char method[16];
    char route[64];       /**< http.route (the route's name); "" when none matched */
    char path[128];       /**< url.path */
    char server_address[96]; /**< SERVER: the Host's name (server.address) */
    char client_address[48];
    char upstream[64];    /**< sluice.upstream */
    char target[64];      /**< CLIENT: sluice.target ("ip:port": server.address, server.port) */
    char reason[16];      /**< CLIENT: sluice.attempt.reason: "first", "retry", "hedge" */
    char error_type[24];  /**< error.type: "" when none */
    char plugin[48];      /**< INTERNAL: sluice.plugin */
    char phase[16];       /**< INTERNAL: sluice.phase */
} sl_span_t;

/** Starts the exporter for `tc` (a config's telemetry), or updates the endpoint, headers,
 *  timeout and service name of a running one. Nothing when tc is disabled. Main thread. */
int sl_telemetry_configure(const sl_telemetry_conf_t *tc);
/** Exports what is queued (one last try, bounded by the timeout) and stops the thread.
 *  Main thread, after the workers stopped. */
void sl_telemetry_stop(void);

/** Queues a span (copied). Any worker thread. */
void sl_telemetry_submit(const sl_span_t *s);

/** Counters for /metrics: spans dropped (queue full, or a failed export's batch), spans
 *  exported, exports failed. Any thread. */
void sl_telemetry_counters(uint64_t *dropped, uint64_t *exported, uint64_t *failed);

/** Copies the bytes of s into a span's field of size cap, cut to fit, NUL-terminated. */
void sl_span_str(char *field, size_t cap, const char *p, size_t n);

#endif
