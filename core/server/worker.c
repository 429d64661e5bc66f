/* worker.c — a worker thread: its loop, listeners, pools and the drain sequence. */
#include "ctx/worker.h"

#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <errno.h>
#include <string.h>

#include "http/http.h"
#include "proto/http1.h"
#include "lua/redis.h"
#include "base/log.h"
#include "script/lua_host.h"
#include "server/server.h"
#include "l4/tcp_proxy.h"
#include "base/cpu.h"

int sl_worker_init(sl_worker_t *w, sl_server_t *srv, const sl_config_t *cfg, int id, const char **err) {
    memset(w, 0, sizeof(*w));
    w->id = id;
    w->srv = srv;
    w->generation = srv ? srv->generation : 0;
    w->cfg = cfg;
    if (uv_loop_init(&w->loop) != 0) {
        *err = "cannot create an event loop";
        return SL_ERROR;
    }
    w->loop.data = w;
    sl_list_init(&w->conns);
    w->blocks.max_free = 4096;
    w->blocks.low_water = SL_BLOCK_LOW_WATER;
    w->rid_seed = ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)w ^ ((uint64_t)id << 56) ^ sl_now_ns();
    if (!w->rid_seed) w->rid_seed = 1;
    w->listeners = calloc(cfg->nlisteners + 1, sizeof(uv_tcp_t));
    w->listen_ports = calloc(cfg->nlisteners + 1, sizeof(uint16_t));
    w->limits = calloc(cfg->nlisteners + 1, sizeof(sl_h1_limits_t));
    w->resp_limits = calloc(1, sizeof(sl_h1_limits_t));
    w->ups = calloc(cfg->nupstreams + 1, sizeof(sl_upstream_state_t));
    if (!w->listeners || !w->listen_ports || !w->limits || !w->resp_limits || !w->ups) goto oom;
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        /* A head must fit in a read buffer with room to spare for its body. */
        w->limits[i].max_header_size = SL_MIN(cfg->listeners[i].max_header_size, SL_BLOCK_SIZE / 2);
        w->limits[i].max_request_line = SL_MIN(cfg->listeners[i].max_request_line, SL_BLOCK_SIZE / 2);
    }
    w->resp_limits->max_header_size = SL_BLOCK_SIZE / 2;
    w->resp_limits->max_request_line = SL_BLOCK_SIZE / 2;
    for (size_t u = 0; u < cfg->nupstreams; u++) {
        w->ups[u].idle = calloc(cfg->upstreams[u].ntargets, sizeof(sl_idle_list_t));
        if (!w->ups[u].idle) goto oom;
        for (size_t t = 0; t < cfg->upstreams[u].ntargets; t++) {
            sl_list_init(&w->ups[u].idle[t].pool);
            sl_list_init(&w->ups[u].idle[t].h2);
        }
    }
    if (sl_metrics_init(&w->metrics, cfg) != SL_OK) goto oom;
    if (sl_config_timed(cfg)) sl_ticks_calibrate();
    if (sl__redis_init(w) != SL_OK) goto oom;
    if (sl_lua_open(w, err) != SL_OK) return SL_ERROR;
    return SL_OK;
oom:
    *err = "out of memory";
    return SL_ERROR;
}

static void drain(sl_worker_t *w) {
    w->draining = true;
    for (size_t i = 0; i < w->cfg->nlisteners; i++)
        if (w->cfg->listeners[i].protocol != SL_PROTO_TCP) uv_close((uv_handle_t *)&w->listeners[i], NULL);
    sl__tcp_drain(w);
    /* kept open, unref'd, for a cut: a second SIGTERM while the drain goes on */
    uv_unref((uv_handle_t *)&w->async);
    uv_close((uv_handle_t *)&w->block_trim, NULL);
    uv_close((uv_handle_t *)&w->wake_pre, NULL);
    uv_close((uv_handle_t *)&w->wake_post, NULL);
    sl_wake_enable(false); /* nothing clears it any more */
    sl_http_drain(w);
    sl__redis_close(w);
}

/* The server's request (sl_worker_drain, sl_worker_cut): the drain, once; then a cut, once. */
static void on_async(uv_async_t *a) {
    sl_worker_t *w = a->data;
    if (!w->draining) drain(w);
    if (__atomic_load_n(&w->cut, __ATOMIC_ACQUIRE)) {
        sl__tcp_cut(w);
        w->async_open = false;
        uv_close((uv_handle_t *)&w->async, NULL);
    }
}

/* A spike is over once blocks stayed idle for a whole interval (block.h): then the
 * recycled requests beyond a few dozen go too (11 KiB each, up to 1,024 kept by the HTTP
 * layer), and the heap's free pages go back to the OS. free() leaves 64 KiB chunks inside
 * the heap; only malloc_trim madvises them away. It walks the free chunks under the arena
 * lock, so it runs only after a spike, never in steady state. */
static void on_block_trim(uv_timer_t *t) {
    sl_worker_t *w = t->data;
    if (!sl_blockpool_trim(&w->blocks)) return;
    sl_http_trim(w, SL_BLOCK_LOW_WATER);
    sl_heap_trim();
}

static void on_wake_pre(uv_prepare_t *p) { (void)p, sl_wake_clear(); }
static void on_wake_post(uv_check_t *c) { (void)c, sl_wake_clear(); }

static void *worker_main(void *arg) {
    sl_worker_t *w = arg;
    char name[16];
    snprintf(name, sizeof(name), "sl-worker-%d", w->id);
    pthread_setname_np(pthread_self(), name);
    /* worker_cpus: this worker's CPU; else every CPU of the process (the main thread that
     * started it may be kept off some: sl__server_place_main) */
    const sl_config_t *cfg = w->cfg;
    cpu_set_t set;
    if (cfg->nworker_cpus) {
        CPU_ZERO(&set);
        CPU_SET(cfg->worker_cpus[(size_t)w->id % cfg->nworker_cpus], &set);
    } else {
        sl_cpus_allowed(&set);
    }
    if ((cfg->nworker_cpus || !w->srv->embedded) && sl_cpus_place_self(&set) != 0)
        sl_log_warn("worker %d: cannot place it on its CPUs: %s", w->id, strerror(errno));
    __atomic_store_n(&w->running, true, __ATOMIC_RELEASE);
    sl_wake_enable(!w->draining);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    sl_wake_enable(false);
    __atomic_store_n(&w->stopped, true, __ATOMIC_RELEASE);
    return NULL;
}

int sl_worker_start(sl_worker_t *w) {
    const sl_config_t *cfg = w->cfg;
    uv_async_init(&w->loop, &w->async, on_async);
    w->async.data = w;
    w->async_open = true;
    /* Unref'd: the trim timer never keeps a draining loop alive. */
    uv_timer_init(&w->loop, &w->block_trim);
    w->block_trim.data = w;
    uv_timer_start(&w->block_trim, on_block_trim, SL_BLOCK_TRIM_INTERVAL_MS, SL_BLOCK_TRIM_INTERVAL_MS);
    uv_unref((uv_handle_t *)&w->block_trim);
    uv_prepare_init(&w->loop, &w->wake_pre);
    uv_prepare_start(&w->wake_pre, on_wake_pre);
    uv_unref((uv_handle_t *)&w->wake_pre);
    uv_check_init(&w->loop, &w->wake_post);
    uv_check_start(&w->wake_post, on_wake_post);
    uv_unref((uv_handle_t *)&w->wake_post);
    sl_tls_pump_init(&w->tls_pump, &w->loop, &w->blocks);
    for (size_t i = 0; i < cfg->nlisteners; i++) {
        uv_tcp_t *t = &w->listeners[i];
        int fd = w->listen_fds[i * (size_t)w->nworkers + (size_t)w->id];
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
            w->listen_ports[i] = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                                : ((struct sockaddr_in *)&ss)->sin_port);
        int rc;
        if (cfg->listeners[i].protocol == SL_PROTO_TCP) {
            rc = sl__tcp_listen(w, i, fd); /* L4: its own accept loop (tcp_proxy.c) */
        } else {
            uv_tcp_init(&w->loop, t);
            t->data = (void *)(uintptr_t)i;
            rc = uv_tcp_open(t, fd);
            if (rc == 0) rc = uv_listen((uv_stream_t *)t, 4096, sl_http_on_accept);
        }
        if (rc != 0) {
            sl_log_err("worker %d: cannot listen on %s: %s", w->id, cfg->listeners[i].listen.text, uv_strerror(rc));
            return SL_ERROR;
        }
    }
    /* A stack of its own mapping (base/thread.h): 1 MiB is plenty (Lua runs on its own
     * stacks). */
    return sl_thread_start(&w->thread, 1u << 20, worker_main, w);
}

void sl_worker_drain(sl_worker_t *w) { uv_async_send(&w->async); }

void sl_worker_cut(sl_worker_t *w) {
    __atomic_store_n(&w->cut, true, __ATOMIC_RELEASE);
    uv_async_send(&w->async);
}

void sl_worker_join(sl_worker_t *w) { sl_thread_join(&w->thread); }

void sl_worker_destroy(sl_worker_t *w) {
    sl_lua_close(w);
    sl__redis_free(w);
    sl_tls_client_free(w->http_tls[0]);
    sl_tls_client_free(w->http_tls[1]);
    if (w->async_open) { /* drained, never cut (or never drained: an embedded stop) */
        w->async_open = false;
        uv_close((uv_handle_t *)&w->async, NULL);
    }
    if (w->tls_pump.blocks) { /* started: the closes above and this one run here */
        sl_tls_pump_close(&w->tls_pump);
        uv_run(&w->loop, UV_RUN_DEFAULT);
    }
    int rc = uv_loop_close(&w->loop);
    if (rc != 0) sl_log_warn("worker %d: its loop still had handles at exit (%s)", w->id, uv_strerror(rc));
    sl_http_free(w);
    sl__tcp_free(w);
    sl_blockpool_destroy(&w->blocks);
    if (w->ups)
        for (size_t u = 0; u < w->cfg->nupstreams; u++) free(w->ups[u].idle);
    free(w->ups);
    free(w->listeners);
    free(w->listen_ports);
    free(w->limits);
    free(w->resp_limits);
    sl_metrics_free(&w->metrics);
}
