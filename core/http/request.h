/* request.h — one HTTP request from its head to the end of its response, independent of
 * the connection it came on (downstream.h) and of the upstream connection serving it
 * (exchange.h). Internal: sl__ names, not part of the ABI.
 *
 * Ownership: a request is owned by its downstream from its first head byte to the end of
 * its response; request objects are recycled through a per-worker freelist. Its
 * allocations come from its arena (rebuilt heads, canned answers) and are freed in one
 * step; `heap` (a buffered body) and the body filter's buffer are malloc'ed and freed with
 * it.
 *
 * The request's files: request.c (begin, stages and Lua phases, waits, end), respond.c
 * (gateway-made answers, buffering the body), proxy.c (the two pumps), attempts.c
 * (target choice, retries, hedging), h1_head.c (the heads sent upstream and to HTTP/1
 * clients). They share this header; nothing outside http/ needs more than its API.
 */
#ifndef SL_REQUEST_H
#define SL_REQUEST_H

#include <uv.h>

#include "base/deadline.h"
#include "ctx/worker.h"
#include "http/downstream.h"
#include "net/outq.h"
#include "proto/hdr_edit.h"
#include "proto/http1.h"
#include "script/lua_host.h"
#include "sluice.h"
#include "upstream/attempt.h"
#include "http/exchange.h"

/* SL_MODE_TUNNEL: the upstream answered 101 to an upgrade; the request object stays as the
 * owner of the byte tunnel (tunnel.c) until the connection ends. */
/* The request's embedded arena chunk: a proxied request's two rebuilt heads (~250 bytes
 * each without plugins), the copy of its client head (sl__req_detach_head) and its
 * lower-cased Host fit for an API client's request; a browser's ~1 KiB heads take a block. */
#define SL_REQ_ARENA_FIRST 1024
/* The longest Host the router sees (a longer one is cut). */
#define SL_REQ_HOST_MAX 255
/* Replays of one request whose exchanges were refused unprocessed (a GOAWAY's
 * last-stream-id below them, REFUSED_STREAM): safe whatever the method, bounded against an
 * upstream that refuses everything. */
#define SL_REQ_MAX_REFUSED 10
/* The most limit-conn slots one request holds (one per limit-conn plugin in its chain). */
#define SL_REQ_CONN_SLOTS 4

enum { SL_MODE_PROXY = 1, SL_MODE_BUFFER, SL_MODE_LOCAL, SL_MODE_TUNNEL };
/* Where a request is in its life: the Lua phases run between routing and content. */
enum { SL_STAGE_REWRITE = 0, SL_STAGE_ACCESS, SL_STAGE_CONTENT, SL_STAGE_RESPONSE };

struct sl_req_s {
    sl_downstream_t *ds; /**< the client side it came from (downstream.h) */
    sl_worker_t *w;
    sl_req_t *free_next;
    sl_h1_head_t head;  /**< the client's request; slices of the downstream's buffer */
    sl_h1_head_t rhead; /**< the upstream's response (the exchange put it there) */
    /** The arena's first chunk (block.h): the rebuilt heads of most requests fit in it, so
     *  a request waiting on its upstream holds no arena block. Not cleared by sl__req_new. */
    char arena_first[SL_REQ_ARENA_FIRST];
    /** The two directions' write queues: 2.3 KiB of slices and chunk-size lines that are
     *  never read past their counts, so sl__req_new empties them (sl_outq_init) rather
     *  than clearing them with the scalars below. */
    sl_outq_t upq;      /**< toward the upstream */
    sl_outq_t clq;      /**< toward the client */
    uint32_t head_off, head_end;
    int route;          /**< index into cfg->routes, -1 when none */
    uint32_t strip;     /**< bytes of path removed by strip_prefix */
    uint8_t mode;       /**< SL_MODE_* */
    uint8_t body_done;  /**< client request fully read */
    /** The response toward the client (proxy.c, respond.c). */
    struct {
        uint8_t state;      /**< SL_RESP_*: moved only by sl__req_resp_state */
        uint8_t written;    /**< some of the response went to the client socket */
        uint8_t eof_body;   /**< its body is delimited by the upstream's close */
        uint8_t eof_client; /**< the client learns its end from the close (HTTP/1.0, no length) */
    } resp;
    uint8_t keep_alive; /**< the client connection may serve another request */
    uint8_t upgrade;    /**< forwarded as an upgrade (the route allows the client's Upgrade) */
    /** The byte tunnel after a 101 (tunnel.c): each direction moves one read buffer's bytes
     *  at a time through upq/clq, and ends on its own (EOF -> shutdown toward the other). */
    struct {
        struct sl_upconn_s *u; /**< the upstream connection, taken from the exchange at the 101 */
        uint32_t cu_end;  /**< client->upstream: c->rbuf bytes in flight end here */
        uint32_t uc_end;  /**< upstream->client: u->rbuf bytes in flight end here */
        uint8_t cl_eof;   /**< the client's EOF was read */
        uint8_t up_eof;   /**< the upstream's EOF was read */
        uint8_t up_shut;  /**< shutdown toward the upstream: 1 asked, 2 done (client->upstream over) */
        uint8_t cl_shut;  /**< shutdown toward the client: 1 asked, 2 done (upstream->client over) */
        uint64_t drain_at;/**< loop ms when a draining worker closes it; 0: not draining */
    } tun;
    /** Upstream attempts (attempts.c) and their exchanges (exchange.h): target choice,
     *  breaker admission, retries, the hedge. */
    struct {
        sl_tries_t tries;   /**< targets tried (sized when the proxy starts) */
        sl_attempts_of_t of;/**< where attempts go: the upstream's config, runtime and layer */
        /** The current attempt's exchange is x[cur]; while a hedge races it, the hedge's
         *  is x[!cur]. Promoting the hedge flips cur: nothing moves, so the pointers the
         *  connections and streams hold stay valid. */
        sl_exchange_t x[2];
        uint8_t cur;
        uint8_t hedged;     /**< a hedge attempt was started (at most one per request) */
        uint8_t retried;    /**< a dead pooled connection was replaced once */
        uint8_t refused;    /**< exchanges refused unprocessed so far: replays are capped */
        uint8_t next_admit; /**< the admission of next_target */
        int next_target;    /**< a retry's target, chosen (and admitted) before the backoff; -1 */
        uint16_t lua_target;/**< the balancer phase's choice: target index + 1 (0: none) */
        uint32_t retry_after_s; /**< a 503 for open breakers: its Retry-After */
    } at;
    /** upstream.set(address): the request goes to this address, not a configured upstream */
    struct {
        uint8_t set;
        struct sockaddr_storage ss;
        char text[64];
    } addr;
    int status;         /**< status sent to the client */
    int upstream;       /**< cfg upstream index or -1 */
    uint64_t start_ns;
    uint64_t body_in;   /**< request body bytes read */
    uint64_t bytes_out; /**< response bytes handed to the client socket */
    uv_buf_t uphead;    /**< the rebuilt request head, kept for a retry */
    uint16_t body_err;  /**< status for a body the client got wrong (400, 413) */
    sl_arena_t arena;   /**< rebuilt heads and canned answers */
    char *heap;         /**< a malloc'ed buffer freed with the request (echo) */
    size_t heap_len, heap_cap;
    char consumer[65];  /**< ctx.consumer after the access phase (auth plugins) */
    uint8_t consumer_len;
    char rid[33];       /**< X-Request-ID */
    uint8_t rid_len;
    const char *host;   /**< Host, lower-cased, port removed (the head's bytes, or a
                             lower-cased copy in the arena; at most SL_REQ_HOST_MAX bytes):
                             what the router matches */
    uint16_t host_len;
    const char *client_ip; /**< the real-ip plugin's client address (arena, NUL-terminated);
                                NULL: the peer's, ds->peer */
    /* plugin runtime */
    uint8_t stage;      /**< SL_STAGE_* */
    uint8_t body_buffered; /**< the whole body is in heap (a plugin read it, or a retry may replay it) */
    uint64_t buffer_max;   /**< cap of a buffered body; 0: SL_BUFFER_MAX_BODY */
    uint8_t in_header_filter;
    uint8_t logged;
    uint8_t phases;     /**< SL_PHASE_* bits the route's chain defines */
    sl_lua_task_t lua;  /**< its coroutine and ctx (script/lua_host.h) */
    struct sl_wait_s *wait; /**< what the coroutine waits for (NULL: nothing) */
    sl_hdr_edits_t req_edits, resp_edits;
    /** A plugin's rewrites of the upstream request line. */
    struct {
        sl_str_t path;     /**< set_path: replaces path (and strip_prefix) upstream */
        sl_str_t query;    /**< set_query: replaces the query upstream (query_set) */
        uint8_t query_set;
    } over;
    /* body_filter: the piece being filtered, and a plugin's replacement (bf_buf) */
    const char *bf_in;
    size_t bf_in_len;
    char *bf_buf;
    size_t bf_len, bf_cap;
    uint8_t bf_eof;     /**< the piece is the body's last */
    uint8_t bf_set;     /**< a plugin replaced the piece: bf_buf holds the output */
    uint8_t bf_failed;  /**< a body_filter raised: the response is cut off */
    uint8_t bf_end;     /**< the upstream body ended: the last (eof) call is due */
    /** The compression plugin's streaming encoder for this response (lua/compress.c):
     *  owned, freed by sl__req_free on every exit path (finished, failed, client gone). */
    struct sl_compress_s *compress;
    /** Tracing (trace.c), when the generation has `telemetry:`: the W3C context the
     *  request continues or starts, its SERVER span; each exchange holds its attempt's. */
    struct {
        uint8_t on;        /**< telemetry is configured: ids are made and propagated */
        uint8_t sampled;   /**< spans are recorded (flags bit 0 sent upstream) */
        uint8_t has_parent;/**< the client sent a valid traceparent */
        uint8_t nattempts; /**< attempts begun */
        uint8_t trace_id[16], parent[8], server[8];
    } trace;
    struct sl_req_debug_s *debug; /**< request debugging's record (req_debug.c), in the
                                       arena; NULL unless X-Sluice-Debug held the token */
    /** response.exit: status (0: none) and body; alloc holds the body when too large for
     *  the arena, freed with the request. */
    struct {
        int status;
        sl_str_t body;
        char *alloc;
    } exit;
    /** limit-conn slots the request holds (conn_limit.h), released in sl__req_free: the
     *  one place every request ends, whatever ended it (response done, client abort, h2
     *  RST_STREAM, upstream error, timeout, plugin error or exit). */
    struct {
        struct sl_conn_slot_s *v[SL_REQ_CONN_SLOTS];
        uint8_t n;
    } slots;
    struct sl_cache_req_s *cache; /**< the proxy-cache's state (cache_req.h); NULL unless it looked up */
    sl_h1_header_t *trailers; /**< the response's trailer fields (arena): an HTTP/2 client gets them */
    uint16_t ntrailers;
    /** The request body kept for a replay: read whole before the first attempt (`wait`,
     *  retries), or copied as it streams up (`on`) to an upstream that can refuse it
     *  unprocessed (SL_XF_REFUSALS), until retry.max_body. */
    struct {
        uint8_t wait;   /**< reading the body whole before the first attempt (retries) */
        uint8_t on;     /**< a streamed body is copied as it goes up (cleared past max_body) */
        char *block;    /**< the kept body while it fits a worker block (then it moves to heap) */
        uint32_t len;
    } replay;
    /** gRPC: when the request's grpc-timeout passes (loop ms; 0: none), and whether the
     *  gateway's answer went out as a trailers-only gRPC error (respond.c): HTTP 200,
     *  grpc-status in the head, no body and (HTTP/2) no length. */
    struct {
        uint64_t due;
        uint8_t answer;
    } grpc;
};

/* r->resp.state: the response toward the client. NONE -> HEAD (its head queued) -> DONE
 * (all of it queued); a failure before any byte left goes back to NONE for a clean 502. */
enum { SL_RESP_NONE = 0, SL_RESP_HEAD, SL_RESP_DONE };


/** What a yielded coroutine waits for (a sleep's timer, an http call). Malloc'ed by its
 *  owner: closing a handle outlives the request. */
enum { SL_WAIT_SLEEP = 1, SL_WAIT_HTTP, SL_WAIT_BACKOFF, SL_WAIT_HEDGE, SL_WAIT_REDIS };
typedef struct sl_wait_s {
    sl_req_t *r; /**< NULL once the request is gone */
    int kind;    /**< SL_WAIT_* */
    /** The request ends first: stop, and free once the handles are closed. */
    void (*cancel)(struct sl_wait_s *wt);
} sl_wait_t;


/* ---- called by the downstream ---- */

/** A downstream's new request object (from the worker's freelist); NULL when out of memory. */
sl_req_t *sl__req_new(sl_worker_t *w, sl_downstream_t *ds);
/** Routes a parsed request and starts answering it. */
void sl__req_begin(sl_req_t *r);
/** The client sent more bytes for the active request. */
void sl__req_on_client_data(sl_req_t *r);
/** A write of the downstream's (ops->write returned 0) completed. */
void sl__req_on_written(sl_req_t *r, int status);
/** Answers with a gateway-made response (status, JSON body). */
void sl__req_respond(sl_req_t *r, int status, sl_str_t ctype, sl_str_t body, bool close);
/** Moves the request head's bytes, base[head_off..head_end), into the request's arena and
 *  points its fields at the copy, so that the downstream may reuse or release `base`.
 *  SL_OK, or SL_ERROR (out of memory: nothing changed). */
int sl__req_detach_head(sl_req_t *r, const char *base);
/** Releases a request that is over: upstream connection, arena, object. */
void sl__req_free(sl_req_t *r);
/** The client side went away: abandon the request and its upstream. */
void sl__req_abort(sl_req_t *r);

/* ---- called by plugins' waits (lua/, net/redis.c, http_client.c) ---- */

/** Calls fire(r) after ms on the worker's loop; r->wait holds it (cancelled when the
 *  request ends first). SL_OK, or SL_ERROR when out of memory. */
int sl__req_wait_ms(sl_req_t *r, uint64_t ms, int kind, void (*fire)(sl_req_t *r));
/** Cancels what r waits for, if anything. */
void sl__req_cancel_wait(sl_req_t *r);
/** A plugin's sleep of ms: the coroutine continues after it, unless the request's
 *  grpc-timeout passes first, which answers DEADLINE_EXCEEDED then (the sleep abandoned).
 *  SL_OK, or SL_ERROR when out of memory. */
int sl__req_sleep(sl_req_t *r, uint64_t ms);
/** When the request's grpc-timeout passes, as a time of the worker's loop (`now` is its
 *  current one), counted from the request's arrival; 0 when it has none or it is malformed. */
uint64_t sl__req_grpc_due(const sl_req_t *r, uint64_t now);
/** The request's coroutine may continue (a sleep ended, its body arrived). */
void sl__req_wakeup(sl_req_t *r);
/** Starts buffering the request body for a plugin; SL_OK when already whole. */
int sl__req_buffer_body(sl_req_t *r);

/* ---- between the request's files (internal to http/) ---- */

/** A plugin's upstream.set(address) has no configured upstream: defaults for it. */
extern const sl_upstream_conf_t sl__address_upstream;
/** The request's upstream's config (the defaults above for an address). */
static inline const sl_upstream_conf_t *sl__req_upstream_conf(const sl_req_t *r) {
    return r->upstream >= 0 ? &r->w->cfg->upstreams[r->upstream] : &sl__address_upstream;
}
static inline const sl_route_conf_t *sl__req_route_conf(const sl_req_t *r) {
    return r->route >= 0 ? &r->w->cfg->routes[r->route] : NULL;
}
static inline bool sl__req_body_filtered(const sl_req_t *r) { return r->phases & (1u << SL_PHASE_BODY_FILTER); }
/** The upstream's Content-Length does not hold for the client: a body_filter may change the
 *  body's length, and a HEAD's would-be body too (its GET goes without a length). */
static inline bool sl__req_length_changes(const sl_req_t *r) {
    return sl__req_body_filtered(r) && (r->rhead.body_kind != SL_BODY_NONE || r->head.method_id == HTTP_HEAD);
}
/** The value of header `name` (first one), or of cookie `name`; "" when absent. */
sl_str_t sl__req_header_value(const sl_req_t *r, const char *name);
sl_str_t sl__req_cookie_value(const sl_req_t *r, const char *name);
/** Runs a Lua phase of the request's chain (sl_lua_phase's answers). */
static inline int sl__req_phase(sl_req_t *r, int phase) {
    return sl_lua_phase(r->w, &r->lua, (sl_lua_who_t){r, r->route, r->rid}, phase);
}
/* ---- request debugging (req_debug.c): each hook only when r->debug ---- */

typedef struct sl_req_debug_s sl_req_debug_t;
/** At the request's start: drops X-Sluice-Debug toward the upstream and, when it holds
 *  admin.debug_token_env's token (compared in constant time), sets r->debug. */
void sl__req_debug_begin(sl_req_t *r);
/** A plugin call (chain position, SL_PHASE_*) of `ns` ended. */
void sl__req_debug_plugin(sl_req_t *r, int pos, int phase, uint64_t ns);
/** The current attempt ended with `status` (0: no response) after `ns`. */
void sl__req_debug_attempt(sl_req_t *r, int status, uint64_t ns);
/** Just before the response head is written: adds X-Sluice-Debug-Output to it. */
void sl__req_debug_emit(sl_req_t *r);

/* ---- tracing (trace.c): each hook only when r->trace.on ---- */

/** At the request's start: continues the client's traceparent or starts a trace, decides
 *  sampling (parent-based, else telemetry.sample_ratio) and sets the traceparent the
 *  upstream gets (the first attempt's span as the parent). */
void sl__trace_begin(sl_req_t *r);
/** An attempt begins: a new span id, written into the kept upstream head for a retry. */
void sl__trace_attempt_begin(sl_req_t *r);
/** The current attempt ended: its CLIENT span (status 0: no response). */
void sl__trace_attempt_end(sl_req_t *r, int status);
/** The current attempt lost a hedge race: its CLIENT span, error.type "cancelled". */
void sl__trace_attempt_cancelled(sl_req_t *r);
/** A plugin call (chain position, SL_PHASE_*) of `ns` just ended: its INTERNAL span
 *  (telemetry.plugin_spans, sampled requests). */
void sl__trace_plugin(sl_req_t *r, int pos, int phase, uint64_t ns);
/** The request is over (counted): its SERVER span. */
void sl__trace_end(sl_req_t *r, uint64_t now);

/** The current attempt ended with `status` (0: no response) at `now` (sl_now_ns): counted
 *  in the upstream metrics and told to the request's debugging. */
void sl__attempt_timed(sl_req_t *r, int status, uint64_t now);

/** The log phase, once, after the response went out (it cannot wait). */
void sl__req_run_log_phase(sl_req_t *r);

/* respond.c */
/** A gateway-made JSON error: {"error": msg}. */
void sl__req_respond_error(sl_req_t *r, int status, const char *msg, bool close);
/** The request is a gRPC one (content-type application/grpc*): gateway-made answers to it
 *  are gRPC errors. */
bool sl__req_is_grpc(const sl_req_t *r);
/** Counts a grpc-status value the client gets (a passed-through trailer or header, or a
 *  gateway-made one) in sluice_grpc_responses_total; values that are not a code 0..16 are
 *  not counted. Call once per response, where the response's trailers (or its trailers-only
 *  head) are sent. */
void sl__req_grpc_status(sl_req_t *r, sl_str_t value);
/** A proxied response ends (or hands its trailers to a plugin): the grpc-status of its
 *  trailers, or of its head when it was trailers-only, is counted. */
void sl__req_grpc_passed(sl_req_t *r);
/** A plugin's sluice.response.exit. */
void sl__req_answer_exit(sl_req_t *r);
/** 500 for a plugin that raised. */
void sl__req_answer_plugin_error(sl_req_t *r);
/** Runs the body_filter chain over one piece of the response body (respond.c). */
int sl__req_filter_piece(sl_req_t *r, const char *p, size_t n, bool eof, sl_str_t *out);
/** Appends n bytes to r->heap (grown by doubling): SL_OK, or SL_ERROR out of memory. */
int sl__req_heap_append(sl_req_t *r, const char *p, size_t n);
/** Tells the client to send its body, when it waits for that (Expect: 100-continue). */
void sl__req_send_continue(sl_req_t *r);
/** Reads what the client sent of the body into r->heap: SL_OK whole, SL_EAGAIN waiting,
 *  SL_ERROR with r->body_err. */
int sl__req_buffer_pump(sl_req_t *r);

/* proxy.c */
/** The content stage: the request goes to its upstream. */
void sl__proxy_start(sl_req_t *r);
/** Starts (or, after a backoff, resumes) the current attempt: pick, connect, send. */
void sl__proxy_connect(sl_req_t *r);
/** Starts the current attempt's exchange on its target: a pooled connection, a stream, or a
 *  new connection. */
void sl__proxy_connect_target(sl_req_t *r);
/** Moves the client's body to the upstream. */
void sl__proxy_pump_up(sl_req_t *r);
/** Moves the response (the upstream's, or a gateway answer in r->clq) to the client. */
void sl__proxy_pump_down(sl_req_t *r);
/** The current exchange failed before the response was complete. */
void sl__proxy_failed(sl_req_t *r, int status, int kind, const char *why);
/** What the request's exchanges tell it (exchange.h). */
extern const sl_exchange_cb_t sl__proxy_exchange_cb;
/** The request's exchanges go (connections closed, streams reset), and a tunnel's
 *  upstream connection. */
void sl__proxy_drop_upstream(sl_req_t *r);
/** The request's queue toward the upstream starts over for another try: the rebuilt head
 *  (protocols that do not frame it themselves) and the body kept for a replay. */
void sl__proxy_requeue(sl_req_t *r);

/** The current attempt's exchange, and the hedge's (FREE unless one races). */
#define sl__req_x(r) (&(r)->at.x[(r)->at.cur])
#define sl__req_hedge_x(r) (&(r)->at.x[!(r)->at.cur])
/** An exchange of the request holds an upstream connection or stream. */
static inline bool sl__req_upstream_busy(const sl_req_t *r) {
    return r->at.x[0].state != SL_X_FREE || r->at.x[1].state != SL_X_FREE || r->tun.u;
}
/** Moves the response's state (SL_RESP_*): forward one step at a time, or back to NONE
 *  only while nothing of it reached the client socket. */
static inline void sl__req_resp_state(sl_req_t *r, uint8_t to) {
    uint8_t from = r->resp.state;
    SL_BUG_ON(to == SL_RESP_NONE && r->resp.written);
    SL_BUG_ON(to != SL_RESP_NONE && to <= from);
    r->resp.state = to;
}
static inline bool sl__req_resp_head(const sl_req_t *r) { return r->resp.state >= SL_RESP_HEAD; }
static inline bool sl__req_resp_done(const sl_req_t *r) { return r->resp.state == SL_RESP_DONE; }

/* attempts.c */
/** The current attempt's target as configured (`HOST:PORT`, or upstream.set's address);
 *  NULL before a target was chosen. */
const char *sl__req_attempt_target(const sl_req_t *r);
/* How an upstream attempt failed: decides whether a retry may follow (retry.on). */
enum { SL_FAIL_CONNECT, SL_FAIL_TIMEOUT, SL_FAIL_RESET, SL_FAIL_OTHER, SL_FAIL_STATUS /* answered, with a retryable status */ };
/** pick's answer when the balancer phase raised an error (logged and counted). */
#define SL_PICK_PLUGIN_ERROR (-2)
/** The next attempt's target with its admission in *admit, or -1 (open breakers:
 *  *retry_after_ms > 0), or SL_PICK_PLUGIN_ERROR. *now_ns gets the clock read for the
 *  pick (after a balancer plugin ran), for the attempt's begin in the same callback. */
int sl__attempt_pick(sl_req_t *r, uint8_t *admit, uint64_t *retry_after_ms, uint64_t *now_ns);
/** Sizes the request's tries and notes its upstream for the attempts (before the first). */
void sl__attempt_init(sl_req_t *r);
/** The attempt starts at now_ns (sl_now_ns, or sl__attempt_pick's read). */
void sl__attempt_begin(sl_req_t *r, int t, uint8_t admit, uint64_t now_ns);
void sl__attempt_outcome(sl_req_t *r, int outcome);
void sl__attempt_release(sl_req_t *r);
/** The request ends or is answered by the gateway while an attempt is open or a retry's
 *  target is admitted: neither is the target's failure. */
void sl__attempt_abandon(sl_req_t *r);
/** The response head arrived (read at now_ns): outcome and latency; true when a retry
 *  took over (a 5xx the retry policy names). */
bool sl__attempt_answered(sl_req_t *r, uint64_t now_ns);
/** Tries the request again on another target when the config and the request allow it. */
bool sl__attempt_retry(sl_req_t *r, int kind, int status);
/** No target can take the request: open breakers answer 503 with Retry-After, else 502. */
void sl__attempt_no_target(sl_req_t *r, uint64_t retry_after_ms);
/** Arms the hedge of a first attempt when the upstream and the request allow one. */
void sl__hedge_arm(sl_req_t *r);
/** Ends the hedge attempt with `outcome` (SL_OUT_*) and closes its connection. */
void sl__hedge_end(sl_req_t *r, int outcome);
/** The current attempt failed while the hedge runs: the hedge becomes the attempt. */
void sl__hedge_promote(sl_req_t *r, int lost);
/** The hedge's exchange failed (it ends; the current attempt runs alone). */
void sl__hedge_failed(sl_req_t *r, const char *why);
/** The hedge's upstream began to answer first: it becomes the attempt. */
void sl__hedge_answered(sl_req_t *r);

/* cache_req.c: the request's side of the proxy-cache (the store is upstream/cache.h): the
 * access phase's lookup, answering a HIT or a STALE from an entry the request holds,
 * deciding at the upstream's response head whether the response may be stored, copying
 * its body as it goes to the client, and storing it once it ended whole. Its state
 * (r->cache) lives in the request's arena and ends with it. */
/** The access phase's lookup (sl_ffi_cache_lookup): SL_CACHE_*. key.p NULL: the default
 *  key (method, host, path and query). */
int sl__cache_req_lookup(sl_req_t *r, sl_str_t key, const sl_cache_policy_t *pol, bool may_wait);
/** The upstream's response head arrived (r->rhead, r->status), before header_filter:
 *  decides MISS/EXPIRED/BYPASS and starts the copy. SL_DONE when the response is a 5xx
 *  and a stale entry should answer instead (the caller answers with sl__req_respond). */
int sl__cache_req_head(sl_req_t *r);
/** A piece of the upstream's body, before body_filter. */
void sl__cache_req_piece(sl_req_t *r, const char *p, size_t n);
/** The upstream's body ended whole. */
void sl__cache_req_ended(sl_req_t *r);
/** The response went out whole (req_finish): stores a captured response. */
void sl__cache_req_finish(sl_req_t *r);
/** A gateway answer of `*status` (>= 500) is about to go out: when a stale entry may
 *  answer instead, replaces status and body (and sets the entry's fields): true. */
bool sl__cache_req_stale(sl_req_t *r, int *status, sl_str_t *ctype, sl_str_t *body);
/** The request ends (sl__req_free). */
void sl__cache_req_free(sl_req_t *r);
/** Waits up to ms for the key's lock to be released (sl_ffi_cache_wait): the worker's
 *  doorbell or the timer resumes the request. SL_OK (yield), SL_ERROR out of memory. */
int sl__cache_req_wait(sl_req_t *r, uint64_t ms);
/** The worker drains: its doorbell goes (waiting requests fall back to their timers). */
void sl__cache_bell_close(sl_worker_t *w);

#endif
