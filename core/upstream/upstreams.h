/* upstreams.h — the live side of upstreams: target state shared by every worker and
 * kept across reloads, and each config generation's balancers.
 *
 * A target's state (breakers, health, in-flight, latency EWMA) belongs to the pair
 * (upstream name, address) in the server's registry, so a reload that keeps a target
 * keeps its breaker and health (the design, "Config generations and reload"). A
 * generation (sl_upgen_t) points at the states its config names and owns one
 * balancer per upstream. The registry and generations are built and freed on the
 * main thread; workers only read generations and update states through atomics.
 */
#ifndef SL_UPSTREAMS_H
#define SL_UPSTREAMS_H

#include "upstream/balancer.h"
#include "upstream/breaker.h"
#include "config/config.h"

enum { SL_LAYER_HTTP = 0, SL_LAYER_TCP = 1, SL_LAYERS };

typedef struct sl_tstate_s {
    struct sl_tstate_s *next; /**< registry list */
    char *upstream, *address; /**< the key */
    uint32_t refs;            /**< generations using it (main thread) */
    sl_target_live_t live;
    sl_breaker_t breaker[SL_LAYERS];
    _Atomic int probe_down;   /**< active probes say down (1) */
    _Atomic int h2_conns, h2_streams; /**< HTTP/2 connections open to it, streams open on them
                                           (every worker's; http/h2_up.c) */
    _Atomic uint64_t ejected_until_ms; /**< passive ejection; UINT64_MAX: until probes restore it */
    _Atomic uint32_t pfails;  /**< passive failures in the current window */
    _Atomic uint64_t pwindow_start_ms;
    /* active probes: main thread only */
    uint32_t ok_run, fail_run;
    bool ejection_seen;       /**< probes met the passive ejection in force (and restarted ok_run) */
    bool probing;             /**< a probe is in flight */
} sl_tstate_t;

/** A balancer a refill replaced: freed once no pick can still be walking it. */
typedef struct sl_old_bal_s {
    struct sl_old_bal_s *next;
    sl_balancer_t *bal;
    uint64_t at_ms;
} sl_old_bal_t;

typedef struct {
    sl_balancer_t *_Atomic bal; /**< swapped by sl_upgen_fill; workers load it per use */
    sl_tstate_t *_Atomic *ts;   /**< [ntargets]: each slot's state (an empty slot's is the
                                     upstream's shared placeholder, never picked) */
    sl_target_live_t **live;  /**< [ntargets]: &ts[i]->live, what the balancer reads */
    uint32_t *weights;        /**< [ntargets], lent to the balancer */
    sl_tstate_t **gone;       /**< states refilled slots held, released with the generation */
    size_t ngone, capgone;
    sl_old_bal_t *old_bals;
} sl_upstream_rt_t;

typedef struct sl_upgen_s {
    const sl_config_t *cfg;
    sl_upstream_rt_t *ups;    /**< [cfg->nupstreams] */
} sl_upgen_t;

typedef struct {
    sl_tstate_t *head;
} sl_tregistry_t;

/** Builds a generation's runtime for cfg, reusing the registry's states. NULL on OOM. */
sl_upgen_t *sl_upgen_new(sl_tregistry_t *reg, const sl_config_t *cfg);
/** A reload from `old` to g: the breakers of upstreams that have one in g but had none in
 *  `old` (or did not exist there) start closed, whatever state their targets kept from an
 *  earlier generation (a breaker counts nothing while it is off). Main thread. */
void sl_upgen_breakers_turned_on(const sl_config_t *old, const sl_upgen_t *g, uint64_t now_ms);
/** Drops a generation; states no generation uses any more are freed. */
void sl_upgen_free(sl_tregistry_t *reg, sl_upgen_t *g);

/** One address for a dynamic slot group (sl_upgen_fill). */
typedef struct {
    struct sockaddr_storage ss;
    socklen_t len;
    uint32_t weight;
} sl_slot_addr_t;

/**
 * Main thread: makes the dynamic slots targets[first .. first + n) of upstream u hold
 * exactly `addrs` (as many as fit). A slot whose address stays keeps its state (breaker,
 * health, EWMA) and its place; a gone address's slot is emptied (no new picks; attempts on
 * it finish); a new address takes an empty slot, preferring one that last held it, then
 * one never used, then one quiet (nothing in flight) for longer than the upstream's
 * keep-alive idle timeout plus its read timeout, so no pooled connection or late
 * attempt of the old address outlives its reuse. The balancer is rebuilt when anything
 * changed. Returns the addresses placed, or -1 out of memory (slots unchanged).
 */
int sl_upgen_fill(sl_tregistry_t *reg, sl_upgen_t *g, size_t u, size_t first, size_t n,
                  const sl_slot_addr_t *addrs, size_t naddrs, uint64_t now_ms);
/** Main thread: frees balancers replaced more than `grace_ms` ago. */
void sl_upgen_sweep(sl_upgen_t *g, uint64_t now_ms, uint64_t grace_ms);
/** Is slot t of upstream u holding an address (always, for a static one)? Any thread. */
static inline bool sl_slot_up(const sl_upstream_conf_t *uc, size_t t) {
    return atomic_load_explicit(&uc->targets[t].up, memory_order_acquire) != 0;
}

/** No slot of the upstream holds an address (its names do not resolve yet, nobody
 *  registered): its requests get 503. Any thread; O(slots), for the failure path. */
static inline bool sl_upstream_empty(const sl_upstream_conf_t *uc) {
    for (size_t t = 0; t < uc->ntargets; t++)
        if (sl_slot_up(uc, t)) return false;
    return true;
}

/** Size of sl_upstream_resolve's address text: the longest "[v6]:port" and its NUL. */
#define SL_ADDR_TEXT_MAX 64

/**
 * What `upstream.set(name | "IP:PORT")` names, for a request or a tcp session: SL_OK with
 * *upstream the index of the configured upstream `name[0..len)` (or of the first upstream
 * listing the target `NAME:PORT` it spells: that upstream's slots hold the name's
 * addresses), or with *upstream -1 and
 * *ss / text (SL_ADDR_TEXT_MAX bytes, NUL-terminated) the IP:PORT address it spells (IP
 * literals only: nothing ever waits for a resolver). SL_ERROR with *err otherwise. Any thread.
 */
int sl_upstream_resolve(const sl_config_t *cfg, const char *name, size_t len, int *upstream,
                        struct sockaddr_storage *ss, char *text, const char **err);

/** Drops one reference (a generation's or a prober's); frees the state at the last. */
void sl_tstate_release(sl_tregistry_t *reg, sl_tstate_t *t);

/** May new attempts go to this target (health and passive ejection; not the breaker)? */
bool sl_tstate_healthy(sl_tstate_t *t, uint64_t now_ms);
/** A layer's (SL_LAYER_*) breaker state now (SL_BREAKER_*; closed when the upstream has none). */
int sl_tstate_breaker_now(sl_tstate_t *t, const sl_upstream_conf_t *uc, int layer, uint64_t now_ms);
/** A failed attempt, for passive ejection (upstream health.passive). Any thread. */
void sl_tstate_passive_failure(sl_tstate_t *t, const sl_health_conf_t *h, uint64_t now_ms);

#endif
