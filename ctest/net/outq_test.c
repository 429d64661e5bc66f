/* outq_test.c — unit tests for core/net/outq.c: slices framed as chunks (sizes in hex,
 * CRLFs), the last chunk, the room left as slices are added, a full queue refusing more,
 * and a write to a real socket pair that the peer reads byte for byte — at once, and in
 * part with the rest in flight while the peer does not read. */
#include "net/outq.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

/* The queue's bytes, in order, as one string (into buf). */
static size_t flatten(const sl_outq_t *q, char *buf, size_t cap) {
    size_t n = 0;
    for (uint16_t i = 0; i < q->niov; i++) {
        CHECK(n + q->iov[i].len <= cap);
        memcpy(buf + n, q->iov[i].base, q->iov[i].len);
        n += q->iov[i].len;
    }
    buf[n] = 0;
    return n;
}

static void test_plain_spans(void) {
    sl_outq_t q = {0};
    char out[256];
    CHECK(sl_outq_add(&q, "HEAD\r\n\r\n", 8));
    CHECK(sl_outq_span(&q, "abc", 3));
    CHECK(sl_outq_span(&q, "", 0)); /* nothing queued for an empty slice */
    CHECK(sl_outq_end_chunks(&q));  /* not chunked: no last chunk */
    flatten(&q, out, sizeof out);
    CHECK_STR(out, "HEAD\r\n\r\nabc");
    CHECK_INT(q.niov, 2);
    sl_outq_reset(&q);
    CHECK_INT(q.niov, 0);
}

static void test_chunked_spans(void) {
    sl_outq_t q = {.chunked = 1};
    char out[512];
    char big[300];
    memset(big, 'x', sizeof big);
    CHECK(sl_outq_span(&q, "hello", 5));
    CHECK(sl_outq_span(&q, big, sizeof big));
    CHECK(sl_outq_end_chunks(&q));
    flatten(&q, out, sizeof out - 1);
    CHECK(strncmp(out, "5\r\nhello\r\n12c\r\n", 15) == 0);
    CHECK_STR(out + 15 + 300, "\r\n0\r\n\r\n");
}

static void test_room_and_full(void) {
    sl_outq_t q = {.chunked = 1};
    uint32_t room = sl_outq_room(&q);
    CHECK_INT(room, SL_SPANS);
    uint32_t added = 0;
    while (sl_outq_span(&q, "a", 1)) {
        added++;
        CHECK_INT(sl_outq_room(&q), room - added);
        if (added > 1000) break;
    }
    CHECK_INT(added, SL_SPANS);
    CHECK_INT(sl_outq_room(&q), 0);
    /* the last chunk still fits after a full set of spans */
    CHECK(sl_outq_end_chunks(&q));
}

typedef struct {
    int called, status;
} wr_state_t;

static void on_written(uv_write_t *wr, int status) {
    wr_state_t *st = wr->data;
    st->called++;
    st->status = status;
}

/* Written at once when the socket takes it all; in part otherwise, the rest in flight
 * until the peer reads (backpressure), then the callback. */
static void test_write_socket(void) {
    int sv[2];
    CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int small = 4096;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    uv_loop_t loop;
    uv_loop_init(&loop);
    uv_pipe_t p;
    uv_pipe_init(&loop, &p, 0);
    CHECK_INT(uv_pipe_open(&p, sv[0]), 0);
    sl_outq_t q = {0};
    uv_write_t wr;
    wr_state_t st = {0};
    wr.data = &st;
    CHECK(sl_outq_add(&q, "ping", 4));
    CHECK_INT(sl_outq_write(&q, (uv_stream_t *)&p, &wr, on_written), 1);
    CHECK_INT(q.niov, 0);
    char buf[8];
    CHECK_INT(read(sv[1], buf, sizeof buf), 4);
    CHECK(memcmp(buf, "ping", 4) == 0);

    size_t big_len = 1 << 20;
    char *big = malloc(big_len);
    for (size_t i = 0; i < big_len; i++) big[i] = (char)(i * 7);
    CHECK(sl_outq_add(&q, big, big_len / 2));
    CHECK(sl_outq_add(&q, big + big_len / 2, big_len / 2));
    CHECK_INT(sl_outq_write(&q, (uv_stream_t *)&p, &wr, on_written), 0);
    CHECK_INT(q.writing, 1);
    CHECK_INT(st.called, 0);
    char *got = malloc(big_len);
    size_t have = 0;
    int spins = 0;
    while (have < big_len && spins++ < 100000) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(sv[1], got + have, big_len - have, MSG_DONTWAIT);
        if (n > 0) have += (size_t)n;
    }
    while (!st.called && spins++ < 200000) uv_run(&loop, UV_RUN_NOWAIT);
    CHECK_INT(have, big_len);
    CHECK(memcmp(got, big, big_len) == 0);
    CHECK_INT(st.called, 1);
    CHECK_INT(st.status, 0);
    free(big);
    free(got);
    uv_close((uv_handle_t *)&p, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    close(sv[1]);
}

int main(int argc, char **argv) {
    static const check_test_t tests[] = {
        {"plain_spans", test_plain_spans},
        {"chunked_spans", test_chunked_spans},
        {"room_and_full", test_room_and_full},
        {"write_socket", test_write_socket},
    };
    return check_main(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
