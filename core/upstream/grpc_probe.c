/* grpc_probe.c — a gRPC health check over the core's HTTP/2 client driver (grpc_probe.h,
 * client/h2_client.h).
 *
 * The wire format is small enough to write by hand: HealthCheckRequest is field 1 (string
 * service), HealthCheckResponse field 1 (enum status: 0 UNKNOWN, 1 SERVING, 2 NOT_SERVING,
 * 3 SERVICE_UNKNOWN), each message behind gRPC's 5-byte prefix (a flag byte, a 32-bit
 * big-endian length). The driver does the HTTP/2 session (framing, HPACK, the response's
 * status, fields and trailers); this file keeps the message and the verdict.
 */
#include "upstream/grpc_probe.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "client/h2_client.h"

/* The prefix and a service name of up to 200 bytes (config limit) with its key and length. */
#define PROBE_REQ_MAX (5 + 3 + 200)
/* A HealthCheckResponse is a few bytes; more than this of message is not one. */
#define PROBE_RESP_MAX 64

struct sl_grpc_probe_s {
    sl_h2c_t h2;
    sl_h2c_stream_t st; /* the one call */
    char req[PROBE_REQ_MAX];
    size_t req_len, req_off;
    char authority[128];
    int http_status;
    int grpc_status;  /* -1: none seen */
    unsigned char msg[PROBE_RESP_MAX];
    size_t msg_len;
    uint8_t too_long, got_bytes;
    char *out;        /* what the session has to send, until take hands it over */
    size_t out_len;
    char why[96];
};

/* The session's output collects in a malloc'ed buffer that take hands over. */
static long op_send(void *ud, const uint8_t *data, size_t len) {
    sl_grpc_probe_t *p = ud;
    char *no = realloc(p->out, p->out_len + len);
    if (!no) return SL_ERROR;
    memcpy(no + p->out_len, data, len);
    p->out = no;
    p->out_len += len;
    return (long)len;
}

static long op_read_body(void *ud, sl_h2c_stream_t *st, uint8_t *buf, size_t len, bool *eof) {
    sl_grpc_probe_t *p = ud;
    (void)st;
    size_t n = SL_MIN(len, p->req_len - p->req_off);
    memcpy(buf, p->req + p->req_off, n);
    p->req_off += n;
    *eof = p->req_off == p->req_len;
    return (long)n;
}

static int op_status(void *ud, sl_h2c_stream_t *st, int status) {
    sl_grpc_probe_t *p = ud;
    (void)st;
    p->http_status = status;
    return 0;
}

/* grpc-status, in the head (trailers-only) or the trailers. */
static int op_field(void *ud, sl_h2c_stream_t *st, const uint8_t *name, size_t nlen, const uint8_t *value,
                    size_t vlen) {
    sl_grpc_probe_t *p = ud;
    (void)st;
    if (nlen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        int c = 0;
        for (size_t i = 0; i < vlen && i < 3; i++) c = c * 10 + (value[i] - '0');
        p->grpc_status = vlen && vlen <= 2 ? c : 99;
    }
    return 0;
}

static int op_data(void *ud, sl_h2c_stream_t *st, const uint8_t *data, size_t len) {
    sl_grpc_probe_t *p = ud;
    (void)st;
    if (p->msg_len + len > sizeof p->msg) {
        p->too_long = 1;
        return 0;
    }
    memcpy(p->msg + p->msg_len, data, len);
    p->msg_len += len;
    return 0;
}

static const sl_h2c_ops_t probe_ops = {
    .send = op_send,
    .on_status = op_status,
    .on_field = op_field,
    .on_trailer = op_field,
    .on_data = op_data,
    .read_body = op_read_body,
};

sl_grpc_probe_t *sl_grpc_probe_new(const char *authority, bool tls, const char *service) {
    sl_grpc_probe_t *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    if (sl_h2c_init(&p->h2, &(sl_h2c_opts_t){0}, &probe_ops, p) != SL_OK) {
        free(p);
        return NULL;
    }
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
    if (sl_h2c_submit(&p->h2, &p->st, nva, SL_ARRAY_LEN(nva), true) < 0) {
        sl_grpc_probe_free(p);
        return NULL;
    }
    return p;
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
    if (sl_h2c_feed(&p->h2, data, len, why) != SL_OK) return SL_ERROR;
    if (p->st.closed) return verdict(p, why);
    if (!sl_h2c_want_read(&p->h2)) {
        *why = "connection ended (GOAWAY)";
        return SL_ERROR;
    }
    return SL_EAGAIN;
}

long sl_grpc_probe_take(sl_grpc_probe_t *p, char **buf) {
    const char *why;
    *buf = NULL;
    if (sl_h2c_send(&p->h2, &why) != SL_OK) return SL_ERROR;
    long n = (long)p->out_len;
    *buf = p->out;
    p->out = NULL;
    p->out_len = 0;
    return n;
}

void sl_grpc_probe_free(sl_grpc_probe_t *p) {
    if (!p) return;
    sl_h2c_fini(&p->h2);
    free(p->out);
    free(p);
}
