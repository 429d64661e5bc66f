/* server.h — the process: config, worker threads, signals, admin and drain.
 *
 * The main thread owns the server: it binds every listening socket (one per
 * worker and listener, SO_REUSEPORT, so the kernel spreads connections), starts
 * the workers, handles signals and serves the admin API on its own loop.
 */
#ifndef SL_SERVER_H
#define SL_SERVER_H

#include <uv.h>

#include "base/addr.h"
#include "config/config.h"
#include "upstream/discovery.h"
#include "upstream/health.h"
#include "upstream/upstreams.h"
#include "ctx/worker.h"

/** A worker set a reload replaced: it finishes its in-flight work on its own config. */
typedef struct sl_retired_s {
    struct sl_retired_s *next;
    sl_config_t *cfg;
    sl_upgen_t *ug;
    sl_worker_t *workers;
    int nworkers;
    int *listen_fds;
} sl_retired_t;

struct sl_server_s {
    sl_config_t *cfg;
    sl_upgen_t *ug;            /**< the live side of cfg's upstreams (balancers, target states) */
    sl_tregistry_t treg;       /**< target states by (upstream, address), kept across reloads */
    sl_health_t health;        /**< active probes of the current generation */
    sl_discovery_t *disc;      /**< DNS names and registered targets, bound to `ug` */
    uv_loop_t *loop;           /**< the main thread's loop */
    sl_worker_t *workers;
    int nworkers;
    int *listen_fds;           /**< [nlisteners][nworkers] */
    char (*listen_text)[80];   /**< [nlisteners]: the bound address, real port included */
    char admin_text[80];
    const char *ready_file;
    int draining;              /**< atomic: set once on SIGTERM/SIGINT */
    bool cut;                  /**< a second SIGTERM/SIGINT ended the drain early (main loop) */
    uint64_t generation;
    uint64_t started_ms;
    int exit_code;
    bool embedded;             /**< in-process (sluice.test): no signals, no _exit */
    uv_loop_t own_loop;        /**< the main loop when embedded */
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t drain_poll, drain_deadline;
    uint64_t exit_by;          /**< past shutdown_timeout: _exit at the latest then (loop ms) */
    uv_async_t stop_async;     /**< another thread asks for a drain (embedded) */
    uv_tcp_t admin_listener;
    bool admin_open;
    int started;               /**< workers started */
    /* reload (reload.c) */
    const char *config_path;   /**< what a reload reads; NULL: the embedded default */
    bool owns_cfg;             /**< cfg was made by a reload: freed with its generation */
    sl_retired_t *retired;
    uv_timer_t retire_poll;
    bool retire_poll_on;
    uint64_t reloads_ok, reloads_rejected;
    uint64_t config_hash;      /**< config text + plugin code, as reported by /reload */
    uint64_t code_hash;        /**< plugin code alone: "plugin_code" in a reload's changes */
    struct sl_gen_files_s *files; /**< the served generation's files (certificates, files
                                       plugins read) with their content hashes (reload.c) */
    uint64_t watch_hash;       /**< what the file watch last saw */
    /** The last rejected reload, for /status: wall-clock seconds (0: none yet), its
     *  trigger ("SIGHUP", "admin", "file change") and its error lines; owned. */
    int64_t last_reject_unix;
    char last_reject_trigger[32];
    char *last_reject_error;
    /** The last SL_GEN_HISTORY generations applied (the dashboard's list): number, hash,
     *  wall-clock seconds, the reload's "changed" JSON items (owned); [gen_next % N] next. */
    struct {
        uint64_t generation, hash;
        int64_t unix_s;
        char *changed;
    } gens[8];
    unsigned gen_next;
    sl_config_t *boot_cfg;     /**< the first generation's config: main() owns it */
    uv_fs_event_t *watches;    /**< config file's folder and plugin folders, when watch: true */
    size_t nwatches;
    char **watch_dirs;         /**< the folders watched (owned), as many as nwatches */
    size_t nwatch_dirs;
    uv_timer_t watch_debounce;
    bool watch_on;
    struct sl_etcd_s *etcd;    /**< config_source: etcd (server/etcd.h), else NULL */
    /* work off the main loop (reload.c): the build in flight, the reloads asked for while
     * it runs, and the threads freeing retired generations */
    struct sl_reload_job_s *reload_job;
    struct sl_reload_wait_s *reload_queue;
    uv_async_t reload_async;   /**< a build thread finished */
    bool reload_async_on;
    struct sl_reaper_s *reapers;
};

/** Runs the server on `cfg` until it is told to stop; returns the process exit code. */
int sl_server_run(sl_config_t *cfg, const char *config_path, const char *ready_file);

/**
 * In-process servers (sluice.test): sl_server_start binds, starts the workers and the
 * admin listener on a private loop, and returns; sl_server_loop runs that loop (on a
 * thread of the caller's) until sl_server_stop drains it. Returns 0 or -1 with *err.
 */
int sl_server_start(sl_server_t *srv, sl_config_t *cfg, bool embedded, const char **err);
/** Places the main thread (and so what it starts later: a reload's build, the freeing of a
 *  generation) on the process's CPUs less those srv->cfg's workers are pinned to
 *  (`worker_cpus`), while any are left; all of them otherwise. Not when embedded. */
void sl__server_place_main(const sl_server_t *srv);
/** Whether the main thread (and what it starts) runs on CPUs no worker is pinned to: a
 *  reload's build then needs no lower priority to leave the workers their CPUs. */
bool sl__server_workers_apart(const sl_server_t *srv);
void sl_server_loop(sl_server_t *srv);
/** Any thread: starts the drain; sl_server_loop returns when every worker finished. */
void sl_server_stop(sl_server_t *srv);
/** After sl_server_loop returned: joins the workers and frees what start allocated. */
void sl_server_cleanup(sl_server_t *srv);

/** A reload's answer: rc 0 (applied, or nothing to apply) or -1 (rejected: nothing
 *  changed), and the /reload JSON (malloc'ed, the callee's to free; may be NULL). */
typedef void (*sl_reload_cb)(sl_server_t *srv, int rc, char *json, void *ud);

/**
 * Builds the config again (file and plugins) and, when valid, swaps in a new worker set
 * that takes over the same listening sockets; the old set drains on its old config.
 * forced (SIGHUP, POST /reload): a new generation even when the content hash is the
 * running one's; otherwise (file watch, etcd) such a reload applies nothing.
 *
 * The build runs on a thread of its own at nice 19 (reload.c), so the call returns at
 * once and `cb` (may be NULL) hears the answer on the main loop once the new workers serve
 * or the build was rejected. A reload asked for while one builds waits for it, then one
 * more build answers every reload asked for meanwhile. Main thread.
 */
void sl_server_reload(sl_server_t *srv, const char *why, bool forced, sl_reload_cb cb, void *ud);
/** Starts watching the config file and plugin folders (watch: true). Main thread. */
void sl_server_watch(sl_server_t *srv);
/** Content hash of a config text and the plugin files it can load. */
uint64_t sl_config_hash(const sl_config_t *cfg, const char *text, size_t len);

/* Between server.c and reload.c. */
/* admin.c: the admin API listener (admin.listen) on the main loop. 0 or -1 with *err. */
int sl_admin_start(sl_server_t *srv, const char **err);
void sl_admin_stop(sl_server_t *srv);

void sl__reload_init(sl_server_t *srv);
void sl__reload_close(sl_server_t *srv);
void sl__reload_free_retired(sl_server_t *srv);
/** Generations replaced and not yet freed: draining, or being freed (/status's
 *  retiring_generations). Main thread. */
int sl__reload_retiring(const sl_server_t *srv);

/** True once the server started draining. Any thread. */
static inline bool sl_server_draining(const sl_server_t *s) {
    return __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE) != 0;
}

/** Writes srv->ready_file (when set) with the listeners' real addresses: at start, and
 *  again when a reload adds, moves or removes a listener, so it never names a port nobody
 *  listens on. SL_OK or SL_ERROR. Main thread. */
int sl__server_write_ready_file(sl_server_t *srv);

/** Records the generation now served (srv->generation, srv->config_hash) with its reload's
 *  "changed" JSON items (owned from here; NULL for the first). Main thread. */
void sl__server_note_generation(sl_server_t *srv, char *changed);

#endif
