/* grpc_status.c — gRPC status codes (grpc_status.h). */
#include "proto/grpc_status.h"

#include <string.h>

bool sl_grpc_is_ctype(sl_str_t ct) {
    static const char pre[] = "application/grpc";
    size_t n = sizeof pre - 1;
    if (ct.len < n) return false;
    for (size_t i = 0; i < n; i++)
        if (sl_lower(ct.p[i]) != pre[i]) return false;
    /* "application/grpcfoo" is another type; '+', '-', ';' or the end continue this one. */
    return ct.len == n || ct.p[n] == '+' || ct.p[n] == '-' || ct.p[n] == ';' || ct.p[n] == ' ';
}

int sl_grpc_code_of_http(int status) {
    switch (status) {
    case 400: return SL_GRPC_INTERNAL;
    case 401: return SL_GRPC_UNAUTHENTICATED;
    case 403: return SL_GRPC_PERMISSION_DENIED;
    case 404: return SL_GRPC_UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504: return SL_GRPC_UNAVAILABLE;
    default: return SL_GRPC_UNKNOWN;
    }
}

int sl_grpc_code_parse(sl_str_t v) {
    if (v.len == 0 || v.len > 2) return -1;
    int c = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.p[i] < '0' || v.p[i] > '9') return -1;
        c = c * 10 + (v.p[i] - '0');
    }
    return c < SL_GRPC_CODES ? c : -1;
}

const char *sl_grpc_code_name(int code) {
    static const char *const names[SL_GRPC_CODES] = {
        "OK",           "CANCELLED",        "UNKNOWN",         "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
        "NOT_FOUND",    "ALREADY_EXISTS",   "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION", "ABORTED",   "OUT_OF_RANGE",    "UNIMPLEMENTED",    "INTERNAL",
        "UNAVAILABLE",  "DATA_LOSS",        "UNAUTHENTICATED"};
    return code >= 0 && code < SL_GRPC_CODES ? names[code] : "";
}

size_t sl_grpc_message_encode(sl_str_t msg, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < msg.len; i++) {
        unsigned char c = (unsigned char)msg.p[i];
        if (c >= 0x20 && c <= 0x7e && c != '%') {
            if (o + 1 > cap) break;
            out[o++] = (char)c;
        } else {
            if (o + 3 > cap) break;
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    return o;
}
