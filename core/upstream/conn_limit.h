/* conn_limit.h — requests in flight per key, one process-wide table shared by every worker
 * thread: the counter behind the limit-conn plugin (sl_ffi_limit_conn_* in sluice.h).
 *
 * A key's count is the number of slots taken and not yet released. An acquire under
 * `max` takes a slot (SL_CONN_ADMITTED); one at or above `max` but under `max + burst`
 * takes one too (SL_CONN_BURST: admitted and counted apart); one at `max + burst` takes
 * nothing (SL_CONN_REJECTED). The check and the increment are one step under the key's
 * shard lock, so N threads racing on a key with room for k admit exactly min(N, k).
 *
 * Slots. An admitted acquire hands back the key's entry as an opaque slot; the entry lives
 * while its count is above 0 (it is freed by the release that brings it to 0), so a slot
 * stays valid until released, and every slot is released exactly once. The HTTP request
 * holds its slots and releases them when it is freed (request.c), whichever way it ended.
 *
 * Routes. Each key belongs to a route (sl_conn_limit_route: a small index by route name,
 * kept for the process), whose in-flight gauge and decision counters feed
 * sluice_limit_conn_in_flight{route} and sluice_limit_conn_total{route,result}.
 *
 * Memory. SL_CONN_LIMIT_SHARDS shards, each a chained hash table behind its own mutex.
 * Only keys with requests in flight are held, at most SL_CONN_LIMIT_MAX_KEYS of them; an
 * acquire of a new key beyond that takes no slot and answers SL_CONN_FAILOPEN (the
 * request is let through, counted). Keys are byte strings, compared whole.
 *
 * Threads: every function may be called from any thread at any time.
 */
#ifndef SL_CONN_LIMIT_H
#define SL_CONN_LIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

#define SL_CONN_LIMIT_SHARDS 64
/** The most keys with requests in flight held at once (beyond: SL_CONN_FAILOPEN). */
#define SL_CONN_LIMIT_MAX_KEYS 100000
/** Route names remembered for the metrics (beyond: "other"). */
#define SL_CONN_LIMIT_ROUTES 1024
/** Decisions counted per route: SL_CONN_ADMITTED .. SL_CONN_FAILOPEN (sluice.h). */
#define SL_CONN_RESULTS (SL_CONN_FAILOPEN + 1)

/** A taken slot: the key's entry, valid until sl_conn_limit_release. */
typedef struct sl_conn_slot_s sl_conn_slot_t;

/** The index (>= 0) of route `name` for acquire and the metrics, registered on first use;
 *  the same name always answers the same index. Past SL_CONN_LIMIT_ROUTES names, the index
 *  of "other". Cheap enough for once per config generation, not per request. */
int sl_conn_limit_route(const char *name, size_t len);

/** Counts one more request in flight for key[0..len) of route `route` (an index from
 *  sl_conn_limit_route) when its count is under max + burst (max >= 1, burst >= 0).
 *  SL_CONN_ADMITTED or SL_CONN_BURST with *slot set (the caller must release it);
 *  SL_CONN_REJECTED or SL_CONN_FAILOPEN with *slot NULL; SL_ERROR with *err (static) for
 *  an invalid argument. *in_flight (when not NULL): the key's count after the call. The
 *  key is borrowed for the call. */
int sl_conn_limit_acquire(int route, const char *key, size_t len, uint32_t max, uint32_t burst,
                          sl_conn_slot_t **slot, uint32_t *in_flight, const char **err);

/** Gives a slot back: the key's count goes down by one, and the entry is freed at 0. */
void sl_conn_limit_release(sl_conn_slot_t *slot);

/** The keys held (with requests in flight), all shards. */
size_t sl_conn_limit_keys(void);
/** Requests in flight of route index `route`, or of all routes (route -1). */
int64_t sl_conn_limit_in_flight(int route);
/** The count of key[0..len) now (0 when not held). */
uint32_t sl_conn_limit_count(const char *key, size_t len);

/** sluice_limit_conn_in_flight{route} and sluice_limit_conn_total{route,result} as
 *  Prometheus text (malloc'ed, the caller frees; NULL when no route ever used limit-conn
 *  or out of memory). Any thread. */
char *sl_conn_limit_metrics(void);

#endif
