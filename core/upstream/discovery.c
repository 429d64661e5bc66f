/* discovery.c — DNS names and registered backends into upstreams' slots (discovery.h). */
#include "upstream/discovery.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/addr.h"
#include "base/log.h"

/* Replaced balancers are freed this long after: no pick lasts nearly as long. */
#define OLD_BALANCER_GRACE_MS 10000
/* Registrations expire and old balancers go on this beat. */
#define SWEEP_MS 200

/* One `address: NAME:PORT` of one upstream. */
typedef struct sl_dname_s {
    struct sl_dname_s *next;
    sl_discovery_t *d;
    char *upstream, *entry, *host;
    uint16_t port;
    uint32_t weight;
    sl_slot_addr_t addrs[SL_DNS_SLOTS]; /* the last good answer */
    size_t naddrs;
    bool have;          /* an answer came once */
    bool querying;
    bool used;          /* by the generation being bound */
    bool closing;
    int last_result;    /* SL_DNS_* of the last lookup */
    const char *last_why;
    uint64_t resolved_ms, tried_ms; /* wall clock of the last good answer, of the last lookup */
    uint64_t next_ms;   /* the next lookup, monotonic */
    uv_timer_t timer;
} sl_dname_t;

/* One registered backend. */
typedef struct sl_dreg_s {
    struct sl_dreg_s *next;
    char *upstream;
    char text[SL_TARGET_TEXT_MAX];
    sl_slot_addr_t a;
    uint64_t ttl_ms, expires_ms; /* monotonic */
} sl_dreg_t;

struct sl_discovery_s {
    uv_loop_t *loop;
    sl_tregistry_t *reg;
    sl_upgen_t *g;
    sl_resolver_t *res;
    sl_resolver_conf_t rconf; /* what res was made with (nameservers owned) */
    sl_dname_t *names;
    sl_dreg_t *regs;
    uv_timer_t sweep;
    bool closing;
    unsigned open_handles;
    sl_discovery_stats_t stats;
};

static uint64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void handle_closed(uv_handle_t *h) {
    sl_discovery_t *d = h->data;
    if (--d->open_handles) return;
    free(d->rconf.nameservers);
    free(d);
}

static void dname_closed(uv_handle_t *h) {
    sl_dname_t *n = SL_CONTAINER_OF((uv_timer_t *)h, sl_dname_t, timer);
    free(n->upstream);
    free(n->entry);
    free(n->host);
    free(n);
}

/* A name with a lookup in flight is freed when the answer comes (the resolver calls back
 * into it); otherwise now. */
static void dname_free(sl_dname_t *n) {
    n->closing = true;
    uv_timer_stop(&n->timer);
    if (!n->querying) uv_close((uv_handle_t *)&n->timer, dname_closed);
}

static int upstream_index(const sl_config_t *cfg, const char *name) {
    for (size_t u = 0; u < cfg->nupstreams; u++)
        if (strcmp(cfg->upstreams[u].name, name) == 0) return (int)u;
    return -1;
}

static const sl_dns_name_conf_t *name_conf(const sl_upstream_conf_t *uc, const char *entry) {
    for (size_t k = 0; k < uc->nnames; k++)
        if (strcmp(uc->names[k].entry, entry) == 0) return &uc->names[k];
    return NULL;
}

/* The name's known addresses into the generation's slots. */
static void dname_apply(sl_discovery_t *d, sl_dname_t *n) {
    if (!d->g) return;
    int u = upstream_index(d->g->cfg, n->upstream);
    const sl_dns_name_conf_t *nc = u < 0 ? NULL : name_conf(&d->g->cfg->upstreams[u], n->entry);
    if (!nc) return;
    for (size_t i = 0; i < n->naddrs; i++) n->addrs[i].weight = nc->weight;
    if (sl_upgen_fill(d->reg, d->g, (size_t)u, nc->first, SL_DNS_SLOTS, n->addrs, n->naddrs, sl_now_ms()) <
        (int)n->naddrs)
        sl_log_kv(SL_LOG_WARN, (const char *[]){"upstream", n->upstream, "name", n->entry}, 2,
                  "not every address of the name has a slot (recently removed ones are still draining)");
}

/* The registry's current registrations of upstream u into its slots. */
static void registry_apply(sl_discovery_t *d, size_t u) {
    const sl_upstream_conf_t *uc = &d->g->cfg->upstreams[u];
    if (!uc->registry) return;
    sl_slot_addr_t *a = calloc(uc->registry_slots + 1, sizeof *a);
    if (!a) return;
    size_t n = 0;
    for (sl_dreg_t *r = d->regs; r && n < uc->registry_slots; r = r->next)
        if (strcmp(r->upstream, uc->name) == 0) a[n++] = r->a;
    sl_upgen_fill(d->reg, d->g, u, uc->registry_first, uc->registry_slots, a, n, sl_now_ms());
    free(a);
}

static void dname_query(sl_dname_t *n);

static void on_dname_timer(uv_timer_t *t) { dname_query(SL_CONTAINER_OF(t, sl_dname_t, timer)); }

static void dname_schedule(sl_dname_t *n, uint64_t ms) {
    n->next_ms = sl_now_ms() + ms;
    uv_timer_start(&n->timer, on_dname_timer, ms, 0);
}

static bool same_addrs(const sl_dname_t *n, const struct sockaddr_storage *a, size_t k) {
    if (k != n->naddrs) return false;
    for (size_t i = 0; i < k; i++) {
        bool found = false;
        for (size_t j = 0; j < k && !found; j++) found = memcmp(&n->addrs[j].ss, &a[i], sizeof a[i]) == 0;
        if (!found) return false;
    }
    return true;
}

static void on_dname_answer(void *ud, int result, const char *why, const struct sockaddr_storage *addrs, size_t k,
                            uint32_t ttl_s) {
    sl_dname_t *n = ud;
    sl_discovery_t *d = n->d;
    n->querying = false;
    if (n->closing) {
        uv_close((uv_handle_t *)&n->timer, dname_closed);
        return;
    }
    bool news = n->last_result != result; /* failures are logged when they start, not every retry */
    n->last_result = result;
    n->last_why = why;
    n->tried_ms = wall_ms();
    d->stats.resolutions[result]++;
    const char *kv[] = {"upstream", n->upstream, "name", n->entry};
    const sl_resolver_conf_t *rc = &d->rconf;
    if (result == SL_DNS_OK) {
        if (k > SL_DNS_SLOTS) k = SL_DNS_SLOTS;
        bool changed = !n->have || !same_addrs(n, addrs, k);
        for (size_t i = 0; i < k; i++)
            n->addrs[i] = (sl_slot_addr_t){.ss = addrs[i],
                                           .len = addrs[i].ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                                 : sizeof(struct sockaddr_in),
                                           .weight = n->weight};
        n->naddrs = k;
        n->have = true;
        n->resolved_ms = n->tried_ms;
        if (changed) {
            char list[256] = "", one[SL_TARGET_TEXT_MAX];
            for (size_t i = 0; i < k; i++) {
                sl__addr_text(&addrs[i], one, sizeof one);
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? " " : "", one);
            }
            sl_log_kv(SL_LOG_INFO, kv, 2, "name resolved to %s", list);
            dname_apply(d, n);
        }
        uint64_t ms = (uint64_t)ttl_s * 1000;
        dname_schedule(n, SL_MIN(SL_MAX(ms, rc->min_ttl_ms), rc->max_ttl_ms));
        return;
    }
    if (n->have) {
        d->stats.kept++;
        if (news)
            sl_log_kv(SL_LOG_WARN, kv, 2, "re-resolution failed (%s: %s): keeping the last %zu address(es)",
                  sl_dns_result_names[result], why ? why : "", n->naddrs);
    } else if (news) {
        sl_log_kv(SL_LOG_WARN, kv, 2, "name does not resolve (%s: %s): its upstream answers 503 until it does",
                  sl_dns_result_names[result], why ? why : "");
    }
    dname_schedule(n, SL_MAX(rc->min_ttl_ms, 1000)); /* never faster than 1 s, whatever max_ttl says */
}

static void dname_query(sl_dname_t *n) {
    sl_discovery_t *d = n->d;
    if (n->querying || n->closing || !d->res) return;
    n->querying = true;
    if (sl_resolver_query(d->res, n->host, n->port, d->rconf.ipv6, on_dname_answer, n) != SL_OK) {
        n->querying = false;
        dname_schedule(n, 1000);
    }
}

static void on_sweep(uv_timer_t *t) {
    sl_discovery_t *d = t->data;
    if (!d->g) return;
    uint64_t now = sl_now_ms();
    sl_upgen_sweep(d->g, now, OLD_BALANCER_GRACE_MS);
    bool due = false; /* the beat allocates nothing unless a registration expired */
    for (sl_dreg_t *r = d->regs; r && !due; r = r->next) due = r->expires_ms <= now;
    if (!due) return;
    bool *dirty = calloc(d->g->cfg->nupstreams + 1, sizeof *dirty);
    for (sl_dreg_t **pp = &d->regs; *pp;) {
        sl_dreg_t *r = *pp;
        if (r->expires_ms > now) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        d->stats.expired++;
        sl_log_kv(SL_LOG_INFO, (const char *[]){"upstream", r->upstream, "target", r->text}, 2,
                  "registration expired (not renewed within %llu ms)", (unsigned long long)r->ttl_ms);
        int u = upstream_index(d->g->cfg, r->upstream);
        if (u >= 0 && dirty) dirty[u] = true;
        free(r->upstream);
        free(r);
    }
    for (size_t u = 0; dirty && u < d->g->cfg->nupstreams; u++)
        if (dirty[u]) registry_apply(d, u);
    free(dirty);
}

sl_discovery_t *sl_discovery_new(uv_loop_t *loop, sl_tregistry_t *reg) {
    sl_discovery_t *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->loop = loop;
    d->reg = reg;
    uv_timer_init(loop, &d->sweep);
    d->sweep.data = d;
    d->open_handles = 1;
    uv_timer_start(&d->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
    uv_unref((uv_handle_t *)&d->sweep);
    return d;
}

static bool rconf_same(const sl_resolver_conf_t *a, const sl_resolver_conf_t *b) {
    bool ns = (!a->nameservers && !b->nameservers) ||
              (a->nameservers && b->nameservers && strcmp(a->nameservers, b->nameservers) == 0);
    return ns && a->timeout_ms == b->timeout_ms && a->attempts == b->attempts && a->ipv6 == b->ipv6;
}

int sl_discovery_bind(sl_discovery_t *d, sl_upgen_t *g, const char **err) {
    const sl_config_t *cfg = g->cfg;
    bool any = false;
    for (size_t u = 0; u < cfg->nupstreams; u++) any |= cfg->upstreams[u].nnames > 0;
    /* a new resolver when its settings changed (lookups in flight are dropped and redone,
     * and every known name is asked again through it: other nameservers may answer
     * otherwise, and the last answer stays in use until they do) */
    bool fresh = false;
    if (!d->res || !rconf_same(&d->rconf, &cfg->resolver)) {
        fresh = d->res != NULL;
        sl_resolver_t *res = NULL;
        if (any && sl_resolver_new(d->loop, &cfg->resolver, &res, err) != SL_OK) return SL_ERROR;
        sl_resolver_free(d->res);
        d->res = res;
        for (sl_dname_t *n = d->names; n; n = n->next) n->querying = false;
    }
    free(d->rconf.nameservers);
    d->rconf = cfg->resolver;
    d->rconf.nameservers = cfg->resolver.nameservers ? strdup(cfg->resolver.nameservers) : NULL;
    d->g = g;
    for (sl_dname_t *n = d->names; n; n = n->next) n->used = false;
    for (size_t u = 0; u < cfg->nupstreams; u++) {
        const sl_upstream_conf_t *uc = &cfg->upstreams[u];
        for (size_t k = 0; k < uc->nnames; k++) {
            const sl_dns_name_conf_t *nc = &uc->names[k];
            sl_dname_t *n = d->names;
            while (n && (n->used || strcmp(n->upstream, uc->name) || strcmp(n->entry, nc->entry))) n = n->next;
            if (!n) {
                if (!(n = calloc(1, sizeof *n))) continue;
                n->d = d;
                n->upstream = strdup(uc->name);
                n->entry = strdup(nc->entry);
                n->host = strdup(nc->host);
                n->port = nc->port;
                uv_timer_init(d->loop, &n->timer);
                uv_unref((uv_handle_t *)&n->timer);
                n->last_result = -1;
                n->next = d->names;
                d->names = n;
                if (!n->upstream || !n->entry || !n->host) {
                    d->names = n->next;
                    dname_free(n);
                    continue;
                }
            }
            n->used = true;
            n->weight = nc->weight;
        }
    }
    for (sl_dname_t **pp = &d->names; *pp;) {
        sl_dname_t *n = *pp;
        if (n->used) {
            pp = &n->next;
            continue;
        }
        *pp = n->next;
        dname_free(n); /* a lookup in flight was cancelled with the resolver, or answers into nothing */
    }
    /* registrations of upstreams gone, or no longer taking them; and those the new
     * generation cannot hold: an address it lists as a static target (it would be the
     * same address twice), or beyond a lowered `registry.max_targets` (it would get no
     * slot while its renewals still answered 200) */
    uint32_t *kept = calloc(cfg->nupstreams + 1, sizeof *kept);
    for (sl_dreg_t **pp = &d->regs; *pp;) {
        sl_dreg_t *r = *pp;
        int u = upstream_index(cfg, r->upstream);
        const char *why = NULL;
        if (u >= 0 && cfg->upstreams[u].registry) {
            const sl_upstream_conf_t *uc = &cfg->upstreams[u];
            for (size_t i = 0; i < uc->ntargets && !why; i++)
                if (uc->targets[i].kind == SL_TARGET_STATIC && strcmp(uc->targets[i].addr.text, r->text) == 0)
                    why = "the address is now a configured target of this upstream";
            if (!why && kept && kept[u] >= uc->registry_slots) why = "beyond the upstream's registry.max_targets";
            if (!why) {
                if (kept) kept[u]++;
                pp = &r->next;
                continue;
            }
            sl_log_kv(SL_LOG_WARN, (const char *[]){"upstream", r->upstream, "target", r->text}, 2,
                      "registration dropped by the reload: %s", why);
        }
        *pp = r->next;
        free(r->upstream);
        free(r);
    }
    free(kept);
    for (sl_dname_t *n = d->names; n; n = n->next) {
        if (n->have) dname_apply(d, n);
        if (!n->have || fresh || !uv_is_active((uv_handle_t *)&n->timer)) dname_query(n);
    }
    for (size_t u = 0; u < cfg->nupstreams; u++) registry_apply(d, u);
    return SL_OK;
}

void sl_discovery_prime(sl_discovery_t *d, uint64_t max_ms) {
    uint64_t end = sl_now_ms() + max_ms;
    for (;;) {
        bool pending = false;
        for (sl_dname_t *n = d->names; n; n = n->next) pending |= n->querying;
        if (!pending || sl_now_ms() >= end) return;
        uv_run(d->loop, UV_RUN_ONCE);
    }
}

void sl_discovery_free(sl_discovery_t *d) {
    if (!d) return;
    d->closing = true;
    sl_resolver_free(d->res); /* no callback comes any more */
    d->res = NULL;
    for (sl_dname_t *n = d->names; n; n = n->next) n->querying = false;
    while (d->names) {
        sl_dname_t *n = d->names;
        d->names = n->next;
        dname_free(n);
    }
    while (d->regs) {
        sl_dreg_t *r = d->regs;
        d->regs = r->next;
        free(r->upstream);
        free(r);
    }
    uv_close((uv_handle_t *)&d->sweep, handle_closed);
}

/* "IP:PORT" or "[IPv6]:PORT", numeric, port not 0, not a wildcard. */
static bool parse_ip_port(const char *s, sl_slot_addr_t *a) {
    char host[64];
    const char *colon = s[0] == '[' ? strstr(s, "]:") : strrchr(s, ':');
    if (!colon) return false;
    size_t hl = (size_t)(colon - s) - (s[0] == '[');
    if (hl == 0 || hl >= sizeof host) return false;
    memcpy(host, s + (s[0] == '['), hl);
    host[hl] = 0;
    const char *port = colon + (s[0] == '[' ? 2 : 1);
    char *end;
    long p = strtol(port, &end, 10);
    if (!*port || *end || p < 1 || p > 65535) return false;
    memset(a, 0, sizeof *a);
    if (s[0] == '[') {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->ss;
        if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1 || IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
            return false;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)p);
        a->len = sizeof *in6;
        return true;
    }
    struct sockaddr_in *in = (struct sockaddr_in *)&a->ss;
    if (inet_pton(AF_INET, host, &in->sin_addr) != 1 || in->sin_addr.s_addr == 0) return false;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)p);
    a->len = sizeof *in;
    return true;
}

int sl_discovery_register(sl_discovery_t *d, const char *upstream, const char *address, uint32_t weight,
                          uint64_t ttl_ms, bool *created, const char **err) {
    int u = d->g ? upstream_index(d->g->cfg, upstream) : -1;
    if (u < 0) {
        *err = "no upstream of that name";
        return 404;
    }
    const sl_upstream_conf_t *uc = &d->g->cfg->upstreams[u];
    if (!uc->registry) {
        *err = "this upstream has no registry (registry: { enabled: true })";
        return 400;
    }
    sl_slot_addr_t a;
    if (!address || !parse_ip_port(address, &a)) {
        *err = "address must be IP:PORT or [IPv6]:PORT with a numeric IP and a port from 1 to 65535";
        return 400;
    }
    if (weight < 1 || weight > 1000000) {
        *err = "weight must be an integer from 1 to 1000000";
        return 400;
    }
    if (weight != 1 && uc->balancer != SL_LB_WEIGHTED_ROUND_ROBIN && uc->balancer != SL_LB_CONSISTENT_HASH) {
        *err = "a weight other than 1 needs balancer weighted-round-robin or consistent-hash";
        return 400;
    }
    if (ttl_ms == 0 || ttl_ms > uc->registry_max_ttl_ms) {
        *err = "ttl must be more than 0 and at most the upstream's registry.max_ttl";
        return 400;
    }
    a.weight = weight;
    char text[SL_TARGET_TEXT_MAX];
    sl__addr_text(&a.ss, text, sizeof text);
    for (size_t i = 0; i < uc->ntargets; i++)
        if (uc->targets[i].kind != SL_TARGET_REGISTERED && sl_slot_up(uc, i) && strcmp(uc->targets[i].addr.text, text) == 0) {
            *err = "the address is already a configured target of this upstream";
            return 400;
        }
    sl_dreg_t *r = d->regs;
    size_t count = 0;
    for (sl_dreg_t *x = d->regs; x; x = x->next) count += strcmp(x->upstream, upstream) == 0;
    while (r && (strcmp(r->upstream, upstream) || strcmp(r->text, text))) r = r->next;
    *created = !r;
    if (!r) {
        if (count >= uc->registry_slots) {
            *err = "the registry of this upstream is full (registry.max_targets)";
            return 503;
        }
        if (!(r = calloc(1, sizeof *r)) || !(r->upstream = strdup(upstream))) {
            free(r);
            *err = "out of memory";
            return 503;
        }
        memcpy(r->text, text, sizeof text);
        r->next = d->regs;
        d->regs = r;
    }
    bool moved = *created || r->a.weight != weight;
    r->a = a;
    r->ttl_ms = ttl_ms;
    r->expires_ms = sl_now_ms() + ttl_ms;
    d->stats.registrations++;
    if (moved) {
        registry_apply(d, (size_t)u);
        bool placed = false;
        for (size_t i = uc->registry_first; i < uc->ntargets && !placed; i++)
            placed = sl_slot_up(uc, i) && strcmp(uc->targets[i].text, text) == 0;
        if (!placed) { /* every slot is held or still draining: undo */
            for (sl_dreg_t **pp = &d->regs; *pp; pp = &(*pp)->next)
                if (*pp == r) {
                    *pp = r->next;
                    break;
                }
            free(r->upstream);
            free(r);
            *err = "no free target slot: removed targets are still draining (retry later)";
            return 503;
        }
        if (*created)
            sl_log_kv(SL_LOG_INFO, (const char *[]){"upstream", upstream, "target", text}, 2,
                      "target registered (ttl %llu ms)", (unsigned long long)ttl_ms);
    }
    return 200;
}

int sl_discovery_deregister(sl_discovery_t *d, const char *upstream, const char *address, const char **err) {
    sl_slot_addr_t a;
    char text[SL_TARGET_TEXT_MAX];
    if (!parse_ip_port(address, &a)) {
        *err = "not a registered target of this upstream";
        return 404;
    }
    sl__addr_text(&a.ss, text, sizeof text);
    for (sl_dreg_t **pp = &d->regs; *pp; pp = &(*pp)->next) {
        sl_dreg_t *r = *pp;
        if (strcmp(r->upstream, upstream) || strcmp(r->text, text)) continue;
        *pp = r->next;
        free(r->upstream);
        free(r);
        int u = d->g ? upstream_index(d->g->cfg, upstream) : -1;
        if (u >= 0) registry_apply(d, (size_t)u);
        sl_log_kv(SL_LOG_INFO, (const char *[]){"upstream", upstream, "target", text}, 2, "target deregistered");
        return 200;
    }
    *err = "not a registered target of this upstream";
    return 404;
}

bool sl_discovery_targets_json(sl_discovery_t *d, const char *upstream, sl_json_put_fn put, void *ud) {
    int u = d->g ? upstream_index(d->g->cfg, upstream) : -1;
    if (u < 0) return false;
    const sl_upstream_conf_t *uc = &d->g->cfg->upstreams[u];
    uint64_t now = sl_now_ms(), wall = wall_ms();
    put(ud, "{\"upstream\":\"%s\",\"registry\":%s,\"targets\":[", uc->name, uc->registry ? "true" : "false");
    int k = 0;
    for (size_t i = 0; i < uc->ntargets; i++) {
        const sl_target_conf_t *t = &uc->targets[i];
        if (t->kind == SL_TARGET_REGISTERED || !sl_slot_up(uc, i)) continue;
        put(ud, "%s{\"address\":\"%s\",\"weight\":%u,\"source\":\"%s\"", k++ ? "," : "", t->addr.text, t->weight,
            t->kind == SL_TARGET_DNS ? "dns" : "static");
        if (t->kind == SL_TARGET_DNS) put(ud, ",\"name\":\"%s\"", uc->names[t->name].entry);
        put(ud, "}");
    }
    for (sl_dreg_t *r = d->regs; r; r = r->next) {
        if (strcmp(r->upstream, uc->name)) continue;
        uint64_t left = r->expires_ms > now ? r->expires_ms - now : 0;
        put(ud,
            "%s{\"address\":\"%s\",\"weight\":%u,\"source\":\"registry\",\"ttl_ms\":%llu,\"expires_in_ms\":%llu,"
            "\"expires_at_ms\":%llu}",
            k++ ? "," : "", r->text, r->a.weight, (unsigned long long)r->ttl_ms, (unsigned long long)left,
            (unsigned long long)(wall + left));
    }
    put(ud, "]}\n");
    return true;
}

void sl_discovery_names_json(sl_discovery_t *d, size_t u, sl_json_put_fn put, void *ud) {
    const sl_upstream_conf_t *uc = &d->g->cfg->upstreams[u];
    put(ud, "[");
    int k = 0;
    for (sl_dname_t *n = d->names; n; n = n->next) {
        if (strcmp(n->upstream, uc->name)) continue;
        put(ud, "%s{\"name\":\"%s\",\"addresses\":[", k++ ? "," : "", n->entry);
        for (size_t i = 0; i < n->naddrs; i++) {
            char one[SL_TARGET_TEXT_MAX];
            sl__addr_text(&n->addrs[i].ss, one, sizeof one);
            put(ud, "%s\"%s\"", i ? "," : "", one);
        }
        put(ud, "],\"resolved_at_ms\":%llu,\"tried_at_ms\":%llu,\"last_result\":\"%s\",\"next_in_ms\":%lld}",
            (unsigned long long)n->resolved_ms, (unsigned long long)n->tried_ms,
            n->last_result < 0 ? "pending" : sl_dns_result_names[n->last_result],
            (long long)n->next_ms - (long long)sl_now_ms());
    }
    put(ud, "]");
}

const sl_discovery_stats_t *sl_discovery_stats(const sl_discovery_t *d) { return &d->stats; }
