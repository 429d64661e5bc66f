/* upstreams.c — target states kept across reloads, and each generation's balancers. */
#include "upstream/upstreams.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/addr.h"
#include "base/common.h"

#include <stdio.h>

static sl_tstate_t *tstate_get(sl_tregistry_t *reg, const char *upstream, const char *address) {
    for (sl_tstate_t *t = reg->head; t; t = t->next)
        if (strcmp(t->upstream, upstream) == 0 && strcmp(t->address, address) == 0) {
            t->refs++;
            return t;
        }
    sl_tstate_t *t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->upstream = strdup(upstream);
    t->address = strdup(address);
    if (!t->upstream || !t->address) {
        free(t->upstream);
        free(t->address);
        free(t);
        return NULL;
    }
    for (int l = 0; l < SL_LAYERS; l++) sl_breaker_init(&t->breaker[l]);
    t->refs = 1;
    t->next = reg->head;
    reg->head = t;
    return t;
}

void sl_tstate_release(sl_tregistry_t *reg, sl_tstate_t *t) {
    if (!t || --t->refs) return;
    for (sl_tstate_t **pp = &reg->head; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    free(t->upstream);
    free(t->address);
    free(t);
}

void sl_upgen_free(sl_tregistry_t *reg, sl_upgen_t *g) {
    if (!g) return;
    if (g->ups) sl_upgen_sweep(g, UINT64_MAX, 0);
    for (size_t u = 0; g->ups && u < g->cfg->nupstreams; u++) {
        sl_upstream_rt_t *rt = &g->ups[u];
        sl_balancer_free(rt->bal);
        for (size_t i = 0; rt->ts && i < g->cfg->upstreams[u].ntargets; i++) sl_tstate_release(reg, rt->ts[i]);
        for (size_t i = 0; i < rt->ngone; i++) sl_tstate_release(reg, rt->gone[i]);
        free(rt->gone);
        free((void *)rt->ts);
        free(rt->live);
        free(rt->weights);
    }
    free(g->ups);
    free(g);
}

/* Builds the balancer over every slot (empty ones are never eligible); a target's place
 * on the hash ring follows its address, not its position. */
static sl_balancer_t *build_balancer(const sl_upstream_conf_t *uc, sl_upstream_rt_t *rt) {
    size_t n = uc->ntargets;
    sl_str_t *ids = calloc(n, sizeof *ids);
    char(*empty)[32] = calloc(n, sizeof *empty);
    sl_balancer_t *b = NULL;
    if (ids && empty) {
        for (size_t i = 0; i < n; i++) {
            const char *text = uc->targets[i].addr.text;
            rt->weights[i] = uc->targets[i].weight;
            if (!text[0]) {
                snprintf(empty[i], sizeof empty[i], "#slot%zu", i);
                text = empty[i];
            }
            ids[i] = (sl_str_t){text, strlen(text)};
        }
        sl_balancer_conf_t bc = {.kind = uc->balancer,
                                 .ntargets = (uint32_t)n,
                                 .weights = rt->weights,
                                 .hash_epsilon = uc->hash_epsilon,
                                 .vnodes = 160,
                                 .ids = ids};
        b = sl_balancer_new(&bc, rt->live);
    }
    free(ids); /* the ring is built: ids are not kept */
    free(empty);
    return b;
}

sl_upgen_t *sl_upgen_new(sl_tregistry_t *reg, const sl_config_t *cfg) {
    sl_upgen_t *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->cfg = cfg;
    g->ups = calloc(cfg->nupstreams ? cfg->nupstreams : 1, sizeof(*g->ups));
    if (!g->ups) goto fail;
    for (size_t u = 0; u < cfg->nupstreams; u++) {
        const sl_upstream_conf_t *uc = &cfg->upstreams[u];
        sl_upstream_rt_t *rt = &g->ups[u];
        if (!uc->ntargets) continue; /* a registry upstream with no slot: always 503 */
        rt->ts = calloc(uc->ntargets, sizeof(*rt->ts));
        rt->live = calloc(uc->ntargets, sizeof(*rt->live));
        rt->weights = calloc(uc->ntargets, sizeof(*rt->weights));
        if (!rt->ts || !rt->live || !rt->weights) goto fail;
        for (size_t i = 0; i < uc->ntargets; i++) {
            /* an empty slot's state is a placeholder ("" is no address) */
            sl_tstate_t *ts = tstate_get(reg, uc->name, uc->targets[i].addr.text);
            if (!ts) goto fail;
            atomic_init(&rt->ts[i], ts);
            rt->live[i] = &ts->live;
        }
        sl_balancer_t *bal = build_balancer(uc, rt);
        if (!bal) goto fail;
        atomic_init(&rt->bal, bal); /* not yet seen by any worker */
    }
    return g;
fail:
    sl_upgen_free(reg, g);
    return NULL;
}

void sl_upgen_breakers_turned_on(const sl_config_t *old, const sl_upgen_t *g, uint64_t now_ms) {
    for (size_t u = 0; u < g->cfg->nupstreams; u++) {
        const sl_upstream_conf_t *uc = &g->cfg->upstreams[u];
        if (!uc->breaker.enabled) continue;
        bool had = false;
        for (size_t k = 0; k < old->nupstreams && !had; k++)
            had = strcmp(old->upstreams[k].name, uc->name) == 0 && old->upstreams[k].breaker.enabled;
        if (had) continue;
        for (size_t i = 0; i < uc->ntargets; i++)
            for (int l = 0; l < SL_LAYERS; l++) sl_breaker_reset(&g->ups[u].ts[i]->breaker[l], now_ms);
    }
}

void sl_upgen_sweep(sl_upgen_t *g, uint64_t now_ms, uint64_t grace_ms) {
    for (size_t u = 0; u < g->cfg->nupstreams; u++)
        for (sl_old_bal_t **pp = &g->ups[u].old_bals; *pp;) {
            sl_old_bal_t *o = *pp;
            if (now_ms != UINT64_MAX && now_ms - o->at_ms < grace_ms) {
                pp = &o->next;
                continue;
            }
            *pp = o->next;
            sl_balancer_free(o->bal);
            free(o);
        }
}

static bool slot_reusable(const sl_upstream_conf_t *uc, const sl_upstream_rt_t *rt, size_t i, uint64_t now_ms) {
    uint64_t quiet = uc->keepalive_idle_timeout_ms + uc->read_timeout_ms + 1000;
    return atomic_load(&rt->ts[i]->live.in_flight) == 0 && now_ms - uc->targets[i].vacated_ms > quiet;
}

int sl_upgen_fill(sl_tregistry_t *reg, sl_upgen_t *g, size_t u, size_t first, size_t n,
                  const sl_slot_addr_t *addrs, size_t naddrs, uint64_t now_ms) {
    sl_upstream_conf_t *uc = (sl_upstream_conf_t *)&g->cfg->upstreams[u]; /* its slots are the mutable part */
    sl_upstream_rt_t *rt = &g->ups[u];
    sl_target_conf_t *sl = uc->targets + first;
    char text[SL_TARGET_TEXT_MAX];
    bool changed = false;
    int placed = 0;
    /* the gone-state list may grow by one per new address: make room first, so nothing
     * below fails half-way */
    if (rt->ngone + naddrs > rt->capgone) {
        size_t cap = (rt->ngone + naddrs) * 2;
        sl_tstate_t **p = realloc(rt->gone, cap * sizeof *p);
        if (!p) return -1;
        rt->gone = p, rt->capgone = cap;
    }
    bool *placed_at = calloc(naddrs + 1, sizeof *placed_at);
    if (!placed_at) return -1;
    for (size_t i = 0; i < n; i++) {
        if (!sl_slot_up(uc, first + i)) continue;
        size_t a = 0;
        for (; a < naddrs; a++) {
            sl__addr_text(&addrs[a].ss, text, sizeof text);
            if (!placed_at[a] && strcmp(text, sl[i].text) == 0) break;
        }
        if (a < naddrs) {
            placed_at[a] = true;
            placed++;
            if (sl[i].weight != addrs[a].weight) {
                sl[i].weight = addrs[a].weight;
                changed = true;
            }
            continue;
        }
        atomic_store_explicit(&sl[i].up, 0, memory_order_release);
        sl[i].vacated_ms = now_ms;
        changed = true;
    }
    for (size_t a = 0; a < naddrs; a++) {
        if (placed_at[a]) continue;
        sl__addr_text(&addrs[a].ss, text, sizeof text);
        size_t best = n;
        for (size_t i = 0; i < n && best == n; i++) /* the slot that last held it */
            if (!sl_slot_up(uc, first + i) && strcmp(sl[i].text, text) == 0) best = i;
        for (size_t i = 0; i < n && best == n; i++) /* a slot never used */
            if (!sl_slot_up(uc, first + i) && !sl[i].text[0]) best = i;
        for (size_t i = 0; i < n; i++) /* the longest quiet one */
            if (!sl_slot_up(uc, first + i) && slot_reusable(uc, rt, first + i, now_ms) &&
                (best == n || (sl[best].text[0] && sl[i].vacated_ms < sl[best].vacated_ms)))
                best = i;
        if (best == n) continue; /* no room: the caller logs what was not placed */
        size_t i = first + best;
        if (strcmp(sl[best].text, text) != 0) {
            sl_tstate_t *ts = tstate_get(reg, uc->name, text);
            if (!ts) continue;
            rt->gone[rt->ngone++] = rt->ts[i];
            atomic_store(&rt->ts[i], ts);
            rt->live[i] = &ts->live;
            sl[best].addr.ss = addrs[a].ss;
            sl[best].addr.len = addrs[a].len;
            memcpy(sl[best].text, text, sizeof text);
        }
        sl[best].weight = addrs[a].weight;
        atomic_store_explicit(&sl[best].up, 1, memory_order_release);
        placed++;
        changed = true;
    }
    free(placed_at);
    if (!changed) return placed;
    sl_balancer_t *b = build_balancer(uc, rt);
    sl_old_bal_t *o = malloc(sizeof *o);
    if (!b || !o) { /* the old balancer goes on: its ring or schedule is stale, not wrong */
        sl_balancer_free(b);
        free(o);
        return placed;
    }
    o->bal = atomic_exchange(&rt->bal, b);
    o->at_ms = now_ms;
    o->next = rt->old_bals;
    rt->old_bals = o;
    return placed;
}

bool sl_tstate_healthy(sl_tstate_t *t, uint64_t now_ms) {
    if (atomic_load_explicit(&t->probe_down, memory_order_relaxed)) return false;
    return atomic_load_explicit(&t->ejected_until_ms, memory_order_relaxed) <= now_ms;
}

void sl_tstate_passive_failure(sl_tstate_t *t, const sl_health_conf_t *h, uint64_t now_ms) {
    if (!h->passive) return;
    uint64_t start = atomic_load_explicit(&t->pwindow_start_ms, memory_order_relaxed);
    if (now_ms - start > h->window_ms &&
        atomic_compare_exchange_strong(&t->pwindow_start_ms, &start, now_ms))
        atomic_store_explicit(&t->pfails, 0, memory_order_relaxed);
    uint32_t n = atomic_fetch_add_explicit(&t->pfails, 1, memory_order_relaxed) + 1;
    if (n >= h->max_failures && atomic_load_explicit(&t->ejected_until_ms, memory_order_relaxed) <= now_ms) {
        /* With active probes, only they bring it back; without, the window's end does.
         * The count starts over, so a target that fails again after it returned is
         * ejected again after max_failures more. */
        uint64_t until = h->active_type != SL_PROBE_NONE ? UINT64_MAX
                         : now_ms + SL_MIN(h->window_ms, UINT64_MAX - now_ms); /* no wrap */
        atomic_store_explicit(&t->ejected_until_ms, until, memory_order_relaxed);
        atomic_store_explicit(&t->pfails, 0, memory_order_relaxed);
        atomic_store_explicit(&t->pwindow_start_ms, now_ms, memory_order_relaxed);
    }
}

int sl_tstate_breaker_now(sl_tstate_t *t, const sl_upstream_conf_t *uc, int layer, uint64_t now_ms) {
    return uc->breaker.enabled ? sl_breaker_state(&t->breaker[layer], &uc->breaker, now_ms) : SL_BREAKER_CLOSED;
}

int sl_upstream_resolve(const sl_config_t *cfg, const char *name, size_t len, int *upstream,
                        struct sockaddr_storage *ss, char *text, const char **err) {
    for (size_t i = 0; i < cfg->nupstreams; i++)
        if (strlen(cfg->upstreams[i].name) == len && memcmp(cfg->upstreams[i].name, name, len) == 0) {
            *upstream = (int)i;
            return SL_OK;
        }
    /* A DNS target some upstream lists ("api.internal:8080"): that upstream, whose slots
     * hold the name's addresses (a worker never waits for a resolver). */
    for (size_t i = 0; i < cfg->nupstreams; i++)
        for (size_t k = 0; k < cfg->upstreams[i].nnames; k++) {
            const char *e = cfg->upstreams[i].names[k].entry;
            if (strlen(e) == len && strncasecmp(e, name, len) == 0) {
                *upstream = (int)i;
                return SL_OK;
            }
        }
    /* Not a name: an address ("10.0.0.7:8080", "[::1]:9000"; IP literals only, so the
     * caller never waits for a resolver). */
    sl_addr_t a;
    if (len == 0 || len >= SL_ADDR_TEXT_MAX || !memchr(name, ':', len)) {
        *err = "no upstream of that name (an address is HOST:PORT with an IP literal host)";
        return SL_ERROR;
    }
    char buf[SL_ADDR_TEXT_MAX];
    memcpy(buf, name, len);
    buf[len] = 0;
    if (sl_parse_addr(buf, &a) != 0) {
        *err = "no upstream of that name, and not an IP:PORT address";
        return SL_ERROR;
    }
    free(a.text);
    uint16_t port = a.ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a.ss)->sin6_port
                                               : ((struct sockaddr_in *)&a.ss)->sin_port;
    if (port == 0) {
        *err = "the address needs a port";
        return SL_ERROR;
    }
    *upstream = -1;
    *ss = a.ss;
    memcpy(text, buf, len + 1);
    return SL_OK;
}
