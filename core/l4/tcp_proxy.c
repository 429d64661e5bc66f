/* tcp_proxy.c — `protocol: tcp` listeners: accept, choose a target, connect, then move
 * bytes both ways until both directions are over (contract in tcp_proxy.h).
 *
 * The sockets are the session's own, not uv_tcp streams: the same direction switches
 * between read/write and splice(2) as its traffic changes, and splice needs the raw
 * descriptors. They are driven from the worker's own epoll set (one per worker, watched
 * by one uv_poll on its descriptor): each socket is added once, edge-triggered for
 * reading and writing, and leaves the set when it is closed. A uv_poll per socket cost
 * libuv's bookkeeping on every change of interest (EPOLL_CTL_DEL then ADD, and a DEL at
 * close): 13 epoll_ctl per connection-per-request session, 6 of them libuv's; now 2.
 * Edge-triggered means a side is known readable (crd/urd) from its event until a read
 * finds it dry (a short recv, or any read that says EAGAIN: a short splice is not dry, see
 * dir_fill), and known writable until a write comes up short; a session that stops
 * for fairness (SL_TCP_ROUNDS) with bytes still readable is pumped again from the
 * worker's idle handle, since no new edge would come for them.
 *
 * A direction (client->upstream "in", upstream->client "out") holds waiting bytes in at
 * most one place: a block (copied) or a pipe (spliced), never both, so their order is
 * kept. Invariants, for each direction:
 *   - it reads only when nothing waits: a destination that cannot take bytes stops
 *     reads from the source (its poll drops READABLE), so a session holds at most one
 *     block (64 KiB) or one pipe per direction whatever the throughput;
 *   - a block is taken for a read and given back as soon as it is written out, a pipe is
 *     taken for a splice and given back (empty) as soon as it is drained: an idle
 *     session holds neither, only this struct (688 bytes on x86-64);
 *   - a pipe that still holds bytes when its session ends is closed, never pooled
 *     (HAProxy's rule: a pooled pipe must be empty, or the next session gets its bytes).
 *
 * When splice pays: a direction starts copying; a read that fills the whole block says
 * the source streams, and the next reads splice, until a splice moves less than
 * SL_SPLICE_MIN (interactive traffic again: a read(2) into a pooled block is cheaper
 * than two splices and a pipe). `splice: off` never splices.
 *
 * Ends: EOF from a source is passed on as shutdown(SHUT_WR) once its waiting bytes are
 * written, while the other direction keeps flowing; the session ends when both
 * directions are over. A read error (a reset) ends it at once, and a write error ends
 * that direction with its bytes lost; either way the session closes both sockets with
 * SO_LINGER 0, so the peers see a reset: a FIN would pass a truncated stream off as a
 * complete one.
 */
#include "l4/tcp_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/addr.h"
#include "base/deadline.h"
#include "base/list.h"
#include "base/log.h"
#include "script/lua_host.h"
#include "proto/proxy_protocol.h"
#include "proto/sni.h"
#include "upstream/attempt.h"
#include "upstream/upstreams.h"
#include "ctx/worker.h"

#define SL_TCP_ROUNDS 16      /* reads per direction per wakeup: bounded work, fair to other sessions */
#define SL_TCP_ACCEPTS 64     /* accepts per listener wakeup */
#define SL_TCP_EVENTS 64      /* epoll events per epoll_wait */
#define SL_TCP_WAITS 4        /* epoll_waits per wakeup (the set's uv_poll reports the rest) */
#define SL_SPLICE_MIN 4096    /* a splice that moved less than this: back to copying */
#define SL_PIPE_SIZE (256 * 1024)
#define SL_PIPES_MAX 128      /* pipes per worker, in use or pooled: each holds 2 fds, up to
                                 SL_PIPE_SIZE of kernel memory while bytes are in it, and counts
                                 against the user's pipe-user-pages-soft (64 MiB by default) */
#define SL_PIPES_FREE_MAX 64  /* empty pipes kept for reuse */
#define SL_SESS_FREE_MAX 256  /* session structs kept for reuse */
#define SL_TCP_ATTEMPTS 2     /* connect attempts per session (each on another target) */
#define SL_ACCEPT_PAUSE_MS 100
/* A listener with sni_routes reads at most a PROXY header and a ClientHello before it
 * connects. The server name is kept at the block's very end meanwhile (a length byte,
 * then the name), out of reach of those reads and of the PROXY header put in front at
 * connect (SL_PP_ENCODE_MAX), and not in the session struct, which every session of every
 * listener pays for. */
#define SL_PREREAD_SNI_MAX (SL_PP_PARSE_MAX + SL_SNI_MAX_HELLO)
#define SL_SNI_AREA (1 + SL_SNI_NAME_MAX)
_Static_assert(SL_PREREAD_SNI_MAX + SL_PP_ENCODE_MAX + SL_SNI_AREA <= SL_BLOCK_SIZE,
               "a block holds the preread, the PROXY header sent and the server name");

enum { DIR_IN = 0, DIR_OUT = 1 };
enum { ST_PREREAD = 1, ST_CONNECTING, ST_RETRY, ST_FLOWING, ST_CLOSED };

typedef struct sl_pipe_s {
    struct sl_pipe_s *next;
    int rfd, wfd;
    uint32_t cap; /* F_GETPIPE_SZ: smaller than 64 KiB once the user's pipe pages run low */
} sl_pipe_t;

typedef struct {
    char *buf;         /* a block while copied bytes wait, else NULL */
    uint32_t off, len; /* the waiting bytes: buf[off, off + len) */
    sl_pipe_t *pipe;   /* while spliced bytes wait, else NULL */
    uint32_t in_pipe;
    uint8_t eof;       /* the source sent FIN */
    uint8_t shut;      /* shutdown(SHUT_WR) went to the destination */
    uint8_t broken;    /* the destination refused bytes: over, its bytes lost */
    uint8_t splice;    /* the source streams: the next read splices */
} sl_tcp_dir_t;

typedef struct sl_tcp_sess_s sl_tcp_sess_t;
struct sl_tcp_sess_s {
    sl_deadline_t timer;     /* header, connect or idle timeout, by state */
    sl_worker_t *w;
    sl_list_t link;          /* in the worker's open sessions, or its pool of free structs */
    sl_tcp_sess_t *again;    /* on the worker's again list (pump once more) or retry list */
    int cfd, ufd;
    uint32_t lidx;
    int upstream;            /* the listener's, the one its sni_routes or preread plugins
                                chose, or SL_TCP_DIRECT (an address: `direct`) */
    uint8_t state;           /* ST_* */
    uint8_t crd, urd;        /* the side was reported readable and not read dry since */
    uint8_t chup, uhup;      /* the side reported its peer's FIN (or a hang-up): reads go on
                                to the end, a short read does not mean dry */
    uint8_t queued;          /* on the again or the retry list */
    uint8_t up_open;         /* ufd open (in the epoll set) */
    uint8_t reset;           /* end with a reset toward both peers */
    sl_tries_t tries;        /* targets tried (sized at the first connect) */
    sl_attempt_t att;        /* the current connect's attempt (upstream/attempt.h) */
    sl_sockaddr_t *direct;   /* SL_TCP_DIRECT: the address a preread plugin set (owned);
                                such a session has no balancer, breaker or retry */
    sl_tcp_dir_t d[2];
    sl_sockaddr_t peer;      /* the client: its address, or the source its PROXY header gave */
    sl_sockaddr_t local;     /* what it connected to (for proxy_protocol.send) */
};

typedef struct {
    uv_poll_t poll;
    int fd; /* -1: not a tcp listener, or closed */
} sl_tcp_listener_t;

struct sl_tcpw_s {
    sl_tcp_listener_t *ls;   /* [cfg->nlisteners] */
    int epfd;                /* the sessions' sockets, edge-triggered; -1 once closed */
    uv_poll_t epoll;         /* epfd, in the worker's loop */
    uv_idle_t idle;          /* runs while sessions wait on the again list */
    sl_tcp_sess_t *again;    /* sessions that stopped for fairness with bytes readable */
    sl_tcp_sess_t *retry;    /* sessions to connect again once the current batch is over */
    uint8_t in_batch;        /* inside on_epoll: a retry waits for the batch's end */
    uv_timer_t pause;        /* accepting again after running out of descriptors */
    uv_timer_t drain;        /* shutdown_timeout of the sessions left at drain */
    uint8_t paused, draining, drain_closed;
    sl_list_t sessions;      /* open ones (closing ones are off the list) */
    uint32_t nsessions;      /* not yet freed, closing ones included */
    sl_list_t free_sess;     /* closed structs kept for reuse */
    uint32_t nfree_sess;
    sl_pipe_t *free_pipes;
    uint32_t npipes, nfree_pipes;
};

static void sess_pump(sl_tcp_sess_t *s);
static void sess_connect(sl_tcp_sess_t *s);
static void sess_end(sl_tcp_sess_t *s, bool reset, int result);
static void on_sock(sl_tcp_sess_t *s, bool up, uint32_t events);

static const sl_listener_conf_t *lconf(const sl_tcp_sess_t *s) { return &s->w->cfg->listeners[s->lidx]; }
static int upstream_of(const sl_tcp_sess_t *s) { return s->upstream; }
/* The server name read by preread_sni (valid until the first connect: the block's bytes
 * are then written out and the block given back). */
static char *sni_name(const sl_tcp_sess_t *s) { return s->d[DIR_IN].buf + SL_BLOCK_SIZE - SL_SNI_NAME_MAX; }
static uint8_t *sni_len(const sl_tcp_sess_t *s) { return (uint8_t *)s->d[DIR_IN].buf + SL_BLOCK_SIZE - SL_SNI_AREA; }

/* ---- the pipe pool ---- */

static sl_pipe_t *pipe_get(struct sl_tcpw_s *tw) {
    sl_pipe_t *p = tw->free_pipes;
    if (p) {
        tw->free_pipes = p->next;
        tw->nfree_pipes--;
        return p;
    }
    if (tw->npipes >= SL_PIPES_MAX || !(p = malloc(sizeof *p))) return NULL;
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(p);
        return NULL;
    }
    /* Larger than the kernel's 64 KiB default: a quarter of the splice calls per byte, and
     * about a third less CPU per streamed byte (DECISIONS.md). Refused past pipe-max-size or
     * the user's pipe-user-pages-soft: the default size stays then. */
    fcntl(fds[0], F_SETPIPE_SZ, SL_PIPE_SIZE);
    int cap = fcntl(fds[0], F_GETPIPE_SZ);
    p->rfd = fds[0];
    p->wfd = fds[1];
    p->cap = cap > 0 ? (uint32_t)cap : 4096;
    tw->npipes++;
    return p;
}

static void pipe_close(struct sl_tcpw_s *tw, sl_pipe_t *p) {
    close(p->rfd);
    close(p->wfd);
    free(p);
    tw->npipes--;
}

/* An empty pipe goes back to the pool; one still holding bytes is closed. */
static void pipe_put(struct sl_tcpw_s *tw, sl_pipe_t *p, uint32_t in_pipe) {
    if (in_pipe || tw->nfree_pipes >= SL_PIPES_FREE_MAX || tw->draining) {
        pipe_close(tw, p);
        return;
    }
    p->next = tw->free_pipes;
    tw->free_pipes = p;
    tw->nfree_pipes++;
}

/* ---- attempts: the attempt model shared with HTTP (upstream/attempt.h), on the TCP
 * layer's breaker ---- */

static sl_attempts_of_t attempts_of(const sl_tcp_sess_t *s) {
    return (sl_attempts_of_t){&s->w->cfg->upstreams[upstream_of(s)], &s->w->ug->ups[upstream_of(s)], SL_LAYER_TCP};
}

/* A target for the next connect with its breaker admission, or -1. Targets whose
 * breakers are open are never tried; when every other untried target is unhealthy they
 * are tried anyway (a guess beats a certain refusal), as on HTTP. */
static int pick_target(sl_tcp_sess_t *s, uint8_t *admit) {
    sl_attempts_of_t of = attempts_of(s);
    char key[INET6_ADDRSTRLEN] = "";
    if (of.uc->balancer == SL_LB_CONSISTENT_HASH) /* a TCP session has only its client's address */
        inet_ntop(s->peer.sa.sa_family,
                  s->peer.sa.sa_family == AF_INET ? (void *)&s->peer.in.sin_addr : (void *)&s->peer.in6.sin6_addr,
                  key, sizeof key);
    uint64_t retry_after_ms;
    return sl_attempt_pick(&of, &s->tries, key, strlen(key), admit, &retry_after_ms, sl_now_ms());
}

/* The connect's verdict, once: established is a success (and its time the target's
 * latency), refused or timed out a failure. */
static void attempt_outcome(sl_tcp_sess_t *s, int outcome) {
    if (!s->att.outcome_due || s->upstream == SL_TCP_DIRECT) return;
    sl_attempts_of_t of = attempts_of(s);
    uint64_t now = sl_now_ns();
    sl_attempt_outcome(&of, &s->att, outcome, now / 1000000u);
    if (outcome == SL_OUT_SUCCESS) sl_attempt_observe(&of, &s->att, now);
}

/* The session no longer holds its target (least-conn and p2c count open sessions). */
static void attempt_release(sl_tcp_sess_t *s) {
    if (!s->att.in_flight || s->upstream == SL_TCP_DIRECT) return;
    sl_attempts_of_t of = attempts_of(s);
    sl_attempt_release(&of, &s->att);
}

/* ---- polls and lifetime ---- */

/* Adds a session's socket to the worker's set, once: readable and writable, edge-triggered.
 * The event carries the session with the side in its lowest bit (sessions are malloc'd). */
static int ep_add(sl_tcp_sess_t *s, int fd, bool up) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                             .data.u64 = (uint64_t)(uintptr_t)s | (up ? 1u : 0u)};
    return epoll_ctl(s->w->tcp->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void on_idle(uv_idle_t *h);

/* Pumps s again on the next loop iteration: it stopped for fairness with bytes readable. */
static void sess_again(sl_tcp_sess_t *s) {
    struct sl_tcpw_s *tw = s->w->tcp;
    if (s->queued) return;
    s->queued = 1;
    s->again = tw->again;
    if (!tw->again) uv_idle_start(&tw->idle, on_idle);
    tw->again = s;
}

static void sess_release(struct sl_tcpw_s *tw, sl_tcp_sess_t *s);

/* The worker's set is closed once draining has no session left (it kept the loop alive). */
static void epoll_close(struct sl_tcpw_s *tw) {
    if (tw->epfd < 0) return;
    while (tw->again) { /* every session is closed: those still listed are released here */
        sl_tcp_sess_t *s = tw->again;
        tw->again = s->again;
        s->queued = 0;
        sess_release(tw, s);
    }
    uv_close((uv_handle_t *)&tw->epoll, NULL);
    uv_close((uv_handle_t *)&tw->idle, NULL);
    close(tw->epfd);
    tw->epfd = -1;
}

/* A closed session's struct back to the pool (or freed), once nothing names it. */
static void sess_release(struct sl_tcpw_s *tw, sl_tcp_sess_t *s) {
    if (tw->nfree_sess < SL_SESS_FREE_MAX && !tw->draining) {
        sl_list_push_front(&tw->free_sess, &s->link);
        tw->nfree_sess++;
    } else {
        free(s);
    }
}

static void on_closed(uv_handle_t *h) {
    sl_tcp_sess_t *s = h->data;
    sl_worker_t *w = s->w;
    struct sl_tcpw_s *tw = w->tcp;
    tw->nsessions--;
    if (s->queued)
        s->queued = 2; /* still on the again list: on_idle releases it */
    else
        sess_release(tw, s);
    if (tw->draining && !tw->nsessions && !tw->drain_closed) {
        tw->drain_closed = 1;
        __atomic_store_n(&w->tcp_ended, true, __ATOMIC_RELEASE);
        uv_close((uv_handle_t *)&tw->drain, NULL);
        epoll_close(tw);
    }
}

static void close_upstream(sl_tcp_sess_t *s) {
    if (!s->up_open) return;
    s->up_open = 0;
    /* closing the socket takes it out of the epoll set, events not yet fetched included */
    close(s->ufd);
    s->ufd = -1;
}

/* Ends the session (with RSTs when `reset`), counted by `result` (SL_TCP_END_*: a session
 * whose sides both finished after one of them had failed counts as reset). */
static void sess_end(sl_tcp_sess_t *s, bool reset, int result) {
    if (s->state == ST_CLOSED) return;
    struct sl_tcpw_s *tw = s->w->tcp;
    if (result == SL_TCP_END_CLOSED && s->reset) result = SL_TCP_END_RESET;
    SL_COUNTER_ADD(s->w->metrics.tcp_end[s->lidx * SL_TCP_ENDS + (size_t)result], 1);
    attempt_outcome(s, SL_OUT_CANCEL); /* ended while connecting: no verdict on the target */
    attempt_release(s);
    sl_tries_free(&s->tries);
    if (s->upstream == SL_TCP_DIRECT) {
        free(s->direct);
        s->direct = NULL;
        s->upstream = -1;
    }
    bool flowing = s->state == ST_FLOWING;
    s->state = ST_CLOSED;
    sl_list_remove(&s->link);
    SL_COUNTER_ADD(s->w->metrics.conns_active[s->lidx], -1);
    for (int i = 0; i < 2; i++) {
        sl_tcp_dir_t *d = &s->d[i];
        /* bytes still waiting for a destination that stopped taking them (idle_timeout,
         * shutdown_timeout): they are lost, so that peer must not get a FIN after the
         * bytes it did take, which would pass the stream off as complete. (Before
         * ST_FLOWING the bytes waiting are the preread's, for an upstream never reached.) */
        if (flowing && (d->len || d->in_pipe)) reset = true;
        if (d->buf) sl_block_put(&s->w->blocks, d->buf);
        if (d->pipe) pipe_put(tw, d->pipe, d->in_pipe);
        d->buf = NULL;
        d->pipe = NULL;
    }
    if (reset || s->reset) {
        struct linger lg = {1, 0};
        setsockopt(s->cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        if (s->up_open) setsockopt(s->ufd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close_upstream(s);
    close(s->cfd);
    /* the struct lives until the timer's close callback (the loop's closing phase, after
     * the batch of events that may still name it: on_sock skips a closed session) */
    uv_close((uv_handle_t *)&s->timer.timer, on_closed);
}

/* ---- moving bytes ---- */

/* Writes what waits in d to dst. SL_OK when nothing waits any more, SL_EAGAIN when dst
 * is full, SL_ERROR when dst is gone. */
static int dir_flush(sl_tcp_sess_t *s, sl_tcp_dir_t *d, int dst) {
    ssize_t n;
    if (d->len) {
        do n = send(dst, d->buf + d->off, d->len, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? SL_EAGAIN : SL_ERROR;
        d->off += (uint32_t)n;
        d->len -= (uint32_t)n;
        sl_deadline_set(&s->timer, lconf(s)->idle_timeout_ms); /* a slow reader is not idle */
        if (d->len) return SL_EAGAIN; /* a short write: the socket buffer is full */
        sl_block_put(&s->w->blocks, d->buf);
        d->buf = NULL;
        d->off = 0;
        return SL_OK;
    }
    if (d->in_pipe) {
        /* splice has no MSG_NOSIGNAL: toward a reset peer it raises SIGPIPE, which the
         * process ignores (server.c), and returns EPIPE like send does */
        do n = splice(d->pipe->rfd, NULL, dst, NULL, d->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        while (n < 0 && errno == EINTR);
        if (n < 0) return errno == EAGAIN ? SL_EAGAIN : SL_ERROR;
        d->in_pipe -= (uint32_t)n;
        sl_deadline_set(&s->timer, lconf(s)->idle_timeout_ms);
        if (d->in_pipe) return SL_EAGAIN;
        pipe_put(s->w->tcp, d->pipe, 0);
        d->pipe = NULL;
    }
    return SL_OK;
}

/* Reads once from src into d (nothing waits in d). SL_OK when bytes came or the source
 * ended (d->eof), SL_EAGAIN when it has none now, SL_ERROR on a reset. *dry: a short read
 * emptied the socket (a TCP read takes all there is up to its size), so the next read
 * would only say EAGAIN; not when a FIN was reported, which a read must still meet. */
static int dir_fill(sl_tcp_sess_t *s, sl_tcp_dir_t *d, int src, int di, bool *dry) {
    ssize_t n;
    bool hup = di == DIR_IN ? s->chup : s->uhup;
    if (d->splice && !d->pipe && !(d->pipe = pipe_get(s->w->tcp))) d->splice = 0; /* none left: copy */
    if (d->splice) {
        do n = splice(src, NULL, d->pipe->wfd, NULL, d->pipe->cap, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        while (n < 0 && errno == EINTR);
        if (n > 0) {
            d->in_pipe = (uint32_t)n;
            if (n < SL_SPLICE_MIN) d->splice = 0;
            /* a short splice does not mean the socket is dry: it stops when the pipe runs
             * out of slots (one per skb fragment: a sendfile origin's 4 KiB page pieces
             * fill 64 slots long before 256 KiB), and a nonblocking tcp_splice_read takes
             * one pass over the receive queue only. The next read is what says dry. */
            *dry = false;
            goto moved;
        }
        pipe_put(s->w->tcp, d->pipe, 0);
        d->pipe = NULL;
        if (n == 0) {
            d->eof = 1;
            return SL_OK;
        }
        if (errno == EAGAIN) return SL_EAGAIN;
        if (errno != EINVAL) return SL_ERROR;
        d->splice = 0; /* a socket that cannot splice: copy from now on */
    }
    if (!d->buf && !(d->buf = sl_block_get(&s->w->blocks))) return SL_ERROR;
    do n = recv(src, d->buf, SL_BLOCK_SIZE, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
        d->off = 0;
        d->len = (uint32_t)n;
        /* a full block: the source has more than a block to give, it streams */
        if (n == SL_BLOCK_SIZE && lconf(s)->splice != SL_SPLICE_OFF) d->splice = 1;
        *dry = n < SL_BLOCK_SIZE && !hup;
        goto moved;
    }
    sl_block_put(&s->w->blocks, d->buf);
    d->buf = NULL;
    if (n == 0) {
        d->eof = 1;
        return SL_OK;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK ? SL_EAGAIN : SL_ERROR;
moved:
    SL_COUNTER_ADD(s->w->metrics.tcp_bytes[s->lidx * 2 + (size_t)di], (uint64_t)n);
    sl_deadline_set(&s->timer, lconf(s)->idle_timeout_ms);
    return SL_OK;
}

/* A destination that refused bytes: this direction is over and its bytes are lost; the
 * other one may still deliver what its source sent (an answer before a reset). */
static void dir_break(sl_tcp_sess_t *s, sl_tcp_dir_t *d) {
    if (d->buf) sl_block_put(&s->w->blocks, d->buf);
    if (d->pipe) pipe_put(s->w->tcp, d->pipe, d->in_pipe);
    d->buf = NULL;
    d->pipe = NULL;
    d->len = d->in_pipe = 0;
    d->broken = 1;
    s->reset = 1;
}

/* Moves one direction as far as it goes now: write what waits, pass an EOF on, read more
 * (at most SL_TCP_ROUNDS reads: a busy session must not starve the others). True when it
 * stopped at that bound with the source still readable. */
static bool dir_pump(sl_tcp_sess_t *s, int di) {
    sl_tcp_dir_t *d = &s->d[di];
    int src = di == DIR_IN ? s->cfd : s->ufd, dst = di == DIR_IN ? s->ufd : s->cfd;
    uint8_t *readable = di == DIR_IN ? &s->crd : &s->urd;
    for (int rounds = 0;; rounds++) {
        if (d->broken) return false;
        if (d->len || d->in_pipe) {
            int rc = dir_flush(s, d, dst);
            if (rc == SL_EAGAIN) return false;
            if (rc == SL_ERROR) {
                dir_break(s, d);
                return false;
            }
        }
        if (d->eof) {
            if (!d->shut) {
                d->shut = 1;
                shutdown(dst, SHUT_WR);
            }
            return false;
        }
        if (!*readable) return false;
        if (rounds == SL_TCP_ROUNDS) return true;
        bool dry = false;
        int rc = dir_fill(s, d, src, di, &dry);
        if (rc == SL_EAGAIN || dry) *readable = 0;
        if (rc == SL_EAGAIN) return false;
        if (rc == SL_ERROR) {
            sess_end(s, true, SL_TCP_END_RESET);
            return false;
        }
    }
}

static bool dir_over(const sl_tcp_dir_t *d) { return d->broken || (d->eof && d->shut); }

static void sess_pump(sl_tcp_sess_t *s) {
    bool more = dir_pump(s, DIR_IN);
    if (s->state == ST_FLOWING) more |= dir_pump(s, DIR_OUT);
    if (s->state != ST_FLOWING) return;
    if (dir_over(&s->d[DIR_IN]) && dir_over(&s->d[DIR_OUT])) {
        sess_end(s, false, SL_TCP_END_CLOSED);
        return;
    }
    if (more) sess_again(s);
}

/* ---- connecting ---- */

/* Puts the PROXY header in front of whatever the client sent already. */
static int put_proxy_header(sl_tcp_sess_t *s) {
    uint8_t hdr[SL_PP_ENCODE_MAX];
    size_t n = sl_pp_encode(lconf(s)->proxy_send, &s->peer, &s->local, hdr);
    sl_tcp_dir_t *d = &s->d[DIR_IN];
    if (!d->buf) {
        if (!(d->buf = sl_block_get(&s->w->blocks))) return SL_ERROR;
        d->off = d->len = 0;
    }
    /* the preread left SL_PP_ENCODE_MAX bytes free at the end of the block */
    if (d->off < n) {
        memmove(d->buf + n, d->buf + d->off, d->len);
        d->off = (uint32_t)n;
    }
    d->off -= (uint32_t)n;
    d->len += (uint32_t)n;
    memcpy(d->buf + d->off, hdr, n);
    return SL_OK;
}

static void connected(sl_tcp_sess_t *s) {
    attempt_outcome(s, SL_OUT_SUCCESS);
    s->state = ST_FLOWING;
    if (lconf(s)->proxy_send && put_proxy_header(s) != SL_OK) {
        sess_end(s, true, SL_TCP_END_ERROR);
        return;
    }
    sl_deadline_set(&s->timer, lconf(s)->idle_timeout_ms);
    sess_pump(s); /* the polls tell when either side has bytes */
}

static void connect_failed(sl_tcp_sess_t *s, int err) {
    const sl_listener_conf_t *lc = lconf(s);
    if (s->upstream == SL_TCP_DIRECT) {
        char to[64];
        sl__addr_text((const struct sockaddr_storage *)(const void *)s->direct, to, sizeof to);
        sl_log_warn("listener %s: connect to %s (set by a preread plugin) failed: %s", lc->name, to,
                    err == ETIMEDOUT ? "timed out" : strerror(err));
        close_upstream(s);
        sl_deadline_clear(&s->timer);
        sess_end(s, false, SL_TCP_END_CONNECT_FAILED);
        return;
    }
    const sl_upstream_conf_t *uc = &s->w->cfg->upstreams[upstream_of(s)];
    sl_log_warn("listener %s: connect to %s (upstream %s) failed: %s", lc->name, uc->targets[s->att.target].addr.text,
                uc->name, err == ETIMEDOUT ? "timed out" : strerror(err));
    SL_COUNTER_ADD(s->w->metrics.tcp_connect_fail[s->w->metrics.target_base[upstream_of(s)] + s->att.target], 1);
    attempt_outcome(s, SL_OUT_FAILURE);
    attempt_release(s);
    close_upstream(s);
    sl_deadline_clear(&s->timer);
    if (s->tries.attempts < SL_TCP_ATTEMPTS && s->tries.attempts < uc->ntargets) {
        struct sl_tcpw_s *tw = s->w->tcp;
        s->state = ST_RETRY;
        if (!tw->in_batch) {
            sess_connect(s);
            return;
        }
        /* events of this batch may still name the closed socket under this session's
         * upstream side: the new socket is opened after them */
        s->queued = 1;
        s->again = tw->retry;
        tw->retry = s;
    } else {
        sess_end(s, false, SL_TCP_END_CONNECT_FAILED);
    }
}

static void sess_connect(sl_tcp_sess_t *s) {
    sl_worker_t *w = s->w;
    const sl_listener_conf_t *lc = lconf(s);
    const struct sockaddr *sa; /* the client's bytes wait in its socket until connected */
    socklen_t salen;
    uint64_t timeout_ms;
    if (s->upstream == SL_TCP_DIRECT) { /* one address: no balancer, breaker or retry */
        sa = &s->direct->sa;
        salen = sa->sa_family == AF_INET6 ? sizeof s->direct->in6 : sizeof s->direct->in;
        timeout_ms = lc->connect_timeout_ms;
        s->tries.attempts++;
    } else {
        const sl_upstream_conf_t *uc = &w->cfg->upstreams[upstream_of(s)];
        if (!s->tries.words && sl_tries_init(&s->tries, (uint32_t)uc->ntargets, NULL) != SL_OK) {
            sess_end(s, true, SL_TCP_END_ERROR);
            return;
        }
        uint8_t admit = 0;
        int t = pick_target(s, &admit);
        if (t < 0) {
            sl_log_warn("listener %s: no target of upstream %s can take a connection (breakers open or "
                        "every target tried)", lc->name, uc->name);
            sess_end(s, false, SL_TCP_END_UNAVAILABLE);
            return;
        }
        sl_attempts_of_t of = attempts_of(s);
        sl_attempt_begin(&of, &s->tries, &s->att, t, admit, sl_now_ns());
        sa = (const struct sockaddr *)&uc->targets[t].addr.ss;
        salen = uc->targets[t].addr.len;
        timeout_ms = uc->connect_timeout_ms;
    }
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { /* our failure (descriptors), not the target's */
        sl_log_warn("listener %s: cannot open a socket: %s", lc->name, strerror(errno));
        sess_end(s, true, SL_TCP_END_ERROR);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    s->ufd = fd;
    s->up_open = 1;
    s->urd = 0;
    s->state = ST_CONNECTING;
    /* added after connect: a socket not yet connecting polls as hung up (EPOLLHUP) */
    int rc = connect(fd, sa, salen);
    int err = rc == 0 ? 0 : errno;
    if ((rc == 0 || err == EINPROGRESS) && ep_add(s, fd, true) != 0) {
        sl_log_warn("listener %s: cannot watch a socket: %s", lc->name, strerror(errno));
        sess_end(s, true, SL_TCP_END_ERROR);
        return;
    }
    if (rc == 0) {
        connected(s);
        return;
    }
    if (err != EINPROGRESS) {
        connect_failed(s, err);
        return;
    }
    sl_deadline_set(&s->timer, timeout_ms);
}

static int sock_error(int fd) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    return err;
}

/* ---- preread: the PROXY header from the client, the TLS server name ---- */

static void sni_count(sl_tcp_sess_t *s, int result) {
    SL_COUNTER_ADD(s->w->metrics.tcp_sni[s->lidx * SL_SNI_RESULTS + (size_t)result], 1);
}

/* The PROXY header (accept_proxy_protocol): from a trusted peer the first bytes must be
 * one, which is taken off; from anyone else they must not be one. SL_OK when settled,
 * SL_EAGAIN for more bytes, SL_ERROR with *why. */
static int preread_proxy(sl_tcp_sess_t *s, const char **why) {
    const sl_listener_conf_t *lc = lconf(s);
    sl_tcp_dir_t *d = &s->d[DIR_IN];
    if (sl_pp_trusted(lc->proxy_from, lc->nproxy_from, &s->peer.sa)) {
        sl_pp_info_t pi;
        size_t used = 0;
        int rc = sl_pp_parse((const uint8_t *)d->buf, d->len, &pi, &used, why);
        if (rc != SL_OK) return rc;
        if (pi.has_addr) {
            s->peer = pi.src;
            s->local = pi.dst;
        }
        d->off = (uint32_t)used;
        d->len -= (uint32_t)used;
        return SL_OK;
    }
    int k = sl_pp_detect((const uint8_t *)d->buf, d->len);
    if (k == SL_EAGAIN) return SL_EAGAIN;
    if (k == SL_PP_NONE) return SL_OK;
    *why = "a PROXY protocol header from a peer not in accept_proxy_protocol.from";
    return SL_ERROR;
}

/* sni_routes: the upstream for the ClientHello's server name. SL_OK with s->upstream
 * set, SL_EAGAIN for more bytes, SL_ERROR after the session was ended. */
static int preread_sni(sl_tcp_sess_t *s) {
    const sl_listener_conf_t *lc = lconf(s);
    sl_tcp_dir_t *d = &s->d[DIR_IN];
    size_t nlen = 0;
    const char *why = NULL;
    int rc = sl_sni_parse((const uint8_t *)d->buf + d->off, d->len, sni_name(s), &nlen, &why);
    if (rc == SL_EAGAIN) return SL_EAGAIN;
    char peer[64];
    if (rc != SL_OK) {
        sni_count(s, SL_SNI_NOT_TLS);
        sl__addr_text((const struct sockaddr_storage *)(const void *)&s->peer, peer, sizeof peer);
        sl_log_warn("listener %s: closing the connection from %s: %s", lc->name, peer, why);
        sess_end(s, true, SL_TCP_END_REJECTED);
        return SL_ERROR;
    }
    *sni_len(s) = (uint8_t)nlen;
    int result;
    s->upstream = sl_sni_route(lc, sni_name(s), nlen, &result);
    sni_count(s, result); /* no_route: closed in sess_route unless a preread plugin chooses */
    return SL_OK;
}

/* The listener's preread plugins (`plugins:`), at once: SL_OK with s->upstream as they
 * left it, or SL_ERROR after the session was ended (a plugin closed it, or raised). */
static int run_plugins(sl_tcp_sess_t *s) {
    const sl_listener_conf_t *lc = lconf(s);
    struct sl_session_s v = {.w = s->w, .lidx = s->lidx, .cfd = s->cfd, .peer = &s->peer, .upstream = s->upstream};
    if (lc->nsni_routes && *sni_len(s)) {
        v.sni = sni_name(s);
        v.sni_len = *sni_len(s);
    }
    int rc = sl_lua_preread(s->w, &v, s->lidx);
    if (rc != SL_OK) {
        sess_end(s, rc == SL_ERROR, SL_TCP_END_REJECTED); /* a plugin's close() sent its message: end with a FIN */
        return SL_ERROR;
    }
    if (v.upstream == SL_TCP_DIRECT) {
        if (!(s->direct = malloc(sizeof *s->direct))) {
            sess_end(s, true, SL_TCP_END_ERROR);
            return SL_ERROR;
        }
        *s->direct = v.addr;
    }
    s->upstream = v.upstream;
    return SL_OK;
}

/* Once the first bytes are settled (or at accept, without a preread): the plugins, then a
 * connect to where they, sni_routes or the listener say. */
static void sess_route(sl_tcp_sess_t *s) {
    const sl_listener_conf_t *lc = lconf(s);
    if (lc->nplugins && run_plugins(s) != SL_OK) return;
    if (s->upstream == -1) {
        char peer[64];
        sl__addr_text((const struct sockaddr_storage *)(const void *)&s->peer, peer, sizeof peer);
        size_t nlen = lc->nsni_routes ? *sni_len(s) : 0;
        sl_log_info("listener %s: closing the connection from %s: no upstream for it (%s%.*s%s)", lc->name, peer,
                    nlen ? "server name '" : lc->nsni_routes ? "no server name" : "no plugin chose one", (int)nlen,
                    nlen ? sni_name(s) : "", nlen ? "', no sni_routes entry and no default" : "");
        sess_end(s, false, SL_TCP_END_NO_ROUTE);
        return;
    }
    sess_connect(s);
}

/* Reads the connection's first bytes until the PROXY header (accept_proxy_protocol) and
 * the ClientHello (sni_routes) are settled, then connects; the bytes after the PROXY
 * header stay in the block and go to the upstream first. header_timeout bounds it all. */
static void preread(sl_tcp_sess_t *s) {
    const sl_listener_conf_t *lc = lconf(s);
    sl_tcp_dir_t *d = &s->d[DIR_IN];
    if (!d->buf && !(d->buf = sl_block_get(&s->w->blocks))) {
        sess_end(s, true, SL_TCP_END_ERROR);
        return;
    }
    size_t cap = lc->nsni_routes ? SL_PREREAD_SNI_MAX : SL_BLOCK_SIZE - SL_PP_ENCODE_MAX;
    ssize_t n;
    size_t want = cap - d->off - d->len;
    do n = recv(s->cfd, d->buf + d->off + d->len, want, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        s->crd = 0;
        return;
    }
    if (n <= 0) {
        sess_end(s, n < 0, n < 0 ? SL_TCP_END_RESET : SL_TCP_END_CLOSED);
        return;
    }
    d->len += (uint32_t)n;
    /* edge-triggered: a short read left the socket dry, unless a FIN is still to be read */
    s->crd = (size_t)n == want || s->chup;
    /* a trusted peer's header, once taken off, leaves d->off > 0 (a header is never empty);
     * from others the first bytes are judged again on each read, with the same answer */
    if (lc->accept_proxy && !d->off) {
        const char *why = NULL;
        int rc = preread_proxy(s, &why);
        if (rc == SL_EAGAIN) return;
        if (rc != SL_OK) {
            char peer[64];
            sl__addr_text((const struct sockaddr_storage *)(const void *)&s->peer, peer, sizeof peer);
            sl_log_warn("listener %s: closing the connection from %s: %s", lc->name, peer, why);
            sess_end(s, true, SL_TCP_END_REJECTED);
            return;
        }
    }
    if (lc->nsni_routes && preread_sni(s) != SL_OK) return; /* more bytes to come, or ended */
    if (d->len) {
        SL_COUNTER_ADD(s->w->metrics.tcp_bytes[s->lidx * 2 + DIR_IN], d->len);
    } else {
        sl_block_put(&s->w->blocks, d->buf);
        d->buf = NULL;
        d->off = 0;
    }
    sess_route(s);
}

/* ---- events ---- */

/* One epoll event of a session's socket (up: the upstream side). */
static void on_sock(sl_tcp_sess_t *s, bool up, uint32_t events) {
    if (s->state == ST_CLOSED || (s->state == ST_RETRY && up)) return; /* its socket was closed */
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) *(up ? &s->urd : &s->crd) = 1;
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) *(up ? &s->uhup : &s->chup) = 1;
    if (events & EPOLLERR) {
        if (s->state == ST_CONNECTING && up) {
            connect_failed(s, sock_error(s->ufd));
        } else if (s->state == ST_FLOWING) {
            sess_pump(s); /* pass on what the peer sent before it failed, then end */
            sess_end(s, true, SL_TCP_END_RESET);
        } else {
            sess_end(s, true, SL_TCP_END_RESET); /* in preread, or the client failed while connecting */
        }
        return;
    }
    switch (s->state) {
    case ST_PREREAD:
        if (!up && s->crd) preread(s);
        return;
    case ST_CONNECTING:
        /* writable without an error or a hang-up: connected, no SO_ERROR to read (EPOLLERR
         * took the branch above) */
        if (up && (events & EPOLLHUP)) {
            int err = sock_error(s->ufd);
            connect_failed(s, err ? err : ECONNRESET);
        } else if (up && (events & EPOLLOUT)) {
            connected(s);
        }
        return; /* the client's side: its readable mark waits for the connect */
    case ST_FLOWING:
        sess_pump(s);
        return;
    default:
        return;
    }
}

/* The worker's epoll set is readable: its sessions' events, in batches. */
static void on_epoll(uv_poll_t *p, int status, int events) {
    (void)status;
    (void)events;
    struct sl_tcpw_s *tw = p->data;
    struct epoll_event ev[SL_TCP_EVENTS];
    tw->in_batch = 1;
    for (int round = 0; round < SL_TCP_WAITS; round++) {
        int n = epoll_wait(tw->epfd, ev, SL_TCP_EVENTS, 0);
        for (int i = 0; i < n; i++) {
            uint64_t tag = ev[i].data.u64;
            on_sock((sl_tcp_sess_t *)(uintptr_t)(tag & ~(uint64_t)1), tag & 1, ev[i].events);
        }
        if (n < SL_TCP_EVENTS) break;
    }
    tw->in_batch = 0;
    while (tw->retry) {
        sl_tcp_sess_t *s = tw->retry;
        tw->retry = s->again;
        s->queued = 0;
        if (s->state == ST_RETRY) sess_connect(s);
    }
}

static void on_idle(uv_idle_t *h) {
    struct sl_tcpw_s *tw = h->data;
    sl_tcp_sess_t *s = tw->again;
    tw->again = NULL;
    uv_idle_stop(h);
    while (s) {
        sl_tcp_sess_t *next = s->again;
        int gone = s->queued == 2;
        s->queued = 0;
        if (gone)
            sess_release(tw, s);
        else if (s->state == ST_FLOWING)
            sess_pump(s); /* may queue it again */
        s = next;
    }
}

static void on_timer(uv_timer_t *t) {
    sl_tcp_sess_t *s = t->data;
    switch (s->state) {
    case ST_CONNECTING:
        connect_failed(s, ETIMEDOUT);
        return;
    case ST_PREREAD: /* no (complete) first bytes within header_timeout */
        if (lconf(s)->accept_proxy && !s->d[DIR_IN].off &&
            sl_pp_trusted(lconf(s)->proxy_from, lconf(s)->nproxy_from, &s->peer.sa)) {
            /* a trusted peer's header is missing: logged like a malformed one (a header
             * taken off leaves d->off > 0) */
            char peer[64];
            sl__addr_text((const struct sockaddr_storage *)(const void *)&s->peer, peer, sizeof peer);
            sl_log_warn("listener %s: closing the connection from %s: no complete PROXY protocol header within "
                        "header_timeout", lconf(s)->name, peer);
        }
        if (lconf(s)->nsni_routes) sni_count(s, SL_SNI_TIMEOUT);
        sess_end(s, false, SL_TCP_END_TIMEOUT);
        return;
    case ST_FLOWING: /* idle_timeout without a byte either way */
        sess_end(s, false, SL_TCP_END_TIMEOUT);
        return;
    default:
        return;
    }
}

static void sess_start(sl_worker_t *w, uint32_t lidx, int fd, const sl_sockaddr_t *peer) {
    struct sl_tcpw_s *tw = w->tcp;
    const sl_listener_conf_t *lc = &w->cfg->listeners[lidx];
    sl_tcp_sess_t *s = SL_LIST_FIRST(&tw->free_sess, sl_tcp_sess_t, link);
    if (s) {
        sl_list_remove(&s->link);
        tw->nfree_sess--;
    } else if (!(s = malloc(sizeof *s))) {
        close(fd);
        return;
    }
    memset(s, 0, sizeof *s);
    s->w = w;
    if (ep_add(s, fd, false) != 0) {
        close(fd);
        free(s);
        return;
    }
    s->lidx = lidx;
    s->cfd = fd;
    s->ufd = -1;
    s->upstream = lc->upstream;
    s->att.target = -1;
    s->peer = *peer;
    sl_deadline_init(&w->loop, &s->timer, s, on_timer);
    sl_list_push_front(&tw->sessions, &s->link);
    tw->nsessions++;
    SL_COUNTER_ADD(w->metrics.conns_active[lidx], 1);
    SL_COUNTER_ADD(w->metrics.accepted, 1);
    if (lc->proxy_send) {
        socklen_t len = sizeof s->local;
        getsockname(fd, &s->local.sa, &len);
    }
    if (!w->ug) {
        sess_end(s, false, SL_TCP_END_UNAVAILABLE);
        return;
    }
    if (lc->accept_proxy || lc->nsni_routes) {
        s->state = ST_PREREAD; /* the set reports the client's first bytes (or has: added
                                  with bytes waiting, it reports them at once) */
        sl_deadline_set(&s->timer, lc->header_timeout_ms);
        return;
    }
    sess_route(s);
}

/* ---- listeners ---- */

static void on_accept(uv_poll_t *p, int status, int events);

static void on_pause_end(uv_timer_t *t) {
    sl_worker_t *w = t->data;
    struct sl_tcpw_s *tw = w->tcp;
    tw->paused = 0;
    for (size_t i = 0; i < w->cfg->nlisteners; i++)
        if (tw->ls[i].fd >= 0) uv_poll_start(&tw->ls[i].poll, UV_READABLE, on_accept);
}

/* Out of descriptors: the pending connection would wake the loop again and again (level
 * triggered), so accepting stops for a moment instead. */
static void accept_pause(sl_worker_t *w, int err) {
    struct sl_tcpw_s *tw = w->tcp;
    if (tw->paused) return;
    tw->paused = 1;
    sl_log_warn("worker %d: cannot accept TCP connections (%s): pausing for %d ms", w->id, strerror(err),
                SL_ACCEPT_PAUSE_MS);
    for (size_t i = 0; i < w->cfg->nlisteners; i++)
        if (tw->ls[i].fd >= 0) uv_poll_stop(&tw->ls[i].poll);
    uv_timer_start(&tw->pause, on_pause_end, SL_ACCEPT_PAUSE_MS, 0);
}

static void on_accept(uv_poll_t *p, int status, int events) {
    sl_worker_t *w = p->loop->data;
    sl_tcp_listener_t *l = SL_CONTAINER_OF(p, sl_tcp_listener_t, poll);
    uint32_t lidx = (uint32_t)(l - w->tcp->ls);
    if (status < 0) {
        sl_log_err("listener %s: the listening socket failed", w->cfg->listeners[lidx].name);
        return;
    }
    for (int i = 0; i < SL_TCP_ACCEPTS; i++) {
        sl_sockaddr_t peer;
        socklen_t len = sizeof peer;
        int fd = accept4(l->fd, &peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) accept_pause(w, errno);
            return;
        }
        sess_start(w, lidx, fd, &peer);
    }
}

int sl__tcp_listen(sl_worker_t *w, size_t lidx, int fd) {
    struct sl_tcpw_s *tw = w->tcp;
    if (!tw) {
        if (!(tw = calloc(1, sizeof *tw)) || !(tw->ls = calloc(w->cfg->nlisteners, sizeof *tw->ls))) {
            free(tw);
            return UV_ENOMEM;
        }
        for (size_t i = 0; i < w->cfg->nlisteners; i++) tw->ls[i].fd = -1;
        sl_list_init(&tw->sessions);
        sl_list_init(&tw->free_sess);
        if ((tw->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
            int err = -errno;
            free(tw->ls);
            free(tw);
            return err;
        }
        int rc = uv_poll_init(&w->loop, &tw->epoll, tw->epfd);
        if (rc != 0) {
            close(tw->epfd);
            free(tw->ls);
            free(tw);
            return rc;
        }
        tw->epoll.data = tw->idle.data = tw;
        uv_poll_start(&tw->epoll, UV_READABLE, on_epoll);
        uv_idle_init(&w->loop, &tw->idle);
        tw->idle.data = tw;
        uv_timer_init(&w->loop, &tw->pause);
        uv_timer_init(&w->loop, &tw->drain);
        tw->pause.data = tw->drain.data = w;
        w->tcp = tw;
    }
    sl_tcp_listener_t *l = &tw->ls[lidx];
    int rc = uv_poll_init(&w->loop, &l->poll, fd);
    if (rc != 0) return rc;
    l->fd = fd;
    return uv_poll_start(&l->poll, UV_READABLE, on_accept);
}

static void on_drain_deadline(uv_timer_t *t) {
    sl_worker_t *w = t->data;
    struct sl_tcpw_s *tw = w->tcp;
    sl_log_warn("worker %d: shutdown_timeout reached: closing %u TCP session(s)", w->id, tw->nsessions);
    sl_list_t *n, *tmp;
    sl_list_foreach_safe(n, tmp, &tw->sessions) sess_end(SL_LIST_ENTRY(n, sl_tcp_sess_t, link), false, SL_TCP_END_SHUTDOWN);
    /* every socket is closed (reset where bytes waited): a process past its own
     * shutdown_timeout may exit now (server.c) */
    __atomic_store_n(&w->tcp_ended, true, __ATOMIC_RELEASE);
}

void sl__tcp_drain(sl_worker_t *w) {
    struct sl_tcpw_s *tw = w->tcp;
    if (!tw) __atomic_store_n(&w->tcp_ended, true, __ATOMIC_RELEASE);
    if (!tw || tw->draining) return;
    tw->draining = 1;
    for (size_t i = 0; i < w->cfg->nlisteners; i++) {
        sl_tcp_listener_t *l = &tw->ls[i];
        if (l->fd < 0) continue;
        uv_close((uv_handle_t *)&l->poll, NULL);
        close(l->fd); /* new connections are refused from now on */
        l->fd = -1;
    }
    uv_close((uv_handle_t *)&tw->pause, NULL);
    if (!tw->nsessions) {
        tw->drain_closed = 1;
        __atomic_store_n(&w->tcp_ended, true, __ATOMIC_RELEASE);
        uv_close((uv_handle_t *)&tw->drain, NULL);
        epoll_close(tw);
    } else {
        uv_timer_start(&tw->drain, on_drain_deadline, w->cfg->shutdown_timeout_ms, 0);
    }
}

void sl__tcp_cut(sl_worker_t *w) {
    struct sl_tcpw_s *tw = w->tcp;
    if (tw && tw->draining && !tw->drain_closed && tw->nsessions) uv_timer_start(&tw->drain, on_drain_deadline, 0, 0);
}

void sl__tcp_free(sl_worker_t *w) {
    struct sl_tcpw_s *tw = w->tcp;
    if (!tw) return;
    sl_tcp_sess_t *s;
    while ((s = SL_LIST_FIRST(&tw->free_sess, sl_tcp_sess_t, link))) {
        sl_list_remove(&s->link);
        free(s);
    }
    while (tw->free_pipes) {
        sl_pipe_t *p = tw->free_pipes;
        tw->free_pipes = p->next;
        pipe_close(tw, p);
    }
    if (tw->epfd >= 0) close(tw->epfd);
    free(tw->ls);
    free(tw);
    w->tcp = NULL;
}
