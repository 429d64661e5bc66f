/* h2.c — HTTP/2 server connections over nghttp2 (h2.h).
 *
 * nghttp2 frames, decodes HPACK, validates the HTTP/2 message rules (pseudo-headers,
 * lower-case names, connection-specific fields, content-length against DATA) and keeps
 * the flow-control windows; sluice owns the socket, the buffers, the request model and
 * the limits. Every nghttp2 callback only records what happened on a stream (an event:
 * its head is complete, body bytes or the end arrived, a response write was taken, the
 * stream closed) and the session acts on the events after nghttp2 returned (h2_run), so a
 * request never runs inside nghttp2.
 *
 * Request body: DATA is copied into the stream's body block; read_body hands the request
 * what is buffered, and the block is compacted once the request waits for more
 * (wait_body: everything handed was written upstream). Only then is the stream's window
 * given back (nghttp2_session_consume_stream), so a stream never holds more than its
 * initial window (65,535 bytes: one block) and a slow upstream backpressures the client.
 * The connection's window is given back as DATA arrives: streams do not block each other.
 *
 * Response: write_head builds the header list (copied into the request's arena); the first
 * write submits it with a data provider that copies r->clq into DATA frames, and the
 * request hears sl__req_on_written once nghttp2 took the whole queue. Frames are copied
 * into one output block per connection; while it is being written nghttp2 waits
 * (NGHTTP2_ERR_WOULDBLOCK), so a client that reads slowly stops the data providers and,
 * through them, the upstreams' reads.
 */
#include "http/h2.h"

#include <assert.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/list.h"
#include "base/log.h"
#include "base/wbuf.h"
#include "http/request.h"

/* Events a stream has for h2_run, as bits. */
enum { EV_BEGIN = 1, EV_DATA = 2, EV_WRITTEN = 4, EV_CLOSED = 8 };

/* A stream's window and its body block: the client never has more in flight than this. */
#define H2_STREAM_WINDOW 65535
/* The connection's window: given back as DATA arrives, so a stream waiting does not stall
 * the others. */
#define H2_CONN_WINDOW (1 << 20)
/* A header block may span this many frames (HEADERS + CONTINUATION). */
#define H2_MAX_HEADER_FRAMES 32
/* Empty DATA frames (without END_STREAM) in a row: past this the connection is closed
 * (CVE-2019-9518). */
#define H2_MAX_EMPTY_FRAMES 1000
/* WINDOW_UPDATEs are answers to DATA sent and PRIORITY frames come with streams: more than
 * this many per DATA frame sent (per stream opened), beyond a first allowance, close the
 * connection (Envoy's bounds; CVE-2019-9513 and the WINDOW_UPDATE flood). */
#define H2_WU_PER_DATA 10
#define H2_PRIORITY_PER_STREAM 100
#define H2_CONTROL_ALLOWANCE 1000
/* SETTINGS come once at the start and seldom after (a window change): past this many, plus
 * one per stream opened, a client that reads every ACK is still a flood (nghttp2 only bounds
 * the ACKs it has queued, i.e. a client that does not read). */
#define H2_SETTINGS_ALLOWANCE 100
/* Rapid reset (CVE-2023-44487): RST_STREAM frames from the client draw on a bucket of this
 * many, refilled at this many a second: nghttp2 1.57's stream reset limit (Debian's 1.52
 * has it backported), which answers INTERNAL_ERROR; sluice's, checked as each RST_STREAM
 * begins and so first, answers ENHANCE_YOUR_CALM, as the RFC's code for excess load. */
#define H2_RESET_BURST 1000
#define H2_RESET_PER_SEC 33
/* How long a connection that said its last word waits for the client to close it. */
#define H2_LINGER_MS 2000

typedef struct sl_h2_stream_s sl_h2_stream_t;
struct sl_h2_stream_s {
    sl_downstream_t ds; /* ds.req: the stream's request until it finishes */
    sl_h2_t *h;
    int32_t id;
    /* the request */
    char *body;             /**< body block, or NULL */
    uint32_t blen, bpos;    /**< bytes buffered; handed to the request */
    uint32_t hdr_bytes;     /**< header list size so far (RFC 9113 6.5.2's count) */
    uint16_t status_err;    /**< an answer the head earned instead of routing (400, 405, 417, 431) */
    uint16_t ncookies;
    sl_str_t authority;
    uint8_t malformed;      /**< the head broke a rule of RFC 9113 8.1.1: a stream error */
    uint8_t headers_done;   /**< the request's HEADERS were all received */
    uint8_t began;          /**< sl__req_begin (or the head's error answer) ran */
    uint8_t remote_done;    /**< END_STREAM received */
    uint8_t done_told;      /**< read_body said SL_DONE */
    uint8_t nclosed;        /**< nghttp2 closed the stream */
    /* the response */
    uint8_t submitted, bodiless, deferred, eof_due;
    nghttp2_nv *nva;
    size_t nvlen;
    nghttp2_nv *tnv;        /**< the response's trailers (one h2_malloc piece), or NULL */
    size_t tnvlen;
    sl_outq_t *q;           /**< the queue being taken by the data provider */
    uint16_t qi;
    size_t qoff;
    sl__h2_ev_t ev;         /**< EV_* bits waiting for h2_run; in h->ev while any */
    uint64_t due;           /**< loop ms when the stream times out; 0: none */
    sl_list_t link;         /**< in h->streams */
};

struct sl_h2_s {
    sl_worker_t *w;
    sl_stream_t *s;
    const sl_h2_owner_t *ops;
    void *owner;
    sl_downstream_t tmpl;
    nghttp2_session *ss;
    uv_idle_t idle; /* runs the session after an operation called from outside it */
    uv_write_t wreq;
    char *out;      /* output block, or NULL */
    uint32_t olen;
    uint8_t writing, in_run, closed, want_close;
    uint8_t fatal;                /* nghttp2 failed: the client's bytes are dropped */
    uint8_t lingering;            /* half-closed after its last frame: waits for the client's close */
    uint8_t draining;             /* 1: the shutdown notice went, 2: the final GOAWAY went */
    uint64_t drain_due;           /* draining 1: the final GOAWAY goes at the latest then */
    uint32_t nstreams;
    uint32_t hb_frames, hb_bytes; /* the header block being received */
    uint32_t empty_frames;        /* empty DATA frames in a row */
    uint64_t wu_recv, prio_recv;  /* WINDOW_UPDATE and PRIORITY frames received */
    uint64_t settings_recv;       /* SETTINGS frames received (not ACKs) */
    uint32_t reset_tokens;        /* the rapid-reset bucket, refilled up to reset_at */
    uint64_t reset_at;
    uint64_t data_sent, opened;   /* DATA frames sent, streams opened by the client */
    uint64_t conn_due;            /* idle deadline while no stream is open (loop ms) */
    uint64_t next_due;            /* when the owner's timer is set to fire */
    sl_list_t streams;             /* newest first */
    sl_list_t ev;                  /* streams with events, first come first run */
};

static const sl_downstream_ops_t h2_ops;
static void h2_run(sl_h2_t *h);

/* ---- memory: nghttp2's and the streams', from per-thread freelists ----
 *
 * A request costs nghttp2 about five allocations (its stream, the outbound HEADERS and
 * DATA items, the response's header list, decoded header buffers) and the session one
 * stream: with glibc's malloc and free that was 7% of the instructions of an h2load
 * request (scripts/bench-instr --h2). Small pieces come from size classes kept on lists
 * of the worker's thread instead (h2o's per-thread recycle allocators do the same);
 * each piece carries its class in a 16-byte header, as nghttp2's free passes no size.
 * A list keeps at most H2_MEM_KEEP bytes, so a spike of streams gives its memory back;
 * the lists go when the thread ends. */
#define H2_MEM_HDR 16
#define H2_MEM_CLASSES 7 /* 64 .. 4096 bytes with the header */
#define H2_MEM_BIG 0xff
#define H2_MEM_KEEP (256 * 1024)
/* Under AddressSanitizer every piece goes back to free(): a recycled one would hide a use
 * after free from it (the fuzzer's and the ASan suite's reason to exist). */
#if defined(__SANITIZE_ADDRESS__)
#define H2_MEM_RECYCLE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define H2_MEM_RECYCLE 0
#endif
#endif
#ifndef H2_MEM_RECYCLE
#define H2_MEM_RECYCLE 1
#endif

typedef struct h2_mem_free_s {
    struct h2_mem_free_s *next;
} h2_mem_free_t;

typedef struct {
    h2_mem_free_t *free[H2_MEM_CLASSES];
    uint32_t nfree[H2_MEM_CLASSES];
} h2_mem_t;

static __thread h2_mem_t *h2_mem_tls;
static pthread_key_t h2_mem_key;
static pthread_once_t h2_mem_once = PTHREAD_ONCE_INIT;

static void h2_mem_thread_end(void *p) {
    h2_mem_t *m = p;
    h2_mem_tls = NULL; /* runs on the ending thread: a later allocation starts a new list */
    for (int c = 0; c < H2_MEM_CLASSES; c++)
        while (m->free[c]) {
            h2_mem_free_t *f = m->free[c];
            m->free[c] = f->next;
            free(f);
        }
    free(m);
}

static void h2_mem_key_init(void) { pthread_key_create(&h2_mem_key, h2_mem_thread_end); }

static h2_mem_t *h2_mem(void) {
    if (SL_LIKELY(h2_mem_tls)) return h2_mem_tls;
    pthread_once(&h2_mem_once, h2_mem_key_init);
    h2_mem_t *m = calloc(1, sizeof(*m));
    if (m && pthread_setspecific(h2_mem_key, m) != 0) {
        free(m);
        m = NULL;
    }
    return h2_mem_tls = m;
}

static size_t h2_mem_size(unsigned c) { return (size_t)64 << c; }

static void *h2_malloc(size_t n, void *ud) {
    (void)ud;
    unsigned c = 0;
    while (c < H2_MEM_CLASSES && n + H2_MEM_HDR > h2_mem_size(c)) c++;
    h2_mem_t *m = c < H2_MEM_CLASSES ? h2_mem() : NULL;
    uint8_t *p;
    if (m && m->free[c]) {
        p = (uint8_t *)m->free[c];
        m->free[c] = m->free[c]->next;
        m->nfree[c]--;
    } else {
        p = malloc(m ? h2_mem_size(c) : n + H2_MEM_HDR);
        if (!p) return NULL;
    }
    p[0] = m ? (uint8_t)c : H2_MEM_BIG;
    return p + H2_MEM_HDR;
}

static void h2_free(void *ptr, void *ud) {
    (void)ud;
    if (!ptr) return;
    uint8_t *p = (uint8_t *)ptr - H2_MEM_HDR;
    unsigned c = p[0];
    h2_mem_t *m = c == H2_MEM_BIG ? NULL : h2_mem();
    if (!H2_MEM_RECYCLE || !m || m->nfree[c] * h2_mem_size(c) >= H2_MEM_KEEP) {
        free(p);
        return;
    }
    h2_mem_free_t *f = (h2_mem_free_t *)p;
    f->next = m->free[c];
    m->free[c] = f;
    m->nfree[c]++;
}

static void *h2_calloc(size_t k, size_t n, void *ud) {
    if (n && k > SIZE_MAX / n) return NULL;
    void *p = h2_malloc(k * n, ud);
    if (p) memset(p, 0, k * n);
    return p;
}

static void *h2_realloc(void *ptr, size_t n, void *ud) {
    if (!ptr) return h2_malloc(n, ud);
    if (!n) {
        h2_free(ptr, ud);
        return NULL;
    }
    uint8_t *p = (uint8_t *)ptr - H2_MEM_HDR;
    if (p[0] == H2_MEM_BIG) {
        p = realloc(p, n + H2_MEM_HDR);
        return p ? p + H2_MEM_HDR : NULL;
    }
    size_t have = h2_mem_size(p[0]) - H2_MEM_HDR;
    if (n <= have) return ptr;
    void *q = h2_malloc(n, ud);
    if (!q) return NULL;
    memcpy(q, ptr, have);
    h2_free(ptr, ud);
    return q;
}

static nghttp2_mem h2_nghttp2_mem = {NULL, h2_malloc, h2_free, h2_calloc, h2_realloc};

void *sl__h2_mem(void) { return &h2_nghttp2_mem; }
void *sl__h2_calloc(size_t n) { return h2_calloc(1, n, NULL); }
void sl__h2_mem_free(void *p) { h2_free(p, NULL); }

/* The final GOAWAY of a drain, naming the last stream the session took. */
static void h2_goaway_final(sl_h2_t *h) {
    h->draining = 2;
    nghttp2_submit_goaway(h->ss, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h->ss),
                          NGHTTP2_NO_ERROR, NULL, 0);
}

int sl__h2_preface(const char *p, size_t n) {
    size_t k = SL_MIN(n, (size_t)SL_H2_PREFACE_LEN);
    if (memcmp(p, SL_H2_PREFACE, k) != 0) return SL_ERROR;
    return k == SL_H2_PREFACE_LEN ? SL_OK : SL_EAGAIN;
}

/* ---- timers ---- */

static uint64_t h2_now(sl_h2_t *h) { return uv_now(&h->w->loop); }

static void h2_schedule(sl_h2_t *h, uint64_t due) {
    if (h->next_due && h->next_due <= due) return;
    h->next_due = due;
    uint64_t now = h2_now(h);
    h->ops->arm(h->owner, due > now ? due - now : 1);
}

static void stream_set_due(sl_h2_stream_t *st, uint64_t ms) {
    st->due = ms ? h2_now(st->h) + ms : 0;
    if (ms) h2_schedule(st->h, st->due);
}

/* Something to do outside nghttp2's callbacks: run the session on the loop's next turn
 * (immediately after the current callback when one of the session's own is running). */
static void h2_on_idle(uv_idle_t *i) {
    sl_h2_t *h = SL_CONTAINER_OF(i, sl_h2_t, idle);
    uv_idle_stop(i);
    h2_run(h);
}

static void h2_kick(sl_h2_t *h) {
    if (!h->in_run && !h->closed) uv_idle_start(&h->idle, h2_on_idle);
}

/* ---- events ---- */

static void ev_push(sl_h2_stream_t *st, uint8_t ev) { sl__h2_ev_push(&st->h->ev, &st->ev, ev); }

static void stream_release_body(sl_h2_stream_t *st) {
    if (st->body) sl_block_put(&st->h->w->blocks, st->body);
    st->body = NULL;
    st->blen = st->bpos = 0;
}

static void stream_free(sl_h2_stream_t *st) {
    sl_h2_t *h = st->h;
    sl__h2_ev_take(&st->ev);
    stream_release_body(st);
    h2_free(st->tnv, NULL);
    sl_list_remove(&st->link);
    if (!st->nclosed && !h->closed) nghttp2_session_set_stream_user_data(h->ss, st->id, NULL);
    h2_free(st, NULL);
    SL_COUNTER_ADD(h->w->metrics.h2_streams[h->tmpl.lidx], -1);
    if (--h->nstreams == 0 && !h->closed) {
        h->conn_due = h2_now(h) + h->tmpl.lc->idle_timeout_ms;
        h2_schedule(h, h->conn_due);
    }
}

/* The stream's request goes: counted and logged when it had begun, else just freed. */
static void stream_drop_request(sl_h2_stream_t *st) {
    sl_req_t *r = st->ds.req;
    if (!r) return;
    st->ds.req = NULL;
    st->q = NULL;
    if (st->began)
        sl__req_abort(r);
    else
        sl__req_free(r);
}

/* Every stream's request is abandoned and the stream freed. */
static void h2_drop_streams(sl_h2_t *h) {
    while (!sl_list_empty(&h->streams)) {
        sl_h2_stream_t *st = SL_LIST_FIRST(&h->streams, sl_h2_stream_t, link);
        stream_drop_request(st);
        stream_free(st);
    }
}

/* ---- the request head, from HEADERS ---- */

static bool copy_str(sl_req_t *r, const uint8_t *p, size_t n, sl_str_t *out) {
    char *c = n ? sl_arena_alloc(&r->arena, n) : (char *)"";
    if (!c) return false;
    if (n) memcpy(c, p, n);
    *out = (sl_str_t){c, n};
    return true;
}

static int method_id(sl_str_t m) {
#define SL_H2_METHOD(num, name, string)                                                                   \
    if (m.len == sizeof(#string) - 1 && memcmp(m.p, #string, m.len) == 0) return num;
    HTTP_METHOD_MAP(SL_H2_METHOD)
#undef SL_H2_METHOD
    return -1;
}

/* A :path the HTTP/1.1 path would take as a request-target: visible ASCII (nghttp2 refuses
 * controls and spaces, not bytes above 0x7e, which llhttp refuses), no fragment, every '%'
 * a pct-encoded octet (sl_h1_valid_target). Anything else is not origin-form: the upstream
 * and the router could read it differently (the HTTP/2 -> HTTP/1 downgrade). */
static bool path_bytes_ok(sl_str_t v) {
    for (size_t i = 0; i < v.len; i++)
        if ((unsigned char)v.p[i] < 0x21 || (unsigned char)v.p[i] > 0x7e) return false;
    return sl_h1_valid_target(v);
}

static uint16_t on_pseudo(sl_h2_stream_t *st, sl_req_t *r, sl_str_t name, const uint8_t *v, size_t vn) {
    sl_h1_head_t *hd = &r->head;
    sl_str_t val;
    if (!copy_str(r, v, vn, &val)) return 431;
    if (SL_IEQ(name, ":method")) {
        hd->method = val;
        int id = method_id(val);
        if (id < 0) return 400;
        if (id == HTTP_CONNECT) return 405; /* no tunnels over HTTP/2 streams, as over HTTP/1.1 */
        hd->method_id = (uint8_t)id;
    } else if (SL_IEQ(name, ":path")) {
        if (!val.len || (val.p[0] != '/' && !(val.len == 1 && val.p[0] == '*'))) return 400;
        if (!path_bytes_ok(val)) st->malformed = 1;
        hd->target = val;
        const char *qm = memchr(val.p, '?', val.len);
        hd->path = (sl_str_t){val.p, qm ? (size_t)(qm - val.p) : val.len};
        hd->query = qm ? (sl_str_t){qm + 1, val.len - (size_t)(qm - val.p) - 1} : (sl_str_t){"", 0};
    } else if (SL_IEQ(name, ":authority")) {
        if (st->authority.p) st->malformed = 1; /* a second one (nghttp2 resets it first) */
        st->authority = val;
    }
    return 0; /* :scheme: nghttp2 checked it is there */
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud) {
    sl_h2_stream_t *st = nghttp2_session_get_stream_user_data(ss, frame->hd.stream_id);
    (void)flags;
    (void)ud;
    if (!st || !st->ds.req || st->headers_done || st->status_err) return 0; /* trailers: dropped */
    sl_req_t *r = st->ds.req;
    sl_h1_head_t *hd = &r->head;
    st->hdr_bytes += (uint32_t)(namelen + valuelen + 32);
    if (st->hdr_bytes > st->ds.lc->max_header_size) {
        st->status_err = 431;
        return 0;
    }
    sl_str_t nm = {(const char *)name, namelen};
    if (namelen && name[0] == ':') {
        st->status_err = on_pseudo(st, r, nm, value, valuelen);
        return 0;
    }
    sl_h1_header_t *x = sl_h1_push(hd);
    if (!x) {
        st->status_err = 431;
        return 0;
    }
    if (!copy_str(r, name, namelen, &x->name) || !copy_str(r, value, valuelen, &x->value)) {
        st->status_err = 431;
        return 0;
    }
    x->hop = 0;
    if (SL_IEQ(nm, "content-length")) {
        uint64_t n = 0;
        for (size_t i = 0; i < valuelen; i++) n = n * 10 + (uint64_t)(value[i] - '0'); /* nghttp2 checked it */
        hd->content_length = n;
        hd->flags |= SL_H1_HAS_CL;
        x->hop = 1; /* the upstream's framing is rebuilt */
    } else if (SL_IEQ(nm, "te")) {
        x->hop = 1; /* "trailers", nghttp2 checked: meaningless to an HTTP/1.1 upstream */
    } else if (SL_IEQ(nm, "expect")) {
        if (!SL_IEQ(x->value, "100-continue")) {
            st->status_err = 417; /* as over HTTP/1.1: an expectation sluice cannot meet */
            return 0;
        }
        hd->flags |= SL_H1_EXPECT_CONTINUE;
        x->hop = 1;
    } else if (SL_IEQ(nm, "cookie")) {
        st->ncookies++;
    } else if (sl_h1_hop_header(nm)) {
        x->hop = 1; /* Trailer, HTTP2-Settings, Proxy-*: dropped as on the HTTP/1.1 path */
    }
    return 0;
}

/* Cookie crumbs become one field for the HTTP/1.1 upstream (RFC 9113 8.2.3). */
static bool join_cookies(sl_h2_stream_t *st, sl_req_t *r) {
    sl_h1_head_t *hd = &r->head;
    if (st->ncookies < 2) return true;
    size_t total = 0;
    for (uint16_t i = 0; i < hd->nheaders; i++)
        if (SL_IEQ(hd->headers[i].name, "cookie")) total += hd->headers[i].value.len + 2;
    char *p = sl_arena_alloc(&r->arena, total);
    if (!p) return false;
    size_t n = 0;
    uint16_t keep = 0, first = UINT16_MAX;
    for (uint16_t i = 0; i < hd->nheaders; i++) {
        sl_h1_header_t *x = &hd->headers[i];
        if (SL_IEQ(x->name, "cookie")) {
            if (n) p[n++] = ';', p[n++] = ' ';
            memcpy(p + n, x->value.p, x->value.len);
            n += x->value.len;
            if (first != UINT16_MAX) continue;
            first = keep;
        }
        hd->headers[keep++] = *x;
    }
    hd->nheaders = keep;
    hd->headers[first].value = (sl_str_t){p, n};
    return true;
}

/* The head is complete: :authority becomes the Host (a client's own Host goes), the body's
 * framing is known. 0, the status of an answer instead of routing, or SL_ERROR: the head is
 * malformed (RFC 9113 8.1.1), a stream error.
 *
 * One authority reaches the upstream, so a head naming two is malformed (8.3.1): a second
 * :authority (on_pseudo) or host (nghttp2 resets those first; checked again, as the rewrite
 * below would keep one of them), or a host that disagrees with :authority: it would be dropped
 * here after a tier in front of sluice judged the request by it. Host names compare
 * ASCII case-insensitively (RFC 9110 4.2.3), as the HTTP/1.1 path compares an absolute-form
 * target with Host; nothing else is normalised: "a.test:80" and "a.test" disagree. */
static int head_finish(sl_h2_stream_t *st, sl_req_t *r) {
    sl_h1_head_t *hd = &r->head;
    if (st->malformed) return SL_ERROR;
    if (st->status_err) return st->status_err;
    if (!hd->method.len || !hd->target.len) return 400;
    uint16_t keep = 0;
    sl_str_t host = {NULL, 0};
    for (uint16_t i = 0; i < hd->nheaders; i++) {
        if (SL_IEQ(hd->headers[i].name, "host")) {
            if (host.p) return SL_ERROR;
            host = hd->headers[i].value;
            if (st->authority.p) continue;
        }
        hd->headers[keep++] = hd->headers[i];
    }
    hd->nheaders = keep;
    if (st->authority.p) {
        if (host.p && !sl_str_ieq2(host, st->authority)) return SL_ERROR;
        sl_h1_header_t *x = sl_h1_push(hd);
        if (!x) return 431;
        *x = (sl_h1_header_t){SL_LIT("host"), st->authority, 0};
        host = st->authority;
    }
    if (!host.len) return 400;
    if (!sl_h1_valid_host(host)) return SL_ERROR; /* "evil@a.test", "a.test,b.test": 400 over HTTP/1.1 */
    hd->host = host;
    if (!join_cookies(st, r)) return 431;
    if (st->remote_done || ((hd->flags & SL_H1_HAS_CL) && hd->content_length == 0))
        hd->body_kind = SL_BODY_NONE;
    else if (hd->flags & SL_H1_HAS_CL)
        hd->body_kind = SL_BODY_LENGTH;
    else
        hd->body_kind = SL_BODY_CHUNKED; /* a length the upstream learns from its chunks */
    return 0;
}

/* Whether the request may start: a body of known length that fits the stream's window is
 * awaited whole, so nghttp2 has checked it against content-length before any byte of the
 * request leaves for an upstream. */
static bool stream_ready(sl_h2_stream_t *st) {
    const sl_h1_head_t *hd = &st->ds.req->head;
    if (st->status_err || st->remote_done) return true;
    return !(hd->body_kind == SL_BODY_LENGTH && hd->content_length <= H2_STREAM_WINDOW);
}

/* A malformed request is a stream error PROTOCOL_ERROR (RFC 9113 8.1.1), the answer nghttp2
 * gives to the rules it checks itself. The request never began: it goes now, so nothing
 * routes it and the stream's later frames are dropped; the stream goes once nghttp2 sent the
 * reset and closed it. */
static void stream_reset_malformed(sl_h2_stream_t *st) {
    st->due = 0;
    stream_drop_request(st);
    nghttp2_submit_rst_stream(st->h->ss, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_PROTOCOL_ERROR);
}

/* ---- nghttp2's callbacks: they record, h2_run acts ---- */

static int on_begin_headers(nghttp2_session *ss, const nghttp2_frame *frame, void *ud) {
    sl_h2_t *h = ud;
    if (h->closed || frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    sl_h2_stream_t *st = h2_calloc(1, sizeof(*st), NULL);
    if (!st) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    h->opened++;
    st->h = h;
    st->id = frame->hd.stream_id;
    st->ds = h->tmpl;
    st->ds.ops = &h2_ops;
    st->ds.req = NULL;
    st->ds.can_upgrade = 0;
    sl_req_t *r = sl__req_new(h->w, &st->ds);
    if (!r) {
        h2_free(st, NULL);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    sl_h1_head_clear(&r->head);
    r->head.major = 2;
    r->head.query = (sl_str_t){"", 0};
    r->keep_alive = 1;
    r->start_ns = sl_wake_ns(); /* its HEADERS arrived by the loop's wake */
    st->ds.req = r;
    sl_list_push_front(&h->streams, &st->link);
    h->nstreams++;
    SL_COUNTER_ADD(h->w->metrics.h2_streams[h->tmpl.lidx], 1);
    nghttp2_session_set_stream_user_data(ss, st->id, st);
    stream_set_due(st, st->ds.lc->header_timeout_ms);
    return 0;
}

/* A flood bound was passed: GOAWAY ENHANCE_YOUR_CALM (written before the close when the
 * client still reads), and nghttp2 stops reading. */
static int h2_calm(nghttp2_session *ss) {
    nghttp2_session_terminate_session(ss, NGHTTP2_ENHANCE_YOUR_CALM);
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* Takes a token for one RST_STREAM from the client; false when the bucket is empty. */
static bool h2_reset_allowed(sl_h2_t *h) {
    uint64_t now = h2_now(h), secs = (now - h->reset_at) / 1000;
    if (secs) {
        h->reset_tokens = (uint32_t)SL_MIN((uint64_t)H2_RESET_BURST, h->reset_tokens + secs * H2_RESET_PER_SEC);
        h->reset_at += secs * 1000;
    }
    if (!h->reset_tokens) return false;
    h->reset_tokens--;
    return true;
}

static int on_begin_frame(nghttp2_session *ss, const nghttp2_frame_hd *hd, void *ud) {
    sl_h2_t *h = ud;
    bool empty = hd->type == NGHTTP2_DATA && hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_STREAM);
    h->empty_frames = empty ? h->empty_frames + 1 : 0;
    if (h->empty_frames > H2_MAX_EMPTY_FRAMES) return h2_calm(ss);
    if (hd->type == NGHTTP2_WINDOW_UPDATE &&
        ++h->wu_recv > H2_CONTROL_ALLOWANCE + H2_WU_PER_DATA * h->data_sent)
        return h2_calm(ss);
    if (hd->type == NGHTTP2_PRIORITY &&
        ++h->prio_recv > H2_CONTROL_ALLOWANCE + H2_PRIORITY_PER_STREAM * h->opened)
        return h2_calm(ss);
    if (hd->type == NGHTTP2_RST_STREAM && !h2_reset_allowed(h)) return h2_calm(ss);
    if (hd->type == NGHTTP2_SETTINGS && !(hd->flags & NGHTTP2_FLAG_ACK) &&
        ++h->settings_recv > H2_SETTINGS_ALLOWANCE + h->opened)
        return h2_calm(ss);
    if (hd->type == NGHTTP2_HEADERS) {
        h->hb_frames = 1;
        h->hb_bytes = (uint32_t)hd->length;
    } else if (hd->type == NGHTTP2_CONTINUATION) {
        h->hb_frames++;
        h->hb_bytes += (uint32_t)hd->length;
        /* CONTINUATION flood (CVE-2024-27316): a header block is bounded in frames and in
         * bytes, whatever its fields decode to. */
        if (h->hb_frames > H2_MAX_HEADER_FRAMES || h->hb_bytes > h->tmpl.lc->max_header_size + 16384u)
            return h2_calm(ss);
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *frame, void *ud) {
    sl_h2_t *h = ud;
    if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK) && h->draining == 1) {
        h2_goaway_final(h);
        return 0;
    }
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    sl_h2_stream_t *st = nghttp2_session_get_stream_user_data(ss, frame->hd.stream_id);
    if (!st || !st->ds.req) return 0;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) st->remote_done = 1;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
        st->headers_done = 1;
        int err = head_finish(st, st->ds.req);
        if (err == SL_ERROR) {
            stream_reset_malformed(st);
            return 0;
        }
        if (err) st->status_err = (uint16_t)err;
    }
    if (!st->headers_done) return 0;
    if (st->began)
        ev_push(st, EV_DATA);
    else if (stream_ready(st))
        ev_push(st, EV_BEGIN);
    return 0;
}

static int on_data_chunk(nghttp2_session *ss, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *ud) {
    (void)flags;
    (void)ud;
    nghttp2_session_consume_connection(ss, len);
    sl_h2_stream_t *st = nghttp2_session_get_stream_user_data(ss, id);
    if (!st || !st->ds.req) return 0; /* the request is over: what it did not read goes */
    if (!st->body && !(st->body = sl_block_get(&st->h->w->blocks))) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (len > SL_BLOCK_SIZE - st->blen) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* past its window */
    assert(st->bpos <= st->blen);
    memcpy(st->body + st->blen, data, len);
    st->blen += (uint32_t)len;
    if (st->began) ev_push(st, EV_DATA);
    return 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t id, uint32_t code, void *ud) {
    sl_h2_t *h = ud;
    (void)code;
    sl_h2_stream_t *st = nghttp2_session_get_stream_user_data(ss, id);
    if (!st || h->closed) return 0;
    st->nclosed = 1;
    if (st->ds.req)
        ev_push(st, EV_CLOSED);
    else
        stream_free(st);
    return 0;
}

/* A GOAWAY taken into the output, by why it went: NO_ERROR is a drain (both of its GOAWAYs)
 * or the idle timeout; an error code names the connection error. */
static void h2_count_goaway(sl_h2_t *h, uint32_t code) {
    int reason;
    switch (code) {
    case NGHTTP2_NO_ERROR: reason = h->draining ? SL_H2_GOAWAY_DRAIN : SL_H2_GOAWAY_IDLE; break;
    case NGHTTP2_PROTOCOL_ERROR: reason = SL_H2_GOAWAY_PROTOCOL_ERROR; break;
    case NGHTTP2_FLOW_CONTROL_ERROR: reason = SL_H2_GOAWAY_FLOW_CONTROL_ERROR; break;
    case NGHTTP2_FRAME_SIZE_ERROR: reason = SL_H2_GOAWAY_FRAME_SIZE_ERROR; break;
    case NGHTTP2_STREAM_CLOSED: reason = SL_H2_GOAWAY_STREAM_CLOSED; break;
    case NGHTTP2_COMPRESSION_ERROR: reason = SL_H2_GOAWAY_COMPRESSION_ERROR; break;
    case NGHTTP2_ENHANCE_YOUR_CALM: reason = SL_H2_GOAWAY_ENHANCE_YOUR_CALM; break;
    case NGHTTP2_INTERNAL_ERROR: reason = SL_H2_GOAWAY_INTERNAL_ERROR; break;
    default: reason = SL_H2_GOAWAY_OTHER; break;
    }
    SL_COUNTER_ADD(h->w->metrics.h2_goaway[h->tmpl.lidx * SL_H2_GOAWAY_REASONS + (uint32_t)reason], 1);
}

/* A response that ended while the client was still sending its request: the rest of the
 * request is refused with NO_ERROR, as RFC 9113 8.1 asks. */
static int on_frame_send(nghttp2_session *ss, const nghttp2_frame *frame, void *ud) {
    sl_h2_t *h = ud;
    if (frame->hd.type == NGHTTP2_DATA) h->data_sent++;
    if (frame->hd.type == NGHTTP2_GOAWAY) h2_count_goaway(h, frame->goaway.error_code);
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    if (!nghttp2_session_get_stream_remote_close(ss, frame->hd.stream_id))
        nghttp2_submit_rst_stream(ss, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

ssize_t sl__h2_out_put(sl_blockpool_t *blocks, char **out, uint32_t *olen, const uint8_t *data, size_t len) {
    if (!*out && !(*out = sl_block_get(blocks))) return NGHTTP2_ERR_CALLBACK_FAILURE;
    size_t n = SL_MIN(len, (size_t)(SL_BLOCK_SIZE - *olen));
    if (!n) return NGHTTP2_ERR_WOULDBLOCK;
    memcpy(*out + *olen, data, n);
    *olen += (uint32_t)n;
    return (ssize_t)n;
}

static ssize_t on_send(nghttp2_session *ss, const uint8_t *data, size_t len, int flags, void *ud) {
    sl_h2_t *h = ud;
    (void)ss;
    (void)flags;
    if (h->writing || h->closed) return NGHTTP2_ERR_WOULDBLOCK;
    return sl__h2_out_put(&h->w->blocks, &h->out, &h->olen, data, len);
}

/* The response's trailers (an HTTP/2 upstream's: gRPC's status) are copied out of the
 * request, which may be gone when the last DATA frame is made. */
static void stream_keep_trailers(sl_h2_stream_t *st, const sl_req_t *r) {
    if (!r || !r->ntrailers || st->tnv) return;
    size_t bytes = r->ntrailers * sizeof(nghttp2_nv);
    for (uint16_t i = 0; i < r->ntrailers; i++) bytes += r->trailers[i].name.len + r->trailers[i].value.len;
    nghttp2_nv *nv = h2_malloc(bytes, NULL);
    if (!nv) return; /* the stream ends without them */
    uint8_t *p = (uint8_t *)(nv + r->ntrailers);
    for (uint16_t i = 0; i < r->ntrailers; i++) {
        const sl_h1_header_t *x = &r->trailers[i];
        nv[i] = (nghttp2_nv){p, p + x->name.len, x->name.len, x->value.len, NGHTTP2_NV_FLAG_NONE};
        for (size_t k = 0; k < x->name.len; k++) p[k] = (uint8_t)sl_lower(x->name.p[k]);
        memcpy(p + x->name.len, x->value.p, x->value.len);
        p += x->name.len + x->value.len;
    }
    st->tnv = nv;
    st->tnvlen = r->ntrailers;
}

/* The data provider: the response body from r->clq, then the end (and the trailers). */
static ssize_t on_read_body(nghttp2_session *ss, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                            nghttp2_data_source *src, void *ud) {
    sl_h2_stream_t *st = src->ptr;
    sl_outq_t *q = st->q;
    (void)ud;
    size_t n = q ? sl_outq_copy(q, &st->qi, &st->qoff, buf, len) : 0;
    if (q && st->qi == q->niov) {
        st->q = NULL;
        ev_push(st, EV_WRITTEN);
        if (st->ds.req && sl__req_resp_done(st->ds.req)) st->eof_due = 1; /* that was the last of it */
    }
    if (!st->q && st->eof_due) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        stream_keep_trailers(st, st->ds.req);
        if (st->tnv && nghttp2_submit_trailer(ss, id, st->tnv, st->tnvlen) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        return (ssize_t)n;
    }
    if (!n) {
        st->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)n;
}

/* ---- running the session ---- */

static void h2_close_now(sl_h2_t *h) {
    if (!h->closed) h->ops->close(h->owner);
}

static void h2_on_written(uv_write_t *wr, int status) {
    sl_h2_t *h = SL_CONTAINER_OF(wr, sl_h2_t, wreq);
    if (h->closed) return;
    h->writing = 0;
    h->olen = 0;
    if (status < 0) {
        h2_close_now(h);
        return;
    }
    h2_run(h);
}

/* Moves what nghttp2 has to send into the output block and writes it. */
static void h2_flush(sl_h2_t *h) {
    while (!h->closed && !h->writing) {
        if (nghttp2_session_send(h->ss) != 0) {
            h2_close_now(h);
            return;
        }
        if (!h->olen) break;
        uv_buf_t b = uv_buf_init(h->out, h->olen);
        int rc = sl_stream_writev(h->s, &h->wreq, &b, 1, h2_on_written);
        if (rc < 0) {
            h2_close_now(h);
            return;
        }
        if (rc == 0) {
            h->writing = 1;
            return;
        }
        h->olen = 0;
    }
    if (!h->closed && !h->writing && h->out) {
        sl_block_put(&h->w->blocks, h->out);
        h->out = NULL;
    }
}

/* Acts on one stream's events, the write first (a response that completed also closes the
 * stream: it must finish, not be aborted). The stream may be gone afterwards. */
static void stream_run(sl_h2_stream_t *st) {
    uint8_t ev = sl__h2_ev_take(&st->ev);
    sl_req_t *r = st->ds.req;
    if (ev & EV_WRITTEN) {
        if (ev & ~EV_WRITTEN) ev_push(st, ev & ~EV_WRITTEN);
        /* The client took everything written: the timer a pending write armed (a client
         * that stops reading) is over, as over HTTP/1.1 (h1_on_written). A stream waiting on
         * its upstream (a server stream quiet between messages) is then timeouts.read's to
         * bound; one still receiving its body times the client's sending from now. */
        stream_set_due(st, st->remote_done ? 0 : st->ds.lc->idle_timeout_ms);
        if (r) sl__req_on_written(r, 0);
        return;
    }
    if (ev & EV_CLOSED) {
        stream_drop_request(st);
        stream_free(st);
        return;
    }
    if (!r) return;
    if ((ev & EV_BEGIN) && !st->began) {
        st->began = 1;
        st->due = 0;
        if (st->status_err) {
            int s = st->status_err;
            sl__req_respond_error(r, s,
                                  s == 431   ? "request header fields too large"
                                  : s == 405 ? "method not allowed"
                                  : s == 417 ? "expectation failed"
                                             : "bad request",
                                  true);
            return;
        }
        sl__req_begin(r);
        return;
    }
    if ((ev & EV_DATA) && st->began) sl__req_on_client_data(r);
}

/* The last frame was written (or is being): a FIN, then the client's close is awaited, so a
 * closing socket with the client's late frames unread never turns into a reset that
 * destroys what the client has not read yet (responses, a GOAWAY saying why). */
static void h2_linger(sl_h2_t *h) {
    h->lingering = 1;
    h->ops->linger(h->owner);
    h->next_due = 0;
    h2_schedule(h, h2_now(h) + H2_LINGER_MS);
}

static void h2_run(sl_h2_t *h) {
    if (h->in_run || h->closed) return;
    h->in_run = 1;
    for (;;) {
        while (!sl_list_empty(&h->ev) && !h->closed) stream_run(SL_LIST_FIRST(&h->ev, sl_h2_stream_t, ev.link));
        if (h->closed) break;
        h2_flush(h);
        if (sl_list_empty(&h->ev) || h->closed) break;
    }
    h->in_run = 0;
    if (h->closed) return;
    bool quiet = !h->writing && !h->olen && !nghttp2_session_want_write(h->ss);
    if (!h->lingering && quiet &&
        (h->want_close || (h->draining == 2 && !h->nstreams) || !nghttp2_session_want_read(h->ss)))
        h2_linger(h);
}

/* ---- the session's life ---- */

sl_h2_t *sl__h2_new(sl_worker_t *w, sl_stream_t *s, const sl_downstream_t *tmpl, const sl_h2_owner_t *ops,
                    void *owner) {
    nghttp2_session_callbacks *cb = NULL;
    nghttp2_option *opt = NULL;
    sl_h2_t *h = calloc(1, sizeof(*h));
    if (h) sl_list_init(&h->ev), sl_list_init(&h->streams);
    if (!h || nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0) goto fail;
    h->w = w;
    h->s = s;
    h->ops = ops;
    h->owner = owner;
    h->tmpl = *tmpl;
    nghttp2_session_callbacks_set_send_callback(cb, on_send);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_option_set_no_auto_window_update(opt, 1); /* the requests give the windows back */
    nghttp2_option_set_max_outbound_ack(opt, 1000);   /* SETTINGS/PING floods */
    nghttp2_option_set_max_settings(opt, 32);
    if (nghttp2_session_server_new3(&h->ss, cb, h, opt, &h2_nghttp2_mem) != 0) goto fail;
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    const sl_listener_conf_t *lc = tmpl->lc;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, lc->http2_max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, lc->max_header_size},
    };
    nghttp2_submit_settings(h->ss, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0]));
    nghttp2_session_set_local_window_size(h->ss, NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW);
    uv_idle_init(&w->loop, &h->idle);
    h->idle.data = owner;
    h->conn_due = h2_now(h) + lc->idle_timeout_ms;
    h2_schedule(h, h->conn_due);
    h->reset_tokens = H2_RESET_BURST;
    h->reset_at = h2_now(h);
    return h;
fail:
    if (opt) nghttp2_option_del(opt);
    if (cb) nghttp2_session_callbacks_del(cb);
    free(h);
    return NULL;
}

bool sl__h2_feed(sl_h2_t *h, const char *p, size_t n) {
    if (h->closed) return false;
    /* the client's last frames, or bytes after a connection error: nothing more is answered */
    if (h->lingering || h->fatal) return true;
    ssize_t rv = nghttp2_session_mem_recv(h->ss, (const uint8_t *)p, n);
    if (rv < 0) {
        sl_log_debug("listener %s: HTTP/2 from %s: %s", h->tmpl.lc->name, h->tmpl.peer, nghttp2_strerror((int)rv));
        /* The connection is over: its requests are abandoned, and the GOAWAY nghttp2 (or a
         * flood bound) queued goes out before the linger: a close with the rest of a flood
         * unread would reset the connection and the client could lose the GOAWAY. h2_run
         * lingers once the output is written (a write may be in flight); a client that
         * does not read is closed at the latest H2_LINGER_MS from now. */
        h->fatal = 1;
        h2_drop_streams(h);
        h->want_close = 1;
        h->conn_due = h2_now(h) + H2_LINGER_MS;
        h->next_due = 0;
        h2_schedule(h, h->conn_due);
        h2_run(h);
        return !h->closed;
    }
    h2_run(h);
    return !h->closed;
}

void sl__h2_on_timer(sl_h2_t *h) {
    if (h->closed) return;
    if (h->lingering) {
        h2_close_now(h);
        return;
    }
    uint64_t now = h2_now(h), next = 0;
    h->next_due = 0;
    sl_list_t *n, *nx;
    sl_list_foreach_safe(n, nx, &h->streams) {
        sl_h2_stream_t *st = SL_LIST_ENTRY(n, sl_h2_stream_t, link);
        if (!st->due) continue;
        if (st->due > now) {
            next = next && next < st->due ? next : st->due;
            continue;
        }
        st->due = 0;
        sl_req_t *r = st->ds.req;
        if (!r) continue;
        if (!st->began) {
            /* the head or the awaited body did not arrive within header_timeout */
            st->began = 1;
            sl__req_respond_error(r, 408, "request timeout", true);
        } else {
            st->ds.ops->abort(&st->ds); /* a client that stopped reading or sending */
        }
        if (h->closed) return;
    }
    if (h->draining == 1) {
        if (h->drain_due <= now)
            h2_goaway_final(h);
        else
            next = next && next < h->drain_due ? next : h->drain_due;
    }
    if (!h->nstreams && h->conn_due && h->conn_due <= now) {
        if (h->want_close) {
            /* a GOAWAY that could not be written within another idle_timeout: a client
             * that reads nothing (a zero window, a full socket) is closed */
            h2_close_now(h);
            return;
        }
        /* idle: GOAWAY, then the close once it was written */
        nghttp2_submit_goaway(h->ss, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h->ss),
                              NGHTTP2_NO_ERROR, NULL, 0);
        h->want_close = 1;
        h->conn_due = now + h->tmpl.lc->idle_timeout_ms;
        next = next && next < h->conn_due ? next : h->conn_due;
    } else if (!h->nstreams && h->conn_due) {
        next = next && next < h->conn_due ? next : h->conn_due;
    }
    if (next) h2_schedule(h, next);
    h2_run(h);
}

/* A drain in two steps (RFC 9113 6.8): a GOAWAY naming the largest stream id, and a PING;
 * once its ACK is back (or a second passed) every stream the client sent before it has
 * arrived, and the final GOAWAY names the last of them. A client thus never sees a
 * stream refused because it crossed the GOAWAY. */
void sl__h2_drain(sl_h2_t *h) {
    if (h->closed || h->draining) return;
    h->draining = 1;
    nghttp2_submit_shutdown_notice(h->ss);
    nghttp2_submit_ping(h->ss, NGHTTP2_FLAG_NONE, NULL);
    h->drain_due = h2_now(h) + 1000;
    h2_schedule(h, h->drain_due);
    h2_run(h);
}

void sl__h2_close(sl_h2_t *h, uv_close_cb cb) {
    if (h->closed) return;
    h->closed = 1;
    h2_drop_streams(h);
    uv_idle_stop(&h->idle);
    uv_close((uv_handle_t *)&h->idle, cb);
}

void sl__h2_free(sl_h2_t *h) {
    if (h->out) sl_block_put(&h->w->blocks, h->out);
    nghttp2_session_del(h->ss);
    free(h);
}

/* ---- the downstream a stream's request talks to (downstream.h) ---- */

static sl_h2_stream_t *stream_of(sl_downstream_t *d) { return SL_CONTAINER_OF(d, sl_h2_stream_t, ds); }

static bool h2_body_buffered(sl_downstream_t *d) {
    sl_h2_stream_t *st = stream_of(d);
    return st->bpos < st->blen || (st->remote_done && !st->done_told);
}

static int h2_read_body(sl_downstream_t *d, uint32_t room, sl_body_cb cb, void *ud) {
    sl_h2_stream_t *st = stream_of(d);
    (void)room; /* one piece per call */
    if (st->bpos < st->blen) {
        uint32_t n = st->blen - st->bpos;
        if (cb(ud, st->body + st->bpos, n)) return SL_ERROR;
        st->bpos += n;
    }
    if (st->remote_done) {
        st->done_told = 1;
        return SL_DONE;
    }
    return SL_OK;
}

static void h2_wait_body(sl_downstream_t *d) {
    sl_h2_stream_t *st = stream_of(d);
    sl_h2_t *h = st->h;
    if (st->bpos == st->blen && st->blen) {
        /* Everything handed was written: the block starts over, and its bytes go back to
         * the client's window. */
        if (!st->nclosed) nghttp2_session_consume_stream(h->ss, st->id, st->blen);
        st->blen = st->bpos = 0;
        h2_kick(h);
    }
    stream_set_due(st, d->lc->idle_timeout_ms);
}

static void h2_pause(sl_downstream_t *d) { (void)d; /* the stream's window does it */ }

static bool h2_send_continue(sl_downstream_t *d) {
    sl_h2_stream_t *st = stream_of(d);
    static const nghttp2_nv nv[] = {{(uint8_t *)":status", (uint8_t *)"100", 7, 3, NGHTTP2_NV_FLAG_NONE}};
    if (!st->nclosed) nghttp2_submit_headers(st->h->ss, NGHTTP2_FLAG_NONE, st->id, NULL, nv, 1, NULL);
    h2_kick(st->h);
    return true;
}

static bool nv_add(sl_req_t *r, nghttp2_nv *nva, size_t *n, sl_str_t name, sl_str_t value) {
    char *p = sl_arena_alloc(&r->arena, name.len + value.len + 1);
    if (!p) return false;
    for (size_t i = 0; i < name.len; i++) p[i] = sl_lower(name.p[i]);
    memcpy(p + name.len, value.p, value.len);
    nva[(*n)++] = (nghttp2_nv){(uint8_t *)p, (uint8_t *)p + name.len, name.len, value.len, NGHTTP2_NV_FLAG_NONE};
    return true;
}

static bool nv_num(sl_req_t *r, nghttp2_nv *nva, size_t *n, sl_str_t name, uint64_t v) {
    char buf[24];
    sl_wbuf_t b = SL_WBUF_BOUNDED(buf, sizeof buf);
    return sl_wbuf_u64(&b, v) && nv_add(r, nva, n, name, (sl_str_t){buf, b.len});
}

/* The response head as an HTTP/2 header list: the same fields sl__h1_client_head and
 * sl__h1_answer_head put in an HTTP/1.1 head, less the connection's own (Connection,
 * Transfer-Encoding: never chunked here), names lower-cased. Submitted by the first
 * write (or finish), so a head that never left can still be replaced by a 502. */
static int h2_write_head(sl_downstream_t *d, sl_req_t *r, sl_str_t ctype, int64_t content_length) {
    sl_h2_stream_t *st = stream_of(d);
    const sl_h1_head_t *h = &r->rhead;
    const sl_hdr_edits_t *ed = &r->resp_edits;
    bool answer = content_length >= 0;
    size_t cap = (answer ? 0 : h->nheaders) + ed->nadded + 5, n = 0;
    nghttp2_nv *nva = sl_arena_alloc(&r->arena, cap * sizeof(*nva));
    if (!nva) return SL_ERROR;
    int status = answer ? r->status : h->status;
    bool ok = nv_num(r, nva, &n, SL_LIT(":status"), (uint64_t)status);
    r->clq.chunked = 0;
    if (answer) {
        sl_outq_reset(&r->clq);
        if (ctype.len && !sl_edits_find(ed, SL_LIT("content-type")) && !sl_edits_removed(ed, SL_LIT("content-type")))
            ok = ok && nv_add(r, nva, &n, SL_LIT("content-type"), ctype);
    } else {
        for (uint16_t i = 0; i < h->nheaders && ok; i++)
            if (!h->headers[i].hop && !(ed->nremoved && sl_edits_removed(ed, h->headers[i].name)))
                ok = nv_add(r, nva, &n, h->headers[i].name, h->headers[i].value);
    }
    for (uint16_t i = 0; i < ed->nadded && ok; i++) ok = nv_add(r, nva, &n, ed->added[i].name, ed->added[i].value);
    if (answer) {
        /* A gRPC error is trailers-only: one HEADERS frame, no length (respond.c). */
        if (status != 204 && status != 304 && !r->grpc.answer) /* as fill_answer_head (h1_head.c) */
            ok = ok && nv_num(r, nva, &n, SL_LIT("content-length"), (uint64_t)content_length);
        if (status == 503 && !sl_edits_find(ed, SL_LIT("retry-after")) && !sl_edits_removed(ed, SL_LIT("retry-after")))
            ok = ok && nv_num(r, nva, &n, SL_LIT("retry-after"), r->at.retry_after_s ? r->at.retry_after_s : 1);
        st->bodiless = content_length == 0 || status == 204 || status == 304 || r->head.method_id == HTTP_HEAD;
    } else {
        /* A body_filter may change the body's length: its output goes without one. */
        if ((h->flags & SL_H1_HAS_CL) && h->body_kind != SL_BODY_CHUNKED && !sl__req_length_changes(r) &&
            status >= 200 && status != 204)
            ok = ok && nv_num(r, nva, &n, SL_LIT("content-length"), h->content_length);
        st->bodiless = h->body_kind == SL_BODY_NONE || r->head.method_id == HTTP_HEAD || status == 204 ||
                       status == 304;
    }
    if (!ok) return SL_ERROR;
    st->nva = nva;
    st->nvlen = n;
    return SL_OK;
}

static bool stream_submit(sl_h2_stream_t *st) {
    if (st->submitted) return true;
    if (st->nclosed || !st->nva) return false;
    nghttp2_data_provider prd = {.source = {.ptr = st}, .read_callback = on_read_body};
    if (nghttp2_submit_response(st->h->ss, st->id, st->nva, st->nvlen, st->bodiless ? NULL : &prd) != 0)
        return false;
    st->submitted = 1;
    return true;
}

static int h2_write(sl_downstream_t *d, sl_outq_t *q) {
    sl_h2_stream_t *st = stream_of(d);
    assert(!st->q); /* one write in flight per stream: the data provider reads it */
    if (!stream_submit(st)) return -1;
    h2_kick(st->h);
    if (st->bodiless || !q->niov) {
        sl_outq_reset(q);
        return 1;
    }
    st->q = q;
    st->qi = 0;
    st->qoff = 0;
    q->writing = 1;
    if (st->deferred) {
        st->deferred = 0;
        nghttp2_session_resume_data(st->h->ss, st->id);
    }
    return 0;
}

static void h2_arm(sl_downstream_t *d, uint64_t ms) { stream_set_due(stream_of(d), ms); }

static void h2_finish(sl_downstream_t *d) {
    sl_h2_stream_t *st = stream_of(d);
    sl_h2_t *h = st->h;
    sl_req_t *r = d->req;
    d->req = NULL;
    st->q = NULL;
    st->due = 0;
    /* The head's header list (st->nva) lives in the request's arena: it is submitted (nghttp2
     * copies it) before the request and its arena go. */
    bool refused = false;
    if (!st->nclosed) {
        st->eof_due = 1;
        stream_keep_trailers(st, r);
        refused = !st->submitted && !stream_submit(st);
    }
    if (r) sl__req_free(r);
    stream_release_body(st);
    if (st->nclosed) {
        stream_free(st);
        return;
    }
    if (refused) {
        nghttp2_submit_rst_stream(h->ss, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
    } else if (st->deferred) {
        st->deferred = 0;
        nghttp2_session_resume_data(h->ss, st->id);
    }
    h2_kick(h);
}

static void h2_abort(sl_downstream_t *d) {
    sl_h2_stream_t *st = stream_of(d);
    sl_h2_t *h = st->h;
    if (!st->nclosed) nghttp2_submit_rst_stream(h->ss, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
    stream_drop_request(st);
    if (st->nclosed) stream_free(st);
    h2_kick(h);
}

static const sl_downstream_ops_t h2_ops = {
    .body_buffered = h2_body_buffered,
    .read_body = h2_read_body,
    .wait_body = h2_wait_body,
    .pause = h2_pause,
    .send_continue = h2_send_continue,
    .write_head = h2_write_head,
    .write = h2_write,
    .arm = h2_arm,
    .finish = h2_finish,
    .abort = h2_abort,
};
