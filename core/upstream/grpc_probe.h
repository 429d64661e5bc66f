/* grpc_probe.h — one gRPC health check (grpc.health.v1.Health/Check) as an HTTP/2 client
 * exchange, without a transport: health.c moves its bytes over the probe's connection
 * (plain for h2c, TLS for h2). The request's HealthCheckRequest names `service` ("" asks
 * about the server as a whole); the answer passes only when it is HTTP 200, grpc-status 0
 * and a HealthCheckResponse whose status is SERVING (1).
 *
 * Ownership: the probe is the caller's (main thread), from new to free; buffers it hands
 * out with take are the caller's to free().
 */
#ifndef SL_GRPC_PROBE_H
#define SL_GRPC_PROBE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct sl_grpc_probe_s sl_grpc_probe_t;

/** A probe whose request (connection preface, SETTINGS, HEADERS, DATA) waits in its
 *  output; NULL when out of memory. `authority` is the :authority, `tls` chooses the
 *  :scheme. The strings are copied. */
sl_grpc_probe_t *sl_grpc_probe_new(const char *authority, bool tls, const char *service);
/** Bytes read from the connection. SL_EAGAIN: more are needed; SL_OK: the check passed
 *  (SERVING); SL_ERROR: it failed, *why says how (a static string or the probe's own text,
 *  valid until the probe is freed). Output may be due after each call (take). */
int sl_grpc_probe_feed(sl_grpc_probe_t *p, const char *data, size_t len, const char **why);
/** What the probe has to send, as a malloc'ed buffer (*buf, the caller frees it); 0 and
 *  *buf NULL when nothing is due. SL_ERROR (negative) when out of memory. */
long sl_grpc_probe_take(sl_grpc_probe_t *p, char **buf);
void sl_grpc_probe_free(sl_grpc_probe_t *p);

#endif
