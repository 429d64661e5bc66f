/* h2_client_test.c — unit tests for core/client/h2_client.c: the driver against a real
 * nghttp2 server session, real frames handed back and forth in memory (no socket). The
 * server records what it received (fields, body, RST_STREAM codes) and answers as each
 * case says; the client side records every op. Cases: a response's status, fields, body
 * and trailers with a 1xx before them (skipped); a head that ends the stream; a request
 * body that waits and resumes; an RST_STREAM and a REFUSED_STREAM; a GOAWAY's
 * last-stream-id (the streams above it refused, one submitted after it never sent, the
 * one below it answered); SETTINGS' max concurrent streams; flow control (a held stream
 * gets its window only, the connection's is given back as DATA arrives, consume and a
 * dropped chunk give a stream's back); a cancel; a head past max_head_bytes (head_too_big),
 * and trailers that pass it only together with the head (each block has the limit); a field an
 * op refuses (that stream reset, the session going on); forget.
 *
 * Run: h2_client_test [substring]
 */
#include "client/h2_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "check.h"

/* ---- the server: an nghttp2 server session ---- */

#define SRV_STREAMS 16

typedef struct {
    size_t len, off;        /* body bytes: byte i is i % 251 */
    const char *trailer;    /* a trailer field's value (grpc-status), NULL: none */
} srv_body_t;

typedef struct {
    nghttp2_session *ss;
    char path[SRV_STREAMS][32];        /* by stream id / 2 */
    char body[SRV_STREAMS][128];
    size_t body_len[SRV_STREAMS];
    int ended[SRV_STREAMS];            /* the request's END_STREAM arrived */
    uint32_t rst[SRV_STREAMS];         /* an RST_STREAM's code + 1; 0: none */
    int nheaders;                      /* request HEADERS received */
    srv_body_t bodies[SRV_STREAMS];
} server_t;

static int sidx(int32_t id) { return (id / 2) % SRV_STREAMS; }

static int srv_header(nghttp2_session *ss, const nghttp2_frame *f, const uint8_t *n, size_t nl, const uint8_t *v,
                      size_t vl, uint8_t flags, void *ud) {
    server_t *s = ud;
    (void)ss, (void)flags;
    if (nl == 5 && !memcmp(n, ":path", 5)) snprintf(s->path[sidx(f->hd.stream_id)], 32, "%.*s", (int)vl, v);
    return 0;
}

static int srv_data(nghttp2_session *ss, uint8_t flags, int32_t sid, const uint8_t *d, size_t len, void *ud) {
    server_t *s = ud;
    (void)ss, (void)flags;
    int i = sidx(sid);
    if (s->body_len[i] + len <= sizeof s->body[i]) memcpy(s->body[i] + s->body_len[i], d, len);
    s->body_len[i] += len;
    return 0;
}

static int srv_frame(nghttp2_session *ss, const nghttp2_frame *f, void *ud) {
    server_t *s = ud;
    (void)ss;
    if (f->hd.type == NGHTTP2_HEADERS) s->nheaders++;
    if (f->hd.type == NGHTTP2_RST_STREAM) s->rst[sidx(f->hd.stream_id)] = f->rst_stream.error_code + 1;
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        s->ended[sidx(f->hd.stream_id)] = 1;
    return 0;
}

static ssize_t srv_read(nghttp2_session *ss, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *ud) {
    (void)ud;
    srv_body_t *b = src->ptr;
    size_t n = SL_MIN(len, b->len - b->off);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)((b->off + i) % 251);
    b->off += n;
    if (b->off == b->len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (b->trailer) {
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            nghttp2_nv tr = {(uint8_t *)"grpc-status", (uint8_t *)b->trailer, 11, strlen(b->trailer), 0};
            nghttp2_submit_trailer(ss, sid, &tr, 1);
        }
    }
    return (ssize_t)n;
}

static void srv_init(server_t *s, const nghttp2_settings_entry *iv, size_t niv) {
    memset(s, 0, sizeof *s);
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, srv_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, srv_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, srv_frame);
    nghttp2_session_server_new(&s->ss, cb, s);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(s->ss, NGHTTP2_FLAG_NONE, iv, niv);
}

/* A response on stream id: `status`, one field `x-f: v`, then `body_len` bytes (none:
 * END_STREAM on the head) and a grpc-status trailer when `trailer`. */
static void srv_respond(server_t *s, int32_t id, const char *status, size_t body_len, const char *trailer) {
    nghttp2_nv nv[2] = {{(uint8_t *)":status", (uint8_t *)status, 7, strlen(status), 0},
                        {(uint8_t *)"x-f", (uint8_t *)"v", 3, 1, 0}};
    srv_body_t *b = &s->bodies[sidx(id)];
    *b = (srv_body_t){.len = body_len, .trailer = trailer};
    nghttp2_data_provider prd = {.source = {.ptr = b}, .read_callback = srv_read};
    CHECK_INT(nghttp2_submit_response(s->ss, id, nv, 2, body_len || trailer ? &prd : NULL), 0);
}

/* ---- the client: the driver, every op recorded ---- */

typedef struct {
    sl_h2c_stream_t h2;
    int status, nstatus, heads, head_end, ends, closes;
    char fields[256], trailers[256];
    size_t data_len;
    int data_ok;          /* every byte was i % 251 */
    int drop;             /* on_data says 1 (dropped) */
    int refuse;           /* on_field says SL_H2C_RESET */
    /* the request body: `body` once ready (NULL: not yet) */
    const char *body;
    size_t body_off;
} cstream_t;

typedef struct {
    sl_h2c_t h2;
    uint8_t out[1 << 16];
    size_t olen;
    uint32_t max_streams;
    int settings, goaways;
    int32_t goaway_last;
} client_t;

static cstream_t *cs(sl_h2c_stream_t *st) { return SL_CONTAINER_OF(st, cstream_t, h2); }

static long c_send(void *ud, const uint8_t *data, size_t len) {
    client_t *c = ud;
    if (c->olen == sizeof c->out) return SL_EAGAIN;
    size_t n = SL_MIN(len, sizeof c->out - c->olen);
    memcpy(c->out + c->olen, data, n);
    c->olen += n;
    return (long)n;
}

static int c_status(void *ud, sl_h2c_stream_t *st, int status) {
    (void)ud;
    cs(st)->status = status;
    cs(st)->nstatus++;
    return 0;
}

static void add_field(char *to, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl) {
    size_t o = strlen(to);
    snprintf(to + o, 256 - o, "%.*s: %.*s\n", (int)nl, n, (int)vl, v);
}

static int c_field(void *ud, sl_h2c_stream_t *st, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl) {
    (void)ud;
    add_field(cs(st)->fields, n, nl, v, vl);
    return cs(st)->refuse ? SL_H2C_RESET : 0;
}

static int c_trailer(void *ud, sl_h2c_stream_t *st, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl) {
    (void)ud;
    add_field(cs(st)->trailers, n, nl, v, vl);
    return 0;
}

static void c_head(void *ud, sl_h2c_stream_t *st, bool end) {
    (void)ud;
    cs(st)->heads++;
    cs(st)->head_end = end;
}

static int c_data(void *ud, sl_h2c_stream_t *st, const uint8_t *d, size_t len) {
    (void)ud;
    cstream_t *s = cs(st);
    for (size_t i = 0; i < len; i++)
        if (d[i] != (uint8_t)((s->data_len + i) % 251)) s->data_ok = 0;
    s->data_len += len;
    return s->drop;
}

static void c_end(void *ud, sl_h2c_stream_t *st) {
    (void)ud;
    cs(st)->ends++;
}

static void c_close(void *ud, sl_h2c_stream_t *st) {
    (void)ud;
    cs(st)->closes++;
}

static long c_read_body(void *ud, sl_h2c_stream_t *st, uint8_t *buf, size_t len, bool *eof) {
    (void)ud;
    cstream_t *s = cs(st);
    if (!s->body) return 0;
    size_t n = SL_MIN(len, strlen(s->body) - s->body_off);
    memcpy(buf, s->body + s->body_off, n);
    s->body_off += n;
    *eof = s->body_off == strlen(s->body);
    return (long)n;
}

static void c_settings(void *ud, uint32_t max_streams) {
    client_t *c = ud;
    c->settings++;
    c->max_streams = max_streams;
}

static void c_goaway(void *ud, int32_t last_id, uint32_t code) {
    client_t *c = ud;
    (void)code;
    c->goaways++;
    c->goaway_last = last_id;
}

static const sl_h2c_ops_t ops = {
    .send = c_send,
    .on_status = c_status,
    .on_field = c_field,
    .on_trailer = c_trailer,
    .on_head = c_head,
    .on_data = c_data,
    .on_end = c_end,
    .on_close = c_close,
    .read_body = c_read_body,
    .on_settings = c_settings,
    .on_goaway = c_goaway,
};

static void client_init(client_t *c, const sl_h2c_opts_t *o) {
    memset(c, 0, sizeof *c);
    CHECK_INT(sl_h2c_init(&c->h2, o, &ops, c), SL_OK);
}

/* Moves bytes both ways until neither side has any. */
static void pump(client_t *c, server_t *s) {
    for (int round = 0; round < 1000; round++) {
        const char *why = NULL;
        CHECK_INT(sl_h2c_send(&c->h2, &why), SL_OK);
        size_t moved = c->olen;
        if (c->olen) {
            CHECK_INT(nghttp2_session_mem_recv(s->ss, c->out, c->olen), (long long)c->olen);
            c->olen = 0;
        }
        const uint8_t *d;
        ssize_t k;
        while ((k = nghttp2_session_mem_send(s->ss, &d)) > 0) {
            CHECK_INT(sl_h2c_feed(&c->h2, (const char *)d, (size_t)k, &why), SL_OK);
            moved += (size_t)k;
        }
        if (!moved) return;
    }
    CHECK(!"pump did not settle");
}

static nghttp2_nv req_nv[] = {
    {(uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0},
    {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
    {(uint8_t *)":authority", (uint8_t *)"t", 10, 1, 0},
    {(uint8_t *)":path", (uint8_t *)"/a", 5, 2, 0},
};

static int32_t submit(client_t *c, cstream_t *st, bool body) {
    memset(st, 0, sizeof *st);
    st->data_ok = 1;
    int32_t id = sl_h2c_submit(&c->h2, &st->h2, req_nv, SL_ARRAY_LEN(req_nv), body);
    CHECK(id > 0);
    CHECK_INT(st->h2.id, id);
    return id;
}

static void done(client_t *c, server_t *s) {
    sl_h2c_fini(&c->h2);
    nghttp2_session_del(s->ss);
}

/* A client made with `o` and a server, one request on stream a (with a body source when
 * `body`) sent to the server: its id. */
static int32_t start(client_t *c, server_t *s, const sl_h2c_opts_t *o, cstream_t *a, bool body) {
    client_init(c, o);
    srv_init(s, NULL, 0);
    int32_t id = submit(c, a, body);
    pump(c, s);
    CHECK_STR(s->path[sidx(id)], "/a");
    return id;
}

/* A stream answered whole: one head of `status`, `len` good body bytes, those trailers,
 * the end and the close (no error). */
static void check_answered(const cstream_t *a, int status, size_t len, const char *trailers) {
    CHECK_INT(a->status, status);
    CHECK_INT(a->nstatus, 1);
    CHECK_INT(a->heads, 1);
    CHECK_INT(a->data_len, len);
    CHECK(a->data_ok);
    CHECK_STR(a->trailers, trailers);
    CHECK_INT(a->ends, 1);
    CHECK_INT(a->closes, 1);
    CHECK(a->h2.head_done && a->h2.remote_done && a->h2.closed && !a->h2.refused);
    CHECK_INT(a->h2.close_code, NGHTTP2_NO_ERROR);
}

/* ---- the cases ---- */

static void test_head_body_trailers(void) {
    client_t c;
    server_t s;
    cstream_t a;
    int32_t id = start(&c, &s, &(sl_h2c_opts_t){0}, &a, false);
    CHECK(s.ended[sidx(id)]); /* no body: END_STREAM on the HEADERS */
    /* a 103 first: its status and fields never reach the user */
    nghttp2_nv early[2] = {{(uint8_t *)":status", (uint8_t *)"103", 7, 3, 0},
                           {(uint8_t *)"link", (uint8_t *)"</s>", 4, 4, 0}};
    CHECK_INT(nghttp2_submit_headers(s.ss, NGHTTP2_FLAG_NONE, id, NULL, early, 2, NULL), 0);
    srv_respond(&s, id, "200", 3000, "0");
    pump(&c, &s);
    check_answered(&a, 200, 3000, "grpc-status: 0\n");
    CHECK_STR(a.fields, "x-f: v\n");
    CHECK_INT(a.head_end, 0);
    CHECK(!sl_h2c_unseen(&c.h2, &a.h2));
    done(&c, &s);
}

static void test_head_ends_stream(void) {
    client_t c;
    server_t s;
    cstream_t a;
    int32_t id = start(&c, &s, &(sl_h2c_opts_t){0}, &a, false);
    srv_respond(&s, id, "204", 0, NULL);
    pump(&c, &s);
    CHECK_INT(a.status, 204);
    CHECK_INT(a.heads, 1);
    CHECK_INT(a.head_end, 1);
    CHECK_INT(a.ends, 1);
    CHECK_INT(a.data_len, 0);
    CHECK_STR(a.trailers, "");
    CHECK_INT(a.closes, 1);
    done(&c, &s);
}

static void test_request_body_waits(void) {
    client_t c;
    server_t s;
    cstream_t a;
    int32_t id = start(&c, &s, &(sl_h2c_opts_t){0}, &a, true);
    CHECK_INT(s.body_len[sidx(id)], 0);
    CHECK(!s.ended[sidx(id)]); /* the body waits */
    CHECK(a.h2.deferred);
    a.body = "hello, upstream";
    sl_h2c_resume(&c.h2, &a.h2);
    pump(&c, &s);
    CHECK_INT(s.body_len[sidx(id)], 15);
    CHECK(memcmp(s.body[sidx(id)], "hello, upstream", 15) == 0);
    CHECK(s.ended[sidx(id)]);
    srv_respond(&s, id, "200", 10, NULL);
    pump(&c, &s);
    CHECK_INT(a.data_len, 10);
    CHECK_INT(a.closes, 1);
    done(&c, &s);
}

static void test_rst_and_refused(void) {
    client_t c;
    server_t s;
    client_init(&c, &(sl_h2c_opts_t){0});
    srv_init(&s, NULL, 0);
    cstream_t a, b;
    int32_t ia = submit(&c, &a, false), ib = submit(&c, &b, false);
    pump(&c, &s);
    nghttp2_submit_rst_stream(s.ss, NGHTTP2_FLAG_NONE, ia, NGHTTP2_INTERNAL_ERROR);
    nghttp2_submit_rst_stream(s.ss, NGHTTP2_FLAG_NONE, ib, NGHTTP2_REFUSED_STREAM);
    pump(&c, &s);
    CHECK_INT(a.closes, 1);
    CHECK_INT(a.h2.close_code, NGHTTP2_INTERNAL_ERROR);
    CHECK(!a.h2.refused && !a.h2.remote_done && !a.h2.head_done);
    CHECK_INT(a.heads + a.ends, 0);
    CHECK_INT(b.closes, 1);
    CHECK_INT(b.h2.close_code, NGHTTP2_REFUSED_STREAM);
    CHECK(b.h2.refused);
    CHECK_STR(sl_h2c_code_text(a.h2.close_code), "INTERNAL_ERROR");
    done(&c, &s);
}

static void test_goaway_last_stream(void) {
    client_t c;
    server_t s;
    client_init(&c, &(sl_h2c_opts_t){0});
    srv_init(&s, NULL, 0);
    cstream_t a, b, d, late;
    int32_t ia = submit(&c, &a, false);
    submit(&c, &b, false);
    submit(&c, &d, false);
    pump(&c, &s);
    CHECK_INT(s.nheaders, 3);
    CHECK(!sl_h2c_unseen(&c.h2, &d.h2)); /* no GOAWAY yet: every stream may have been seen */
    /* the server goes away having processed only the first */
    CHECK_INT(nghttp2_submit_goaway(s.ss, NGHTTP2_FLAG_NONE, ia, NGHTTP2_NO_ERROR, NULL, 0), 0);
    pump(&c, &s);
    CHECK_INT(c.goaways, 1);
    CHECK_INT(c.goaway_last, ia);
    CHECK_INT(c.h2.last_id, ia);
    CHECK(b.closes == 1 && b.h2.refused && d.closes == 1 && d.h2.refused);
    CHECK(sl_h2c_unseen(&c.h2, &b.h2) && sl_h2c_unseen(&c.h2, &d.h2));
    CHECK(!sl_h2c_unseen(&c.h2, &a.h2));
    CHECK_INT(a.closes, 0);
    /* a stream submitted after the GOAWAY never leaves: refused, closed, unseen */
    memset(&late, 0, sizeof late);
    int32_t il = sl_h2c_submit(&c.h2, &late.h2, req_nv, SL_ARRAY_LEN(req_nv), false);
    CHECK(il > ia);
    pump(&c, &s);
    CHECK(late.h2.refused);
    CHECK_INT(late.closes, 1);
    CHECK(sl_h2c_unseen(&c.h2, &late.h2));
    CHECK_INT(s.nheaders, 3);
    /* the one below last-stream-id is still answered */
    srv_respond(&s, ia, "200", 100, NULL);
    pump(&c, &s);
    CHECK_INT(a.status, 200);
    CHECK_INT(a.data_len, 100);
    CHECK_INT(a.closes, 1);
    CHECK(!a.h2.refused);
    CHECK(!sl_h2c_want_read(&c.h2)); /* no stream left after a GOAWAY: the session is over */
    done(&c, &s);
}

static void test_settings(void) {
    client_t c;
    server_t s;
    client_init(&c, &(sl_h2c_opts_t){.assume_max_streams = 3});
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 7}};
    srv_init(&s, iv, 1);
    CHECK_INT(c.settings, 0);
    pump(&c, &s);
    CHECK_INT(c.settings, 1);
    CHECK_INT(c.max_streams, 7);
    /* the client's own SETTINGS: push disabled, its stream window */
    CHECK_INT(nghttp2_session_get_remote_settings(s.ss, NGHTTP2_SETTINGS_ENABLE_PUSH), 0);
    done(&c, &s);
}

static void test_flow_control(void) {
    client_t c;
    server_t s;
    /* stream windows of 40000 and nghttp2's connection window (65535): two held streams
     * get 40000 each only if the connection's window comes back as DATA arrives */
    client_init(&c, &(sl_h2c_opts_t){.manual_window = true, .stream_window = 40000});
    srv_init(&s, NULL, 0);
    cstream_t a, b, d;
    int32_t ia = submit(&c, &a, false), ib = submit(&c, &b, false), id = submit(&c, &d, false);
    d.drop = 1; /* the third drops its bytes: its window comes back at once */
    pump(&c, &s);
    CHECK_INT(nghttp2_session_get_remote_settings(s.ss, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE), 40000);
    srv_respond(&s, ia, "200", 100000, NULL);
    srv_respond(&s, ib, "200", 100000, NULL);
    srv_respond(&s, id, "200", 100000, NULL);
    pump(&c, &s);
    CHECK_INT(a.data_len, 40000);
    CHECK_INT(b.data_len, 40000);
    CHECK_INT(d.data_len, 100000);
    CHECK_INT(d.ends, 1);
    CHECK_INT(a.ends, 0);
    /* a's reader used 30000 bytes: that much more comes, b stays where it was */
    sl_h2c_consume(&c.h2, &a.h2, 30000);
    pump(&c, &s);
    CHECK_INT(a.data_len, 70000);
    CHECK_INT(b.data_len, 40000);
    for (int i = 0; i < 10 && !a.ends; i++) {
        sl_h2c_consume(&c.h2, &a.h2, 40000);
        pump(&c, &s);
    }
    CHECK_INT(a.data_len, 100000);
    CHECK(a.data_ok);
    CHECK_INT(a.ends, 1);
    CHECK_INT(a.closes, 1);
    sl_h2c_consume(&c.h2, &a.h2, 100); /* closed: ignored */
    done(&c, &s);
}

static void test_cancel(void) {
    client_t c;
    server_t s;
    client_init(&c, &(sl_h2c_opts_t){0});
    srv_init(&s, NULL, 0);
    cstream_t a, b;
    int32_t ia = submit(&c, &a, true), ib = submit(&c, &b, false);
    pump(&c, &s);
    sl_h2c_cancel(&c.h2, &a.h2);
    pump(&c, &s);
    CHECK_INT(s.rst[sidx(ia)], NGHTTP2_CANCEL + 1);
    CHECK_INT(a.closes, 1);
    CHECK_INT(a.h2.close_code, NGHTTP2_CANCEL);
    /* reset with a code of the user's choice, then nothing more for a closed stream */
    sl_h2c_reset(&c.h2, &b.h2, NGHTTP2_STREAM_CLOSED);
    pump(&c, &s);
    CHECK_INT(s.rst[sidx(ib)], NGHTTP2_STREAM_CLOSED + 1);
    CHECK_INT(b.closes, 1);
    sl_h2c_reset(&c.h2, &b.h2, NGHTTP2_CANCEL);
    sl_h2c_cancel(&c.h2, &b.h2);
    CHECK(!sl_h2c_want_write(&c.h2));
    done(&c, &s);
}

static void test_head_too_big(void) {
    client_t c;
    server_t s;
    cstream_t a;
    int32_t ia = start(&c, &s, &(sl_h2c_opts_t){.max_head_bytes = 100}, &a, false);
    char big[120];
    memset(big, 'x', sizeof big);
    nghttp2_nv nv[2] = {{(uint8_t *)":status", (uint8_t *)"200", 7, 3, 0},
                        {(uint8_t *)"x-big", (uint8_t *)big, 5, sizeof big, 0}};
    nghttp2_submit_response(s.ss, ia, nv, 2, NULL);
    pump(&c, &s);
    CHECK_INT(a.heads, 0);
    CHECK_INT(a.closes, 1);
    CHECK_INT(s.rst[sidx(ia)], NGHTTP2_INTERNAL_ERROR + 1);
    CHECK(a.h2.head_bytes > 100);
    CHECK(a.h2.head_too_big);
    done(&c, &s);
}

/* The limit is per header block: a head and trailers each under it pass, though together
 * (78 + 44 bytes, RFC 9113's count) they are over it. */
static void test_trailers_own_limit(void) {
    client_t c;
    server_t s;
    cstream_t a;
    int32_t id = start(&c, &s, &(sl_h2c_opts_t){.max_head_bytes = 100}, &a, false);
    srv_respond(&s, id, "200", 10, "0");
    pump(&c, &s);
    check_answered(&a, 200, 10, "grpc-status: 0\n");
    CHECK(!a.h2.head_too_big);
    done(&c, &s);
}

static void test_field_refused(void) {
    client_t c;
    server_t s;
    cstream_t a, b;
    int32_t ia = start(&c, &s, &(sl_h2c_opts_t){0}, &a, false);
    a.refuse = 1;
    int32_t ib = submit(&c, &b, false);
    pump(&c, &s);
    srv_respond(&s, ia, "200", 10, NULL);
    pump(&c, &s);
    CHECK_INT(a.heads, 0);
    CHECK_INT(a.closes, 1);
    CHECK_INT(a.data_len, 0);
    CHECK_INT(s.rst[sidx(ia)], NGHTTP2_INTERNAL_ERROR + 1);
    CHECK(a.h2.field_refused && !a.h2.head_too_big);
    /* the stream alone: the session goes on */
    srv_respond(&s, ib, "200", 10, "0");
    pump(&c, &s);
    check_answered(&b, 200, 10, "grpc-status: 0\n");
    done(&c, &s);
}

static void test_forget(void) {
    client_t c;
    server_t s;
    cstream_t a;
    int32_t ia = start(&c, &s, &(sl_h2c_opts_t){.manual_window = true}, &a, false);
    sl_h2c_forget(&c.h2, &a.h2);
    srv_respond(&s, ia, "200", 1000, NULL);
    pump(&c, &s);
    CHECK_INT(a.nstatus + a.heads + a.ends + a.closes, 0);
    CHECK_INT(a.data_len, 0);
    done(&c, &s);
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"head_body_trailers", test_head_body_trailers},
        {"head_ends_stream", test_head_ends_stream},
        {"request_body_waits", test_request_body_waits},
        {"rst_and_refused", test_rst_and_refused},
        {"goaway_last_stream", test_goaway_last_stream},
        {"settings", test_settings},
        {"flow_control", test_flow_control},
        {"cancel", test_cancel},
        {"head_too_big", test_head_too_big},
        {"trailers_own_limit", test_trailers_own_limit},
        {"field_refused", test_field_refused},
        {"forget", test_forget},
    };
    return check_main(tests, SL_ARRAY_LEN(tests), argc, argv);
}
