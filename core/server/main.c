/* main.c — the sluice command line: run, check, version. */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "base/log.h"
#include "script/plugin.h"
#include "server/etcd.h"
#include "server/server.h"

extern const char sl_default_conf[];
extern const size_t sl_default_conf_len;

static void usage(FILE *f) {
    fprintf(f, "usage: sluice [run] [-c FILE] [--ready-file PATH]\n"
               "       sluice check -c FILE\n"
               "       sluice reload [-c FILE]\n"
               "       sluice explain [-c FILE] [ROUTE]\n"
               "       sluice push -c FILE --etcd URL [--prefix P]\n"
               "       sluice pull --etcd URL [--prefix P] [--plugins DIR]\n"
               "       sluice version\n");
}

/* sluice reload: POST /reload to the admin address the config names; prints the answer. */
static int reload_remote(const sl_config_t *cfg) {
    if (!cfg->admin_enabled) {
        fprintf(stderr, "sluice reload: this config has no admin listener\n");
        return 1;
    }
    const struct sockaddr *sa = (const struct sockaddr *)&cfg->admin_listen.ss;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, sa, cfg->admin_listen.len) != 0) {
        fprintf(stderr, "sluice reload: cannot reach the admin API at %s: %s\n", cfg->admin_listen.text,
                strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    /* admin.token_env was read when the config loaded: the token is the running
     * instance's as long as both see the same environment variable. */
    char req[SL_ADMIN_TOKEN_MAX + 160];
    int n = snprintf(req, sizeof(req), "POST /reload HTTP/1.1\r\nHost: sluice\r\nContent-Length: 0\r\n%s%.*s%s"
                     "Connection: close\r\n\r\n", cfg->admin_token_len ? "Authorization: Bearer " : "",
                     (int)cfg->admin_token_len, cfg->admin_token, cfg->admin_token_len ? "\r\n" : "");
    ssize_t w = write(fd, req, (size_t)n);
    explicit_bzero(req, sizeof(req));
    if (w != (ssize_t)n) {
        close(fd);
        return 1;
    }
    char buf[65536];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(buf) - 1 && (r = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0) got += (size_t)r;
    close(fd);
    buf[got] = 0;
    const char *body = strstr(buf, "\r\n\r\n");
    printf("%s", body ? body + 4 : buf);
    if (strncmp(buf, "HTTP/1.1 401", 12) == 0)
        fprintf(stderr, "sluice reload: the admin API at %s wants a bearer token: %s\n", cfg->admin_listen.text,
                cfg->admin_token_len ? "the one in admin.token_env was refused"
                                     : "this config sets no admin.token_env");
    return strncmp(buf, "HTTP/1.1 200", 12) == 0 ? 0 : 1;
}

/* Loads -c FILE, else ./conf/sluice.yaml, else the embedded default; *used names which. */
static sl_config_t *load(const char *path, bool quiet, const char **used) {
    sl_config_t *cfg = NULL;
    sl_errors_t errs = {0};
    int rc;
    if (!path && access("conf/sluice.yaml", R_OK) == 0) path = "conf/sluice.yaml";
    if (used) *used = path;
    if (path)
        rc = sl_config_load(path, &cfg, &errs);
    else
        rc = sl_config_parse("<embedded default>", sl_default_conf, sl_default_conf_len, &cfg, &errs);
    if (rc == 0 && sl_plugins_check(cfg, &errs) != 0) {
        sl_config_free(cfg);
        cfg = NULL;
        rc = -1;
    }
    if (rc != 0) {
        for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "%s\n", errs.lines[i]);
        sl_errors_free(&errs);
        return NULL;
    }
    sl_errors_free(&errs);
    if (!quiet) sl_log_info("config %s loaded", path ? path : "<embedded default>");
    return cfg;
}

int main(int argc, char **argv) {
    const char *cmd = "run", *conf = NULL, *ready = NULL, *explain_route = NULL;
    const char *etcd = NULL, *prefix = "/sluice", *plugins_dir = NULL; /* push, pull */
    int i = 1;
    if (i < argc && argv[i][0] != '-') cmd = argv[i++];
    for (; i < argc; i++) {
        if (strcmp(cmd, "explain") == 0 && argv[i][0] != '-' && !explain_route) {
            explain_route = argv[i];
            continue;
        }
        if ((strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0) && i + 1 < argc) {
            conf = argv[++i];
        } else if (strcmp(argv[i], "--etcd") == 0 && i + 1 < argc) {
            etcd = argv[++i];
        } else if (strcmp(argv[i], "--prefix") == 0 && i + 1 < argc) {
            prefix = argv[++i];
        } else if (strcmp(argv[i], "--plugins") == 0 && i + 1 < argc) {
            plugins_dir = argv[++i];
        } else if (strcmp(argv[i], "--ready-file") == 0 && i + 1 < argc) {
            ready = argv[++i];
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "sluice: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    sl_log_init_from_env();
    /* Workers allocate almost nothing in steady state; a few malloc arenas keep reloads
     * (which start and end threads) from leaving many half-empty arenas behind. */
    mallopt(M_ARENA_MAX, 1);
    if (strcmp(cmd, "version") == 0) {
        printf("sluice %s\n", SL_VERSION);
        return 0;
    }
    if (strcmp(cmd, "check") == 0) {
        sl_config_t *cfg = load(conf, true, NULL);
        if (!cfg) return 1;
        printf("%s: ok\n", conf ? conf : "<embedded default>");
        sl_config_free(cfg);
        return 0;
    }
    if (strcmp(cmd, "explain") == 0) {
        sl_config_t *cfg = load(conf, true, NULL);
        if (!cfg) return 1;
        int rc = sl_plugins_explain(cfg, explain_route);
        sl_config_free(cfg);
        return rc == 0 ? 0 : 1;
    }
    if (strcmp(cmd, "reload") == 0) {
        const char *used = NULL;
        sl_config_t *cfg = load(conf, true, &used);
        if (!cfg) return 1;
        int rc = reload_remote(cfg);
        sl_config_free(cfg);
        return rc;
    }
    if (strcmp(cmd, "push") == 0 || strcmp(cmd, "pull") == 0) {
        if (!etcd || (cmd[1] == 'u' && cmd[2] == 's' && !conf)) {
            fprintf(stderr, "sluice %s: %s\n", cmd, etcd ? "-c FILE is required" : "--etcd URL is required");
            usage(stderr);
            return 2;
        }
        return cmd[2] == 's' ? sl_etcd_push(conf, etcd, prefix) : sl_etcd_pull(etcd, prefix, plugins_dir);
    }
    if (strcmp(cmd, "run") != 0) {
        fprintf(stderr, "sluice: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    const char *used = NULL;
    sl_config_t *cfg = load(conf, false, &used);
    if (!cfg) return 1;
    if (cfg->source.enabled) cfg = sl_etcd_boot(cfg); /* the snapshot's generation, if any */
    int rc = sl_server_run(cfg, used, ready);
    sl_config_free(cfg);
    return rc;
}
