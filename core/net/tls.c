/* tls.c — TLS sessions over libuv streams, on workers: the BIO over pool blocks, the pump,
 * the read side, the write side, life. See tls.h for the model; the contexts sessions
 * start from are built with the config (config/tls_ctx.c). */
#include "net/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bug.h"
#include "base/common.h"

/* ---- buffers ---- */

/* Ciphertext waiting to be written: a pool block, or a heap buffer when a single write
 * needs more than a block. */
typedef struct {
    char *p;
    size_t len, cap;
    bool heap;
} tbuf_t;

struct sl_tls_s {
    SSL *ssl;
    uv_stream_t *s;
    void *owner;                 /**< the stream's data before the session attached */
    sl_tls_pump_t *pump;
    sl_list_t plink;             /**< in its pump's head or run list while it waits to deliver */
    uv_alloc_cb ualloc;
    uv_read_cb uread;
    void (*on_est)(sl_tls_t *t);
    void (*hs_done)(sl_tls_t *t, int status);
    uv_shutdown_t *sd_req;       /**< a half-close waiting for the flush */
    uv_shutdown_cb sd_cb;
    uv_write_t *uwr;             /**< the owner's write waiting for the flush */
    uv_write_cb ucb;
    uv_write_t wreq;
    char *in;                    /**< ciphertext read, not yet taken by OpenSSL (a block) */
    uint32_t in_len, in_pos;
    tbuf_t fill, flight;         /**< ciphertext produced; the part being written */
    int sock_err;                /**< the socket's read error (not EOF) */
    int werr;                    /**< a write failed */
    uint8_t user_reading, sock_reading, sock_eof, established, failed, detached, writing, client;
    uint8_t busy;                /**< inside tls_deliver: a close from a callback frees later */
    uint8_t head_len;            /**< how much of head OpenSSL has read */
    char head[5];                /**< the first bytes OpenSSL read: a record header, or not */
    char err[200];
};

static void tbuf_release(sl_tls_t *t, tbuf_t *b) {
    if (!b->p) return;
    if (b->heap)
        free(b->p);
    else
        sl_block_put(t->pump->blocks, b->p);
    *b = (tbuf_t){0};
}

static bool tbuf_append(sl_tls_t *t, tbuf_t *b, const char *p, size_t n) {
    if (!b->p) {
        if (n <= SL_BLOCK_SIZE && (b->p = sl_block_get(t->pump->blocks))) {
            b->cap = SL_BLOCK_SIZE;
            b->heap = false;
        } else if ((b->p = malloc(SL_MAX(n, (size_t)SL_BLOCK_SIZE)))) {
            b->cap = SL_MAX(n, (size_t)SL_BLOCK_SIZE);
            b->heap = true;
        } else {
            return false;
        }
        b->len = 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap * 2;
        while (cap < b->len + n) cap *= 2;
        char *q = malloc(cap);
        if (!q) return false;
        memcpy(q, b->p, b->len);
        size_t len = b->len;
        tbuf_release(t, b);
        *b = (tbuf_t){q, len, cap, true};
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return true;
}

/* ---- the BIO: OpenSSL reads t->in and writes t->fill ---- */

static int bio_write_ex(BIO *b, const char *data, size_t len, size_t *written) {
    sl_tls_t *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (!tbuf_append(t, &t->fill, data, len)) return 0;
    *written = len;
    return 1;
}

static int bio_read_ex(BIO *b, char *data, size_t len, size_t *readbytes) {
    sl_tls_t *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    size_t avail = t->in ? t->in_len - t->in_pos : 0;
    if (!avail) {
        if (!t->sock_eof && !t->sock_err) BIO_set_retry_read(b);
        *readbytes = 0;
        return 0;
    }
    size_t n = SL_MIN(avail, len);
    memcpy(data, t->in + t->in_pos, n);
    if (t->head_len < sizeof t->head) {
        size_t k = SL_MIN(n, sizeof t->head - t->head_len);
        memcpy(t->head + t->head_len, data, k);
        t->head_len += (uint8_t)k;
    }
    t->in_pos += (uint32_t)n;
    *readbytes = n;
    return 1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
    (void)num;
    (void)ptr;
    sl_tls_t *t = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_PENDING:
        return t && t->in ? (long)(t->in_len - t->in_pos) : 0;
    case BIO_CTRL_EOF:
        return t && (t->sock_eof || t->sock_err) && (!t->in || t->in_pos == t->in_len);
    default:
        return 0;
    }
}

static int bio_create(BIO *b) {
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static void bio_method_init(void) {
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sluice");
    if (!m) return;
    BIO_meth_set_write_ex(m, bio_write_ex);
    BIO_meth_set_read_ex(m, bio_read_ex);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    bio_method = m;
}

/* ---- the pump ---- */

static void tls_deliver(sl_tls_t *t);

/* From whichever of its pump's lists holds it (a session closed by a delivery pump_cb made
 * before its own turn is in `run`). */
static void pump_unlink(sl_tls_t *t) { sl_list_remove(&t->plink); }

static void pump_cb(uv_idle_t *h) {
    sl_tls_pump_t *p = h->data;
    sl_list_splice(&p->run, &p->head);
    uv_idle_stop(h);
    /* Sessions added while these run wait for the next turn of the loop. The list being
     * run lives in the pump, so that a delivery closing a session still in it (a client
     * connection aborting its upstream's) unlinks it from there. */
    while (!sl_list_empty(&p->run)) {
        sl_tls_t *t = SL_LIST_FIRST(&p->run, sl_tls_t, plink);
        sl_list_remove(&t->plink);
        tls_deliver(t);
    }
}

/* First come, first delivered. */
static void pump_add(sl_tls_t *t) {
    if (sl_list_linked(&t->plink) || t->detached) return;
    sl_list_push_back(&t->pump->head, &t->plink);
    uv_idle_start(&t->pump->idle, pump_cb);
}

void sl_tls_pump_init(sl_tls_pump_t *p, uv_loop_t *loop, sl_blockpool_t *blocks) {
    uv_idle_init(loop, &p->idle);
    p->idle.data = p;
    sl_list_init(&p->head);
    sl_list_init(&p->run);
    p->blocks = blocks;
}

void sl_tls_pump_close(sl_tls_pump_t *p) {
    if (!uv_is_closing((uv_handle_t *)&p->idle)) uv_close((uv_handle_t *)&p->idle, NULL);
}

/* ---- sessions ---- */

static sl_tls_t *tls_new(SSL_CTX *ctx, uv_stream_t *s, sl_tls_pump_t *pump) {
    pthread_once(&bio_once, bio_method_init);
    if (!bio_method) return NULL;
    sl_tls_t *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->ssl = SSL_new(ctx);
    BIO *b = t->ssl ? BIO_new(bio_method) : NULL;
    if (!b) {
        if (t->ssl) SSL_free(t->ssl);
        free(t);
        return NULL;
    }
    BIO_set_data(b, t);
    SSL_set_bio(t->ssl, b, b);
    t->s = s;
    t->pump = pump;
    t->owner = s->data;
    s->data = t;
    return t;
}

sl_tls_t *sl_tls_accept(sl_tls_server_t *srv, uv_stream_t *s, sl_tls_pump_t *pump) {
    sl_tls_t *t = tls_new(sl__tls_server_ctx(srv), s, pump);
    if (t) SSL_set_accept_state(t->ssl);
    return t;
}

sl_tls_t *sl_tls_connect(sl_tls_client_t *cli, uv_stream_t *s, sl_tls_pump_t *pump,
                         const char *name) {
    sl_tls_t *t = tls_new(sl__tls_client_ctx(cli), s, pump);
    if (!t) return NULL;
    t->client = 1;
    SSL_set_connect_state(t->ssl);
    if (name) { /* a call's own host: no session of another host is offered */
        unsigned char ip[16];
        if (inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1) {
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), name);
        } else {
            SSL_set_tlsext_host_name(t->ssl, name);
            SSL_set1_host(t->ssl, name);
        }
        return t;
    }
    sl__tls_client_prepare(cli, t->ssl);
    return t;
}

static void tls_set_error(sl_tls_t *t, int e, const char *when) {
    /* a server's is its client certificate's verdict (tls.client_auth), else X509_V_OK */
    long v = SSL_get_verify_result(t->ssl);
    unsigned long code = ERR_peek_last_error();
    if (v != X509_V_OK) {
        snprintf(t->err, sizeof t->err, "%s: %scertificate verify failed: %s", when,
                 t->client ? "" : "client ", X509_verify_cert_error_string(v));
    } else if (code) {
        char buf[160];
        ERR_error_string_n(code, buf, sizeof buf);
        snprintf(t->err, sizeof t->err, "%s: %s", when, buf);
    } else if (t->sock_err) {
        snprintf(t->err, sizeof t->err, "%s: %s", when, uv_strerror(t->sock_err));
    } else if (t->sock_eof || e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN) {
        snprintf(t->err, sizeof t->err, "%s: the peer closed the connection", when);
    } else {
        snprintf(t->err, sizeof t->err, "%s: TLS error %d", when, e);
    }
    ERR_clear_error();
}

static void tls_in_trim(sl_tls_t *t) {
    if (t->in && t->in_pos == t->in_len) {
        sl_block_put(t->pump->blocks, t->in);
        t->in = NULL;
        t->in_len = t->in_pos = 0;
    }
}

static void tls_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    (void)hint;
    sl_tls_t *t = h->data;
    if (!t->in) {
        t->in = sl_block_get(t->pump->blocks);
        t->in_len = t->in_pos = 0;
        if (!t->in) {
            *buf = uv_buf_init(NULL, 0);
            return;
        }
    } else if (t->in_pos > 0) {
        memmove(t->in, t->in + t->in_pos, t->in_len - t->in_pos);
        t->in_len -= t->in_pos;
        t->in_pos = 0;
    }
    *buf = uv_buf_init(t->in + t->in_len, SL_BLOCK_SIZE - t->in_len);
}

static void tls_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Socket reads run while the owner reads (or the handshake needs bytes) and there is room. */
static void tls_sock_update(sl_tls_t *t) {
    bool room = !t->in || t->in_len - t->in_pos < SL_BLOCK_SIZE;
    bool want = !t->detached && !t->failed && !t->sock_eof && !t->sock_err && room &&
                (t->user_reading || !t->established);
    if (want && !t->sock_reading) {
        if (uv_read_start(t->s, tls_alloc, tls_on_read) == 0) t->sock_reading = 1;
    } else if (!want && t->sock_reading) {
        uv_read_stop(t->s);
        t->sock_reading = 0;
    }
}

static int tls_flush(sl_tls_t *t);

static void tls_fail(sl_tls_t *t, int e, const char *when) {
    SL_BUG_ON(t->detached); /* a closed session reports nothing */
    tls_set_error(t, e, when);
    t->failed = 1;
    tls_flush(t); /* an alert, if OpenSSL wrote one */
    tls_sock_update(t);
}

static void tls_free(sl_tls_t *t);
static void tls_deliver_once(sl_tls_t *t);

/* Moves what is buffered forward: the handshake, then plaintext to the owner. The owner
 * may close the session from any callback: it is freed once this returns. */
static void tls_deliver(sl_tls_t *t) {
    t->busy++;
    tls_deliver_once(t);
    if (--t->busy == 0 && t->detached && !t->writing) tls_free(t);
}

static void tls_deliver_once(sl_tls_t *t) {
    if (t->detached || t->failed) return;
    if (!t->established) {
        ERR_clear_error();
        int rc = SSL_do_handshake(t->ssl);
        if (tls_flush(t) < 0 && rc == 1) rc = -1;
        if (rc == 1) {
            SL_BUG_ON(t->established || t->detached);
            t->established = 1;
            if (t->client) {
                void (*cb)(sl_tls_t *, int) = t->hs_done;
                t->hs_done = NULL;
                tls_sock_update(t);
                if (cb) cb(t, 0);
                return;
            }
            if (t->on_est) t->on_est(t);
            if (t->detached) return;
        } else {
            int e = SSL_get_error(t->ssl, rc);
            if (e == SSL_ERROR_WANT_READ && !t->sock_eof && !t->sock_err) {
                tls_sock_update(t);
                return;
            }
            tls_fail(t, e, "handshake");
            if (t->client) {
                void (*cb)(sl_tls_t *, int) = t->hs_done;
                t->hs_done = NULL;
                if (cb) cb(t, UV_EPROTO);
            } else if (t->user_reading) {
                t->user_reading = 0;
                uv_buf_t b = uv_buf_init(NULL, 0);
                t->uread(t->s, UV_EPROTO, &b);
            }
            return;
        }
    }
    while (t->user_reading && !t->detached) {
        uv_buf_t b = uv_buf_init(NULL, 0);
        t->ualloc((uv_handle_t *)t->s, SL_BLOCK_SIZE, &b);
        if (!b.base || !b.len) {
            t->uread(t->s, UV_ENOBUFS, &b);
            break;
        }
        size_t n = 0;
        ERR_clear_error();
        int rc = SSL_read_ex(t->ssl, b.base, b.len, &n);
        if (rc == 1) {
            t->uread(t->s, (ssize_t)n, &b);
            continue;
        }
        int e = SSL_get_error(t->ssl, rc);
        tls_flush(t); /* a key update or an alert */
        if (e == SSL_ERROR_WANT_READ && !t->sock_eof && !t->sock_err) {
            t->uread(t->s, 0, &b);
            break;
        }
        t->user_reading = 0;
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_WANT_READ && t->sock_eof)) {
            t->sock_eof = 1;
            t->uread(t->s, UV_EOF, &b);
        } else {
            tls_set_error(t, e, "read");
            t->failed = 1;
            t->uread(t->s, t->sock_err ? t->sock_err : UV_EPROTO, &b);
        }
        break;
    }
    if (t->detached) return;
    tls_in_trim(t);
    tls_sock_update(t);
}

static void tls_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    (void)buf;
    sl_tls_t *t = s->data;
    if (nread == 0) {
        tls_in_trim(t);
        return;
    }
    if (nread < 0) {
        if (nread == UV_EOF)
            t->sock_eof = 1;
        else
            t->sock_err = (int)nread;
        tls_sock_update(t);
    } else {
        t->in_len += (uint32_t)nread;
    }
    tls_deliver(t);
}

int sl_tls_feed(sl_tls_t *t, const char *p, size_t n) {
    if (!n) return 0;
    if (!t->in) {
        if (!(t->in = sl_block_get(t->pump->blocks))) return UV_ENOMEM;
        t->in_len = t->in_pos = 0;
    }
    if (n > SL_BLOCK_SIZE - t->in_len) return UV_ENOBUFS;
    memcpy(t->in + t->in_len, p, n);
    t->in_len += (uint32_t)n;
    return 0;
}

int sl_tls_read_start(sl_tls_t *t, uv_alloc_cb alloc_cb, uv_read_cb read_cb) {
    if (t->detached) return UV_EINVAL;
    t->ualloc = alloc_cb;
    t->uread = read_cb;
    t->user_reading = 1;
    if ((t->in && t->in_pos < t->in_len) || SSL_has_pending(t->ssl) || t->sock_eof || t->sock_err ||
        t->failed)
        pump_add(t);
    tls_sock_update(t);
    return 0;
}

void sl_tls_read_stop(sl_tls_t *t) {
    t->user_reading = 0;
    pump_unlink(t);
    tls_sock_update(t);
}

/* ---- write side ---- */

static void tls_on_write(uv_write_t *wr, int status);

/* Writes t->fill: 1 when the socket took it all (or nothing was due), 0 when a write is in
 * flight, <0 on error. */
static int tls_flush(sl_tls_t *t) {
    if (t->werr) return t->werr;
    if (t->writing) return 0;
    if (!t->fill.len) {
        tbuf_release(t, &t->fill);
        return 1;
    }
    uv_buf_t b = uv_buf_init(t->fill.p, (unsigned)t->fill.len);
    int n = uv_try_write(t->s, &b, 1);
    if (n == UV_EAGAIN) n = 0;
    if (n < 0) return t->werr = n;
    if ((size_t)n == t->fill.len) {
        tbuf_release(t, &t->fill);
        return 1;
    }
    tbuf_t tmp = t->flight;
    t->flight = t->fill;
    t->fill = tmp;
    t->fill.len = 0;
    b = uv_buf_init(t->flight.p + n, (unsigned)(t->flight.len - (size_t)n));
    int rc = uv_write(&t->wreq, t->s, &b, 1, tls_on_write);
    if (rc < 0) return t->werr = rc;
    SL_BUG_ON(t->writing); /* one ciphertext write in flight: `flight` is its buffer */
    t->writing = 1;
    return 0;
}

static void tls_free(sl_tls_t *t) {
    SSL_free(t->ssl);
    tbuf_release(t, &t->fill);
    tbuf_release(t, &t->flight);
    if (t->in) sl_block_put(t->pump->blocks, t->in);
    free(t);
}

static void tls_on_write(uv_write_t *wr, int status) {
    sl_tls_t *t = SL_CONTAINER_OF(wr, sl_tls_t, wreq);
    SL_BUG_ON(!t->writing);
    t->writing = 0;
    t->flight.len = 0;
    tbuf_release(t, &t->flight);
    if (t->detached) {
        if (!t->busy) tls_free(t);
        return;
    }
    int rc = status < 0 ? (t->werr = status) : tls_flush(t);
    if (rc != 0 && t->sd_req) { /* everything before the close_notify is out: shut the socket */
        uv_shutdown_t *req = t->sd_req;
        t->sd_req = NULL;
        int src = rc < 0 ? rc : uv_shutdown(req, t->s, t->sd_cb);
        if (src < 0) t->sd_cb(req, src);
    }
    if (rc == 0 || !t->ucb) return;
    uv_write_cb cb = t->ucb;
    uv_write_t *uwr = t->uwr;
    t->ucb = NULL;
    t->uwr = NULL;
    uwr->handle = t->s;
    cb(uwr, rc < 0 ? rc : 0);
}

/* Small pieces are gathered so that a response head and a short body go out as one record. */
#define TLS_GATHER 16384

int sl_tls_write(sl_tls_t *t, uv_write_t *wr, const uv_buf_t *bufs, unsigned n, uv_write_cb cb) {
    if (t->detached || t->failed) return UV_EPROTO;
    if (t->werr) return t->werr;
    char stage[TLS_GATHER];
    size_t staged = 0;
    for (unsigned i = 0; i <= n; i++) {
        size_t len = i < n ? bufs[i].len : 0;
        bool last = i == n;
        if (!last && len && staged + len <= sizeof stage) {
            memcpy(stage + staged, bufs[i].base, len);
            staged += len;
            continue;
        }
        size_t w;
        ERR_clear_error();
        if (staged && (SSL_write_ex(t->ssl, stage, staged, &w) != 1 || w != staged)) goto fail;
        staged = 0;
        if (last || !len) continue;
        if (len > sizeof stage / 2) {
            if (SSL_write_ex(t->ssl, bufs[i].base, len, &w) != 1 || w != len) goto fail;
        } else {
            memcpy(stage, bufs[i].base, len);
            staged = len;
        }
    }
    int rc = tls_flush(t);
    if (rc != 0) return rc;
    if (cb) { /* a write without a callback (a few gateway bytes) never replaces one with */
        t->uwr = wr;
        t->ucb = cb;
    }
    return 0;
fail:
    tls_set_error(t, SSL_get_error(t->ssl, 0), "write");
    t->failed = 1;
    return UV_EPROTO;
}

/* Queues close_notify (to be flushed), best effort: a peer then knows the end is not a
 * truncation, and OpenSSL keeps the session resumable (SSL_free marks the session of a
 * connection closed without it not resumable — the one a target's next connection offers).
 * Returns tls_flush's answer. */
static int tls_close_notify(sl_tls_t *t) {
    if (t->established && !t->failed) {
        ERR_clear_error();
        SSL_shutdown(t->ssl);
        ERR_clear_error();
    }
    return tls_flush(t);
}

int sl_tls_shutdown_write(sl_tls_t *t, uv_shutdown_t *req, uv_shutdown_cb cb) {
    if (t->detached) return UV_EINVAL;
    int rc = tls_close_notify(t);
    if (rc < 0) return rc;
    if (rc == 1) return uv_shutdown(req, t->s, cb);
    t->sd_req = req;
    t->sd_cb = cb;
    return 0;
}

int sl_tls_handshake(sl_tls_t *t, void (*done)(sl_tls_t *t, int status)) {
    SL_BUG_ON(t->established || t->detached || t->hs_done); /* one handshake per session */
    t->hs_done = done;
    ERR_clear_error();
    int rc = SSL_do_handshake(t->ssl);
    int e = SSL_get_error(t->ssl, rc);
    if (tls_flush(t) < 0 || (rc != 1 && e != SSL_ERROR_WANT_READ)) {
        tls_set_error(t, e, "handshake");
        t->failed = 1;
        t->hs_done = NULL;
        return UV_EPROTO;
    }
    if (rc == 1) { /* cannot happen for a client before the server spoke; kept for safety */
        SL_BUG_ON(t->established || t->detached);
        t->established = 1;
        pump_add(t);
    }
    tls_sock_update(t);
    return 0;
}

void sl_tls_on_established(sl_tls_t *t, void (*cb)(sl_tls_t *t)) { t->on_est = cb; }

void sl_tls_close(sl_tls_t *t) {
    if (t->detached) return;
    tls_close_notify(t);
    pump_unlink(t);
    if (t->sock_reading) uv_read_stop(t->s);
    t->sock_reading = 0;
    t->detached = 1;
    t->s->data = t->owner;
    if (!t->writing && !t->busy) tls_free(t);
}

void sl_tls_skip_close_notify(sl_tls_t *t) { t->failed = 1; }

bool sl_tls_established(const sl_tls_t *t) { return t->established; }
bool sl_tls_session_reused(const sl_tls_t *t) { return SSL_session_reused(t->ssl) == 1; }
bool sl_tls_alpn_h2(const sl_tls_t *t) {
    const unsigned char *p = NULL;
    unsigned n = 0;
    SSL_get0_alpn_selected(t->ssl, &p, &n);
    return n == 2 && memcmp(p, "h2", 2) == 0;
}
const char *sl_tls_error(const sl_tls_t *t) { return t->err; }

/* A request line starts with a method token; a TLS record with a content type byte
 * (0x14-0x18) and SSLv2 with the high bit. OpenSSL names only GET, POST, HEAD and PUT
 * ("http request"); any upper-case token followed by a space is plain HTTP here, as
 * nginx takes anything that is not a handshake for it. */
bool sl_tls_plain_http(const sl_tls_t *t) {
    if (t->client || t->established || t->head_len == 0) return false;
    for (uint8_t i = 0; i < t->head_len; i++) {
        char ch = t->head[i];
        if (ch == ' ') return i > 0;
        if (ch < 'A' || ch > 'Z') return false;
    }
    return true;
}
const char *sl_tls_servername(const sl_tls_t *t) {
    return SSL_get_servername(t->ssl, TLSEXT_NAMETYPE_host_name);
}
void *sl_tls_owner(const sl_tls_t *t) { return t->owner; }

/* ---- the client's certificate ---- */

struct sl_tls_peer_s {
    X509 *x;
    long verify;
    char *text; /**< the fields as text, made on the first describe */
    sl_client_cert_t info;
};

sl_tls_peer_t *sl_tls_peer_take(sl_tls_t *t) {
    X509 *x = SSL_get1_peer_certificate(t->ssl);
    if (!x) return NULL;
    sl_tls_peer_t *p = calloc(1, sizeof *p);
    if (!p) {
        X509_free(x);
        return NULL;
    }
    p->x = x;
    p->verify = SSL_get_verify_result(t->ssl);
    return p;
}

void sl_tls_peer_free(sl_tls_peer_t *p) {
    if (!p) return;
    X509_free(p->x);
    free(p->text);
    free(p);
}

static int64_t asn1_unix(const ASN1_TIME *a) {
    struct tm tm;
    return a && ASN1_TIME_to_tm(a, &tm) == 1 ? (int64_t)timegm(&tm) : 0;
}

/* The SANs a plugin can match on (DNS, URI, email), "KIND:value" each, one per line. A
 * value holding a NUL or a line break is left out: printed, it would read as another name
 * (the NUL-in-certificate trick: "good.example\0.evil.example" signed for evil.example). */
static void sans_print(BIO *b, X509 *x) {
    GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
        const char *kind = g->type == GEN_DNS ? "DNS" : g->type == GEN_URI ? "URI"
                                                : g->type == GEN_EMAIL   ? "email"
                                                                         : NULL;
        if (!kind) continue;
        const ASN1_IA5STRING *s = g->d.ia5;
        const unsigned char *v = ASN1_STRING_get0_data(s);
        size_t n = (size_t)ASN1_STRING_length(s);
        if (memchr(v, 0, n) || memchr(v, '\n', n) || memchr(v, '\r', n)) continue;
        BIO_printf(b, "%s%s:%.*s", BIO_pending(b) ? "\n" : "", kind, (int)n, (const char *)v);
    }
    GENERAL_NAMES_free(gens);
}

/* The fields, each printed into its own memory BIO, then copied into one buffer. */
static int peer_text(sl_tls_peer_t *p) {
    enum { SUBJ, ISS, SER, FP, SANS, NF };
    BIO *b[NF] = {0};
    int rc = SL_ERROR;
    for (int i = 0; i < NF; i++)
        if (!(b[i] = BIO_new(BIO_s_mem()))) goto done;
    X509_NAME_print_ex(b[SUBJ], X509_get_subject_name(p->x), 0, XN_FLAG_RFC2253);
    X509_NAME_print_ex(b[ISS], X509_get_issuer_name(p->x), 0, XN_FLAG_RFC2253);
    BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(p->x), NULL);
    char *hex = bn ? BN_bn2hex(bn) : NULL;
    if (hex) BIO_puts(b[SER], hex);
    OPENSSL_free(hex);
    BN_free(bn);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (X509_digest(p->x, EVP_sha256(), md, &mdlen) == 1)
        for (unsigned i = 0; i < mdlen; i++) BIO_printf(b[FP], "%02x", md[i]);
    sans_print(b[SANS], p->x);
    char *data[NF];
    long len[NF], total = 0;
    for (int i = 0; i < NF; i++) total += len[i] = BIO_get_mem_data(b[i], &data[i]);
    if (!(p->text = malloc((size_t)total + 1))) goto done;
    const char *at[NF];
    char *w = p->text;
    for (int i = 0; i < NF; i++) {
        if (len[i]) memcpy(w, data[i], (size_t)len[i]);
        at[i] = w;
        w += len[i];
    }
    sl_client_cert_t *c = &p->info;
    c->subject = at[SUBJ], c->subject_len = (size_t)len[SUBJ];
    c->issuer = at[ISS], c->issuer_len = (size_t)len[ISS];
    c->serial = at[SER], c->serial_len = (size_t)len[SER];
    c->fingerprint = at[FP], c->fingerprint_len = (size_t)len[FP];
    c->sans = at[SANS], c->sans_len = (size_t)len[SANS];
    c->not_before = asn1_unix(X509_get0_notBefore(p->x));
    c->not_after = asn1_unix(X509_get0_notAfter(p->x));
    c->verify = (int32_t)p->verify;
    c->verify_error = p->verify == X509_V_OK ? "" : X509_verify_cert_error_string(p->verify);
    c->verify_error_len = strlen(c->verify_error);
    rc = SL_OK;
done:
    for (int i = 0; i < NF; i++) BIO_free(b[i]);
    return rc;
}

int sl_tls_peer_describe(sl_tls_peer_t *p, sl_client_cert_t *out) {
    if (!p->text && peer_text(p) != SL_OK) return SL_ERROR;
    *out = p->info;
    return SL_OK;
}
