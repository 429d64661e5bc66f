/* sni.h — the server name a TLS client asks for (RFC 6066 server_name, host_name), read
 * from the ClientHello at the start of a connection without terminating TLS, and the
 * listener's `sni_routes` choice made from it.
 *
 * Pure functions over byte ranges: no I/O, no allocation, no config types, any thread. The
 * TCP engine (tcp_proxy.c) peeks a `protocol: tcp` listener's first bytes with
 * sl_sni_parse, then asks sl_sni_route (config.h: sl_sni_lookup over the listener's
 * table) which upstream serves the name, and sends the peeked bytes on unchanged: the TLS
 * session is the client's and the upstream's.
 */
#ifndef SL_SNI_H
#define SL_SNI_H

#include <stddef.h>
#include <stdint.h>

/** The most bytes (TLS record headers included) a ClientHello may take: past them the
 *  connection is refused rather than buffered further. Browsers send 0.5-2 KiB; a
 *  post-quantum key share adds about 1.2 KiB. */
#define SL_SNI_MAX_HELLO (16 * 1024)
/** The longest host_name kept (a DNS name is at most 253 characters). */
#define SL_SNI_NAME_MAX 255

/**
 * Reads the ClientHello at the start of p[0..len): one handshake message that may be
 * split over several TLS records, and the records over any number of reads.
 *
 * SL_OK when the whole ClientHello is there: its first host_name, lower-cased, is in
 * name[0..*nlen) (name has room for SL_SNI_NAME_MAX bytes; *nlen is 0 when the hello
 * carries no server_name). SL_EAGAIN when the bytes so far are a valid beginning of one
 * and fewer than SL_SNI_MAX_HELLO. SL_ERROR with *err (a static string) when they are
 * not TLS, not a ClientHello, malformed, or longer than SL_SNI_MAX_HELLO. Bytes after the
 * ClientHello's last record are not looked at.
 */
int sl_sni_parse(const uint8_t *p, size_t len, char *name, size_t *nlen, const char **err);

/**
 * Reads the body of a server_name extension (RFC 6066 3: the ServerNameList) at
 * p[0..len), as a TLS library hands it over: its first host_name, lower-cased, in
 * name[0..*nlen) (room for SL_SNI_NAME_MAX bytes; *nlen 0 when it names no host). SL_OK, or
 * SL_ERROR when it is malformed or the name is not a host name.
 */
int sl_sni_server_name(const uint8_t *p, size_t len, char *name, size_t *nlen);

/** How sl_sni_lookup chose (the `result` label of sluice_tcp_sni_total, with the
 *  failures of the peek itself). */
enum {
    SL_SNI_ROUTE = 0,   /**< a name of sni_routes matched (exact or wildcard) */
    SL_SNI_DEFAULT,     /**< no name matched, or none was sent: the listener's upstream */
    SL_SNI_NO_ROUTE,    /**< no name matched and the listener has no default: closed */
    SL_SNI_NOT_TLS,     /**< the first bytes are no (valid, bounded) ClientHello: closed */
    SL_SNI_TIMEOUT,     /**< no complete ClientHello within header_timeout: closed */
    SL_SNI_RESULTS
};

/** The label text of each SL_SNI_* result. */
extern const char *const sl_sni_result_label[SL_SNI_RESULTS];

/** One name of a lookup table (a tcp listener's `sni_routes`, built by the config). */
typedef struct {
    const char *name;  /**< the exact name, or a wildcard's suffix (".example.org" for
                            "*.example.org"); borrowed from the table's owner */
    uint32_t len;
    int upstream;      /**< what the lookup answers for it (an index into upstreams) */
} sl_sni_name_t;

/**
 * Looks `name` (lower-case, name[0..nlen); nlen 0 for "no SNI") up in a table of names:
 * names[0..nexact) exact, sorted by (length, bytes), then names[nexact..nexact+nwild)
 * wildcard suffixes, longest first. An exact name wins, else the longest wildcard ("*.x.org"
 * matches any name ending in ".x.org"), else `fallback` (-1: none). Returns the upstream
 * found and sets *result to SL_SNI_ROUTE, SL_SNI_DEFAULT or SL_SNI_NO_ROUTE.
 */
int sl_sni_lookup(const sl_sni_name_t *names, size_t nexact, size_t nwild, int fallback,
                  const char *name, size_t nlen, int *result);

#endif
