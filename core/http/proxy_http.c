/* proxy_http.c — one request from routing to the end of its response.
 *
 * The proxy is two pumps. req_pump_up moves the client's body to the upstream
 * (client buffer -> framed slices -> one writev), and resp_pump moves the
 * upstream's response to the client the same way. Each pump has at most one
 * write in flight and stops reading its source until that write completes, so
 * a slow side pauses the fast one (backpressure) and memory per request stays
 * at one read buffer per side. Heads are always rebuilt from parsed fields.
 */
#include <assert.h>
#include <stdlib.h>

#include "http/http_conn.h"
#include "net/tls.h"
#include "base/log.h"
#include "script/lua_host.h"
#include "server/server.h"
#include "upstream/upstreams.h"

static void resp_pump(sl_req_t *r);
static void answer_plugin_error(sl_req_t *r);
void sl__req_cancel_wait(sl_req_t *r);
static void req_pump_up(sl_req_t *r);
static void req_finish(sl_req_t *r);
/* How an upstream attempt failed: decides whether a retry may follow (retry.on). */
enum { SL_FAIL_CONNECT, SL_FAIL_TIMEOUT, SL_FAIL_RESET, SL_FAIL_OTHER };
static void up_failed(sl_req_t *r, int status, int kind, const char *why);
static void attempt_abandon(sl_req_t *r);
static void req_connect(sl_req_t *r);

/* ---- output queues ---- */

void sl__outq_reset(sl_outq_t *q) {
    q->niov = 0;
    q->nsizes = 0;
}

uint32_t sl__outq_room(const sl_outq_t *q) {
    uint32_t by_iov = (uint32_t)(SL_IOV - 2 - q->niov) / 3;
    uint32_t by_size = SL_SPANS - q->nsizes;
    return SL_MIN(by_iov, by_size);
}

bool sl__outq_add(sl_outq_t *q, const char *p, size_t n) {
    if (q->niov == SL_IOV) return false;
    q->iov[q->niov++] = uv_buf_init((char *)p, (unsigned)n);
    return true;
}

bool sl__outq_span(sl_outq_t *q, const char *p, size_t n) {
    if (n == 0) return true;
    if (!q->chunked) return sl__outq_add(q, p, n);
    if (q->nsizes == SL_SPANS || q->niov + 3 > SL_IOV) return false;
    char *sz = q->sizes[q->nsizes++];
    sl_wbuf_t b = {sz, 0, 18};
    sl_wbuf_hex(&b, n);
    SL_WBUF_LIT(&b, "\r\n");
    sl__outq_add(q, sz, b.len);
    sl__outq_add(q, p, n);
    return sl__outq_add(q, "\r\n", 2);
}

bool sl__outq_end_chunks(sl_outq_t *q) {
    return !q->chunked || sl__outq_add(q, "0\r\n\r\n", 5);
}

int sl__outq_write(sl_outq_t *q, uv_stream_t *s, uv_write_t *wr, uv_write_cb cb) {
    /* Try the write now: in the common case it completes and needs no write request,
     * so the steady state allocates nothing (uv_write copies arrays of more than 4 bufs). */
    int n = uv_try_write(s, q->iov, q->niov);
    if (n == UV_EAGAIN) n = 0;
    if (n < 0) return n;
    size_t left = (size_t)n;
    uint16_t i = 0;
    while (i < q->niov && left >= q->iov[i].len) left -= q->iov[i++].len;
    if (i == q->niov) {
        sl__outq_reset(q);
        return 1;
    }
    q->iov[i].base += left;
    q->iov[i].len -= left;
    int rc = uv_write(wr, s, q->iov + i, q->niov - i, cb);
    if (rc < 0) return rc;
    q->writing = 1;
    return 0;
}

int sl__stream_write(sl_outq_t *q, uv_stream_t *s, struct sl_tls_s *tls, uv_write_t *wr, uv_write_cb cb) {
    if (!tls) return sl__outq_write(q, s, wr, cb);
    int rc = sl_tls_write(tls, wr, q->iov, q->niov, cb);
    if (rc == 1) sl__outq_reset(q);
    if (rc == 0) q->writing = 1;
    return rc;
}

/* ---- heads ---- */

/* A plugin's upstream.set(address): the request goes to that address on a connection of
 * its own (no pool, balancer, breaker or retry: none of them know the address), with the
 * default timeouts. */
static const sl_upstream_conf_t address_upstream = {
    .name = "(address)",
    .connect_timeout_ms = 2000,
    .read_timeout_ms = 30000,
    .write_timeout_ms = 30000,
    .keepalive_max_idle = 0,
    .retry = {.attempts = 1},
};

static const sl_upstream_conf_t *upstream_conf(const sl_req_t *r) {
    return r->upstream >= 0 ? &r->w->cfg->upstreams[r->upstream] : &address_upstream;
}

static bool put_header(sl_wbuf_t *b, sl_str_t name, sl_str_t value) {
    return sl_wbuf_str(b, name) && SL_WBUF_LIT(b, ": ") && sl_wbuf_str(b, value) &&
           SL_WBUF_LIT(b, "\r\n");
}

/* The head sent upstream: method, path (prefix stripped), the client's end-to-end
 * headers, X-Forwarded-*, X-Request-ID and our own framing. */
static int build_upstream_head(sl_req_t *r) {
    const sl_h1_head_t *h = &r->head;
    sl_wbuf_t b = sl_arena_wbuf(&r->arena, 1024);
    if (!b.p) return SL_ERROR;
    sl_str_t path = r->path_override.p ? r->path_override : h->path;
    if (r->strip) {
        path.p += r->strip;
        path.len -= r->strip;
    }
    bool ok = sl_wbuf_str(&b, h->method) && SL_WBUF_LIT(&b, " ");
    if (path.len == 0 || path.p[0] != '/') ok = ok && SL_WBUF_LIT(&b, "/");
    ok = ok && sl_wbuf_str(&b, path);
    sl_str_t query = r->query_set ? r->query_override : h->query;
    if (query.len) ok = ok && SL_WBUF_LIT(&b, "?") && sl_wbuf_str(&b, query);
    ok = ok && SL_WBUF_LIT(&b, " HTTP/1.1\r\n");

    const sl_h1_header_t *xff = NULL;
    bool has_rid = false;
    const sl_hdr_edits_t *ed = &r->req_edits;
    /* The consumer header is the gateway's word on who authenticated: never the client's. */
    const char *ch = r->w->cfg->consumer_header;
    sl_str_t consumer_hdr = {ch, ch ? strlen(ch) : 0};
    for (uint16_t i = 0; i < h->nheaders && ok; i++) {
        const sl_h1_header_t *x = &h->headers[i];
        if (x->hop) continue;
        if (ed->nremoved && sl_edits_removed(ed, x->name)) continue;
        if (consumer_hdr.len && sl_str_ieq2(x->name, consumer_hdr)) continue;
        if (SL_IEQ(x->name, "x-forwarded-for")) {
            xff = x;
            continue;
        }
        if (SL_IEQ(x->name, "x-forwarded-proto") || SL_IEQ(x->name, "x-forwarded-host")) continue;
        if (SL_IEQ(x->name, "x-request-id")) has_rid = true;
        ok = put_header(&b, x->name, x->value);
    }
    for (uint16_t i = 0; i < ed->nadded && ok; i++) {
        /* Upgrade is the route's to forward (below) and HTTP2-Settings nobody's, not a plugin's. */
        if (SL_IEQ(ed->added[i].name, "upgrade") || SL_IEQ(ed->added[i].name, "http2-settings")) continue;
        if (SL_IEQ(ed->added[i].name, "x-request-id")) has_rid = true;
        ok = put_header(&b, ed->added[i].name, ed->added[i].value);
    }
    if (!h->host.len && !sl_edits_find(ed, SL_LIT("host")))
        ok = ok && put_header(&b, SL_LIT("Host"), (sl_str_t){r->host, r->host_len});
    ok = ok && SL_WBUF_LIT(&b, "X-Forwarded-For: ");
    if (xff) ok = ok && sl_wbuf_str(&b, xff->value) && SL_WBUF_LIT(&b, ", ");
    ok = ok && sl_wbuf_put(&b, r->c->peer, strlen(r->c->peer)) && SL_WBUF_LIT(&b, "\r\n");
    ok = ok && SL_WBUF_LIT(&b, "X-Forwarded-Proto: http\r\n");
    if (h->host.len) ok = ok && put_header(&b, SL_LIT("X-Forwarded-Host"), h->host);
    if (!has_rid) ok = ok && put_header(&b, SL_LIT("X-Request-ID"), (sl_str_t){r->rid, r->rid_len});
    if (r->consumer_len && consumer_hdr.len)
        ok = ok && put_header(&b, consumer_hdr, (sl_str_t){r->consumer, r->consumer_len});
    if (r->body_buffered) {
        if (r->heap_len || (h->flags & SL_H1_HAS_CL) || h->body_kind == SL_BODY_CHUNKED)
            ok = ok && SL_WBUF_LIT(&b, "Content-Length: ") && sl_wbuf_u64(&b, r->heap_len) &&
                 SL_WBUF_LIT(&b, "\r\n");
    } else if (h->body_kind == SL_BODY_CHUNKED) {
        ok = ok && SL_WBUF_LIT(&b, "Transfer-Encoding: chunked\r\n");
    } else if (h->flags & SL_H1_HAS_CL) {
        ok = ok && SL_WBUF_LIT(&b, "Content-Length: ") && sl_wbuf_u64(&b, h->content_length) &&
             SL_WBUF_LIT(&b, "\r\n");
    }
    if (r->upgrade) {
        /* The client's own value: the route allowed every protocol it names. */
        const sl_h1_header_t *up = sl_h1_find(h, "upgrade", 7);
        ok = ok && put_header(&b, SL_LIT("Upgrade"), up->value) && SL_WBUF_LIT(&b, "Connection: upgrade\r\n");
    } else if (upstream_conf(r)->keepalive_max_idle == 0) {
        ok = ok && SL_WBUF_LIT(&b, "Connection: close\r\n");
    }
    ok = ok && SL_WBUF_LIT(&b, "\r\n");
    if (!ok) return SL_ERROR;
    sl_arena_commit(&r->arena, b.len);
    r->uphead = uv_buf_init(b.p, (unsigned)b.len);
    return SL_OK;
}

static bool client_keeps_alive(const sl_req_t *r) {
    const sl_h1_head_t *h = &r->head;
    if (h->flags & SL_H1_CONN_CLOSE) return false;
    return h->minor >= 1 || (h->flags & SL_H1_CONN_KEEPALIVE);
}

/* Connection header for the client, from the decision made for this response. */
static bool put_conn_header(sl_wbuf_t *b, sl_req_t *r) {
    if (r->c->closing || r->w->draining) r->keep_alive = 0;
    if (!r->keep_alive) return SL_WBUF_LIT(b, "Connection: close\r\n");
    if (r->head.minor == 0) return SL_WBUF_LIT(b, "Connection: keep-alive\r\n");
    return true;
}

static bool body_filtered(const sl_req_t *r) { return r->phases & (1u << SL_PHASE_BODY_FILTER); }

/* Runs the route's body_filter chain over one piece of the response body; *out is what
 * the client gets (the piece itself when no plugin replaced it). The output stays valid
 * until the next call: callers queue one filtered piece at a time. */
static int filter_piece(sl_req_t *r, const char *p, size_t n, bool eof, sl_str_t *out) {
    r->bf_in = p;
    r->bf_in_len = n;
    r->bf_eof = eof;
    r->bf_set = 0;
    if (sl_lua_phase(r, SL_PHASE_BODY_FILTER) == SL_ERROR) {
        r->bf_failed = 1;
        return SL_ERROR;
    }
    *out = r->bf_set ? (sl_str_t){r->bf_buf, r->bf_len} : (sl_str_t){p, n};
    return SL_OK;
}

/* The head sent to the client, rebuilt from the upstream's parsed response. */
static int build_client_head(sl_req_t *r) {
    const sl_h1_head_t *h = &r->rhead;
    sl_wbuf_t b = sl_arena_wbuf(&r->arena, 1024);
    if (!b.p) return SL_ERROR;
    bool ok = SL_WBUF_LIT(&b, "HTTP/1.1 ") && sl_wbuf_u64(&b, (uint64_t)h->status) &&
              SL_WBUF_LIT(&b, " ") && sl_wbuf_str(&b, h->reason.len ? h->reason : sl_h1_reason(h->status)) &&
              SL_WBUF_LIT(&b, "\r\n");
    const sl_hdr_edits_t *ed = &r->resp_edits;
    for (uint16_t i = 0; i < h->nheaders && ok; i++)
        if (!h->headers[i].hop && !(ed->nremoved && sl_edits_removed(ed, h->headers[i].name)))
            ok = put_header(&b, h->headers[i].name, h->headers[i].value);
    for (uint16_t i = 0; i < ed->nadded && ok; i++) ok = put_header(&b, ed->added[i].name, ed->added[i].value);

    r->clq.chunked = 0;
    /* A body_filter may change the body's length: its output is re-framed as chunked. */
    bool filtered = body_filtered(r) && h->body_kind != SL_BODY_NONE;
    if (h->flags & SL_H1_HAS_CL && h->body_kind != SL_BODY_CHUNKED && !filtered) {
        /* Kept on HEAD and 304 too: there it describes the representation, not a body. */
        if (h->status >= 200 && h->status != 204)
            ok = ok && SL_WBUF_LIT(&b, "Content-Length: ") && sl_wbuf_u64(&b, h->content_length) &&
                 SL_WBUF_LIT(&b, "\r\n");
    } else if (h->body_kind == SL_BODY_CHUNKED || h->body_kind == SL_BODY_EOF || filtered) {
        if (r->head.minor >= 1) {
            ok = ok && SL_WBUF_LIT(&b, "Transfer-Encoding: chunked\r\n");
            r->clq.chunked = 1;
        } else {
            r->keep_alive = 0; /* an HTTP/1.0 client learns the end from the close */
        }
    } else if (h->body_kind == SL_BODY_NONE && h->status >= 200 && h->status != 204 &&
               h->status != 304 && r->head.method_id != HTTP_HEAD) {
        ok = ok && SL_WBUF_LIT(&b, "Content-Length: 0\r\n");
    }
    if (h->status == 101) {
        /* Upgrade and Connection are hop-by-hop: the switch is restated for this hop. */
        const sl_h1_header_t *up = sl_h1_find(h, "upgrade", 7);
        ok = ok && put_header(&b, SL_LIT("Upgrade"), up->value) && SL_WBUF_LIT(&b, "Connection: upgrade\r\n\r\n");
    } else {
        ok = ok && put_conn_header(&b, r) && SL_WBUF_LIT(&b, "\r\n");
    }
    if (!ok) return SL_ERROR;
    sl_arena_commit(&r->arena, b.len);
    sl__outq_add(&r->clq, b.p, b.len);
    return SL_OK;
}

/* ---- gateway-made answers ---- */

/* A filter failed on a plugin's or the gateway's answer: a plain 500 replaces it, without
 * the header edits made for the answer it replaces. */
static void respond_plain_500(sl_req_t *r, bool close) {
    static const char body[] = "{\"error\":\"plugin error\"}\n";
    memset(&r->resp_edits, 0, sizeof(r->resp_edits));
    sl__req_respond(r, 500, SL_LIT("application/json"), SL_LIT(body), close);
}

void sl__req_respond(sl_req_t *r, int status, sl_str_t ctype, sl_str_t body, bool close) {
    attempt_abandon(r);
    if (r->up) {
        r->up->req = NULL;
        sl__upconn_close(r->up);
        r->up = NULL;
    }
    r->mode = SL_MODE_LOCAL;
    r->status = status;
    if ((r->phases & (1u << SL_PHASE_HEADER_FILTER)) && !r->in_header_filter && r->c->req == r) {
        r->in_header_filter = 1;
        if (sl_lua_phase(r, SL_PHASE_HEADER_FILTER) == SL_ERROR && status != 500) {
            respond_plain_500(r, close);
            return;
        }
    }
    /* A body we did not read to its end cannot be skipped safely: close after answering. */
    if (close || !r->body_done) r->keep_alive = 0;
    if (!r->keep_alive) sl__conn_stop_reading(r->c);
    sl__outq_reset(&r->clq);
    r->clq.chunked = 0;
    sl_wbuf_t b = sl_arena_wbuf(&r->arena, 512);
    if (!b.p) {
        sl__conn_abort(r->c);
        return;
    }
    bool ok = SL_WBUF_LIT(&b, "HTTP/1.1 ") && sl_wbuf_u64(&b, (uint64_t)status) && SL_WBUF_LIT(&b, " ") &&
              sl_wbuf_str(&b, sl_h1_reason(status)) && SL_WBUF_LIT(&b, "\r\n");
    const sl_hdr_edits_t *ed = &r->resp_edits;
    if (ctype.len && !sl_edits_find(ed, SL_LIT("content-type")) && !sl_edits_removed(ed, SL_LIT("content-type")))
        ok = ok && put_header(&b, SL_LIT("Content-Type"), ctype);
    for (uint16_t i = 0; i < ed->nadded && ok; i++) ok = put_header(&b, ed->added[i].name, ed->added[i].value);
    /* 204 and 304 carry no body and (204) no Content-Length, whatever a plugin asked for. */
    bool bodiless = status == 204 || status == 304;
    if (bodiless) body.len = 0;
    /* A gateway-made body is whole: the body_filter chain sees it as one last piece. A
     * filter that fails here can still be answered with a plain 500. */
    if (body_filtered(r) && !bodiless && r->head.method_id != HTTP_HEAD && !r->bf_failed && r->c->req == r) {
        if (filter_piece(r, body.p, body.len, true, &body) != SL_OK && status != 500) {
            respond_plain_500(r, close);
            return;
        }
    }
    if (status != 204)
        ok = ok && SL_WBUF_LIT(&b, "Content-Length: ") && sl_wbuf_u64(&b, body.len) &&
             SL_WBUF_LIT(&b, "\r\n");
    if (status == 503 && !sl_edits_find(ed, SL_LIT("retry-after")) && !sl_edits_removed(ed, SL_LIT("retry-after")))
        ok = ok && SL_WBUF_LIT(&b, "Retry-After: ") && sl_wbuf_u64(&b, r->retry_after_s ? r->retry_after_s : 1) &&
             SL_WBUF_LIT(&b, "\r\n");
    ok = ok && put_conn_header(&b, r) && SL_WBUF_LIT(&b, "\r\n");
    if (!ok) {
        sl__conn_abort(r->c);
        return;
    }
    sl_arena_commit(&r->arena, b.len);
    sl__outq_add(&r->clq, b.p, b.len);
    if (body.len && r->head.method_id != HTTP_HEAD) sl__outq_add(&r->clq, body.p, body.len);
    r->resp_head = 1;
    r->resp_done = 1;
    resp_pump(r);
}

static void respond_error(sl_req_t *r, int status, const char *msg, bool close) {
    char *body = sl_arena_alloc(&r->arena, 128);
    if (!body) {
        sl__conn_abort(r->c);
        return;
    }
    int n = snprintf(body, 128, "{\"error\":\"%s\"}\n", msg);
    sl__req_respond(r, status, SL_LIT("application/json"), (sl_str_t){body, (size_t)n}, close);
}

/* ---- request start ---- */

static void make_request_id(sl_req_t *r) {
    const sl_h1_header_t *x = sl_h1_find(&r->head, "x-request-id", 12);
    bool usable = x && x->value.len > 0 && x->value.len < sizeof(r->rid);
    for (size_t i = 0; usable && i < x->value.len; i++)
        usable = (unsigned char)x->value.p[i] > 0x20 && (unsigned char)x->value.p[i] < 0x7f;
    if (usable) { /* a client's id is kept when it can be one: 1..32 visible ASCII characters */
        memcpy(r->rid, x->value.p, x->value.len);
        r->rid_len = (uint8_t)x->value.len;
        return;
    }
    /* xorshift64* per worker: unique within a process, unpredictable enough for tracing. */
    sl_worker_t *w = r->w;
    uint64_t v[2];
    for (int i = 0; i < 2; i++) {
        uint64_t s = w->rid_seed;
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        w->rid_seed = s;
        v[i] = s * 0x2545F4914F6CDD1DULL;
    }
    v[1] ^= ++w->rid_seq;
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) r->rid[i] = hex[(v[i / 16] >> ((i % 16) * 4)) & 15];
    r->rid_len = 32;
}

static void normalize_host(sl_req_t *r) {
    sl_str_t h = r->head.host.len ? r->head.host : r->head.authority;
    size_t n = h.len;
    if (n && h.p[0] == '[') {
        const char *e = memchr(h.p, ']', n);
        n = e ? (size_t)(e - h.p + 1) : n;
    } else {
        const char *colon = memchr(h.p, ':', n);
        if (colon) n = (size_t)(colon - h.p);
    }
    if (n >= sizeof(r->host)) n = sizeof(r->host) - 1;
    for (size_t i = 0; i < n; i++) r->host[i] = sl_lower(h.p[i]);
    r->host_len = (uint16_t)n;
}

static int on_body_to_upstream(void *ud, const char *p, size_t n) {
    sl_req_t *r = ud;
    r->body_in += n;
    uint64_t max = r->c->lc->max_body;
    if (max && r->body_in > max) {
        r->body_err = 413;
        return 1;
    }
    return sl__outq_span(&r->upq, p, n) ? 0 : 1;
}

/* A body a plugin asked for is buffered whole, up to this (or the listener's max_body). */
#define SL_BUFFER_MAX_BODY (8u << 20)

static int on_body_to_buffer(void *ud, const char *p, size_t n) {
    sl_req_t *r = ud;
    r->body_in += n;
    uint64_t limit = r->buffer_max ? r->buffer_max : SL_BUFFER_MAX_BODY;
    uint64_t max = r->c->lc->max_body ? SL_MIN(r->c->lc->max_body, limit) : limit;
    if (r->heap_len + n > max) {
        r->body_err = 413;
        return 1;
    }
    if (r->heap_len + n > r->heap_cap) {
        size_t cap = SL_MAX(r->heap_cap * 2, SL_MAX(r->heap_len + n, (size_t)4096));
        char *np = realloc(r->heap, cap);
        if (!np) return 1;
        r->heap = np;
        r->heap_cap = cap;
    }
    memcpy(r->heap + r->heap_len, p, n);
    r->heap_len += n;
    return 0;
}

static void send_continue(sl_req_t *r);

/* Reads what the client sent of the body into r->heap. SL_OK when whole, SL_EAGAIN while
 * waiting for more (the client read resumes), SL_ERROR with r->body_err. */
static int buffer_pump(sl_req_t *r) {
    sl_conn_t *c = r->c;
    while (!r->body_done && c->rpos < c->rlen) {
        size_t used;
        c->h1.spans_left = 1u << 30;
        int rc = sl_h1_body(&c->h1, c->rbuf + c->rpos, c->rlen - c->rpos, &used);
        c->rpos += (uint32_t)used;
        if (rc == SL_ERROR) {
            if (!r->body_err) r->body_err = 400;
            return SL_ERROR;
        }
        if (rc == SL_DONE) r->body_done = 1;
    }
    if (r->body_done) {
        r->body_buffered = 1;
        return SL_OK;
    }
    if (c->rpos == c->rlen) c->rpos = c->rlen = r->head_end;
    sl__conn_arm(c, c->lc->idle_timeout_ms);
    sl__conn_start_reading(c);
    return SL_EAGAIN;
}

int sl__req_buffer_body(sl_req_t *r) {
    if (r->body_buffered) return SL_OK;
    if (r->body_err) return SL_ERROR;
    if (r->mode != SL_MODE_BUFFER) {
        r->mode = SL_MODE_BUFFER;
        r->c->h1.on_data = on_body_to_buffer;
        r->c->h1.ud = r;
        send_continue(r);
        if (r->c->req != r) return SL_ERROR;
    }
    return buffer_pump(r);
}

static const sl_route_conf_t *route_conf(const sl_req_t *r) {
    return r->route >= 0 ? &r->w->cfg->routes[r->route] : NULL;
}

static sl_upstream_rt_t *upstream_rt(const sl_req_t *r) { return &r->w->ug->ups[r->upstream]; }

/* The gateway reads the body itself, so it says 100 Continue itself (as nginx does). */
static void send_continue(sl_req_t *r) {
    sl_conn_t *c = r->c;
    if (!(r->head.flags & SL_H1_EXPECT_CONTINUE) || r->body_done || c->rpos != c->rlen) return;
    r->head.flags &= ~(uint32_t)SL_H1_EXPECT_CONTINUE;
    /* A fresh connection's socket buffer always takes 25 bytes: no write request needed. */
    if (!sl__conn_send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25)) sl__conn_abort(c);
}

/* Whether a route's `upgrade:` entry names protocol p ("websocket", "foo/2"): the entry
 * "*", the same protocol, or an entry without version naming p's protocol. h2c never. */
static bool upgrade_listed(const sl_route_conf_t *rc, sl_str_t p) {
    const char *slash = memchr(p.p, '/', p.len);
    sl_str_t name = {p.p, slash ? (size_t)(slash - p.p) : p.len};
    if (SL_IEQ(name, "h2c")) return false;
    for (size_t i = 0; i < rc->nupgrade; i++) {
        const char *e = rc->upgrade[i];
        if (!e) continue;
        size_t n = strlen(e);
        if ((n == 1 && e[0] == '*') || sl_str_ieq(p, e, n) || (!strchr(e, '/') && sl_str_ieq(name, e, n)))
            return true;
    }
    return false;
}

/* A request goes upstream as an upgrade when it is HTTP/1.1 with Connection: upgrade and
 * one Upgrade header, and the route lists every protocol that header names. Otherwise
 * Upgrade, Connection and HTTP2-Settings are dropped (hop-by-hop) and it is plain HTTP. */
static bool upgrade_allowed(const sl_req_t *r) {
    const sl_route_conf_t *rc = route_conf(r);
    const sl_h1_head_t *h = &r->head;
    if (!rc || !rc->nupgrade || h->major != 1 || h->minor != 1 || !(h->flags & SL_H1_CONN_UPGRADE)) return false;
    if (r->req_edits.nremoved && sl_edits_removed(&r->req_edits, SL_LIT("upgrade"))) return false; /* a plugin's word */
    const sl_h1_header_t *up = NULL;
    for (uint16_t i = 0; i < h->nheaders; i++) {
        if (!SL_IEQ(h->headers[i].name, "upgrade")) continue;
        if (up) return false;
        up = &h->headers[i];
    }
    if (!up) return false;
    sl_str_t list = up->value, tok;
    int n = 0;
    while (sl_h1_next_token(&list, &tok)) {
        if (!upgrade_listed(rc, tok)) return false;
        n++;
    }
    return n > 0;
}

static void start_proxy(sl_req_t *r) {
    sl_conn_t *c = r->c;
    const sl_retry_conf_t *rc = &upstream_conf(r)->retry;
    /* A body a retry may have to send again is read whole first, up to retry.max_body;
     * a bigger (or chunked) one streams once and is never retried. */
    if (!r->body_buffered && (rc->attempts > 1) && r->head.body_kind == SL_BODY_LENGTH &&
        r->head.content_length <= rc->max_body) {
        r->buffer_max = rc->max_body;
        r->replay_wait = 1;
        int st = sl__req_buffer_body(r);
        if (st == SL_EAGAIN || r->c->req != r) return; /* sl__req_on_client_data goes on */
        r->replay_wait = 0;
        if (st == SL_ERROR) {
            int code = r->body_err ? r->body_err : 400;
            respond_error(r, code, code == 413 ? "body too large" : "bad request body", true);
            return;
        }
    }
    r->mode = SL_MODE_PROXY;
    r->stage = SL_STAGE_RESPONSE;
    r->upgrade = upgrade_allowed(r);
    r->upq.chunked = !r->body_buffered && r->head.body_kind == SL_BODY_CHUNKED;
    if (build_upstream_head(r) != SL_OK) {
        respond_error(r, 431, "request head too large", true);
        return;
    }
    sl__outq_add(&r->upq, r->uphead.base, r->uphead.len);
    if (r->body_buffered) {
        if (r->heap_len) sl__outq_add(&r->upq, r->heap, r->heap_len);
    } else {
        send_continue(r);
        if (c->req != r) return;
        c->h1.on_data = on_body_to_upstream;
        c->h1.ud = r;
        /* Frame what the client already sent before connecting: a malformed body found
         * now is answered without the upstream ever seeing a byte. */
        req_pump_up(r);
        if (c->req != r || r->mode != SL_MODE_PROXY) return;
    }
    req_connect(r);
}

static void answer_exit(sl_req_t *r) {
    r->stage = SL_STAGE_RESPONSE;
    sl__req_respond(r, r->exit_status, (sl_str_t){NULL, 0}, r->exit_body, false);
}

static void answer_plugin_error(sl_req_t *r) {
    static const char body[] = "{\"error\":\"plugin error\"}\n";
    r->stage = SL_STAGE_RESPONSE;
    memset(&r->resp_edits, 0, sizeof(r->resp_edits));
    sl__req_respond(r, 500, SL_LIT("application/json"), SL_LIT(body), false);
}

static bool phase_finished(sl_req_t *r, int rc);
static sl_str_t cookie_value(const sl_req_t *r, const char *name);
static sl_str_t header_value(const sl_req_t *r, const char *name);

/* A route's split: the first arm whose match (a header or cookie value) fits, else an arm
 * drawn by weight among those without a match. */
static int split_pick(const sl_req_t *r, const sl_route_conf_t *rc) {
    uint64_t total = 0;
    for (size_t i = 0; i < rc->nsplit; i++) {
        const sl_split_conf_t *a = &rc->split[i];
        if (!a->header && !a->cookie) {
            total += a->weight;
            continue;
        }
        sl_str_t v = a->header ? header_value(r, a->header) : cookie_value(r, a->cookie);
        const char *want = a->header ? a->header_value : a->cookie_value;
        if (v.len == strlen(want) && memcmp(v.p, want, v.len) == 0) return a->upstream;
    }
    uint64_t x = total ? sl_rand64() % total : 0;
    for (size_t i = 0; i < rc->nsplit; i++) {
        const sl_split_conf_t *a = &rc->split[i];
        if (a->header || a->cookie) continue;
        if (x < a->weight) return a->upstream;
        x -= a->weight;
    }
    return rc->upstream;
}

/* Runs the request from its current stage: rewrite, access (each may wait), content. */
static void req_run(sl_req_t *r) {
    for (;;) {
        int phase;
        switch (r->stage) {
        case SL_STAGE_REWRITE:
            phase = SL_PHASE_REWRITE;
            break;
        case SL_STAGE_ACCESS:
            phase = SL_PHASE_ACCESS;
            break;
        case SL_STAGE_CONTENT: {
            const sl_route_conf_t *rc = route_conf(r);
            if (r->upstream < 0 && !r->to_address) r->upstream = rc->nsplit ? split_pick(r, rc) : rc->upstream;
            if (r->upstream < 0 && !r->to_address) {
                sl_log_kv(SL_LOG_WARN, (const char *[]){"route", rc->name, "request_id", r->rid}, 2,
                          "the route's chain gave no answer and it has no upstream");
                r->stage = SL_STAGE_RESPONSE;
                respond_error(r, 503, "no answer", false);
                return;
            }
            start_proxy(r);
            return;
        }
        default:
            return;
        }
        if ((r->phases & (1u << phase)) && !phase_finished(r, sl_lua_phase(r, phase))) return;
        r->stage++;
    }
}

/* Acts on a phase's outcome: true when the request moves on to its next stage. */
static bool phase_finished(sl_req_t *r, int rc) {
    switch (rc) {
    case SL_EAGAIN: /* the coroutine waits: sl__req_wakeup continues */
        return false;
    case SL_ERROR:
        answer_plugin_error(r);
        return false;
    case SL_DONE:
        answer_exit(r);
        return false;
    default:
        return true;
    }
}

void sl__req_wakeup(sl_req_t *r) {
    if (!phase_finished(r, sl_lua_resume(r))) return;
    r->stage++;
    req_run(r);
}

void sl__req_begin(sl_req_t *r) {
    sl_conn_t *c = r->c;
    sl_worker_t *w = r->w;
    r->keep_alive = client_keeps_alive(r);
    r->body_done = r->head.body_kind == SL_BODY_NONE;
    normalize_host(r);
    make_request_id(r);

    uint32_t strip = 0;
    r->route = sl_lua_route(w, r, &strip);
    r->strip = strip;
    if (r->route < 0) {
        static const char body[] = "{\"error\":\"no route\"}";
        sl__req_respond(r, 404, SL_LIT("application/json"), SL_LIT(body), false);
        return;
    }
    r->phases = sl_lua_route_phases(w, r->route);
    if (r->head.body_kind == SL_BODY_LENGTH && c->lc->max_body && r->head.content_length > c->lc->max_body) {
        respond_error(r, 413, "body too large", true);
        return;
    }
    r->stage = SL_STAGE_REWRITE;
    req_run(r);
}

void sl__req_on_client_data(sl_req_t *r) {
    if (!r->body_done) {
        if (r->mode == SL_MODE_PROXY && !r->body_buffered) {
            req_pump_up(r);
            return;
        }
        if (r->mode == SL_MODE_BUFFER) {
            int rc = buffer_pump(r);
            if (rc == SL_EAGAIN) return;
            if (r->replay_wait) {
                if (rc == SL_ERROR) sl__conn_stop_reading(r->c);
                start_proxy(r); /* whole now (or failed: start_proxy answers) */
                return;
            }
            if (r->lua_waiting) {
                /* the plugin waiting in get_body learns the outcome when it runs again */
                if (rc == SL_ERROR) sl__conn_stop_reading(r->c);
                sl__req_wakeup(r);
            }
            return;
        }
    }
    /* Bytes of a pipelined request: they wait in the buffer until this one is answered
     * (conn.c stops reading only when the buffer is full: stopping and restarting reads
     * on every request costs two epoll_ctl calls). */
}

/* ---- upstream connection ---- */

static void up_arm(sl_upconn_t *u, uint64_t ms);

static void up_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    sl_upconn_t *u = (sl_upconn_t *)h;
    if (!u->rbuf) {
        u->rbuf = sl_block_get(&u->w->blocks);
        u->rlen = u->rpos = 0;
        if (!u->rbuf) {
            *buf = uv_buf_init(NULL, 0);
            return;
        }
    }
    *buf = uv_buf_init(u->rbuf + u->rlen, SL_BLOCK_SIZE - u->rlen);
}

static void up_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void hedge_on_read(sl_req_t *r, sl_upconn_t *u, ssize_t nread);
static void hedge_on_connect(sl_req_t *r, sl_upconn_t *u, int status);
static void hedge_failed(sl_req_t *r, const char *why);

static void up_start_reading(sl_upconn_t *u) {
    if (u->reading || u->eof || u->state == SL_UP_CLOSED) return;
    if (u->rbuf && u->rlen == SL_BLOCK_SIZE) return;
    int rc = u->tls ? sl_tls_read_start(u->tls, up_alloc, up_on_read)
                    : uv_read_start((uv_stream_t *)&u->tcp, up_alloc, up_on_read);
    if (rc == 0) u->reading = 1;
}

static void up_stop_reading(sl_upconn_t *u) {
    if (!u->reading) return;
    if (u->tls)
        sl_tls_read_stop(u->tls);
    else
        uv_read_stop((uv_stream_t *)&u->tcp);
    u->reading = 0;
}

void sl__up_start_reading(sl_upconn_t *u) { up_start_reading(u); }
void sl__up_stop_reading(sl_upconn_t *u) { up_stop_reading(u); }

static void up_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    sl_upconn_t *u = (sl_upconn_t *)s;
    sl_req_t *r = u->req;
    if (nread == 0) {
        if (u->rbuf && u->rpos == u->rlen && (!r || r->resp_head)) {
            sl_block_put(&u->w->blocks, u->rbuf);
            u->rbuf = NULL;
        }
        return;
    }
    if (!r) {
        /* Bytes or EOF on a pooled connection: it is no longer at a clean boundary. */
        sl__upconn_close(u);
        return;
    }
    if (r->mode == SL_MODE_TUNNEL) {
        if (nread > 0) u->rlen += (uint32_t)nread;
        sl__tunnel_on_upstream_read(r, nread);
        return;
    }
    if (u != r->up) {
        hedge_on_read(r, u, nread);
        return;
    }
    if (nread < 0) {
        u->eof = 1;
        up_stop_reading(u);
        resp_pump(r);
        return;
    }
    u->rlen += (uint32_t)nread;
    up_arm(u, upstream_conf(r)->read_timeout_ms);
    resp_pump(r);
}

static void up_on_timer(uv_timer_t *t) {
    sl_upconn_t *u = t->data;
    sl_req_t *r = u->req;
    if (!r) {
        sl__upconn_close(u); /* idle keep-alive expired */
        return;
    }
    if (u != r->up)
        hedge_failed(r, "hedge timed out");
    else if (u->state == SL_UP_CONNECTING)
        up_failed(r, 504, SL_FAIL_CONNECT, "upstream connect timed out");
    else
        up_failed(r, 504, SL_FAIL_TIMEOUT, "upstream timed out");
}

static void up_arm(sl_upconn_t *u, uint64_t ms) {
    if (ms) sl_deadline_set(&u->timer, ms);
}

static void up_on_write(uv_write_t *wr, int status) {
    sl_upconn_t *u = (sl_upconn_t *)wr->handle;
    sl_req_t *r = u->req;
    if (!r) return; /* cancelled by a close */
    if (r->mode == SL_MODE_TUNNEL) { /* the upgrade's head was still in flight at the 101 */
        sl__tunnel_on_upstream_written(r, status);
        return;
    }
    r->upq.writing = 0;
    if (status < 0) {
        up_failed(r, 502, SL_FAIL_RESET, "upstream write failed");
        return;
    }
    sl__outq_reset(&r->upq);
    req_pump_up(r);
}

/* The connection is ready for the request (TCP connected, TLS established), or failed;
 * `why` names a TLS failure. */
static void up_connected(sl_upconn_t *u, int status, const char *why) {
    sl_req_t *r = u->req;
    if (!r || u->state == SL_UP_CLOSED) return;
    if (u != r->up) {
        if (status < 0 && why) hedge_failed(r, why);
        else hedge_on_connect(r, u, status);
        return;
    }
    if (status < 0) {
        up_failed(r, status == UV_ETIMEDOUT ? 504 : 502, SL_FAIL_CONNECT, why ? why : uv_strerror(status));
        return;
    }
    u->state = SL_UP_ACTIVE;
    uv_tcp_nodelay(&u->tcp, 1);
    up_start_reading(u);
    req_pump_up(r);
}

static void up_on_tls(sl_tls_t *t, int status) {
    sl_upconn_t *u = sl_tls_owner(t);
    char why[256];
    if (status < 0) snprintf(why, sizeof why, "upstream TLS %s", sl_tls_error(t));
    up_connected(u, status, status < 0 ? why : NULL);
}

/* A target's TLS settings, or NULL for plain TCP (and for upstream.set(address)). */
static const sl_tls_target_conf_t *up_tls_conf(const sl_upconn_t *u) {
    const sl_config_t *cfg = u->w->cfg;
    if (u->upstream >= cfg->nupstreams) return NULL;
    const sl_tls_target_conf_t *tc = cfg->upstreams[u->upstream].targets[u->target].tls;
    return tc && tc->rt ? tc : NULL;
}

static void up_on_connect(uv_connect_t *creq, int status) {
    sl_upconn_t *u = SL_CONTAINER_OF(creq, sl_upconn_t, creq);
    if (!u->req || u->state == SL_UP_CLOSED) return;
    const sl_tls_target_conf_t *tc = status >= 0 ? up_tls_conf(u) : NULL;
    if (tc) {
        /* The handshake runs under the connect timeout already armed. */
        u->tls = sl_tls_connect(tc->rt, (uv_stream_t *)&u->tcp, &u->w->tls_pump, NULL);
        if (u->tls && sl_tls_handshake(u->tls, up_on_tls) == 0) return;
        char why[256];
        snprintf(why, sizeof why, "upstream TLS %s", u->tls ? sl_tls_error(u->tls) : "out of memory");
        up_connected(u, UV_EPROTO, why);
        return;
    }
    up_connected(u, status, NULL);
}

/* ---- attempts: which target, breaker admission, outcomes, retries ----
 *
 * An attempt is one try of the request on one target. It starts with a balancer pick
 * among eligible targets (healthy, breaker not open, not tried by this request) and
 * the target breaker's admission; it counts in the target's in-flight until its
 * connection is released; its outcome (success, failure, or a cancellation that
 * counts as nothing) goes to the breaker and passive health exactly once, on every
 * path: response head, failure, client abort, a gateway answer that replaces it. */

enum { SL_OUT_SUCCESS, SL_OUT_FAILURE, SL_OUT_CANCEL };


typedef struct {
    sl_req_t *r;
    sl_upstream_rt_t *rt;
    const sl_breaker_conf_t *bc;
    uint64_t now_ms;
    bool ignore_health;
} pick_ctx_t;

static bool target_eligible(void *ud, uint32_t t) {
    pick_ctx_t *pc = ud;
    if ((pc->r->tried | pc->r->skip) & (1ull << (t & 63))) return false;
    if (!pc->ignore_health && !sl_tstate_healthy(pc->rt->ts[t], pc->now_ms)) return false;
    return !pc->bc->enabled ||
           sl_breaker_state(&pc->rt->ts[t]->breaker[SL_LAYER_HTTP], pc->bc, pc->now_ms) != SL_BREAKER_OPEN;
}

/* The value of cookie `name` in the request's Cookie header(s), or an empty string. */
static sl_str_t cookie_value(const sl_req_t *r, const char *name) {
    size_t nl = strlen(name);
    for (uint16_t i = 0; i < r->head.nheaders; i++) {
        const sl_h1_header_t *h = &r->head.headers[i];
        if (!SL_IEQ(h->name, "cookie")) continue;
        const char *p = h->value.p, *end = p + h->value.len;
        while (p < end) {
            while (p < end && (*p == ' ' || *p == ';')) p++;
            const char *eq = memchr(p, '=', (size_t)(end - p));
            const char *semi = memchr(p, ';', (size_t)(end - p));
            if (!semi) semi = end;
            if (eq && eq < semi && (size_t)(eq - p) == nl && memcmp(p, name, nl) == 0)
                return (sl_str_t){eq + 1, (size_t)(semi - eq - 1)};
            p = semi;
        }
    }
    return (sl_str_t){"", 0};
}

static sl_str_t header_value(const sl_req_t *r, const char *name) {
    sl_str_t n = {name, strlen(name)};
    for (uint16_t i = 0; i < r->head.nheaders; i++)
        if (sl_str_ieq2(r->head.headers[i].name, n)) return r->head.headers[i].value;
    return (sl_str_t){"", 0};
}

/* What consistent-hash hashes for this request (hash_on). */
static sl_str_t hash_key(const sl_req_t *r, const sl_upstream_conf_t *uc) {
    switch (uc->hash_on) {
    case SL_HASH_HEADER: return header_value(r, uc->hash_name);
    case SL_HASH_COOKIE: return cookie_value(r, uc->hash_name);
    case SL_HASH_PATH: return r->head.path;
    default: return (sl_str_t){r->c->peer, strlen(r->c->peer)};
    }
}

/* Takes target t's breaker admission into r->admit; false (and *ra, ms until it
 * half-opens) when the breaker refuses. */
static bool admit(pick_ctx_t *pc, int t, uint64_t *ra) {
    sl_admit_t a = pc->bc->enabled
                       ? sl_breaker_admit(&pc->rt->ts[t]->breaker[SL_LAYER_HTTP], pc->bc, pc->now_ms, ra)
                       : SL_ADMIT_CLOSED;
    if (a == SL_ADMIT_REFUSED) return false;
    pc->r->admit = (uint8_t)a;
    return true;
}

/* pick_target's answer when the balancer phase raised an error (logged and counted). */
#define SL_PICK_PLUGIN_ERROR (-2)

/* Chooses the next attempt's target and takes its breaker admission (r->admit).
 * Returns the target, or -1; *retry_after_ms > 0 when open breakers were the reason.
 * When every untried target is unhealthy they are tried anyway: a guess beats a
 * certain error (Envoy's "panic" routing, at a threshold of 0%). */
static int pick_target(sl_req_t *r, uint64_t *retry_after_ms) {
    const sl_upstream_conf_t *uc = upstream_conf(r);
    pick_ctx_t pc = {r, upstream_rt(r), &uc->breaker, sl_now_ms(), false};
    sl_str_t key = uc->balancer == SL_LB_CONSISTENT_HASH ? hash_key(r, uc) : (sl_str_t){"", 0};
    *retry_after_ms = 0;
    /* A plugin's balancer phase may name the target; an ineligible or refused choice
     * falls back to the balancer. */
    if (r->phases & (1u << SL_PHASE_BALANCER)) {
        r->lua_target = 0;
        if (sl_lua_phase(r, SL_PHASE_BALANCER) == SL_ERROR) return SL_PICK_PLUGIN_ERROR;
        int t = (int)r->lua_target - 1;
        r->skip = 0;
        uint64_t ra = 0;
        if (t >= 0 && target_eligible(&pc, (uint32_t)t) && admit(&pc, t, &ra)) return t;
    }
    for (int pass = 0; pass < 2; pass++, pc.ignore_health = true) {
        r->skip = 0;
        for (size_t n = 0; n <= uc->ntargets; n++) {
            int t = sl_balancer_pick(pc.rt->bal, target_eligible, &pc, key.p, key.len, sl_rand64());
            if (t < 0) break;
            uint64_t ra = 0;
            if (admit(&pc, t, &ra)) return t;
            r->skip |= 1ull << (t & 63); /* half-open with every probe slot taken, or just opened */
            if (!*retry_after_ms || ra < *retry_after_ms) *retry_after_ms = ra;
        }
        /* open breakers are an answer (503), not a reason to ignore health */
        if (*retry_after_ms) return -1;
        bool any_open = false;
        for (size_t t = 0; uc->breaker.enabled && t < uc->ntargets; t++)
            any_open |= !(r->tried & (1ull << (t & 63))) &&
                        sl_breaker_state(&pc.rt->ts[t]->breaker[SL_LAYER_HTTP], &uc->breaker, pc.now_ms) ==
                            SL_BREAKER_OPEN;
        if (any_open) {
            *retry_after_ms = uc->breaker.open_timeout_ms;
            return -1;
        }
    }
    return -1;
}

static void attempt_begin(sl_req_t *r, int t) {
    r->up_start_ns = sl_now_ns();
    if (r->to_address) return;
    r->target = t;
    r->tried |= 1ull << (t & 63);
    r->attempts++;
    r->outcome_due = 1;
    r->in_flight = 1;
    sl_balancer_begin(upstream_rt(r)->bal, (uint32_t)t);
}

/* The attempt's outcome, once: breaker, passive health. */
static void attempt_outcome(sl_req_t *r, int outcome) {
    if (!r->outcome_due || r->to_address) return;
    r->outcome_due = 0;
    const sl_upstream_conf_t *uc = upstream_conf(r);
    sl_tstate_t *ts = upstream_rt(r)->ts[r->target];
    uint64_t now = sl_now_ms();
    if (uc->breaker.enabled) {
        if (outcome == SL_OUT_CANCEL)
            sl_breaker_cancel(&ts->breaker[SL_LAYER_HTTP], (sl_admit_t)r->admit);
        else
            sl_breaker_record(&ts->breaker[SL_LAYER_HTTP], &uc->breaker, (sl_admit_t)r->admit,
                              outcome == SL_OUT_SUCCESS, now);
    }
    if (outcome == SL_OUT_FAILURE) sl_tstate_passive_failure(ts, &uc->health, now);
}

/* The attempt no longer holds its target (its connection went back or closed). */
static void attempt_release(sl_req_t *r) {
    if (!r->in_flight || r->to_address) return;
    r->in_flight = 0;
    sl_balancer_end(upstream_rt(r)->bal, (uint32_t)r->target);
}

/* The request ends or is answered by the gateway while an attempt is open or a retry's
 * target is admitted: neither is the target's failure. */
static void hedge_end(sl_req_t *r, int outcome);

static void attempt_abandon(sl_req_t *r) {
    if (r->upstream < 0 || !r->w->ug) return;
    hedge_end(r, SL_OUT_CANCEL);
    attempt_outcome(r, SL_OUT_CANCEL);
    attempt_release(r);
    if (r->next_target >= 0) {
        const sl_upstream_conf_t *uc = upstream_conf(r);
        if (uc->breaker.enabled)
            sl_breaker_cancel(&upstream_rt(r)->ts[r->next_target]->breaker[SL_LAYER_HTTP], (sl_admit_t)r->admit);
        r->next_target = -1;
    }
}

static bool method_idempotent(const sl_req_t *r) {
    switch (r->head.method_id) {
    case HTTP_GET: case HTTP_HEAD: case HTTP_OPTIONS: case HTTP_TRACE: case HTTP_PUT: case HTTP_DELETE:
        return true;
    default:
        return false;
    }
}

static bool retry_condition(const sl_retry_conf_t *rc, int kind, int status) {
    if (kind == SL_FAIL_CONNECT) return rc->on_flags & SL_RETRY_ON_CONNECT_ERROR;
    if (kind == SL_FAIL_TIMEOUT) return rc->on_flags & SL_RETRY_ON_TIMEOUT;
    for (uint32_t i = 0; i < rc->nstatuses; i++)
        if (rc->statuses[i] == status) return true;
    return false;
}

static void connect_target(sl_req_t *r);
static void req_connect(sl_req_t *r);
static void hedge_arm(sl_req_t *r);

static void backoff_done(sl_req_t *r) { req_connect(r); }

/* Tries the request again on another target when the config and the request allow it.
 * True when a retry took over: the failed attempt is recorded, its connection and
 * response are dropped, and the next attempt starts after a full-jitter backoff. False
 * leaves everything to the caller (the failure goes to the client as it is). */
static bool try_retry(sl_req_t *r, int kind, int status) {
    const sl_upstream_conf_t *uc = upstream_conf(r);
    const sl_retry_conf_t *rc = &uc->retry;
    if (r->to_address || r->attempts >= rc->attempts || r->resp_written || !retry_condition(rc, kind, status))
        return false;
    /* A request whose connection never happened reached no application: any method may go
     * again, and its queued bytes are still unsent. Otherwise only an idempotent request
     * whose body (if any) can be replayed from the buffer. */
    bool never_connected = kind == SL_FAIL_CONNECT;
    if (!never_connected && (!method_idempotent(r) || (r->head.body_kind != SL_BODY_NONE && !r->body_buffered)))
        return false;
    attempt_outcome(r, SL_OUT_FAILURE);
    uint64_t ra;
    int t = pick_target(r, &ra);
    if (t < 0) return false; /* nothing left to try: the client gets this failure */
    r->next_target = t;
    sl_metrics_retry(&r->w->metrics, r->upstream,
                     kind == SL_FAIL_CONNECT   ? SL_RETRY_CONNECT
                     : kind == SL_FAIL_TIMEOUT ? SL_RETRY_TIMEOUT
                     : kind == SL_FAIL_RESET   ? SL_RETRY_RESET
                                               : SL_RETRY_STATUS);
    attempt_release(r);
    if (r->up) {
        r->up->req = NULL;
        sl__upconn_close(r->up);
        r->up = NULL;
    }
    r->status = 0;
    r->req_sent = 0;
    r->upq.writing = 0;
    if (!never_connected) {
        sl__outq_reset(&r->upq);
        sl__outq_add(&r->upq, r->uphead.base, r->uphead.len);
        if (r->body_buffered && r->heap_len) sl__outq_add(&r->upq, r->heap, r->heap_len);
    }
    uint64_t cap = rc->backoff_ms << SL_MIN(r->attempts - 1, 20);
    cap = SL_MIN(cap, rc->max_backoff_ms);
    uint64_t delay = cap ? sl_rand64() % (cap + 1) : 0;
    if (delay == 0 || sl__req_wait_ms(r, delay, SL_WAIT_BACKOFF, backoff_done) != SL_OK) req_connect(r);
    return true;
}

/* No target can take the request: open breakers answer 503 with Retry-After. */
static void no_target(sl_req_t *r, uint64_t retry_after_ms) {
    const sl_upstream_conf_t *uc = upstream_conf(r);
    if (retry_after_ms) {
        r->retry_after_s = (uint32_t)((retry_after_ms + 999) / 1000);
        sl_log_kv(SL_LOG_WARN, (const char *[]){"request_id", r->rid, "upstream", uc->name}, 2,
                  "every target's circuit breaker is open -> 503");
        respond_error(r, 503, "circuit breaker open", false);
        return;
    }
    respond_error(r, 502, "no upstream target available", false);
}

static void req_connect(sl_req_t *r) {
    if (r->to_address) {
        attempt_begin(r, -1);
        connect_target(r);
        return;
    }
    int t = r->next_target;
    r->next_target = -1;
    if (t < 0) {
        uint64_t ra = 0;
        t = pick_target(r, &ra);
        if (t == SL_PICK_PLUGIN_ERROR) {
            answer_plugin_error(r);
            return;
        }
        if (t < 0) {
            no_target(r, ra);
            return;
        }
    }
    attempt_begin(r, t);
    connect_target(r);
    if (r->up) hedge_arm(r);
}

/* A new upstream connection for r on target t, not yet connecting; NULL when out of memory. */
static sl_upconn_t *upconn_new(sl_req_t *r, uint32_t t) {
    sl_worker_t *w = r->w;
    sl_upconn_t *u = calloc(1, sizeof(*u));
    if (!u) return NULL;
    u->w = w;
    u->upstream = (uint32_t)r->upstream; /* UINT32_MAX for an address: never pooled */
    u->target = t;
    u->req = r;
    u->state = SL_UP_CONNECTING;
    uv_tcp_init(&w->loop, &u->tcp);
    sl_deadline_init(&w->loop, &u->timer, u, up_on_timer);
    u->tcp.data = u;
    w->nupconns++;
    sl_h1_init(&u->h1, HTTP_RESPONSE, w->resp_limits);
    return u;
}

/* Connects the current attempt to r->target: a pooled connection, or a new one. */
static void connect_target(sl_req_t *r) {
    sl_worker_t *w = r->w;
    const sl_upstream_conf_t *uc = upstream_conf(r);
    uint32_t t = (uint32_t)r->target;
    sl_upconn_t *u = r->to_address ? NULL : sl__pool_get(w, (uint32_t)r->upstream, t);
    if (u) {
        u->req = r;
        u->state = SL_UP_ACTIVE;
        r->up = u;
        up_start_reading(u);
        req_pump_up(r);
        return;
    }
    if (!(u = upconn_new(r, t))) {
        attempt_abandon(r);
        respond_error(r, 502, "out of memory", true);
        return;
    }
    r->up = u;
    const struct sockaddr *sa = r->to_address ? (const struct sockaddr *)&r->address
                                              : (const struct sockaddr *)&uc->targets[t].addr.ss;
    int rc = uv_tcp_connect(&u->creq, &u->tcp, sa, up_on_connect);
    if (rc < 0) {
        up_failed(r, 502, SL_FAIL_CONNECT, uv_strerror(rc));
        return;
    }
    up_arm(u, uc->connect_timeout_ms);
}

/* ---- hedging (retry.hedge_after) ----
 *
 * When the first attempt of an idempotent request (no body, or a buffered one) has not
 * begun to answer after hedge_after, a second attempt goes to another eligible target.
 * The first to send response bytes wins; the other is cancelled (breaker: cancel, not
 * failure) and its connection closed. The hedge attempt lives in r->hedge; attempt_swap
 * exchanges it with the current attempt's fields, so the attempt functions serve both. */

static void attempt_swap(sl_req_t *r) {
#define SWAP(a, b)              \
    do {                        \
        __typeof__(a) tmp_ = a; \
        a = b;                  \
        b = tmp_;               \
    } while (0)
    SWAP(r->up, r->hedge.up);
    SWAP(r->target, r->hedge.target);
    SWAP(r->admit, r->hedge.admit);
    SWAP(r->outcome_due, r->hedge.outcome_due);
    SWAP(r->in_flight, r->hedge.in_flight);
    SWAP(r->req_sent, r->hedge.sent);
    SWAP(r->up_start_ns, r->hedge.start_ns);
#undef SWAP
}

static void close_upconn(sl_upconn_t *u) {
    if (!u) return;
    u->req = NULL;
    sl__upconn_close(u);
}

/* Ends the hedge attempt with `outcome` and closes its connection. */
static void hedge_end(sl_req_t *r, int outcome) {
    if (r->wait && r->wait->kind == SL_WAIT_HEDGE) sl__req_cancel_wait(r);
    if (!r->hedge.up && !r->hedge.outcome_due && !r->hedge.in_flight) return;
    attempt_swap(r);
    attempt_outcome(r, outcome);
    attempt_release(r);
    close_upconn(r->up);
    r->up = NULL;
    attempt_swap(r);
}

/* The hedge answered first, or the current attempt failed while the hedge runs: the
 * hedge becomes the current attempt. `lost` is the old current attempt's outcome. */
static void hedge_promote(sl_req_t *r, int lost) {
    attempt_outcome(r, lost);
    attempt_release(r);
    close_upconn(r->up);
    r->up = NULL;
    r->upq.writing = 0; /* the old connection's write, if any, was cancelled with it */
    sl__outq_reset(&r->upq);
    attempt_swap(r);
}

static void hedge_failed(sl_req_t *r, const char *why) {
    sl_log_kv(SL_LOG_INFO, (const char *[]){"request_id", r->rid, "upstream", upstream_conf(r)->name}, 2,
              "hedge attempt failed: %s", why);
    hedge_end(r, SL_OUT_FAILURE);
}

static void hedge_written(uv_write_t *wr, int status) {
    sl_upconn_t *u = (sl_upconn_t *)wr->handle;
    sl_req_t *r = u->req;
    if (!r || u != r->hedge.up) {
        if (r && u == r->up) { /* promoted before its request was fully written */
            if (status < 0) up_failed(r, 502, SL_FAIL_RESET, "upstream write failed");
            else r->req_sent = 1;
        }
        return;
    }
    if (status < 0) {
        hedge_failed(r, "write failed");
        return;
    }
    r->hedge.sent = 1;
}

/* Writes the whole request (head, buffered body) on the hedge's connection. */
static void hedge_send(sl_req_t *r, sl_upconn_t *u) {
    uv_buf_t b[2] = {uv_buf_init(r->uphead.base, (unsigned)r->uphead.len),
                     uv_buf_init(r->heap, (unsigned)(r->body_buffered ? r->heap_len : 0))};
    u->state = SL_UP_ACTIVE;
    uv_tcp_nodelay(&u->tcp, 1);
    up_start_reading(u);
    if (u->tls) {
        int rc = sl_tls_write(u->tls, &u->wreq, b, b[1].len ? 2 : 1, hedge_written);
        if (rc < 0) {
            hedge_failed(r, "write failed");
            return;
        }
        if (rc == 1) { /* all written at once: no callback follows */
            u->wreq.handle = (uv_stream_t *)&u->tcp;
            hedge_written(&u->wreq, 0);
            if (u->req != r) return;
        }
    } else if (uv_write(&u->wreq, (uv_stream_t *)&u->tcp, b, b[1].len ? 2 : 1, hedge_written) != 0) {
        hedge_failed(r, "write failed");
        return;
    }
    up_arm(u, upstream_conf(r)->read_timeout_ms);
}

static void hedge_on_connect(sl_req_t *r, sl_upconn_t *u, int status) {
    if (status < 0) {
        hedge_failed(r, uv_strerror(status));
        return;
    }
    hedge_send(r, u);
}

static void hedge_on_read(sl_req_t *r, sl_upconn_t *u, ssize_t nread) {
    if (nread < 0) {
        hedge_failed(r, nread == UV_EOF ? "closed before answering" : uv_strerror((int)nread));
        return;
    }
    u->rlen += (uint32_t)nread;
    if (r->resp_head) return; /* cannot happen: the hedge ends when the other answers */
    sl_log_kv(SL_LOG_DEBUG, (const char *[]){"request_id", r->rid}, 1, "the hedge answered first");
    hedge_promote(r, SL_OUT_CANCEL);
    up_arm(u, upstream_conf(r)->read_timeout_ms);
    resp_pump(r);
}

static void hedge_fire(sl_req_t *r) {
    if (r->resp_head || !r->up || r->hedge.up) return;
    uint8_t current_admit = r->admit;
    uint64_t ra;
    int t = pick_target(r, &ra); /* takes the hedge's admission into r->admit */
    uint8_t hedge_admit = r->admit;
    r->admit = current_admit;
    if (t < 0) return; /* no other target: the first attempt runs alone */
    r->hedged = 1;
    attempt_swap(r);
    r->admit = hedge_admit;
    attempt_begin(r, t);
    sl_worker_t *w = r->w;
    const sl_upstream_conf_t *uc = upstream_conf(r);
    sl_upconn_t *u = sl__pool_get(w, (uint32_t)r->upstream, (uint32_t)t);
    if (!u && (u = upconn_new(r, (uint32_t)t))) {
        r->up = u;
        attempt_swap(r);
        if (uv_tcp_connect(&u->creq, &u->tcp, (const struct sockaddr *)&uc->targets[t].addr.ss, up_on_connect) != 0)
            hedge_failed(r, "connect failed");
        else
            up_arm(u, uc->connect_timeout_ms);
        return;
    }
    if (u) {
        u->req = r;
        r->up = u;
        attempt_swap(r);
        hedge_send(r, u);
        return;
    }
    attempt_swap(r);
    hedge_end(r, SL_OUT_CANCEL); /* out of memory */
}

/* Arms the hedge of a first attempt when the upstream and the request allow one. */
static void hedge_arm(sl_req_t *r) {
    const sl_retry_conf_t *rc = &upstream_conf(r)->retry;
    /* An upgrade is never hedged: two upstreams could both switch protocols. */
    if (!rc->hedge_after_ms || r->hedged || r->upgrade || r->attempts != 1 || r->to_address || r->wait ||
        !method_idempotent(r) ||
        (r->head.body_kind != SL_BODY_NONE && !r->body_buffered) || upstream_conf(r)->ntargets < 2)
        return;
    sl__req_wait_ms(r, rc->hedge_after_ms, SL_WAIT_HEDGE, hedge_fire);
}

/* The response head arrived: the attempt's outcome and latency are known. A 5xx the
 * retry policy names is retried when it can be; returns true when a retry took over. */
static bool attempt_answered(sl_req_t *r) {
    int st = r->rhead.status;
    uint64_t now = sl_now_ns();
    if (r->to_address) return false;
    hedge_end(r, SL_OUT_CANCEL); /* this attempt answered first: the hedge lost */
    sl_target_observe(&upstream_rt(r)->ts[r->target]->live, now - r->up_start_ns, now);
    if (st >= 500 && try_retry(r, SL_FAIL_OTHER, st)) return true;
    attempt_outcome(r, st >= 500 ? SL_OUT_FAILURE : SL_OUT_SUCCESS);
    return false;
}

/* An upstream exchange failed before the response was complete. */
static void up_failed(sl_req_t *r, int status, int kind, const char *why) {
    sl_upconn_t *u = r->up;
    sl_worker_t *w = r->w;
    const sl_upstream_conf_t *uc = upstream_conf(r);
    bool reused = u && u->nreqs > 0;
    bool got_bytes = u && (r->resp_head || u->rlen > 0);
    if (u) {
        u->req = NULL;
        sl__upconn_close(u);
        r->up = NULL;
    }
    if (r->resp_head && !r->resp_written) {
        /* The rebuilt head never left: the client can still get a clean 502. */
        r->resp_head = 0;
        r->resp_done = 0;
        sl__outq_reset(&r->clq);
    }
    if (r->resp_head) {
        /* The client already has a status line: it must never get a second one. */
        sl_log_kv(SL_LOG_WARN, (const char *[]){"request_id", r->rid, "upstream", uc->name}, 2,
                  "upstream failed mid-response: %s", why);
        sl_metrics_upstream(&w->metrics, r->upstream, r->target, 0, sl_now_ns() - r->up_start_ns);
        attempt_outcome(r, SL_OUT_FAILURE);
        attempt_release(r);
        sl__conn_abort(r->c);
        return;
    }
    /* A pooled connection the upstream closed just as we reused it: the request never
     * reached an application, so one retry on a fresh connection (same attempt, same
     * target) is safe for a request without a body. */
    if (reused && !got_bytes && !r->retried && r->head.body_kind == SL_BODY_NONE && status == 502) {
        r->retried = 1;
        r->req_sent = 0;
        r->upq.writing = 0;
        sl__outq_reset(&r->upq);
        sl__outq_add(&r->upq, r->uphead.base, r->uphead.len);
        connect_target(r);
        return;
    }
    sl_metrics_upstream(&w->metrics, r->upstream, r->target, 0, sl_now_ns() - r->up_start_ns);
    if (r->hedge.up) { /* the hedge still runs: it becomes the attempt */
        hedge_promote(r, SL_OUT_FAILURE);
        if (r->up->rlen) resp_pump(r);
        return;
    }
    hedge_end(r, SL_OUT_CANCEL); /* a hedge timer that has not fired */
    if (try_retry(r, kind, status)) {
        sl_log_kv(SL_LOG_INFO, (const char *[]){"request_id", r->rid, "upstream", uc->name}, 2,
                  "%s: retrying on another target", why);
        return;
    }
    attempt_outcome(r, SL_OUT_FAILURE);
    attempt_release(r);
    sl_log_kv(SL_LOG_WARN,
              (const char *[]){"request_id", r->rid, "route", route_conf(r) ? route_conf(r)->name : NULL,
                               "upstream", uc->name},
              3, "%s -> %d", why, status);
    respond_error(r, status, status == 504 ? "upstream timed out" : "bad gateway", false);
}

/* ---- client -> upstream ---- */

static void req_pump_up(sl_req_t *r) {
    sl_conn_t *c = r->c;
    for (;;) {
        if (r->upq.writing) return;
        uint32_t room = sl__outq_room(&r->upq);
        if (!r->body_done && c->rpos < c->rlen && room > 0) {
            size_t used;
            c->h1.spans_left = room;
            int rc = sl_h1_body(&c->h1, c->rbuf + c->rpos, c->rlen - c->rpos, &used);
            c->rpos += (uint32_t)used;
            if (rc == SL_ERROR) {
                int st = r->body_err ? r->body_err : 400;
                if (r->resp_head) {
                    sl__conn_abort(c);
                    return;
                }
                /* Whatever reached the upstream is abandoned with its connection. */
                respond_error(r, st, st == 413 ? "body too large" : "bad request body", true);
                return;
            }
            if (rc == SL_DONE) {
                r->body_done = 1;
                sl__outq_end_chunks(&r->upq);
            }
            continue;
        }
        sl_upconn_t *u = r->up;
        if (!u || u->state != SL_UP_ACTIVE) return; /* what arrives meanwhile is buffered */
        if (r->upq.niov == 0) {
            if (r->body_done) {
                if (!r->req_sent) {
                    r->req_sent = 1;
                    if (!r->clq.writing) sl_deadline_clear(&c->timer);
                    if (!r->resp_head) up_arm(u, upstream_conf(r)->read_timeout_ms);
                }
                return;
            }
            if (c->rpos == c->rlen) c->rpos = c->rlen = r->head_end;
            sl__conn_arm(c, c->lc->idle_timeout_ms);
            sl__conn_start_reading(c);
            return;
        }
        int rc = sl__stream_write(&r->upq, (uv_stream_t *)&u->tcp, u->tls, &u->wreq, up_on_write);
        if (rc < 0) {
            up_failed(r, 502, SL_FAIL_RESET, "upstream write failed");
            return;
        }
        if (rc == 0) {
            /* Backpressure: the client's bytes wait in its buffer, which stops the reads
             * when full. */
            up_arm(u, upstream_conf(r)->write_timeout_ms);
            return;
        }
    }
}

/* ---- upstream -> client ---- */

static int on_body_to_client(void *ud, const char *p, size_t n) {
    sl_req_t *r = ud;
    return sl__outq_span(&r->clq, p, n) ? 0 : 1;
}

static int on_body_filtered(void *ud, const char *p, size_t n) {
    sl_req_t *r = ud;
    sl_str_t o;
    if (filter_piece(r, p, n, false, &o) != SL_OK) return 1;
    return sl__outq_span(&r->clq, o.p, o.len) ? 0 : 1;
}

static void cl_on_write(uv_write_t *wr, int status) {
    sl_conn_t *c = (sl_conn_t *)wr->handle;
    sl_req_t *r = c->req;
    if (!r) return;
    r->clq.writing = 0;
    sl_deadline_clear(&c->timer);
    if (status < 0) {
        sl__conn_abort(c);
        return;
    }
    sl__outq_reset(&r->clq);
    resp_pump(r);
}

static bool upstream_keeps_alive(const sl_h1_head_t *h) {
    if (h->flags & SL_H1_CONN_CLOSE) return false;
    return h->minor >= 1 || (h->flags & SL_H1_CONN_KEEPALIVE);
}

/* Why a 101 cannot be followed (a 502 instead), or NULL. Only a request forwarded as an
 * upgrade may switch: otherwise the bytes after its head are requests, never tunnel data. */
static const char *switch_refused(const sl_req_t *r) {
    if (!r->upgrade) return "upstream switched protocols unasked";
    if (!r->body_done) return "upstream switched protocols before the request body ended";
    const sl_h1_header_t *up = sl_h1_find(&r->rhead, "upgrade", 7);
    sl_str_t list = up ? up->value : (sl_str_t){"", 0}, tok;
    if (!sl_h1_next_token(&list, &tok)) return "upstream switched protocols without naming one";
    if (tok.len >= 3 && sl_str_ieq((sl_str_t){tok.p, 3}, "h2c", 3) && (tok.len == 3 || tok.p[3] == '/'))
        return "upstream switched to h2c";
    return NULL;
}

static void run_log_phase(sl_req_t *r);

/* The 101 head is queued: the request is over as a request (counted, logged, its Lua state
 * released) and its two connections become a tunnel that outlives it. */
static void tunnel_switch(sl_req_t *r) {
    sl_worker_t *w = r->w;
    uint64_t now = sl_now_ns();
    sl_metrics_upstream(&w->metrics, r->upstream, r->target, 101, now - r->up_start_ns);
    attempt_release(r);
    sl_deadline_clear(&r->up->timer);
    sl_metrics_request(&w->metrics, r->route, 101, now - r->start_ns);
    run_log_phase(r);
    sl__req_cancel_wait(r);
    sl_lua_req_end(r);
    r->keep_alive = 0;
    r->resp_written = 1;
    r->mode = SL_MODE_TUNNEL;
    sl__tunnel_start(r);
}

static void resp_pump(sl_req_t *r) {
    sl_conn_t *c = r->c;
    for (;;) {
        if (r->clq.writing) return;
        sl_upconn_t *u = r->up;
        if (u && !r->resp_head) {
            if (u->rpos < u->rlen) {
                size_t used = 0;
                int st = 0;
                u->h1.req_was_head = r->head.method_id == HTTP_HEAD;
                int rc = sl_h1_head(&u->h1, u->rbuf + u->rpos, u->rlen - u->rpos, &r->rhead, &used, &st);
                if (rc == SL_ERROR) {
                    up_failed(r, 502, SL_FAIL_RESET, "malformed upstream response");
                    return;
                }
                if (rc == SL_OK) {
                    u->rpos += (uint32_t)used;
                    if (r->rhead.status == 101) {
                        const char *why = switch_refused(r);
                        if (why) {
                            up_failed(r, 502, SL_FAIL_OTHER, why);
                            return;
                        }
                    } else if (r->rhead.status < 200) {
                        continue; /* interim responses end here: the gateway sent its own 100 */
                    }
                    r->status = r->rhead.status;
                    if (attempt_answered(r)) return; /* a retry took over */
                    /* An answer that came before the whole body was sent ends the exchange. */
                    if (!r->body_done) r->keep_alive = 0;
                    if (r->phases & (1u << SL_PHASE_HEADER_FILTER)) {
                        r->in_header_filter = 1;
                        if (sl_lua_phase(r, SL_PHASE_HEADER_FILTER) == SL_ERROR) {
                            answer_plugin_error(r);
                            return;
                        }
                    }
                    if (build_client_head(r) != SL_OK) {
                        up_failed(r, 502, SL_FAIL_OTHER, "upstream response head too large");
                        return;
                    }
                    r->resp_head = 1;
                    if (r->rhead.status == 101) {
                        tunnel_switch(r);
                        return;
                    }
                    r->resp_eof_body = r->rhead.body_kind == SL_BODY_EOF;
                    u->h1.on_data = body_filtered(r) ? on_body_filtered : on_body_to_client;
                    u->h1.ud = r;
                    if (r->rhead.body_kind == SL_BODY_NONE) r->resp_done = 1;
                    continue;
                }
            }
            if (u->eof) {
                up_failed(r, 502, SL_FAIL_RESET, "upstream closed before answering");
                return;
            }
            if (u->rlen == SL_BLOCK_SIZE) {
                up_failed(r, 502, SL_FAIL_OTHER, "upstream response head too large");
                return;
            }
            up_start_reading(u);
            return;
        }
        /* A filtered body moves one piece at a time: a plugin's output lives in one buffer. */
        bool filtered = body_filtered(r);
        if (r->bf_end && !r->clq.niov) {
            sl_str_t o;
            if (filter_piece(r, "", 0, true, &o) != SL_OK) {
                sl__conn_abort(c); /* the head went out: cutting the body off is all that is left */
                return;
            }
            r->bf_end = 0;
            r->resp_done = 1;
            sl__outq_span(&r->clq, o.p, o.len);
            sl__outq_end_chunks(&r->clq);
            continue;
        }
        if (u && r->resp_head && !r->resp_done && !r->bf_end && u->rpos < u->rlen && sl__outq_room(&r->clq) &&
            (!filtered || !r->clq.niov)) {
            size_t used;
            u->h1.spans_left = filtered ? 1 : sl__outq_room(&r->clq);
            int rc = sl_h1_body(&u->h1, u->rbuf + u->rpos, u->rlen - u->rpos, &used);
            u->rpos += (uint32_t)used;
            if (r->bf_failed) {
                sl__conn_abort(c);
                return;
            }
            if (rc == SL_ERROR) {
                up_failed(r, 502, SL_FAIL_OTHER, "malformed upstream body");
                return;
            }
            if (rc == SL_DONE) {
                if (filtered) {
                    r->bf_end = 1;
                } else {
                    r->resp_done = 1;
                    sl__outq_end_chunks(&r->clq);
                }
            }
            continue;
        }
        if (r->clq.niov) {
            r->resp_written = r->resp_written || r->resp_head;
            for (uint16_t i = 0; i < r->clq.niov; i++) r->bytes_out += r->clq.iov[i].len;
            int rc = sl__conn_write(c, &r->clq, cl_on_write);
            if (rc < 0) {
                sl__conn_abort(c);
                return;
            }
            if (rc == 0) {
                if (u) up_stop_reading(u);
                sl__conn_arm(c, c->lc->idle_timeout_ms); /* a client that stops reading */
                return;
            }
            continue;
        }
        if (r->resp_done) {
            req_finish(r);
            return;
        }
        if (!u) return;
        if (r->bf_end) return; /* the last piece is still being written */
        if (u->eof) {
            if (r->resp_eof_body) {
                if (body_filtered(r)) {
                    r->bf_end = 1;
                } else {
                    r->resp_done = 1;
                    sl__outq_end_chunks(&r->clq);
                }
                continue;
            }
            up_failed(r, 502, SL_FAIL_OTHER, "upstream closed mid-body");
            return;
        }
        if (u->rpos == u->rlen) u->rpos = u->rlen = 0;
        up_start_reading(u);
        return;
    }
}

/* The log phase runs after the response went out, on every path; it cannot wait. */
static void run_log_phase(sl_req_t *r) {
    if (r->logged || !(r->phases & (1u << SL_PHASE_LOG))) return;
    r->logged = 1;
    sl_lua_phase(r, SL_PHASE_LOG);
}

static void req_finish(sl_req_t *r) {
    sl_worker_t *w = r->w;
    uint64_t now = sl_now_ns();
    sl_upconn_t *u = r->up;
    if (u) {
        const sl_upstream_conf_t *uc = upstream_conf(r);
        bool clean = r->req_sent && !u->eof && u->rpos == u->rlen && !r->resp_eof_body &&
                     upstream_keeps_alive(&r->rhead) && uc->keepalive_max_idle > 0 && !w->draining;
        sl_metrics_upstream(&w->metrics, r->upstream, r->target, r->status, now - r->up_start_ns);
        attempt_release(r);
        u->req = NULL;
        r->up = NULL;
        if (clean) {
            u->nreqs++;
            sl_deadline_clear(&u->timer);
            sl__pool_put(w, u);
            if (u->state == SL_UP_IDLE) up_start_reading(u); /* to see the upstream close it */
        } else {
            sl__upconn_close(u);
        }
    }
    sl_metrics_request(&w->metrics, r->route, r->status, now - r->start_ns);
    run_log_phase(r);
    if (!r->body_done) r->keep_alive = 0;
    sl__conn_request_done(r->c);
}

void sl__req_abort(sl_req_t *r) {
    attempt_abandon(r);
    if (r->up) {
        r->up->req = NULL;
        sl__upconn_close(r->up);
        r->up = NULL;
    }
    if (r->status == 0) r->status = 499; /* the client left before an answer (nginx's 499) */
    /* A tunnel's request was counted (and logged) at its 101. */
    if (r->mode != SL_MODE_TUNNEL)
        sl_metrics_request(&r->w->metrics, r->route, r->status, sl_now_ns() - r->start_ns);
    sl__req_cancel_wait(r);
    if (!r->lua_waiting) run_log_phase(r); /* a coroutine suspended mid-phase is abandoned */
    sl__req_free(r);
}

void sl__req_free(sl_req_t *r) {
    sl_worker_t *w = r->w;
    assert(!r->up);
    sl__req_cancel_wait(r);
    sl_lua_req_end(r);
    sl_arena_reset(&r->arena);
    free(r->heap);
    r->heap = NULL;
    free(r->exit_alloc);
    r->exit_alloc = NULL;
    free(r->bf_buf);
    r->bf_buf = NULL;
    if (w->nfree_reqs < 1024) {
        r->free_next = w->free_reqs;
        w->free_reqs = r;
        w->nfree_reqs++;
    } else {
        free(r);
    }
}
