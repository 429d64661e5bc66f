/* client_test.c — core/client/client.c against a real HTTP/1.1 server on loopback (one on
 * the same loop, answering each request with a scenario's bytes): Content-Length, chunked
 * (kept whole and streamed), close-delimited bodies, an interim 100, a malformed status
 * line, a refused connection, a timeout (whole, and idle with a stream's timer stopped),
 * a cancel that never calls back, and closes from inside on_head and on_body. Every test
 * ends with the loop empty: the call freed itself and closed its handles. */
#include "client/client.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef struct {
    uv_loop_t loop;
    uv_tcp_t listener;
    int port;
    const char *answer; /* NULL: never answers */
    bool close_after;   /* close the connection after the answer */
    uv_tcp_t conn;
    bool conn_open;
    char req[4096];
    size_t req_len;
    uv_write_t wr;
    /* the call's outcome */
    int done, status, heads;
    char err[160];
    char streamed[256];
    size_t streamed_len;
} fixture_t;

static fixture_t F;

static void conn_closed(uv_handle_t *h) {
    (void)h;
    F.conn_open = false;
}

static void srv_written(uv_write_t *w, int status) {
    (void)w, (void)status;
    if (F.close_after && F.conn_open && !uv_is_closing((uv_handle_t *)&F.conn))
        uv_close((uv_handle_t *)&F.conn, conn_closed);
}

static void srv_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
    (void)h, (void)hint;
    *b = uv_buf_init(F.req + F.req_len, (unsigned)(sizeof F.req - 1 - F.req_len));
}

static void srv_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
    (void)b;
    if (n < 0) {
        if (!uv_is_closing((uv_handle_t *)s)) uv_close((uv_handle_t *)s, conn_closed);
        return;
    }
    F.req_len += (size_t)n;
    F.req[F.req_len] = 0;
    if (!strstr(F.req, "\r\n\r\n") || !F.answer) return;
    uv_buf_t out = uv_buf_init((char *)F.answer, (unsigned)strlen(F.answer));
    uv_write(&F.wr, s, &out, 1, srv_written);
}

static void srv_accept(uv_stream_t *l, int status) {
    if (status < 0 || F.conn_open) return;
    uv_tcp_init(&F.loop, &F.conn);
    F.conn_open = true;
    uv_accept(l, (uv_stream_t *)&F.conn);
    uv_read_start((uv_stream_t *)&F.conn, srv_alloc, srv_read);
}

static void setup(const char *answer, bool close_after) {
    memset(&F, 0, sizeof F);
    uv_loop_init(&F.loop);
    F.answer = answer;
    F.close_after = close_after;
    uv_tcp_init(&F.loop, &F.listener);
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    uv_tcp_bind(&F.listener, (struct sockaddr *)&sa, 0);
    uv_listen((uv_stream_t *)&F.listener, 8, srv_accept);
    int len = sizeof sa;
    uv_tcp_getsockname(&F.listener, (struct sockaddr *)&sa, &len);
    F.port = ntohs(sa.sin_port);
}

/* Closes the server, runs what is left and checks that the loop is empty: every call
 * freed itself and closed its handles. */
static void run_and_teardown(void) {
    uv_close((uv_handle_t *)&F.listener, NULL);
    if (F.conn_open && !uv_is_closing((uv_handle_t *)&F.conn)) uv_close((uv_handle_t *)&F.conn, conn_closed);
    uv_run(&F.loop, UV_RUN_DEFAULT);
    CHECK_INT(uv_loop_alive(&F.loop), 0);
    CHECK_INT(uv_loop_close(&F.loop), 0);
}

static void on_done(void *ud, int status, const char *err) {
    (void)ud;
    F.done++;
    F.status = status;
    snprintf(F.err, sizeof F.err, "%s", err ? err : "");
}

static void on_head(void *ud, sl_client_t *c) {
    (void)ud;
    F.heads++;
    CHECK(sl_client_head(c) != NULL);
}

static int on_body(void *ud, sl_client_t *c, const char *p, size_t n) {
    (void)ud, (void)c;
    if (F.streamed_len + n >= sizeof F.streamed) return -1;
    memcpy(F.streamed + F.streamed_len, p, n);
    F.streamed_len += n;
    return 0;
}

static sl_client_req_t request(void) {
    static const char req[] = "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    return (sl_client_req_t){.loop = &F.loop,
                             .host = "127.0.0.1",
                             .port = (uint16_t)F.port,
                             .req = req,
                             .req_len = sizeof req - 1,
                             .timeout_ms = 2000,
                             .max_body = 1 << 20,
                             .on_head = on_head,
                             .on_done = on_done};
}

/* Starts the call, runs it, and leaves it open for the checks (the caller closes it). */
static sl_client_t *run_call(sl_client_req_t rq) {
    const char *err = NULL;
    sl_client_t *c = sl_client_start(&rq, &err);
    CHECK(c != NULL);
    for (int i = 0; c && i < 10000 && !F.done; i++) uv_run(&F.loop, UV_RUN_ONCE);
    return c;
}

static void body_is(sl_client_t *c, const char *want) {
    size_t n = 0;
    const char *b = sl_client_body(c, &n);
    CHECK_INT(n, strlen(want));
    char got[256];
    snprintf(got, sizeof got, "%.*s", (int)n, b);
    CHECK_STR(got, want);
}

static void test_content_length(void) {
    setup("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Kind: length\r\n\r\nhello", false);
    sl_client_t *c = run_call(request());
    CHECK_INT(F.done, 1);
    CHECK_STR(F.err, "");
    CHECK_INT(F.status, 200);
    CHECK_INT(F.heads, 1);
    body_is(c, "hello");
    const sl_h1_header_t *h = sl_client_head(c) ? sl_h1_find(sl_client_head(c), "x-kind", 6) : NULL;
    CHECK(h && h->value.len == 6 && memcmp(h->value.p, "length", 6) == 0);
    CHECK(strstr(F.req, "GET /x HTTP/1.1\r\n") == F.req); /* the request went out as given */
    sl_client_close(c);
    run_and_teardown();
}

static const char chunked[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";

/* One call to a server answering `answer` (closing after it when `close`): no error, the
 * final status, one head, and the body kept whole. */
static void whole(const char *answer, bool close, int status, const char *body) {
    setup(answer, close);
    sl_client_t *c = run_call(request());
    CHECK_STR(F.err, "");
    CHECK_INT(F.status, status);
    CHECK_INT(F.heads, 1);
    body_is(c, body);
    sl_client_close(c);
    run_and_teardown();
}

static void test_chunked(void) { whole(chunked, false, 200, "hello world"); }

static void test_chunked_streamed(void) {
    setup(chunked, false);
    sl_client_req_t rq = request();
    rq.on_body = on_body;
    rq.oneshot = true;      /* released after on_done: no close */
    rq.req_borrowed = true; /* the request is static: not copied */
    const char *err = NULL;
    CHECK(sl_client_start(&rq, &err) != NULL);
    for (int i = 0; i < 10000 && !F.done; i++) uv_run(&F.loop, UV_RUN_ONCE);
    run_and_teardown();
    CHECK_INT(F.done, 1);
    CHECK_STR(F.err, "");
    CHECK_INT(F.streamed_len, 11);
    CHECK(memcmp(F.streamed, "hello world", 11) == 0);
}

static void test_close_delimited(void) {
    whole("HTTP/1.1 200 OK\r\nX-Framing: eof\r\n\r\nuntil the close", true, 200, "until the close");
}

/* the interim 100 is skipped: one head, the final one's */
static void test_interim(void) {
    whole("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone", false, 201, "done");
}

static void test_malformed_status_line(void) {
    const char *answers[] = {"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", "garbage\r\n\r\n"};
    for (size_t i = 0; i < 2; i++) {
        setup(answers[i], true);
        sl_client_t *c = run_call(request());
        CHECK_INT(F.done, 1);
        CHECK_INT(F.status, 0);
        CHECK_STR(F.err, "malformed response head");
        CHECK_INT(F.heads, 0);
        sl_client_close(c);
        run_and_teardown();
    }
}

static void test_truncated(void) {
    setup("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf", true);
    sl_client_t *c = run_call(request());
    CHECK_STR(F.err, "connection closed before the response body ended");
    sl_client_close(c);
    run_and_teardown();
}

static void test_max_body(void) {
    setup("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", false);
    sl_client_req_t rq = request();
    rq.max_body = 4;
    sl_client_t *c = run_call(rq);
    CHECK_STR(F.err, "response body larger than max_body");
    sl_client_close(c);
    run_and_teardown();
}

static void test_timeout(void) {
    setup(NULL, false); /* never answers */
    sl_client_req_t rq = request();
    rq.timeout_ms = 100;
    uint64_t t0 = uv_hrtime();
    sl_client_t *c = run_call(rq);
    uint64_t took_ms = (uv_hrtime() - t0) / 1000000;
    CHECK_STR(F.err, "timeout");
    CHECK(took_ms >= 90 && took_ms < 1000);
    sl_client_close(c);
    run_and_teardown();
}

static void test_refused(void) {
    setup(NULL, false);
    uv_close((uv_handle_t *)&F.listener, NULL); /* nothing listens on the port now */
    uv_run(&F.loop, UV_RUN_NOWAIT);
    uv_tcp_init(&F.loop, &F.listener); /* run_and_teardown closes one */
    sl_client_t *c = run_call(request());
    CHECK_STR(F.err, "connect: connection refused");
    sl_client_close(c);
    run_and_teardown();
}

static void test_cancel(void) {
    setup(NULL, false);
    const char *err = NULL;
    sl_client_req_t rq = request();
    sl_client_t *c = sl_client_start(&rq, &err);
    CHECK(c != NULL);
    for (int i = 0; i < 20 && !F.conn_open; i++) uv_run(&F.loop, UV_RUN_ONCE);
    sl_client_close(c); /* before on_done: it never comes */
    run_and_teardown();
    CHECK_INT(F.done, 0);
}

/* Closing the call from inside its own callbacks (health decides on the head; an etcd
 * line handler cancels its watch): nothing calls back afterwards and the call goes. */
static void close_on_head(void *ud, sl_client_t *c) {
    (void)ud;
    F.heads++;
    F.status = sl_client_head(c)->status;
    sl_client_close(c);
}

static int close_on_body(void *ud, sl_client_t *c, const char *p, size_t n) {
    on_body(ud, c, p, n);
    sl_client_close(c);
    return 0;
}

static void test_close_inside_callbacks(void) {
    setup(chunked, false);
    sl_client_req_t rq = request();
    rq.on_head = close_on_head;
    CHECK(sl_client_start(&rq, &(const char *){NULL}) != NULL);
    for (int i = 0; i < 200 && !F.heads; i++) uv_run(&F.loop, UV_RUN_ONCE);
    run_and_teardown();
    CHECK_INT(F.heads, 1);
    CHECK_INT(F.status, 200);
    CHECK_INT(F.done, 0);

    setup(chunked, false);
    rq = request();
    rq.on_body = close_on_body;
    CHECK(sl_client_start(&rq, &(const char *){NULL}) != NULL);
    for (int i = 0; i < 200 && !F.streamed_len; i++) uv_run(&F.loop, UV_RUN_ONCE);
    run_and_teardown();
    CHECK_INT(F.streamed_len, 5); /* the first chunk, then nothing */
    CHECK_INT(F.done, 0);
}

/* An idle timeout bounds silence: a stream whose head stopped the timer outlives it; one
 * that did not times out. */
static void stop_timer_on_head(void *ud, sl_client_t *c) {
    (void)ud;
    F.heads++;
    sl_client_set_timeout(c, 0);
}

static void waited(uv_timer_t *t) { (void)t; }

static void test_idle_timeout(void) {
    static const char stream_head[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab\n\r\n";
    setup(stream_head, false);
    sl_client_req_t rq = request();
    rq.idle_timeout = true;
    rq.timeout_ms = 50;
    rq.on_head = stop_timer_on_head;
    rq.on_body = on_body;
    sl_client_t *c = sl_client_start(&rq, &(const char *){NULL});
    CHECK(c != NULL);
    uv_timer_t wait;
    uv_timer_init(&F.loop, &wait);
    uv_timer_start(&wait, waited, 200, 0);
    while (uv_is_active((uv_handle_t *)&wait) && !F.done) uv_run(&F.loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&wait, NULL);
    CHECK_INT(F.done, 0); /* 200 ms of silence after the head: still open */
    CHECK_INT(F.streamed_len, 3);
    sl_client_close(c);
    run_and_teardown();

    setup(stream_head, false);
    rq = request();
    rq.idle_timeout = true;
    rq.timeout_ms = 50;
    rq.on_body = on_body;
    c = run_call(rq);
    CHECK_STR(F.err, "timeout");
    sl_client_close(c);
    run_and_teardown();
}

static void test_bad_host(void) {
    setup(NULL, false);
    sl_client_req_t rq = request();
    rq.host = "";
    const char *err = NULL;
    CHECK(sl_client_start(&rq, &err) == NULL);
    CHECK_STR(err, "bad host or port");
    run_and_teardown();
}

/* A connect that fails at once (Linux refuses a TCP connect to a broadcast address with
 * ENETUNREACH in connect(2) itself): the failure is returned, never called back, and the
 * call's memory goes once its handles close (ASan, in the sanitizer build, sees any use
 * after that free or a leak). */
static void test_connect_fails_at_once(void) {
    setup(NULL, false);
    sl_client_req_t rq = request();
    rq.host = "255.255.255.255";
    const char *err = NULL;
    CHECK(sl_client_start(&rq, &err) == NULL);
    CHECK_STR(err, "connect: network is unreachable");
    uv_run(&F.loop, UV_RUN_NOWAIT); /* the handles close: the call is freed */
    CHECK_INT(F.done, 0);
    run_and_teardown();
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"content_length", test_content_length},
        {"chunked", test_chunked},
        {"chunked_streamed", test_chunked_streamed},
        {"close_delimited", test_close_delimited},
        {"interim", test_interim},
        {"malformed_status_line", test_malformed_status_line},
        {"truncated", test_truncated},
        {"max_body", test_max_body},
        {"timeout", test_timeout},
        {"refused", test_refused},
        {"cancel", test_cancel},
        {"close_inside_callbacks", test_close_inside_callbacks},
        {"idle_timeout", test_idle_timeout},
        {"bad_host", test_bad_host},
        {"connect_fails_at_once", test_connect_fails_at_once},
    };
    return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}
