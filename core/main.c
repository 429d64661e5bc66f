/* main.c — the sluice command line: run, check, version. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "plugin.h"
#include "server.h"

extern const char sl_default_conf[];
extern const size_t sl_default_conf_len;

static void usage(FILE *f) {
    fprintf(f, "usage: sluice [run] [-c FILE] [--ready-file PATH]\n"
               "       sluice check -c FILE\n"
               "       sluice version\n");
}

/* Loads -c FILE, else ./conf/sluice.yaml, else the embedded default. */
static sl_config_t *load(const char *path, bool quiet) {
    sl_config_t *cfg = NULL;
    sl_errors_t errs = {0};
    int rc;
    if (!path && access("conf/sluice.yaml", R_OK) == 0) path = "conf/sluice.yaml";
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
    const char *cmd = "run", *conf = NULL, *ready = NULL;
    int i = 1;
    if (i < argc && argv[i][0] != '-') cmd = argv[i++];
    for (; i < argc; i++) {
        if ((strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0) && i + 1 < argc) {
            conf = argv[++i];
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
    if (strcmp(cmd, "version") == 0) {
        printf("sluice %s\n", SL_VERSION);
        return 0;
    }
    if (strcmp(cmd, "check") == 0) {
        sl_config_t *cfg = load(conf, true);
        if (!cfg) return 1;
        printf("%s: ok\n", conf ? conf : "<embedded default>");
        sl_config_free(cfg);
        return 0;
    }
    if (strcmp(cmd, "run") != 0) {
        fprintf(stderr, "sluice: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    sl_config_t *cfg = load(conf, false);
    if (!cfg) return 1;
    int rc = sl_server_run(cfg, ready);
    sl_config_free(cfg);
    return rc;
}
