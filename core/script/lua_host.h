/* lua_host.h — a worker's LuaJIT VM and the calls the C core makes into it.
 *
 * Each worker owns one VM. C enters Lua through one small dispatcher per
 * concern (the design: a handler called straight from C with lua_pcall is never
 * JIT-compiled; a dispatcher that calls it is): lua_routes' match functions, and the phase
 * dispatcher, which runs a route's chain for one phase inside the request's
 * coroutine, so plugins can yield (sleep, read the body) while the loop runs on.
 */
#ifndef SL_LUA_HOST_H
#define SL_LUA_HOST_H

#include "ctx/worker.h"

/* Phase ids SL_PHASE_* and the dispatchers' SL_CHAIN_* results are in sluice.h: they
 * cross into Lua. */
#define SL_PHASE_N (SL_PHASE_BALANCER + 1)

struct lua_State;
/** Sets hosts, paths, methods and headers of route rc on the table at the top of L's
 *  stack, as sluice.router reads them (the worker's generation and `sluice explain`). */
void sl__lua_set_match(struct lua_State *L, const sl_route_conf_t *rc);

/** Longest chain (global plugins + a route's): bounds the per-plugin error counters. */
#define SL_MAX_CHAIN 32

/** Opens w->L: the router and every route's plugin chain. 0, or -1 with *err. */
int sl_lua_open(sl_worker_t *w, const char **err);
void sl_lua_close(sl_worker_t *w);

/** A request's Lua state: its coroutine and ctx table, taken at its first phase (from the
 *  worker's pool, else made) and given back by sl_lua_task_end. Owned by the request
 *  (zeroed with it). */
typedef struct {
    lua_State *co;
    int co_ref, ctx_ref; /**< registry refs of the coroutine and ctx table (0: none) */
    uint32_t serial;     /**< the request's number in its worker VM (tells reused ctx apart) */
    uint8_t phase;       /**< the SL_PHASE_* running (or waiting) */
    uint8_t waiting;     /**< the coroutine yielded: an event resumes it */
    uint64_t mark;       /**< when the running plugin's call began (sl_ticks): set as a
                              phase starts and by each sl_ffi_plugin_timed, when timed */
} sl_lua_task_t;

/** Who a phase runs for, for its log lines and counters: the request (an opaque FFI
 *  handle), its route index (-1: none) and its request id. */
typedef struct {
    void *req;
    int route;
    const char *rid;
} sl_lua_who_t;

/** Whether the Lua `match` function of route `route` (a lua_routes route; the C router,
 *  config/router.h, found its other conditions hold) says yes for a request (an opaque FFI
 *  handle). A function that raises is logged and says no. */
bool sl_lua_route_match(sl_worker_t *w, void *req, int route);

/** SL_PHASE_* bits of the phases route `route` defines (0 for -1). */
uint8_t sl_lua_route_phases(sl_worker_t *w, int route);

/**
 * Runs `phase` of the route's chain for a request, in its coroutine (t). SL_OK: carry on.
 * SL_DONE: a plugin answered. SL_EAGAIN: the coroutine yielded; the event it waits for
 * resumes it through sl_lua_resume. SL_ERROR: a plugin failed (logged and counted):
 * answer 500. Only rewrite and access may wait.
 */
int sl_lua_phase(sl_worker_t *w, sl_lua_task_t *t, sl_lua_who_t who, int phase);
int sl_lua_resume(sl_worker_t *w, sl_lua_task_t *t, sl_lua_who_t who);
/** The request (its FFI handle) whose phase runs on this thread's worker VM, or NULL:
 *  what sl_ffi_plugin_timed(NULL, pos) times. */
void *sl_lua_current(void);
/** Releases a request's coroutine and ctx. */
void sl_lua_task_end(sl_worker_t *w, sl_lua_task_t *t);
/** The request answers while its coroutine waits (its gRPC deadline passed in a plugin's
 *  sleep): the suspended coroutine is dropped, never resumed; the request's later phases
 *  (header_filter, log) get a new one with the same ctx, as after a failed phase. */
void sl_lua_task_abandon(sl_worker_t *w, sl_lua_task_t *t);

/**
 * Runs tcp listener `lidx`'s preread chain (its `plugins:`) for one session (an opaque FFI
 * handle), at once: preread cannot wait (sleep, http, redis raise). SL_OK: carry on to the
 * session's upstream (possibly changed). SL_DONE: a plugin closed the session. SL_ERROR:
 * a plugin raised (logged with the listener and plugin, counted in
 * sluice_plugin_errors_total{route="listener:NAME"}).
 */
int sl_lua_preread(sl_worker_t *w, void *session, uint32_t lidx);

/** Where lua/ lives: $SLUICE_LUA_DIR, else PREFIX/share/sluice/lua when the running binary
 *  is PREFIX/bin/sluice and that folder exists (an installed binary), else the source tree
 *  this binary was built from. Resolved once per process. Any thread. */
const char *sl_lua_dir(void);
/** Where the built-in plugins live: $SLUICE_PLUGIN_DIR, else PREFIX/share/sluice/plugins
 *  (as for sl_lua_dir), else <source>/plugins. */
const char *sl_builtin_plugin_dir(void);

/** Opens a VM with package.path set for lua/; NULL with *err on failure. Any thread. */
lua_State *sl_lua_new_state(const char **err);

#endif
