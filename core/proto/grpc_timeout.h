/* grpc_timeout.h — the grpc-timeout request header (grpc/doc/PROTOCOL-HTTP2.md: at most 8
 * digits, then H, M, S, m, u or n). A pure parser: no libuv, no config, no allocation. */
#ifndef SL_GRPC_TIMEOUT_H
#define SL_GRPC_TIMEOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/common.h"

/** The timeout in ms (sub-millisecond ones round up: a deadline is never earlier than
 *  asked); false when the value is malformed (the header is then ignored). */
bool sl_grpc_timeout_ms(sl_str_t value, uint64_t *ms);

#endif
