/* resolver.h — asynchronous DNS on a libuv loop (c-ares).
 *
 * One channel per resolver; its sockets are watched by uv_poll handles and its retries by
 * one timer, all on the loop given at creation, so a lookup never blocks that loop.
 * /etc/hosts is read first, then the nameservers (the resolver conf's, else
 * /etc/resolv.conf's). Every call, callback included, is on the loop's thread.
 */
#ifndef SL_RESOLVER_H
#define SL_RESOLVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "config/config.h"

typedef struct sl_resolver_s sl_resolver_t;

/** How a lookup ended (the `result` label of sluice_dns_resolutions_total). */
enum { SL_DNS_OK = 0, SL_DNS_NXDOMAIN, SL_DNS_NODATA, SL_DNS_TIMEOUT, SL_DNS_ERROR, SL_DNS_RESULTS };
/** The label text of each SL_DNS_*. */
extern const char *const sl_dns_result_names[SL_DNS_RESULTS];

/** Most addresses one answer carries to its callback. */
#define SL_DNS_MAX_ADDRS 64

/**
 * A lookup's end: result SL_DNS_OK with addrs[0..n) (n >= 1, the port set, borrowed for
 * the call) and the lowest TTL of the records in seconds (0 for /etc/hosts), or another
 * SL_DNS_* with `why` (static text). Not called for lookups a sl_resolver_free cancelled.
 */
typedef void (*sl_resolve_cb)(void *ud, int result, const char *why, const struct sockaddr_storage *addrs,
                              size_t n, uint32_t ttl_s);

/** A resolver on `loop` configured by `conf` (nameservers, timeout, attempts). SL_OK, or
 *  SL_ERROR with *err. */
int sl_resolver_new(uv_loop_t *loop, const sl_resolver_conf_t *conf, sl_resolver_t **out, const char **err);
/** Looks `host` up (A records; AAAA too when `ipv6`), answering through cb. SL_OK or
 *  SL_ERROR (out of memory: cb is not called). */
int sl_resolver_query(sl_resolver_t *r, const char *host, uint16_t port, bool ipv6, sl_resolve_cb cb, void *ud);
/** Cancels pending lookups (their callbacks are not called) and frees the resolver once
 *  its handles are closed. NULL is fine. */
void sl_resolver_free(sl_resolver_t *r);

/** Resolves each name once on a loop of its own and waits (`sluice check`): SL_OK with
 *  the addresses, or the SL_DNS_* result. Blocking: never on a serving thread. */
int sl_resolve_blocking(const sl_resolver_conf_t *conf, const char *host, uint16_t port, size_t *naddrs,
                        const char **why);

#endif
