/* fuzz_head.c — libFuzzer target over the request-head path: sl_h1_head with the default
 * limits, then sl_h1_body over what follows, then the next pipelined head, and so on; then the
 * same input read as upstream responses. Every broken invariant is an abort():
 *
 * - *used never passes the bytes given, and is 0 unless SL_OK;
 * - every slice of a parsed head (method, target, path, query, authority, host, reason, header
 *   names and values) and every body span lies inside the input;
 * - a refused request says 400, 405, 414, 417, 431 or 501; a refused response says 502;
 * - a parsed head has only CRLF line ends and no controls but HTAB (the scanner's promise,
 *   checked again here independently), header names are tokens, values hold no CR/LF/NUL;
 * - framing is stated once: never Content-Length and chunked together; LENGTH means a
 *   nonzero Content-Length; a request body is never read until EOF;
 * - a body framed in one call and the same body framed in small pieces with room for one span
 *   per call agree on the outcome, on where the message ended and on every payload byte;
 * - a head read by the fast path and the same head read by llhttp (llhttp_only) give the same
 *   outcome, status and fields.
 *
 * Built with clang by scripts/fuzz; replayed over the seed corpus by ctest (replay_main.c).
 */
#include "proto/http1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MESSAGES 64

static const sl_h1_limits_t req_limits = {32 * 1024, 8 * 1024};
static const sl_h1_limits_t resp_limits = {32 * 1024, 8 * 1024};

static const char *in_lo, *in_hi; /* the input: every slice must lie in [in_lo, in_hi] */

static void fail(const char *what) {
    fprintf(stderr, "fuzz_head: invariant broken: %s\n", what);
    abort();
}
#define ENSURE(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) fail(#cond);                                                                  \
    } while (0)

static bool inside(const char *p, size_t n) {
    return p >= in_lo && p <= in_hi && n <= (size_t)(in_hi - p);
}

/* A slice of the head: inside [lo, hi) (the head's own bytes), or empty. */
static void check_slice(sl_str_t s, const char *lo, const char *hi) {
    if (s.len == 0) return;
    ENSURE(s.p != NULL);
    ENSURE(s.p >= lo && s.p <= hi && s.len <= (size_t)(hi - s.p));
}

static bool is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static void check_head(const sl_h1_head_t *h, int type, const char *p, size_t used) {
    const char *lo = p, *hi = p + used;
    /* the scanner's promise, re-checked byte by byte */
    for (size_t i = 0; i < used; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\r')
            ENSURE(i + 1 < used && p[i + 1] == '\n');
        else if (c == '\n')
            ENSURE(i > 0 && p[i - 1] == '\r');
        else
            ENSURE(c >= 0x20 || c == '\t');
        ENSURE(c != 0x7f);
    }
    ENSURE(used >= 4 && memcmp(p + used - 4, "\r\n\r\n", 4) == 0);
    ENSURE(h->nheaders <= SL_H1_MAX_HEADERS);
    for (uint16_t i = 0; i < h->nheaders; i++) {
        const sl_h1_header_t *x = &h->headers[i];
        check_slice(x->name, lo, hi);
        check_slice(x->value, lo, hi);
        ENSURE(x->name.len > 0);
        for (size_t k = 0; k < x->name.len; k++) ENSURE(is_tchar((unsigned char)x->name.p[k]));
        for (size_t k = 0; k < x->value.len; k++) {
            char c = x->value.p[k];
            ENSURE(c != '\r' && c != '\n' && c != '\0');
        }
        if (x->value.len) {
            ENSURE(x->value.p[0] != ' ' && x->value.p[0] != '\t');
            ENSURE(x->value.p[x->value.len - 1] != ' ' && x->value.p[x->value.len - 1] != '\t');
        }
        ENSURE(x->hop <= 1);
    }
    bool has_cl = (h->flags & SL_H1_HAS_CL) != 0;
    ENSURE(!(has_cl && h->body_kind == SL_BODY_CHUNKED));
    ENSURE(h->body_kind <= SL_BODY_EOF);
    if (h->body_kind == SL_BODY_LENGTH) ENSURE(has_cl && h->content_length > 0);
    if (!has_cl) ENSURE(h->content_length == 0);
    ENSURE(h->major == 1 && h->minor <= 1);
    if (type == HTTP_REQUEST) {
        ENSURE(h->body_kind != SL_BODY_EOF);
        ENSURE(h->method.len > 0 && h->target.len > 0);
        check_slice(h->method, lo, hi);
        check_slice(h->target, lo, hi);
        check_slice(h->query, lo, hi);
        check_slice(h->authority, lo, hi);
        check_slice(h->host, lo, hi);
        /* path is a slice of the target, or the literal "/" when the target has none */
        if (!(h->path.len == 1 && h->path.p[0] == '/')) check_slice(h->path, lo, hi);
        if (h->path.len == 1 && h->path.p[0] == '*')
            ENSURE(h->method_id == HTTP_OPTIONS); /* asterisk-form */
        else
            ENSURE(h->path.len > 0 && h->path.p[0] == '/');
        if (h->minor == 1) ENSURE(sl_h1_find(h, "host", 4) != NULL);
        if (h->flags & SL_H1_ABSOLUTE_FORM) ENSURE(sl_str_ieq2(h->authority, h->host));
        ENSURE(h->method_id != HTTP_CONNECT);
    } else {
        ENSURE(h->status >= 100 && h->status <= 599);
        check_slice(h->reason, lo, hi);
    }
}

/* Two readings of one head agree: same bytes in every slice (an empty slice may point
 * anywhere), same numbers and flags. */
static bool same_str(sl_str_t a, sl_str_t b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static void check_same(const sl_h1_head_t *a, const sl_h1_head_t *b) {
    ENSURE(same_str(a->method, b->method) && same_str(a->target, b->target));
    ENSURE(same_str(a->path, b->path) && same_str(a->query, b->query));
    ENSURE(same_str(a->authority, b->authority) && same_str(a->host, b->host));
    ENSURE(same_str(a->reason, b->reason));
    ENSURE(a->status == b->status && a->major == b->major && a->minor == b->minor);
    ENSURE(a->method_id == b->method_id && a->body_kind == b->body_kind);
    ENSURE(a->flags == b->flags && a->content_length == b->content_length);
    ENSURE(a->nheaders == b->nheaders);
    for (uint16_t i = 0; i < a->nheaders; i++) {
        ENSURE(same_str(a->headers[i].name, b->headers[i].name));
        ENSURE(same_str(a->headers[i].value, b->headers[i].value));
        ENSURE(a->headers[i].hop == b->headers[i].hop);
    }
}

/* ---- bodies: framed twice, compared ---- */

typedef struct {
    char buf[64 * 1024];
    size_t len;
} sink_t;

static sink_t sink_whole, sink_pieces;

static int on_data(void *ud, const char *p, size_t n) {
    sink_t *s = ud;
    if (n == 0) return 0;
    ENSURE(inside(p, n));
    ENSURE(s->len + n <= sizeof(s->buf)); /* the payload never exceeds the input */
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    return 0;
}

/* Frames p[0..n) in one call (`whole`) or in pieces of `step` bytes with room for one span per
 * call. Returns SL_DONE, SL_OK (all consumed, more expected) or SL_ERROR; *end is where it
 * stopped. */
static int frame(sl_h1_t *h, const char *p, size_t n, bool whole, size_t step, size_t *end) {
    size_t off = 0;
    int rc = SL_OK;
    for (int guard = 0; guard < 1000000; guard++) {
        size_t take = whole ? n - off : SL_MIN(step, n - off), used = (size_t)-1;
        h->spans_left = whole ? (1u << 30) : 1;
        rc = sl_h1_body(h, p + off, take, &used);
        if (rc == SL_ERROR) break;
        ENSURE(rc == SL_OK || rc == SL_DONE);
        ENSURE(used <= take);
        off += used;
        if (rc == SL_DONE) break;
        /* SL_OK with bytes left over is only the span budget stopping a chunked decoder */
        if (used < take) ENSURE(h->body_kind == SL_BODY_CHUNKED && h->spans_left == 0);
        if (off == n) break;
        ENSURE(used > 0); /* a call that stops early has still made progress */
    }
    *end = off;
    return rc;
}

/* Parses heads and bodies one after another from p[0..n) the way a connection would. */
static void run(int type, bool req_was_head, const char *p, size_t n) {
    static sl_h1_t h, h2, hl;
    static sl_h1_head_t head, head2, headl;
    static sl_h1_header_t spill[SL_H1_MAX_HEADERS], spill2[SL_H1_MAX_HEADERS],
        spilll[SL_H1_MAX_HEADERS];
    head.spill = head2.spill = headl.spill = sl_h1_spill_array;
    head.spill_ud = spill;
    head2.spill_ud = spill2;
    headl.spill_ud = spilll;
    const sl_h1_limits_t *lim = type == HTTP_REQUEST ? &req_limits : &resp_limits;
    sl_h1_init(&h, type, lim);
    size_t off = 0;
    for (int msg = 0; msg < MAX_MESSAGES && off < n; msg++) {
        size_t used = (size_t)-1;
        int status = 0;
        h.req_was_head = req_was_head;
        int rc = sl_h1_head(&h, p + off, n - off, &head, &used, &status);
        ENSURE(used <= n - off);
        /* the same bytes read by llhttp alone */
        size_t usedl = (size_t)-1;
        int statusl = 0;
        sl_h1_init(&hl, type, lim);
        hl.req_was_head = req_was_head;
        hl.llhttp_only = 1;
        int rcl = sl_h1_head(&hl, p + off, n - off, &headl, &usedl, &statusl);
        ENSURE(rc == rcl && used == usedl);
        if (rc == SL_ERROR) ENSURE(status == statusl);
        if (rc == SL_OK) check_same(&head, &headl);
        if (rc == SL_EAGAIN) {
            ENSURE(used == 0);
            return;
        }
        if (rc == SL_ERROR) {
            ENSURE(used == 0);
            if (type == HTTP_REQUEST)
                ENSURE(status == 400 || status == 405 || status == 414 || status == 417 ||
                       status == 431 || status == 501);
            else
                ENSURE(status == 502);
            return;
        }
        ENSURE(rc == SL_OK);
        ENSURE(used > 0);
        /* the head minus any leading empty lines */
        size_t lead = 0;
        while (lead + 1 < used && p[off + lead] == '\r' && p[off + lead + 1] == '\n') lead += 2;
        check_head(&head, type, p + off + lead, used - lead);
        off += used;

        /* A second parser over the same head frames the body in pieces. */
        size_t u2 = 0;
        int st2 = 0;
        sl_h1_init(&h2, type, lim);
        h2.req_was_head = req_was_head;
        ENSURE(sl_h1_head(&h2, p + off - used, used, &head2, &u2, &st2) == SL_OK && u2 == used);
        ENSURE(head2.body_kind == head.body_kind && head2.nheaders == head.nheaders);

        h.on_data = on_data;
        h.ud = &sink_whole;
        h2.on_data = on_data;
        h2.ud = &sink_pieces;
        sink_whole.len = sink_pieces.len = 0;
        size_t end1, end2;
        size_t step = 1 + (n + (size_t)msg) % 7;
        int rc1 = frame(&h, p + off, n - off, true, 0, &end1);
        int rc2 = frame(&h2, p + off, n - off, false, step, &end2);
        ENSURE(rc1 == rc2);
        if (rc1 == SL_ERROR) return;
        ENSURE(end1 == end2);
        ENSURE(sink_whole.len == sink_pieces.len);
        ENSURE(memcmp(sink_whole.buf, sink_pieces.buf, sink_whole.len) == 0);
        if (head.body_kind == SL_BODY_NONE) ENSURE(rc1 == SL_DONE && end1 == 0);
        if (head.body_kind == SL_BODY_LENGTH) {
            ENSURE(sink_whole.len == end1);
            ENSURE(rc1 == SL_DONE ? end1 == head.content_length : end1 < head.content_length);
        }
        if (head.body_kind == SL_BODY_EOF) ENSURE(rc1 == SL_OK && end1 == n - off);
        if (head.body_kind == SL_BODY_CHUNKED) ENSURE(sink_whole.len < end1 || end1 == 0);
        if (rc1 != SL_DONE) return;
        off += end1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data;
    in_lo = p;
    in_hi = p + size;
    run(HTTP_REQUEST, false, p, size);
    run(HTTP_RESPONSE, false, p, size);
    run(HTTP_RESPONSE, true, p, size);
    return 0;
}
