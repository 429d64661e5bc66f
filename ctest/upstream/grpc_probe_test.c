/* grpc_probe_test.c — unit tests for core/upstream/grpc_probe.c: the probe talks to an
 * in-process nghttp2 server session (bytes handed back and forth, no socket) that checks
 * the request (path, content type, te, the HealthCheckRequest's service) and answers as the
 * case says; the verdicts: SERVING passes; NOT_SERVING, SERVICE_UNKNOWN, an error
 * grpc-status, an HTTP error status, a malformed message and a GOAWAY fail, saying why.
 *
 * Public API only. Run: grpc_probe_test [substring]
 */
#include "upstream/grpc_probe.h"

#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "check.h"

typedef struct {
    const char *status;       /* :status */
    const char *grpc_status;  /* trailer; NULL: none */
    const unsigned char *msg; /* the whole framed message; NULL: no DATA */
    size_t msg_len;
    int goaway;               /* answer with a GOAWAY instead */
    /* what the server saw */
    char path[64], ctype[32], te[16];
    unsigned char body[256];
    size_t body_len;
    size_t sent;
} server_t;

static ssize_t srv_read(nghttp2_session *ss, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *ud) {
    server_t *s = ud;
    (void)src;
    size_t n = SL_MIN(len, s->msg_len - s->sent);
    memcpy(buf, s->msg + s->sent, n);
    s->sent += n;
    if (s->sent == s->msg_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (s->grpc_status) {
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            nghttp2_nv tr = {(uint8_t *)"grpc-status", (uint8_t *)s->grpc_status, 11, strlen(s->grpc_status), 0};
            nghttp2_submit_trailer(ss, sid, &tr, 1);
        }
    }
    return (ssize_t)n;
}

static int srv_header(nghttp2_session *ss, const nghttp2_frame *f, const uint8_t *n, size_t nl, const uint8_t *v,
                      size_t vl, uint8_t flags, void *ud) {
    server_t *s = ud;
    (void)ss, (void)f, (void)flags;
    char *to = nl == 5 && !memcmp(n, ":path", 5)           ? s->path
               : nl == 12 && !memcmp(n, "content-type", 12) ? s->ctype
               : nl == 2 && !memcmp(n, "te", 2)             ? s->te
                                                            : NULL;
    if (to) snprintf(to, 16 + (to == s->path ? 48 : to == s->ctype ? 16 : 0), "%.*s", (int)vl, v);
    return 0;
}

static int srv_data(nghttp2_session *ss, uint8_t flags, int32_t sid, const uint8_t *d, size_t len, void *ud) {
    server_t *s = ud;
    (void)ss, (void)flags, (void)sid;
    if (s->body_len + len <= sizeof s->body) memcpy(s->body + s->body_len, d, len);
    s->body_len += len;
    return 0;
}

static int srv_frame(nghttp2_session *ss, const nghttp2_frame *f, void *ud) {
    server_t *s = ud;
    if (!(f->hd.flags & NGHTTP2_FLAG_END_STREAM) || f->hd.stream_id == 0) return 0;
    if (s->goaway) {
        nghttp2_submit_goaway(ss, 0, 0, NGHTTP2_NO_ERROR, NULL, 0);
        return 0;
    }
    nghttp2_nv nv[2] = {{(uint8_t *)":status", (uint8_t *)s->status, 7, strlen(s->status), 0},
                        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0}};
    nghttp2_data_provider prd = {.read_callback = srv_read};
    if (!s->msg && s->grpc_status) { /* trailers-only */
        nghttp2_nv to[3] = {nv[0], nv[1], {(uint8_t *)"grpc-status", (uint8_t *)s->grpc_status, 11,
                                           strlen(s->grpc_status), 0}};
        nghttp2_submit_response(ss, f->hd.stream_id, to, 3, NULL);
        return 0;
    }
    nghttp2_submit_response(ss, f->hd.stream_id, nv, 2, s->msg ? &prd : NULL);
    return 0;
}

/* Runs one probe against a server answering as s says: the probe's verdict, *why set. */
static int exchange(server_t *s, const char *service, const char **why) {
    nghttp2_session_callbacks *cb;
    nghttp2_session *srv;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, srv_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, srv_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, srv_frame);
    nghttp2_session_server_new(&srv, cb, s);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(srv, NGHTTP2_FLAG_NONE, NULL, 0);
    sl_grpc_probe_t *p = sl_grpc_probe_new("127.0.0.1:1", false, service);
    CHECK(p != NULL);
    int rc = SL_EAGAIN;
    for (int round = 0; round < 20 && rc == SL_EAGAIN; round++) {
        char *out;
        long n = sl_grpc_probe_take(p, &out);
        if (n > 0) nghttp2_session_mem_recv(srv, (const uint8_t *)out, (size_t)n);
        free(out);
        const uint8_t *d;
        ssize_t k;
        while ((k = nghttp2_session_mem_send(srv, &d)) > 0 && rc == SL_EAGAIN)
            rc = sl_grpc_probe_feed(p, (const char *)d, (size_t)k, why);
    }
    static char saved[96];
    if (rc == SL_ERROR) snprintf(saved, sizeof saved, "%s", *why), *why = saved;
    sl_grpc_probe_free(p);
    nghttp2_session_del(srv);
    return rc;
}

static const unsigned char SERVING[] = {0, 0, 0, 0, 2, 0x08, 0x01};
static const unsigned char NOT_SERVING[] = {0, 0, 0, 0, 2, 0x08, 0x02};
static const unsigned char UNKNOWN_SVC[] = {0, 0, 0, 0, 2, 0x08, 0x03};
static const unsigned char EMPTY[] = {0, 0, 0, 0, 0}; /* proto3: status absent = UNKNOWN (0) */
static const unsigned char SKIPS[] = {0, 0, 0, 0, 7, 0x12, 0x02, 'h', 'i', 0x08, 0x01, 0x18}; /* truncated */
static const unsigned char OTHER_FIELD[] = {0, 0, 0, 0, 6, 0x12, 0x02, 'h', 'i', 0x08, 0x01};

static void test_serving(void) {
    server_t s = {.status = "200", .grpc_status = "0", .msg = SERVING, .msg_len = sizeof SERVING};
    const char *why = NULL;
    CHECK_INT(exchange(&s, "svc.A", &why), SL_OK);
    CHECK_STR(s.path, "/grpc.health.v1.Health/Check");
    CHECK_STR(s.ctype, "application/grpc");
    CHECK_STR(s.te, "trailers");
    /* the HealthCheckRequest: prefix, then field 1 (0x0a), length 5, "svc.A" */
    static const unsigned char want[] = {0, 0, 0, 0, 7, 0x0a, 5, 's', 'v', 'c', '.', 'A'};
    CHECK_INT(s.body_len, sizeof want);
    CHECK(memcmp(s.body, want, sizeof want) == 0);
    server_t o = {.status = "200", .grpc_status = "0", .msg = OTHER_FIELD, .msg_len = sizeof OTHER_FIELD};
    CHECK_INT(exchange(&o, NULL, &why), SL_OK); /* an unknown field is skipped */
}

static void test_service_empty_and_long(void) {
    server_t s = {.status = "200", .grpc_status = "0", .msg = SERVING, .msg_len = sizeof SERVING};
    const char *why;
    CHECK_INT(exchange(&s, "", &why), SL_OK);
    CHECK_INT(s.body_len, 5); /* "": no field at all */
    char name[151];
    memset(name, 'n', 150);
    name[150] = 0;
    server_t l = {.status = "200", .grpc_status = "0", .msg = SERVING, .msg_len = sizeof SERVING};
    CHECK_INT(exchange(&l, name, &why), SL_OK);
    CHECK_INT(l.body_len, 5 + 1 + 2 + 150); /* a two-byte varint length */
    CHECK_INT(l.body[6], 0x80 | (150 & 0x7f));
    CHECK_INT(l.body[7], 150 >> 7);
}

static void test_failures(void) {
    const char *why = NULL;
    server_t ns = {.status = "200", .grpc_status = "0", .msg = NOT_SERVING, .msg_len = sizeof NOT_SERVING};
    CHECK_INT(exchange(&ns, NULL, &why), SL_ERROR);
    CHECK_STR(why, "NOT_SERVING (2)");
    server_t su = {.status = "200", .grpc_status = "0", .msg = UNKNOWN_SVC, .msg_len = sizeof UNKNOWN_SVC};
    CHECK_INT(exchange(&su, NULL, &why), SL_ERROR);
    CHECK_STR(why, "SERVICE_UNKNOWN (3)");
    server_t em = {.status = "200", .grpc_status = "0", .msg = EMPTY, .msg_len = sizeof EMPTY};
    CHECK_INT(exchange(&em, NULL, &why), SL_ERROR);
    CHECK_STR(why, "UNKNOWN (0)");
    server_t tr = {.status = "200", .grpc_status = "0", .msg = SKIPS, .msg_len = sizeof SKIPS};
    CHECK_INT(exchange(&tr, NULL, &why), SL_ERROR);
    CHECK_STR(why, "not a HealthCheckResponse");
    server_t nf = {.status = "200", .grpc_status = "5"};
    CHECK_INT(exchange(&nf, NULL, &why), SL_ERROR);
    CHECK_STR(why, "grpc-status 5");
    server_t none = {.status = "200", .msg = SERVING, .msg_len = sizeof SERVING};
    CHECK_INT(exchange(&none, NULL, &why), SL_ERROR);
    CHECK_STR(why, "no grpc-status");
    server_t h404 = {.status = "404"};
    CHECK_INT(exchange(&h404, NULL, &why), SL_ERROR);
    CHECK_STR(why, "http status 404");
    server_t ga = {.status = "200", .goaway = 1};
    CHECK_INT(exchange(&ga, NULL, &why), SL_ERROR);
}

static void test_not_http2(void) {
    sl_grpc_probe_t *p = sl_grpc_probe_new("x", false, NULL);
    const char *why = NULL;
    static const char h1[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    CHECK_INT(sl_grpc_probe_feed(p, h1, sizeof h1 - 1, &why), SL_ERROR);
    CHECK(why != NULL);
    sl_grpc_probe_free(p);
}

static const check_test_t tests[] = {
    {"serving", test_serving},
    {"service_empty_and_long", test_service_empty_and_long},
    {"failures", test_failures},
    {"not_http2", test_not_http2},
};

int main(int argc, char **argv) { return check_main(tests, SL_ARRAY_LEN(tests), argc, argv); }
