/* server.h — the process: config, worker threads, signals, admin and drain.
 *
 * The main thread owns the server: it binds every listening socket (one per
 * worker and listener, SO_REUSEPORT, so the kernel spreads connections), starts
 * the workers, handles signals and serves the admin API on its own loop.
 */
#ifndef SL_SERVER_H
#define SL_SERVER_H

#include <uv.h>

#include "config.h"
#include "worker.h"

struct sl_server_s {
    sl_config_t *cfg;
    uv_loop_t *loop;           /**< the main thread's loop */
    sl_worker_t *workers;
    int nworkers;
    int *listen_fds;           /**< [nlisteners][nworkers] */
    char (*listen_text)[80];   /**< [nlisteners]: the bound address, real port included */
    char admin_text[80];
    const char *ready_file;
    int draining;              /**< atomic: set once on SIGTERM/SIGINT */
    uint64_t generation;
    uint64_t started_ms;
    int exit_code;
    bool embedded;             /**< in-process (sluice.test): no signals, no _exit */
    uv_loop_t own_loop;        /**< the main loop when embedded */
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t drain_poll, drain_deadline;
    uv_async_t stop_async;     /**< another thread asks for a drain (embedded) */
    uv_tcp_t admin_listener;
    bool admin_open;
    int started;               /**< workers started */
};

/** Runs the server on `cfg` until it is told to stop; returns the process exit code. */
int sl_server_run(sl_config_t *cfg, const char *ready_file);

/**
 * In-process servers (sluice.test): sl_server_start binds, starts the workers and the
 * admin listener on a private loop, and returns; sl_server_loop runs that loop (on a
 * thread of the caller's) until sl_server_stop drains it. Returns 0 or -1 with *err.
 */
int sl_server_start(sl_server_t *srv, sl_config_t *cfg, bool embedded, const char **err);
void sl_server_loop(sl_server_t *srv);
/** Any thread: starts the drain; sl_server_loop returns when every worker finished. */
void sl_server_stop(sl_server_t *srv);
/** After sl_server_loop returned: joins the workers and frees what start allocated. */
void sl_server_cleanup(sl_server_t *srv);

/** True once the server started draining. Any thread. */
static inline bool sl_server_draining(const sl_server_t *s) {
    return __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE) != 0;
}

#endif
