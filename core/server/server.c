/* server.c — process lifetime: bind, start workers, admin, signals, ready file, drain. */
#include "server/server.h"
#include "ctx/telemetry.h"
#include <time.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "server/listen.h"
#include "upstream/cache.h"
#include "server/notify.h"
#include "server/privileges.h"
#include "base/cpu.h"
#include "script/lua_host.h"
#include "base/log.h"
#include "base/wbuf.h"

/* One socket per (listener, worker): see sl__listen_open. */
static int bind_listeners(sl_server_t *srv, const char **err) {
    static char msg[256];
    const sl_config_t *cfg = srv->cfg;
    size_t n = cfg->nlisteners * (size_t)srv->nworkers;
    srv->listen_fds = malloc((n + 1) * sizeof(int));
    srv->listen_text = calloc(cfg->nlisteners + 1, sizeof(*srv->listen_text));
    if (!srv->listen_fds || !srv->listen_text) {
        *err = "out of memory";
        return SL_ERROR;
    }
    for (size_t i = 0; i < n; i++) srv->listen_fds[i] = -1;
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        if (sl__listen_open(&cfg->listeners[i], srv->nworkers, &srv->listen_fds[i * (size_t)srv->nworkers],
                            srv->listen_text[i], sizeof(srv->listen_text[i]), msg, sizeof(msg)) != SL_OK) {
            *err = msg;
            return SL_ERROR;
        }
    }
    return SL_OK;
}

int sl__server_write_ready_file(sl_server_t *srv) {
    const sl_config_t *cfg = srv->cfg;
    char tmp[4096];
    size_t pl = strlen(srv->ready_file);
    if (pl + 8 > sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return SL_ERROR;
    }
    char body[8192];
    sl_wbuf_t b = SL_WBUF_BOUNDED(body, sizeof(body));
    char num[32];
    int n = snprintf(num, sizeof(num), "%d", (int)getpid());
    SL_WBUF_LIT(&b, "{\"pid\":");
    sl_wbuf_put(&b, num, (size_t)n);
    SL_WBUF_LIT(&b, ",\"listeners\":{");
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        if (i) SL_WBUF_LIT(&b, ",");
        SL_WBUF_LIT(&b, "\"");
        sl_wbuf_json_str(&b, (sl_str_t){cfg->listeners[i].name, strlen(cfg->listeners[i].name)});
        SL_WBUF_LIT(&b, "\":\"");
        sl_wbuf_put(&b, srv->listen_text[i], strlen(srv->listen_text[i]));
        SL_WBUF_LIT(&b, "\"");
    }
    SL_WBUF_LIT(&b, "},\"admin\":");
    if (cfg->admin_enabled) {
        SL_WBUF_LIT(&b, "\"");
        sl_wbuf_put(&b, srv->admin_text, strlen(srv->admin_text));
        SL_WBUF_LIT(&b, "\"");
    } else {
        SL_WBUF_LIT(&b, "null");
    }
    if (!SL_WBUF_LIT(&b, "}\n")) {
        errno = EMSGSIZE;
        return SL_ERROR;
    }
    memcpy(tmp, srv->ready_file, pl);
    memcpy(tmp + pl, ".tmp", 5);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return SL_ERROR;
    ssize_t w = write(fd, body, b.len);
    if (w >= 0 && w != (ssize_t)b.len) errno = EIO; /* a short write */
    close(fd);
    if (w != (ssize_t)b.len || rename(tmp, srv->ready_file) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return SL_ERROR;
    }
    return SL_OK;
}

static void on_drain_poll(uv_timer_t *t) {
    sl_server_t *srv = t->data;
    for (int i = 0; i < srv->nworkers; i++)
        if (!__atomic_load_n(&srv->workers[i].stopped, __ATOMIC_ACQUIRE)) return;
    for (sl_retired_t *r = srv->retired; r; r = r->next)
        for (int i = 0; i < r->nworkers; i++)
            if (!__atomic_load_n(&r->workers[i].stopped, __ATOMIC_ACQUIRE)) return;
    sl__reload_close(srv);
    sl_log_info("drained: every worker finished");
    uv_timer_stop(&srv->drain_poll);
    uv_timer_stop(&srv->drain_deadline);
    uv_close((uv_handle_t *)&srv->drain_poll, NULL);
    uv_close((uv_handle_t *)&srv->drain_deadline, NULL);
    if (!srv->embedded) {
        uv_close((uv_handle_t *)&srv->sig_term, NULL);
        uv_close((uv_handle_t *)&srv->sig_int, NULL);
        uv_close((uv_handle_t *)&srv->sig_hup, NULL);
    }
    uv_close((uv_handle_t *)&srv->stop_async, NULL);
    sl_admin_stop(srv);
}

/* How long past shutdown_timeout the process waits for its workers to cut their TCP
 * sessions before it exits anyway (a worker stuck in a plugin). */
#define SL_EXIT_GRACE_MS 1000

static bool workers_tcp_ended(const sl_worker_t *ws, int n) {
    for (int i = 0; i < n; i++)
        if (!__atomic_load_n(&ws[i].stopped, __ATOMIC_ACQUIRE) && !__atomic_load_n(&ws[i].tcp_ended, __ATOMIC_ACQUIRE))
            return false;
    return true;
}

/* Past shutdown_timeout: exits once every worker cut its TCP sessions (its own timer, armed
 * with the same shutdown_timeout when it started draining, fires within milliseconds). A
 * session cut with bytes still waiting ends with RSTs (tcp_proxy.c); the kernel would close
 * it with a FIN at _exit, passing a truncated stream off as complete. Connections still
 * open otherwise (HTTP) are closed by the kernel when the process exits; the ready file
 * goes first, as after a drain that ended in time (sl_server_run). */
static void on_exit_poll(uv_timer_t *t) {
    sl_server_t *srv = t->data;
    bool ended = workers_tcp_ended(srv->workers, srv->nworkers);
    for (sl_retired_t *r = srv->retired; r && ended; r = r->next) ended = workers_tcp_ended(r->workers, r->nworkers);
    if (!ended && uv_now(srv->loop) < srv->exit_by) return;
    if (!ended) sl_log_warn("a worker did not cut its TCP sessions within %dms: exiting", SL_EXIT_GRACE_MS);
    if (srv->ready_file) unlink(srv->ready_file);
    _exit(0);
}

/* The drain's end, in time or not: what is left is closed (shutdown_timeout, a second
 * SIGTERM). */
static void close_rest(sl_server_t *srv) {
    if (srv->embedded) {
        /* In-process: stop the workers' loops where they are (their sockets stay open until
         * the test process ends); the main loop ends with the drain. */
        for (int i = 0; i < srv->nworkers; i++) uv_stop(&srv->workers[i].loop);
        return;
    }
    srv->exit_by = uv_now(srv->loop) + SL_EXIT_GRACE_MS;
    uv_timer_start(&srv->drain_deadline, on_exit_poll, 0, 2);
}

/* Workers still running, of the served generation and of those a reload retired. */
static int busy_workers(const sl_server_t *srv) {
    int busy = 0;
    for (int i = 0; i < srv->nworkers; i++) busy += !__atomic_load_n(&srv->workers[i].stopped, __ATOMIC_ACQUIRE);
    for (const sl_retired_t *r = srv->retired; r; r = r->next)
        for (int i = 0; i < r->nworkers; i++) busy += !__atomic_load_n(&r->workers[i].stopped, __ATOMIC_ACQUIRE);
    return busy;
}

/* Every worker cuts its TCP sessions now (its own deadline timer, fired at once), then the
 * process exits as past the deadline; once only (a worker is cut once). A retired
 * generation's workers too: their deadline came from the reload that retired them, with
 * that config's shutdown_timeout, and may be far later than this one. */
static void cut_all(sl_server_t *srv) {
    if (srv->cut) return;
    srv->cut = true;
    for (int i = 0; i < srv->nworkers; i++) sl_worker_cut(&srv->workers[i]);
    for (sl_retired_t *r = srv->retired; r; r = r->next)
        for (int i = 0; i < r->nworkers; i++) sl_worker_cut(&r->workers[i]);
    close_rest(srv);
}

static void on_drain_deadline(uv_timer_t *t) {
    sl_server_t *srv = t->data;
    sl_log_warn("shutdown_timeout reached with %d worker(s) still busy: closing the rest", busy_workers(srv));
    cut_all(srv);
}

/* A second SIGTERM/SIGINT during the drain: shutdown_timeout now. */
static void cut_drain(sl_server_t *srv, const char *why) {
    if (srv->cut) return;
    sl_log_warn("%s during the drain: closing what is left now (%d worker(s) still busy)", why, busy_workers(srv));
    cut_all(srv);
}

static void start_drain(sl_server_t *srv, const char *why) {
    if (__atomic_exchange_n(&srv->draining, 1, __ATOMIC_ACQ_REL)) return;
    if (!srv->embedded) sl_notify("STOPPING=1");
    sl_log_info("%s: draining (shutdown_timeout %llums)", why, (unsigned long long)srv->cfg->shutdown_timeout_ms);
    sl_health_stop(&srv->health);
    sl_health_close(&srv->health);
    sl_discovery_free(srv->disc); /* the slots stay as they are while in-flight work ends */
    srv->disc = NULL;
    for (int i = 0; i < srv->nworkers; i++) sl_worker_drain(&srv->workers[i]);
    for (sl_retired_t *r = srv->retired; r; r = r->next)
        for (int i = 0; i < r->nworkers; i++) sl_worker_drain(&r->workers[i]); /* no-op when draining */
    uv_timer_init(srv->loop, &srv->drain_poll);
    uv_timer_init(srv->loop, &srv->drain_deadline);
    srv->drain_poll.data = srv->drain_deadline.data = srv;
    uv_timer_start(&srv->drain_poll, on_drain_poll, 10, 10);
    uv_timer_start(&srv->drain_deadline, on_drain_deadline, srv->cfg->shutdown_timeout_ms, 0);
}

static void on_signal(uv_signal_t *s, int signum) {
    sl_server_t *srv = s->data;
    if (signum == SIGHUP) {
        sl_server_reload(srv, "SIGHUP", true, NULL, NULL);
        return;
    }
    const char *why = signum == SIGTERM ? "SIGTERM" : "SIGINT";
    if (sl_server_draining(srv))
        cut_drain(srv, why);
    else
        start_drain(srv, why);
}

static void on_stop_async(uv_async_t *a) { start_drain(a->data, "stop requested"); }

/* The process's CPUs less those cfg's workers are pinned to: false when none are left (or
 * no worker is pinned), and then the whole set. */
static bool apart_set(const sl_config_t *cfg, cpu_set_t *out) {
    sl_cpus_allowed(out);
    if (!cfg->nworker_cpus) return false;
    cpu_set_t rest = *out;
    for (int i = 0; i < cfg->workers; i++) CPU_CLR(cfg->worker_cpus[(size_t)i % cfg->nworker_cpus], &rest);
    if (!CPU_COUNT(&rest)) return false;
    *out = rest;
    return true;
}

bool sl__server_workers_apart(const sl_server_t *srv) {
    cpu_set_t set;
    return !srv->embedded && apart_set(srv->cfg, &set);
}

void sl__server_place_main(const sl_server_t *srv) {
    if (srv->embedded) return; /* the host's thread is not ours to move */
    cpu_set_t set;
    apart_set(srv->cfg, &set);
    if (sl_cpus_place_self(&set) != 0) sl_log_warn("cannot place the main thread: %s", strerror(errno));
}

int sl_server_start(sl_server_t *srv, sl_config_t *cfg, bool embedded, const char **err) {
    memset(srv, 0, sizeof(*srv));
    srv->cfg = cfg;
    srv->boot_cfg = cfg;
    sl_cache_set_size(cfg->cache_size);
    srv->embedded = embedded;
    if (embedded) {
        if (uv_loop_init(&srv->own_loop) != 0) {
            *err = "cannot create an event loop";
            return SL_ERROR;
        }
        srv->loop = &srv->own_loop;
    } else {
        srv->loop = uv_default_loop();
        signal(SIGPIPE, SIG_IGN);
    }
    srv->generation = 1;
    srv->started_ms = sl_now_ms();
    srv->nworkers = cfg->workers > 0 ? cfg->workers : 1;

    srv->workers = calloc((size_t)srv->nworkers, sizeof(sl_worker_t));
    if (!srv->workers) {
        *err = "out of memory";
        return SL_ERROR;
    }
    if (bind_listeners(srv, err) != SL_OK) return SL_ERROR;
    if (!(srv->ug = sl_upgen_new(&srv->treg, cfg)) || !(srv->disc = sl_discovery_new(srv->loop, &srv->treg))) {
        *err = "out of memory";
        return SL_ERROR;
    }
    if (sl_discovery_bind(srv->disc, srv->ug, err) != SL_OK) return SL_ERROR;
    /* Names get their first answer before the first request (or 503 until they do). */
    sl_discovery_prime(srv->disc, cfg->resolver.timeout_ms * cfg->resolver.attempts + 500);
    for (int i = 0; i < srv->nworkers; i++) {
        if (sl_worker_init(&srv->workers[i], srv, cfg, i, err) != SL_OK) return SL_ERROR;
        srv->workers[i].ug = srv->ug;
        srv->workers[i].nworkers = srv->nworkers;
        srv->workers[i].listen_fds = srv->listen_fds;
    }
    if (sl_admin_start(srv, err) != SL_OK) return SL_ERROR;
    /* Every socket of this generation is bound: leave root before any request is served. */
    if (!embedded && sl_privileges_drop(cfg, err) != SL_OK) return SL_ERROR;
    sl_health_start(&srv->health, srv->loop, &srv->treg, srv->ug);
    if (sl_telemetry_configure(&cfg->telemetry) != SL_OK) {
        *err = "cannot start the telemetry exporter";
        return SL_ERROR;
    }
    uv_async_init(srv->loop, &srv->stop_async, on_stop_async);
    srv->stop_async.data = srv;
    sl__server_place_main(srv); /* before the workers: they start from its CPUs */
    for (int i = 0; i < srv->nworkers; i++) {
        if (sl_worker_start(&srv->workers[i]) != SL_OK) {
            *err = "cannot start a worker";
            return SL_ERROR;
        }
        srv->started++;
    }
    if (!embedded) {
        uv_signal_init(srv->loop, &srv->sig_term);
        uv_signal_init(srv->loop, &srv->sig_int);
        uv_signal_init(srv->loop, &srv->sig_hup);
        srv->sig_term.data = srv->sig_int.data = srv->sig_hup.data = srv;
        uv_signal_start(&srv->sig_term, on_signal, SIGTERM);
        uv_signal_start(&srv->sig_int, on_signal, SIGINT);
        uv_signal_start(&srv->sig_hup, on_signal, SIGHUP);
    }
    for (size_t i = 0; i < cfg->nlisteners; i++)
        sl_log_info("listener %s on %s (%d workers)", cfg->listeners[i].name, srv->listen_text[i], srv->nworkers);
    if (cfg->admin_enabled) sl_log_info("admin on %s", srv->admin_text);
    if (!embedded && cfg->run_user)
        sl_log_info("running as user %s (uid %u, gid %u)", cfg->run_user, (unsigned)getuid(), (unsigned)getgid());
    if (!embedded) sl_log_info("lua modules from %s, built-in plugins from %s", sl_lua_dir(), sl_builtin_plugin_dir());
    return SL_OK;
}

void sl__server_note_generation(sl_server_t *srv, char *changed) {
    unsigned n = sizeof srv->gens / sizeof srv->gens[0], i = srv->gen_next++ % n;
    free(srv->gens[i].changed);
    srv->gens[i].generation = srv->generation;
    srv->gens[i].hash = srv->config_hash;
    srv->gens[i].unix_s = (int64_t)time(NULL);
    srv->gens[i].changed = changed;
}

void sl_server_loop(sl_server_t *srv) { uv_run(srv->loop, UV_RUN_DEFAULT); }

void sl_server_stop(sl_server_t *srv) { uv_async_send(&srv->stop_async); }

void sl_server_cleanup(sl_server_t *srv) {
    sl__reload_free_retired(srv);
    for (int i = 0; i < srv->started; i++) sl_worker_join(&srv->workers[i]);
    sl_telemetry_stop(); /* every worker is done: what they queued goes out (or is dropped) */
    if (srv->workers)
        for (int i = 0; i < srv->nworkers; i++)
            if (srv->workers[i].cfg) sl_worker_destroy(&srv->workers[i]);
    if (srv->listen_fds) {
        /* A worker that never started did not take ownership of its sockets. */
        for (size_t i = 0; i < srv->cfg->nlisteners * (size_t)srv->nworkers; i++)
            if (srv->listen_fds[i] >= 0 && (int)(i % (size_t)srv->nworkers) >= srv->started)
                close(srv->listen_fds[i]);
    }
    if (srv->disc) { /* never drained (a start that failed) */
        sl_discovery_free(srv->disc);
        srv->disc = NULL;
        uv_run(srv->loop, UV_RUN_NOWAIT);
    }
    if (srv->embedded) uv_loop_close(srv->loop);
    for (size_t i = 0; i < sizeof srv->gens / sizeof srv->gens[0]; i++) {
        free(srv->gens[i].changed);
        srv->gens[i].changed = NULL;
    }
    free(srv->workers);
    free(srv->listen_fds);
    free(srv->listen_text);
    sl_upgen_free(&srv->treg, srv->ug);
    srv->ug = NULL;
    if (srv->cfg != srv->boot_cfg) sl_config_free(srv->cfg); /* made by a reload */
    srv->cfg = srv->boot_cfg;
    srv->workers = NULL;
    srv->listen_fds = NULL;
    srv->listen_text = NULL;
}

int sl_server_run(sl_config_t *cfg, const char *config_path, const char *ready_file) {
    static sl_server_t srv_storage;
    sl_server_t *srv = &srv_storage;
    const char *err = NULL;
    int rc = sl_server_start(srv, cfg, false, &err);
    srv->config_path = config_path;
    if (rc == SL_OK) {
        sl__reload_init(srv);
        sl_server_watch(srv);
    }
    if (rc != SL_OK) {
        sl_log_err("%s", err ? err : "startup failed");
        for (int i = 0; i < srv->started; i++) sl_worker_drain(&srv->workers[i]);
        sl_server_cleanup(srv);
        return 1;
    }
    srv->ready_file = ready_file;
    int exit_rc = 0;
    if (ready_file && sl__server_write_ready_file(srv) != SL_OK) {
        /* The ready file is how a CI step learns the ports (listen: ...:0): it would wait
         * for a file that never comes, and an instance nobody can find serves no one. As
         * nginx with a pid file it cannot write: stop, exit 1. */
        sl_log_err("cannot write ready file %s: %s", ready_file, strerror(errno));
        exit_rc = 1;
        srv->ready_file = ready_file = NULL; /* nothing of ours to rewrite or remove */
        start_drain(srv, "no ready file");
    } else if (sl_notify("READY=1") != 0) {
        sl_log_warn("cannot notify the service manager at $NOTIFY_SOCKET");
    }
    sl_server_loop(srv);
    /* A ready file left behind would name ports nobody listens on: the next CI step (or a
     * supervisor waiting for it) must not mistake a stopped instance for a ready one. */
    if (ready_file) unlink(ready_file);
    sl_server_cleanup(srv);
    uv_loop_close(srv->loop);
    sl_log_info("stopped");
    return exit_rc;
}
