/* h1_head_test.c — unit tests for core/http/h1_head.c: the head sent upstream (rebuilt
 * target with the prefix stripped, hop-by-hop fields dropped, X-Forwarded-* and
 * X-Request-ID, the consumer header only from the gateway, framing, Connection), the head
 * sent to an HTTP/1 client from an upstream response (hop-by-hop dropped, a close-
 * delimited body re-framed as chunked, HTTP/1.0 clients), and gateway answers
 * (Content-Type, Retry-After on 503, no Content-Length on 204). */
#include "http/h1_head.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef struct {
    sl_config_t *cfg;
    sl_worker_t w;
    sl_downstream_t ds;
    sl_h1_limits_t limits;
    sl_req_t *r;
    char head[8192], resp[2048];
} fx_t;

static void fx_open(fx_t *f, const char *request, bool secure) {
    static const char yaml[] = "listeners: [ { name: web, listen: 127.0.0.1:8080 } ]\n"
                               "upstreams: [ { name: u, targets: [ { address: 127.0.0.1:9 } ] } ]\n"
                               "routes: [ { name: r, match: { paths: [/] }, upstream: u } ]\n";
    sl_errors_t errs = {0};
    memset(f, 0, sizeof(*f));
    CHECK_INT(sl_config_parse("t.yaml", yaml, strlen(yaml), &f->cfg, &errs), 0);
    sl_errors_free(&errs);
    f->w.cfg = f->cfg;
    f->w.blocks.max_free = 8;
    f->limits.max_header_size = 16384;
    f->limits.max_request_line = 8192;
    f->ds.lc = &f->cfg->listeners[0];
    f->ds.secure = secure;
    f->ds.can_upgrade = 1;
    strcpy(f->ds.peer, "192.0.2.7");
    f->r = sl__req_new(&f->w, &f->ds);
    sl_req_t *r = f->r;
    snprintf(f->head, sizeof f->head, "%s", request);
    sl_h1_t h1;
    sl_h1_init(&h1, HTTP_REQUEST, &f->limits);
    size_t used = 0;
    int status = 0;
    CHECK_INT(sl_h1_head(&h1, f->head, strlen(f->head), &r->head, &used, &status), SL_OK);
    memcpy(r->rid, "rid-1", 5);
    r->rid_len = 5;
    r->host = "example.com";
    r->host_len = 11;
    r->keep_alive = sl__h1_client_keeps_alive(r);
}

static void fx_close(fx_t *f) {
    sl_arena_reset(&f->r->arena);
    free(f->r);
    sl_blockpool_destroy(&f->w.blocks);
    sl_config_free(f->cfg);
}

static char *upstream_head(fx_t *f) {
    CHECK_INT(sl__h1_upstream_head(f->r), SL_OK);
    static char out[8192];
    snprintf(out, sizeof out, "%.*s", (int)f->r->uphead.len, f->r->uphead.base);
    return out;
}

static char *client_bytes(fx_t *f) {
    static char out[4096];
    size_t n = 0;
    for (uint16_t i = 0; i < f->r->clq.niov; i++) {
        memcpy(out + n, f->r->clq.iov[i].base, f->r->clq.iov[i].len);
        n += f->r->clq.iov[i].len;
    }
    out[n] = 0;
    return out;
}

static void test_upstream_head_rebuilt(void) {
    fx_t f;
    fx_open(&f,
            "GET /api/v1/items?x=1 HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, X-Drop\r\n"
            "X-Drop: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\n"
            "X-Forwarded-Proto: gopher\r\nX-Consumer: mallory\r\nAccept: */*\r\n\r\n",
            false);
    f.r->strip = 4; /* strip_prefix of /api */
    char *h = upstream_head(&f);
    CHECK(strncmp(h, "GET /v1/items?x=1 HTTP/1.1\r\n", 28) == 0);
    CHECK(strstr(h, "Host: example.com\r\n") != NULL);
    CHECK(strstr(h, "Accept: */*\r\n") != NULL);
    CHECK(strstr(h, "X-Drop") == NULL);       /* named by Connection: hop-by-hop */
    CHECK(strstr(h, "Keep-Alive") == NULL);
    CHECK(strstr(h, "TE:") == NULL);
    CHECK(strstr(h, "mallory") == NULL);      /* the consumer header is the gateway's word */
    CHECK(strstr(h, "X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n") != NULL);
    CHECK(strstr(h, "X-Forwarded-Proto: http\r\n") != NULL);
    CHECK(strstr(h, "gopher") == NULL);
    CHECK(strstr(h, "X-Forwarded-Host: example.com\r\n") != NULL);
    CHECK(strstr(h, "X-Request-ID: rid-1\r\n") != NULL);
    CHECK(strstr(h, "Connection: close\r\n") != NULL); /* upstream.set(address): no keep-alive */
    CHECK(strcmp(h + strlen(h) - 4, "\r\n\r\n") == 0);
    fx_close(&f);
}

static void test_upstream_head_framing(void) {
    fx_t f;
    fx_open(&f, "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nX-Request-ID: mine\r\n\r\n", false);
    /* the request's id is the client's (request.c's make_request_id, which this fixture
     * skips): it goes up once, as the gateway's own, never the client's field beside it */
    memcpy(f.r->rid, "mine", 4);
    f.r->rid_len = 4;
    char *h = upstream_head(&f);
    CHECK(strstr(h, "Transfer-Encoding: chunked\r\n") != NULL);
    const char *id = strstr(h, "X-Request-ID: mine\r\n");
    CHECK(id != NULL);
    CHECK(id && strstr(id + 1, "X-Request-ID") == NULL);
    CHECK(strstr(h, "rid-1") == NULL);
    fx_close(&f);
    fx_open(&f, "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", false);
    h = upstream_head(&f);
    CHECK(strstr(h, "Content-Length: 5\r\n") != NULL);
    fx_close(&f);
    /* a buffered body (a retry may replay it) goes with its length, whatever the framing */
    fx_open(&f, "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", false);
    f.r->body_buffered = 1;
    f.r->heap_len = 12;
    h = upstream_head(&f);
    CHECK(strstr(h, "Content-Length: 12\r\n") != NULL);
    CHECK(strstr(h, "Transfer-Encoding") == NULL);
    fx_close(&f);
}

/* Parses an upstream response into r->rhead (its bytes kept in f->resp). */
static void response(fx_t *f, const char *text) {
    snprintf(f->resp, sizeof f->resp, "%s", text);
    sl_h1_t h1;
    sl_h1_init(&h1, HTTP_RESPONSE, &f->limits);
    size_t used = 0;
    int st = 0;
    CHECK_INT(sl_h1_head(&h1, f->resp, strlen(f->resp), &f->r->rhead, &used, &st), SL_OK);
    f->r->status = f->r->rhead.status;
}

static void test_client_head(void) {
    fx_t f;
    fx_open(&f, "GET / HTTP/1.1\r\nHost: a\r\n\r\n", false);
    response(&f, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\nKeep-Alive: timeout=9\r\n"
                 "Server: up\r\n\r\n");
    CHECK_INT(sl__h1_client_head(f.r), SL_OK);
    char *h = client_bytes(&f);
    CHECK(strncmp(h, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CHECK(strstr(h, "Server: up\r\n") != NULL);
    CHECK(strstr(h, "Content-Length: 3\r\n") != NULL);
    CHECK(strstr(h, "Keep-Alive") == NULL);
    CHECK(strstr(h, "Connection") == NULL); /* HTTP/1.1 keep-alive is the default */
    CHECK_INT(f.r->clq.chunked, 0);
    fx_close(&f);

    /* a close-delimited body reaches an HTTP/1.1 client chunked */
    fx_open(&f, "GET / HTTP/1.1\r\nHost: a\r\n\r\n", false);
    response(&f, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
    CHECK_INT(sl__h1_client_head(f.r), SL_OK);
    CHECK(strstr(client_bytes(&f), "Transfer-Encoding: chunked\r\n") != NULL);
    CHECK_INT(f.r->clq.chunked, 1);
    CHECK_INT(f.r->keep_alive, 1);
    fx_close(&f);

    /* ... and an HTTP/1.0 client learns the end from the close */
    fx_open(&f, "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", false);
    response(&f, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
    CHECK_INT(sl__h1_client_head(f.r), SL_OK);
    CHECK(strstr(client_bytes(&f), "Transfer-Encoding") == NULL);
    CHECK(strstr(client_bytes(&f), "Connection: close\r\n") != NULL);
    CHECK_INT(f.r->keep_alive, 0);
    fx_close(&f);
}

static void test_answer_head(void) {
    fx_t f;
    fx_open(&f, "GET / HTTP/1.1\r\nHost: a\r\n\r\n", false);
    f.r->status = 503;
    f.r->at.retry_after_s = 7;
    CHECK_INT(sl__h1_answer_head(f.r, SL_LIT("application/json"), 10), SL_OK);
    char *h = client_bytes(&f);
    CHECK(strncmp(h, "HTTP/1.1 503 Service Unavailable\r\n", 34) == 0);
    CHECK(strstr(h, "Content-Type: application/json\r\n") != NULL);
    CHECK(strstr(h, "Content-Length: 10\r\n") != NULL);
    CHECK(strstr(h, "Retry-After: 7\r\n") != NULL);
    fx_close(&f);

    fx_open(&f, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", false);
    f.r->status = 204;
    CHECK_INT(sl__h1_answer_head(f.r, (sl_str_t){NULL, 0}, 0), SL_OK);
    h = client_bytes(&f);
    CHECK(strstr(h, "Content-Length") == NULL);
    CHECK(strstr(h, "Connection: close\r\n") != NULL);
    fx_close(&f);
}

/* X-Forwarded-Proto says how the request arrived; X-Forwarded-Port the port it came to.
 * A client's own X-Forwarded-Proto/-Host/-Port are dropped unless its peer is a trusted
 * proxy, whose values are kept (the first of each). */
static void test_forwarded(void) {
    static const char req[] = "GET / HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-Proto: https\r\n"
                              "X-Forwarded-Host: front.example\r\nX-Forwarded-Port: 443\r\n"
                              "X-Forwarded-Proto: gopher\r\n\r\n";
    fx_t f;
    fx_open(&f, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", true);
    sl_downstream_set_port(&f.ds, 8443);
    char *h = upstream_head(&f);
    CHECK(strstr(h, "X-Forwarded-Proto: https\r\n") != NULL);
    CHECK(strstr(h, "X-Forwarded-Port: 8443\r\n") != NULL);
    fx_close(&f);

    fx_open(&f, req, false); /* untrusted: the client's claims go, the gateway's come */
    sl_downstream_set_port(&f.ds, 8080);
    h = upstream_head(&f);
    CHECK(strstr(h, "X-Forwarded-Proto: http\r\n") != NULL);
    CHECK(strstr(h, "X-Forwarded-Proto: https") == NULL);
    CHECK(strstr(h, "front.example") == NULL);
    CHECK(strstr(h, "X-Forwarded-Host: example.com\r\n") != NULL);
    CHECK(strstr(h, "X-Forwarded-Port: 8080\r\n") != NULL);
    CHECK(strstr(h, "443") == NULL);
    fx_close(&f);

    fx_open(&f, req, false); /* a trusted proxy's are kept, once each */
    f.ds.trusted = 1;
    sl_downstream_set_port(&f.ds, 8080);
    h = upstream_head(&f);
    CHECK(strstr(h, "X-Forwarded-Proto: https\r\n") != NULL);
    CHECK(strstr(h, "gopher") == NULL);
    CHECK(strstr(h, "X-Forwarded-Proto: http\r\n") == NULL);
    CHECK(strstr(h, "X-Forwarded-Host: front.example\r\n") != NULL);
    CHECK(strstr(h, "X-Forwarded-Port: 443\r\n") != NULL);
    CHECK(strstr(h, "8080") == NULL);
    fx_close(&f);
}

/* A small request's heads are built in the request's own first arena chunk: no block. */
static void test_small_heads_take_no_block(void) {
    fx_t f;
    fx_open(&f, "GET /a HTTP/1.1\r\nHost: example.com\r\n\r\n", false);
    upstream_head(&f);
    sl_h1_head_clear(&f.r->rhead);
    f.r->rhead.status = 200;
    f.r->rhead.minor = 1;
    CHECK_INT(sl__h1_client_head(f.r), SL_OK);
    CHECK_INT(f.r->arena.nblocks, 0);
    CHECK(f.r->uphead.base >= f.r->arena_first && f.r->uphead.base < f.r->arena_first + SL_REQ_ARENA_FIRST);
    fx_close(&f);
}

/* 40 fields of ~90 bytes: the fields spill to the arena (over 16), and the rebuilt head
 * (~3.7 KiB) does not fit the first chunk, so it is built again in a block; every field
 * goes upstream, in order. */
static void test_big_head_spills_and_takes_a_block(void) {
    static char req[8192];
    size_t n = (size_t)snprintf(req, sizeof req, "GET /big HTTP/1.1\r\nHost: example.com\r\n");
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(req + n, sizeof req - n, "X-Long-%02d: %080d\r\n", i, i);
    snprintf(req + n, sizeof req - n, "\r\n");
    fx_t f;
    fx_open(&f, req, false);
    CHECK_INT(f.r->head.nheaders, 41);
    CHECK(f.r->head.headers != f.r->head.inline_headers);
    char *h = upstream_head(&f);
    CHECK(f.r->arena.nblocks >= 1);
    const char *at = h;
    for (int i = 0; i < 40; i++) {
        char want[128];
        snprintf(want, sizeof want, "X-Long-%02d: %080d\r\n", i, i);
        const char *x = strstr(h, want);
        CHECK(x != NULL && x > at);
        at = x;
    }
    fx_close(&f);
}

/* A parked request (conn.c gives its read block back): its head moves to the arena, and
 * the head rebuilt afterwards reads none of the old buffer's bytes. */
static void test_detached_head_outlives_its_buffer(void) {
    fx_t f;
    fx_open(&f, "GET /d?q=1 HTTP/1.1\r\nHost: example.com\r\nX-A: 1\r\n\r\n", false);
    f.r->head_end = (uint32_t)strlen(f.head);
    CHECK_INT(sl__req_detach_head(f.r, f.head), SL_OK);
    memset(f.head, '#', sizeof f.head);
    char *h = upstream_head(&f);
    CHECK(strncmp(h, "GET /d?q=1 HTTP/1.1\r\n", 21) == 0);
    CHECK(strstr(h, "Host: example.com\r\nX-A: 1\r\n") != NULL);
    CHECK(strchr(h, '#') == NULL);
    fx_close(&f);
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"small_heads_take_no_block", test_small_heads_take_no_block},
        {"big_head_spills_and_takes_a_block", test_big_head_spills_and_takes_a_block},
        {"detached_head_outlives_its_buffer", test_detached_head_outlives_its_buffer},
        {"forwarded", test_forwarded},
        {"upstream_head_rebuilt", test_upstream_head_rebuilt},
        {"upstream_head_framing", test_upstream_head_framing},
        {"client_head", test_client_head},
        {"answer_head", test_answer_head},
    };
    return check_main(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
