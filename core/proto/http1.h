/* http1.h — HTTP/1.1 message heads and bodies: llhttp plus sluice's own validator.
 *
 * A message is read in two steps. sl_h1_head() first finds the end of the head
 * in the bytes received so far and checks them byte by byte (bare LF or CR,
 * obs-fold, NUL and other controls, the request-line and header-block limits),
 * then reads the fields of a head in the common shapes itself (see fast_head in
 * http1.c) and hands any other head to llhttp, and checks the parsed fields on
 * top (Content-Length and Transfer-Encoding rules, Host, version).
 * Debian's llhttp 8.1.0 accepts several smuggling vectors even in strict mode,
 * so nothing here trusts it alone. sl_h1_body() then frames the body: a
 * Content-Length count, llhttp's chunked decoder, or everything until EOF.
 *
 * The head's fields are slices into the caller's buffer: the caller keeps
 * those bytes in place for as long as it reads the head.
 */
#ifndef SL_HTTP1_H
#define SL_HTTP1_H

#include <llhttp.h>

#include "base/common.h"

/** Header fields a head holds at most (one more: 431, or 502 from an upstream). */
#define SL_H1_MAX_HEADERS 100
/** Fields held in the head itself; the rest go to its spill (below). */
#define SL_H1_INLINE_HEADERS 16

enum {
    SL_BODY_NONE = 0, /**< no body (or a reply to HEAD, 1xx, 204, 304) */
    SL_BODY_LENGTH,   /**< Content-Length bytes */
    SL_BODY_CHUNKED,  /**< chunked transfer coding */
    SL_BODY_EOF,      /**< a response delimited by the close of the connection */
};

/** Headers the proxy treats specially, as bits in sl_h1_head_t.flags. */
enum {
    SL_H1_CONN_CLOSE = 1 << 0,
    SL_H1_CONN_KEEPALIVE = 1 << 1,
    SL_H1_CONN_UPGRADE = 1 << 2,
    SL_H1_EXPECT_CONTINUE = 1 << 3,
    SL_H1_ABSOLUTE_FORM = 1 << 4,
    SL_H1_HAS_CL = 1 << 5,
};

typedef struct {
    sl_str_t name, value;
    uint8_t hop; /**< 1 when hop-by-hop: never forwarded */
} sl_h1_header_t;

/**
 * Room for all SL_H1_MAX_HEADERS fields of a head whose inline room is full, or NULL. The
 * room is the caller's and must last as long as the head is read (a request's arena).
 */
typedef sl_h1_header_t *(*sl_h1_spill_fn)(void *ud);

/**
 * A parsed head. Its fields are `headers[0..nheaders)`: the first SL_H1_INLINE_HEADERS in
 * the head itself, and once there are more, all of them in the room `spill` gave (a request
 * with 17 fields or more is rare; 100 inline fields made a request object 8 KiB larger).
 * `headers` may point into the head itself: a copy of the struct reads the original's
 * fields, so heads are passed by pointer, never copied. `spill` and `spill_ud` are the
 * owner's to set, once; nothing here clears them. Without a spill a head holds at most
 * SL_H1_INLINE_HEADERS fields.
 */
typedef struct {
    sl_str_t method, target, path, query; /**< request; path/query split from target */
    sl_str_t authority;                   /**< absolute-form target's host[:port] */
    int status;                           /**< response */
    sl_str_t reason;                      /**< response */
    uint8_t major, minor;
    uint8_t method_id; /**< llhttp_method_t */
    uint8_t body_kind; /**< SL_BODY_* */
    uint32_t flags;    /**< SL_H1_* */
    uint64_t content_length;
    sl_str_t host; /**< Host header value as sent; empty when absent */
    uint16_t nheaders;
    uint16_t cap;             /**< room at `headers` */
    sl_h1_header_t *headers;  /**< `inline_headers`, or the spill's room */
    sl_h1_spill_fn spill;
    void *spill_ud;
    sl_h1_header_t inline_headers[SL_H1_INLINE_HEADERS];
} sl_h1_head_t;

typedef struct sl_h1_limits_s {
    uint32_t max_header_size;  /**< the whole head; over it: 431 (502 for a response) */
    uint32_t max_request_line; /**< over it: 414 */
} sl_h1_limits_t;

/** Receives body bytes; returns 0, or nonzero to stop with an error. */
typedef int (*sl_h1_data_cb)(void *ud, const char *p, size_t n);

typedef struct {
    llhttp_t ll;
    const sl_h1_limits_t *limits;
    sl_h1_head_t *head;    /**< being filled by sl_h1_head(); borrowed */
    sl_h1_data_cb on_data; /**< body bytes */
    void *ud;
    uint64_t remaining;  /**< SL_BODY_LENGTH: bytes still to come */
    uint32_t spans_left; /**< chunked: stop after this many data spans (caller's iov room) */
    uint8_t type;        /**< HTTP_REQUEST or HTTP_RESPONSE */
    uint8_t body_kind;   /**< of the message whose head was parsed last */
    uint8_t last_was_value;
    uint8_t req_was_head; /**< response to a HEAD request: no body */
    uint8_t done;         /**< message complete (set by the chunked decoder) */
    uint16_t status_err;  /**< status a callback chose for its error */
    uint8_t cstate;       /**< chunked decoder state */
    uint8_t cdigits;      /**< hex digits of the current chunk size */
    uint16_t cline;       /**< bytes of the current size line, or of the trailer section */
    uint8_t llhttp_only;  /**< tests: read every head with llhttp, never the fast path */
} sl_h1_t;

/** Prepares a parser. `type` is HTTP_REQUEST or HTTP_RESPONSE. Limits are borrowed. */
void sl_h1_init(sl_h1_t *h, int type, const sl_h1_limits_t *limits);

/**
 * Parses one message head from p[0..n).
 * SL_OK: *used = bytes of the head (including leading empty lines), `head` filled.
 * SL_EAGAIN: no complete head yet and no limit broken; *used = 0.
 * SL_ERROR: *status is 400, 414, 431, 501 or 505-like rejection (see the design);
 *           for responses any failure is reported as 502.
 */
int sl_h1_head(sl_h1_t *h, const char *p, size_t n, sl_h1_head_t *head, size_t *used, int *status);

/** Empties a head before it is filled (sl_h1_head() does it; HTTP/2 fills heads itself):
 *  every field but the spill is reset. */
void sl_h1_head_clear(sl_h1_head_t *head);

/** The next field at the end of the head (nheaders grows by one), moved to the spill when
 *  the inline room is full; NULL at SL_H1_MAX_HEADERS or when there is no spill room. */
sl_h1_header_t *sl_h1_push(sl_h1_head_t *head);

/** A spill for a caller's array of SL_H1_MAX_HEADERS fields (ud): HTTP clients, tests. */
sl_h1_header_t *sl_h1_spill_array(void *ud);

/**
 * Frames body bytes from p[0..n) and passes the payload to on_data.
 * SL_OK: all n bytes consumed (*used = n) and more body is expected, or the
 *        chunked decoder stopped early because spans_left reached 0 (*used < n).
 * SL_DONE: the message ended after *used bytes; the rest belongs to the next message.
 * SL_ERROR: malformed body (a bad chunk size, for instance) or on_data refused.
 */
int sl_h1_body(sl_h1_t *h, const char *p, size_t n, size_t *used);

/** Takes the next element of a comma-separated list (trimmed; empty ones skipped) off
 *  *list into *tok; false when none is left. */
bool sl_h1_next_token(sl_str_t *list, sl_str_t *tok);

/** The checks a request head passes before it is rebuilt for an upstream, for the heads
 *  HTTP/2 fills itself (h2.c), so both protocols are held to one strictness:
 *  sl_h1_valid_host: a Host (or :authority) of host characters only (no userinfo, comma,
 *  slash); sl_h1_valid_target: a target without a fragment, each '%' a pct-encoded octet;
 *  sl_h1_hop_header: a hop-by-hop name (Connection, Keep-Alive, TE, Trailer, Upgrade,
 *  Transfer-Encoding, HTTP2-Settings, Content-Length, Proxy-*), never forwarded. */
bool sl_h1_valid_host(sl_str_t host);
bool sl_h1_valid_target(sl_str_t target);
bool sl_h1_hop_header(sl_str_t name);

/** Finds a header by lower-case name; NULL when absent. */
const sl_h1_header_t *sl_h1_find(const sl_h1_head_t *head, const char *lower, size_t n);

/** Reason phrase for a status this gateway answers itself. */
sl_str_t sl_h1_reason(int status);

#endif
