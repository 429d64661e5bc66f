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
};

/** Runs the server on `cfg` until it is told to stop; returns the process exit code. */
int sl_server_run(sl_config_t *cfg, const char *ready_file);

/** True once the server started draining. Any thread. */
static inline bool sl_server_draining(const sl_server_t *s) {
    return __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE) != 0;
}

#endif
