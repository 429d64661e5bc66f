/* proxy_protocol.h — the PROXY protocol (HAProxy's proxy-protocol.txt), versions 1 and 2:
 * the header a TCP proxy puts before the first byte of a connection to tell the next hop
 * whom it serves.
 *
 * Pure functions over byte ranges: no I/O, no allocation, any thread. The TCP engine
 * (tcp_proxy.c) sends a header to upstreams (`proxy_protocol: { send: v1|v2 }`) and reads
 * one from trusted peers (`accept_proxy_protocol: { from: [...] }`); the HTTP connection
 * (conn.c) reads one before a connection's first request. Only the TCP forms are
 * understood (v1 TCP4/TCP6/UNKNOWN, v2 PROXY/LOCAL over AF_INET/AF_INET6 STREAM); a v2
 * header of another family (UNIX, DGRAM) or with the UNSPEC family counts as "no
 * address": the receiver uses the connection's own endpoints, as the spec says.
 */
#ifndef SL_PROXY_PROTOCOL_H
#define SL_PROXY_PROTOCOL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/** The longest v1 header (the spec's 107 bytes, CRLF included). */
#define SL_PP_V1_MAX 107
/** The longest header sl_pp_encode writes (a v1 TCP6 line; v2 TCP6 is 52 bytes). */
#define SL_PP_ENCODE_MAX SL_PP_V1_MAX
/** The longest header sl_pp_parse accepts: a v2 header's TLVs beyond this are refused
 *  (senders add a few dozen bytes: unique id, authority, CRC32C, AWS/Azure ids). */
#define SL_PP_PARSE_MAX 4096

/** An IPv4 or IPv6 socket address: what a PROXY header carries, and a connection's ends. */
typedef union {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
} sl_sockaddr_t;

/** What a parsed header says. */
typedef struct {
    bool has_addr;      /**< false: v1 UNKNOWN, v2 LOCAL, or a family other than TCP over
                             IPv4/IPv6: use the connection's own addresses */
    int version;        /**< 1 or 2 */
    sl_sockaddr_t src;  /**< the client (when has_addr) */
    sl_sockaddr_t dst;  /**< the address the client connected to (when has_addr) */
} sl_pp_info_t;

/** What the first bytes of a connection are, as far as they go (sl_pp_detect). */
enum { SL_PP_NONE = 0, SL_PP_V1 = 1, SL_PP_V2 = 2 };

/**
 * Does p[0..len) begin with a PROXY signature ("PROXY " or v2's 12-byte signature)?
 * SL_PP_V1 or SL_PP_V2 when it does, SL_PP_NONE when it cannot, SL_EAGAIN when every byte
 * so far is a prefix of a signature (more are needed to tell).
 */
int sl_pp_detect(const uint8_t *p, size_t len);

/**
 * Parses the header at the start of p[0..len). SL_OK with *used (its length, to strip)
 * and *out filled; SL_EAGAIN when the bytes so far are a valid beginning; SL_ERROR with
 * *err (a static string) when they are not a PROXY header or a malformed one.
 */
int sl_pp_parse(const uint8_t *p, size_t len, sl_pp_info_t *out, size_t *used, const char **err);

/**
 * Writes a version 1 or 2 header for a TCP connection from `src` to `dst` (each AF_INET or
 * AF_INET6; when the families differ the IPv4 one is written IPv4-mapped) into `out`,
 * which has room for SL_PP_ENCODE_MAX bytes. Returns the header's length.
 */
size_t sl_pp_encode(int version, const sl_sockaddr_t *src, const sl_sockaddr_t *dst, uint8_t *out);

/** An address block (a trusted PROXY-protocol sender, `accept_proxy_protocol.from`): 16
 *  bytes, IPv4 mapped into ::ffff:0:0/96, and the prefix length over those 128 bits. */
typedef struct {
    uint8_t ip[16];
    uint8_t bits;
} sl_cidr_t;

/** Is `sa` (AF_INET or AF_INET6) inside one of the n blocks? IPv4 peers match IPv4 blocks
 *  and IPv4-mapped IPv6 ones alike. */
bool sl_pp_trusted(const sl_cidr_t *from, size_t n, const struct sockaddr *sa);

#endif
