/* testapi.c — in-process gateways for specs (lua/sluice/test.lua). Built into
 * libsluice_test.so, never into the binary or libsluice.so: its calls into the core
 * resolve against the core already loaded in the process.
 *
 * A spec starts a whole gateway from config text: it is parsed and validated like
 * a file, its workers and admin run on threads of this process, and a blocking
 * HTTP client sends requests to it. Loaded by `sluice test` and busted specs.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "config/yaml_json.h"
#include "script/plugin.h"
#include "server/server.h"
#include "server/testapi.h"

typedef struct {
    sl_server_t srv;
    sl_config_t *cfg;
    uv_thread_t thread;
} sl_test_gw_t;

static void gw_main(void *arg) {
    sl_test_gw_t *g = arg;
    sl_server_loop(&g->srv);
}

/** Starts a gateway from YAML (or JSON) text; `path` names it in errors and anchors relative
 *  plugin paths. NULL on failure with the errors in err. */
sl_test_gw_t *sl_test_start(const char *text, size_t len, const char *path, char *err, size_t errlen);
sl_test_gw_t *sl_test_start(const char *text, size_t len, const char *path, char *err, size_t errlen) {
    sl_errors_t errs = {0};
    sl_config_t *cfg = NULL;
    err[0] = 0;
    sl_log_init_from_env();
    if (sl_config_build(path, text, len, &cfg, &errs) != 0) {
        sl_errors_write(&errs, err, errlen);
        sl_errors_free(&errs);
        if (cfg) sl_config_free(cfg);
        return NULL;
    }
    sl_errors_free(&errs);
    sl_test_gw_t *g = calloc(1, sizeof(*g));
    if (!g) {
        snprintf(err, errlen, "out of memory");
        sl_config_free(cfg);
        return NULL;
    }
    g->cfg = cfg;
    const char *e = NULL;
    if (sl_server_start(&g->srv, cfg, true, &e) != SL_OK) {
        snprintf(err, errlen, "%s", e ? e : "start failed");
        for (int i = 0; i < g->srv.started; i++) sl_worker_drain(&g->srv.workers[i]);
        sl_server_cleanup(&g->srv);
        sl_config_free(cfg);
        free(g);
        return NULL;
    }
    if (uv_thread_create(&g->thread, gw_main, g) != 0) {
        snprintf(err, errlen, "cannot start the gateway thread");
        return NULL;
    }
    return g;
}

/** The real address of listener `name` ("admin" for the admin API): "127.0.0.1:PORT". */
int sl_test_addr(sl_test_gw_t *g, const char *name, char *out, size_t cap);
int sl_test_addr(sl_test_gw_t *g, const char *name, char *out, size_t cap) {
    if (strcmp(name, "admin") == 0 && g->cfg->admin_enabled) {
        snprintf(out, cap, "%s", g->srv.admin_text);
        return SL_OK;
    }
    for (size_t i = 0; i < g->cfg->nlisteners; i++)
        if (strcmp(g->cfg->listeners[i].name, name) == 0) {
            snprintf(out, cap, "%s", g->srv.listen_text[i]);
            return SL_OK;
        }
    return SL_DECLINED;
}

/** Drains and stops the gateway, then frees it. */
void sl_test_stop(sl_test_gw_t *g);
void sl_test_stop(sl_test_gw_t *g) {
    sl_server_stop(&g->srv);
    uv_thread_join(&g->thread);
    sl_server_cleanup(&g->srv);
    sl_config_free(g->cfg);
    free(g);
}

/* ---- a raw client for `sluice test`'s tcp and websocket cases ---- */

int sl_test_connect(const char *host, int port) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int sl_test_send(int fd, const char *buf, size_t len) {
    while (len) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

/**
 * Reads into out until `want` bytes came (0: until the peer closes), or `until`
 * (a NUL-terminated marker, or NULL) appears, or timeout_ms passes. Returns
 * the bytes read; *closed says whether the peer closed.
 */
long sl_test_recv(int fd, char *out, size_t cap, size_t want, const char *until, int timeout_ms,
                  int *closed);
long sl_test_recv(int fd, char *out, size_t cap, size_t want, const char *until, int timeout_ms,
                  int *closed) {
    size_t got = 0;
    *closed = 0;
    uint64_t deadline = sl_now_ms() + (uint64_t)timeout_ms;
    while (got < cap && !(want && got >= want) &&
           !(until && got && memmem(out, got, until, strlen(until)))) {
        uint64_t now = sl_now_ms();
        if (now >= deadline) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, (int)(deadline - now));
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) break;
        ssize_t r = recv(fd, out + got, cap - got, 0);
        if (r <= 0) {
            *closed = 1;
            break;
        }
        got += (size_t)r;
    }
    return (long)got;
}

/** Closes a client fd. */
void sl_test_close(int fd);
void sl_test_close(int fd) { close(fd); }
