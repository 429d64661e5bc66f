/* stream_test.c — unit tests for core/net/stream.c over real loopback TCP: bytes written
 * through the stream arrive intact and in order at a reader on the other stream (1 MiB,
 * through a small socket buffer so the write goes in flight), a few bytes go at once
 * with sl_stream_send, and a half-close reaches the peer as EOF while it can still send. */
#include "net/stream.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef struct {
    sl_stream_t s;
    char *buf;
    size_t len, cap;
    int eof, written, shut;
} end_t;

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
    end_t *e = (end_t *)h;
    if (e->len == e->cap) {
        e->cap = e->cap ? e->cap * 2 : 65536;
        e->buf = realloc(e->buf, e->cap);
    }
    *b = uv_buf_init(e->buf + e->len, (unsigned)(e->cap - e->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
    end_t *e = (end_t *)s;
    if (n > 0) e->len += (size_t)n;
    if (n == UV_EOF) e->eof = 1;
}

static void on_written(uv_write_t *wr, int status) {
    end_t *e = wr->data;
    e->written = status == 0 ? 1 : -1;
}

static void on_shutdown(uv_shutdown_t *sr, int status) {
    end_t *e = sr->data;
    e->shut = status == 0 ? 1 : -1;
}

typedef struct {
    uv_loop_t loop;
    uv_tcp_t listener;
    end_t a, b; /* a: the connecting end, b: the accepted one */
    int accepted, connected;
    uv_connect_t creq;
} pair_t;

static void on_conn(uv_stream_t *srv, int status) {
    pair_t *p = srv->data;
    uv_tcp_init(&p->loop, &p->b.s.tcp);
    if (uv_accept(srv, (uv_stream_t *)&p->b.s.tcp) == 0) p->accepted = 1;
}

static void on_connect(uv_connect_t *c, int status) {
    pair_t *p = c->data;
    p->connected = status == 0 ? 1 : -1;
}

static void run_until(pair_t *p, const int *flag) {
    for (int i = 0; i < 200000 && !*flag; i++) uv_run(&p->loop, UV_RUN_ONCE);
}

static void pair_open(pair_t *p) {
    memset(p, 0, sizeof(*p));
    uv_loop_init(&p->loop);
    uv_tcp_init(&p->loop, &p->listener);
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    CHECK_INT(uv_tcp_bind(&p->listener, (const struct sockaddr *)&sa, 0), 0);
    int len = sizeof sa;
    uv_tcp_getsockname(&p->listener, (struct sockaddr *)&sa, &len);
    p->listener.data = p;
    CHECK_INT(uv_listen((uv_stream_t *)&p->listener, 8, on_conn), 0);
    uv_tcp_init(&p->loop, &p->a.s.tcp);
    p->creq.data = p;
    CHECK_INT(uv_tcp_connect(&p->creq, &p->a.s.tcp, (const struct sockaddr *)&sa, on_connect), 0);
    run_until(p, &p->connected);
    run_until(p, &p->accepted);
    CHECK_INT(p->connected, 1);
    CHECK_INT(p->accepted, 1);
}

static void pair_close(pair_t *p) {
    uv_close((uv_handle_t *)&p->a.s.tcp, NULL);
    uv_close((uv_handle_t *)&p->b.s.tcp, NULL);
    uv_close((uv_handle_t *)&p->listener, NULL);
    uv_run(&p->loop, UV_RUN_DEFAULT);
    CHECK_INT(uv_loop_close(&p->loop), 0);
    free(p->a.buf);
    free(p->b.buf);
}

static void test_bulk_in_order(void) {
    pair_t p;
    pair_open(&p);
    int small = 8192;
    uv_send_buffer_size((uv_handle_t *)&p.a.s.tcp, &small);
    size_t n = 1 << 20;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (char)(i * 31 + (i >> 9));
    sl_outq_t q = {0};
    for (size_t off = 0; off < n; off += n / 8) sl_outq_add(&q, data + off, n / 8);
    uv_write_t wr;
    wr.data = &p.a;
    int rc = sl_stream_write(&p.a.s, &q, &wr, on_written);
    CHECK(rc == 0 || rc == 1);
    if (rc == 1) p.a.written = 1;
    CHECK_INT(sl_stream_read_start(&p.b.s, on_alloc, on_read), 0);
    for (int i = 0; i < 400000 && (p.b.len < n || !p.a.written); i++) uv_run(&p.loop, UV_RUN_ONCE);
    CHECK_INT(p.a.written, 1);
    CHECK_INT(p.b.len, n);
    CHECK(p.b.len == n && memcmp(p.b.buf, data, n) == 0);
    sl_stream_read_stop(&p.b.s);
    free(data);
    pair_close(&p);
}

static void test_send_and_half_close(void) {
    pair_t p;
    pair_open(&p);
    CHECK(sl_stream_send(&p.a.s, "100 Continue", 12));
    CHECK_INT(sl_stream_read_start(&p.b.s, on_alloc, on_read), 0);
    uv_shutdown_t sr;
    sr.data = &p.a;
    CHECK_INT(sl_stream_shutdown(&p.a.s, &sr, on_shutdown), 0);
    run_until(&p, &p.b.eof);
    CHECK_INT(p.b.eof, 1);
    CHECK_INT(p.a.shut, 1);
    CHECK_INT(p.b.len, 12);
    CHECK(p.b.len == 12 && memcmp(p.b.buf, "100 Continue", 12) == 0);
    /* the other direction still works after the half-close */
    CHECK_INT(sl_stream_read_start(&p.a.s, on_alloc, on_read), 0);
    CHECK(sl_stream_send(&p.b.s, "pong", 4));
    for (int i = 0; i < 200000 && p.a.len < 4; i++) uv_run(&p.loop, UV_RUN_ONCE);
    CHECK_INT(p.a.len, 4);
    sl_stream_read_stop(&p.a.s);
    sl_stream_read_stop(&p.b.s);
    pair_close(&p);
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"bulk_in_order", test_bulk_in_order},
        {"send_and_half_close", test_send_and_half_close},
    };
    return check_main(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
