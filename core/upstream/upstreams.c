/* upstreams.c — target states kept across reloads, and each generation's balancers. */
#include "upstream/upstreams.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

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
    for (size_t u = 0; g->ups && u < g->cfg->nupstreams; u++) {
        sl_upstream_rt_t *rt = &g->ups[u];
        sl_balancer_free(rt->bal);
        for (size_t i = 0; rt->ts && i < g->cfg->upstreams[u].ntargets; i++) sl_tstate_release(reg, rt->ts[i]);
        free(rt->ts);
        free(rt->live);
        free(rt->weights);
    }
    free(g->ups);
    free(g);
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
        rt->ts = calloc(uc->ntargets, sizeof(*rt->ts));
        rt->live = calloc(uc->ntargets, sizeof(*rt->live));
        uint32_t *weights = rt->weights = calloc(uc->ntargets, sizeof(*weights));
        sl_str_t *ids = calloc(uc->ntargets, sizeof(*ids));
        if (!rt->ts || !rt->live || !weights || !ids) {
            free(ids);
            goto fail;
        }
        for (size_t i = 0; i < uc->ntargets; i++) {
            rt->ts[i] = tstate_get(reg, uc->name, uc->targets[i].addr.text);
            if (!rt->ts[i]) {
                free(ids);
                goto fail;
            }
            rt->live[i] = &rt->ts[i]->live;
            weights[i] = uc->targets[i].weight;
            /* a target's place on the hash ring follows its address, not its position */
            ids[i] = (sl_str_t){uc->targets[i].addr.text, strlen(uc->targets[i].addr.text)};
        }
        sl_balancer_conf_t bc = {.kind = uc->balancer,
                                 .ntargets = (uint32_t)uc->ntargets,
                                 .weights = weights,
                                 .hash_epsilon = uc->hash_epsilon,
                                 .vnodes = 160,
                                 .ids = ids};
        rt->bal = sl_balancer_new(&bc, rt->live);
        free(ids); /* the ring is built: ids are not kept */
        if (!rt->bal) goto fail;
    }
    return g;
fail:
    sl_upgen_free(reg, g);
    return NULL;
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
        uint64_t until = h->active_type != SL_PROBE_NONE ? UINT64_MAX : now_ms + h->window_ms;
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
