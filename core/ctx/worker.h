/* worker.h — one event-loop thread: its loop, listeners, pools, Lua VM and counters.
 *
 * Everything here is owned by one worker thread and touched only by it, except
 * `metrics` (read by the admin thread with relaxed loads) and `async` (the main
 * thread's doorbell for drain). Nothing on a worker's path takes a lock.
 */
#ifndef SL_WORKER_H
#define SL_WORKER_H

#include <lua.h>
#include <pthread.h>
#include <uv.h>

#include "base/thread.h"
#include "base/block.h"
#include "base/list.h"
#include "config/config.h"
#include "ctx/metrics.h"
#include "net/tls.h"

typedef struct sl_server_s sl_server_t;
typedef struct sl_conn_s sl_conn_t;
typedef struct sl_upconn_s sl_upconn_t;
typedef struct sl_req_s sl_req_t;

/** A worker's connections to one target (heads initialised by sl_worker_init). */
typedef struct {
    sl_list_t pool; /**< idle keep-alive HTTP/1.1 connections (sl_upconn_t), most recently used first */
    uint32_t n;     /**< connections in `pool` */
    sl_list_t h2;   /**< HTTP/2 connections to the target, busy or idle (http/h2_up.c), newest first */
} sl_idle_list_t;

typedef struct {
    sl_idle_list_t *idle;   /**< [ntargets] */
} sl_upstream_state_t;

typedef struct sl_worker_s {
    int id;
    sl_server_t *srv;
    const sl_config_t *cfg;
    const struct sl_upgen_s *ug; /**< the generation's balancers and target states */
    uv_loop_t loop;
    sl_thread_t thread;     /**< on a stack mapped for it, unmapped after the join */
    uv_async_t async;       /**< drain (and later cut): unref'd once draining, closed at destroy */
    uv_tcp_t *listeners;    /**< [cfg->nlisteners] */
    uint16_t *listen_ports; /**< [cfg->nlisteners] each listener's bound port (X-Forwarded-Port) */
    sl_blockpool_t blocks;
    uv_timer_t block_trim;  /**< trims `blocks` every SL_BLOCK_TRIM_INTERVAL_MS (unref'd) */
    uv_prepare_t wake_pre;  /**< clear the wake clock (sl_wake_ns) before the poll (unref'd) */
    uv_check_t wake_post;   /**< and after its callbacks (unref'd) */
    struct sl_h1_limits_s *limits; /**< [cfg->nlisteners] request-head limits */
    struct sl_h1_limits_s *resp_limits; /**< upstream response heads */
    sl_req_t *free_reqs;    /**< recycled request objects */
    uint32_t nfree_reqs;
    sl_upstream_state_t *ups; /**< [cfg->nupstreams] */
    sl_list_t conns;        /**< every open client connection (sl_conn_t), for drain */
    uint32_t nconns;
    uint32_t nupconns;      /**< open upstream connections, idle or busy */
    bool draining;
    bool retiring;          /**< drained because a reload replaced it, not for shutdown */
    bool stopped;           /**< the thread's loop ended (atomic) */
    bool tcp_ended;         /**< draining: no TCP session of it is open any more (atomic) */
    bool cut;               /**< draining: end its TCP sessions now, as at shutdown_timeout
                                 (atomic; set before `async` is sent: a second SIGTERM) */
    bool async_open;        /**< `async` is initialised and not closed (its loop's thread, or
                                 the thread that destroys the worker once the loop ended) */
    bool running;           /**< the thread's loop started (atomic): a reload's acknowledgement */
    int nworkers;           /**< of its generation: listen_fds is [listener][nworkers] */
    uint64_t generation;    /**< the config generation it serves (srv->generation's number) */
    int *listen_fds;        /**< borrowed from the server or the reload that made it */
    lua_State *L;
    int lua_dispatch;       /**< registry ref of the match-function dispatcher (lua_routes) */
    int lua_phase;          /**< registry ref of the phase dispatcher */
    int lua_preread;        /**< registry ref of the tcp listeners' preread dispatcher */
    struct sl_lua_pool_s *lua_pool; /**< requests' coroutines and ctx tables kept for reuse (lua_host.c) */
    uint8_t *route_phases;  /**< [cfg->nroutes] SL_PHASE_* bits of each route's chain */
    uint64_t rid_seed, rid_seq; /**< request-id generator */
    sl_wmetrics_t metrics;
    sl_tls_pump_t tls_pump; /**< TLS sessions with bytes in hand to deliver (tls.c) */
    struct sl_tls_client_s *http_tls[2]; /**< http.request's https contexts (system CAs): [verify] */
    struct sl_redis_s *redis; /**< the worker's Redis connection (redis.c); NULL without redis: */
    struct sl_tcpw_s *tcp;  /**< tcp listeners, sessions and pipe pool (tcp_proxy.c); NULL without them */
    struct sl_cache_bell_s *cache_bell; /**< the proxy-cache's doorbell and its waiting requests
                                             (http/cache_req.c); NULL until one waits */
} sl_worker_t;

/** Prepares worker `id` of config `cfg` (loop, pools, Lua) on the calling thread. 0 or -1 with *err. */
int sl_worker_init(sl_worker_t *w, sl_server_t *srv, const sl_config_t *cfg, int id, const char **err);
/** Starts the worker's thread: it opens its listeners on fds the server bound. */
int sl_worker_start(sl_worker_t *w);
/** Main thread: asks the worker to stop accepting and finish in-flight work. */
void sl_worker_drain(sl_worker_t *w);
/** Main thread, after sl_worker_drain, at most once: end the drain's TCP sessions now, as
 *  shutdown_timeout would (a second SIGTERM). */
void sl_worker_cut(sl_worker_t *w);
void sl_worker_join(sl_worker_t *w);
void sl_worker_destroy(sl_worker_t *w);

#endif
