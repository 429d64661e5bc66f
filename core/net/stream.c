/* stream.c — a connection's byte stream, TCP or TLS over TCP (stream.h). */
#include "net/stream.h"

int sl_stream_read_start(sl_stream_t *s, uv_alloc_cb alloc_cb, uv_read_cb read_cb) {
    return s->tls ? sl_tls_read_start(s->tls, alloc_cb, read_cb)
                  : uv_read_start((uv_stream_t *)&s->tcp, alloc_cb, read_cb);
}

void sl_stream_read_stop(sl_stream_t *s) {
    if (s->tls)
        sl_tls_read_stop(s->tls);
    else
        uv_read_stop((uv_stream_t *)&s->tcp);
}

int sl_stream_write(sl_stream_t *s, sl_outq_t *q, uv_write_t *wr, uv_write_cb cb) {
    if (!s->tls) return sl_outq_write(q, (uv_stream_t *)&s->tcp, wr, cb);
    int rc = sl_tls_write(s->tls, wr, q->iov, q->niov, cb);
    if (rc == 1) sl_outq_reset(q);
    if (rc == 0) q->writing = 1;
    return rc;
}

int sl_stream_writev(sl_stream_t *s, uv_write_t *wr, const uv_buf_t *bufs, unsigned n, uv_write_cb cb) {
    if (s->tls) return sl_tls_write(s->tls, wr, bufs, n, cb);
    int rc = uv_write(wr, (uv_stream_t *)&s->tcp, bufs, n, cb);
    return rc < 0 ? rc : 0;
}

bool sl_stream_send(sl_stream_t *s, const char *p, size_t n) {
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    if (s->tls) return sl_tls_write(s->tls, NULL, &b, 1, NULL) >= 0;
    return uv_try_write((uv_stream_t *)&s->tcp, &b, 1) == (int)n;
}

int sl_stream_shutdown(sl_stream_t *s, uv_shutdown_t *req, uv_shutdown_cb cb) {
    return s->tls ? sl_tls_shutdown_write(s->tls, req, cb) : uv_shutdown(req, (uv_stream_t *)&s->tcp, cb);
}

void sl_stream_end_tls(sl_stream_t *s) {
    if (!s->tls) return;
    sl_tls_close(s->tls);
    s->tls = NULL;
}
