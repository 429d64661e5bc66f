/* balancer.h — choosing a target of an upstream (the design: upstreams, balancer).
 *
 * A balancer is built once per config generation (sl_balancer_new, on the main
 * thread) and then shared read-mostly by every worker: picks may run on any number of
 * threads at once. A pick allocates nothing and takes no lock.
 *
 * Per-target live numbers (in-flight, latency EWMA) are shared by all workers and
 * outlive a generation: they live in sl_target_live_t, owned by the caller (the
 * server keeps one per (upstream name, address), carried across reloads), and the
 * balancer only reads them through `live`, except that sl_balancer_begin/end move
 * in_flight.
 *
 * Eligibility (healthy, breaker not open, not already tried by this request) is the
 * caller's: pick takes a predicate, which must be a cheap read without side effects
 * (a pick may call it more than once per target). A pick never returns a target the
 * predicate refused; when none is eligible it returns -1 and takes no turn of the
 * round-robin counters (the caller may ask again with a wider predicate).
 *
 * The kinds (balancer.c has the why of each):
 * - round-robin: a shared atomic counter; skipping an ineligible target does not double
 *   the share of the one after it.
 * - weighted-round-robin: nginx's smooth interleaving (weights 5,1,1 give a a b a c a a),
 *   precomputed at build as a schedule that an atomic counter walks.
 * - least-conn: fewest in-flight attempts; ties go to the higher weight, then rotate.
 * - p2c-ewma: two distinct random candidates, the lower ewma * (1 + in_flight) wins (a
 *   target without a sample scores 0 while idle, 1 s per attempt in flight otherwise).
 * - consistent-hash: a ring of weight * vnodes points per target; a key goes to the first
 *   point clockwise whose target is eligible and under its bounded-load cap
 *   ceil((1 + epsilon) * (in_flight_total + 1) * weight / weight_total), totals over the
 *   eligible targets (Mirrokni, Thorup, Zadimoghaddam, "Consistent Hashing with Bounded
 *   Loads", 2016/2018).
 */
#ifndef SL_BALANCER_H
#define SL_BALANCER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "config/upstream_conf.h" /* the kinds, SL_LB_* */

/** Live numbers of one target, shared by all workers. */
typedef struct {
    _Atomic int32_t in_flight;   /**< attempts started and not yet ended */
    _Atomic double ewma_ns;      /**< latency EWMA in ns (0: no sample yet); a double, as
                                      a sample 1 us after the last moves it by 1e-7 of the
                                      difference, which integer ns would round away */
    _Atomic uint64_t ewma_at_ns; /**< monotonic time of the last sample */
} sl_target_live_t;

/** Decay time of the EWMA: a sample `tau` old weighs 1/e of a fresh one. */
#define SL_EWMA_TAU_NS (10ull * 1000 * 1000 * 1000)

/** Records one attempt's latency: the EWMA decays by the time elapsed since the last
 *  sample, not by count (w = exp(-elapsed / tau); ewma = ewma * w + latency * (1 - w)):
 *  k samples of one value spread over a time weigh what one sample at its end weighs,
 *  a sample at the same instant as the last (or earlier) moves it by nothing, and a
 *  sample after a long silence all but replaces it. The first sample is taken as it is.
 *  Lock-free, any thread; two threads observing the same target at once may weigh a
 *  sample by a slightly stale elapsed time, never lose the EWMA. now_ns: a monotonic
 *  clock with ns resolution (uv_hrtime). */
void sl_target_observe(sl_target_live_t *t, uint64_t latency_ns, uint64_t now_ns);

/** A failed attempt (refused, reset, timed out, a 5xx) as p2c-ewma's sample: as slow as
 *  SL_LB_FAILURE_NS, twice the estimate, or the attempt itself, whichever is the most, so
 *  a target that fails fast does not look like the fastest. */
#define SL_LB_FAILURE_NS (1000ull * 1000 * 1000)
void sl_target_observe_failure(sl_target_live_t *t, uint64_t elapsed_ns, uint64_t now_ns);

/** May the pick return `target`? Called on the picking thread. */
typedef bool (*sl_lb_eligible_fn)(void *ud, uint32_t target);

typedef struct sl_balancer_s sl_balancer_t;

typedef struct {
    int kind;                /**< SL_LB_* */
    uint32_t ntargets;       /**< >= 1 */
    const uint32_t *weights; /**< [ntargets], >= 1 (weight 1 when unset); NULL: all 1 */
    const sl_str_t *ids;     /**< [ntargets] consistent-hash identity of each target (its
                                  address as written): a target keeps its ring points when
                                  others come, go or move. NULL: the index. Copied. */
    double hash_epsilon;     /**< consistent-hash bounded-load epsilon, >= 0 (0 caps every
                                  target at the mean); INFINITY, the config's default: no cap */
    uint32_t vnodes;         /**< consistent-hash points per unit of weight; 0: 160 */
} sl_balancer_conf_t;

/** Builds a balancer on the main thread (the only allocations: the balancer, the
 *  weighted-round-robin schedule, the hash ring). NULL on out of memory. A conf that
 *  config/upstreams.c would have rejected (unknown kind, no targets, weight 0) is a
 *  programmer error and asserts. The `live` array is copied; each sl_target_live_t it points to
 *  is borrowed and must outlive the balancer. */
sl_balancer_t *sl_balancer_new(const sl_balancer_conf_t *c, sl_target_live_t *const *live);
/** Frees a balancer no thread picks from any more. NULL is fine. */
void sl_balancer_free(sl_balancer_t *b);

/** Picks a target: its index, or -1 when no target is eligible (`eligible` NULL: every
 *  target is). `key`/`key_len` is the consistent-hash key (ignored by other kinds; an
 *  empty key hashes as ""; NULL is no key: a random point of the ring, from `rnd`),
 *  borrowed for the call. `rnd` is a random 64-bit value the
 *  caller draws (p2c; tie breaks). `now_ns`: the clock sl_target_observe is given (p2c
 *  forgets an estimate with no sample for SL_EWMA_TAU_NS). Any thread; no lock, no
 *  allocation. */
int sl_balancer_pick(sl_balancer_t *b, sl_lb_eligible_fn eligible, void *ud, const char *key,
                     size_t key_len, uint64_t rnd, uint64_t now_ns);

/** The attempt on target t started / ended: keeps in_flight (least-conn, p2c, the
 *  consistent-hash load cap) right. Every begin is paired with exactly one end, on the
 *  same balancer or any other sharing the target's live numbers. Any thread. */
void sl_balancer_begin(sl_balancer_t *b, uint32_t t);
void sl_balancer_end(sl_balancer_t *b, uint32_t t);

/** The consistent-hash function (64 bits, well mixed, stable across builds, hosts and
 *  processes so every sluice puts a key on the same target). Not keyed: a client that
 *  chooses its keys can aim at one target, which the bounded-load cap contains. */
uint64_t sl_balancer_hash(const void *p, size_t n);

#endif
