/* http_conn.h — the objects of the HTTP/1.1 path, shared by conn.c, proxy_http.c,
 * pool.c, echo.c and the FFI accessors (internal: sl__ names, not part of the ABI).
 *
 * Ownership: a client connection (sl_conn_t) is owned by its worker and lives
 * from accept to close. A request (sl_req_t) is owned by its connection from
 * its first head byte to the end of its response; request objects are recycled
 * through a per-worker freelist. An upstream connection (sl_upconn_t) is owned
 * by the request using it, or by the worker's idle pool between requests.
 *
 * Buffers: a connection's read buffer (`rbuf`, a block) holds the current
 * request head at [head_off, head_end) for the whole request, body bytes after
 * it, and pipelined bytes after the message end. It is released whenever the
 * connection is idle with nothing buffered, so an idle keep-alive connection
 * holds no buffer.
 */
#ifndef SL_HTTP_CONN_H
#define SL_HTTP_CONN_H

#include <uv.h>

#include "base/deadline.h"
#include "proto/hdr_edit.h"
#include "proto/http1.h"
#include "ctx/worker.h"

#define SL_SPANS 16                     /* body slices queued per write */
#define SL_IOV (SL_SPANS * 3 + 4)       /* head + 100-continue + spans (size, data, CRLF) + end */

enum { SL_CONN_IDLE = 0, SL_CONN_HEAD, SL_CONN_ACTIVE, SL_CONN_CLOSED };
/* A connection's first bytes on a listener with accept_proxy_protocol: a trusted peer's
 * PROXY header is due (it is taken off), or an untrusted peer's must not be one. */
enum { SL_CONN_PP_DONE = 0, SL_CONN_PP_EXPECT, SL_CONN_PP_REFUSE };
/* SL_MODE_TUNNEL: the upstream answered 101 to an upgrade; the request object stays as the
 * owner of the byte tunnel (tunnel.c) until the connection ends. */
enum { SL_MODE_PROXY = 1, SL_MODE_BUFFER, SL_MODE_LOCAL, SL_MODE_TUNNEL };
/* Where a request is in its life: the Lua phases run between routing and content. */
enum { SL_STAGE_REWRITE = 0, SL_STAGE_ACCESS, SL_STAGE_CONTENT, SL_STAGE_RESPONSE };
enum { SL_UP_CONNECTING = 1, SL_UP_ACTIVE, SL_UP_IDLE, SL_UP_CLOSED };

/** Bytes queued for one direction, written with one writev at a time. */
typedef struct {
    uv_buf_t iov[SL_IOV];
    char sizes[SL_SPANS + 1][20]; /**< chunk-size lines when re-chunking */
    uint16_t niov, nsizes;
    uint8_t writing;              /**< a uv_write is in flight */
    uint8_t chunked;              /**< spans are framed as chunks */
} sl_outq_t;

struct sl_conn_s {
    uv_tcp_t tcp; /* first: the handle's address is the connection's */
    sl_deadline_t timer;
    uv_write_t wreq; /* here, not in the request: a cancelled write calls back after the request is gone */
    uv_shutdown_t sreq; /* sl__conn_shutdown's; here for the same reason as wreq */
    sl_worker_t *w;
    const sl_listener_conf_t *lc;
    uint32_t lidx;
    char *rbuf;          /**< block or NULL */
    uint32_t rlen, rpos; /**< filled bytes; bytes consumed by the parser */
    uint8_t state;       /**< SL_CONN_* */
    uint8_t reading;
    uint8_t closing;     /**< no further request on this connection */
    uint8_t peer_eof;
    uint8_t nclose;      /**< handles still closing */
    uint8_t proxy;       /**< accept_proxy_protocol, before the first request: SL_CONN_PP_* */
    uint8_t tunnel;      /**< read bytes go to the request's tunnel (tunnel.c), not the parser */
    uint8_t wshut;       /**< sl__conn_shutdown: 1 asked, 2 done (or failed); nothing more is written */
    sl_h1_t h1;
    struct sl_tls_s *tls; /**< TLS session on a tls listener (tls.c), else NULL */
    sl_req_t *req;       /**< the request being served, or NULL */
    sl_conn_t *prev, *next;
    char peer[48];       /**< client address as text, for X-Forwarded-For and logs */
};

struct sl_upconn_s {
    uv_tcp_t tcp;
    sl_deadline_t timer;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_shutdown_t sreq; /**< a tunnel's half-close toward the upstream */
    sl_worker_t *w;
    sl_req_t *req; /**< the request using it; NULL while pooled */
    uint32_t upstream, target;
    char *rbuf;
    uint32_t rlen, rpos;
    uint8_t state; /**< SL_UP_* */
    uint8_t reading;
    uint8_t eof;
    uint8_t nclose;
    uint32_t nreqs; /**< exchanges completed on it: >0 means a reused connection */
    sl_h1_t h1;
    struct sl_tls_s *tls; /**< TLS to the target (tls.c), else NULL */
    sl_upconn_t *pool_next, *pool_prev;
};

struct sl_req_s {
    sl_conn_t *c;
    sl_worker_t *w;
    sl_req_t *free_next;
    sl_h1_head_t head;  /**< the client's request; slices of c->rbuf */
    sl_h1_head_t rhead; /**< the upstream's response; slices of up->rbuf until rebuilt */
    uint32_t head_off, head_end;
    int route;          /**< index into cfg->routes, -1 when none */
    uint32_t strip;     /**< bytes of path removed by strip_prefix */
    uint8_t mode;       /**< SL_MODE_* */
    uint8_t body_done;  /**< client request fully read */
    uint8_t req_sent;   /**< request fully written upstream */
    uint8_t resp_head;  /**< response head queued to the client */
    uint8_t resp_written; /**< some of the response went to the client socket */
    uint8_t resp_done;  /**< response fully queued */
    uint8_t resp_eof_body; /**< response body is delimited by the upstream's close */
    uint8_t keep_alive; /**< the client connection may serve another request */
    uint8_t retried;    /**< a dead pooled connection was replaced once */
    uint8_t upgrade;    /**< forwarded as an upgrade (the route allows the client's Upgrade) */
    /** The byte tunnel after a 101 (tunnel.c): each direction moves one read buffer's bytes
     *  at a time through upq/clq, and ends on its own (EOF -> shutdown toward the other). */
    struct {
        uint32_t cu_end;  /**< client->upstream: c->rbuf bytes in flight end here */
        uint32_t uc_end;  /**< upstream->client: u->rbuf bytes in flight end here */
        uint8_t cl_eof;   /**< the client's EOF was read */
        uint8_t up_eof;   /**< the upstream's EOF was read */
        uint8_t up_shut;  /**< shutdown toward the upstream: 1 asked, 2 done (client->upstream over) */
        uint8_t cl_shut;  /**< shutdown toward the client: 1 asked, 2 done (upstream->client over) */
        uint64_t drain_at;/**< loop ms when a draining worker closes it; 0: not draining */
    } tun;
    /* upstream attempts: target choice, breaker admission, retries (see "attempts" in proxy_http.c) */
    uint8_t attempts;   /**< attempts started (retries are attempts after the first) */
    uint8_t admit;      /**< sl_admit_t of the current attempt's breaker admission */
    uint8_t outcome_due;/**< the current attempt's outcome is not recorded yet */
    uint8_t in_flight;  /**< the current attempt counts in its target's in-flight */
    uint8_t up_wrote;   /**< request bytes went to an upstream socket */
    uint8_t to_address; /**< upstream.set(address): r->address, not a configured upstream */
    struct sockaddr_storage address;
    char address_text[64];
    int next_target;    /**< a retry's target, chosen (and admitted) before the backoff; -1 */
    uint32_t retry_after_s; /**< a 503 for open breakers: its Retry-After */
    uint8_t hedged;     /**< a hedge attempt was started (at most one per request) */
    uint16_t lua_target;/**< the balancer phase's choice: target index + 1 (0: none) */
    /** The hedge attempt (retry.hedge_after), while it races the current one: the same
     *  fields as the current attempt's, swapped in by attempt_swap(). */
    struct {
        sl_upconn_t *up;
        int target;
        uint8_t admit, outcome_due, in_flight, sent;
        uint64_t start_ns;
    } hedge;
    uint64_t tried;     /**< targets tried, bit (t % 64) */
    uint64_t skip;      /**< targets whose breaker refused during this pick */
    int status;         /**< status sent to the client */
    int upstream;       /**< cfg upstream index or -1 */
    int target;
    sl_upconn_t *up;
    uint64_t start_ns, up_start_ns;
    uint64_t body_in;   /**< request body bytes read */
    uint64_t bytes_out; /**< response bytes handed to the client socket */
    sl_outq_t upq;      /**< toward the upstream */
    uv_buf_t uphead;    /**< the rebuilt request head, kept for a retry */
    uint16_t body_err;  /**< status for a body the client got wrong (400, 413) */
    sl_outq_t clq;      /**< toward the client */
    sl_arena_t arena;   /**< rebuilt heads and canned answers */
    char *heap;         /**< a malloc'ed buffer freed with the request (echo) */
    size_t heap_len, heap_cap;
    char consumer[65];  /**< ctx.consumer after the access phase (auth plugins) */
    uint8_t consumer_len;
    char rid[33];       /**< X-Request-ID */
    uint8_t rid_len;
    char host[256];     /**< Host, lower-cased, port removed: what the router matches */
    uint16_t host_len;
    /* plugin runtime */
    uint8_t stage;      /**< SL_STAGE_* */
    uint8_t lua_phase;  /**< the phase running (or waiting) in Lua, SL_PHASE_* */
    uint8_t lua_waiting;/**< the request's coroutine yielded: an event resumes it */
    uint8_t body_buffered; /**< the whole body is in heap (a plugin read it, or a retry may replay it) */
    uint8_t replay_wait;   /**< reading the body whole before the first attempt (retries) */
    uint64_t buffer_max;   /**< cap of a buffered body; 0: SL_BUFFER_MAX_BODY */
    uint8_t in_header_filter;
    uint8_t logged;
    uint8_t phases;     /**< SL_PHASE_* bits the route's chain defines */
    int co_ref, ctx_ref;/**< registry refs of the coroutine and ctx table (0: none) */
    lua_State *co;
    struct sl_wait_s *wait; /**< what the coroutine waits for (NULL: nothing) */
    sl_hdr_edits_t req_edits, resp_edits;
    sl_str_t path_override; /**< set_path: replaces path (and strip_prefix) upstream */
    sl_str_t query_override; /**< set_query: replaces the query upstream (query_set) */
    uint8_t query_set;
    /* body_filter: the piece being filtered, and a plugin's replacement (bf_buf) */
    const char *bf_in;
    size_t bf_in_len;
    char *bf_buf;
    size_t bf_len, bf_cap;
    uint8_t bf_eof;     /**< the piece is the body's last */
    uint8_t bf_set;     /**< a plugin replaced the piece: bf_buf holds the output */
    uint8_t bf_failed;  /**< a body_filter raised: the response is cut off */
    uint8_t bf_end;     /**< the upstream body ended: the last (eof) call is due */
    int exit_status;    /**< response.exit: status (0: none) */
    sl_str_t exit_body;
    char *exit_alloc;   /**< exit_body when too large for the arena; freed with the request */
};

/** What a yielded coroutine waits for (a sleep's timer, an http call). Malloc'ed by its
 *  owner: closing a handle outlives the request. */
enum { SL_WAIT_SLEEP = 1, SL_WAIT_HTTP, SL_WAIT_BACKOFF, SL_WAIT_HEDGE, SL_WAIT_REDIS };
typedef struct sl_wait_s {
    sl_req_t *r; /**< NULL once the request is gone */
    int kind;    /**< SL_WAIT_* */
    /** The request ends first: stop, and free once the handles are closed. */
    void (*cancel)(struct sl_wait_s *wt);
} sl_wait_t;

/* conn.c */
void sl__conn_on_accept(uv_stream_t *server, int status);
/** Continues the connection after its request finished (next pipelined request, idle, close). */
void sl__conn_request_done(sl_conn_t *c);
/** Closes a client connection now, abandoning any request. */
void sl__conn_abort(sl_conn_t *c);
void sl__conn_start_reading(sl_conn_t *c);
/** Writes a queue toward the client (through TLS when the listener has it), with
 *  sl__outq_write's contract: 1 written at once, 0 in flight (cb follows), <0 error. */
int sl__conn_write(sl_conn_t *c, sl_outq_t *q, uv_write_cb cb);
/** Writes a few gateway bytes (100 Continue, a 408) without waiting: false when they
 *  could not be queued. */
bool sl__conn_send(sl_conn_t *c, const char *p, size_t n);
void sl__conn_stop_reading(sl_conn_t *c);
/** Half-closes the connection toward the client after what was written (a FIN; through
 *  TLS a close_notify first). Reads go on. Once per connection; later calls do nothing.
 *  c->wshut becomes 2 when it completed (or could not be started); a tunnel on the
 *  connection then hears of it through sl__tunnel_on_client_shutdown, never from
 *  inside this call. */
void sl__conn_shutdown(sl_conn_t *c);
/** (Re)arms the connection's inactivity timer: on expiry an active request is abandoned. */
void sl__conn_arm(sl_conn_t *c, uint64_t ms);
void sl__worker_close_idle_conns(sl_worker_t *w);

/* proxy_http.c */
/** Routes a parsed request and starts answering it. */
void sl__req_begin(sl_req_t *r);
/** The client sent more bytes for the active request. */
void sl__req_on_client_data(sl_req_t *r);
/** Answers with a gateway-made response (status, JSON body). */
void sl__req_respond(sl_req_t *r, int status, sl_str_t ctype, sl_str_t body, bool close);
/** Releases a request that is over: upstream connection, arena, object. */
void sl__req_free(sl_req_t *r);
/** Client connection went away: abandon the request and its upstream. */
void sl__req_abort(sl_req_t *r);

/** Upstream reads (the connection's own buffer and callbacks). */
void sl__up_start_reading(sl_upconn_t *u);
void sl__up_stop_reading(sl_upconn_t *u);

/* tunnel.c */
/** The upstream answered 101 to r's upgrade and the 101 head is in r->clq: switch the
 *  client connection and r->up into a byte tunnel. Bytes already buffered on either side
 *  go first. The request object owns the tunnel until sl__req_abort ends it. */
void sl__tunnel_start(sl_req_t *r);
/** conn.c: the client connection read nread bytes (appended to c->rbuf), 0, or an error/EOF. */
void sl__tunnel_on_client_read(sl_req_t *r, ssize_t nread);
/** proxy_http.c: the upstream connection read nread bytes (appended to u->rbuf), 0 or EOF. */
void sl__tunnel_on_upstream_read(sl_req_t *r, ssize_t nread);
/** A write toward the upstream (on u->wreq) completed. */
void sl__tunnel_on_upstream_written(sl_req_t *r, int status);
/** conn.c: sl__conn_shutdown completed (c->wshut is 2). */
void sl__tunnel_on_client_shutdown(sl_req_t *r);
/** The worker drains: the tunnel ends at the latest shutdown_timeout from now. */
void sl__tunnel_drain(sl_req_t *r);

/* redis.c */
typedef struct sl_redis_s sl_redis_t;
int sl__redis_init(sl_worker_t *w);
/** Drain: closes the worker's Redis connection. */
void sl__redis_close(sl_worker_t *w);
void sl__redis_free(sl_worker_t *w);

/* pool.c */
sl_upconn_t *sl__pool_get(sl_worker_t *w, uint32_t upstream, uint32_t target);
/** Parks a clean connection; closes it when the pool is full or draining. */
void sl__pool_put(sl_worker_t *w, sl_upconn_t *u);
void sl__upconn_close(sl_upconn_t *u);
void sl__pool_close_all(sl_worker_t *w);

/* outq (proxy_http.c) */
void sl__outq_reset(sl_outq_t *q);
bool sl__outq_add(sl_outq_t *q, const char *p, size_t n);
bool sl__outq_span(sl_outq_t *q, const char *p, size_t n);
bool sl__outq_end_chunks(sl_outq_t *q);
uint32_t sl__outq_room(const sl_outq_t *q);
/** Writes the queue: 1 when written at once, 0 when a write is in flight, <0 on error. */
int sl__outq_write(sl_outq_t *q, uv_stream_t *s, uv_write_t *wr, uv_write_cb cb);
/** sl__outq_write through a TLS session when `tls` is not NULL. */
int sl__stream_write(sl_outq_t *q, uv_stream_t *s, struct sl_tls_s *tls, uv_write_t *wr, uv_write_cb cb);

/** Calls fire(r) after ms on the worker's loop; r->wait holds it (cancelled when the
 *  request ends first). SL_OK, or SL_ERROR when out of memory. */
int sl__req_wait_ms(sl_req_t *r, uint64_t ms, int kind, void (*fire)(sl_req_t *r));
/** The request's coroutine may continue (a sleep ended, its body arrived). */
void sl__req_wakeup(sl_req_t *r);
/** Starts buffering the request body for a plugin; SL_OK when already whole. */
int sl__req_buffer_body(sl_req_t *r);

#endif
