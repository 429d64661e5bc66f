/* config.h — the YAML configuration, parsed and validated into one immutable tree.
 *
 * A config build reads one YAML file (or an embedded text), checks every key
 * against the contract in the design and produces an sl_config_t. Every error is
 * reported as "FILE:LINE:COL: message" (1-based line and column) and a build
 * with any error produces no config at all. Unknown keys are errors, so a
 * misspelled optional key can never silently disable a feature.
 *
 * The parser is one file per section under core/config/ (config/parse.h lists them).
 *
 * Ownership: the config and everything it points to belong to the config; one
 * sl_config_free() releases it all. A config is never mutated after the build,
 * so worker threads may read it without locks.
 */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

enum { SL_PROTO_HTTP = 1, SL_PROTO_TCP = 2 };

#include "config/tls_ctx.h"        /* the `tls:` sections and their contexts */
#include "config/upstream_conf.h"  /* balancer kinds, breaker, health and retry conf */
#include "proto/proxy_protocol.h"  /* sl_cidr_t */
#include "proto/sni.h"             /* sl_sni_name_t, the sni_routes lookup table */

/** The longest admin bearer token (`admin.token_env`) accepted, in bytes. */
#define SL_ADMIN_TOKEN_MAX 512

/** A parsed "host:port" or "[v6]:port"; port 0 asks the kernel for a free one. */
typedef struct {
    struct sockaddr_storage ss;
    socklen_t len;
    char *text; /**< as written in the config, owned */
} sl_addr_t;

enum { SL_SPLICE_AUTO = 0, SL_SPLICE_OFF = 1 };
enum { SL_PROXY_NONE = 0, SL_PROXY_V1 = 1, SL_PROXY_V2 = 2 };

/** One entry of a tcp listener's `sni_routes`. */
typedef struct {
    char **names; size_t nnames;  /**< lower-cased, as written ("a.example.com", "*.example.org") */
    int upstream;                 /**< index into upstreams */
    char *upstream_name;
    int line, col, upstream_line, upstream_col;
} sl_sni_route_conf_t;

typedef struct {
    char *name;
    sl_addr_t listen;
    int protocol;                /**< SL_PROTO_HTTP or SL_PROTO_TCP */
    int upstream;                /**< tcp: index into upstreams (the default with sni_routes,
                                      optional there: -1 when absent); -1 for http */
    int splice;                  /**< tcp: SL_SPLICE_AUTO (default) or SL_SPLICE_OFF (read/write copy) */
    int proxy_send;              /**< tcp: SL_PROXY_* header sent to the upstream first */
    sl_cidr_t *proxy_from;       /**< accept_proxy_protocol.from: peers whose PROXY header is
                                      read (proxy_protocol.h's sl_pp_trusted) */
    size_t nproxy_from;
    bool accept_proxy;           /**< accept_proxy_protocol present: a PROXY header is expected */
    sl_cidr_t *trusted_proxies;  /**< http: peers whose X-Forwarded-Proto/-Host/-Port are kept */
    size_t ntrusted_proxies;
    uint64_t max_body;           /**< bytes; 0 = unlimited */
    uint32_t max_header_size;    /**< whole request head, default 32 KiB -> 431 */
    uint32_t max_request_line;   /**< default 8 KiB -> 414 */
    uint64_t header_timeout_ms;  /**< total deadline for a request head, default 10s */
    uint64_t idle_timeout_ms;    /**< http: keep-alive idle, default 60s; tcp: session idle, default 300s */
    uint64_t connect_timeout_ms; /**< tcp: the upstream's timeouts.connect (per session with
                                      sni_routes: the chosen upstream's) */
    sl_sni_route_conf_t *sni_routes; size_t nsni_routes; /**< tcp: TLS passthrough by SNI */
    sl_sni_name_t *sni_names;    /**< exact names sorted by (length, bytes), then wildcards
                                      longest first: sni.h's lookup table */
    size_t nsni_exact, nsni_wild;
    struct sl_plugin_conf_s *plugins; size_t nplugins; /**< tcp: the preread chain (the global
                                      chain is HTTP's only) */
    sl_tls_listener_conf_t *tls; /**< http: TLS termination (`tls:`), else NULL */
    bool http2;                  /**< http: HTTP/2 accepted (ALPN h2, or the preface with prior
                                      knowledge on the same port); `http2: false` turns it off */
    uint32_t http2_max_streams;  /**< http2.max_concurrent_streams, default 100 */
    int line, col;
    int upstream_line, upstream_col; /**< where `upstream:` was written (resolved after upstreams) */
    char *upstream_name;
} sl_listener_conf_t;

/** Where a target slot's address comes from: written as an IP, a DNS name's answer, or a
 *  backend's registration (`registry:`). */
enum { SL_TARGET_STATIC = 0, SL_TARGET_DNS, SL_TARGET_REGISTERED };

/** Addresses one DNS name of an upstream may have at once (slots it reserves); an answer
 *  with more uses its first ones. */
#define SL_DNS_SLOTS 16
/** Size of a slot's address text: the longest "[v6]:port" and its NUL. */
#define SL_TARGET_TEXT_MAX 64

/**
 * A target slot. Static slots are what `address: IP:PORT` says. Dynamic slots (a DNS
 * name's, the registry's) start empty; the main thread fills one (addr, weight, text) while
 * `up` is 0 and then release-stores `up` = 1, and empties it by storing 0 (upstream/
 * upstreams.c, sl_upgen_fill). Workers read addr, weight and text only of a slot they saw
 * up (acquire), which is refilled with another address only after a long quiet time.
 */
typedef struct {
    sl_addr_t addr;  /**< dynamic slots: addr.text points at `text` */
    uint32_t weight; /**< default 1 */
    sl_tls_target_conf_t *tls; /**< TLS to this target (`tls:`), else NULL; a name's slots share
                                    the first one's */
    uint8_t kind;    /**< SL_TARGET_* */
    bool tls_borrowed; /**< tls belongs to another slot (freed with that one) */
    int32_t name;    /**< SL_TARGET_DNS: index into the upstream's names */
    _Atomic uint8_t up; /**< 1: holds an address and may be picked (static slots: always) */
    uint64_t vacated_ms; /**< main thread: when it was last emptied */
    char text[SL_TARGET_TEXT_MAX]; /**< a dynamic slot's address ("" before its first) */
} sl_target_conf_t;

/** One `address: NAME:PORT` entry of an upstream: resolved at run time into its slots. */
typedef struct {
    char *host;      /**< the name, lower-cased */
    char *entry;     /**< "name:port" as written (after lower-casing) */
    uint16_t port;
    uint32_t weight; /**< each address gets the entry's weight */
    size_t first;    /**< its slots: targets[first .. first + SL_DNS_SLOTS) */
    int line, col;
} sl_dns_name_conf_t;

/** `resolver:` (DNS names of targets). */
typedef struct {
    char *nameservers;   /**< "IP:PORT,IP:PORT" (c-ares's csv form); NULL: /etc/resolv.conf */
    uint64_t timeout_ms; /**< per try, default 1s */
    uint32_t attempts;   /**< default 2 */
    uint64_t min_ttl_ms, max_ttl_ms; /**< re-resolution clamps; default 1s, 300s */
    bool ipv6;           /**< AAAA records too; default false */
} sl_resolver_conf_t;

typedef struct {
    char *name;
    int balancer;                /**< SL_LB_* */
    int hash_on;                 /**< SL_HASH_* (consistent-hash) */
    char *hash_name;             /**< header or cookie name for SL_HASH_HEADER / _COOKIE */
    double hash_epsilon;         /**< bounded-load slack: cap = ceil((1+e) * mean); INFINITY
                                      (unset, the default): no cap */
    sl_health_conf_t health;
    sl_breaker_conf_t breaker;   /**< enabled when `circuit_breaker:` is present */
    sl_retry_conf_t retry;
    sl_target_conf_t *targets;   /**< slots: static ones, then each name's SL_DNS_SLOTS, then
                                      the registry's */
    size_t ntargets;             /**< slots in all; at least 1 */
    sl_dns_name_conf_t *names; size_t nnames; /**< `address: NAME:PORT` entries */
    bool registry;               /**< `registry.enabled`: backends register on the admin API */
    uint64_t registry_max_ttl_ms;/**< `registry.max_ttl`, default 60s */
    uint32_t registry_slots;     /**< `registry.max_targets`, default 32 */
    size_t registry_first;       /**< the registry's slots: targets[registry_first ..] */
    uint32_t keepalive_max_idle; /**< per worker, per target; default 64; 0 disables reuse */
    uint64_t keepalive_idle_timeout_ms; /**< default 60s */
    uint64_t connect_timeout_ms; /**< default 2s */
    uint64_t read_timeout_ms;    /**< default 30s */
    uint64_t write_timeout_ms;   /**< default 30s */
    uint8_t protocol;            /**< SL_UP_HTTP1 (default), SL_UP_H2, SL_UP_H2C */
    bool tcp_only;               /**< only tcp listeners send to it (no route names it, no
                                      lua_routes): /status says protocol tcp */
    int line, col;
} sl_upstream_conf_t;

/** One arm of a route's split: entries with a match are tried first, in order; the
 *  rest share the traffic by weight. */
typedef struct {
    int upstream;                /**< index into upstreams */
    uint32_t weight;             /**< 0 for an entry that only matches */
    char *header, *header_value; /**< match: header NAME equals VALUE */
    char *cookie, *cookie_value; /**< match: cookie NAME equals VALUE */
    int line, col;
} sl_split_conf_t;

typedef struct {
    char *name;   /**< header name as written */
    char *value;  /**< exact value to match */
} sl_kv_t;

typedef struct sl_plugin_conf_s {
    char *name;
    char *config_json; /**< the plugin's `config:` mapping as JSON text ("{}" when absent) */
    char *positions_json; /**< {"a.b":[kline,kcol,vline,vcol],...}: where each key and value stands */
    int line, col;        /**< the plugin entry */
    int config_line, config_col; /**< the `config:` mapping (the entry when absent) */
    int name_line, name_col;     /**< the `name:` value */
} sl_plugin_conf_t;

typedef struct {
    char *name;
    char **hosts;   size_t nhosts;   /**< exact "a.com" or wildcard "*.a.com", lower-cased */
    char **paths;   size_t npaths;   /**< prefixes, each starting with '/' */
    char **methods; size_t nmethods; /**< upper-case */
    sl_kv_t *headers; size_t nheaders;
    int upstream;                    /**< index into upstreams, or -1 */
    sl_split_conf_t *split; size_t nsplit; /**< instead of upstream: canary/match split */
    bool strip_prefix;
    char **upgrade; size_t nupgrade; /**< Upgrade protocols forwarded (lower-case; "*": any but h2c);
                                          none: Upgrade is stripped and the request proxied as plain HTTP */
    int lua_file;                    /**< index into lua_route_files for a lua_routes route, else -1 */
    int lua_index;                   /**< its 1-based position in that file's list */
    bool match_fn;                   /**< its match is a Lua function (called by the router) */
    sl_plugin_conf_t *plugins; size_t nplugins;
    int line, col;
} sl_route_conf_t;

/** A consumer (the auth plugins' credentials). credentials_json holds the `credentials:`
 *  mapping as JSON: {"key-auth":{"key":"..."},"basic-auth":{"username":..,"password_hash":..}}. */
typedef struct {
    char *name;
    char *credentials_json;
    char **groups; size_t ngroups; /**< `groups:` names (the acl plugin's), NULL entries after errors */
    int line, col;
} sl_consumer_conf_t;

/** `telemetry:`: OpenTelemetry traces exported over OTLP/HTTP JSON (ctx/telemetry.c).
 *  enabled is false without the section. */
typedef struct {
    bool enabled;
    char *host;          /**< the endpoint's host (an IP or a name), owned */
    uint16_t port;       /**< default 4318 */
    char *path;          /**< default /v1/traces, owned */
    sl_kv_t *headers; size_t nheaders; /**< `otlp.headers`, sent with every export */
    uint64_t timeout_ms; /**< `otlp.timeout`: one export's whole exchange; default 2s */
    char *service_name;  /**< default "sluice" */
    double sample_ratio; /**< traces started here: the share recorded; default 0.01 */
    bool plugin_spans;   /**< an INTERNAL span per plugin phase call of sampled requests */
} sl_telemetry_conf_t;
/** `config_source: { etcd: {...} }`: the fleet's routes, upstreams, consumers, global chain
 *  and plugin code come from etcd (server/etcd.c); the local file keeps the process keys. */
typedef struct {
    bool enabled;
    char **endpoints; size_t nendpoints; /**< "http://host:port", tried in turn */
    char *prefix;                /**< default "/sluice", no trailing '/' */
    uint64_t timeout_ms;         /**< one etcd request, default 2s */
    char *snapshot;              /**< resolved path, or NULL: no snapshot */
    char *username, *password;   /**< read from username_env/password_env at load, or NULL */
} sl_source_conf_t;

typedef struct {
    char *path;                  /**< file name used in errors */
    sl_source_conf_t source;     /**< config_source (enabled false when absent) */
    int workers;                 /**< resolved: "auto" becomes the CPU count */
    /** `worker_cpus`: worker i runs on CPU worker_cpus[i % n] (`auto`: the process's CPUs in
     *  order); the other threads keep off the CPUs workers use while any are left. n 0:
     *  no pinning (the default). */
    int *worker_cpus;
    size_t nworker_cpus;
    bool watch;
    uint64_t shutdown_timeout_ms;/**< default 30s */
    bool admin_enabled;          /**< true unless `admin: { listen: off }` */
    sl_addr_t admin_listen;      /**< default 127.0.0.1:9090 */
    /** `admin.token_env`: the bearer token every admin endpoint but /health and /ready
     *  requires, read from that environment variable when the config is loaded (never
     *  written in the file); admin_token_len 0 means no token (loopback only). */
    char admin_token[SL_ADMIN_TOKEN_MAX + 1];
    size_t admin_token_len;
    /** `admin.debug_token_env`: a request whose X-Sluice-Debug header holds this token gets
     *  X-Sluice-Debug-Output (read like admin_token); debug_token_len 0: debugging off. */
    char debug_token[SL_ADMIN_TOKEN_MAX + 1];
    size_t debug_token_len;
    sl_telemetry_conf_t telemetry; /**< `telemetry:` */
    bool plugin_timing;          /**< `metrics.plugin_timing` (default true):
                                      sluice_plugin_duration_seconds is measured */
    char **plugin_paths; size_t nplugin_paths;   /**< default ["plugins"] */
    char **plugin_search; size_t nplugin_search; /**< resolved: plugin_paths (relative to the
                                                      config file) then the built-in folder */
    char **lua_routes; size_t nlua_routes;       /**< as written */
    char **lua_route_files; size_t nlua_route_files; /**< resolved like plugin_paths */
    /** [nplugin_files]: the text the check read from each (NULL: the path was only
     *  resolved, not read), handed to every worker VM (sluice.files.read), and its length */
    char **plugin_file_texts;
    size_t *plugin_file_lens;
    char **plugin_files; size_t nplugin_files; /**< the files plugins read at load (sluice.files,
                                                    `*_file` keys), resolved: part of the
                                                    generation's content and watched */
    int lua_routes_line, lua_routes_col;
    sl_plugin_conf_t *plugins; size_t nplugins;  /**< the global chain */
    sl_listener_conf_t *listeners; size_t nlisteners;
    sl_upstream_conf_t *upstreams; size_t nupstreams;
    sl_route_conf_t *routes; size_t nroutes;
    struct sl_router_s *router;  /**< the routes compiled (config/router.h): built once the
                                      whole config (lua_routes too) has validated, owned */
    sl_consumer_conf_t *consumers; size_t nconsumers;
    char *consumer_header;       /**< default "X-Consumer": set upstream from ctx.consumer, never from the client */
    bool redis_enabled;          /**< `redis:` present */
    sl_addr_t redis_address;     /**< default 127.0.0.1:6379 */
    uint64_t redis_timeout_ms;   /**< default 50ms */
    char *redis_username;        /**< `username_env`'s value (ACL user), or NULL */
    char *redis_password;        /**< `password_env`'s value, or NULL (no AUTH) */
    int redis_database;          /**< SELECTed after connecting when > 0 */
    uint64_t cache_size;         /**< `cache.size`: the proxy-cache store's bytes (default 64 MiB) */
    sl_resolver_conf_t resolver; /**< `resolver:` */
    /** `user:` / `group:`: started as root, sluice binds its sockets then switches to
     *  run_uid/run_gid (setgroups to run_gid alone, setgid, setuid) before serving.
     *  run_user NULL: no switch. run_gid is the user's primary group unless `group:`. */
    char *run_user;
    uid_t run_uid;
    gid_t run_gid;
    /** Where the keys a reload cannot change were written (their value; 1:1 when absent), for
     *  the FILE:LINE:COL of a reload that changes them. */
    int workers_line, workers_col, admin_line, admin_col, user_line, user_col;
} sl_config_t;

/** Whether phase dispatchers mark each plugin's end (sl_ffi_plugin_timed): for the duration
 *  metric, request debugging or plugin spans. */
static inline bool sl_config_timed(const sl_config_t *c) {
    return c->plugin_timing || c->debug_token_len || (c->telemetry.enabled && c->telemetry.plugin_spans);
}

/** The name of the plugin at position `pos` of route rc's chain (the global plugins, then
 *  the route's); "?" past its end. */
static inline const char *sl_config_chain_name(const sl_config_t *c, const sl_route_conf_t *rc, size_t pos) {
    if (pos < c->nplugins) return c->plugins[pos].name;
    pos -= c->nplugins;
    return rc && pos < rc->nplugins ? rc->plugins[pos].name : "?";
}

/** Collected error lines, each "FILE:LINE:COL: message", owned by the list. */
typedef struct {
    char **lines;
    size_t n, cap;
} sl_errors_t;

/**
 * Builds a config from YAML text. `path` names the source in error lines.
 * Returns 0 and sets *out, or -1 with at least one line appended to errs.
 */
int sl_config_parse(const char *path, const char *text, size_t len, sl_config_t **out,
                    sl_errors_t *errs);

/**
 * sl_config_parse, but a build with errors still sets *out to the tree as far as it
 * parsed (NULL after a YAML syntax error or out of memory), so the plugin uses that did
 * parse can be validated too: a YAML-level error does not hide the plugin errors behind
 * it. Returns -1 whenever an error was found; the caller frees *out either way.
 */
int sl_config_parse_partial(const char *path, const char *text, size_t len, sl_config_t **out,
                            sl_errors_t *errs);

/**
 * sl_config_parse for a text composed of a local file with `config_source` and the
 * source's routes, upstreams, consumers and global chain appended (server/etcd.c): those
 * sections are then allowed next to `config_source`.
 */
int sl_config_parse_composed(const char *path, const char *text, size_t len, sl_config_t **out,
                             sl_errors_t *errs);

/** Reads `path` and calls sl_config_parse. An unreadable file is one error line. */
int sl_config_load(const char *path, sl_config_t **out, sl_errors_t *errs);

/** Reads a whole config file: 0 and a malloc'd *text (NUL-terminated, *len bytes), or -1
 *  with one error line. */
int sl_config_read(const char *path, char **text, size_t *len, sl_errors_t *errs);

/** Sorts error lines "FILE:LINE:COL: msg" into file order: by file (in order of first
 *  appearance), then line, then column; lines at the same place keep their order. */
void sl_errors_sort(sl_errors_t *errs);

void sl_config_free(sl_config_t *cfg);

void sl_errors_add(sl_errors_t *errs, const char *path, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void sl_errors_free(sl_errors_t *errs);

/**
 * The upstream (index into the config's upstreams) that serves `name` (lower-case,
 * name[0..nlen); nlen 0 for "no SNI") on tcp listener `l`: sl_sni_lookup over its
 * sni_routes table, falling back to the listener's `upstream` (-1 when it has none).
 * *result is SL_SNI_ROUTE, SL_SNI_DEFAULT or SL_SNI_NO_ROUTE. Any thread.
 */
int sl_sni_route(const sl_listener_conf_t *l, const char *name, size_t nlen, int *result);

/** `protocol:` as written: "http1", "h2" or "h2c" (SL_UP_*). Static; any thread. */
const char *sl_upstream_protocol_name(int protocol);

/**
 * A route's `upgrade:` toward an HTTP/2 upstream does nothing (proxy.c never forwards an
 * Upgrade there): the config error for it, after "route 'NAME': ", with the upstream's
 * name and protocol. Shared by YAML and Lua routes.
 */
#define SL_UPGRADE_H2_FMT                                                                          \
    "'upgrade' does nothing for upstream '%s' (protocol: %s): an Upgrade is never forwarded "     \
    "to an HTTP/2 upstream (WebSockets need protocol: http1)"

/** "250ms", "10s", "5m", "1h" -> milliseconds. Returns 0, or -1 on a malformed value. */
int sl_parse_duration_ms(const char *s, uint64_t *out);

/** "512", "64KiB", "10MiB", "1GiB" -> bytes. Returns 0, or -1 on a malformed value. */
int sl_parse_size(const char *s, uint64_t *out);

/** "127.0.0.1:8080", "[::1]:0", "localhost:80" (resolved numerically only). 0 or -1. */
int sl_parse_addr(const char *s, sl_addr_t *out);

#endif
