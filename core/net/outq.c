/* outq.c — the output queue of one direction (outq.h). */
#include "net/outq.h"

#include "base/common.h"
#include "base/wbuf.h"

void sl_outq_init(sl_outq_t *q) {
    q->niov = q->nsizes = 0;
    q->writing = q->chunked = 0;
}

void sl_outq_reset(sl_outq_t *q) {
    q->niov = 0;
    q->nsizes = 0;
}

size_t sl_outq_copy(const sl_outq_t *q, uint16_t *qi, size_t *qoff, uint8_t *buf, size_t len) {
    size_t n = 0;
    while (*qi < q->niov && n < len) {
        const uv_buf_t *b = &q->iov[*qi];
        size_t k = SL_MIN(len - n, b->len - *qoff);
        memcpy(buf + n, b->base + *qoff, k);
        n += k;
        *qoff += k;
        if (*qoff == b->len) ++*qi, *qoff = 0;
    }
    return n;
}

uint32_t sl_outq_room(const sl_outq_t *q) {
    uint32_t by_iov = (uint32_t)(SL_IOV - 2 - q->niov) / 3;
    uint32_t by_size = SL_SPANS - q->nsizes;
    return SL_MIN(by_iov, by_size);
}

bool sl_outq_add(sl_outq_t *q, const char *p, size_t n) {
    if (q->niov == SL_IOV) return false;
    q->iov[q->niov++] = uv_buf_init((char *)p, (unsigned)n);
    return true;
}

bool sl_outq_span(sl_outq_t *q, const char *p, size_t n) {
    if (n == 0) return true;
    if (!q->chunked) return sl_outq_add(q, p, n);
    if (q->nsizes == SL_SPANS || q->niov + 3 > SL_IOV) return false;
    char *sz = q->sizes[q->nsizes++];
    sl_wbuf_t b = SL_WBUF_BOUNDED(sz, 18);
    sl_wbuf_hex(&b, n);
    SL_WBUF_LIT(&b, "\r\n");
    sl_outq_add(q, sz, b.len);
    sl_outq_add(q, p, n);
    return sl_outq_add(q, "\r\n", 2);
}

bool sl_outq_end_chunks(sl_outq_t *q) {
    return !q->chunked || sl_outq_add(q, "0\r\n\r\n", 5);
}

int sl_outq_write(sl_outq_t *q, uv_stream_t *s, uv_write_t *wr, uv_write_cb cb) {
    /* Try the write now: in the common case it completes and needs no write request,
     * so the steady state allocates nothing (uv_write copies arrays of more than 4 bufs). */
    int n = uv_try_write(s, q->iov, q->niov);
    if (n == UV_EAGAIN) n = 0;
    if (n < 0) return n;
    size_t left = (size_t)n;
    uint16_t i = 0;
    while (i < q->niov && left >= q->iov[i].len) left -= q->iov[i++].len;
    if (i == q->niov) {
        sl_outq_reset(q);
        return 1;
    }
    q->iov[i].base += left;
    q->iov[i].len -= left;
    int rc = uv_write(wr, s, q->iov + i, q->niov - i, cb);
    if (rc < 0) return rc;
    q->writing = 1;
    return 0;
}
