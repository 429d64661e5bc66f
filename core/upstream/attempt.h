/* attempt.h — one try of a request (HTTP) or a session (TCP) on one target of an upstream,
 * written once for both layers (nginx's ngx_peer_connection_t serves http and stream
 * alike).
 *
 * An attempt starts with a pick: the upstream's balancer chooses among eligible targets
 * (healthy, the layer's breaker not open, not tried by this request or session) and the
 * target's breaker admits it. It counts in the target's in-flight (least-conn, p2c) from
 * begin to release. Its outcome (success, failure, or a cancellation that counts as
 * nothing) goes to the breaker and passive health exactly once, whatever path ends it.
 * Its latency feeds the target's EWMA where the layer decides the exchange was answered
 * (HTTP: the response head; TCP: the connect).
 *
 * Which targets a request or session has tried (sl_tries_t) is exact for any number of
 * targets: one word inline for the first 64, more words from the owner's allocator
 * beyond. Worker thread; the target states underneath are shared by atomics.
 */
#ifndef SL_ATTEMPT_H
#define SL_ATTEMPT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/block.h"
#include "upstream/upstreams.h"

/** An attempt's outcome, for the breaker and passive health. */
enum { SL_OUT_SUCCESS = 0, SL_OUT_FAILURE, SL_OUT_CANCEL };

/** The targets a request or session may no longer pick: tried, or refused during a pick. */
typedef struct {
    uint64_t *tried, *skip;  /**< [words]: `inl` when one word does */
    uint64_t inl[2];
    uint32_t words;
    uint8_t attempts;        /**< attempts begun */
} sl_tries_t;

/** One attempt on one target. */
typedef struct {
    int target;              /**< -1 before the first pick */
    uint8_t admit;           /**< the breaker's sl_admit_t */
    uint8_t outcome_due;     /**< begun and its outcome not recorded yet */
    uint8_t in_flight;       /**< counts in the target's in-flight */
    uint64_t start_ns;
} sl_attempt_t;

/** Where attempts go: an upstream's config and runtime, and the layer's breaker. */
typedef struct {
    const sl_upstream_conf_t *uc;
    sl_upstream_rt_t *rt;
    int layer;               /**< SL_LAYER_HTTP or SL_LAYER_TCP */
} sl_attempts_of_t;

/** Sizes t for `ntargets` targets: words beyond the first come from `arena` (freed with
 *  it), or from malloc when arena is NULL (sl_tries_free then). SL_OK or SL_ERROR. */
int sl_tries_init(sl_tries_t *t, uint32_t ntargets, sl_arena_t *arena);
/** Frees what sl_tries_init took from malloc. */
void sl_tries_free(sl_tries_t *t);
static inline bool sl_tries_has(const uint64_t *set, uint32_t t) { return set[t >> 6] & (1ull << (t & 63)); }

/**
 * Chooses the next attempt's target and takes its breaker admission (*admit). Returns
 * the target, or -1; *retry_after_ms > 0 (ms until a breaker half-opens) when open
 * breakers were the reason. When every untried target is unhealthy they are tried
 * anyway: a guess beats a certain error (Envoy's "panic" routing at a 0% threshold).
 * `key` is what consistent-hash hashes. `now_ms` is sl_now_ms() or a time the caller read
 * in the same callback (the breakers' clock; docs/DECISIONS.md, clock reads).
 */
int sl_attempt_pick(const sl_attempts_of_t *of, sl_tries_t *tr, const char *key, size_t key_len, uint8_t *admit,
                    uint64_t *retry_after_ms, uint64_t now_ms);
/** Takes target t when it is eligible and its breaker admits it (a plugin's choice). */
bool sl_attempt_take(const sl_attempts_of_t *of, sl_tries_t *tr, int t, uint8_t *admit, uint64_t now_ms);
/** Starts attempt a on target t (admitted by pick or take) at now_ns (sl_now_ns): tried,
 *  in flight, timed. */
void sl_attempt_begin(const sl_attempts_of_t *of, sl_tries_t *tr, sl_attempt_t *a, int t, uint8_t admit,
                      uint64_t now_ns);
/** Records the outcome at now_ms (sl_now_ms), once: the breaker, passive health. Later
 *  calls do nothing. */
void sl_attempt_outcome(const sl_attempts_of_t *of, sl_attempt_t *a, int outcome, uint64_t now_ms);
/** The attempt was answered after `ns`: the target's latency EWMA. */
void sl_attempt_observe(const sl_attempts_of_t *of, const sl_attempt_t *a, uint64_t now_ns);
/** The attempt no longer holds its target (its connection went back or closed). */
void sl_attempt_release(const sl_attempts_of_t *of, sl_attempt_t *a);
/** Gives back an admission taken for a target no attempt began on. */
void sl_attempt_cancel_admission(const sl_attempts_of_t *of, int t, uint8_t admit);

#endif
