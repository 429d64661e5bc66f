/* breaker.h — circuit breakers shared by every worker thread (the design: "circuit
 * breakers (atomic state + bounded half-open slots)").
 *
 * One sl_breaker_t per (upstream, target, layer). Any thread may call any function
 * at any time; nothing takes a lock and nothing allocates.
 *
 * Closed: outcomes are counted in a sliding window (`window`, split in buckets).
 * When the window holds at least `min_requests` outcomes and failures/total >=
 * `failure_ratio`, the breaker opens. Open: admission is refused for
 * `open_timeout`, doubled on each consecutive re-trip up to `max_open_timeout`.
 * When that time is over the breaker is half-open: at most `half_open_requests`
 * attempts are admitted at once (an atomic admission, never a state check followed
 * by a write); `success_threshold` successes close it (window reset, open timeout
 * back to the base), and any half-open failure re-opens it.
 *
 * Every admission is paired with exactly one sl_breaker_record() or
 * sl_breaker_cancel(), on every exit path: a probe slot taken and never returned
 * would wedge the breaker half-open. A cancellation (client abort, hedge or retry
 * loser, plugin error before the upstream answered) returns the slot and counts
 * as nothing. The upstream's own verdicts (an answer, a connect error, a timeout)
 * are recorded.
 *
 * Outcomes arrive late: an attempt admitted while closed may end after the breaker
 * opened. What such an outcome does depends on the state when it is recorded, not
 * on when it was admitted:
 *   closed     any outcome (even a probe's, when other probes closed the breaker
 *              meanwhile) counts in the window;
 *   open       nothing counts: the open time is neither extended nor doubled;
 *   half-open  a failure of any attempt re-opens (doubled): it is the target failing
 *              while it is being tried. Only a probe's success counts towards
 *              `success_threshold`: closing is the probes' verdict, and an attempt
 *              admitted before the trip tested nothing since.
 * Whatever the state, a probe's record or cancel returns its slot.
 */
#ifndef SL_BREAKER_H
#define SL_BREAKER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/upstream_conf.h" /* sl_breaker_conf_t */
#include "sluice.h"

#define SL_BREAKER_BUCKETS 10

/* States SL_BREAKER_CLOSED, _OPEN, _HALF_OPEN: in sluice.h (the balancer API reads them). */

/** What sl_breaker_admit granted; pass it back to record/cancel. */
typedef enum {
    SL_ADMIT_REFUSED = 0, /**< open, or half-open with every slot taken */
    SL_ADMIT_CLOSED = 1,  /**< an ordinary attempt */
    SL_ADMIT_PROBE = 2,   /**< holds one half-open slot until recorded or cancelled */
} sl_admit_t;

typedef struct {
    _Atomic uint64_t epoch; /**< window_ms / SL_BREAKER_BUCKETS periods since 0 */
    _Atomic uint32_t ok, fail;
} sl_breaker_bucket_t;

/** Owned by whoever keeps the target (the server keeps one per (upstream name, address,
 *  layer) across config generations); zeroed by sl_breaker_init, never freed by it. */
typedef struct sl_breaker_s {
    /** State, trip count and a state's value (open-until ms, half-open successes),
     *  packed so that every transition is one CAS (breaker.c). */
    _Atomic uint64_t word;
    /** Probe admissions not yet recorded or cancelled, whichever half-open period
     *  admitted them: a probe still running from an earlier period keeps its slot, so
     *  the bound is on probes in flight to the target. Never reset, only paired. */
    _Atomic uint32_t probes;
    sl_breaker_bucket_t buckets[SL_BREAKER_BUCKETS];
} sl_breaker_t;

/** Closed, empty window, no probe. Not safe against concurrent callers. */
void sl_breaker_init(sl_breaker_t *b);

/** May an attempt go to this target now? On SL_ADMIT_REFUSED, *retry_after_ms (when not
 *  NULL) is how long until the breaker half-opens, or 1 when it is half-open with every
 *  slot taken (always >= 1). now_ms: a monotonic clock. A disabled conf admits
 *  SL_ADMIT_CLOSED whatever the state. */
sl_admit_t sl_breaker_admit(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now_ms,
                            uint64_t *retry_after_ms);
/** The outcome of an admitted attempt (see the top of this file for late outcomes).
 *  A probe's slot comes back even when `c` is disabled by now; SL_ADMIT_REFUSED is
 *  ignored. */
void sl_breaker_record(sl_breaker_t *b, const sl_breaker_conf_t *c, sl_admit_t a, bool success,
                       uint64_t now_ms);
/** An admitted attempt that ended without an outcome: its slot comes back, nothing counted. */
void sl_breaker_cancel(sl_breaker_t *b, sl_admit_t a);
/** Closed with an empty window, as a breaker that was turned off and on again starts.
 *  Probe slots in use stay counted (their attempts give them back). Any thread. */
void sl_breaker_reset(sl_breaker_t *b, uint64_t now_ms);
/** Milliseconds until an open breaker half-opens; 0 when it is not open now. */
uint64_t sl_breaker_open_left(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now_ms);
/** SL_BREAKER_*, as it would answer now (open whose time is over reads half-open; a
 *  disabled conf reads closed). For the sluice_circuit_breaker_state gauge. */
int sl_breaker_state(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now_ms);

#endif
