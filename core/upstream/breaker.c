/* breaker.c — circuit breakers: one packed state word, a probe counter and a bucketed
 * sliding window, all C11 atomics (the contract is in breaker.h).
 *
 * The word, low bits first: the state (2 bits), the consecutive trips (6 bits,
 * saturating) and a 56-bit value whose meaning is the state's:
 *   CLOSED     the time it closed (ms): two closed periods don't share a word (unless
 *              a whole trip and recovery fit in one ms), so a trip decided on an older
 *              one fails its CAS instead of tripping this one;
 *   OPEN       the time it half-opens (ms);
 *   HALF_OPEN  the probe successes of this half-open period.
 * Each transition is one CAS on the word: exactly one thread performs it, and the
 * half-open success count is born zero with its period instead of being reset behind
 * the backs of probes already recording.
 *
 * The half-open bound lives in `probes` alone: a slot is taken by a CAS that never
 * moves it past half_open_requests, so no interleaving admits one probe too many.
 * A probe's outcome is applied to the word before its slot is released, and an
 * admission re-reads the word after taking its slot (acquire, pairing with the
 * release): the slot freed by a failed probe can't admit another probe into the
 * period that failure just closed.
 */
#include "upstream/breaker.h"

#include <assert.h>

#include "base/common.h"

#define ST_MASK 0x3u
#define TRIPS_SHIFT 2
#define TRIPS_MAX 63u
#define VAL_SHIFT 8
#define VAL_MAX ((UINT64_C(1) << (64 - VAL_SHIFT)) - 1)

static inline uint64_t pack(unsigned state, unsigned trips, uint64_t val) {
    return (uint64_t)state | (uint64_t)trips << TRIPS_SHIFT | SL_MIN(val, VAL_MAX) << VAL_SHIFT;
}
static inline unsigned w_state(uint64_t w) { return (unsigned)(w & ST_MASK); }
static inline unsigned w_trips(uint64_t w) { return (unsigned)(w >> TRIPS_SHIFT) & TRIPS_MAX; }
static inline uint64_t w_val(uint64_t w) { return w >> VAL_SHIFT; }

/* Open time after the `trips`-th consecutive trip: the base, doubled per re-trip, capped. */
static uint64_t open_for(const sl_breaker_conf_t *c, unsigned trips) {
    uint64_t base = c->open_timeout_ms, cap = SL_MAX(c->max_open_timeout_ms, base);
    unsigned shift = trips - 1;
    if (shift >= 63 || base > cap >> shift) return cap;
    return base << shift;
}

static uint64_t open_word(const sl_breaker_conf_t *c, unsigned trips, uint64_t now_ms) {
    uint64_t d = open_for(c, trips);
    return pack(SL_BREAKER_OPEN, trips,
                d > VAL_MAX - SL_MIN(now_ms, VAL_MAX) ? VAL_MAX : now_ms + d);
}

static uint64_t bucket_ms(const sl_breaker_conf_t *c) {
    return SL_MAX(c->window_ms / SL_BREAKER_BUCKETS, 1);
}

/* Buckets are claimed for a new period lazily, by whoever records first in it: CAS the
 * epoch, then zero the counters. An outcome another thread adds between that CAS and
 * the zeroing is lost, and a trip decision sums counters that others are changing: one
 * or two outcomes off at a bucket boundary, which a ratio over min_requests outcomes
 * absorbs; the price of never making the hot path wait for or retry a counter. */
static void window_add(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now_ms, bool ok) {
    uint64_t e = now_ms / bucket_ms(c);
    sl_breaker_bucket_t *k = &b->buckets[e % SL_BREAKER_BUCKETS];
    uint64_t ke = atomic_load_explicit(&k->epoch, memory_order_acquire);
    while (ke != e) {
        /* A whole window newer than this clock reading: the outcome is already too old. */
        if (ke > e) return;
        if (atomic_compare_exchange_weak_explicit(&k->epoch, &ke, e, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            atomic_store_explicit(&k->ok, 0, memory_order_relaxed);
            atomic_store_explicit(&k->fail, 0, memory_order_relaxed);
            break;
        }
    }
    atomic_fetch_add_explicit(ok ? &k->ok : &k->fail, 1, memory_order_relaxed);
}

static bool window_trips(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now_ms) {
    uint64_t e = now_ms / bucket_ms(c), ok = 0, fail = 0;
    for (int i = 0; i < SL_BREAKER_BUCKETS; i++) {
        sl_breaker_bucket_t *k = &b->buckets[i];
        uint64_t ke = atomic_load_explicit(&k->epoch, memory_order_acquire);
        if (ke > e || ke + SL_BREAKER_BUCKETS <= e) continue;
        ok += atomic_load_explicit(&k->ok, memory_order_relaxed);
        fail += atomic_load_explicit(&k->fail, memory_order_relaxed);
    }
    uint64_t total = ok + fail;
    return total >= SL_MAX(c->min_requests, 1) && (double)fail >= c->failure_ratio * (double)total;
}

/* Nothing writes the window from the trip to the close (late closed outcomes are not
 * counted while open or half-open), so it is emptied when the breaker half-opens, by the
 * thread that half-opened it: emptying it at the close would race with the first
 * outcomes of the new closed period. This only races with them when probes are admitted,
 * answered and close the breaker within the few stores below (the emptying thread
 * preempted in between): then a few early outcomes are lost. A closed breaker starts
 * with an empty window. */
static void window_reset(sl_breaker_t *b) {
    for (int i = 0; i < SL_BREAKER_BUCKETS; i++) {
        atomic_store_explicit(&b->buckets[i].ok, 0, memory_order_relaxed);
        atomic_store_explicit(&b->buckets[i].fail, 0, memory_order_relaxed);
    }
}

static bool take_probe(sl_breaker_t *b, const sl_breaker_conf_t *c) {
    uint32_t limit = SL_MAX(c->half_open_requests, 1), p;
    p = atomic_load_explicit(&b->probes, memory_order_relaxed);
    do {
        if (p >= limit) return false;
    } while (!atomic_compare_exchange_weak_explicit(&b->probes, &p, p + 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    return true;
}

static void release_probe(sl_breaker_t *b) {
    uint32_t was = atomic_fetch_sub_explicit(&b->probes, 1, memory_order_release);
    assert(was > 0 && "a probe slot released twice");
    (void)was;
}

void sl_breaker_init(sl_breaker_t *b) {
    atomic_init(&b->word, pack(SL_BREAKER_CLOSED, 0, 0));
    atomic_init(&b->probes, 0);
    for (int i = 0; i < SL_BREAKER_BUCKETS; i++) {
        atomic_init(&b->buckets[i].epoch, 0);
        atomic_init(&b->buckets[i].ok, 0);
        atomic_init(&b->buckets[i].fail, 0);
    }
}

sl_admit_t sl_breaker_admit(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now_ms,
                            uint64_t *retry_after_ms) {
    if (!c->enabled) return SL_ADMIT_CLOSED;
    uint64_t w = atomic_load_explicit(&b->word, memory_order_acquire);
    for (;;) {
        switch (w_state(w)) {
        case SL_BREAKER_CLOSED:
            return SL_ADMIT_CLOSED;
        case SL_BREAKER_OPEN:
            if (now_ms < w_val(w)) {
                if (retry_after_ms) *retry_after_ms = w_val(w) - now_ms;
                return SL_ADMIT_REFUSED;
            }
            /* The open time is over: half-open now, lazily. One CAS has one winner; the
             * losers got the new word back and go on to compete for a slot. */
            {
                uint64_t h = pack(SL_BREAKER_HALF_OPEN, w_trips(w), 0);
                if (atomic_compare_exchange_strong_explicit(&b->word, &w, h, memory_order_acq_rel,
                                                            memory_order_acquire)) {
                    window_reset(b);
                    w = h;
                }
            }
            break;
        case SL_BREAKER_HALF_OPEN:
            if (!take_probe(b, c)) {
                if (retry_after_ms) *retry_after_ms = 1;
                return SL_ADMIT_REFUSED;
            }
            w = atomic_load_explicit(&b->word, memory_order_acquire);
            if (w_state(w) == SL_BREAKER_HALF_OPEN) return SL_ADMIT_PROBE;
            /* Re-opened or closed while the slot was being taken: give it back and
             * answer as the new state would. */
            release_probe(b);
            break;
        default:
            assert(!"breaker word holds no state");
            return SL_ADMIT_REFUSED;
        }
    }
}

static void on_success(sl_breaker_t *b, const sl_breaker_conf_t *c, sl_admit_t a, uint64_t now_ms) {
    uint64_t w = atomic_load_explicit(&b->word, memory_order_acquire);
    for (;;) {
        switch (w_state(w)) {
        case SL_BREAKER_CLOSED:
            window_add(b, c, now_ms, true);
            return;
        case SL_BREAKER_HALF_OPEN: {
            if (a != SL_ADMIT_PROBE) return;
            uint64_t ok = w_val(w) + 1;
            uint64_t nw = ok >= SL_MAX(c->success_threshold, 1)
                              ? pack(SL_BREAKER_CLOSED, 0, now_ms)
                              : pack(SL_BREAKER_HALF_OPEN, w_trips(w), ok);
            if (atomic_compare_exchange_weak_explicit(&b->word, &w, nw, memory_order_acq_rel,
                                                      memory_order_acquire))
                return;
            break;
        }
        default:
            return;
        }
    }
}

static void on_failure(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now_ms) {
    uint64_t w = atomic_load_explicit(&b->word, memory_order_acquire);
    bool counted = false;
    for (;;) {
        uint64_t nw;
        switch (w_state(w)) {
        case SL_BREAKER_CLOSED:
            if (!counted) window_add(b, c, now_ms, false);
            counted = true;
            /* Only a failure can raise the ratio, so only a failure decides a trip: a
             * success that tips the window over min_requests defers the trip to the next
             * failure, which still finds the window tripping, and keeps successes O(1). */
            if (!window_trips(b, c, now_ms)) return;
            nw = open_word(c, 1, now_ms);
            break;
        case SL_BREAKER_HALF_OPEN:
            nw = open_word(c, SL_MIN(w_trips(w) + 1, TRIPS_MAX), now_ms);
            break;
        default:
            return;
        }
        /* On a lost CAS w holds the new word: a closed breaker re-decides on its window
         * (without counting this failure twice), anything else is handled as it is now. */
        if (atomic_compare_exchange_weak_explicit(&b->word, &w, nw, memory_order_acq_rel,
                                                  memory_order_acquire))
            return;
    }
}

void sl_breaker_record(sl_breaker_t *b, const sl_breaker_conf_t *c, sl_admit_t a, bool success,
                       uint64_t now_ms) {
    if (a == SL_ADMIT_REFUSED) return;
    if (c->enabled) {
        if (success)
            on_success(b, c, a, now_ms);
        else
            on_failure(b, c, now_ms);
    }
    if (a == SL_ADMIT_PROBE) release_probe(b);
}

void sl_breaker_cancel(sl_breaker_t *b, sl_admit_t a) {
    if (a == SL_ADMIT_PROBE) release_probe(b);
}

int sl_breaker_state(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now_ms) {
    if (!c->enabled) return SL_BREAKER_CLOSED;
    uint64_t w = atomic_load_explicit(&b->word, memory_order_acquire);
    if (w_state(w) == SL_BREAKER_OPEN && now_ms >= w_val(w)) return SL_BREAKER_HALF_OPEN;
    return (int)w_state(w);
}

uint64_t sl_breaker_open_left(sl_breaker_t *b, const sl_breaker_conf_t *c, uint64_t now_ms) {
    if (!c->enabled) return 0;
    uint64_t w = atomic_load_explicit(&b->word, memory_order_acquire);
    return w_state(w) == SL_BREAKER_OPEN && now_ms < w_val(w) ? w_val(w) - now_ms : 0;
}

void sl_breaker_reset(sl_breaker_t *b, uint64_t now_ms) {
    window_reset(b);
    atomic_store_explicit(&b->word, pack(SL_BREAKER_CLOSED, 0, now_ms), memory_order_release);
}
