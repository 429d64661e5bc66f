/* grpc_origin.c — a fast gRPC origin for scripts/bench's grpc scenario (issue 14).
 *
 * The benchmark compares proxies (sluice, nginx grpc_pass) in front of one origin; the
 * origin must not be what limits them. A grpcio server answers a few thousand calls a
 * second, and nghttpd (--trailer) opens and reads a file per request; this one answers
 * from memory: one thread, one libuv loop, nghttp2 server sessions over h2c (prior
 * knowledge), and for every request, whatever its path and body (read and dropped):
 *
 *   HEADERS :status 200, content-type application/grpc
 *   DATA    one gRPC message of --size bytes (5-byte prefix + 'x' * size), or for a path
 *           ending in /Stream, --stream-bytes of 16 KiB messages
 *   HEADERS grpc-status: 0 (trailers, END_STREAM)
 *
 *   grpc_origin [--listen HOST:PORT] [--size N] [--stream-bytes N]
 * prints "listening HOST:PORT" once bound. SIGTERM/SIGINT exit 0.
 */
#include <nghttp2/nghttp2.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define STREAM_MSG 16384

typedef struct {
    uv_tcp_t tcp;
    nghttp2_session *ss;
    int closing;
} conn_t;

typedef struct {
    uv_write_t w;
    char data[];
} wreq_t;

typedef struct {
    size_t off, len; /* bytes of the body sent, to send */
    int stream;
} resp_t;

static char *unary_body, *stream_msg;
static size_t unary_len, stream_bytes = 1 << 20;

static void on_closed(uv_handle_t *h) {
    conn_t *c = h->data;
    nghttp2_session_del(c->ss);
    free(c);
}

static void conn_close(conn_t *c) {
    if (c->closing) return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_written(uv_write_t *w, int status) {
    (void)status;
    free(w);
}

/* Everything nghttp2 has to send, in one write. */
static void flush(conn_t *c) {
    size_t cap = 0, len = 0;
    wreq_t *wr = NULL;
    for (;;) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(c->ss, &d);
        if (n < 0) {
            free(wr);
            conn_close(c);
            return;
        }
        if (n == 0) break;
        if (len + (size_t)n > cap) {
            cap = (len + (size_t)n) * 2 + 4096;
            wreq_t *nw = realloc(wr, sizeof(*wr) + cap);
            if (!nw) abort();
            wr = nw;
        }
        memcpy(wr->data + len, d, (size_t)n);
        len += (size_t)n;
    }
    if (!len) return;
    uv_buf_t b = uv_buf_init(wr->data, (unsigned)len);
    if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
        free(wr);
        conn_close(c);
    }
    if (!nghttp2_session_want_read(c->ss) && !nghttp2_session_want_write(c->ss)) conn_close(c);
}

static ssize_t body_read(nghttp2_session *ss, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
    (void)ud;
    resp_t *r = src->ptr;
    size_t n = r->len - r->off < len ? r->len - r->off : len;
    if (r->stream) {
        for (size_t i = 0; i < n;) {
            size_t at = (r->off + i) % (STREAM_MSG + 5), k = STREAM_MSG + 5 - at;
            if (k > n - i) k = n - i;
            memcpy(buf + i, stream_msg + at, k);
            i += k;
        }
    } else {
        memcpy(buf, unary_body + r->off, n);
    }
    r->off += n;
    if (r->off == r->len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        static const nghttp2_nv tr[] = {{(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1, NGHTTP2_NV_FLAG_NONE}};
        nghttp2_submit_trailer(ss, sid, tr, 1);
    }
    return (ssize_t)n;
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *ud) {
    (void)flags, (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS || nl != 5 || memcmp(name, ":path", 5) != 0) return 0;
    resp_t *r = nghttp2_session_get_stream_user_data(ss, f->hd.stream_id);
    if (r) r->stream = vl >= 7 && memcmp(value + vl - 7, "/Stream", 7) == 0;
    return 0;
}

static int on_begin_headers(nghttp2_session *ss, const nghttp2_frame *f, void *ud) {
    (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    resp_t *r = calloc(1, sizeof(*r));
    if (!r) return NGHTTP2_ERR_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(ss, f->hd.stream_id, r);
    return 0;
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *f, void *ud) {
    (void)ud;
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    resp_t *r = nghttp2_session_get_stream_user_data(ss, f->hd.stream_id);
    if (!r) return 0;
    r->len = r->stream ? stream_bytes : unary_len;
    static const nghttp2_nv nv[] = {{(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
                                    {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
                                     NGHTTP2_NV_FLAG_NONE}};
    nghttp2_data_provider prd = {.source = {.ptr = r}, .read_callback = body_read};
    nghttp2_submit_response(ss, f->hd.stream_id, nv, 2, &prd);
    return 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t sid, uint32_t code, void *ud) {
    (void)code, (void)ud;
    free(nghttp2_session_get_stream_user_data(ss, sid));
    return 0;
}

static nghttp2_session_callbacks *cbs;

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
    (void)h, (void)hint;
    static char buf[65536];
    *b = uv_buf_init(buf, sizeof buf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
    conn_t *c = s->data;
    if (n < 0) {
        conn_close(c);
        return;
    }
    if (n == 0) return;
    if (nghttp2_session_mem_recv(c->ss, (const uint8_t *)b->base, (size_t)n) < 0) {
        conn_close(c);
        return;
    }
    flush(c);
}

static void on_conn(uv_stream_t *srv, int status) {
    if (status < 0) return;
    conn_t *c = calloc(1, sizeof(*c));
    if (!c) return;
    uv_tcp_init(srv->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0 || nghttp2_session_server_new(&c->ss, cbs, c) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000},
                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
    nghttp2_submit_settings(c->ss, NGHTTP2_FLAG_NONE, iv, 2);
    nghttp2_session_set_local_window_size(c->ss, NGHTTP2_FLAG_NONE, 0, 1 << 24);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    flush(c);
}

static void on_signal(uv_signal_t *s, int sig) {
    (void)sig;
    uv_stop(s->loop);
}

int main(int argc, char **argv) {
    const char *listen = "127.0.0.1:0";
    size_t size = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--listen") == 0) listen = argv[i + 1];
        else if (strcmp(argv[i], "--size") == 0) size = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--stream-bytes") == 0) stream_bytes = strtoul(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "usage: grpc_origin [--listen HOST:PORT] [--size N] [--stream-bytes N]\n");
            return 2;
        }
    }
    unary_len = size + 5;
    unary_body = malloc(unary_len);
    stream_msg = malloc(STREAM_MSG + 5);
    if (!unary_body || !stream_msg) return 1;
    unary_body[0] = 0, unary_body[1] = (char)(size >> 24), unary_body[2] = (char)(size >> 16);
    unary_body[3] = (char)(size >> 8), unary_body[4] = (char)size;
    memset(unary_body + 5, 'x', size);
    stream_msg[0] = 0, stream_msg[1] = 0, stream_msg[2] = 0, stream_msg[3] = STREAM_MSG >> 8, stream_msg[4] = 0;
    memset(stream_msg + 5, 's', STREAM_MSG);
    /* whole messages only: the stream's length is rounded down to a multiple of one */
    stream_bytes -= stream_bytes % (STREAM_MSG + 5);

    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);

    char host[64];
    const char *colon = strrchr(listen, ':');
    if (!colon || (size_t)(colon - listen) >= sizeof host) return 2;
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = 0;
    struct sockaddr_in sa;
    if (uv_ip4_addr(host, atoi(colon + 1), &sa) != 0) return 2;
    uv_loop_t *loop = uv_default_loop();
    uv_tcp_t srv;
    uv_tcp_init(loop, &srv);
    if (uv_tcp_bind(&srv, (const struct sockaddr *)&sa, 0) != 0 || uv_listen((uv_stream_t *)&srv, 1024, on_conn) != 0) {
        perror("listen");
        return 1;
    }
    struct sockaddr_storage got;
    int gl = sizeof got;
    uv_tcp_getsockname(&srv, (struct sockaddr *)&got, &gl);
    printf("listening %s:%d\n", host, ntohs(((struct sockaddr_in *)&got)->sin_port));
    fflush(stdout);
    uv_signal_t s1, s2;
    uv_signal_init(loop, &s1);
    uv_signal_init(loop, &s2);
    uv_signal_start(&s1, on_signal, SIGTERM);
    uv_signal_start(&s2, on_signal, SIGINT);
    signal(SIGPIPE, SIG_IGN);
    uv_run(loop, UV_RUN_DEFAULT);
    return 0;
}
