/* env_test.c — ${VAR} and ${VAR:-default} in config values (core/config/env.c): what is
 * replaced where, what stays literal, and each error at its line:column, said once. */
#include "config/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static sl_config_t *parse(const char *yaml, sl_errors_t *errs) {
    sl_config_t *cfg = NULL;
    sl_config_parse("t.yaml", yaml, strlen(yaml), &cfg, errs);
    return cfg;
}

static uint16_t port_of(const sl_addr_t *a) { return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port); }

static void test_values(void) {
    setenv("SL_T_PORT", "8081", 1);
    setenv("SL_T_EMPTY", "", 1);
    unsetenv("SL_T_UNSET");
    sl_errors_t errs = {0};
    sl_config_t *cfg = parse("workers: ${SL_T_WORKERS:-2}\n"
                             "consumer_header: X-${SL_T_UNSET:-Who}${SL_T_EMPTY:-Am}\n"
                             "listeners:\n"
                             "  - name: web\n"
                             "    listen: 127.0.0.1:${SL_T_PORT}\n"
                             "routes:\n"
                             "  - name: r\n"
                             "    match: { paths: [ \"/$${x}\", '/${SL_T_PORT}' ] }\n"
                             "    plugins: [ { name: echo } ]\n",
                             &errs);
    CHECK(cfg != NULL);
    for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "    %s\n", errs.lines[i]);
    if (!cfg) return;
    CHECK_INT(cfg->workers, 2);                    /* a plain scalar stays plain: an integer */
    CHECK_INT(port_of(&cfg->listeners[0].listen), 8081);
    CHECK_STR(cfg->consumer_header, "X-WhoAm");    /* unset and empty both take the default */
    CHECK_STR(cfg->routes[0].paths[0], "/${x}");   /* $${ is a literal ${ */
    CHECK_STR(cfg->routes[0].paths[1], "/${SL_T_PORT}"); /* single-quoted: literal */
    sl_config_free(cfg);
    sl_errors_free(&errs);
}

static void test_errors(void) {
    unsetenv("SL_T_UNSET");
    setenv("SL_T_EMPTY", "", 1);
    sl_errors_t errs = {0};
    sl_config_t *cfg = parse("listeners:\n"
                             "  - name: web\n"
                             "    listen: 127.0.0.1:${SL_T_UNSET}\n"
                             "consumer_header: X-${SL_T_EMPTY}\n"
                             "routes:\n"
                             "  - { name: r, match: { paths: [\"/${bad name}\"] }, plugins: [ { name: echo } ] }\n",
                             &errs);
    CHECK(cfg == NULL);
    CHECK_INT(errs.n, 3); /* one per value: no second error about the raw text */
    if (errs.n == 3) {
        CHECK_STR(errs.lines[0], "t.yaml:3:23: environment variable 'SL_T_UNSET' is not set (write "
                                 "${SL_T_UNSET:-default} to give a default)");
        CHECK_STR(errs.lines[1], "t.yaml:4:20: environment variable 'SL_T_EMPTY' is empty (write "
                                 "${SL_T_EMPTY:-default} to give a default)");
        CHECK(strncmp(errs.lines[2], "t.yaml:6:33: malformed '${'", 27) == 0); /* a quoted value: its own column */
    }
    if (errs.n != 3)
        for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "    %s\n", errs.lines[i]);
    sl_config_free(cfg);
    sl_errors_free(&errs);
}

static void test_errors_sort(void) {
    sl_errors_t errs = {0};
    sl_errors_add(&errs, "gw.yaml", 9, 3, "c");
    sl_errors_add(&errs, "gw.yaml", 2, 5, "a");
    sl_errors_add(&errs, "routes.lua", 4, 1, "e");
    sl_errors_add(&errs, "gw.yaml", 9, 3, "d");  /* same place: kept after c */
    sl_errors_add(&errs, "routes.lua", 1, 7, "f:1:2: not a position"); /* ':N:N: ' in a message */
    sl_errors_add(&errs, "gw.yaml", 2, 1, "b");
    sl_errors_sort(&errs);
    const char *want[] = {"gw.yaml:2:1: b", "gw.yaml:2:5: a", "gw.yaml:9:3: c", "gw.yaml:9:3: d",
                          "routes.lua:1:7: f:1:2: not a position", "routes.lua:4:1: e"};
    CHECK_INT(errs.n, 6);
    for (size_t i = 0; i < errs.n && i < 6; i++) CHECK_STR(errs.lines[i], want[i]);
    sl_errors_free(&errs);
}

int main(void) {
    test_values();
    test_errors();
    test_errors_sort();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
