/* grpc_web.c — the byte work of the grpc-web plugin (plugins/grpc-web.lua through
 * lua/sluice/grpc_web.lua): base64 for application/grpc-web-text bodies, which a LuaJIT
 * loop would do a byte at a time. Pure functions, any thread.
 */
#include <stdint.h>

#include "http/request.h"
#include "sluice.h"

/* The upstream's trailers (an HTTP/2 upstream's, kept in r->trailers by h2_up.c). */
int sl_ffi_grpcweb_trailer_count(sl_req_t *r) { return r->ntrailers; }

int sl_ffi_grpcweb_trailer_at(sl_req_t *r, int i, const char **name, size_t *name_len, const char **value,
                              size_t *value_len) {
    if (i < 0 || i >= r->ntrailers) return SL_DECLINED;
    *name = r->trailers[i].name.p;
    *name_len = r->trailers[i].name.len;
    *value = r->trailers[i].value.p;
    *value_len = r->trailers[i].value.len;
    return SL_OK;
}

void sl_ffi_grpcweb_trailers_drop(sl_req_t *r) {
    if (!r->ntrailers) return;
    sl__req_grpc_passed(r); /* counted now: the client gets them in the body */
    r->ntrailers = 0;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t sl_ffi_grpcweb_b64_encode(const char *in, size_t n, char *out) {
    const unsigned char *s = (const unsigned char *)in;
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        out[o++] = b64[v >> 18];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = b64[(v >> 6) & 63];
        out[o++] = b64[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
        out[o++] = b64[v >> 18];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    return o;
}

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* grpc-web-text clients may send several padded segments back to back (one per message
 * they wrote): padding ends a quantum, and decoding goes on with the next. */
long sl_ffi_grpcweb_b64_decode(const char *in, size_t n, char *out) {
    const unsigned char *s = (const unsigned char *)in;
    size_t o = 0;
    uint32_t acc = 0;
    int have = 0, pad = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') {
            /* "xx==" or "xxx=": the quantum's end; a '=' anywhere else is malformed */
            if (have < 2 || have + pad >= 4) return SL_ERROR;
            pad++;
            if (have + pad == 4) {
                if (have == 2) {
                    out[o++] = (char)(acc >> 4);
                } else {
                    out[o++] = (char)(acc >> 10);
                    out[o++] = (char)(acc >> 2);
                }
                acc = 0;
                have = pad = 0;
            }
            continue;
        }
        int v = b64_value(s[i]);
        if (v < 0 || pad) return SL_ERROR;
        acc = acc << 6 | (uint32_t)v;
        if (++have == 4) {
            out[o++] = (char)(acc >> 16);
            out[o++] = (char)(acc >> 8);
            out[o++] = (char)acc;
            acc = 0;
            have = 0;
        }
    }
    if (pad || have == 1) return SL_ERROR;
    /* an unpadded tail (RFC 4648 allows leaving padding out) */
    if (have == 2) out[o++] = (char)(acc >> 4);
    if (have == 3) {
        out[o++] = (char)(acc >> 10);
        out[o++] = (char)(acc >> 2);
    }
    return (long)o;
}
