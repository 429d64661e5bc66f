/* traceparent.h — W3C Trace Context `traceparent` values: parse and format. Pure: no
 * allocation, no config. Shared by the core's tracing (http/trace.c) and the traceparent
 * plugin (through sl_ffi_traceparent_parse). */
#ifndef SL_TRACEPARENT_H
#define SL_TRACEPARENT_H

#include "base/common.h"

/** A traceparent's length: "00-" 32 hex "-" 16 hex "-" 2 hex. */
#define SL_TRACEPARENT_LEN 55

typedef struct {
    uint8_t trace_id[16];
    uint8_t span_id[8]; /**< the parent's span (the caller's) */
    uint8_t flags;      /**< bit 0: sampled */
} sl_traceparent_t;

/** Parses a traceparent header value: version 00 (or a later one, whose first 55 bytes are
 *  read as 00's and followed by '-' or nothing), lower-case hex, ids not all zero. True
 *  when valid (*out filled). */
bool sl_traceparent_parse(sl_str_t v, sl_traceparent_t *out);

/** Writes "00-TRACE-SPAN-FLAGS" (SL_TRACEPARENT_LEN bytes, no NUL) into out. */
void sl_traceparent_format(char out[SL_TRACEPARENT_LEN], const uint8_t trace_id[16], const uint8_t span_id[8],
                           uint8_t flags);

/** Lower-case hex of n bytes into out (2n chars, no NUL). */
void sl_hex_lower(char *out, const uint8_t *p, size_t n);

#endif
