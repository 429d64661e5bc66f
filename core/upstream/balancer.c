/* balancer.c — the load balancers of an upstream (balancer.h has the contract).
 *
 * Everything a pick reads is immutable after sl_balancer_new except atomics: the
 * balancer's sequence counter, which round-robin and weighted-round-robin picks bump, and
 * each target's in_flight and EWMA, which begin/end and observe move. Picks write nothing
 * else, so they need no lock, and the cost of sharing a balancer between workers is the
 * counter's cache line (and the targets' lines that begin/end write).
 */
#include "upstream/balancer.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

/* Weighted-round-robin schedules longer than this are built from proportionally scaled
 * weights (each target keeps at least one slot): 64 Ki slots are 256 KiB. Realistic
 * weights reduced by their gcd stay far below it and keep nginx's exact sequence. */
#define SL_LB_SCHEDULE_MAX (1u << 16)
/* Ring points beyond this are scaled down the same way (3 MiB of ring). */
#define SL_LB_RING_MAX (1u << 18)
#define SL_LB_DEFAULT_VNODES 160
/* A consistent-hash pick snapshots eligibility in a stack bitmap for this many targets,
 * so the ring walk asks the predicate once per target; larger upstreams ask per point. */
#define SL_LB_SNAP_MAX 1024
/* p2c: random pairs tried before falling back to a scan for the eligible ones. */
#define SL_LB_P2C_ROUNDS 2
/* p2c: an unsampled target scores 0 while idle, so a new target is tried at once, but
 * each attempt it already has in flight counts as a second of latency, so a new target
 * is not flooded before its first answer says how fast it is. */
#define SL_LB_UNSAMPLED_PENALTY_NS 1e9

struct sl_balancer_s {
    /* Bumped by every round-robin and weighted-round-robin pick: alone on its cache line so
     * the read-only fields don't bounce between cores with it. */
    _Alignas(64) _Atomic uint64_t seq;
    _Alignas(64) int kind;
    uint32_t n;
    double epsilon;
    uint32_t *weights;
    sl_target_live_t **live;
    uint32_t *schedule; /* weighted-round-robin: target of each slot */
    uint32_t nschedule;
    uint64_t *ring_hash;  /* consistent-hash: sorted point hashes ... */
    uint32_t *ring_owner; /* ... and the target of each point */
    uint32_t nring;
};

/* The ring's hash: its values must not change (base/hash.h). */
uint64_t sl_balancer_hash(const void *data, size_t n) { return sl_hash64(data, n, 0); }

/* An unbiased-enough draw in [0, n) from 32 random bits (Lemire's multiply-shift). */
static inline uint32_t lb_below(uint32_t r, uint32_t n) {
    return (uint32_t)(((uint64_t)r * n) >> 32);
}

static inline bool lb_ok(sl_lb_eligible_fn eligible, void *ud, uint32_t t) {
    return eligible == NULL || eligible(ud, t);
}

/* A negative count would be an unpaired end somewhere; it reads as idle rather than as a
 * magnet for traffic. */
static inline uint64_t lb_load(const sl_balancer_t *b, uint32_t t) {
    int32_t v = atomic_load_explicit(&b->live[t]->in_flight, memory_order_relaxed);
    return v > 0 ? (uint64_t)v : 0;
}

/* The first eligible target at or after `t`, cyclically; *skipped says how many were
 * passed over. */
static int lb_scan(const sl_balancer_t *b, sl_lb_eligible_fn eligible, void *ud, uint32_t t,
                   uint32_t *skipped) {
    for (uint32_t k = 0; k < b->n; k++) {
        if (lb_ok(eligible, ud, t)) {
            *skipped = k;
            return (int)t;
        }
        if (++t == b->n) t = 0;
    }
    return -1;
}

/* A pick that found no eligible target gives its counter value back: the caller asks again
 * (ignoring health when every target is unhealthy), and that pick must get the turn, or
 * each such request would move the sequence by two and skip every other slot. */
static int lb_none(sl_balancer_t *b) {
    atomic_fetch_sub_explicit(&b->seq, 1, memory_order_relaxed);
    return -1;
}

/* Each pick takes one counter value. A pick that had to skip ineligible targets also
 * takes the values it skipped, so that (on one thread) the next pick starts after the
 * target it got: the ineligible target's turns are spread over the others instead of
 * doubling its successor's share. */
static int rr_pick(sl_balancer_t *b, sl_lb_eligible_fn eligible, void *ud) {
    uint64_t s = atomic_fetch_add_explicit(&b->seq, 1, memory_order_relaxed);
    uint32_t skipped;
    int t = lb_scan(b, eligible, ud, (uint32_t)(s % b->n), &skipped);
    if (t < 0) return lb_none(b);
    if (skipped) atomic_fetch_add_explicit(&b->seq, skipped, memory_order_relaxed);
    return t;
}

/* nginx's smooth weighted round-robin keeps a mutable current_weight per target, which
 * threads sharing the balancer would have to lock. Its sequence is periodic, though, with
 * period sum(weights / gcd), and depends on nothing else: so it is computed once here and a
 * pick maps one atomic counter value onto it. Same interleaving, exact shares, no lock. */
static int wrr_schedule_build(sl_balancer_t *b) {
    uint32_t g = 0;
    for (uint32_t t = 0; t < b->n; t++) {
        uint32_t a = b->weights[t], c = g;
        while (c) {
            uint32_t r = a % c;
            a = c;
            c = r;
        }
        g = a;
    }
    uint64_t total = 0;
    for (uint32_t t = 0; t < b->n; t++) total += b->weights[t] / g;
    uint64_t cap = SL_MAX((uint64_t)SL_LB_SCHEDULE_MAX, (uint64_t)b->n);
    int64_t *cur = calloc(b->n, sizeof *cur);
    uint32_t *w = malloc(b->n * sizeof *w);
    if (!cur || !w) goto fail;
    uint64_t len = 0;
    for (uint32_t t = 0; t < b->n; t++) {
        uint64_t wt = b->weights[t] / g;
        if (total > cap) wt = SL_MAX(1, wt * (cap - b->n) / total);
        w[t] = (uint32_t)wt;
        len += wt;
    }
    b->schedule = malloc(len * sizeof *b->schedule);
    if (!b->schedule) goto fail;
    b->nschedule = (uint32_t)len;
    /* nginx (ngx_http_upstream_get_peer): every target gains its weight, the largest
     * current weight wins (the first on ties) and pays back the total. O(len * n), once per
     * config generation. */
    for (uint64_t i = 0; i < len; i++) {
        uint32_t best = 0;
        for (uint32_t t = 0; t < b->n; t++) {
            cur[t] += w[t];
            if (cur[t] > cur[best]) best = t;
        }
        cur[best] -= (int64_t)len;
        b->schedule[i] = best;
    }
    free(cur);
    free(w);
    return 0;
fail:
    free(cur);
    free(w);
    return -1;
}

/* Walks the schedule from the counter's slot, taking skipped slots as round-robin does, so
 * that on one thread the eligible targets keep exact shares. A long run of one heavy,
 * ineligible target is not walked to its end: after a bounded number of slots the pick
 * falls back to plain round-robin over the targets. */
static int wrr_pick(sl_balancer_t *b, sl_lb_eligible_fn eligible, void *ud) {
    uint64_t s = atomic_fetch_add_explicit(&b->seq, 1, memory_order_relaxed);
    uint32_t i = (uint32_t)(s % b->nschedule);
    uint64_t limit = SL_MIN((uint64_t)b->nschedule, SL_MAX(4 * (uint64_t)b->n, 64));
    for (uint32_t k = 0; k < limit; k++) {
        uint32_t t = b->schedule[i];
        if (lb_ok(eligible, ud, t)) {
            if (k) atomic_fetch_add_explicit(&b->seq, k, memory_order_relaxed);
            return (int)t;
        }
        if (++i == b->nschedule) i = 0;
    }
    uint32_t skipped;
    int t = lb_scan(b, eligible, ud, (uint32_t)(s % b->n), &skipped);
    return t < 0 ? lb_none(b) : t;
}

/* Fewest in flight; equal counts go to the higher weight, then to the first met from a
 * random start, so idle targets share the traffic instead of the first one taking it. */
static int lc_pick(sl_balancer_t *b, sl_lb_eligible_fn eligible, void *ud, uint64_t rnd) {
    uint32_t t = lb_below((uint32_t)rnd, b->n);
    int best = -1;
    uint64_t best_load = 0;
    for (uint32_t k = 0; k < b->n; k++) {
        if (lb_ok(eligible, ud, t)) {
            uint64_t load = lb_load(b, t);
            if (best < 0 || load < best_load ||
                (load == best_load && b->weights[t] > b->weights[best])) {
                best = (int)t;
                best_load = load;
            }
        }
        if (++t == b->n) t = 0;
    }
    return best;
}

/* An estimate with no sample for SL_EWMA_TAU_NS is forgotten: the target scores as an
 * unsampled one, so one that failed (or was just slow) is asked again while idle, once
 * in a while, instead of never while faster ones answer. */
static double p2c_score(const sl_balancer_t *b, uint32_t t, uint64_t now_ns) {
    const sl_target_live_t *l = b->live[t];
    double ewma = atomic_load_explicit(&l->ewma_ns, memory_order_relaxed);
    uint64_t at = atomic_load_explicit(&l->ewma_at_ns, memory_order_relaxed);
    double load = (double)lb_load(b, t);
    if (ewma == 0 || (now_ns > at && now_ns - at > SL_EWMA_TAU_NS)) return load * SL_LB_UNSAMPLED_PENALTY_NS;
    return ewma * (1.0 + load);
}

static void p2c_offer(int c[2], uint32_t t, sl_lb_eligible_fn eligible, void *ud) {
    if (c[0] == (int)t || !lb_ok(eligible, ud, t)) return;
    c[c[0] < 0 ? 0 : 1] = (int)t;
}

/* Power of two choices (Mitzenmacher): two distinct targets drawn at random, the lower
 * score wins. When the draws keep hitting ineligible targets, the candidates are the
 * first eligible ones from a random start; one eligible target is taken as it is. */
static int p2c_pick(sl_balancer_t *b, sl_lb_eligible_fn eligible, void *ud, uint64_t rnd, uint64_t now_ns) {
    uint32_t n = b->n;
    int c[2] = {-1, -1};
    uint64_t r = rnd;
    for (int round = 0; n > 1 && round < SL_LB_P2C_ROUNDS && c[1] < 0; round++) {
        uint32_t x = lb_below((uint32_t)r, n);
        uint32_t y = x + 1 + lb_below((uint32_t)(r >> 32), n - 1);
        if (y >= n) y -= n;
        p2c_offer(c, x, eligible, ud);
        if (c[1] < 0) p2c_offer(c, y, eligible, ud);
        r = sl_hash_mix64(r + SL_HASH_GOLDEN);
    }
    uint32_t t = lb_below((uint32_t)r, n);
    for (uint32_t k = 0; k < n && c[1] < 0; k++) {
        p2c_offer(c, t, eligible, ud);
        if (++t == n) t = 0;
    }
    if (c[1] < 0) return c[0];
    return p2c_score(b, (uint32_t)c[1], now_ns) < p2c_score(b, (uint32_t)c[0], now_ns) ? c[1] : c[0];
}

typedef struct {
    uint64_t hash;
    uint32_t target;
} lb_point_t;

static int lb_point_cmp(const void *a, const void *b) {
    const lb_point_t *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return x->target < y->target ? -1 : x->target > y->target;
}

/* A target's points are splitmix64's sequence seeded by the hash of its identity: they
 * depend on nothing else, and weight k + 1 has weight k's points plus more, so adding,
 * removing or reweighting a target moves only the keys of the points that came or went. */
static uint64_t ring_points(const sl_balancer_t *b, uint32_t t, uint32_t vnodes, uint64_t total) {
    uint64_t cap = SL_MAX((uint64_t)SL_LB_RING_MAX, (uint64_t)b->n);
    uint64_t k = (uint64_t)b->weights[t] * vnodes;
    return total > cap ? SL_MAX(1, k * (cap - b->n) / total) : k;
}

static int ring_build(sl_balancer_t *b, const sl_str_t *ids, uint32_t vnodes) {
    uint64_t total = 0, len = 0;
    for (uint32_t t = 0; t < b->n; t++) total += (uint64_t)b->weights[t] * vnodes;
    for (uint32_t t = 0; t < b->n; t++) len += ring_points(b, t, vnodes, total);
    lb_point_t *pts = malloc(len * sizeof *pts);
    b->ring_hash = malloc(len * sizeof *b->ring_hash);
    b->ring_owner = malloc(len * sizeof *b->ring_owner);
    if (!pts || !b->ring_hash || !b->ring_owner) {
        free(pts);
        return -1;
    }
    uint64_t i = 0;
    for (uint32_t t = 0; t < b->n; t++) {
        uint64_t seed;
        if (ids) {
            seed = sl_balancer_hash(ids[t].p, ids[t].len);
        } else {
            unsigned char le[4] = {(unsigned char)t, (unsigned char)(t >> 8),
                                   (unsigned char)(t >> 16), (unsigned char)(t >> 24)};
            seed = sl_balancer_hash(le, sizeof le);
        }
        uint64_t k = ring_points(b, t, vnodes, total);
        for (uint64_t v = 1; v <= k; v++)
            pts[i++] = (lb_point_t){sl_hash_mix64(seed + v * SL_HASH_GOLDEN), t};
    }
    assert(i == len);
    qsort(pts, len, sizeof *pts, lb_point_cmp);
    for (i = 0; i < len; i++) {
        b->ring_hash[i] = pts[i].hash;
        b->ring_owner[i] = pts[i].target;
    }
    b->nring = (uint32_t)len;
    free(pts);
    return 0;
}

/* The first point at or after h, wrapping past the last. */
static uint32_t ring_find(const sl_balancer_t *b, uint64_t h) {
    uint32_t lo = 0, hi = b->nring;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (b->ring_hash[mid] < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == b->nring ? 0 : lo;
}

/* Consistent hashing, with bounded loads when epsilon is finite (Mirrokni, Thorup, Zadimoghaddam, SODA 2018,
 * arXiv:1608.01350): the key goes clockwise to the first eligible target whose load after
 * this attempt stays within ceil((1 + eps) * (in_flight + 1) * weight / weight_total),
 * totals over the eligible targets (no key: a random point, so keyless requests spread by
 * weight). Those caps add up to more than the load, so some
 * target is always under its own; only threads racing the load past it between the
 * totals and the walk can make all of them full, and then the least full one is taken. */
static int hash_pick(sl_balancer_t *b, sl_lb_eligible_fn eligible, void *ud, const char *key,
                     size_t key_len, uint64_t rnd) {
    uint64_t snap[SL_LB_SNAP_MAX / 64] = {0};
    bool snapped = b->n <= SL_LB_SNAP_MAX;
    bool capped = isfinite(b->epsilon); /* infinite: no cap, the key's own point decides */
    uint64_t load = 0, wsum = 0;
    for (uint32_t t = 0; t < b->n; t++) {
        if (!lb_ok(eligible, ud, t)) continue;
        if (snapped) snap[t / 64] |= 1ull << (t % 64);
        if (capped) load += lb_load(b, t);
        wsum += b->weights[t];
    }
    if (wsum == 0) return -1;
    /* (1 + eps) * (load + 1) * w is exact for eps like 0.25 and realistic loads, so the
     * one rounding is the division's and an exact quotient is never pushed up by ceil. */
    double scale = (1.0 + b->epsilon) * (double)(load + 1);
    uint32_t i = ring_find(b, key ? sl_balancer_hash(key, key_len) : rnd);
    int best = -1;
    double best_fill = INFINITY;
    for (uint32_t k = 0; k < b->nring; k++) {
        uint32_t t = b->ring_owner[i];
        if (++i == b->nring) i = 0;
        if (snapped ? !(snap[t / 64] >> (t % 64) & 1) : !lb_ok(eligible, ud, t)) continue;
        if (!capped) return (int)t;
        double cap = ceil(scale * (double)b->weights[t] / (double)wsum);
        double after = (double)(lb_load(b, t) + 1);
        if (after <= cap) return (int)t;
        if (after / cap < best_fill) {
            best_fill = after / cap;
            best = (int)t;
        }
    }
    return best;
}

int sl_balancer_pick(sl_balancer_t *b, sl_lb_eligible_fn eligible, void *ud, const char *key,
                     size_t key_len, uint64_t rnd, uint64_t now_ns) {
    switch (b->kind) {
    case SL_LB_ROUND_ROBIN:
        return rr_pick(b, eligible, ud);
    case SL_LB_WEIGHTED_ROUND_ROBIN:
        return wrr_pick(b, eligible, ud);
    case SL_LB_LEAST_CONN:
        return lc_pick(b, eligible, ud, rnd);
    case SL_LB_P2C_EWMA:
        return p2c_pick(b, eligible, ud, rnd, now_ns);
    default:
        return hash_pick(b, eligible, ud, key, key_len, rnd);
    }
}

void sl_balancer_begin(sl_balancer_t *b, uint32_t t) {
    assert(t < b->n);
    atomic_fetch_add_explicit(&b->live[t]->in_flight, 1, memory_order_relaxed);
}

void sl_balancer_end(sl_balancer_t *b, uint32_t t) {
    assert(t < b->n);
    atomic_fetch_sub_explicit(&b->live[t]->in_flight, 1, memory_order_relaxed);
}

/* ewma_ns and ewma_at_ns are two words updated without a lock. The EWMA itself moves
 * only by compare-and-swap from the value the new one was computed from, so no sample is
 * lost to a concurrent one. The time is read separately and may be a racing thread's
 * older one: then a sample is weighed as if a little more time had passed — a bounded
 * error the EWMA decays anyway, cheaper than packing both into one 128-bit CAS. The time
 * only moves forward. */
void sl_target_observe(sl_target_live_t *t, uint64_t latency_ns, uint64_t now_ns) {
    double x = latency_ns ? (double)latency_ns : 1.0; /* 0 means "no sample yet" */
    double old = atomic_load_explicit(&t->ewma_ns, memory_order_relaxed), next;
    do {
        uint64_t at = atomic_load_explicit(&t->ewma_at_ns, memory_order_relaxed);
        if (old == 0) {
            next = x;
        } else {
            double w = now_ns > at ? exp(-(double)(now_ns - at) / (double)SL_EWMA_TAU_NS) : 1.0;
            next = old * w + x * (1.0 - w);
        }
    } while (!atomic_compare_exchange_weak_explicit(&t->ewma_ns, &old, next, memory_order_relaxed,
                                                    memory_order_relaxed));
    uint64_t at = atomic_load_explicit(&t->ewma_at_ns, memory_order_relaxed);
    while (at < now_ns &&
           !atomic_compare_exchange_weak_explicit(&t->ewma_at_ns, &at, now_ns, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

void sl_target_observe_failure(sl_target_live_t *t, uint64_t elapsed_ns, uint64_t now_ns) {
    double x = 2.0 * atomic_load_explicit(&t->ewma_ns, memory_order_relaxed);
    if (x < (double)SL_LB_FAILURE_NS) x = (double)SL_LB_FAILURE_NS;
    if (x < (double)elapsed_ns) x = (double)elapsed_ns;
    sl_target_observe(t, x < 1.8e19 ? (uint64_t)x : UINT64_MAX / 2, now_ns);
}

sl_balancer_t *sl_balancer_new(const sl_balancer_conf_t *c, sl_target_live_t *const *live) {
    assert(c->kind >= SL_LB_ROUND_ROBIN && c->kind <= SL_LB_CONSISTENT_HASH);
    assert(c->ntargets >= 1);
    assert(!(c->hash_epsilon < 0)); /* also refuses NaN */
    sl_balancer_t *b = aligned_alloc(64, (sizeof *b + 63) / 64 * 64);
    if (!b) return NULL;
    memset(b, 0, sizeof *b);
    atomic_init(&b->seq, 0);
    b->kind = c->kind;
    b->n = c->ntargets;
    b->epsilon = c->hash_epsilon;
    b->weights = malloc(b->n * sizeof *b->weights);
    b->live = malloc(b->n * sizeof *b->live);
    if (!b->weights || !b->live) goto fail;
    for (uint32_t t = 0; t < b->n; t++) {
        b->weights[t] = c->weights ? c->weights[t] : 1;
        assert(b->weights[t] >= 1);
        b->live[t] = live[t];
    }
    if (b->kind == SL_LB_WEIGHTED_ROUND_ROBIN && wrr_schedule_build(b) != 0) goto fail;
    if (b->kind == SL_LB_CONSISTENT_HASH &&
        ring_build(b, c->ids, c->vnodes ? c->vnodes : SL_LB_DEFAULT_VNODES) != 0)
        goto fail;
    return b;
fail:
    sl_balancer_free(b);
    return NULL;
}

void sl_balancer_free(sl_balancer_t *b) {
    if (!b) return;
    free(b->weights);
    free(b->live);
    free(b->schedule);
    free(b->ring_hash);
    free(b->ring_owner);
    free(b);
}
