/* common.c — small helpers for output buffers and clocks. */
#include "common.h"

#include <time.h>

bool sl_wbuf_u64(sl_wbuf_t *b, uint64_t v) {
    char tmp[24];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return sl_wbuf_put(b, tmp + i, sizeof(tmp) - i);
}

bool sl_wbuf_hex(sl_wbuf_t *b, uint64_t v) {
    static const char digits[] = "0123456789abcdef";
    char tmp[20];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = digits[v & 15];
        v >>= 4;
    } while (v);
    return sl_wbuf_put(b, tmp + i, sizeof(tmp) - i);
}

bool sl_wbuf_json_str(sl_wbuf_t *b, sl_str_t s) {
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.p[i];
        char esc[6];
        size_t n = 0;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, n = 2;
        } else if (c == '\n') {
            esc[0] = '\\', esc[1] = 'n', n = 2;
        } else if (c == '\r') {
            esc[0] = '\\', esc[1] = 'r', n = 2;
        } else if (c == '\t') {
            esc[0] = '\\', esc[1] = 't', n = 2;
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4], esc[5] = hex[c & 15], n = 6;
        }
        if (n) {
            if (!sl_wbuf_put(b, esc, n)) return false;
        } else if (!sl_wbuf_put(b, &s.p[i], 1)) {
            return false;
        }
    }
    return true;
}

uint64_t sl_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t sl_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
