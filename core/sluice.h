/* sluice.h — the C ABI that LuaJIT reaches through FFI. The only header Lua reads.
 *
 * Rules (the style rules): fixed-width integers, opaque handles, plain structs; no
 * unions, bitfields, varargs or callbacks into Lua. Strings go in as pointer +
 * length and come out through out-parameters pointing into gateway memory that
 * stays valid until the current phase call returns. Every integer code that crosses
 * the ABI has a name here (an enum, so the Lua side can declare the same text).
 *
 * Sections, each under a banner: result codes, phases, request, response, upstream and
 * balancer, breaker, http client, redis, limit, shared dict, cache, crypto, client
 * certificates, tcp session, router, log, time and randomness.
 *
 * Each module of lua/sluice/ declares (ffi.cdef) the functions and constants it uses,
 * copied from here; spec/sluice/abi_spec.lua fails when one differs. lua/sluice/base.lua
 * checks SL_ABI_VERSION at load.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

/** Bumped on any change to a signature, struct or code below; both sides must agree. */
#define SL_ABI_VERSION 4

#ifdef __cplusplus
extern "C" {
#endif

/* ======================== result codes
 * Every int-returning call: 0 OK, negative for failure (error text through a
 * `const char **err` pointing at static or gateway-owned strings). Calls that answer a
 * kind (shdict get) or a yes/no (crypto verify) say so next to them. */
enum {
    SL_OK = 0,
    SL_ERROR = -1,   /**< failed; *err says why */
    SL_EAGAIN = -2,  /**< would wait: the caller yields and calls again when resumed */
    SL_DECLINED = -5 /**< not there (no such header, key, ...) */
};

/** The ABI version this core was built with; Lua refuses to load on a mismatch. */
int sl_ffi_abi_version(void);

/* ======================== phases
 * The phase dispatcher (lua/sluice/runtime.lua) is called from C with a phase id and
 * answers with a chain result. lua/sluice/loader.lua's PHASES lists the names in id order. */
enum {
    SL_PHASE_REWRITE = 0,
    SL_PHASE_ACCESS = 1,
    SL_PHASE_HEADER_FILTER = 2,
    SL_PHASE_BODY_FILTER = 3,
    SL_PHASE_LOG = 4,
    SL_PHASE_PREREAD = 5,
    SL_PHASE_BALANCER = 6 /**< picks a target of the request's upstream, before each attempt */
};
/** What a phase (or preread) dispatcher returns first: carry on, a plugin answered (or
 *  closed the session), or a plugin raised (followed by chain position, plugin, text). */
enum { SL_CHAIN_NEXT = 0, SL_CHAIN_DONE = 1, SL_CHAIN_ERROR = 2 };

/* ======================== request */

/** A request being served; valid only during the phase call that received it. */
typedef struct sl_req_s sl_req_t;

/** Request method, path (without query), query (without '?'), and the normalized host
 *  (lower-case, port removed). Worker thread, during a phase call. */
int sl_ffi_req_get_method(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_get_path(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_get_query(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_get_host(sl_req_t *r, const char **p, size_t *len);
/** The path and query as the client sent them, whatever set_path/set_query did since. */
int sl_ffi_req_orig_path(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_orig_query(sl_req_t *r, const char **p, size_t *len);

/** First header named `name` (case-insensitive): 0 and its value, or SL_DECLINED. */
int sl_ffi_req_get_header(sl_req_t *r, const char *name, size_t name_len, const char **p,
                          size_t *len);

/** Number of request headers, and the i-th one (0-based): 0, or SL_DECLINED past the end. */
int sl_ffi_req_header_count(sl_req_t *r);
int sl_ffi_req_header_at(sl_req_t *r, int i, const char **name, size_t *name_len,
                         const char **value, size_t *value_len);

/** Client address as text, request id, name of the matched route. */
int sl_ffi_req_client_ip(sl_req_t *r, const char **p, size_t *len);
/** 1 when the request arrived over TLS (request.get_scheme: "https"), else 0. */
int sl_ffi_req_is_tls(sl_req_t *r);
/** The port the client connected to (the listener's, as X-Forwarded-Port carries it). */
int sl_ffi_req_server_port(sl_req_t *r);
/** 1 when ip[0..len) is one of the request's listener's trusted_proxies, 0 when not,
 *  SL_ERROR when it is not an IP address. */
int sl_ffi_req_trusted_ip(sl_req_t *r, const char *ip, size_t len);
/** The first query argument named name[0..nl) (names compared decoded), its value
 *  form-decoded ('+' a space, %XX a byte) into buf[0..cap) with *len bytes: SL_OK; 1 when
 *  the argument has no '=' (`?flag`); SL_DECLINED when absent; SL_ERROR when the value
 *  needs more than cap bytes (*len says how many). Allocates nothing. */
int sl_ffi_req_get_query_arg(sl_req_t *r, const char *name, size_t nl, char *buf, size_t cap,
                             size_t *len);
/** Walks the query's arguments: the one at *off (0 to start), key then value decoded into
 *  buf (*klen, then *vlen bytes), *off moved past it: SL_OK, or 1 for an argument without
 *  '='; SL_DECLINED at the end; SL_ERROR when key and value need more than cap bytes
 *  (*klen + *vlen; *off unchanged, so the caller can grow buf and call again). */
int sl_ffi_req_query_next(sl_req_t *r, size_t *off, char *buf, size_t cap, size_t *klen,
                          size_t *vlen);
/** The client's address: the peer's (after a PROXY header), or, when the peer is one of the
 *  listener's trusted_proxies, the X-Forwarded-For entry nearest the right that is not a
 *  trusted proxy (client.get_ip). Points into the request; valid during the phase call. */
int sl_ffi_client_get_ip(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_id(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_route(sl_req_t *r, const char **p, size_t *len);
/** Replaces the request id (log lines' request_id): 1..32 visible ASCII characters. */
int sl_ffi_req_set_id(sl_req_t *r, const char *id, size_t len, const char **err);

/** Header edits for the request sent upstream (rewrite/access). Names must be tokens;
 *  framing and hop-by-hop names are refused; values must not hold CR/LF/NUL.
 *  0, or SL_ERROR with *err. Bytes are copied. */
int sl_ffi_req_set_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl,
                          const char **err);
int sl_ffi_req_add_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl,
                          const char **err);
int sl_ffi_req_clear_header(sl_req_t *r, const char *n, size_t nl, const char **err);
/** Replaces the path sent upstream (strip_prefix no longer applies). */
int sl_ffi_req_set_path(sl_req_t *r, const char *p, size_t len, const char **err);
/** Replaces the query sent upstream (without '?'; "" removes it). Rewrite/access only. */
int sl_ffi_req_set_query(sl_req_t *r, const char *q, size_t len, const char **err);
/** The whole body: 0 (*p NULL when empty), SL_EAGAIN (yield, then call again), SL_ERROR. */
int sl_ffi_req_get_body(sl_req_t *r, const char **p, size_t *len, const char **err);
/** Caps the body this request may buffer (get_body) at max bytes instead of 8 MiB; the
 *  listener's max_body still applies; a body already read is left as it is. Rewrite/access;
 *  0 or SL_ERROR with *err. */
int sl_ffi_req_set_body_max(sl_req_t *r, uint64_t max, const char **err);
/** Replaces the body sent upstream by len bytes at p (copied; sent with a Content-Length).
 *  Only after the body was read whole (get_body/read_body), in rewrite/access. */
int sl_ffi_req_set_body(sl_req_t *r, const char *p, size_t len, const char **err);
/** Replaces the client address the request reports from then on (get_client_ip,
 *  client.get_ip, hash_on ip): an IPv4 or IPv6 address as text. X-Forwarded-For still
 *  appends the socket's peer. Rewrite/access; 0 or SL_ERROR with *err. */
int sl_ffi_req_set_client_ip(sl_req_t *r, const char *ip, size_t len, const char **err);

/** The authenticated consumer (ctx.consumer after access): sent upstream in the config's
 *  consumer_header (X-Consumer), which clients can never set themselves. */
int sl_ffi_req_set_consumer(sl_req_t *r, const char *name, size_t len, const char **err);

/** What a finished (or finishing) request did, for access logs. Strings are config-owned. */
typedef struct {
    int status;
    uint64_t bytes_in, bytes_out;
    double duration_ms;
    const char *route, *upstream, *target;
} sl_req_stats_t;
int sl_ffi_req_stats(sl_req_t *r, sl_req_stats_t *st);

/* ======================== response */

/** Answers the request (rewrite/access); the chain stops after the current plugin. */
int sl_ffi_resp_exit(sl_req_t *r, int status, const char *body, size_t len, const char **err);
int sl_ffi_resp_get_status(sl_req_t *r);
/** The status the upstream answered with; 0 when none did (yet): an exit, a cache HIT,
 *  the gateway's own error. */
int sl_ffi_resp_upstream_status(sl_req_t *r);
int sl_ffi_resp_get_header(sl_req_t *r, const char *n, size_t nl, const char **p, size_t *len);
/** The response's fields as plugins see them (the upstream's, not hop-by-hop or cleared,
 *  then added ones), like sl_ffi_req_header_count/_at: SL_DECLINED for a cleared slot. */
int sl_ffi_resp_header_count(sl_req_t *r);
int sl_ffi_resp_header_at(sl_req_t *r, int i, const char **name, size_t *name_len,
                          const char **value, size_t *value_len);
int sl_ffi_resp_set_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl,
                           const char **err);
int sl_ffi_resp_add_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl,
                           const char **err);
int sl_ffi_resp_clear_header(sl_req_t *r, const char *n, size_t nl, const char **err);

/** body_filter: the piece of response body being filtered; *eof 1 on the last call. */
int sl_ffi_body_chunk(sl_req_t *r, const char **p, size_t *len, int *eof);
/** body_filter: what goes to the client instead of the piece (copied). */
int sl_ffi_body_set(sl_req_t *r, const char *p, size_t len, const char **err);

/** The phase dispatcher's mark after the plugin at chain position `pos` returned from the
 *  running phase: its time since the phase began or the previous plugin returned goes to
 *  sluice_plugin_duration_seconds (and a debugged request's output). Called only when the
 *  generation is timed (metrics.plugin_timing or admin.debug_token_env). r NULL: the
 *  request whose phase runs on this thread (the dispatcher passes NULL: no pointer made
 *  in Lua, no allocation even where that code runs interpreted). */
void sl_ffi_plugin_timed(sl_req_t *r, int pos);

/** The traceparent plugin (rewrite): continues the request's W3C traceparent or starts a
 *  trace (sampled at sample_ratio), and sets the one the upstream gets, with a new span of
 *  this hop as parent; the same code as the core's tracing (`telemetry:`), which when on
 *  has done this already (then only its ids are read). Writes the trace id (32 hex) then
 *  the span id (16 hex) into out (48 bytes). SL_OK. */
int sl_ffi_traceparent(sl_req_t *r, double sample_ratio, char *out);

/* ---- compression (sluice.compress, the compression plugin; core/lua/compress.c) ----
 * A streaming gzip or br encoder per response (core/proto/compress.h), owned by the
 * request: freed when it ends, on every path (the body's end, an error, the client gone). */

/** The content codings an encoder makes. */
enum { SL_CODING_GZIP = 1, SL_CODING_BR = 2 };
/** header_filter: starts the response's encoder, SL_CODING_* at `level` (gzip 1-9, br
 *  0-11). A second call replaces the first encoder. SL_OK, or SL_ERROR with *err (static). */
int sl_ffi_compress_begin(sl_req_t *r, int coding, int level, const char **err);
/** body_filter: encodes the next piece of the body (eof 1: the last; the stream is
 *  finished). *out: the encoded bytes to send now (possibly none), owned by the encoder and
 *  valid until the next call. SL_OK, or SL_ERROR with *err (static). */
int sl_ffi_compress_piece(sl_req_t *r, const char *p, size_t len, int eof, const char **out, size_t *out_len,
                          const char **err);
/** header_filter: the response body's length when known before it streams (the
 *  upstream's Content-Length, which plugins do not see as a header, or a plugin's answer's
 *  body), else -1 (chunked, close-delimited, a gateway-made answer). */
int64_t sl_ffi_resp_body_length(sl_req_t *r);

/* ======================== upstream and balancer */

/** Picks the configured upstream `name` for this request (rewrite/access). */
int sl_ffi_upstream_set(sl_req_t *r, const char *name, size_t len, const char **err);
/** A target of the request's upstream, as the balancer phase sees it. */
typedef struct {
    const char *address;
    int weight;
    int healthy;   /**< health checks and passive ejection let it take requests */
    int breaker;   /**< SL_BREAKER_* */
    int in_flight; /**< attempts in flight, all workers */
    int tried;     /**< this request already tried it */
    double ewma_ms;/**< latency EWMA */
} sl_target_info_t;
/** The number of targets of the request's upstream (0 when it has none yet). */
int sl_ffi_balancer_count(sl_req_t *r);
/** Target i (0-based) of the request's upstream. */
int sl_ffi_balancer_target(sl_req_t *r, int i, sl_target_info_t *out);
/** balancer phase: the next attempt goes to the target with this address (when it is
 *  eligible: healthy, breaker not open, not tried; otherwise the balancer picks). */
int sl_ffi_balancer_set_target(sl_req_t *r, const char *addr, size_t len, const char **err);

/* ======================== breaker */

/** A breaker's state (sl_target_info_t.breaker, sl_ffi_breaker_state). */
enum { SL_BREAKER_CLOSED = 0, SL_BREAKER_OPEN = 1, SL_BREAKER_HALF_OPEN = 2 };
/** State of the breaker of (upstream, target address): SL_BREAKER_*;
 *  SL_ERROR with *err when there is no such upstream or target. */
int sl_ffi_breaker_state(sl_req_t *r, const char *up, size_t ul, const char *target, size_t tl, const char **err);

/* ======================== http client (sluice.http) */

/** sluice.http.request (rewrite/access): sends `req` (a whole HTTP/1.1 request Lua built
 *  and validated) to host:port and reads the response within timeout_ms, keeping at
 *  most max_body bytes of body. SL_OK: the caller yields; when resumed it reads the
 *  outcome with sl_ffi_http_result and releases it with sl_ffi_http_done. SL_ERROR:
 *  *err, nothing to yield for. */
int sl_ffi_http_request(sl_req_t *r, const char *host, size_t host_len, int port, const char *req,
                        size_t req_len, int is_head, double timeout_ms, double max_body, int tls, int verify,
                        const char *ca, const char **err);
/** SL_OK with the response, or SL_ERROR with *err (timeout, connect: ..., malformed ...).
 *  Pointers stay valid until sl_ffi_http_done. */
int sl_ffi_http_result(sl_req_t *r, int *status, int *nheaders, const char **body, size_t *body_len,
                       const char **err);
int sl_ffi_http_header_at(sl_req_t *r, int i, const char **name, size_t *name_len, const char **value,
                          size_t *value_len);
void sl_ffi_http_done(sl_req_t *r);

/* ---- mirror (core/http/mirror.c): a copy of the request to another address, on the
 * worker's loop through the same client, its answer dropped; nothing waits for it. */

/** What became of a copy (sluice_mirror_requests_total{result}): SENT handed to the
 *  client (counted as sent once the mirror answered, else failed), FAILED, DROPPED (the
 *  worker's cap of copies in flight was reached), TOO_LARGE (a body over max_body). */
enum { SL_MIRROR_SENT = 0, SL_MIRROR_FAILED = 1, SL_MIRROR_DROPPED = 2, SL_MIRROR_TOO_LARGE = 3 };
/** Sends a copy of the running request (method, target, headers, and the body when it was
 *  read whole) to the first target of upstream `up` (ul > 0) or to `address` (HOST:PORT),
 *  within timeout_ms, unless this worker has max_in_flight copies on their way:
 *  SL_MIRROR_SENT, SL_MIRROR_DROPPED, SL_MIRROR_FAILED, or SL_MIRROR_TOO_LARGE (a body
 *  that was not read whole: nothing sent); SL_ERROR with *err (no such upstream target, a
 *  bad address). Never waits. */
int sl_ffi_mirror_send(sl_req_t *r, const char *up, size_t ul, const char *address, size_t al, int max_in_flight,
                       double timeout_ms, const char **err);
/** Counts an outcome decided in Lua (SL_MIRROR_TOO_LARGE). */
int sl_ffi_mirror_count(int result);

/* ---- http-logger (core/http/http_logger.c): log lines batched to an HTTP collector by
 * the worker's loop, off the request's path. */

/** A worker's queue and sender for one collector and config (opaque). */
typedef struct sl_httplog_s sl_httplog_t;
/** The worker's logger for host:port (an IP or a name), the request head `head` (request
 *  line, Host and other fields, each ending in CRLF, no framing) and bounds, made on first
 *  use and found again by the same arguments: NULL with *err (bad bounds, no memory).
 *  Valid for the worker's life. Any phase of a request. */
sl_httplog_t *sl_ffi_httplog_open(sl_req_t *r, const char *host, size_t hl, int port, const char *head,
                                  size_t head_len, int batch_max, int queue_max, double flush_ms, double timeout_ms,
                                  int retries, const char **err);
/** Queues one line (a JSON value without newlines; copied) on the worker's thread: SL_OK,
 *  or SL_DECLINED when the queue holds queue_max lines (or out of memory): dropped and
 *  counted. Never waits. */
int sl_ffi_httplog_push(sl_httplog_t *lg, const char *line, size_t len);

/* ======================== redis (sluice.redis) */

/** Reply types of sl_ffi_redis_reply. */
enum { SL_REDIS_NIL = 1, SL_REDIS_INTEGER = 2, SL_REDIS_STRING = 3, SL_REDIS_ERROR = 4, SL_REDIS_ARRAY = 5 };
/** sluice.redis (rewrite/access): sends a command on the worker's Redis connection.
 *  SL_OK: the caller yields, then reads the reply with sl_ffi_redis_reply and releases it
 *  with sl_ffi_redis_done. SL_DECLINED: Redis is down (*err), nothing to wait for.
 *  SL_ERROR: misuse (*err). */
int sl_ffi_redis_command(sl_req_t *r, int argc, const char **argv, const size_t *argvlen, const char **err);
/** The reply (i = -1) or its array element i; *n = array length. SL_ERROR with *err for a
 *  timeout or a lost connection. */
int sl_ffi_redis_reply(sl_req_t *r, int i, int *type, long long *integer, const char **str, size_t *len,
                       int *n, const char **err);
void sl_ffi_redis_done(sl_req_t *r);

/* ======================== limit (sluice.limit, core/upstream/limiter.c)
 * Rate limits of the local store (contract in core/upstream/limiter.h), one table shared
 * by all workers. Any thread; nothing kept between calls but the key's state. The key is
 * borrowed for the call (any bytes, any length). */

/** A rate-limit decision, counted in sluice_ratelimit_total{result}. */
enum { SL_RL_ALLOWED = 0, SL_RL_LIMITED = 1, SL_RL_FAILOPEN = 2 };
/** Counts a rate-limit decision on the request's route: SL_RL_*. */
void sl_ffi_ratelimit_count(sl_req_t *r, int result);

/** What a take decided. Times in seconds. */
typedef struct {
    int allowed;        /**< 1: admitted, the cost was taken; 0: refused, nothing taken */
    double remaining;   /**< whole tokens (units) left after this call */
    double reset;       /**< bucket: until it is full again; window: until the window ends */
    double retry_after; /**< until a call of the same cost would be admitted; 0 when allowed */
    double limit;       /**< the most `remaining` can be: burst + 1, or the window's limit */
} sl_limit_result_t;

/** Token bucket (GCRA): `rate` tokens a second (0 < rate <= 1e9), capacity burst + 1
 *  (burst >= 0), starting full; takes `cost` tokens (0 <= cost <= burst + 1). 0 with *out;
 *  SL_ERROR with *err (static) for an invalid argument or no memory for a new key. */
int sl_ffi_limit_take(const char *key, size_t key_len, double rate, double burst, double cost,
                      sl_limit_result_t *out, const char **err);
/** Sliding window: `limit` units per `window_s` seconds (two fixed windows weighted by
 *  overlap); takes `cost` units (0 <= cost <= limit). Returns as sl_ffi_limit_take. */
int sl_ffi_limit_window(const char *key, size_t key_len, double limit, double window_s, double cost,
                        sl_limit_result_t *out, const char **err);

/* ---- limit-conn (core/upstream/conn_limit.c): requests in flight per key, all workers.
 * The request holds its slots and releases them when it ends, however it ends. */

/** What an acquire decided (sluice_limit_conn_total{result}). */
enum { SL_CONN_ADMITTED = 0, SL_CONN_BURST = 1, SL_CONN_REJECTED = 2, SL_CONN_FAILOPEN = 3 };
/** The metrics index of route `name` (once per config generation, not per request). */
int sl_ffi_limit_conn_route(const char *name, size_t len);
/** Takes a slot of key[0..len) for the running request when the key has fewer than
 *  max + burst requests in flight (max >= 1, burst >= 0): SL_CONN_ADMITTED or SL_CONN_BURST
 *  (the request releases it when it ends); SL_CONN_REJECTED or SL_CONN_FAILOPEN (too many
 *  keys held) take nothing; SL_ERROR with *err (misuse, or more than 4 slots per request).
 *  *in_flight: the key's count after the call. Rewrite/access. */
int sl_ffi_limit_conn_acquire(sl_req_t *r, int route, const char *key, size_t len, int max, int burst,
                              int *in_flight, const char **err);

/* ======================== shared dict (sluice.shared) */

/** What sl_ffi_shdict_get found. */
enum { SL_SHDICT_NUMBER = 1, SL_SHDICT_STRING = 2 };
/** The shared dictionary: one key space for all workers (any thread).
 *  get: SL_SHDICT_NUMBER (*num), SL_SHDICT_STRING (*str, *sl; copied into buf), SL_DECLINED
 *  when absent (or a string longer than bufsz).
 *  ttl in seconds, 0 = none. */
int sl_ffi_shdict_get(const char *k, size_t kl, double *num, const char **str, size_t *sl, char *buf,
                      size_t bufsz);
int sl_ffi_shdict_set(const char *k, size_t kl, int is_num, double num, const char *s, size_t sl,
                      double ttl, const char **err);
int sl_ffi_shdict_incr(const char *k, size_t kl, double delta, int has_init, double init, double ttl,
                       double *out, const char **err);
int sl_ffi_shdict_delete(const char *k, size_t kl);

/* ======================== cache (sluice.cache, the proxy-cache plugin; core/upstream/cache.c)
 * The response store shared by all workers (top-level `cache: { size }`). Worker thread,
 * during the request's access phase. */

/** What the cache did for a request: its X-Cache-Status and the `status` label of
 *  sluice_cache_total. SL_CACHE_WAIT is a lookup's answer only. */
enum {
    SL_CACHE_MISS = 0,
    SL_CACHE_HIT = 1,
    SL_CACHE_EXPIRED = 2,
    SL_CACHE_BYPASS = 3,
    SL_CACHE_STALE = 4,
    SL_CACHE_WAIT = 5
};
/** How a route's proxy-cache stores responses (its config, once per generation). */
typedef struct {
    double ttl;            /**< seconds a response stays fresh without max-age/s-maxage */
    double stale_if_error; /**< seconds past freshness an entry may answer a failed upstream */
    double lock_timeout;   /**< seconds concurrent misses of a key wait for the first one */
    uint64_t max_body;     /**< a longer response streams through and is not stored */
    int cache_set_cookie;  /**< 1: a response with Set-Cookie may be stored */
    char methods[64];      /**< the methods looked up, each followed by a space ("GET HEAD ") */
    int nstatuses;         /**< statuses[0..nstatuses) may be stored (at most 16) */
    int statuses[16];
} sl_cache_policy_t;
/** Looks key[0..len) up (key NULL: the default key, "METHOD host/path?query", built here).
 *  SL_CACHE_BYPASS: the request's method is not in pol->methods (X-Cache-Status BYPASS,
 *  counted). SL_CACHE_HIT: the request is answered from the entry once the
 *  plugin returns (as by response.exit: the chain stops; header_filter and body_filter
 *  run), X-Cache-Status HIT. SL_CACHE_MISS or SL_CACHE_EXPIRED: the request goes upstream
 *  and its response is stored under pol (copied) when cacheable; X-Cache-Status then says
 *  MISS, EXPIRED or BYPASS (not cacheable). SL_CACHE_WAIT (may_wait 1 only): another
 *  request is fetching the key; wait a little (sleep) and ask again, with may_wait 0 once
 *  pol->lock_timeout has passed. SL_ERROR with *err outside access. */
int sl_ffi_cache_lookup(sl_req_t *r, const char *key, size_t len, const sl_cache_policy_t *pol,
                        int may_wait, const char **err);
/** After SL_CACHE_WAIT: waits at most ms for the request fetching the key, on any worker,
 *  to finish (then the caller yields, and calls sl_ffi_cache_lookup again when resumed).
 *  SL_OK, or SL_ERROR with *err. */
int sl_ffi_cache_wait(sl_req_t *r, uint64_t ms, const char **err);

/* ======================== crypto (sluice.crypto, core/lua/crypto.c)
 * OpenSSL's libcrypto through the core, so Lua never loads libcrypto itself. Any thread,
 * any number at once; no call keeps state between calls. Names (digest, alg, curve) are NUL-terminated; bytes are pointer + length. */

/** The largest digest or HMAC written (SHA-512), for sizing `out`. */
#define SL_CRYPTO_MD_MAX 64

/** The digest `name` ("sha1", "sha256", "sha384", "sha512" or "md5") of data into out. *outlen is
 *  out's capacity on entry, the digest's size on return. 0; SL_DECLINED for an unknown
 *  name; SL_ERROR with *err. */
int sl_ffi_crypto_digest(const char *name, const unsigned char *data, size_t len,
                         unsigned char *out, size_t *outlen, const char **err);
/** HMAC of data under key with the digest `name`; returns as sl_ffi_crypto_digest. */
int sl_ffi_crypto_hmac(const char *name, const unsigned char *key, size_t key_len,
                       const unsigned char *data, size_t len, unsigned char *out, size_t *outlen,
                       const char **err);

/** A public key for signature verification: RSA, EC P-256/P-384/P-521, Ed25519 or Ed448.
 *  Owned by the caller until sl_ffi_crypto_key_free; read-only once built, so threads may
 *  verify with one key at the same time. Constructors return NULL with *err. */
typedef struct sl_pkey_s sl_pkey_t;

/** From the first PEM block of pem: "PUBLIC KEY" (SPKI), "RSA PUBLIC KEY" (PKCS#1) or
 *  "CERTIFICATE" (its subject's key; the certificate itself is not checked). */
sl_pkey_t *sl_ffi_crypto_key_pem(const char *pem, size_t len, const char **err);
/** From JWK members, already base64url-decoded (RFC 7518 section 6, RFC 8037 section 2):
 *  RSA from n and e (big-endian); EC on crv "P-256", "P-384" or "P-521" from x and y, each
 *  exactly the coordinate size; OKP on crv "Ed25519" or "Ed448" from x. */
sl_pkey_t *sl_ffi_crypto_key_rsa(const unsigned char *n, size_t n_len, const unsigned char *e,
                                 size_t e_len, const char **err);
sl_pkey_t *sl_ffi_crypto_key_ec(const char *crv, const unsigned char *x, size_t x_len,
                                const unsigned char *y, size_t y_len, const char **err);
sl_pkey_t *sl_ffi_crypto_key_okp(const char *crv, const unsigned char *x, size_t x_len,
                                 const char **err);
/** The key in JWK terms: *kty "RSA", "EC" or "OKP"; *crv "P-256", ..., "Ed25519", "Ed448",
 *  or NULL for RSA; *bits its size (the modulus for RSA). Strings are static. */
void sl_ffi_crypto_key_info(const sl_pkey_t *k, const char **kty, const char **crv, int *bits);
void sl_ffi_crypto_key_free(sl_pkey_t *k);

/** Verifies sig over data with a JWS alg (RFC 7518 section 3): RS256/384/512
 *  (RSASSA-PKCS1-v1_5), PS256/384/512 (RSASSA-PSS, MGF1 with the same digest, salt as long
 *  as the digest), ES256/384/512 (sig is r || s, each the curve's coordinate size), EdDSA.
 *  1 valid; 0 invalid, *err saying why; SL_ERROR with *err for an unknown alg or a key of
 *  another type or curve than the alg names (an RSA key for ES256, a P-384 key for ES256). */
int sl_ffi_crypto_verify(const sl_pkey_t *k, const char *alg, const unsigned char *data,
                         size_t data_len, const unsigned char *sig, size_t sig_len,
                         const char **err);

/** 1 when a and b hold the same bytes, else 0. Lengths that differ answer 0 at once;
 *  for equal lengths the time depends on the length only (OpenSSL's CRYPTO_memcmp). */
int sl_ffi_crypto_equal(const unsigned char *a, size_t a_len, const unsigned char *b,
                        size_t b_len);

/** Whether `password` is the one a stored password hash was made from. Hash formats:
 *  crypt(3) yescrypt "$y$", SHA-512 "$6$", SHA-256 "$5$" and bcrypt "$2b$"/"$2y$"
 *  (libcrypt), and PBKDF2 in passlib's form "$pbkdf2-sha256$ROUNDS$SALT$SUM" (also
 *  sha512; SALT and SUM in passlib's base64, '.' for '+', no padding; ROUNDS 1000 to
 *  10,000,000).
 *  1 match; 0 no match (also a password with a NUL byte, or longer than 511 bytes for
 *  crypt); SL_ERROR with *err for a hash of another or a malformed format. The hash is
 *  compared in constant time. Costs what the hash was made to cost (milliseconds):
 *  the calling thread does the work. Any thread. */
int sl_ffi_crypto_password_verify(const char *password, size_t password_len, const char *hash,
                                  size_t hash_len, const char **err);
/** Checks a stored hash's format, as sl_ffi_crypto_password_verify reads it, without
 *  hashing anything (for a config loader): 0, or SL_ERROR with *err. libcrypt may still
 *  refuse a well-formed crypt(3) setting when verifying (SHA-crypt rounds below 1000). */
int sl_ffi_crypto_password_check(const char *hash, size_t hash_len, const char **err);

/* ======================== client certificates (sluice.tls, a listener's tls.client_auth) */

/** The certificate a client presented on the request's connection. Strings are not
 *  NUL-terminated; they point into connection memory and stay valid during the phase
 *  call. */
typedef struct {
    const char *subject;     /**< RFC 2253 text, most specific first: "CN=alice,O=Example" */
    size_t subject_len;
    const char *issuer;      /**< the same form */
    size_t issuer_len;
    const char *serial;      /**< upper-case hex */
    size_t serial_len;
    const char *fingerprint; /**< SHA-256 of the DER certificate, lower-case hex */
    size_t fingerprint_len;
    const char *sans;        /**< subjectAltNames, one per line: "DNS:a.example",
                                  "URI:spiffe://x/y", "email:a@example.com" (other kinds
                                  are left out) */
    size_t sans_len;
    int64_t not_before;      /**< validity, Unix seconds */
    int64_t not_after;
    int32_t verify;          /**< 0: verified against client_auth.ca (and crl); else OpenSSL's
                                  X509_V_ERR_* code (mode: optional lets such clients in) */
    const char *verify_error; /**< "" when verified, else OpenSSL's text for the code */
    size_t verify_error_len;
} sl_client_cert_t;

/** The request's client certificate: SL_OK with *out filled; SL_DECLINED when the
 *  connection has none (no client_auth on the listener, or the client sent none: mode
 *  optional); SL_ERROR when out of memory. Worker thread, during a phase call. */
int sl_ffi_req_client_cert(sl_req_t *r, sl_client_cert_t *out);
/* ======================== grpc-web (sluice.grpc_web, core/lua/grpc_web.c) */

/** Base64 (RFC 4648 section 4, padded) of in[0..n) into out, which holds 4 * ((n + 2) / 3)
 *  bytes: the bytes written. */
size_t sl_ffi_grpcweb_b64_encode(const char *in, size_t n, char *out);
/** Decodes base64 into out (3 * (n / 4) + 2 bytes): padded segments may follow one another
 *  (grpc-web-text clients send one per message), a last unpadded quantum is accepted. The
 *  bytes written, or SL_ERROR for a character or padding out of place. */
long sl_ffi_grpcweb_b64_decode(const char *in, size_t n, char *out);
/** The upstream response's trailer fields (an HTTP/2 upstream's; an HTTP/1 upstream has
 *  none), in body_filter: how many, and the i-th (names lower-case, valid until the phase
 *  call returns; SL_DECLINED past the last). */
int sl_ffi_grpcweb_trailer_count(sl_req_t *r);
int sl_ffi_grpcweb_trailer_at(sl_req_t *r, int i, const char **name, size_t *name_len, const char **value,
                              size_t *value_len);
/** The trailers went into the body (gRPC-Web's final frame): the client gets no HTTP
 *  trailers (HTTP/2) besides them. Their grpc-status is counted (sluice_grpc_responses_total). */
void sl_ffi_grpcweb_trailers_drop(sl_req_t *r);

/* ======================== tcp session (preread) */

/** The session a tcp listener's preread plugin runs for; valid only during that
 *  (synchronous) call. The request functions above do not take it. */
typedef struct sl_session_s sl_session_t;

/** The client's address as text (the source its PROXY header gave, when accepted) and port. */
int sl_ffi_session_client_ip(sl_session_t *s, const char **p, size_t *len);
int sl_ffi_session_client_port(sl_session_t *s);
/** The server name of the client's TLS ClientHello (lower-case): 0, or SL_DECLINED when the
 *  listener has no sni_routes or the hello carried none. */
int sl_ffi_session_sni(sl_session_t *s, const char **p, size_t *len);
/** The listener's name. */
int sl_ffi_session_listener(sl_session_t *s, const char **p, size_t *len);
/** The destination chosen so far (an upstream's name, or the IP:PORT set): 0, or
 *  SL_DECLINED when there is none yet (no default upstream, no sni_routes match). */
int sl_ffi_session_upstream(sl_session_t *s, const char **p, size_t *len);
/** Sends the session to a configured upstream (`name`) or to an IP:PORT address: 0, or
 *  SL_ERROR with *err. The last call wins. */
int sl_ffi_session_set_upstream(sl_session_t *s, const char *name, size_t len, const char **err);
/** Closes the session once the chain returns (the rest of the chain does not run), after
 *  sending `msg[0..len)` to the client when len > 0 (best effort: what the socket takes at
 *  once, at most 64 KiB). No upstream is connected. */
void sl_ffi_session_close(sl_session_t *s, const char *msg, size_t len);
/** A log line with the listener's name and the plugin's. */
void sl_ffi_session_log(sl_session_t *s, int level, const char *plugin, const char *msg, size_t len);

/* ======================== router (sluice.router, core/config/router.c)
 * The route matcher of a config generation, compiled once when the config is built and
 * freed with it: exact hosts in a hash, wildcard hosts by suffix, path prefixes in a radix
 * tree, methods as a bitset, header conditions checked only for candidates. A route whose
 * `match` is a Lua function is a candidate the caller confirms by calling that function:
 * the matcher never calls into Lua. */

typedef struct sl_router_s sl_router_t;

/** A request header as the matcher reads it. */
typedef struct {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} sl_route_header_t;

/** What a route is matched against. Borrowed for the calls that take it. */
typedef struct {
    const char *host;   /**< normalized: lower-case, without the port */
    size_t host_len;
    const char *method;
    size_t method_len;
    const char *path;   /**< without the query */
    size_t path_len;
    const sl_route_header_t *headers; /**< header conditions take the first of a name */
    uint32_t nheaders;
    uint32_t header_stride; /**< bytes from one header to the next: sizeof(sl_route_header_t),
                                 or more when each is the start of a larger struct */
} sl_route_query_t;

/** Where a match stands: zeroed before the first sl_ffi_router_next of a query. The
 *  fields before strip are the matcher's own. */
typedef struct {
    int32_t tier, dot;
    uint32_t node, k, method;
    uint32_t strip; /**< out: the path bytes the route's strip_prefix removes */
    uint32_t lua;   /**< out: 1 when the route's Lua match function must also say yes */
} sl_route_cursor_t;

/** The next route of the query in precedence order whose hosts, paths, methods and headers
 *  hold: its 0-based index (in the config's route order), or -1 when none is left. When
 *  c->lua is 1 the caller calls the route's match function and, when it says no, calls
 *  again with the same cursor. Allocates nothing; any thread (the router is immutable). */
int sl_ffi_router_next(const sl_router_t *rt, const sl_route_query_t *q, sl_route_cursor_t *c);

/** A route for sl_ffi_router_new: the lists of its `match` (hosts lower-case, methods
 *  upper-case, as a config build leaves them), NUL-terminated strings. */
typedef struct {
    const char *const *hosts;
    uint32_t nhosts;
    const char *const *paths;
    uint32_t npaths;
    const char *const *methods;
    uint32_t nmethods;
    const char *const *headers; /**< 2 * nheaders strings: name, value, name, value, ... */
    uint32_t nheaders;
    uint8_t strip_prefix;
    uint8_t match_fn; /**< its match is a Lua function */
} sl_route_def_t;

/** Compiles routes[0..n) (route i is index i) into a router the caller owns (strings are
 *  copied): free it with sl_ffi_router_free. NULL with *err when out of memory. */
sl_router_t *sl_ffi_router_new(const sl_route_def_t *routes, uint32_t n, const char **err);
void sl_ffi_router_free(sl_router_t *rt);
/** The router of the request's config generation (owned by it). Worker thread. */
const sl_router_t *sl_ffi_req_router(sl_req_t *r);

/* ======================== log */

/** Log levels (sl_ffi_log, sl_ffi_session_log; the core's own lines too). */
enum { SL_LOG_DEBUG = 0, SL_LOG_INFO = 1, SL_LOG_WARN = 2, SL_LOG_ERR = 3 };
/** Logs a JSON line with route, plugin and request id. level SL_LOG_*. */
void sl_ffi_log(sl_req_t *r, int level, const char *plugin, const char *msg, size_t len);

/* ======================== time and randomness */

/** Arms a timer that resumes the request's coroutine; the caller then yields. */
int sl_ffi_sleep(sl_req_t *r, uint64_t ms, const char **err);
/** n random hex digits (per-thread generator seeded from getrandom). */
void sl_ffi_random_hex(char *out, size_t n);
/** Wall-clock seconds. */
double sl_ffi_now(void);

#ifdef __cplusplus
}
#endif

#endif
