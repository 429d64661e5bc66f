/* grpc_timeout.c — the grpc-timeout header (grpc_timeout.h). */
#include "proto/grpc_timeout.h"

bool sl_grpc_timeout_ms(sl_str_t value, uint64_t *ms) {
    if (value.len < 2 || value.len > 9) return false;
    uint64_t v = 0;
    for (size_t i = 0; i + 1 < value.len; i++) {
        char d = value.p[i];
        if (d < '0' || d > '9') return false;
        v = v * 10 + (uint64_t)(d - '0');
    }
    switch (value.p[value.len - 1]) {
    case 'H': *ms = v * 3600000; return true;
    case 'M': *ms = v * 60000; return true;
    case 'S': *ms = v * 1000; return true;
    case 'm': *ms = v; return true;
    case 'u': *ms = (v + 999) / 1000; return true;
    case 'n': *ms = (v + 999999) / 1000000; return true;
    default: return false;
    }
}
