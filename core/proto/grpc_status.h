/* grpc_status.h — gRPC status codes as the gateway speaks them: recognising a gRPC
 * request by its content type, mapping an HTTP status the gateway made to the gRPC code a
 * client gets (grpc/doc/http-grpc-status-mapping.md), reading a grpc-status value and
 * percent-encoding a grpc-message (grpc/doc/PROTOCOL-HTTP2.md). Pure functions: no libuv,
 * no config, no allocation.
 */
#ifndef SL_GRPC_STATUS_H
#define SL_GRPC_STATUS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/common.h"

/** gRPC's status codes are 0..16 (grpc/doc/statuscodes.md). */
#define SL_GRPC_CODES 17
enum {
    SL_GRPC_OK = 0,
    SL_GRPC_UNKNOWN = 2,
    SL_GRPC_DEADLINE_EXCEEDED = 4,
    SL_GRPC_PERMISSION_DENIED = 7,
    SL_GRPC_RESOURCE_EXHAUSTED = 8,
    SL_GRPC_UNIMPLEMENTED = 12,
    SL_GRPC_INTERNAL = 13,
    SL_GRPC_UNAVAILABLE = 14,
    SL_GRPC_UNAUTHENTICATED = 16,
};

/** True for `application/grpc` and its variants (`+proto`, `-web`, `-web-text`, with or
 *  without parameters), compared without case. */
bool sl_grpc_is_ctype(sl_str_t ctype);
/** The gRPC code for an HTTP status: 400 INTERNAL, 401 UNAUTHENTICATED, 403
 *  PERMISSION_DENIED, 404 UNIMPLEMENTED, 429/502/503/504 UNAVAILABLE, any other UNKNOWN. */
int sl_grpc_code_of_http(int status);
/** A grpc-status value as a code 0..16; -1 when it is not one. */
int sl_grpc_code_parse(sl_str_t v);
/** "OK", "CANCELLED", ... for a code 0..16 (static strings); "" for anything else. */
const char *sl_grpc_code_name(int code);
/** Percent-encodes msg as a grpc-message value into out (at most cap bytes): bytes outside
 *  0x20..0x7e and '%' become %XX. An escape is never cut: the output stops before one that
 *  does not fit. Returns the bytes written. */
size_t sl_grpc_message_encode(sl_str_t msg, char *out, size_t cap);

#endif
