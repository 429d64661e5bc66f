/* grpc_probe.c — a gRPC health check over nghttp2's client session (grpc_probe.h).
 *
 * The wire format is small enough to write by hand: HealthCheckRequest is field 1 (string
 * service), HealthCheckResponse field 1 (enum status: 0 UNKNOWN, 1 SERVING, 2 NOT_SERVING,
 * 3 SERVICE_UNKNOWN), each message behind gRPC's 5-byte prefix (a flag byte, a 32-bit
 * big-endian length). nghttp2 does the HTTP/2 framing and HPACK, as it does for clients.
 */
#include "upstream/grpc_probe.h"

#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

/* The prefix and a service name of up to 200 bytes (config limit) with its key and length. */
#define PROBE_REQ_MAX (5 + 3 + 200)
/* A HealthCheckResponse is a few bytes; more than this of message is not one. */
#define PROBE_RESP_MAX 64

struct sl_grpc_probe_s {
    nghttp2_session *ss;
    int32_t sid;
    char req[PROBE_REQ_MAX];
    size_t req_len, req_off;
    char authority[128];
    int http_status;
    int grpc_status;  /* -1: none seen */
    unsigned char msg[PROBE_RESP_MAX];
    size_t msg_len;
    uint8_t closed, too_long, got_bytes;
    char why[96];
};

static ssize_t req_read(nghttp2_session *ss, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *ud) {
    (void)ss, (void)sid, (void)src;
    sl_grpc_probe_t *p = ud;
    size_t n = SL_MIN(len, p->req_len - p->req_off);
    memcpy(buf, p->req + p->req_off, n);
    p->req_off += n;
    if (p->req_off == p->req_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
    (void)ss, (void)flags;
    sl_grpc_probe_t *p = ud;
    if (f->hd.stream_id != p->sid) return 0;
    if (nlen == 7 && memcmp(name, ":status", 7) == 0 && vlen == 3)
        p->http_status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
    else if (nlen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        int c = 0;
        for (size_t i = 0; i < vlen && i < 3; i++) c = c * 10 + (value[i] - '0');
        p->grpc_status = vlen && vlen <= 2 ? c : 99;
    }
    return 0;
}

static int on_data(nghttp2_session *ss, uint8_t flags, int32_t sid, const uint8_t *data, size_t len, void *ud) {
    (void)ss, (void)flags;
    sl_grpc_probe_t *p = ud;
    if (sid != p->sid) return 0;
    if (p->msg_len + len > sizeof p->msg) {
        p->too_long = 1;
        return 0;
    }
    memcpy(p->msg + p->msg_len, data, len);
    p->msg_len += len;
    return 0;
}

static int on_close(nghttp2_session *ss, int32_t sid, uint32_t code, void *ud) {
    (void)ss, (void)code;
    sl_grpc_probe_t *p = ud;
    if (sid == p->sid) p->closed = 1;
    return 0;
}

sl_grpc_probe_t *sl_grpc_probe_new(const char *authority, bool tls, const char *service) {
    sl_grpc_probe_t *p = calloc(1, sizeof(*p));
    nghttp2_session_callbacks *cb = NULL;
    if (!p || nghttp2_session_callbacks_new(&cb) != 0) goto fail;
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    int rc = nghttp2_session_client_new(&p->ss, cb, p);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0) goto fail;
    p->grpc_status = -1;
    snprintf(p->authority, sizeof p->authority, "%s", authority);
    /* HealthCheckRequest { string service = 1; }: absent when "" (proto3 default). */
    size_t sl = service ? strlen(service) : 0;
    if (sl > 200) sl = 200;
    size_t ml = sl ? 2 + (sl > 127) + sl : 0;
    char *m = p->req;
    m[0] = 0;
    m[1] = (char)(ml >> 24), m[2] = (char)(ml >> 16), m[3] = (char)(ml >> 8), m[4] = (char)ml;
    size_t o = 5;
    if (sl) {
        m[o++] = 0x0a;
        if (sl > 127) {
            m[o++] = (char)(0x80 | (sl & 0x7f));
            m[o++] = (char)(sl >> 7);
        } else {
            m[o++] = (char)sl;
        }
        memcpy(m + o, service, sl);
        o += sl;
    }
    p->req_len = o;
    const char *scheme = tls ? "https" : "http";
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv nva[] = {NV(":method", "POST"),
                        NV(":scheme", scheme),
                        NV(":path", "/grpc.health.v1.Health/Check"),
                        NV(":authority", p->authority),
                        NV("content-type", "application/grpc"),
                        NV("te", "trailers"),
                        NV("user-agent", "sluice-health")};
#undef NV
    nghttp2_data_provider prd = {.source = {.ptr = p}, .read_callback = req_read};
    if (nghttp2_submit_settings(p->ss, NGHTTP2_FLAG_NONE, NULL, 0) != 0) goto fail;
    p->sid = nghttp2_submit_request(p->ss, NULL, nva, SL_ARRAY_LEN(nva), &prd, NULL);
    if (p->sid < 0) goto fail;
    return p;
fail:
    sl_grpc_probe_free(p);
    return NULL;
}

/* A protobuf varint at m[*i..n): false when it runs past the end or past 64 bits. */
static bool varint(const unsigned char *m, size_t n, size_t *i, uint64_t *v) {
    *v = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (*i >= n) return false;
        unsigned char b = m[(*i)++];
        *v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* HealthCheckResponse's status (field 1, varint) out of one framed message; -1 if it is
 * not one (compressed, a length that disagrees, a field cut short). */
static int serving_status(const unsigned char *m, size_t n) {
    if (n < 5 || m[0] != 0) return -1;
    size_t len = ((size_t)m[1] << 24) | ((size_t)m[2] << 16) | ((size_t)m[3] << 8) | m[4];
    if (len != n - 5) return -1;
    int status = 0; /* proto3: an absent field is 0, UNKNOWN */
    for (size_t i = 5; i < n;) {
        uint64_t key, v;
        if (!varint(m, n, &i, &key)) return -1;
        switch (key & 7) {
        case 0:
            if (!varint(m, n, &i, &v)) return -1;
            if (key >> 3 == 1) status = v > 100 ? 100 : (int)v;
            break;
        case 2:
            if (!varint(m, n, &i, &v) || v > n - i) return -1;
            i += v;
            break;
        case 1:
        case 5:
            if ((key & 7) == 1 ? n - i < 8 : n - i < 4) return -1;
            i += (key & 7) == 1 ? 8 : 4;
            break;
        default: return -1;
        }
    }
    return status;
}

static int verdict(sl_grpc_probe_t *p, const char **why) {
    static const char *const names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
    if (p->http_status != 200) {
        snprintf(p->why, sizeof p->why, p->http_status ? "http status %d" : "no response head", p->http_status);
    } else if (p->grpc_status != 0) {
        snprintf(p->why, sizeof p->why, p->grpc_status < 0 ? "no grpc-status" : "grpc-status %d", p->grpc_status);
    } else {
        int st = p->too_long ? -1 : serving_status(p->msg, p->msg_len);
        if (st == 1) return SL_OK;
        if (st < 0)
            snprintf(p->why, sizeof p->why, "not a HealthCheckResponse");
        else
            snprintf(p->why, sizeof p->why, "%s (%d)", st < 4 ? names[st] : "status", st);
    }
    *why = p->why;
    return SL_ERROR;
}

int sl_grpc_probe_feed(sl_grpc_probe_t *p, const char *data, size_t len, const char **why) {
    /* An HTTP/2 server starts with a SETTINGS frame; an HTTP/1 one answers the preface as a
     * bad request. Said plainly, rather than as nghttp2's frame-size error (or a timeout). */
    if (!p->got_bytes && len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        *why = "an HTTP/1 answer: not an HTTP/2 (gRPC) server";
        return SL_ERROR;
    }
    p->got_bytes |= len > 0;
    ssize_t rc = nghttp2_session_mem_recv(p->ss, (const uint8_t *)data, len);
    if (rc < 0) {
        *why = nghttp2_strerror((int)rc);
        return SL_ERROR;
    }
    if (p->closed) return verdict(p, why);
    if (!nghttp2_session_want_read(p->ss)) {
        *why = "connection ended (GOAWAY)";
        return SL_ERROR;
    }
    return SL_EAGAIN;
}

long sl_grpc_probe_take(sl_grpc_probe_t *p, char **buf) {
    char *out = NULL;
    size_t n = 0;
    *buf = NULL;
    for (;;) {
        const uint8_t *d;
        ssize_t k = nghttp2_session_mem_send(p->ss, &d);
        if (k < 0) {
            free(out);
            return SL_ERROR;
        }
        if (k == 0) break;
        char *no = realloc(out, n + (size_t)k);
        if (!no) {
            free(out);
            return SL_ERROR;
        }
        out = no;
        memcpy(out + n, d, (size_t)k);
        n += (size_t)k;
    }
    *buf = out;
    return (long)n;
}

void sl_grpc_probe_free(sl_grpc_probe_t *p) {
    if (!p) return;
    if (p->ss) nghttp2_session_del(p->ss);
    free(p);
}
