/* resolver.c — c-ares driven by a libuv loop (resolver.h).
 *
 * c-ares tells which sockets it wants watched (ARES_OPT_SOCK_STATE_CB); each gets a
 * uv_poll_t, and a timer wakes the channel at its next timeout (ares_timeout). Nothing
 * here waits: a lookup is a few datagrams and a callback later on the same loop.
 */
#include "net/resolver.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

const char *const sl_dns_result_names[SL_DNS_RESULTS] = {
    [SL_DNS_OK] = "ok", [SL_DNS_NXDOMAIN] = "nxdomain", [SL_DNS_NODATA] = "nodata",
    [SL_DNS_TIMEOUT] = "timeout", [SL_DNS_ERROR] = "error"};

typedef struct sl_dns_sock_s {
    struct sl_dns_sock_s *next;
    sl_resolver_t *r;
    ares_socket_t fd;
    uv_poll_t poll;
} sl_dns_sock_t;

struct sl_resolver_s {
    uv_loop_t *loop;
    ares_channel ch;
    unsigned attempts;     /**< conf's: rounds over the nameservers, each try `timeout` */
    uv_timer_t timer;
    sl_dns_sock_t *socks;
    unsigned open_handles; /**< the timer and each poll not closed yet */
    bool closing;
};

typedef struct {
    sl_resolver_t *r;
    sl_resolve_cb cb;
    void *ud;
    uint16_t port;
    bool ipv6;
    unsigned tries_left; /**< rounds still to go after this one */
    char host[];
} sl_dns_query_t;

static void ask(sl_dns_query_t *q);

static void resolver_closed(uv_handle_t *h);
static void on_timer(uv_timer_t *t);

static void rearm(sl_resolver_t *r) {
    if (r->closing) return;
    struct timeval tv, *t = ares_timeout(r->ch, NULL, &tv);
    if (!t) {
        uv_timer_stop(&r->timer);
        return;
    }
    uint64_t ms = (uint64_t)t->tv_sec * 1000 + (uint64_t)(t->tv_usec + 999) / 1000;
    uv_timer_start(&r->timer, on_timer, ms, 0);
}

static void on_timer(uv_timer_t *t) {
    sl_resolver_t *r = SL_CONTAINER_OF(t, sl_resolver_t, timer);
    ares_process_fd(r->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    rearm(r);
}

static void on_poll(uv_poll_t *p, int status, int events) {
    sl_dns_sock_t *s = p->data;
    sl_resolver_t *r = s->r;
    /* an error on the socket: let c-ares read it and see the failure */
    ares_socket_t rfd = (events & UV_READABLE) || status < 0 ? s->fd : ARES_SOCKET_BAD;
    ares_socket_t wfd = (events & UV_WRITABLE) || status < 0 ? s->fd : ARES_SOCKET_BAD;
    ares_process_fd(r->ch, rfd, wfd);
    rearm(r);
}

static void sock_closed(uv_handle_t *h) {
    sl_dns_sock_t *s = h->data;
    sl_resolver_t *r = s->r;
    free(s);
    resolver_closed((uv_handle_t *)&r->timer);
}

static void on_sock_state(void *data, ares_socket_t fd, int readable, int writable) {
    sl_resolver_t *r = data;
    sl_dns_sock_t **pp = &r->socks, *s;
    while ((s = *pp) && s->fd != fd) pp = &s->next;
    if (!readable && !writable) {
        if (!s) return;
        *pp = s->next;
        uv_poll_stop(&s->poll);
        uv_close((uv_handle_t *)&s->poll, sock_closed);
        return;
    }
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return; /* the lookup times out */
        s->r = r;
        s->fd = fd;
        if (uv_poll_init_socket(r->loop, &s->poll, fd) != 0) {
            free(s);
            return;
        }
        s->poll.data = s;
        r->open_handles++;
        s->next = r->socks;
        r->socks = s;
    }
    uv_poll_start(&s->poll, (readable ? UV_READABLE : 0) | (writable ? UV_WRITABLE : 0), on_poll);
}

int sl_resolver_new(uv_loop_t *loop, const sl_resolver_conf_t *conf, sl_resolver_t **out, const char **err) {
    static int lib_ready;
    if (!lib_ready) {
        if (ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS) {
            *err = "c-ares: library init failed";
            return SL_ERROR;
        }
        lib_ready = 1;
    }
    sl_resolver_t *r = calloc(1, sizeof *r);
    if (!r) {
        *err = "out of memory";
        return SL_ERROR;
    }
    r->loop = loop;
    struct ares_options o = {0};
    o.sock_state_cb = on_sock_state;
    o.sock_state_cb_data = r;
    /* One try per nameserver per round, and the rounds are ours (on_answer): c-ares 1.18
     * doubles the timeout on each of its own rounds, so `timeout` would not be per try. */
    o.timeout = (int)(conf->timeout_ms ? conf->timeout_ms : 1000);
    o.tries = 1;
    r->attempts = conf->attempts ? conf->attempts : 2;
    o.lookups = (char *)"fb"; /* /etc/hosts, then DNS */
    int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS;
    int rc = ares_init_options(&r->ch, &o, mask);
    if (rc != ARES_SUCCESS) {
        *err = "c-ares: cannot set up a channel (is /etc/resolv.conf readable?)";
        free(r);
        return SL_ERROR;
    }
    if (conf->nameservers && ares_set_servers_ports_csv(r->ch, conf->nameservers) != ARES_SUCCESS) {
        *err = "c-ares: the nameservers were refused";
        ares_destroy(r->ch);
        free(r);
        return SL_ERROR;
    }
    uv_timer_init(loop, &r->timer);
    uv_unref((uv_handle_t *)&r->timer);
    r->open_handles = 1;
    *out = r;
    return SL_OK;
}

static int result_of(int status) {
    switch (status) {
    case ARES_SUCCESS: return SL_DNS_OK;
    case ARES_ENOTFOUND: return SL_DNS_NXDOMAIN;
    case ARES_ENODATA: return SL_DNS_NODATA;
    case ARES_ETIMEOUT: return SL_DNS_TIMEOUT;
    default: return SL_DNS_ERROR;
    }
}

static void on_answer(void *arg, int status, int timeouts, struct ares_addrinfo *res) {
    (void)timeouts;
    sl_dns_query_t *q = arg;
    if (status == ARES_EDESTRUCTION || status == ARES_ECANCELLED) { /* sl_resolver_free */
        if (res) ares_freeaddrinfo(res);
        free(q);
        return;
    }
    /* no answer, or a server that could not give one: another round while attempts last
     * (an answer that the name has no address is final) */
    if ((status == ARES_ETIMEOUT || status == ARES_ECONNREFUSED || status == ARES_ESERVFAIL) && q->tries_left) {
        if (res) ares_freeaddrinfo(res);
        q->tries_left--;
        ask(q);
        return;
    }
    struct sockaddr_storage addrs[SL_DNS_MAX_ADDRS];
    size_t n = 0;
    uint32_t ttl = UINT32_MAX;
    for (struct ares_addrinfo_node *a = res ? res->nodes : NULL; a && n < SL_DNS_MAX_ADDRS; a = a->ai_next) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
        bool dup = false;
        for (size_t i = 0; i < n && !dup; i++) dup = memcmp(&addrs[i], a->ai_addr, a->ai_addrlen) == 0;
        if (dup) continue;
        memset(&addrs[n], 0, sizeof addrs[n]);
        memcpy(&addrs[n], a->ai_addr, a->ai_addrlen);
        if (a->ai_family == AF_INET)
            ((struct sockaddr_in *)&addrs[n])->sin_port = htons(q->port);
        else
            ((struct sockaddr_in6 *)&addrs[n])->sin6_port = htons(q->port);
        n++;
        if (a->ai_ttl >= 0 && (uint32_t)a->ai_ttl < ttl) ttl = (uint32_t)a->ai_ttl;
    }
    if (res) ares_freeaddrinfo(res);
    int result = result_of(status);
    if (result == SL_DNS_OK && n == 0) result = SL_DNS_NODATA;
    q->cb(q->ud, result, result == SL_DNS_OK ? NULL : ares_strerror(status), addrs, result == SL_DNS_OK ? n : 0,
          ttl == UINT32_MAX ? 0 : ttl);
    free(q);
}

int sl_resolver_query(sl_resolver_t *r, const char *host, uint16_t port, bool ipv6, sl_resolve_cb cb, void *ud) {
    size_t n = strlen(host) + 1;
    sl_dns_query_t *q = malloc(sizeof *q + n);
    if (!q) return SL_ERROR;
    *q = (sl_dns_query_t){r, cb, ud, port, ipv6, r->attempts - 1};
    memcpy(q->host, host, n);
    ask(q);
    return SL_OK;
}

/* One round: each nameserver tried once, `timeout` each (called from on_answer too: c-ares
 * allows a new query from a callback). */
static void ask(sl_dns_query_t *q) {
    sl_resolver_t *r = q->r; /* q may be answered (and freed) before ares_getaddrinfo returns */
    struct ares_addrinfo_hints h = {0};
    h.ai_family = q->ipv6 ? AF_UNSPEC : AF_INET;
    h.ai_flags = ARES_AI_NOSORT; /* the sort connects a socket per address: order matters not here */
    h.ai_socktype = SOCK_STREAM;
    ares_getaddrinfo(r->ch, q->host, NULL, &h, on_answer, q);
    rearm(r);
}

static void resolver_closed(uv_handle_t *h) {
    sl_resolver_t *r = SL_CONTAINER_OF((uv_timer_t *)h, sl_resolver_t, timer);
    if (--r->open_handles == 0) free(r);
}

void sl_resolver_free(sl_resolver_t *r) {
    if (!r) return;
    r->closing = true;
    ares_destroy(r->ch); /* pending lookups end with ARES_EDESTRUCTION; sockets close */
    while (r->socks) on_sock_state(r, r->socks->fd, 0, 0);
    uv_close((uv_handle_t *)&r->timer, resolver_closed);
}

typedef struct {
    bool done;
    int result;
    size_t n;
    const char *why;
} blocking_t;

static void blocking_done(void *ud, int result, const char *why, const struct sockaddr_storage *addrs, size_t n,
                          uint32_t ttl_s) {
    (void)addrs, (void)ttl_s;
    blocking_t *b = ud;
    *b = (blocking_t){true, result, n, why};
}

int sl_resolve_blocking(const sl_resolver_conf_t *conf, const char *host, uint16_t port, size_t *naddrs,
                        const char **why) {
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0) {
        *why = "cannot make a loop";
        return SL_DNS_ERROR;
    }
    sl_resolver_t *r;
    blocking_t b = {0};
    if (sl_resolver_new(&loop, conf, &r, why) != SL_OK) {
        uv_loop_close(&loop);
        return SL_DNS_ERROR;
    }
    uv_ref((uv_handle_t *)&r->timer);
    if (sl_resolver_query(r, host, port, conf->ipv6, blocking_done, &b) == SL_OK)
        while (!b.done && uv_run(&loop, UV_RUN_ONCE)) {
        }
    sl_resolver_free(r);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    *naddrs = b.n;
    *why = b.done ? b.why : "no answer";
    return b.done ? b.result : SL_DNS_TIMEOUT;
}
