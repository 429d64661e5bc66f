/* health.c — active health probes, run by the main thread on its own connections.
 *
 * Each target of an upstream with `health.active` gets a prober: a timer that fires
 * every `interval` (the first time at a random point of the first interval, so
 * probes of many targets do not fire together), a fresh connection, and for `http`
 * a `GET path` through the core's HTTP client (client/client.h) whose response head
 * decides (expect_status, or any 2xx/3xx; the body is not waited for). A probe
 * that does not finish within `timeout` failed. `unhealthy_threshold` failures in a
 * row mark the target down, `healthy_threshold` successes in a row bring it back (and
 * end a passive ejection). Workers only read the outcome (sl_tstate_t atomics).
 *
 * A `grpc` probe calls grpc.health.v1.Health/Check over HTTP/2 (prior knowledge, or TLS
 * for a TLS target) on that fresh connection (grpc_probe.c): SERVING passes, any other
 * status, grpc-status or failure fails.
 *
 * Startup posture: a target is healthy until probes say otherwise, so a gateway
 * serves from its first request; a dead target is found within
 * unhealthy_threshold x interval (and sooner by the breaker and passive ejection).
 */
#include "upstream/health.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "client/client.h"
#include "upstream/grpc_probe.h"

typedef struct sl_prober_s {
    struct sl_prober_s *next;
    sl_health_t *hc;
    sl_tstate_t *ts;            /**< a reference of its own: the state outlives the generation */
    const sl_upstream_conf_t *uc;
    const sl_upstream_rt_t *rt;
    size_t slot;                /**< the target slot probed: a dynamic one may change address */
    struct sockaddr_storage addr;
    char host[96];
    uv_timer_t timer;           /**< the interval */
    uv_timer_t deadline;        /**< one probe's timeout */
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    const sl_tls_target_conf_t *tls; /**< the target's TLS, or NULL */
    sl_tls_t *t;                /**< the probe connection's TLS session */
    char req[512];
    char resp[256];             /**< a grpc probe's reads */
    sl_client_t *call;          /**< an http probe's exchange, while it runs */
    uint8_t tcp_open, stopping;
    uint8_t open_handles;       /**< timers and the probe connection not yet closed */
    sl_grpc_probe_t *gp;        /**< a grpc probe's exchange, while its connection is open */
} sl_prober_t;

/* A grpc probe's write: its bytes follow the request, freed by its callback. */
typedef struct {
    uv_write_t w;
    sl_prober_t *p;
    char *data;
} probe_write_t;

/* A prober is freed once it was stopped and its last handle closed. */
static void prober_closed(uv_handle_t *h) {
    sl_prober_t *p = h->data;
    if (--p->open_handles || !p->stopping) return;
    sl_tstate_release(p->hc->reg, p->ts);
    free(p);
}

static void probe_close_conn(sl_prober_t *p) {
    sl_client_close(p->call);
    p->call = NULL;
    if (!p->tcp_open) return;
    p->tcp_open = 0;
    sl_grpc_probe_free(p->gp);
    p->gp = NULL;
    if (p->t) {
        sl_tls_close(p->t);
        p->t = NULL;
    }
    uv_close((uv_handle_t *)&p->tcp, prober_closed);
}

static void probe_done(sl_prober_t *p, bool ok, const char *why) {
    uv_timer_stop(&p->deadline);
    probe_close_conn(p);
    p->ts->probing = false;
    if (p->stopping) return;
    const sl_health_conf_t *h = &p->uc->health;
    sl_tstate_t *ts = p->ts;
    /* A passive ejection waits for healthy_threshold passes of its own: passes counted
     * before it (the target looked fine to probes all along) do not end it. */
    bool ejected = atomic_load(&ts->ejected_until_ms) == UINT64_MAX;
    if (ejected && !ts->ejection_seen) ts->ok_run = 0;
    ts->ejection_seen = ejected;
    if (ok) {
        ts->fail_run = 0;
        if (++ts->ok_run >= h->healthy_threshold && atomic_load(&ts->probe_down)) {
            atomic_store(&ts->probe_down, 0);
            sl_log_kv(SL_LOG_INFO, (const char *[]){"upstream", p->uc->name, "target", ts->address}, 2,
                      "target healthy again (%u probes passed)", ts->ok_run);
        }
        if (ejected && ts->ok_run >= h->healthy_threshold) {
            atomic_store(&ts->ejected_until_ms, 0);
            ts->ejection_seen = false;
        }
    } else {
        ts->ok_run = 0;
        if (++ts->fail_run >= h->unhealthy_threshold && !atomic_load(&ts->probe_down)) {
            atomic_store(&ts->probe_down, 1);
            sl_log_kv(SL_LOG_WARN, (const char *[]){"upstream", p->uc->name, "target", ts->address}, 2,
                      "target unhealthy (%u probes failed; last: %s)", ts->fail_run, why);
        }
    }
}

static void on_probe_deadline(uv_timer_t *t) { probe_done(t->data, false, "timeout"); }

static void probe_ready(sl_prober_t *p);

static void grpc_written(uv_write_t *w, int status) {
    probe_write_t *pw = SL_CONTAINER_OF(w, probe_write_t, w);
    sl_prober_t *p = pw->p;
    free(pw->data);
    free(pw);
    if (status < 0 && p->tcp_open && p->gp) probe_done(p, false, uv_strerror(status));
}

/* Sends what the grpc exchange has due (its request, SETTINGS ACKs, window updates).
 * False when the probe failed (and is done). */
static bool grpc_flush(sl_prober_t *p) {
    char *data;
    long n = sl_grpc_probe_take(p->gp, &data);
    if (n <= 0) {
        if (n < 0) probe_done(p, false, "out of memory");
        return n == 0;
    }
    if (p->t) {
        /* TLS encrypts (copies) the bytes within the call, and calls back only for a write
         * that did not complete at once, one at a time: no callback is asked for (one that
         * never came leaked its buffer). A failed write shows here or in the next read. */
        uv_buf_t tb = uv_buf_init(data, (unsigned)n);
        int trc = sl_tls_write(p->t, &p->wreq, &tb, 1, NULL);
        free(data);
        if (trc < 0) {
            probe_done(p, false, "write failed");
            return false;
        }
        return true;
    }
    probe_write_t *pw = malloc(sizeof(*pw));
    if (!pw) {
        free(data);
        probe_done(p, false, "out of memory");
        return false;
    }
    pw->p = p;
    pw->data = data;
    uv_buf_t b = uv_buf_init(data, (unsigned)n);
    int rc = uv_write(&pw->w, (uv_stream_t *)&p->tcp, &b, 1, grpc_written);
    if (rc < 0) {
        free(data);
        free(pw);
        probe_done(p, false, "write failed");
        return false;
    }
    return true;
}

static void grpc_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    (void)hint;
    sl_prober_t *p = SL_CONTAINER_OF((uv_tcp_t *)h, sl_prober_t, tcp);
    *buf = uv_buf_init(p->resp, sizeof p->resp);
}

static void grpc_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
    sl_prober_t *p = SL_CONTAINER_OF((uv_tcp_t *)s, sl_prober_t, tcp);
    if (n == 0 || !p->gp) return;
    if (n < 0) {
        probe_done(p, false, n == UV_EOF ? "closed before an answer" : uv_strerror((int)n));
        return;
    }
    const char *why = NULL;
    int rc = sl_grpc_probe_feed(p->gp, buf->base, (size_t)n, &why);
    if (rc == SL_EAGAIN) {
        grpc_flush(p);
        return;
    }
    char text[128];
    snprintf(text, sizeof text, "grpc health: %s", why ? why : "");
    probe_done(p, rc == SL_OK, text);
}

static void probe_tls_done(sl_tls_t *t, int status) {
    sl_prober_t *p = sl_tls_owner(t);
    if (status < 0) {
        char why[256];
        snprintf(why, sizeof why, "TLS %s", sl_tls_error(t));
        probe_done(p, false, why);
        return;
    }
    probe_ready(p);
}

/* The pump of probes' TLS sessions on the main loop, made for the first one. */
static sl_tls_pump_t *probe_pump(sl_health_t *hc) {
    if (!hc->pump_ready) {
        hc->blocks.max_free = 4;
        sl_tls_pump_init(&hc->pump, hc->loop, &hc->blocks);
        hc->pump_ready = true;
    }
    return &hc->pump;
}

static void probe_connected(uv_connect_t *c, int status) {
    sl_prober_t *p = c->data;
    if (!p->tcp_open || !p->ts->probing) return; /* timed out meanwhile */
    if (status < 0) {
        probe_done(p, false, uv_strerror(status));
        return;
    }
    if (p->tls) { /* a TLS target: the handshake is part of the probe (a tcp probe's whole check) */
        p->t = sl_tls_connect(p->tls->rt, (uv_stream_t *)&p->tcp, probe_pump(p->hc), NULL);
        if (!p->t || sl_tls_handshake(p->t, probe_tls_done) != 0)
            probe_done(p, false, p->t ? sl_tls_error(p->t) : "out of memory");
        return;
    }
    probe_ready(p);
}

/* Connected (and TLS established): a tcp probe passed; a grpc probe sends its request. */
static void probe_ready(sl_prober_t *p) {
    if (p->uc->health.active_type == SL_PROBE_TCP) {
        probe_done(p, true, NULL);
        return;
    }
    p->gp = sl_grpc_probe_new(p->host, p->t != NULL, p->uc->health.service);
    if (!p->gp) {
        probe_done(p, false, "out of memory");
        return;
    }
    if (!grpc_flush(p)) return;
    int rc = p->t ? sl_tls_read_start(p->t, grpc_alloc, grpc_read)
                  : uv_read_start((uv_stream_t *)&p->tcp, grpc_alloc, grpc_read);
    if (rc != 0) probe_done(p, false, "read failed");
}

/* An http probe's final response head: its status decides, the body is not waited for. */
static void http_head(void *ud, sl_client_t *c) {
    sl_prober_t *p = ud;
    int status = sl_client_head(c)->status;
    int want = p->uc->health.expect_status;
    bool ok = want ? status == want : status >= 200 && status < 400;
    char why[48];
    snprintf(why, sizeof why, "status %d", status);
    probe_done(p, ok, why); /* closes the call */
}

/* Ended before a head (a head closes the call first): the probe failed. */
static void http_done(void *ud, int status, const char *err) {
    (void)status;
    char why[160]; /* the call's text goes with the call, which probe_done closes */
    snprintf(why, sizeof why, "%s", err ? err : "no response");
    probe_done(ud, false, why);
}

/* An http probe: GET path on a fresh connection (TLS for a TLS target); the prober's
 * deadline bounds it. */
static void probe_http(sl_prober_t *p) {
    int n = snprintf(p->req, sizeof p->req,
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sluice-health\r\nConnection: close\r\n\r\n",
                     p->uc->health.path, p->host);
    sl_client_req_t rq = {.loop = p->hc->loop,
                          .addr = (const struct sockaddr *)&p->addr,
                          .tls = p->tls ? p->tls->rt : NULL,
                          .pump = p->tls ? probe_pump(p->hc) : NULL,
                          .req = p->req,
                          .req_len = (size_t)SL_MIN(n, (int)sizeof p->req - 1),
                          .drop_body = true,
                          .ud = p,
                          .on_head = http_head,
                          .on_done = http_done};
    const char *err = NULL;
    if (!(p->call = sl_client_start(&rq, &err))) probe_done(p, false, err);
}

/* The slot's address now: an empty slot is not probed; a slot refilled with another
 * address moves the prober to that address's state. False: nothing to probe. */
static bool probe_target(sl_prober_t *p) {
    if (!sl_slot_up(p->uc, p->slot)) return false;
    sl_tstate_t *cur = p->rt->ts[p->slot];
    if (cur != p->ts) {
        cur->refs++;
        cur->probing = false;
        sl_tstate_release(p->hc->reg, p->ts);
        p->ts = cur;
    }
    const sl_target_conf_t *tc = &p->uc->targets[p->slot];
    p->addr = tc->addr.ss;
    /* a DNS name's slot: the name is the Host */
    snprintf(p->host, sizeof p->host, "%s", tc->kind == SL_TARGET_DNS ? p->uc->names[tc->name].entry : tc->addr.text);
    return true;
}

static void on_probe_timer(uv_timer_t *t) {
    sl_prober_t *p = t->data;
    if (p->ts->probing || p->stopping || !probe_target(p)) return;
    p->ts->probing = true;
    uv_timer_start(&p->deadline, on_probe_deadline, p->uc->health.timeout_ms, 0);
    if (p->uc->health.active_type == SL_PROBE_HTTP) {
        probe_http(p);
        return;
    }
    uv_tcp_init(p->hc->loop, &p->tcp);
    p->tcp.data = p;
    p->tcp_open = 1;
    p->open_handles++;
    p->creq.data = p;
    if (uv_tcp_connect(&p->creq, &p->tcp, (const struct sockaddr *)&p->addr, probe_connected) != 0)
        probe_done(p, false, "connect failed");
}

/* A target of a generation without active probes: what only probes could end (a verdict
 * of probes a reload turned off, an ejection waiting for them) is over, or it would never
 * be; a passive ejection still running lasts its window, and none is left without
 * `passive`. */
static void settle_unprobed(sl_tstate_t *ts, const sl_health_conf_t *h, uint64_t now_ms) {
    if (atomic_exchange(&ts->probe_down, 0))
        sl_log_kv(SL_LOG_INFO, (const char *[]){"upstream", ts->upstream, "target", ts->address}, 2,
                  "target healthy again (active health checks removed)");
    ts->ok_run = ts->fail_run = 0;
    ts->ejection_seen = false;
    uint64_t until = atomic_load(&ts->ejected_until_ms);
    if (!h->passive)
        atomic_store(&ts->ejected_until_ms, 0);
    else if (until == UINT64_MAX)
        atomic_store(&ts->ejected_until_ms, now_ms + h->window_ms);
}

void sl_health_start(sl_health_t *hc, uv_loop_t *loop, sl_tregistry_t *reg, const sl_upgen_t *g) {
    hc->loop = loop;
    hc->reg = reg;
    const sl_config_t *cfg = g->cfg;
    for (size_t u = 0; u < cfg->nupstreams; u++) {
        const sl_upstream_conf_t *uc = &cfg->upstreams[u];
        if (uc->health.active_type == SL_PROBE_NONE) {
            for (size_t i = 0; i < uc->ntargets; i++) settle_unprobed(g->ups[u].ts[i], &uc->health, sl_now_ms());
            continue;
        }
        for (size_t i = 0; i < uc->ntargets; i++) {
            sl_prober_t *p = calloc(1, sizeof(*p));
            if (!p) continue;
            p->hc = hc;
            p->uc = uc;
            p->rt = &g->ups[u];
            p->slot = i;
            p->ts = g->ups[u].ts[i];
            p->ts->refs++;
            p->ts->probing = false;
            p->tls = uc->targets[i].tls && uc->targets[i].tls->rt ? uc->targets[i].tls : NULL;
            uv_timer_init(loop, &p->timer);
            uv_timer_init(loop, &p->deadline);
            p->open_handles = 2;
            p->timer.data = p->deadline.data = p;
            uint64_t first = (uint64_t)rand() % (uc->health.interval_ms + 1);
            uv_timer_start(&p->timer, on_probe_timer, first, uc->health.interval_ms);
            p->next = hc->probers;
            hc->probers = p;
        }
    }
}

void sl_health_stop(sl_health_t *hc) {
    sl_prober_t *p = hc->probers;
    hc->probers = NULL;
    while (p) {
        sl_prober_t *next = p->next;
        p->stopping = 1;
        p->ts->probing = false;
        uv_close((uv_handle_t *)&p->timer, prober_closed);
        uv_close((uv_handle_t *)&p->deadline, prober_closed);
        probe_close_conn(p);
        p = next;
    }
}

static void pump_closed(uv_handle_t *h) {
    sl_tls_pump_t *pump = h->data;
    sl_blockpool_destroy(pump->blocks);
}

void sl_health_close(sl_health_t *hc) {
    if (!hc->pump_ready) return;
    hc->pump_ready = false;
    uv_close((uv_handle_t *)&hc->pump.idle, pump_closed);
}
