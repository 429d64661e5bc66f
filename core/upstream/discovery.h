/* discovery.h — the dynamic part of upstreams' target sets: DNS names re-resolved at their
 * TTL, and backends that register themselves with a TTL (the registry).
 *
 * Both end in the same place: an upstream's dynamic slots (sl_upgen_fill), so a target
 * that stays keeps its state (breaker, health, EWMA: per address, upstreams.h) and a
 * change needs no reload. What discovery knows (each name's last good addresses, each
 * registration) is kept here, by upstream name, outside any generation: a reload binds
 * the new generation and fills it from what is known at once (no 503 while a kept name
 * re-resolves; registrations survive while their upstream exists and keeps its registry).
 * Main thread only; workers see only the slots.
 */
#ifndef SL_DISCOVERY_H
#define SL_DISCOVERY_H

#include <stdint.h>
#include <uv.h>

#include "net/resolver.h"
#include "upstream/upstreams.h"

typedef struct sl_discovery_s sl_discovery_t;

/** Counters, read by /metrics (main thread). */
typedef struct {
    uint64_t resolutions[SL_DNS_RESULTS]; /**< sluice_dns_resolutions_total{result} */
    uint64_t kept;          /**< failed re-resolutions that kept the last good addresses */
    uint64_t registrations; /**< accepted PUTs (register or renew) */
    uint64_t expired;       /**< registrations removed because their ttl ran out */
} sl_discovery_stats_t;

/** A discovery on the main loop, keeping target states in reg. NULL on out of memory. */
sl_discovery_t *sl_discovery_new(uv_loop_t *loop, sl_tregistry_t *reg);
/** g becomes the generation served: its names are resolved (or filled from what is known),
 *  its registry upstreams filled; names and registrations of upstreams g does not have are
 *  dropped. SL_OK, or SL_ERROR with *err (the resolver could not be made). */
int sl_discovery_bind(sl_discovery_t *d, sl_upgen_t *g, const char **err);
/** Start: runs the loop until every name of the bound generation had its first answer or
 *  `max_ms` passed, so the first requests find resolved names. Before serving only. */
void sl_discovery_prime(sl_discovery_t *d, uint64_t max_ms);
/** Stops timers and lookups; frees once its handles are closed. NULL is fine. */
void sl_discovery_free(sl_discovery_t *d);

/** PUT /upstreams/NAME/targets: registers or renews `address` with `weight` for ttl_ms.
 *  200 (created or renewed: *created), or 400/404/503 with *err (static text). */
int sl_discovery_register(sl_discovery_t *d, const char *upstream, const char *address, uint32_t weight,
                          uint64_t ttl_ms, bool *created, const char **err);
/** DELETE /upstreams/NAME/targets/ADDRESS: 200, or 404 with *err. */
int sl_discovery_deregister(sl_discovery_t *d, const char *upstream, const char *address, const char **err);

/** Appends JSON: GET /upstreams/NAME/targets's body ({"upstream":..,"targets":[...]}), or
 *  returns false when there is no such upstream. */
typedef void (*sl_json_put_fn)(void *ud, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool sl_discovery_targets_json(sl_discovery_t *d, const char *upstream, sl_json_put_fn put, void *ud);
/** Appends JSON: the "names" of upstream u for /status ([{"name":..,"addresses":[..],
 *  "resolved_at_ms":..,"last_result":..}]). */
void sl_discovery_names_json(sl_discovery_t *d, size_t u, sl_json_put_fn put, void *ud);
/** The counters. */
const sl_discovery_stats_t *sl_discovery_stats(const sl_discovery_t *d);

#endif
