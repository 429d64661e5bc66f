/* h1_head.c — the HTTP/1.1 heads of a request's exchange, always rebuilt from parsed
 * fields (client bytes are never forwarded raw): the request head sent upstream, the
 * response head sent to an HTTP/1 client (from the upstream's response or for a
 * gateway-made answer), and the keep-alive and upgrade decisions they carry. */
#include "http/h1_head.h"
#include "base/wbuf.h"

#include <string.h>

static bool put_header(sl_wbuf_t *b, sl_str_t name, sl_str_t value) {
    return sl_wbuf_str(b, name) && SL_WBUF_LIT(b, ": ") && sl_wbuf_str(b, value) &&
           SL_WBUF_LIT(b, "\r\n");
}

/* Builds a head with fill() in whatever room the arena's current chunk has left, and once
 * more in a fresh block when it did not fit there: the current chunk may be the request's
 * small first one (block.h), which most heads fit. Asking for a head's worst case up front
 * would take a block every time. The head is committed to the arena; *out is where it is.
 * fill() may run twice. */
#define SL_HEAD_MIN 128 /* less room than this in the chunk: straight to a block */

static int arena_build(sl_req_t *r, bool (*fill)(sl_req_t *r, sl_wbuf_t *b, const void *arg), const void *arg,
                       sl_wbuf_t *out) {
    for (size_t want = SL_HEAD_MIN;; want = SL_BLOCK_SIZE) {
        *out = sl_arena_wbuf(&r->arena, want);
        if (!out->p) return SL_ERROR;
        if (fill(r, out, arg)) break;
        if (want == SL_BLOCK_SIZE) return SL_ERROR;
    }
    sl_arena_commit(&r->arena, out->len);
    return SL_OK;
}

/* Whether the loop below copies a Host field of the client's: one that is present, even
 * empty (an origin-form request with no authority sends "Host:"), and not removed. */
static bool client_host_kept(const sl_h1_head_t *h, const sl_hdr_edits_t *ed) {
    for (uint16_t i = 0; i < h->nheaders; i++) {
        const sl_h1_header_t *x = &h->headers[i];
        if (!x->hop && SL_IEQ(x->name, "host") && !(ed->nremoved && sl_edits_removed(ed, x->name)))
            return true;
    }
    return false;
}

/* The head sent upstream: method, path (prefix stripped), the client's end-to-end
 * headers, X-Forwarded-*, X-Request-ID and our own framing. */
static bool fill_upstream_head(sl_req_t *r, sl_wbuf_t *bp, const void *arg) {
    (void)arg;
    const sl_h1_head_t *h = &r->head;
    sl_wbuf_t b = *bp;
    sl_str_t path = r->over.path.p ? r->over.path : h->path;
    if (r->strip) {
        path.p += r->strip;
        path.len -= r->strip;
    }
    bool ok = sl_wbuf_str(&b, h->method) && SL_WBUF_LIT(&b, " ");
    if (path.len == 0 || path.p[0] != '/') ok = ok && SL_WBUF_LIT(&b, "/");
    ok = ok && sl_wbuf_str(&b, path);
    sl_str_t query = r->over.query_set ? r->over.query : h->query;
    if (query.len) ok = ok && SL_WBUF_LIT(&b, "?") && sl_wbuf_str(&b, query);
    ok = ok && SL_WBUF_LIT(&b, " HTTP/1.1\r\n");

    bool has_xff = false;
    bool has_rid = false;
    int kept = 0; /* X-Forwarded-Proto (1), -Host (2), -Port (4) kept from a trusted proxy */
    const sl_hdr_edits_t *ed = &r->req_edits;
    /* The consumer header is the gateway's word on who authenticated: never the client's. */
    const char *ch = r->w->cfg->consumer_header;
    sl_str_t consumer_hdr = {ch, ch ? strlen(ch) : 0};
    for (uint16_t i = 0; i < h->nheaders && ok; i++) {
        const sl_h1_header_t *x = &h->headers[i];
        if (x->hop) continue;
        if (ed->nremoved && sl_edits_removed(ed, x->name)) continue;
        if (consumer_hdr.len && sl_str_ieq2(x->name, consumer_hdr)) continue;
        /* Only X- names need a closer look: most headers pass at the first two bytes. */
        if (x->name.len > 2 && (x->name.p[0] | 0x20) == 'x' && x->name.p[1] == '-') {
            if (SL_IEQ(x->name, "x-forwarded-for")) {
                has_xff = true; /* every field, joined below with the peer's address */
                continue;
            }
            /* A client's own X-Forwarded-Proto/-Host/-Port are kept only from a trusted proxy
             * (the listener's trusted_proxies): from anyone else they are the gateway's to say. */
            int fwd = SL_IEQ(x->name, "x-forwarded-proto")  ? 1
                      : SL_IEQ(x->name, "x-forwarded-host") ? 2
                      : SL_IEQ(x->name, "x-forwarded-port") ? 4
                                                            : 0;
            if (fwd && (!r->ds->trusted || (kept & fwd))) continue;
            kept |= fwd;
            /* the client's id goes up as the request's own (below): once, and only when it
             * could be one (make_request_id), so the upstream and the logs name one id */
            if (SL_IEQ(x->name, "x-request-id")) continue;
        }
        ok = put_header(&b, x->name, x->value);
    }
    for (uint16_t i = 0; i < ed->nadded && ok; i++) {
        /* Upgrade is the route's to forward (below) and HTTP2-Settings nobody's, not a plugin's. */
        if (SL_IEQ(ed->added[i].name, "upgrade") || SL_IEQ(ed->added[i].name, "http2-settings")) continue;
        if (SL_IEQ(ed->added[i].name, "x-request-id")) has_rid = true;
        ok = put_header(&b, ed->added[i].name, ed->added[i].value);
    }
    /* Only a request without one gets a Host: an empty client Host is copied above, and a
     * second one would make the request one that the upstream must refuse (RFC 9110 7.2).
     * An HTTP/1.0 request may have none: its absolute-form target's authority (h->host, the
     * port kept), else an empty one. */
    bool absolute = h->flags & SL_H1_ABSOLUTE_FORM;
    if ((!h->host.len || (absolute && !sl_h1_find(h, "host", 4))) && !sl_edits_find(ed, SL_LIT("host")) &&
        !client_host_kept(h, ed))
        ok = ok && put_header(&b, SL_LIT("Host"), absolute ? h->host : (sl_str_t){r->host, r->host_len});
    ok = ok && SL_WBUF_LIT(&b, "X-Forwarded-For: ");
    /* Several X-Forwarded-For fields are one list (RFC 9110 5.3): all of them, in order. */
    for (uint16_t i = 0; has_xff && i < h->nheaders && ok; i++) {
        const sl_h1_header_t *x = &h->headers[i];
        if (x->hop || !SL_IEQ(x->name, "x-forwarded-for") || (ed->nremoved && sl_edits_removed(ed, x->name)))
            continue;
        if (x->value.len) ok = sl_wbuf_str(&b, x->value) && SL_WBUF_LIT(&b, ", ");
    }
    ok = ok && sl_wbuf_put(&b, r->ds->peer, strlen(r->ds->peer)) && SL_WBUF_LIT(&b, "\r\n");
    if (!(kept & 1))
        ok = ok && (r->ds->secure ? SL_WBUF_LIT(&b, "X-Forwarded-Proto: https\r\n")
                                  : SL_WBUF_LIT(&b, "X-Forwarded-Proto: http\r\n"));
    if (h->host.len && !(kept & 2)) ok = ok && put_header(&b, SL_LIT("X-Forwarded-Host"), h->host);
    if (!(kept & 4))
        ok = ok && SL_WBUF_LIT(&b, "X-Forwarded-Port: ") && sl_wbuf_put(&b, r->ds->port_text, r->ds->port_len) &&
             SL_WBUF_LIT(&b, "\r\n");
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
    } else if (sl__req_upstream_conf(r)->keepalive_max_idle == 0) {
        ok = ok && SL_WBUF_LIT(&b, "Connection: close\r\n");
    }
    ok = ok && SL_WBUF_LIT(&b, "\r\n");
    *bp = b;
    return ok;
}

int sl__h1_upstream_head(sl_req_t *r) {
    sl_wbuf_t b;
    if (arena_build(r, fill_upstream_head, NULL, &b) != SL_OK) return SL_ERROR;
    r->uphead = uv_buf_init(b.p, (unsigned)b.len);
    return SL_OK;
}

bool sl__h1_client_keeps_alive(const sl_req_t *r) {
    const sl_h1_head_t *h = &r->head;
    if (h->flags & SL_H1_CONN_CLOSE) return false;
    return h->minor >= 1 || (h->flags & SL_H1_CONN_KEEPALIVE);
}

/* Connection header for the client, from the decision made for this response. */
static bool put_conn_header(sl_wbuf_t *b, sl_req_t *r) {
    if (r->ds->closing || r->w->draining) r->keep_alive = 0;
    if (!r->keep_alive) return SL_WBUF_LIT(b, "Connection: close\r\n");
    if (r->head.minor == 0) return SL_WBUF_LIT(b, "Connection: keep-alive\r\n");
    return true;
}

/* The head sent to the client, rebuilt from the upstream's parsed response. */
static bool fill_client_head(sl_req_t *r, sl_wbuf_t *bp, const void *arg) {
    (void)arg;
    const sl_h1_head_t *h = &r->rhead;
    sl_wbuf_t b = *bp;
    bool ok = SL_WBUF_LIT(&b, "HTTP/1.1 ") && sl_wbuf_u64(&b, (uint64_t)h->status) &&
              SL_WBUF_LIT(&b, " ") && sl_wbuf_str(&b, h->reason.len ? h->reason : sl_h1_reason(h->status)) &&
              SL_WBUF_LIT(&b, "\r\n");
    const sl_hdr_edits_t *ed = &r->resp_edits;
    for (uint16_t i = 0; i < h->nheaders && ok; i++)
        if (!h->headers[i].hop && !(ed->nremoved && sl_edits_removed(ed, h->headers[i].name)))
            ok = put_header(&b, h->headers[i].name, h->headers[i].value);
    for (uint16_t i = 0; i < ed->nadded && ok; i++) ok = put_header(&b, ed->added[i].name, ed->added[i].value);

    r->clq.chunked = 0;
    r->resp.eof_client = 0;
    /* A body_filter may change the body's length: its output is re-framed as chunked. */
    bool filtered = sl__req_body_filtered(r) && h->body_kind != SL_BODY_NONE;
    if (h->flags & SL_H1_HAS_CL && h->body_kind != SL_BODY_CHUNKED && !sl__req_length_changes(r)) {
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
            r->resp.eof_client = 1;
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
    *bp = b;
    return ok;
}

int sl__h1_client_head(sl_req_t *r) {
    sl_wbuf_t b;
    if (arena_build(r, fill_client_head, NULL, &b) != SL_OK) return SL_ERROR;
    sl_outq_add(&r->clq, b.p, b.len);
    return SL_OK;
}

bool sl__h1_upstream_keeps_alive(const sl_h1_head_t *h) {
    if (h->flags & SL_H1_CONN_CLOSE) return false;
    return h->minor >= 1 || (h->flags & SL_H1_CONN_KEEPALIVE);
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
bool sl__h1_upgrade_allowed(const sl_req_t *r) {
    const sl_route_conf_t *rc = sl__req_route_conf(r);
    const sl_h1_head_t *h = &r->head;
    if (!rc || !rc->nupgrade || !r->ds->can_upgrade || h->major != 1 || h->minor != 1 || !(h->flags & SL_H1_CONN_UPGRADE)) return false;
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

/* The head of a gateway-made answer (sl__req_respond): status, the content type unless a
 * plugin set or removed one, the plugins' headers, the length, Retry-After on a 503. */
typedef struct {
    sl_str_t ctype;
    uint64_t content_length;
} answer_t;

static bool fill_answer_head(sl_req_t *r, sl_wbuf_t *bp, const void *arg) {
    const answer_t *an = arg;
    sl_str_t ctype = an->ctype;
    uint64_t content_length = an->content_length;
    int status = r->status;
    sl_wbuf_t b = *bp;
    bool ok = SL_WBUF_LIT(&b, "HTTP/1.1 ") && sl_wbuf_u64(&b, (uint64_t)status) && SL_WBUF_LIT(&b, " ") &&
              sl_wbuf_str(&b, sl_h1_reason(status)) && SL_WBUF_LIT(&b, "\r\n");
    const sl_hdr_edits_t *ed = &r->resp_edits;
    if (ctype.len && !sl_edits_find(ed, SL_LIT("content-type")) && !sl_edits_removed(ed, SL_LIT("content-type")))
        ok = ok && put_header(&b, SL_LIT("Content-Type"), ctype);
    for (uint16_t i = 0; i < ed->nadded && ok; i++) ok = put_header(&b, ed->added[i].name, ed->added[i].value);
    /* None on a 204 (RFC 9110 8.6), nor on a 304: there it would have to be the length
     * of the 200's content, which an answer made here does not know; a 0 would make a
     * cache that refreshes its entry from the 304 believe the stored content is empty. */
    if (status != 204 && status != 304)
        ok = ok && SL_WBUF_LIT(&b, "Content-Length: ") && sl_wbuf_u64(&b, content_length) &&
             SL_WBUF_LIT(&b, "\r\n");
    if (status == 503 && !sl_edits_find(ed, SL_LIT("retry-after")) && !sl_edits_removed(ed, SL_LIT("retry-after")))
        ok = ok && SL_WBUF_LIT(&b, "Retry-After: ") && sl_wbuf_u64(&b, r->at.retry_after_s ? r->at.retry_after_s : 1) &&
             SL_WBUF_LIT(&b, "\r\n");
    ok = ok && put_conn_header(&b, r) && SL_WBUF_LIT(&b, "\r\n");
    *bp = b;
    return ok;
}

int sl__h1_answer_head(sl_req_t *r, sl_str_t ctype, uint64_t content_length) {
    sl_outq_reset(&r->clq);
    r->clq.chunked = 0;
    r->resp.eof_client = 0;
    answer_t an = {ctype, content_length};
    sl_wbuf_t b;
    if (arena_build(r, fill_answer_head, &an, &b) != SL_OK) return SL_ERROR;
    sl_outq_add(&r->clq, b.p, b.len);
    return SL_OK;
}
