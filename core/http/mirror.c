/* mirror.c — the mirror plugin's copies: a copy of the running request (method, target,
 * headers, the body the plugin had buffered) sent to another address on the worker's
 * loop through the detached HTTP client (http_client.h), its answer read and dropped.
 *
 * Nothing of the copy touches the request: the bytes are built and copied at once, the
 * exchange owns itself, and its end is only counted. A worker has at most `max_in_flight`
 * copies on their way (the plugin's cap); past it a copy is dropped and counted, so a
 * mirror that hangs costs each worker a bounded number of sockets and timers, never a
 * wait on the request's path.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "base/wbuf.h"
#include "ctx/metrics.h"
#include "http/http_client.h"
#include "http/mirror.h"
#include "http/request.h"
#include "sluice.h"

/* Mirror copies by outcome, all workers: SL_MIRROR_* of sluice.h. */
static _Atomic uint64_t counts[SL_MIRROR_RESULTS];
/* Copies on their way from this worker thread. */
static __thread int in_flight;

static void count(int result) { atomic_fetch_add_explicit(&counts[result], 1, memory_order_relaxed); }

static void on_done(void *ud, int status, const char *err) {
    (void)ud;
    (void)err;
    in_flight--;
    count(status ? SL_MIRROR_SENT : SL_MIRROR_FAILED);
}

/* Fields not copied: hop-by-hop ones, and the framing the copy sets itself. */
static bool skipped(const sl_h1_header_t *h) {
    return h->hop || SL_IEQ(h->name, "content-length") || SL_IEQ(h->name, "transfer-encoding") ||
           SL_IEQ(h->name, "expect");
}

/* The request as the mirror gets it; false when out of memory. */
static bool build(sl_req_t *r, sl_wbuf_t *b) {
    const sl_h1_head_t *hd = &r->head;
    bool ok = sl_wbuf_put(b, hd->method.p, hd->method.len) && SL_WBUF_LIT(b, " ") && sl_wbuf_put(b, hd->target.p, hd->target.len) &&
              SL_WBUF_LIT(b, " HTTP/1.1\r\n");
    bool has_host = false;
    for (int i = 0; ok && i < hd->nheaders; i++) {
        const sl_h1_header_t *h = &hd->headers[i];
        if (skipped(h)) continue;
        has_host |= SL_IEQ(h->name, "host");
        ok = sl_wbuf_put(b, h->name.p, h->name.len) && SL_WBUF_LIT(b, ": ") && sl_wbuf_put(b, h->value.p, h->value.len) &&
             SL_WBUF_LIT(b, "\r\n");
    }
    if (ok && !has_host && r->host_len) ok = SL_WBUF_LIT(b, "Host: ") && sl_wbuf_put(b, r->host, r->host_len) && SL_WBUF_LIT(b, "\r\n");
    size_t body = r->body_buffered ? r->heap_len : 0;
    char cl[48];
    int n = snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", body);
    if (ok && (body || hd->body_kind != SL_BODY_NONE)) ok = sl_wbuf_put(b, cl, (size_t)n);
    ok = ok && SL_WBUF_LIT(b, "Connection: close\r\n\r\n");
    if (ok && body) ok = sl_wbuf_put(b, r->heap, body);
    return ok;
}

/* host:port of an address written "IP:PORT", "[v6]:PORT" or "name:PORT". */
static bool split(const char *a, size_t al, const char **host, size_t *hl, int *port) {
    const char *colon = NULL;
    for (size_t i = al; i > 0; i--)
        if (a[i - 1] == ':') {
            colon = a + i - 1;
            break;
        }
    if (!colon || colon == a) return false;
    *port = atoi(colon + 1);
    *host = a;
    *hl = (size_t)(colon - a);
    if (*hl >= 2 && a[0] == '[' && colon[-1] == ']') (*host)++, *hl -= 2;
    return *port > 0 && *port < 65536;
}

int sl_ffi_mirror_count(int result) {
    if (result < 0 || result >= SL_MIRROR_RESULTS) return SL_ERROR;
    count(result);
    return SL_OK;
}

int sl_ffi_mirror_send(sl_req_t *r, const char *upstream, size_t ul, const char *address, size_t al,
                       int max_in_flight, double timeout_ms, const char **err) {
    char hostbuf[64];
    const char *host = NULL;
    size_t hl = 0;
    int port = 0;
    if (ul) {
        const sl_config_t *cfg = r->w->cfg;
        for (size_t u = 0; u < cfg->nupstreams && !host; u++) {
            const sl_upstream_conf_t *uc = &cfg->upstreams[u];
            if (strlen(uc->name) != ul || memcmp(uc->name, upstream, ul) != 0) continue;
            /* the first target that holds an address (a mirror has one target, or any) */
            for (size_t k = 0; k < uc->ntargets && !host; k++) {
                const sl_target_conf_t *t = &uc->targets[k];
                if (!atomic_load_explicit(&t->up, memory_order_acquire)) continue;
                const struct sockaddr *sa = (const struct sockaddr *)&t->addr.ss;
                if (sa->sa_family == AF_INET) {
                    uv_ip4_name((const struct sockaddr_in *)sa, hostbuf, sizeof hostbuf);
                    port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
                } else if (sa->sa_family == AF_INET6) {
                    uv_ip6_name((const struct sockaddr_in6 *)sa, hostbuf, sizeof hostbuf);
                    port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
                } else {
                    continue;
                }
                host = hostbuf, hl = strlen(hostbuf);
            }
        }
        if (!host) {
            *err = "mirror: the upstream has no target with an address";
            count(SL_MIRROR_FAILED);
            return SL_ERROR;
        }
    } else if (!split(address, al, &host, &hl, &port)) {
        *err = "mirror: address must be HOST:PORT";
        return SL_ERROR;
    }
    if (r->head.body_kind != SL_BODY_NONE && !r->body_buffered) {
        /* a body the plugin did not read (over max_body, or of unannounced length) */
        count(SL_MIRROR_TOO_LARGE);
        return SL_MIRROR_TOO_LARGE;
    }
    if (in_flight >= max_in_flight) {
        count(SL_MIRROR_DROPPED);
        return SL_MIRROR_DROPPED;
    }
    sl_wbuf_t b = {0};
    if (!build(r, &b)) {
        free(b.p);
        count(SL_MIRROR_FAILED);
        *err = "mirror: out of memory";
        return SL_ERROR;
    }
    int rc = sl_http_send(r->w, host, hl, port, b.p, b.len, timeout_ms > 0 ? (uint64_t)timeout_ms : 1, on_done,
                          NULL, err);
    free(b.p);
    if (rc != SL_OK) {
        count(SL_MIRROR_FAILED);
        return SL_MIRROR_FAILED;
    }
    in_flight++;
    return SL_MIRROR_SENT;
}

char *sl_mirror_metrics(void) {
    static const char *const names[SL_MIRROR_RESULTS] = {"sent", "failed", "dropped", "too_large"};
    return sl_metrics_result_counters("sluice_mirror_requests_total",
                                      "Copies of requests for the mirror plugin, by outcome: sent (the mirror answered), "
                                      "failed (no answer: refused, timeout), dropped (the worker's max_in_flight copies "
                                      "were on their way), too_large (a body over max_body: not copied).",
                                      names, counts, SL_MIRROR_RESULTS);
}
