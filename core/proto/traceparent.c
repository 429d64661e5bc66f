/* traceparent.c — W3C Trace Context (https://www.w3.org/TR/trace-context/), level 1. */
#include "proto/traceparent.h"

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1; /* upper case is invalid in a traceparent */
}

static bool unhex(const char *p, uint8_t *out, size_t n) {
    uint8_t any = 0;
    for (size_t i = 0; i < n; i++) {
        int a = hexval(p[2 * i]), b = hexval(p[2 * i + 1]);
        if (a < 0 || b < 0) return false;
        out[i] = (uint8_t)(a << 4 | b);
        any |= out[i];
    }
    return any != 0; /* all-zero ids are invalid */
}

bool sl_traceparent_parse(sl_str_t v, sl_traceparent_t *out) {
    if (v.len < SL_TRACEPARENT_LEN) return false;
    const char *p = v.p;
    uint8_t ver[1];
    int a = hexval(p[0]), b = hexval(p[1]);
    if (a < 0 || b < 0) return false;
    ver[0] = (uint8_t)(a << 4 | b);
    if (ver[0] == 0xff) return false;
    /* version 00 is exactly 55 bytes; a later version may carry more after a '-' */
    if (ver[0] == 0 ? v.len != SL_TRACEPARENT_LEN : v.len > SL_TRACEPARENT_LEN && p[SL_TRACEPARENT_LEN] != '-')
        return false;
    if (p[2] != '-' || p[35] != '-' || p[52] != '-') return false;
    if (!unhex(p + 3, out->trace_id, 16) || !unhex(p + 36, out->span_id, 8)) return false;
    a = hexval(p[53]), b = hexval(p[54]);
    if (a < 0 || b < 0) return false;
    out->flags = (uint8_t)(a << 4 | b);
    return true;
}

void sl_hex_lower(char *out, const uint8_t *p, size_t n) {
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[p[i] >> 4];
        out[2 * i + 1] = hx[p[i] & 15];
    }
}

void sl_traceparent_format(char out[SL_TRACEPARENT_LEN], const uint8_t trace_id[16], const uint8_t span_id[8],
                           uint8_t flags) {
    out[0] = '0', out[1] = '0', out[2] = '-';
    sl_hex_lower(out + 3, trace_id, 16);
    out[35] = '-';
    sl_hex_lower(out + 36, span_id, 8);
    out[52] = '-';
    sl_hex_lower(out + 53, &flags, 1);
}
