/* h2_up.c — HTTP/2 connections to upstream targets (h2_up.h), over the core's HTTP/2
 * client driver (client/h2_client.h: the nghttp2 session, its callbacks, a response's
 * status, fields, head, body, trailers and close). This file keeps the connection's part:
 * TCP and TLS, the per-target lists, the exchange's operations, the event queue, timers.
 *
 * As on the server side (h2.c), the driver's ops (called from inside nghttp2) only record
 * what happened on a stream (its response head is complete, body bytes or the end
 * arrived, its request body was taken, it closed) and the connection acts on the events
 * after nghttp2 returned (h2up_run), from the loop's own callbacks (a read, a write's end,
 * the timer, the idle handle) and never from inside a request's call: an operation a
 * request calls records, sends what nghttp2 then has to send (conn_kick), and leaves any
 * event that made to the idle handle, so no request is ever re-entered from below itself.
 *
 * The request's head is the one proxy.c rebuilt for an HTTP/1.1 upstream (h1_head.c:
 * header edits, X-Forwarded-*, the path a plugin set, the request id, traceparent),
 * translated into an HTTP/2 header list: one builder of upstream heads, whatever the
 * protocol (docs/DECISIONS.md, "Upstream HTTP/2").
 *
 * Flow control: the response body of a stream is copied into one block (its window is the
 * block's size); it is given back to the upstream (sl_h2c_consume) once the client took
 * what was handed, so a slow client backpressures its upstream stream and no other. The
 * connection's window is given back as DATA arrives (the driver's manual_window). The
 * request body goes up from r->upq through the driver's read_body; the upstream's windows
 * pause it, and through it the client's.
 */
#include "http/h2_up.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/list.h"
#include "base/log.h"
#include "client/h2_client.h"
#include "http/h2.h"
#include "http/request.h"

/* A stream's window: its response body block. */
#define H2UP_STREAM_WINDOW (SL_BLOCK_SIZE - 1)
/* The connection's window, given back as DATA arrives. */
#define H2UP_CONN_WINDOW (1 << 24)
/* Streams a connection takes before the peer's SETTINGS said how many it allows. */
#define H2UP_FIRST_STREAMS 100
/* Room first taken for a response's trailer fields; more move to SL_H1_MAX_HEADERS. */
#define H2UP_TRAILERS_FIRST 32

enum { C_CONNECTING = 1, C_READY, C_RETIRED, C_CLOSING };
enum { EV_HEAD = 1, EV_DATA = 2, EV_WRITTEN = 4, EV_CLOSED = 8 };

typedef struct sl_h2up_s sl_h2up_t;

struct sl_h2up_stream_s {
    sl_h2up_t *c;
    sl_exchange_t *x;       /**< the exchange using it; NULL once it left */
    sl_h2c_stream_t h2;     /**< the driver's: id, head_done, remote_done, closed, refused */
    sl__h2_ev_t ev;    /**< EV_* bits waiting for h2up_run; in c->ev while any */
    uint8_t expired, has_body, body_eof;
    char *body;             /**< response body block, or NULL */
    uint32_t blen, bpos;
    sl_outq_t *q;           /**< the request body being taken by the data provider */
    const char *src;        /**< or a whole buffered body (a hedge's): src[soff..slen) */
    size_t slen, soff;
    uint16_t qi;
    size_t qoff;
    uint64_t due;           /**< read timeout (loop ms); 0: none */
    /* The response head as it arrives, until it ends (op_head moves it to r->rhead): a
     * hedged request's other stream may end its head between two frames of this one's. */
    int status;
    sl_h1_header_t *f;      /**< its fields (the request's arena) */
    uint16_t nf;
    sl_list_t link;    /**< in c->streams, newest first */
};

struct sl_h2up_s {
    sl_stream_t s; /* first: the handle's address is the connection's */
    sl_deadline_t timer;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_idle_t idle;
    sl_worker_t *w;
    uint32_t upstream, target;
    sl_tstate_t *ts;            /**< the target's shared state: /status counts */
    sl_h2c_t h2;                /**< the nghttp2 client session (client/h2_client.h) */
    char *out, *rbuf;
    uint32_t olen;
    uint8_t state;              /**< C_* */
    uint8_t writing, in_run, nclose, counted;
    uint8_t handles_closed;     /**< closing: freed once no request holds one of its streams */
    uint8_t settings_known;     /**< the peer's SETTINGS arrived */
    uint32_t nstreams;          /**< streams with a request */
    uint32_t max_streams;       /**< the peer's SETTINGS_MAX_CONCURRENT_STREAMS */
    uint64_t idle_due;          /**< loop ms when an idle connection closes; 0: busy */
    uint64_t connect_due;       /**< loop ms when connecting gives up */
    uint64_t next_due;          /**< when the timer is set to fire; 0: not set */
    sl_list_t link;             /**< in its target's list (sl_idle_list_t.h2) until closing */
    sl_list_t streams; /* newest first */
    sl_list_t ev;      /* streams with events, first come first run */
};

static void h2up_run(sl_h2up_t *c);
static void conn_fail(sl_h2up_t *c, int status, int kind, const char *why);

static const sl_upstream_conf_t *conn_uc(const sl_h2up_t *c) { return &c->w->cfg->upstreams[c->upstream]; }
static uint64_t loop_now(const sl_h2up_t *c) { return uv_now(&c->w->loop); }

/* ---- events ---- */

static void ev_push(sl_h2up_stream_t *st, uint8_t ev) { sl__h2_ev_push(&st->c->ev, &st->ev, ev); }

static void on_idle(uv_idle_t *i) {
    sl_h2up_t *c = SL_CONTAINER_OF(i, sl_h2up_t, idle);
    uv_idle_stop(i);
    h2up_run(c);
}

static bool conn_flush(sl_h2up_t *c, bool soft);

/* Something changed outside the connection's own callbacks (a request wrote, read, ended):
 * what nghttp2 has to send goes now, but no event is acted on from here, the caller's
 * request being on the stack. Events that sending made (a request body taken), an error,
 * or a connection left without streams run on the loop's next turn (the idle handle). */
static void conn_kick(sl_h2up_t *c) {
    if (c->in_run || c->state == C_CLOSING) return;
    if (c->state != C_CONNECTING) {
        c->in_run = 1;
        bool ok = conn_flush(c, true);
        c->in_run = 0;
        if (ok && sl_list_empty(&c->ev) && (c->nstreams || c->idle_due)) return;
    }
    uv_idle_start(&c->idle, on_idle);
}

/* ---- the timer: connect, read timeouts, grpc deadlines, idle ---- */

/* The timer fires at the earliest of the connection's deadlines (on_timer finds which). */
static void conn_schedule(sl_h2up_t *c, uint64_t due) {
    if (c->state == C_CLOSING || (c->next_due && c->next_due <= due)) return;
    c->next_due = due;
    uint64_t now = loop_now(c);
    sl_deadline_set(&c->timer, due > now ? due - now : 1);
}

static void stream_free(sl_h2up_stream_t *st) {
    sl_h2up_t *c = st->c;
    sl__h2_ev_take(&st->ev);
    if (st->body) sl_block_put(&c->w->blocks, st->body);
    sl_list_remove(&st->link);
    sl_h2c_forget(&c->h2, &st->h2);
    sl__h2_mem_free(st);
}

/* ---- the connection's life ---- */

static void conn_free(sl_h2up_t *c) {
    SL_BUG_ON(c->state != C_CLOSING || c->nstreams); /* no exchange holds one of its streams */
    sl_worker_t *w = c->w;
    while (!sl_list_empty(&c->streams)) stream_free(SL_LIST_FIRST(&c->streams, sl_h2up_stream_t, link));
    sl_h2c_fini(&c->h2);
    if (c->out) sl_block_put(&w->blocks, c->out);
    if (c->rbuf) sl_block_put(&w->blocks, c->rbuf);
    free(c);
    w->nupconns--;
}

/* A request whose response was whole may still be reading a stream's block: the
 * connection's memory waits for the last one to leave (stream_detach). */
static void conn_on_close(uv_handle_t *h) {
    sl_h2up_t *c = h->data;
    if (--c->nclose) return;
    c->handles_closed = 1;
    if (!c->nstreams) conn_free(c);
}

/* Closes the connection now; its streams have no request left (conn_fail detached them). */
static void conn_close(sl_h2up_t *c) {
    if (c->state == C_CLOSING) return;
    c->state = C_CLOSING;
    sl_list_remove(&c->link);
    if (c->counted) atomic_fetch_sub(&c->ts->h2_conns, 1);
    c->nclose = 3;
    uv_idle_stop(&c->idle);
    sl_stream_end_tls(&c->s);
    uv_close((uv_handle_t *)&c->s.tcp, conn_on_close);
    uv_close((uv_handle_t *)&c->timer.timer, conn_on_close);
    uv_close((uv_handle_t *)&c->idle, conn_on_close);
}

/* The target's other connections of this worker that are up and carry no stream. */
static uint32_t idle_siblings(const sl_h2up_t *c) {
    const sl_list_t *h = &c->w->ups[c->upstream].idle[c->target].h2, *n;
    uint32_t k = 0;
    sl_list_foreach(n, h) {
        const sl_h2up_t *o = SL_LIST_ENTRY(n, sl_h2up_t, link);
        k += o != c && o->state == C_READY && !o->nstreams && o->idle_due;
    }
    return k;
}

/* No stream left: the idle timeout starts, unless keepalive.max_idle idle connections to
 * the target are kept already (as for an HTTP/1.1 target's pool: a burst that opened
 * several connections leaves at most max_idle behind), or the connection is retired or
 * the worker draining: it closes. */
static void conn_went_idle(sl_h2up_t *c) {
    const sl_upstream_conf_t *uc = conn_uc(c);
    if (c->state == C_RETIRED || c->w->draining || idle_siblings(c) >= uc->keepalive_max_idle) {
        if (c->state != C_CONNECTING) sl_h2c_terminate(&c->h2, NGHTTP2_NO_ERROR);
        c->state = C_RETIRED;
        c->idle_due = loop_now(c) + 1000; /* the GOAWAY goes out, then the close */
        conn_schedule(c, c->idle_due);
        conn_kick(c);
        return;
    }
    c->idle_due = loop_now(c) + uc->keepalive_idle_timeout_ms;
    conn_schedule(c, c->idle_due);
}

static void on_timer(uv_timer_t *t) {
    sl_h2up_t *c = t->data;
    if (c->state == C_CLOSING) return;
    uint64_t now = loop_now(c), next = 0;
    c->next_due = 0;
    if (c->state == C_CONNECTING) {
        if (c->connect_due <= now) {
            conn_fail(c, 504, SL_FAIL_CONNECT, "upstream connect timed out");
            return;
        }
        next = c->connect_due;
    }
    sl_list_t *n, *nx;
    sl_list_foreach_safe(n, nx, &c->streams) {
        sl_h2up_stream_t *st = SL_LIST_ENTRY(n, sl_h2up_stream_t, link);
        sl_exchange_t *x = st->x;
        if (!x) continue;
        sl_req_t *r = x->r;
        if (r->grpc.due && r->grpc.due <= now && !st->expired) {
            x->cb->on_deadline(x);
            continue;
        }
        if (r->grpc.due) next = next && next < r->grpc.due ? next : r->grpc.due;
        if (!st->due) continue;
        if (st->due > now) {
            next = next && next < st->due ? next : st->due;
            continue;
        }
        st->due = 0;
        x->cb->on_failed(x, 504, SL_FAIL_TIMEOUT, "upstream timed out");
    }
    if (c->state == C_CLOSING) return;
    if (!c->nstreams && c->idle_due && c->state != C_CONNECTING) {
        if (c->idle_due <= now) {
            conn_close(c);
            return;
        }
        next = next && next < c->idle_due ? next : c->idle_due;
    }
    if (next) conn_schedule(c, next);
}

/* ---- the driver's ops (client/h2_client.h): they record, h2up_run acts ---- */

static sl_h2up_stream_t *up_stream(sl_h2c_stream_t *s) { return SL_CONTAINER_OF(s, sl_h2up_stream_t, h2); }

static long op_send(void *ud, const uint8_t *data, size_t len) {
    sl_h2up_t *c = ud;
    if (c->writing || c->state == C_CLOSING) return SL_EAGAIN;
    ssize_t n = sl__h2_out_put(&c->w->blocks, &c->out, &c->olen, data, len);
    if (SL_LIKELY(n >= 0)) return (long)n;
    return n == NGHTTP2_ERR_WOULDBLOCK ? SL_EAGAIN : SL_ERROR;
}

static bool copy_str(sl_req_t *r, const uint8_t *p, size_t n, sl_str_t *out) {
    char *s = n ? sl_arena_alloc(&r->arena, n) : (char *)"";
    if (!s) return false;
    if (n) memcpy(s, p, n);
    *out = (sl_str_t){s, n};
    return true;
}

/* One more field in list[0..*n) (the request's arena): room for `first` fields, then for
 * SL_H1_MAX_HEADERS, the head's own bound. NULL past it: the stream is reset (a field
 * silently dropped could be the grpc-status). */
static sl_h1_header_t *push_field(sl_req_t *r, sl_h1_header_t **list, uint16_t *n, uint16_t first,
                                  const uint8_t *name, size_t nl, const uint8_t *value, size_t vl) {
    if (!*list && !(*list = sl_arena_alloc(&r->arena, first * sizeof(sl_h1_header_t)))) return NULL;
    if (*n == SL_H1_MAX_HEADERS) return NULL;
    if (*n == first) {
        sl_h1_header_t *more = sl_arena_alloc(&r->arena, SL_H1_MAX_HEADERS * sizeof(sl_h1_header_t));
        if (!more) return NULL;
        memcpy(more, *list, *n * sizeof(sl_h1_header_t));
        *list = more;
    }
    sl_h1_header_t *x = &(*list)[*n];
    if (!copy_str(r, name, nl, &x->name) || !copy_str(r, value, vl, &x->value)) return NULL;
    x->hop = 0;
    (*n)++;
    return x;
}

static int op_status(void *ud, sl_h2c_stream_t *s, int status) {
    (void)ud;
    sl_h2up_stream_t *st = up_stream(s);
    st->status = status;
    st->nf = 0;
    return 0;
}

static int op_trailer(void *ud, sl_h2c_stream_t *s, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl) {
    (void)ud;
    sl_exchange_t *x = up_stream(s)->x;
    if (!x) return 0;
    sl_req_t *r = x->r;
    return push_field(r, &r->trailers, &r->ntrailers, H2UP_TRAILERS_FIRST, name, nl, value, vl) ? 0 : SL_H2C_RESET;
}

static int op_field(void *ud, sl_h2c_stream_t *s, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl) {
    (void)ud;
    sl_h2up_stream_t *st = up_stream(s);
    if (!st->x) return 0;
    return push_field(st->x->r, &st->f, &st->nf, SL_H1_INLINE_HEADERS, name, nl, value, vl) ? 0 : SL_H2C_RESET;
}

/* The head ended: it becomes the request's response head, whole. */
static void op_head(void *ud, sl_h2c_stream_t *s, bool end) {
    (void)ud;
    sl_h2up_stream_t *st = up_stream(s);
    if (!st->x) return;
    sl_h1_head_t *h = &st->x->r->rhead;
    sl_h1_head_clear(h);
    h->status = st->status;
    h->major = 2;
    for (uint16_t i = 0; i < st->nf; i++) {
        sl_h1_header_t *f = sl_h1_push(h);
        SL_BUG_ON(!f); /* op_field kept to SL_H1_MAX_HEADERS */
        *f = st->f[i];
        if (f->name.len == 14 && memcmp(f->name.p, "content-length", 14) == 0) {
            uint64_t n = 0;
            for (size_t k = 0; k < f->value.len; k++) n = n * 10 + (uint64_t)(f->value.p[k] - '0');
            h->content_length = n;
            h->flags |= SL_H1_HAS_CL;
            f->hop = 1; /* the client's framing is rebuilt */
        }
    }
    h->body_kind = end                                                  ? SL_BODY_NONE
                   : (h->flags & SL_H1_HAS_CL) && h->content_length == 0 ? SL_BODY_NONE
                   : (h->flags & SL_H1_HAS_CL)                          ? SL_BODY_LENGTH
                                                                        : SL_BODY_CHUNKED;
    ev_push(st, EV_HEAD);
}

static void op_end(void *ud, sl_h2c_stream_t *s) {
    (void)ud;
    sl_h2up_stream_t *st = up_stream(s);
    if (st->x) ev_push(st, EV_DATA);
}

/* Into the stream's block, whose size is the stream's window; the window is given back
 * when the client took the bytes (h2_wait). A stream nobody reads gives it back now. */
static int op_data(void *ud, sl_h2c_stream_t *s, const uint8_t *data, size_t len) {
    sl_h2up_t *c = ud;
    sl_h2up_stream_t *st = up_stream(s);
    if (!st->x || st->expired) return 1;
    if (!st->body && !(st->body = sl_block_get(&c->w->blocks))) return SL_H2C_RESET;
    if (len > SL_BLOCK_SIZE - st->blen) return SL_H2C_RESET; /* past its window */
    memcpy(st->body + st->blen, data, len);
    st->blen += (uint32_t)len;
    ev_push(st, EV_DATA);
    return 0;
}

static void op_close(void *ud, sl_h2c_stream_t *s) {
    (void)ud;
    sl_h2up_stream_t *st = up_stream(s);
    if (st->x)
        ev_push(st, EV_CLOSED);
    else
        stream_free(st);
}

/* The request body from r->upq (or a hedge's buffered body), then the end. */
static long op_read_body(void *ud, sl_h2c_stream_t *s, uint8_t *buf, size_t len, bool *eof) {
    (void)ud;
    sl_h2up_stream_t *st = up_stream(s);
    sl_outq_t *q = st->q;
    if (!st->x) return 0; /* deferred: the reset that goes with the detach follows */
    if (st->x->whole) { /* the whole body, then the end */
        size_t n = SL_MIN(len, st->slen - st->soff);
        if (n) memcpy(buf, st->src + st->soff, n);
        st->soff += n;
        *eof = st->soff == st->slen;
        return (long)n;
    }
    size_t n = q ? sl_outq_copy(q, &st->qi, &st->qoff, buf, len) : 0;
    if (q && st->qi == q->niov) {
        st->q = NULL;
        ev_push(st, EV_WRITTEN);
    }
    *eof = !st->q && st->body_eof;
    return (long)n;
}

static void op_settings(void *ud, uint32_t max_streams) {
    sl_h2up_t *c = ud;
    c->max_streams = max_streams;
    c->settings_known = 1;
}

/* Retired: no new stream; nghttp2 closes the ones above last-stream-id with
 * REFUSED_STREAM, and they go again elsewhere. */
static void op_goaway(void *ud, int32_t last_id, uint32_t code) {
    sl_h2up_t *c = ud;
    if (c->state == C_READY) c->state = C_RETIRED;
    sl_log_kv(SL_LOG_INFO, (const char *[]){"upstream", conn_uc(c)->name}, 1,
              "upstream %s sent GOAWAY (last stream %d, code %u): connection retired",
              conn_uc(c)->targets[c->target].addr.text, (int)last_id, code);
}

static const sl_h2c_ops_t h2up_ops = {
    .send = op_send,
    .on_status = op_status,
    .on_field = op_field,
    .on_trailer = op_trailer,
    .on_head = op_head,
    .on_data = op_data,
    .on_end = op_end,
    .on_close = op_close,
    .read_body = op_read_body,
    .on_settings = op_settings,
    .on_goaway = op_goaway,
};

/* ---- running the connection ---- */

static void on_written(uv_write_t *wr, int status) {
    sl_h2up_t *c = SL_CONTAINER_OF(wr, sl_h2up_t, wreq);
    if (c->state == C_CLOSING) return;
    c->writing = 0;
    c->olen = 0;
    if (status < 0) {
        conn_fail(c, 502, SL_FAIL_RESET, "upstream write failed");
        return;
    }
    h2up_run(c);
}

/* Moves what nghttp2 has to send into the output block and writes it: false when the
 * connection failed (soft: left to h2up_run, which meets the failure again and acts). */
static bool conn_flush(sl_h2up_t *c, bool soft) {
    while (c->state != C_CLOSING && !c->writing) {
        const char *why;
        if (sl_h2c_send(&c->h2, &why) != SL_OK) {
            if (!soft) conn_fail(c, 502, SL_FAIL_RESET, why);
            return false;
        }
        if (!c->olen) break;
        uv_buf_t b = uv_buf_init(c->out, c->olen);
        int rc = sl_stream_writev(&c->s, &c->wreq, &b, 1, on_written);
        if (rc < 0) {
            if (!soft) conn_fail(c, 502, SL_FAIL_RESET, "upstream write failed");
            return false;
        }
        if (rc == 0) {
            c->writing = 1;
            return true;
        }
        c->olen = 0;
    }
    if (c->state != C_CLOSING && !c->writing && c->out) {
        sl_block_put(&c->w->blocks, c->out);
        c->out = NULL;
    }
    return c->state != C_CLOSING;
}

/* Acts on one stream's events. The stream (and its request) may be gone afterwards. */
static void stream_run(sl_h2up_stream_t *st) {
    uint8_t ev = sl__h2_ev_take(&st->ev);
    sl_exchange_t *x = st->x;
    if (!x) return;
    if (ev & EV_WRITTEN) {
        if (ev & ~EV_WRITTEN) ev_push(st, ev & ~EV_WRITTEN);
        x->cb->on_written(x);
        return;
    }
    if ((ev & EV_CLOSED) && !st->h2.remote_done && !st->expired) {
        if (st->h2.refused) {
            x->cb->on_refused(x, "upstream refused the stream");
            return;
        }
        char why[96];
        if (st->h2.head_too_big) /* the reset was ours: say why, not the code we sent */
            snprintf(why, sizeof why, "upstream sent a header block over %u bytes",
                     st->c->w->resp_limits->max_header_size);
        else if (st->h2.field_refused)
            snprintf(why, sizeof why, "upstream sent a header block of over %d fields", SL_H1_MAX_HEADERS);
        else
            snprintf(why, sizeof why, "upstream reset the stream (%s)", sl_h2c_code_text(st->h2.close_code));
        x->cb->on_failed(x, 502, SL_FAIL_RESET, why);
        return;
    }
    if (ev & (EV_HEAD | EV_DATA)) {
        if (st->due && !st->h2.remote_done) st->due = loop_now(st->c) + sl__req_upstream_conf(x->r)->read_timeout_ms;
        if (st->h2.remote_done) st->due = 0;
        x->cb->on_readable(x);
    }
}

static void h2up_run(sl_h2up_t *c) {
    if (c->in_run || c->state == C_CLOSING) return;
    c->in_run = 1;
    for (;;) {
        while (!sl_list_empty(&c->ev) && c->state != C_CLOSING)
            stream_run(SL_LIST_FIRST(&c->ev, sl_h2up_stream_t, ev.link));
        if (c->state == C_CLOSING || c->state == C_CONNECTING) break;
        if (!conn_flush(c, false)) break;
        if (sl_list_empty(&c->ev)) break;
    }
    c->in_run = 0;
    if (c->state == C_CLOSING || c->state == C_CONNECTING) return;
    if (!sl_h2c_want_read(&c->h2) && !sl_h2c_want_write(&c->h2) && !c->writing) {
        conn_fail(c, 502, SL_FAIL_RESET, "upstream closed the HTTP/2 session");
        return;
    }
    if (!c->nstreams && !c->idle_due) conn_went_idle(c);
}

/* The connection is gone (an error, the upstream's close, a timeout): every request on it
 * fails, or goes again when its stream was never processed. */
static void conn_fail(sl_h2up_t *c, int status, int kind, const char *why) {
    if (c->state == C_CLOSING) return;
    bool connecting = c->state == C_CONNECTING;
    c->state = C_RETIRED; /* picked by no one from here */
    sl_list_remove(&c->link);
    sl_list_t *n, *nx;
    sl_list_foreach_safe(n, nx, &c->streams) {
        sl_h2up_stream_t *st = SL_LIST_ENTRY(n, sl_h2up_stream_t, link);
        sl_exchange_t *x = st->x;
        if (!x || st->h2.remote_done || st->expired) continue;
        /* a stream never sent, or above a GOAWAY's last-stream-id, reached no application */
        if (!connecting && sl_h2c_unseen(&c->h2, &st->h2))
            x->cb->on_refused(x, why);
        else
            x->cb->on_failed(x, status, kind, why);
    }
    /* requests that completed their response still point at their streams: they leave as
     * they finish (detach frees a stream of a closing connection) */
    sl_list_foreach(n, &c->streams) {
        sl_h2up_stream_t *st = SL_LIST_ENTRY(n, sl_h2up_stream_t, link);
        if (st->x) sl_h2c_stream_gone(&st->h2);
    }
    conn_close(c);
}

/* The handle's address is the connection's (through TLS, its data is the session's). */
static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    sl_h2up_t *c = (sl_h2up_t *)h;
    (void)hint;
    if (!c->rbuf && !(c->rbuf = sl_block_get(&c->w->blocks))) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init(c->rbuf, SL_BLOCK_SIZE);
}

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    sl_h2up_t *c = (sl_h2up_t *)s;
    (void)buf;
    if (c->state == C_CLOSING) return;
    if (nread < 0) {
        conn_fail(c, 502, SL_FAIL_RESET, nread == UV_EOF ? "upstream closed the connection" : uv_strerror((int)nread));
        return;
    }
    if (nread > 0) {
        const char *why;
        if (sl_h2c_feed(&c->h2, c->rbuf, (size_t)nread, &why) != SL_OK) {
            conn_fail(c, 502, SL_FAIL_RESET, why);
            return;
        }
    }
    /* an idle connection holds no read block */
    if (!c->nstreams && c->rbuf) {
        sl_block_put(&c->w->blocks, c->rbuf);
        c->rbuf = NULL;
    }
    h2up_run(c);
}

/* ---- connecting ---- */

/* Submits a stream's request: the rebuilt HTTP/1.1 head (h1_head.c) as an HTTP/2 header
 * list. Connection-specific fields go (RFC 9113 8.2.2), Host becomes :authority, and
 * `te: trailers` says the upstream may answer with trailers (gRPC needs it). */
static bool stream_submit(sl_h2up_stream_t *st) {
    sl_req_t *r = st->x->r;
    const char *p = r->uphead.base, *end = p + r->uphead.len;
    size_t lines = 0;
    for (const char *x = p; (x = memchr(x, '\n', (size_t)(end - x))); x++) lines++;
    nghttp2_nv *nva = sl_arena_alloc(&r->arena, (lines + 4) * sizeof(*nva));
    if (!nva) return false;
    size_t n = 0;
    const char *eol = memchr(p, '\r', (size_t)(end - p));
    const char *sp1 = eol ? memchr(p, ' ', (size_t)(eol - p)) : NULL;
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    if (!sp2) return false;
    bool tls = conn_uc(st->c)->protocol == SL_UP_H2;
#define NV(np, nl, vp, vl) \
    (nva[n++] = (nghttp2_nv){(uint8_t *)(np), (uint8_t *)(vp), (nl), (vl), NGHTTP2_NV_FLAG_NONE})
    NV(":method", 7, p, (size_t)(sp1 - p));
    NV(":scheme", 7, tls ? "https" : "http", tls ? 5u : 4u);
    size_t authority = n++; /* filled from Host */
    nva[authority] = (nghttp2_nv){(uint8_t *)":authority", (uint8_t *)"", 10, 0, NGHTTP2_NV_FLAG_NONE};
    NV(":path", 5, sp1 + 1, (size_t)(sp2 - sp1 - 1));
    NV("te", 2, "trailers", 8);
    for (p = eol + 2; p < end;) {
        eol = memchr(p, '\r', (size_t)(end - p));
        if (!eol || eol == p) break;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (!colon) return false;
        sl_str_t name = {p, (size_t)(colon - p)}, value = {colon + 1, (size_t)(eol - colon - 1)};
        while (value.len && value.p[0] == ' ') value.p++, value.len--;
        p = eol + 2;
        uint8_t flags = NGHTTP2_NV_FLAG_NONE;
        switch (name.len) { /* the names that are the connection's, by length first */
        case 2:
            if (SL_IEQ(name, "te")) continue;
            break;
        case 4:
            if (SL_IEQ(name, "host")) {
                nva[authority].value = (uint8_t *)value.p;
                nva[authority].valuelen = value.len;
                continue;
            }
            break;
        case 7:
            if (SL_IEQ(name, "upgrade")) continue;
            break;
        case 10:
            if (SL_IEQ(name, "connection") || SL_IEQ(name, "keep-alive")) continue;
            break;
        case 11:
            /* a value new on every request never enters HPACK's dynamic table: it would
             * evict the fields that repeat and make each request's header block longer */
            if (SL_IEQ(name, "traceparent")) flags = NGHTTP2_NV_FLAG_NO_INDEX;
            break;
        case 12:
            if (SL_IEQ(name, "x-request-id")) flags = NGHTTP2_NV_FLAG_NO_INDEX;
            break;
        case 16:
            if (SL_IEQ(name, "proxy-connection")) continue;
            break;
        case 17:
            if (SL_IEQ(name, "transfer-encoding")) continue;
            break;
        }
        char *lower = sl_arena_alloc(&r->arena, name.len);
        if (!lower) return false;
        for (size_t i = 0; i < name.len; i++) lower[i] = sl_lower(name.p[i]);
        NV(lower, name.len, value.p, value.len);
        nva[n - 1].flags = flags;
    }
#undef NV
    st->has_body = r->body_buffered ? r->heap_len > 0 : r->head.body_kind != SL_BODY_NONE;
    if (sl_h2c_submit(&st->c->h2, &st->h2, nva, n, st->has_body) < 0) return false;
    atomic_fetch_add(&st->c->ts->h2_streams, 1);
    return true;
}

/* The connection is ready for HTTP/2 (TCP, then TLS with ALPN h2): the preface and
 * SETTINGS go, and the streams waiting for it are submitted. */
static void conn_ready(sl_h2up_t *c) {
    SL_BUG_ON(c->state != C_CONNECTING);
    c->state = C_READY;
    uv_tcp_nodelay(&c->s.tcp, 1);
    if (sl_stream_read_start(&c->s, conn_alloc, conn_on_read) != 0) {
        conn_fail(c, 502, SL_FAIL_CONNECT, "upstream read failed");
        return;
    }
    sl_list_t *n, *nx;
    sl_list_foreach_safe(n, nx, &c->streams) {
        sl_h2up_stream_t *st = SL_LIST_ENTRY(n, sl_h2up_stream_t, link);
        if (st->x && !st->h2.id && !stream_submit(st)) st->x->cb->on_failed(st->x, 502, SL_FAIL_OTHER, "out of memory");
    }
    h2up_run(c);
}

static void conn_on_tls(sl_tls_t *t, int status) {
    sl_h2up_t *c = sl_tls_owner(t);
    if (c->state == C_CLOSING) return;
    char why[300];
    if (status < 0) {
        snprintf(why, sizeof why, "upstream TLS %s", sl_tls_error(t));
        conn_fail(c, 502, SL_FAIL_CONNECT, why);
        return;
    }
    if (!sl_tls_alpn_h2(t)) {
        const sl_upstream_conf_t *uc = conn_uc(c);
        snprintf(why, sizeof why, "upstream %s did not negotiate h2 (ALPN): protocol h2 needs an HTTP/2 target",
                 uc->targets[c->target].addr.text);
        sl_log_kv(SL_LOG_WARN, (const char *[]){"upstream", uc->name}, 1, "%s", why);
        conn_fail(c, 502, SL_FAIL_OTHER, why);
        return;
    }
    conn_ready(c);
}

static void conn_on_connect(uv_connect_t *creq, int status) {
    sl_h2up_t *c = SL_CONTAINER_OF(creq, sl_h2up_t, creq);
    if (c->state == C_CLOSING) return;
    if (status < 0) {
        conn_fail(c, status == UV_ETIMEDOUT ? 504 : 502, SL_FAIL_CONNECT, uv_strerror(status));
        return;
    }
    const sl_tls_target_conf_t *tc = conn_uc(c)->targets[c->target].tls;
    if (tc && tc->rt) {
        c->s.tls = sl_tls_connect(tc->rt, (uv_stream_t *)&c->s.tcp, &c->w->tls_pump, NULL);
        if (c->s.tls && sl_tls_handshake(c->s.tls, conn_on_tls) == 0) return;
        conn_fail(c, 502, SL_FAIL_CONNECT, "upstream TLS handshake failed");
        return;
    }
    conn_ready(c);
}

static sl_h2up_t *conn_new(sl_worker_t *w, uint32_t upstream, uint32_t t) {
    const sl_upstream_conf_t *uc = &w->cfg->upstreams[upstream];
    sl_h2up_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    sl_list_init(&c->ev);
    sl_list_init(&c->streams);
    /* the SETTINGS and the connection's window wait in the session until it is connected */
    const sl_h2c_opts_t opts = {
        .mem = sl__h2_mem(),
        .manual_window = true, /* the requests give the windows back */
        .stream_window = H2UP_STREAM_WINDOW,
        .conn_window = H2UP_CONN_WINDOW,
        .assume_max_streams = H2UP_FIRST_STREAMS,
        .max_head_bytes = w->resp_limits->max_header_size,
    };
    if (sl_h2c_init(&c->h2, &opts, &h2up_ops, c) != SL_OK) {
        free(c);
        return NULL;
    }
    c->w = w;
    c->upstream = upstream;
    c->target = t;
    c->state = C_CONNECTING;
    /* until its own SETTINGS arrive, a connection takes what its siblings were allowed:
     * the streams past the first connection's limit open a second one at once */
    c->max_streams = H2UP_FIRST_STREAMS;
    sl_idle_list_t *l = &w->ups[upstream].idle[t];
    sl_list_t *n;
    sl_list_foreach(n, &l->h2) {
        const sl_h2up_t *o = SL_LIST_ENTRY(n, sl_h2up_t, link);
        if (o->settings_known) {
            c->max_streams = o->max_streams;
            break;
        }
    }
    c->ts = atomic_load(&w->ug->ups[upstream].ts[t]);
    uv_tcp_init(&w->loop, &c->s.tcp);
    c->s.tcp.data = c;
    sl_deadline_init(&w->loop, &c->timer, c, on_timer);
    uv_idle_init(&w->loop, &c->idle);
    c->idle.data = c;
    w->nupconns++;
    atomic_fetch_add(&c->ts->h2_conns, 1);
    c->counted = 1;
    sl_list_push_front(&l->h2, &c->link);
    int rc = uv_tcp_connect(&c->creq, &c->s.tcp, (const struct sockaddr *)&uc->targets[t].addr.ss, conn_on_connect);
    if (rc < 0) {
        conn_close(c);
        return NULL;
    }
    c->connect_due = loop_now(c) + uc->connect_timeout_ms;
    conn_schedule(c, c->connect_due);
    return c;
}

/* ---- what a request asks of its stream ---- */

/* A connection to the target with a stream free, the most recent first. */
static sl_h2up_t *conn_pick(sl_worker_t *w, uint32_t upstream, uint32_t t) {
    sl_list_t *n;
    sl_list_foreach(n, &w->ups[upstream].idle[t].h2) {
        sl_h2up_t *c = SL_LIST_ENTRY(n, sl_h2up_t, link);
        if ((c->state == C_READY || c->state == C_CONNECTING) && c->nstreams < c->max_streams) return c;
    }
    return NULL;
}

/* ---- the exchange (exchange.h) over a stream ---- */

/* The exchange leaves its stream: a stream still open is reset (CANCEL), its connection
 * stays. */
static void stream_detach(sl_exchange_t *x) {
    sl_h2up_stream_t *st = x->u.stream;
    sl_h2up_t *c = st->c;
    SL_BUG_ON(st->x != x || !c->nstreams);
    x->u.stream = NULL;
    x->state = SL_X_FREE;
    st->x = NULL;
    st->q = NULL;
    c->nstreams--;
    if (st->h2.id) atomic_fetch_sub(&c->ts->h2_streams, 1);
    if (c->state == C_CLOSING) { /* freed with the connection */
        if (c->handles_closed && !c->nstreams) conn_free(c);
        return;
    }
    if (st->body) {
        sl_block_put(&c->w->blocks, st->body);
        st->body = NULL;
    }
    if (!st->h2.id || st->h2.closed)
        stream_free(st);
    else /* a stream still open on either side is cancelled; nghttp2 closes it (and it is
          * freed: op_close) once the RST_STREAM went */
        sl_h2c_cancel(&c->h2, &st->h2);
    if (!c->nstreams) c->idle_due = 0; /* h2up_run starts the idle timeout */
    conn_kick(c);
}

static int h2_start(sl_exchange_t *x) {
    SL_BUG_ON(x->state != SL_X_FREE);
    sl_req_t *r = x->r;
    sl_worker_t *w = r->w;
    uint32_t up = (uint32_t)r->upstream, t = (uint32_t)x->att.target;
    sl_h2up_t *c = conn_pick(w, up, t);
    if (!c && !(c = conn_new(w, up, t))) return UV_ENOMEM;
    sl_h2up_stream_t *st = sl__h2_calloc(sizeof(*st));
    if (!st) return UV_ENOMEM;
    st->c = c;
    st->x = x;
    sl_list_push_front(&c->streams, &st->link);
    c->nstreams++;
    c->idle_due = 0;
    x->u.stream = st;
    x->state = SL_X_OPEN;
    x->sent = 0;
    if (x->whole) {
        /* a hedge: the rebuilt head and the buffered body (if any) go at once, and the
         * read timeout runs from now */
        st->src = r->body_buffered ? r->heap : NULL;
        st->slen = r->body_buffered ? r->heap_len : 0;
        st->body_eof = 1;
        x->sent = 1;
        st->due = loop_now(c) + sl__req_upstream_conf(r)->read_timeout_ms;
        conn_schedule(c, st->due);
    }
    if (!r->grpc.due && sl_h1_find(&r->head, "grpc-timeout", 12)) r->grpc.due = sl__req_grpc_due(r, loop_now(c));
    if (r->grpc.due) conn_schedule(c, r->grpc.due);
    if (c->state == C_READY) {
        if (!stream_submit(st)) {
            x->u.stream = NULL;
            x->state = SL_X_FREE;
            st->x = NULL;
            c->nstreams--;
            stream_free(st);
            return UV_ENOMEM;
        }
        conn_kick(c);
    }
    return 0;
}

static void stream_resume(sl_h2up_stream_t *st) {
    sl_h2c_resume(&st->c->h2, &st->h2);
    conn_kick(st->c);
}

/* The stream's data provider copies q; on_written follows once it took everything. */
static int h2_write(sl_exchange_t *x, sl_outq_t *q) {
    SL_BUG_ON((x->state != SL_X_OPEN && x->state != SL_X_HEAD) || x->whole || x->sent);
    sl_h2up_stream_t *st = x->u.stream;
    st->q = q;
    st->qi = 0;
    st->qoff = 0;
    q->writing = 1;
    stream_resume(st);
    return 0;
}

static void h2_end_request(sl_exchange_t *x) {
    SL_BUG_ON(!x->sent || x->state == SL_X_FREE);
    sl_h2up_stream_t *st = x->u.stream;
    if (st->body_eof) return;
    st->body_eof = 1;
    stream_resume(st);
}

static int h2_head(sl_exchange_t *x, int *kind, const char **why) {
    (void)kind;
    (void)why;
    SL_BUG_ON(x->state != SL_X_OPEN);
    if (!x->u.stream->h2.head_done) return SL_EAGAIN;
    x->state = SL_X_HEAD;
    return SL_OK;
}

static int h2_peek(sl_exchange_t *x, const char **why) {
    (void)why;
    return x->state != SL_X_FREE && x->u.stream->h2.head_done ? SL_OK : SL_EAGAIN;
}

static int h2_body(sl_exchange_t *x, uint32_t room, sl_body_cb cb, void *ud, const char **why) {
    SL_BUG_ON(x->state != SL_X_HEAD);
    sl_h2up_stream_t *st = x->u.stream;
    (void)room; /* one piece per call: what the block holds */
    if (st->expired) return SL_DONE;
    if (st->bpos < st->blen) {
        uint32_t n = st->blen - st->bpos;
        if (cb(ud, st->body + st->bpos, n)) {
            *why = "response body refused";
            return SL_ERROR;
        }
        st->bpos += n;
        return SL_OK;
    }
    return st->h2.remote_done ? SL_DONE : SL_EAGAIN;
}

/* Everything handed went to the client: the block starts over and its bytes go back to the
 * upstream's window. */
static int h2_wait(sl_exchange_t *x, const char **why) {
    (void)why;
    SL_BUG_ON(x->state != SL_X_HEAD);
    sl_h2up_stream_t *st = x->u.stream;
    if (st->bpos != st->blen || !st->blen) return SL_OK;
    sl_h2c_consume(&st->c->h2, &st->h2, st->blen);
    st->blen = st->bpos = 0;
    if (st->body) {
        sl_block_put(&st->c->w->blocks, st->body);
        st->body = NULL;
    }
    conn_kick(st->c);
    return SL_OK;
}

/* Streams of one connection do not stop its reads: flow control holds a slow client's. */
static void h2_pause(sl_exchange_t *x) { (void)x; }

static void h2_arm(sl_exchange_t *x, uint64_t ms) {
    SL_BUG_ON(x->state == SL_X_FREE);
    sl_h2up_stream_t *st = x->u.stream;
    st->due = ms ? loop_now(st->c) + ms : 0;
    if (ms) conn_schedule(st->c, st->due);
}

/* A connection's failure is told as a refusal (on_refused) when nothing was processed. */
static bool h2_stale(const sl_exchange_t *x) {
    (void)x;
    return false;
}

static void h2_finish(sl_exchange_t *x) {
    SL_BUG_ON(x->state != SL_X_HEAD);
    stream_detach(x);
}

static void h2_cancel(sl_exchange_t *x) {
    if (x->state == SL_X_FREE) return;
    stream_detach(x);
}

/* The stream is cut short (a grpc-timeout passed, the upstream failed mid-response):
 * reset toward the upstream, and body says SL_DONE from now on. */
static void h2_cut(sl_exchange_t *x) {
    SL_BUG_ON(x->state != SL_X_HEAD);
    sl_h2up_stream_t *st = x->u.stream;
    st->expired = 1;
    st->due = 0;
    if (st->h2.id && !st->h2.closed && st->c->state != C_CLOSING) {
        sl_h2c_reset(&st->c->h2, &st->h2, NGHTTP2_CANCEL);
        conn_kick(st->c);
    }
}

const sl_exchange_ops_t sl__exchange_h2 = {
    .name = "h2",
    .flags = SL_XF_FRAMES | SL_XF_REFUSALS | SL_XF_TRAILERS,
    .start = h2_start,
    .write = h2_write,
    .end_request = h2_end_request,
    .head = h2_head,
    .peek = h2_peek,
    .body = h2_body,
    .wait = h2_wait,
    .pause = h2_pause,
    .arm = h2_arm,
    .stale = h2_stale,
    .finish = h2_finish,
    .cancel = h2_cancel,
    .cut = h2_cut,
    .take_conn = NULL,
};

void sl__h2up_drain(sl_worker_t *w) {
    for (size_t i = 0; i < w->cfg->nupstreams; i++)
        for (size_t t = 0; t < w->cfg->upstreams[i].ntargets; t++) {
            sl_list_t *n, *nx;
            sl_list_foreach_safe(n, nx, &w->ups[i].idle[t].h2) {
                sl_h2up_t *c = SL_LIST_ENTRY(n, sl_h2up_t, link);
                if (c->nstreams) continue; /* it closes when its last stream ends */
                if (c->state == C_CONNECTING)
                    conn_close(c);
                else
                    conn_went_idle(c);
            }
        }
}
