/* config_test.c — unit tests for core/config/ (config.c and the section files): values,
 * defaults, every error with its line:column, the scalar parsers, and that the shipped
 * configs parse. */
#include "config/config.h"

#include <arpa/inet.h>
#include <glob.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SL_SOURCE_DIR
#error "SL_SOURCE_DIR must name the source root"
#endif

#include "check.h"

/* A listener every error case can lean on, so it fails for its own reason only. */
#define LISTENER "listeners: [ { name: web, listen: 127.0.0.1:8080 } ]\n"

static sl_config_t *parse(const char *yaml, sl_errors_t *errs) {
    sl_config_t *cfg = NULL;
    int rc = sl_config_parse("t.yaml", yaml, strlen(yaml), &cfg, errs);
    CHECK((rc == 0) == (cfg != NULL));
    return cfg;
}

/* Parses yaml that must be valid; prints its errors when it is not. */
static sl_config_t *parse_ok(const char *yaml, int line) {
    sl_errors_t errs = {0};
    sl_config_t *cfg = parse(yaml, &errs);
    if (cfg && errs.n == 0)
        passed++;
    else {
        failed++;
        fprintf(stderr, "%s:%d: expected a valid config, got:\n", __FILE__, line);
        for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "    %s\n", errs.lines[i]);
    }
    sl_errors_free(&errs);
    return cfg;
}
#define PARSE_OK(yaml) parse_ok((yaml), __LINE__)

/* yaml must fail with exactly the given error lines (each without the "t.yaml:" prefix). */
static void expect_errors(int line, const char *yaml, size_t n, const char *const *want) {
    sl_errors_t errs = {0};
    sl_config_t *cfg = parse(yaml, &errs);
    bool ok = cfg == NULL && errs.n == n;
    for (size_t i = 0; ok && i < n; i++) {
        char full[1200];
        snprintf(full, sizeof full, "t.yaml:%s", want[i]);
        ok = strcmp(errs.lines[i], full) == 0;
    }
    if (ok)
        passed++;
    else {
        failed++;
        fprintf(stderr, "%s:%d: expected %zu error(s):\n", __FILE__, line, n);
        for (size_t i = 0; i < n; i++) fprintf(stderr, "    t.yaml:%s\n", want[i]);
        fprintf(stderr, "  got %zu:\n", errs.n);
        for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "    %s\n", errs.lines[i]);
    }
    sl_config_free(cfg);
    sl_errors_free(&errs);
}
#define EXPECT_ERROR(yaml, want)                                                                   \
    do {                                                                                           \
        const char *w_[] = {want};                                                                 \
        expect_errors(__LINE__, (yaml), 1, w_);                                                    \
    } while (0)

static uint16_t port_of(const sl_addr_t *a) {
    if (a->ss.ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

static const char *ip_of(const sl_addr_t *a, char *buf, size_t size) {
    const void *p = a->ss.ss_family == AF_INET6
                        ? (const void *)&((const struct sockaddr_in6 *)&a->ss)->sin6_addr
                        : (const void *)&((const struct sockaddr_in *)&a->ss)->sin_addr;
    return inet_ntop(a->ss.ss_family, p, buf, (socklen_t)size);
}

/* ------------------------------------------------------------------------------------------ */

static void test_full_config(void) {
    const char *yaml = "workers: 3\n"
                       "watch: false\n"
                       "shutdown_timeout: 5s\n"
                       "plugin_paths: [my-plugins, plugins]\n"
                       "admin: { listen: \"[::1]:9191\" }\n"
                       "plugins: [ { name: echo } ]\n"
                       "listeners:\n"
                       "  - name: web\n"
                       "    listen: \"*:8080\"\n"
                       "    protocol: http\n"
                       "    max_body: 10MiB\n"
                       "    max_header_size: 16KiB\n"
                       "    max_request_line: 4096\n"
                       "    header_timeout: 250ms\n"
                       "    idle_timeout: 2m\n"
                       "  - { name: local, listen: localhost:0 }\n"
                       "routes:\n"
                       "  - name: api\n"
                       "    match:\n"
                       "      hosts: [API.Example.com, \"*.Example.COM\"]\n"
                       "      paths: [/v1/, /v2]\n"
                       "      methods: [get, Post]\n"
                       "      headers: { X-Env: canary, X-Version: 2 }\n"
                       "    upstream: api\n"
                       "    strip_prefix: true\n"
                       "    plugins:\n"
                       "      - name: echo\n"
                       "        config: { rate: 100, per: 1s, burst: 0, key: \"a\\\"b\", store: "
                       "local, on: [1.5, -2, null, true, \"7\", 007], nested: { x: {} } }\n"
                       "      - { name: echo }\n"
                       "upstreams:\n"
                       "  - name: api\n"
                       "    balancer: round-robin\n"
                       "    targets: [ { address: 10.0.0.1:9001, weight: 1 }, { address: "
                       "\"[2001:db8::1]:443\" } ]\n"
                       "    keepalive: { max_idle: 5, idle_timeout: 1h }\n"
                       "    timeouts: { connect: 100ms, read: 1m, write: 45s }\n"
                       "  - name: other\n"
                       "    targets: [ { address: 127.0.0.1:1 } ]\n";
    sl_config_t *cfg = PARSE_OK(yaml);
    if (!cfg) return;
    char ip[64];
    CHECK_STR(cfg->path, "t.yaml");
    CHECK_INT(cfg->workers, 3);
    CHECK_INT(cfg->watch, false);
    CHECK_INT(cfg->shutdown_timeout_ms, 5000);
    CHECK_INT(cfg->nplugin_paths, 2);
    CHECK_STR(cfg->plugin_paths[0], "my-plugins");
    CHECK_STR(cfg->plugin_paths[1], "plugins");
    CHECK_INT(cfg->admin_enabled, true);
    CHECK_STR(cfg->admin_listen.text, "[::1]:9191");
    CHECK_INT(cfg->admin_listen.ss.ss_family, AF_INET6);
    CHECK_INT(cfg->admin_listen.len, sizeof(struct sockaddr_in6));
    CHECK_INT(port_of(&cfg->admin_listen), 9191);
    CHECK_STR(ip_of(&cfg->admin_listen, ip, sizeof ip), "::1");
    CHECK_INT(cfg->nplugins, 1);
    CHECK_STR(cfg->plugins[0].name, "echo");
    CHECK_STR(cfg->plugins[0].config_json, "{}");
    CHECK_INT(cfg->plugins[0].line, 6);
    CHECK_INT(cfg->plugins[0].col, 12);

    CHECK_INT(cfg->nlisteners, 2);
    const sl_listener_conf_t *l = &cfg->listeners[0];
    CHECK_STR(l->name, "web");
    CHECK_STR(l->listen.text, "*:8080");
    CHECK_STR(ip_of(&l->listen, ip, sizeof ip), "0.0.0.0");
    CHECK_INT(port_of(&l->listen), 8080);
    CHECK_INT(l->listen.len, sizeof(struct sockaddr_in));
    CHECK_INT(l->protocol, SL_PROTO_HTTP);
    CHECK_INT(l->max_body, 10 << 20);
    CHECK_INT(l->max_header_size, 16 << 10);
    CHECK_INT(l->max_request_line, 4096);
    CHECK_INT(l->header_timeout_ms, 250);
    CHECK_INT(l->idle_timeout_ms, 120000);
    CHECK_INT(l->line, 8);
    CHECK_INT(l->col, 5);
    l = &cfg->listeners[1];
    CHECK_STR(l->name, "local");
    CHECK_STR(ip_of(&l->listen, ip, sizeof ip), "127.0.0.1");
    CHECK_INT(port_of(&l->listen), 0);
    CHECK_INT(l->line, 16);
    CHECK_INT(l->col, 5);
    CHECK_INT(l->max_body, 0);
    CHECK_INT(l->max_header_size, 32768);
    CHECK_INT(l->max_request_line, 8192);
    CHECK_INT(l->header_timeout_ms, 10000);
    CHECK_INT(l->idle_timeout_ms, 60000);

    CHECK_INT(cfg->nupstreams, 2);
    const sl_upstream_conf_t *u = &cfg->upstreams[0];
    CHECK_STR(u->name, "api");
    CHECK_INT(u->balancer, SL_LB_ROUND_ROBIN);
    CHECK_INT(u->ntargets, 2);
    CHECK_STR(u->targets[0].addr.text, "10.0.0.1:9001");
    CHECK_INT(u->targets[0].weight, 1);
    CHECK_STR(ip_of(&u->targets[1].addr, ip, sizeof ip), "2001:db8::1");
    CHECK_INT(port_of(&u->targets[1].addr), 443);
    CHECK_INT(u->targets[1].weight, 1);
    CHECK_INT(u->keepalive_max_idle, 5);
    CHECK_INT(u->keepalive_idle_timeout_ms, 3600000);
    CHECK_INT(u->connect_timeout_ms, 100);
    CHECK_INT(u->read_timeout_ms, 60000);
    CHECK_INT(u->write_timeout_ms, 45000);
    CHECK_INT(u->line, 31);
    u = &cfg->upstreams[1];
    CHECK_STR(u->name, "other");
    CHECK_INT(u->balancer, SL_LB_ROUND_ROBIN);
    CHECK_INT(u->keepalive_max_idle, 64);
    CHECK_INT(u->keepalive_idle_timeout_ms, 60000);
    CHECK_INT(u->connect_timeout_ms, 2000);
    CHECK_INT(u->read_timeout_ms, 30000);
    CHECK_INT(u->write_timeout_ms, 30000);

    CHECK_INT(cfg->nroutes, 1);
    const sl_route_conf_t *r = &cfg->routes[0];
    CHECK_STR(r->name, "api");
    CHECK_INT(r->line, 18);
    CHECK_INT(r->col, 5);
    CHECK_INT(r->nhosts, 2);
    CHECK_STR(r->hosts[0], "api.example.com");
    CHECK_STR(r->hosts[1], "*.example.com");
    CHECK_INT(r->npaths, 2);
    CHECK_STR(r->paths[0], "/v1/");
    CHECK_STR(r->paths[1], "/v2");
    CHECK_INT(r->nmethods, 2);
    CHECK_STR(r->methods[0], "GET");
    CHECK_STR(r->methods[1], "POST");
    CHECK_INT(r->nheaders, 2);
    CHECK_STR(r->headers[0].name, "X-Env");
    CHECK_STR(r->headers[0].value, "canary");
    CHECK_STR(r->headers[1].name, "X-Version");
    CHECK_STR(r->headers[1].value, "2");
    CHECK_INT(r->upstream, 0); /* upstreams listed after routes still resolve */
    CHECK_INT(r->strip_prefix, true);
    CHECK_INT(r->nplugins, 2);
    CHECK_STR(r->plugins[0].name, "echo");
    CHECK_STR(r->plugins[0].config_json,
              "{\"rate\":100,\"per\":\"1s\",\"burst\":0,\"key\":\"a\\\"b\",\"store\":\"local\","
              "\"on\":[1.5,-2,null,true,\"7\",\"007\"],\"nested\":{\"x\":{}}}");
    CHECK_INT(r->plugins[0].line, 27);
    CHECK_INT(r->plugins[0].col, 9);
    CHECK_STR(r->plugins[1].name, "echo");
    CHECK_STR(r->plugins[1].config_json, "{}");
    sl_config_free(cfg);
}

static void test_defaults(void) {
    sl_config_t *cfg = PARSE_OK("listeners: [ { name: web, listen: 127.0.0.1:8080 } ]\n"
                                "routes: [ { name: echo, plugins: [ { name: echo } ] } ]\n");
    if (!cfg) return;
    CHECK(cfg->workers >= 1 && cfg->workers <= 64);
    CHECK_INT(cfg->watch, true);
    CHECK_INT(cfg->shutdown_timeout_ms, 30000);
    CHECK_INT(cfg->nplugin_paths, 1);
    CHECK_STR(cfg->plugin_paths[0], "plugins");
    CHECK_INT(cfg->admin_enabled, true);
    CHECK_STR(cfg->admin_listen.text, "127.0.0.1:9090");
    CHECK_INT(port_of(&cfg->admin_listen), 9090);
    CHECK_INT(cfg->nplugins, 0);
    CHECK_INT(cfg->nupstreams, 0);
    CHECK_INT(cfg->nroutes, 1);
    CHECK_INT(cfg->routes[0].upstream, -1);
    CHECK_INT(cfg->routes[0].strip_prefix, false);
    CHECK_INT(cfg->routes[0].nhosts + cfg->routes[0].npaths + cfg->routes[0].nmethods, 0);
    sl_config_free(cfg);

    /* admin off, workers auto, null values mean "default" */
    cfg = PARSE_OK("workers: auto\nadmin: { listen: off }\nwatch:\nplugins: ~\n" LISTENER);
    if (!cfg) return;
    CHECK_INT(cfg->admin_enabled, false);
    CHECK(cfg->admin_listen.text == NULL);
    CHECK(cfg->workers >= 1 && cfg->workers <= 64);
    CHECK_INT(cfg->watch, true);
    sl_config_free(cfg);

    /* a listener may take the admin port once the admin API moves away */
    cfg = PARSE_OK("admin: { listen: off }\nlisteners: [ { name: a, listen: 127.0.0.1:9090 } ]\n");
    sl_config_free(cfg);
    cfg = PARSE_OK("plugin_paths: []\n" LISTENER);
    if (cfg) CHECK_INT(cfg->nplugin_paths, 0);
    sl_config_free(cfg);
}

static void test_unknown_and_unsupported_keys(void) {
    EXPECT_ERROR(LISTENER "wokers: 2\n", "2:1: unknown key 'wokers' in the top level (did you "
                                         "mean 'workers'?)");
    EXPECT_ERROR(LISTENER "frobnicate: 2\n", "2:1: unknown key 'frobnicate' in the top level");
    EXPECT_ERROR("listeners:\n  - name: web\n    lisen: 127.0.0.1:1\n    listen: 127.0.0.1:2\n",
                 "3:5: unknown key 'lisen' in listener 'web' (did you mean 'listen'?)");
    EXPECT_ERROR(LISTENER "admin: { listen: off, port: 1 }\n",
                 "2:23: unknown key 'port' in 'admin'");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5, wieght: 2 } "
                          "] } ]\n",
                 "2:58: unknown key 'wieght' in targets[0] of upstream 'u' (did you mean "
                 "'weight'?)");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ], "
                          "keepalive: { max: 1 } } ]\n",
                 "2:75: unknown key 'max' in 'keepalive' of upstream 'u'");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, upstream: u, match: { path: [/] } } ]\n"
                          "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ] } ]\n",
                 "2:44: unknown key 'path' in 'match' of route 'r' (did you mean 'paths'?)");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, plugins: [ { name: echo, conf: {} } ] } ]\n",
                 "2:47: unknown key 'conf' in plugin 'echo' of route 'r'");

    EXPECT_ERROR(LISTENER "redis: { adress: 127.0.0.1:6379 }\n",
                 "2:10: unknown key 'adress' in 'redis' (did you mean 'address'?)");
    /* lua_routes is a list of file names (their routes are read by the plugin step) */
    EXPECT_ERROR(LISTENER "lua_routes: a.lua\n", "2:13: expected a list for 'lua_routes'");
    EXPECT_ERROR("listeners:\n  - name: web\n    listen: 127.0.0.1:1\n    tls: x\n",
                 "4:10: expected a mapping for 'tls'");
    /* tls: what is checked before any file is read */
#define TLS_L "listeners:\n  - name: web\n    listen: 127.0.0.1:1\n    tls:\n"
    EXPECT_ERROR(TLS_L "      min_version: \"1.2\"\n", "5:7: missing required key 'certificates' in 'tls' of listener 'web'");
    EXPECT_ERROR(TLS_L "      certificates: []\n", "5:21: 'certificates' needs at least one entry");
    EXPECT_ERROR(TLS_L "      certificates: [ { cert: a.crt } ]\n", "5:23: missing required key 'key' in 'tls.certificates[0]' of listener 'web'");
    EXPECT_ERROR(TLS_L "      certificates: [ { cert: a.crt, key: a.key } ]\n      min_version: \"1.1\"\n",
                 "6:20: min_version '1.1' is not allowed (1.2 or 1.3; never below 1.2)");
    /* a certificate's sni names follow sni_routes' rules */
    EXPECT_ERROR(TLS_L "      certificates: [ { cert: a.crt, key: a.key, sni: [\"bad name\"] } ]\n",
                 "5:56: host 'bad name' is not a valid host name");
    EXPECT_ERROR(TLS_L "      certificates: [ { cert: a.crt, key: a.key, sni: [a.test, 10.0.0.1] } ]\n",
                 "5:64: sni '10.0.0.1': an IP address is never a TLS server name (RFC 6066)");
    EXPECT_ERROR(TLS_L "      certificates: [ { cert: a.crt, key: a.key, default: true }, { cert: b.crt, key: b.key, default: true } ]\n",
                 "5:67: only one certificate may be the default");
    EXPECT_ERROR(TLS_L "      certificates: [ { cert: /nonexistent/a.crt, key: a.key } ]\n",
                 "5:23: cannot read certificate /nonexistent/a.crt: No such file or directory");
    EXPECT_ERROR(TLS_L "      certificates: [ { cert: a.crt, key: a.key } ]\n      sesion_tickets: false\n",
                 "6:7: unknown key 'sesion_tickets' in 'tls' of listener 'web' (did you mean 'session_tickets'?)");
    /* a nested mapping's unknown key names its whole path and its listener */
    EXPECT_ERROR(TLS_L "      certificates: [ { cert: a.crt, key: a.key } ]\n      client_auth: { ca: a.crt, modee: optional }\n",
                 "6:33: unknown key 'modee' in 'tls.client_auth' of listener 'web' (did you mean 'mode'?)");
    EXPECT_ERROR("listeners:\n  - { name: web, listen: 127.0.0.1:1, http2: { enabeld: true } }\n",
                 "2:48: unknown key 'enabeld' in 'http2' of listener 'web' (did you mean 'enabled'?)");
    EXPECT_ERROR(LISTENER "telemetry: { otlp: { endpoint: \"http://127.0.0.1:4318/v1/traces\", timeot: 1s } }\n",
                 "2:67: unknown key 'timeot' in 'telemetry.otlp' (did you mean 'timeout'?)");
    EXPECT_ERROR("listeners:\n  - { name: t, listen: 127.0.0.1:1, protocol: tcp, upstream: u, tls: {} }\n"
                 "upstreams:\n  - { name: u, targets: [ { address: 127.0.0.1:2 } ] }\n",
                 "2:65: 'tls' (termination) belongs to protocol: http listeners; a tcp listener passes TLS through untouched");
    /* a target's tls */
#define TLS_U "listeners: [ { name: w, listen: 127.0.0.1:1 } ]\nupstreams:\n  - name: u\n    targets:\n      - address: 127.0.0.1:2\n"
    EXPECT_ERROR(TLS_U "        tls: { verify: false, ca: x.pem }\n", "6:31: 'ca' has no use with verify: false");
    EXPECT_ERROR(TLS_U "        tls: { ca: /nonexistent/ca.pem }\n", "6:14: cannot read CA file /nonexistent/ca.pem: No such file or directory");
    EXPECT_ERROR(TLS_U "        tls: { sni: \"a b\" }\n", "6:21: 'a b' is not a server name (a DNS name)");
    /* what a ClientHello cannot carry, sent as one, verified as a host name: never a match */
    EXPECT_ERROR(TLS_U "        tls: { sni: \"*.a.test\" }\n",
                 "6:21: sni '*.a.test': a target's sni is one host name, not a wildcard");
    EXPECT_ERROR(TLS_U "        tls: { sni: 10.1.2.3 }\n",
                 "6:21: sni '10.1.2.3': an IP address is never a TLS server name (RFC 6066); without "
                 "sni the target's IP address is what is verified");
    EXPECT_ERROR(TLS_U "        tls: { verfy: true }\n", "6:16: unknown key 'verfy' in 'targets[0].tls' of upstream 'u' (did you mean 'verify'?)");
    EXPECT_ERROR(TLS_U "        tls: maybe\n", "6:14: expected a boolean for 'tls' (true or false)");
    /* keys of tcp listeners, on an http listener */
    EXPECT_ERROR("listeners:\n  - name: web\n    listen: 127.0.0.1:1\n    upstream: u\n",
                 "4:5: 'upstream' belongs to protocol: tcp listeners (http routes name theirs)");
    EXPECT_ERROR("listeners:\n  - name: web\n    listen: 127.0.0.1:1\n    splice: off\n",
                 "4:5: 'splice' belongs to protocol: tcp listeners");
    /* the resilience keys of an upstream, each with a wrong type */
    static const char *const ukeys[] = {"health", "circuit_breaker", "retry"};
    for (size_t i = 0; i < sizeof ukeys / sizeof ukeys[0]; i++) {
        char yaml[256], want[256];
        snprintf(yaml, sizeof yaml,
                 LISTENER "upstreams:\n  - name: u\n    targets: [ { address: 1.2.3.4:5 } ]\n"
                          "    %s: x\n",
                 ukeys[i]);
        snprintf(want, sizeof want, "5:%zu: expected a mapping for '%s'", strlen(ukeys[i]) + 7, ukeys[i]);
        EXPECT_ERROR(yaml, want);
    }
    EXPECT_ERROR(LISTENER "listeners: []\n", "2:1: duplicate key 'listeners' (first at line 1)");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, plugins: [ { name: echo, config: { a: 1, a: 2 } } ] "
                          "} ]\n",
                 "2:63: duplicate key 'a' (first at line 2)");
    EXPECT_ERROR(LISTENER "[a]: 1\n", "2:1: expected a string key in the top level");
}

static void test_types(void) {
    EXPECT_ERROR(LISTENER "workers: many\n", "2:10: expected an integer for 'workers' (or auto)");
    EXPECT_ERROR(LISTENER "workers: \"4\"\n", "2:10: expected an integer for 'workers' (or auto)");
    EXPECT_ERROR(LISTENER "workers: 0\n", "2:10: 'workers' must be between 1 and 1024");
    EXPECT_ERROR(LISTENER "workers: -3\n", "2:10: 'workers' must be between 1 and 1024");
    EXPECT_ERROR(LISTENER "workers: 99999999999999999999999\n",
                 "2:10: 'workers' must be between 1 and 1024");
    EXPECT_ERROR(LISTENER "workers: 2.5\n", "2:10: expected an integer for 'workers'");
    EXPECT_ERROR(LISTENER "watch: yes\n", "2:8: expected a boolean for 'watch' (true or false)");
    EXPECT_ERROR(LISTENER "watch: \"true\"\n",
                 "2:8: expected a boolean for 'watch' (true or false)");
    EXPECT_ERROR(LISTENER "watch: [true]\n", "2:8: expected a boolean for 'watch' (true or false)");
    EXPECT_ERROR(LISTENER "admin: [127.0.0.1:1]\n", "2:8: expected a mapping for 'admin'");
    EXPECT_ERROR(LISTENER "plugin_paths: plugins\n", "2:15: expected a list for 'plugin_paths'");
    EXPECT_ERROR(LISTENER "plugin_paths: [ [a] ]\n",
                 "2:17: expected a string for 'plugin_paths[0]'");
    EXPECT_ERROR(LISTENER "plugins: { name: echo }\n", "2:10: expected a list for 'plugins'");
    EXPECT_ERROR(LISTENER "plugins: [ echo ]\n", "2:12: expected a mapping for 'plugins[0]'");
    EXPECT_ERROR("listeners: { name: web }\n", "1:12: expected a list for 'listeners'");
    EXPECT_ERROR("listeners: [ web ]\n", "1:14: expected a mapping for 'listeners[0]'");
    EXPECT_ERROR("listeners: [ { name: [web], listen: 127.0.0.1:1 } ]\n",
                 "1:22: expected a string for 'name'");
    EXPECT_ERROR("- a\n- b\n", "1:1: expected a mapping at the top level of the configuration");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, upstream: [u], plugins: [ { name: echo } ] } ]\n",
                 "2:32: expected a string for 'upstream'");
    /* named as a plugin config's own errors are (route and plugin), wherever the chain is */
    EXPECT_ERROR(LISTENER "routes: [ { name: r, plugins: [ { name: echo, config: [1] } ] } ]\n",
                 "2:55: route 'r', plugin 'echo': config: expected a mapping");
    EXPECT_ERROR(LISTENER "plugins: [ { name: echo, config: 5 } ]\n",
                 "2:34: the global chain, plugin 'echo': config: expected a mapping");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, match: [], plugins: [ { name: echo } ] } ]\n",
                 "2:29: expected a mapping for 'match'");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, strip_prefix: 1, match: { paths: [/] }, plugins: "
                          "[ { name: echo } ] } ]\n",
                 "2:36: expected a boolean for 'strip_prefix' (true or false)");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5, weight: "
                          "heavy } ] } ]\n",
                 "2:66: expected an integer for 'weight'");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5, weight: 0 } ] "
                          "} ]\n",
                 "2:66: 'weight' must be between 1 and 1000000");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ], "
                          "keepalive: { max_idle: -1 } } ]\n",
                 "2:85: 'max_idle' must be between 0 and 100000");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: { address: 1.2.3.4:5 } } ]\n",
                 "2:34: expected a list for 'targets'");
    EXPECT_ERROR("listeners: [ { name: web, listen: \"a\\0b\" } ]\n",
                 "1:35: 'listen' contains a NUL byte");
}

/* `address: NAME:PORT`, `registry:` and `resolver:`: a name reserves SL_DNS_SLOTS empty
 * slots after the static targets, the registry its max_targets after those. */
static void test_dynamic_targets(void) {
    sl_config_t *c = PARSE_OK(LISTENER "resolver: { nameservers: [\"127.0.0.1:5353\"], timeout: 200ms, "
                                       "attempts: 3, min_ttl: 2s, max_ttl: 1m, ipv6: true }\n"
                                       "upstreams:\n  - name: u\n    registry: { enabled: true, max_ttl: 30s, "
                                       "max_targets: 4 }\n    targets: [ { address: 10.0.0.1:80 }, "
                                       "{ address: API.example.com:8080 } ]\n");
    if (c) {
        const sl_upstream_conf_t *u = &c->upstreams[0];
        CHECK_INT(u->ntargets, 1 + SL_DNS_SLOTS + 4);
        CHECK_INT(u->nnames, 1);
        CHECK_STR(u->names[0].host, "api.example.com");
        CHECK_INT(u->names[0].port, 8080);
        CHECK_INT(u->names[0].first, 1);
        CHECK_INT(u->targets[0].kind, SL_TARGET_STATIC);
        CHECK_INT(atomic_load(&u->targets[0].up), 1);
        CHECK_INT(u->targets[1].kind, SL_TARGET_DNS);
        CHECK_INT(atomic_load(&u->targets[1].up), 0);
        CHECK_INT(u->targets[1 + SL_DNS_SLOTS].kind, SL_TARGET_REGISTERED);
        CHECK_INT(u->registry_first, 1 + SL_DNS_SLOTS);
        CHECK_INT(u->registry_max_ttl_ms, 30000);
        CHECK_STR(c->resolver.nameservers, "127.0.0.1:5353");
        CHECK_INT(c->resolver.timeout_ms, 200);
        CHECK_INT(c->resolver.attempts, 3);
        CHECK_INT(c->resolver.min_ttl_ms, 2000);
        CHECK_INT(c->resolver.max_ttl_ms, 60000);
        CHECK_INT(c->resolver.ipv6, 1);
        sl_config_free(c);
    }
    c = PARSE_OK(LISTENER "upstreams: [ { name: u, registry: { enabled: true }, targets: [] } ]\n");
    if (c) {
        CHECK_INT(c->upstreams[0].ntargets, 32);
        CHECK_INT(c->resolver.min_ttl_ms, 1000);
        CHECK_INT(c->resolver.max_ttl_ms, 300000);
        sl_config_free(c);
    }
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: api:0 } ] } ]\n",
                 "2:47: target address 'api:0' needs a port from 1 to 65535");
    EXPECT_ERROR(LISTENER "resolver: { min_ttl: 10s, max_ttl: 1s }\n",
                 "2:36: resolver.max_ttl must be at least min_ttl");
}

static void test_required_and_names(void) {
    EXPECT_ERROR("workers: 1\n", "1:1: missing required key 'listeners' in the top level");
    EXPECT_ERROR("", "1:1: the configuration is empty: 'listeners' is required");
    EXPECT_ERROR("# only a comment\n", "1:1: the configuration is empty: 'listeners' is required");
    EXPECT_ERROR("listeners: []\n", "1:12: at least one listener is required");
    EXPECT_ERROR("listeners:\n", "1:1: 'listeners' needs a value");
    EXPECT_ERROR("listeners:\n  - listen: 127.0.0.1:1\n",
                 "2:5: missing required key 'name' in listeners[0]");
    EXPECT_ERROR("listeners:\n  - name: web\n",
                 "2:5: missing required key 'listen' in listener 'web'");
    EXPECT_ERROR("listeners:\n  - name: web\n    listen:\n", "3:5: 'listen' needs a value");
    EXPECT_ERROR(
        "listeners: [ { name: \"my web\", listen: 127.0.0.1:1 } ]\n",
        "1:22: invalid listener name 'my web': use 1 to 64 letters, digits, '.', '-' or '_'");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u } ]\n",
                 "2:14: missing required key 'targets' in upstream 'u'");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [] } ]\n",
                 "2:34: upstream 'u' needs at least one target (or registry: { enabled: true })");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { weight: 1 } ] } ]\n",
                 "2:36: missing required key 'address' in targets[0] of upstream 'u'");
    EXPECT_ERROR(LISTENER "routes: [ { match: { paths: [/] }, plugins: [ { name: echo } ] } ]\n",
                 "2:11: missing required key 'name' in routes[0]");
    EXPECT_ERROR(LISTENER "routes:\n  - name: r\n    match: { paths: [/] }\n",
                 "3:5: route 'r' needs an upstream or at least one plugin");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, plugins: [ { config: {} } ] } ]\n",
                 "2:33: missing required key 'name' in plugins[0] of route 'r'");
    EXPECT_ERROR(LISTENER "plugins: [ { name: ../evil } ]\n",
                 "2:20: invalid plugin name '../evil': use 1 to 64 letters, digits, '-' or '_'");

    EXPECT_ERROR("listeners:\n"
                 "  - { name: web, listen: 127.0.0.1:1 }\n"
                 "  - { name: web, listen: 127.0.0.1:2 }\n",
                 "3:13: duplicate listener name 'web' (first defined at line 2)");
    EXPECT_ERROR(LISTENER "upstreams:\n"
                          "  - { name: u, targets: [ { address: 1.2.3.4:5 } ] }\n"
                          "  - { name: u, targets: [ { address: 1.2.3.4:6 } ] }\n",
                 "4:13: duplicate upstream name 'u' (first defined at line 3)");
    EXPECT_ERROR(LISTENER "routes:\n"
                          "  - { name: r, plugins: [ { name: echo } ] }\n"
                          "  - { name: r, plugins: [ { name: echo } ] }\n",
                 "4:13: duplicate route name 'r' (first defined at line 3)");
    /* route="none" labels requests no route matched: a route so named would share its series */
    EXPECT_ERROR(LISTENER "routes:\n"
                          "  - { name: none, plugins: [ { name: echo } ] }\n",
                 "3:13: route name 'none' is reserved: the metrics label requests that matched no route "
                 "with route=\"none\"");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, upstream: nope } ]\n",
                 "2:32: route 'r' names unknown upstream 'nope'");
    EXPECT_ERROR("listeners:\n"
                 "  - { name: a, listen: 127.0.0.1:8080 }\n"
                 "  - { name: b, listen: 127.0.0.1:8080 }\n",
                 "3:24: address 127.0.0.1:8080 is already used by the listener at line 2");
    EXPECT_ERROR("admin: { listen: 127.0.0.1:8080 }\n" LISTENER,
                 "1:18: address 127.0.0.1:8080 is already used by the listener at line 2");
    EXPECT_ERROR("listeners: [ { name: a, listen: 127.0.0.1:9090 } ]\n",
                 "1:14: address 127.0.0.1:9090 is the default admin address (move the admin "
                 "listener with admin: { listen: ... })");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 }, { address: "
                          "1.2.3.4:5 } ] } ]\n",
                 "2:71: target 1.2.3.4:5 is listed twice in upstream 'u'");
}

static void test_values(void) {
    /* a tcp listener: its upstream resolved, its defaults and its L4 keys */
    sl_config_t *tc = PARSE_OK("listeners:\n"
                               "  - { name: pg, listen: 127.0.0.1:1, protocol: tcp, upstream: u }\n"
                               "  - { name: px, listen: 127.0.0.1:2, protocol: tcp, upstream: u, splice: off,\n"
                               "      idle_timeout: 5s, proxy_protocol: { send: v2 },\n"
                               "      accept_proxy_protocol: { from: [10.0.0.0/8, \"::1\"] } }\n"
                               "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ],\n"
                               "               timeouts: { connect: 250ms } } ]\n");
    if (tc) {
        const sl_listener_conf_t *a = &tc->listeners[0], *b = &tc->listeners[1];
        CHECK_INT(a->protocol, SL_PROTO_TCP);
        CHECK_INT(a->upstream, 0);
        CHECK_INT(a->splice, SL_SPLICE_AUTO);
        CHECK_INT(a->proxy_send, SL_PROXY_NONE);
        CHECK(!a->accept_proxy);
        CHECK_INT(a->idle_timeout_ms, 300 * 1000);
        CHECK_INT(a->connect_timeout_ms, 250);
        CHECK_INT(b->splice, SL_SPLICE_OFF);
        CHECK_INT(b->idle_timeout_ms, 5000);
        CHECK_INT(b->proxy_send, SL_PROXY_V2);
        CHECK(b->accept_proxy);
        CHECK_INT(b->nproxy_from, 2);
        if (b->nproxy_from == 2) {
            CHECK_INT(b->proxy_from[0].bits, 96 + 8);
            CHECK_INT(b->proxy_from[0].ip[12], 10);
            CHECK_INT(b->proxy_from[1].bits, 128);
            CHECK_INT(b->proxy_from[1].ip[15], 1);
        }
    }
    sl_config_free(tc);
    EXPECT_ERROR("listeners: [ { name: web, listen: 127.0.0.1:1, protocol: udp } ]\n",
                 "1:58: unknown protocol 'udp' (expected http or tcp)");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, balancer: random, targets: [ { address: "
                          "1.2.3.4:5 } ] } ]\n",
                 "2:35: unknown balancer 'random' (expected round-robin, weighted-round-robin, "
                 "least-conn, p2c-ewma or consistent-hash)");

    EXPECT_ERROR(LISTENER "shutdown_timeout: 30\n",
                 "2:19: duration '30' for 'shutdown_timeout' needs a unit: ms, s, m or h");
    EXPECT_ERROR(LISTENER "shutdown_timeout: 1.5s\n",
                 "2:19: invalid duration '1.5s' for 'shutdown_timeout' (expected e.g. 250ms, 10s, "
                 "5m, 1h)");
    EXPECT_ERROR(LISTENER "shutdown_timeout: 99999999999999999h\n",
                 "2:19: duration '99999999999999999h' for 'shutdown_timeout' is too large");
    EXPECT_ERROR(LISTENER "shutdown_timeout: { a: 1 }\n",
                 "2:19: expected a duration for 'shutdown_timeout'");
    EXPECT_ERROR("listeners: [ { name: web, listen: 127.0.0.1:1, idle_timeout: 0s } ]\n",
                 "1:62: 'idle_timeout' must be greater than 0");
    EXPECT_ERROR("listeners: [ { name: web, listen: 127.0.0.1:1, max_body: 10MB } ]\n",
                 "1:58: size '10MB' for 'max_body': use KiB, MiB or GiB (powers of 1024)");
    EXPECT_ERROR("listeners: [ { name: web, listen: 127.0.0.1:1, max_body: 10 MiB } ]\n",
                 "1:58: invalid size '10 MiB' for 'max_body' (expected bytes or e.g. 64KiB, "
                 "10MiB, 1GiB)");
    EXPECT_ERROR("listeners: [ { name: web, listen: 127.0.0.1:1, max_body: 99999999999999GiB } ]\n",
                 "1:58: size '99999999999999GiB' for 'max_body' is too large");
    EXPECT_ERROR("listeners: [ { name: web, listen: 127.0.0.1:1, max_header_size: 4GiB } ]\n",
                 "1:65: size '4GiB' for 'max_header_size' is too large (at most 4294967295 bytes)");
    EXPECT_ERROR("listeners: [ { name: web, listen: 127.0.0.1:1, max_request_line: 0 } ]\n",
                 "1:66: 'max_request_line' must be at least 1");

    EXPECT_ERROR("listeners: [ { name: web, listen: web.example.com:80 } ]\n",
                 "1:35: invalid address 'web.example.com:80' for 'listen': not a numeric IP "
                 "address (names are not resolved; use an IP or localhost)");
    EXPECT_ERROR("listeners: [ { name: web, listen: 127.0.0.1:65536 } ]\n",
                 "1:35: invalid address '127.0.0.1:65536' for 'listen': the port must be a number "
                 "from 0 to 65535");
    EXPECT_ERROR("listeners: [ { name: web, listen: 8080 } ]\n",
                 "1:35: invalid address '8080' for 'listen': expected HOST:PORT");
    EXPECT_ERROR("listeners: [ { name: web, listen: \"::1:80\" } ]\n",
                 "1:35: invalid address '::1:80' for 'listen': an IPv6 address needs brackets, as "
                 "in [::1]:8080");
    EXPECT_ERROR(LISTENER "admin: { listen: \":9090\" }\n",
                 "2:18: invalid address ':9090' for 'listen': the host is missing (use *:PORT to "
                 "listen on every address)");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: \"*:80\" } ] } ]\n",
                 "2:47: target address '*:80' must name a host, not every address");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: 10.0.0.1:0 } ] } ]\n",
                 "2:47: target address '10.0.0.1:0' needs a port other than 0");

    EXPECT_ERROR(LISTENER
                 "routes: [ { name: r, match: { hosts: [\"a.*.com\"] }, plugins: [ { name: "
                 "echo } ] } ]\n",
                 "2:39: host 'a.*.com': '*' is only allowed as a whole first label, as in "
                 "*.example.com");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, match: { hosts: [\"*\"] }, plugins: [ { name: echo "
                          "} ] } ]\n",
                 "2:39: host '*': '*' is only allowed as a whole first label, as in *.example.com");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, match: { hosts: [\"*foo.com\"] }, plugins: [ { "
                          "name: echo } ] } ]\n",
                 "2:39: host '*foo.com': '*' is only allowed as a whole first label, as in "
                 "*.example.com");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, match: { hosts: [a.com:80] }, plugins: [ { name: "
                          "echo } ] } ]\n",
                 "2:39: host 'a.com:80': hosts match without the port");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, match: { paths: [v1/] }, plugins: [ { name: echo } "
                          "] } ]\n",
                 "2:39: path 'v1/' must start with '/'");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, match: { methods: [\"GE T\"] }, plugins: [ { name: "
                          "echo } ] } ]\n",
                 "2:41: method 'GE T' is not a valid HTTP method token");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, match: { headers: { \"X Y\": a } }, plugins: [ { "
                          "name: echo } ] } ]\n",
                 "2:42: header name 'X Y' is not a valid token");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, match: { headers: { a: 1, A: 2 } }, plugins: [ { "
                          "name: echo } ] } ]\n",
                 "2:48: header 'A' is matched twice (header names ignore case)");
    EXPECT_ERROR(LISTENER "routes: [ { name: r, strip_prefix: true, plugins: [ { name: echo } ] } "
                          "]\n",
                 "2:36: strip_prefix needs match.paths to know what to strip");

    /* hosts accept IP literals and bracketed IPv6 */
    sl_config_t *cfg = PARSE_OK(LISTENER "routes: [ { name: r, match: { hosts: [10.1.2.3, "
                                         "\"[::1]\"] }, plugins: [ { name: echo } ] } ]\n");
    if (cfg) CHECK_STR(cfg->routes[0].hosts[1], "[::1]");
    sl_config_free(cfg);
}

static void test_yaml_errors_and_collection(void) {
    EXPECT_ERROR("listeners: [ { name: web\n",
                 "2:1: YAML syntax error: did not find expected ',' or '}' (while parsing a flow "
                 "mapping at line 1, column 14)");
    EXPECT_ERROR("listeners:\n  - name: web\n\tlisten: x\n",
                 "3:1: YAML syntax error: found a tab character that violates indentation (while "
                 "scanning a plain scalar at line 2, column 11)");
    EXPECT_ERROR("listeners: [ { name: web, listen: *:8080 } ]\n",
                 "1:36: YAML syntax error: did not find expected alphabetic or numeric character "
                 "(while scanning an alias at line 1, column 35)");
    EXPECT_ERROR(LISTENER "---\nworkers: 1\n",
                 "3:1: only one YAML document is allowed in a configuration");
    EXPECT_ERROR(LISTENER "watch: \xff\n", "2:8: invalid input: invalid leading UTF-8 octet");

    /* every error is reported, in file order, whatever order the sections are checked in */
    const char *two[] = {
        "3:3: unknown key 'bogus' in 'admin'",
        "4:10: expected an integer for 'workers' (or auto)",
    };
    expect_errors(__LINE__, LISTENER "admin:\n  bogus: 1\nworkers: many\n", 2, two);
    const char *many[] = {
        "1:1: missing required key 'listeners' in the top level",
        "2:26: route 'r' names unknown upstream 'x'",
        "3:80: duration '5' for 'read' needs a unit: ms, s, m or h",
        "3:83: unknown key 'conect' in 'timeouts' of upstream 'u' (did you mean 'connect'?)",
    };
    expect_errors(__LINE__,
                  "routes:\n"
                  "  - { name: r, upstream: x }\n"
                  "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:1 } ], "
                  "timeouts: { read: 5, conect: 1s } } ]\n",
                  4, many);
    /* "timeouts" sits on line 3 col 62; its keys in flow style are on the same line */

    /* recursive aliases and alias bombs in plugin configs stop with an error, not a crash */
    EXPECT_ERROR(LISTENER
                 "routes: [ { name: r, plugins: [ { name: echo, config: &a { k: [ *a ] } } ] } "
                 "]\n",
                 "2:63: plugin config is nested more than 32 levels deep");
    char bomb[4096];
    int off = snprintf(bomb, sizeof bomb,
                       LISTENER
                       "a0: &a0 [xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx]\n");
    (void)off;
    /* build the bomb inside a plugin config: 20 levels of 4x fan-out */
    char yaml[8192];
    size_t n = (size_t)snprintf(yaml, sizeof yaml,
                                LISTENER "routes:\n  - name: r\n    plugins:\n      - name: echo\n"
                                         "        config:\n          l0: &l0 [aaaaaaaaaaaaaaaa]\n");
    for (int i = 1; i <= 20; i++)
        n += (size_t)snprintf(yaml + n, sizeof yaml - n,
                              "          l%d: &l%d [*l%d, *l%d, *l%d, *l%d]\n", i, i, i - 1, i - 1,
                              i - 1, i - 1);
    EXPECT_ERROR(yaml, "7:11: route 'r', plugin 'echo': config is larger than 1048576 bytes as JSON");
}

static void test_scalar_parsers(void) {
    uint64_t v = 0;
    CHECK_INT(sl_parse_duration_ms("250ms", &v), 0);
    CHECK_INT(v, 250);
    CHECK_INT(sl_parse_duration_ms("10s", &v), 0);
    CHECK_INT(v, 10000);
    CHECK_INT(sl_parse_duration_ms("5m", &v), 0);
    CHECK_INT(v, 300000);
    CHECK_INT(sl_parse_duration_ms("1h", &v), 0);
    CHECK_INT(v, 3600000);
    CHECK_INT(sl_parse_duration_ms("0s", &v), 0);
    CHECK_INT(v, 0);
    CHECK_INT(sl_parse_duration_ms("18446744073709551615ms", &v), 0);
    CHECK(v == UINT64_MAX);
    CHECK_INT(sl_parse_duration_ms("18446744073709551616ms", &v), -1);
    CHECK_INT(sl_parse_duration_ms("5124095576030432h", &v), -1);
    static const char *const bad_durations[] = {"",    "10", "s",    "-1s", "+1s", "1.5s",  "1 s",
                                                " 1s", "1S", "1sec", "1d",  "1us", "1m30s", "ms"};
    for (size_t i = 0; i < sizeof bad_durations / sizeof bad_durations[0]; i++) {
        int rc = sl_parse_duration_ms(bad_durations[i], &v);
        if (rc != -1) fprintf(stderr, "duration '%s' was accepted\n", bad_durations[i]);
        CHECK_INT(rc, -1);
    }

    CHECK_INT(sl_parse_size("0", &v), 0);
    CHECK_INT(v, 0);
    CHECK_INT(sl_parse_size("512", &v), 0);
    CHECK_INT(v, 512);
    CHECK_INT(sl_parse_size("64KiB", &v), 0);
    CHECK_INT(v, 65536);
    CHECK_INT(sl_parse_size("10MiB", &v), 0);
    CHECK_INT(v, 10485760);
    CHECK_INT(sl_parse_size("1GiB", &v), 0);
    CHECK_INT(v, 1073741824);
    CHECK_INT(sl_parse_size("17179869183GiB", &v), 0);
    CHECK(v == 17179869183ull << 30);
    CHECK_INT(sl_parse_size("17179869184GiB", &v), -1);
    CHECK_INT(sl_parse_size("18446744073709551616", &v), -1);
    static const char *const bad_sizes[] = {"",       "KiB",   "1KB",  "1kb",  "1K",
                                            "1MB",    "1GB",   "1kib", "1TiB", "-1",
                                            "1.5MiB", "1 KiB", "1B",   "0x10"};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        int rc = sl_parse_size(bad_sizes[i], &v);
        if (rc != -1) fprintf(stderr, "size '%s' was accepted\n", bad_sizes[i]);
        CHECK_INT(rc, -1);
    }

    struct {
        const char *in, *ip;
        int family, port;
    } good[] = {
        {"127.0.0.1:8080", "127.0.0.1", AF_INET, 8080},
        {"0.0.0.0:0", "0.0.0.0", AF_INET, 0},
        {"*:65535", "0.0.0.0", AF_INET, 65535},
        {"localhost:80", "127.0.0.1", AF_INET, 80},
        {"LocalHost:80", "127.0.0.1", AF_INET, 80},
        {"[::1]:443", "::1", AF_INET6, 443},
        {"[::]:1", "::", AF_INET6, 1},
        {"[2001:db8::7]:00080", "2001:db8::7", AF_INET6, 80},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        sl_addr_t a;
        char ip[64];
        CHECK_INT(sl_parse_addr(good[i].in, &a), 0);
        CHECK_STR(a.text, good[i].in);
        CHECK_INT(a.ss.ss_family, good[i].family);
        CHECK_INT(a.len, good[i].family == AF_INET ? sizeof(struct sockaddr_in)
                                                   : sizeof(struct sockaddr_in6));
        CHECK_INT(port_of(&a), good[i].port);
        CHECK_STR(ip_of(&a, ip, sizeof ip), good[i].ip);
        free(a.text);
    }
    static const char *const bad_addrs[] = {"",
                                            "127.0.0.1",
                                            "127.0.0.1:",
                                            ":80",
                                            "127.0.0.1:65536",
                                            "127.0.0.1:-1",
                                            "127.0.0.1:8o",
                                            "127.0.0.1:123456",
                                            "256.0.0.1:80",
                                            "1.2.3:80",
                                            "example.com:80",
                                            "::1:80",
                                            "[::1]",
                                            "[::1]80",
                                            "[nope]:80",
                                            "[127.0.0.1]:80",
                                            "[::1:80",
                                            "127.0.0.1:80 ",
                                            "*:",
                                            "**:80"};
    for (size_t i = 0; i < sizeof bad_addrs / sizeof bad_addrs[0]; i++) {
        sl_addr_t a;
        int rc = sl_parse_addr(bad_addrs[i], &a);
        if (rc != -1) fprintf(stderr, "address '%s' was accepted\n", bad_addrs[i]);
        CHECK_INT(rc, -1);
        CHECK(a.text == NULL);
    }
}

static void test_errors_list(void) {
    sl_errors_t errs = {0};
    for (int i = 0; i < 20; i++) sl_errors_add(&errs, "f.yaml", i + 1, 2, "problem %d", i);
    CHECK_INT(errs.n, 20);
    CHECK(errs.cap >= 20);
    CHECK_STR(errs.lines[0], "f.yaml:1:2: problem 0");
    CHECK_STR(errs.lines[19], "f.yaml:20:2: problem 19");
    sl_errors_free(&errs);
    CHECK_INT(errs.n, 0);
    CHECK(errs.lines == NULL);
    sl_errors_free(&errs); /* twice is harmless */

    /* errors are appended after what the list already holds */
    sl_errors_add(&errs, "x", 1, 1, "earlier");
    sl_config_t *cfg = NULL;
    CHECK_INT(sl_config_parse("t.yaml", "workers: 1\n", 11, &cfg, &errs), -1);
    CHECK(cfg == NULL);
    CHECK_INT(errs.n, 2);
    CHECK_STR(errs.lines[0], "x:1:1: earlier");
    sl_errors_free(&errs);

    /* text need not be NUL-terminated: only len bytes are read */
    const char text[] = LISTENER "workers: many";
    CHECK_INT(sl_config_parse("t.yaml", text, strlen(LISTENER), &cfg, &errs), 0);
    CHECK_INT(errs.n, 0);
    sl_config_free(cfg);
    sl_config_free(NULL);

    CHECK_INT(sl_config_load("/nonexistent/sluice.yaml", &cfg, &errs), -1);
    CHECK(cfg == NULL);
    CHECK_INT(errs.n, 1);
    if (errs.n)
        CHECK_STR(errs.lines[0],
                  "/nonexistent/sluice.yaml:1:1: cannot open: No such file or directory");
    sl_errors_free(&errs);
    CHECK_INT(sl_config_load("/", &cfg, &errs), -1);
    CHECK_INT(errs.n, 1);
    if (errs.n) CHECK_STR(errs.lines[0], "/:1:1: cannot read: Is a directory");
    sl_errors_free(&errs);
}

static void test_shipped_configs(void) {
    static const char *const patterns[] = {
        SL_SOURCE_DIR "/conf/*.yaml",           SL_SOURCE_DIR "/examples/*.yaml",
        SL_SOURCE_DIR "/examples/*/*.yaml",     SL_SOURCE_DIR "/examples/*/*/*.yaml",
        SL_SOURCE_DIR "/examples/*/*/*/*.yaml",
    };
    size_t total = 0;
    for (size_t p = 0; p < sizeof patterns / sizeof patterns[0]; p++) {
        glob_t g;
        if (glob(patterns[p], 0, NULL, &g) != 0) continue;
        for (size_t i = 0; i < g.gl_pathc; i++) {
            /* examples/NAME/smoke.yaml is a `sluice test` spec, not a config */
            const char *base = strrchr(g.gl_pathv[i], '/');
            if (base && strcmp(base + 1, "smoke.yaml") == 0) continue;
            sl_errors_t errs = {0};
            sl_config_t *cfg = NULL;
            int rc = sl_config_load(g.gl_pathv[i], &cfg, &errs);
            if (rc != 0) fprintf(stderr, "%s does not parse:\n", g.gl_pathv[i]);
            for (size_t j = 0; j < errs.n; j++) fprintf(stderr, "    %s\n", errs.lines[j]);
            CHECK_INT(rc, 0);
            sl_config_free(cfg);
            sl_errors_free(&errs);
            total++;
        }
        globfree(&g);
    }
    CHECK(total >= 1);

    /* the default config: what a bare `sluice` runs */
    sl_errors_t errs = {0};
    sl_config_t *cfg = NULL;
    CHECK_INT(sl_config_load(SL_SOURCE_DIR "/conf/sluice.yaml", &cfg, &errs), 0);
    sl_errors_free(&errs);
    if (!cfg) return;
    CHECK_INT(cfg->nlisteners, 1);
    CHECK_STR(cfg->listeners[0].name, "web");
    CHECK_STR(cfg->listeners[0].listen.text, "127.0.0.1:8080");
    CHECK_INT(cfg->admin_enabled, true);
    CHECK_STR(cfg->admin_listen.text, "127.0.0.1:9090");
    CHECK_INT(cfg->nroutes, 1);
    CHECK_STR(cfg->routes[0].name, "echo");
    CHECK_INT(cfg->routes[0].upstream, -1);
    CHECK_INT(cfg->routes[0].npaths, 1);
    if (cfg->routes[0].npaths) CHECK_STR(cfg->routes[0].paths[0], "/");
    CHECK_INT(cfg->routes[0].nplugins, 1);
    if (cfg->routes[0].nplugins) CHECK_STR(cfg->routes[0].plugins[0].name, "echo");
    sl_config_free(cfg);
}

/* issue 4's keys: balancers, hash_on, health, circuit_breaker, retry, split */
static void test_resilience(void) {
    sl_config_t *cfg = PARSE_OK(
        LISTENER
        "upstreams:\n"
        "  - name: api\n"
        "    balancer: consistent-hash\n"
        "    hash_on: header:X-User\n"
        "    hash_epsilon: 0.5\n"
        "    targets: [ { address: 127.0.0.1:9001, weight: 5 }, { address: 127.0.0.1:9002 } ]\n"
        "    health:\n"
        "      active: { type: http, path: /healthz, expect_status: 204, interval: 500ms, timeout: 200ms,\n"
        "                healthy_threshold: 3, unhealthy_threshold: 4 }\n"
        "      passive: { max_failures: 7, window: 20s }\n"
        "    circuit_breaker: { failure_ratio: 0.25, min_requests: 10, window: 5s, open_timeout: 2s,\n"
        "                       max_open_timeout: 30s, half_open_requests: 3, success_threshold: 4 }\n"
        "    retry: { attempts: 3, on: [502, 503, connect_error], backoff: 10ms, max_backoff: 100ms,\n"
        "             max_body: 2MiB, hedge_after: 50ms }\n"
        "  - { name: canary, balancer: p2c-ewma, targets: [ { address: 127.0.0.1:9003 } ] }\n"
        "  - { name: w, balancer: weighted-round-robin, targets: [ { address: 127.0.0.1:9004, weight: 3 } ] }\n"
        "  - { name: lc, balancer: least-conn, health: { active: { type: tcp } },\n"
        "      targets: [ { address: 127.0.0.1:9005 } ] }\n"
        "routes:\n"
        "  - name: r\n"
        "    split:\n"
        "      - { upstream: canary, match: { headers: { X-Canary: \"1\" } } }\n"
        "      - { upstream: canary, match: { cookies: { beta: yes } } }\n"
        "      - { upstream: api, weight: 90 }\n"
        "      - { upstream: canary, weight: 10 }\n");
    if (!cfg) return;
    const sl_upstream_conf_t *u = &cfg->upstreams[0];
    CHECK_INT(u->balancer, SL_LB_CONSISTENT_HASH);
    CHECK_INT(u->hash_on, SL_HASH_HEADER);
    CHECK_STR(u->hash_name, "X-User");
    CHECK(u->hash_epsilon == 0.5);
    CHECK_INT(u->targets[0].weight, 5);
    CHECK_INT(u->health.active_type, SL_PROBE_HTTP);
    CHECK_STR(u->health.path, "/healthz");
    CHECK_INT(u->health.expect_status, 204);
    CHECK_INT(u->health.interval_ms, 500);
    CHECK_INT(u->health.timeout_ms, 200);
    CHECK_INT(u->health.healthy_threshold, 3);
    CHECK_INT(u->health.unhealthy_threshold, 4);
    CHECK(u->health.passive);
    CHECK_INT(u->health.max_failures, 7);
    CHECK_INT(u->health.window_ms, 20000);
    CHECK(u->breaker.enabled);
    CHECK(u->breaker.failure_ratio == 0.25);
    CHECK_INT(u->breaker.min_requests, 10);
    CHECK_INT(u->breaker.window_ms, 5000);
    CHECK_INT(u->breaker.open_timeout_ms, 2000);
    CHECK_INT(u->breaker.max_open_timeout_ms, 30000);
    CHECK_INT(u->breaker.half_open_requests, 3);
    CHECK_INT(u->breaker.success_threshold, 4);
    CHECK_INT(u->retry.attempts, 3);
    CHECK_INT(u->retry.nstatuses, 2);
    CHECK_INT(u->retry.statuses[1], 503);
    CHECK_INT(u->retry.on_flags, SL_RETRY_ON_CONNECT_ERROR);
    CHECK_INT(u->retry.backoff_ms, 10);
    CHECK_INT(u->retry.max_backoff_ms, 100);
    CHECK_INT(u->retry.max_body, 2 * 1024 * 1024);
    CHECK_INT(u->retry.hedge_after_ms, 50);
    /* defaults: no breaker, no probes, one attempt */
    u = &cfg->upstreams[1];
    CHECK_INT(u->balancer, SL_LB_P2C_EWMA);
    CHECK(!u->breaker.enabled);
    CHECK_INT(u->health.active_type, SL_PROBE_NONE);
    CHECK(!u->health.passive);
    CHECK_INT(u->retry.attempts, 1);
    CHECK_INT(u->retry.max_body, 1024 * 1024);
    CHECK_INT(cfg->upstreams[2].balancer, SL_LB_WEIGHTED_ROUND_ROBIN);
    CHECK_INT(cfg->upstreams[2].targets[0].weight, 3);
    CHECK_INT(cfg->upstreams[3].balancer, SL_LB_LEAST_CONN);
    CHECK_INT(cfg->upstreams[3].health.active_type, SL_PROBE_TCP);
    const sl_route_conf_t *r = &cfg->routes[0];
    CHECK_INT(r->upstream, -1);
    CHECK_INT(r->nsplit, 4);
    CHECK_INT(r->split[0].upstream, 1);
    CHECK_STR(r->split[0].header, "X-Canary");
    CHECK_STR(r->split[0].header_value, "1");
    CHECK_STR(r->split[1].cookie, "beta");
    CHECK_STR(r->split[1].cookie_value, "yes");
    CHECK_INT(r->split[2].upstream, 0);
    CHECK_INT(r->split[2].weight, 90);
    CHECK_INT(r->split[3].weight, 10);
    sl_config_free(cfg);

#define UP(extra) LISTENER "upstreams:\n  - name: u\n    targets: [ { address: 1.2.3.4:5 } ]\n    " extra "\n"
    EXPECT_ERROR(UP("balancer: round-robin\n    hash_on: ip"), "6:14: hash_on needs balancer consistent-hash");
    EXPECT_ERROR(UP("balancer: consistent-hash\n    hash_on: \"header:\""),
                 "6:14: hash_on 'header:' needs a header or cookie name after the colon");
    EXPECT_ERROR(UP("balancer: consistent-hash\n    hash_on: query"),
                 "6:14: unknown hash_on 'query' (expected ip, path, header:NAME or cookie:NAME)");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5, weight: 2 } ] } ]\n",
                 "2:66: weight 2 needs balancer weighted-round-robin or consistent-hash");
    EXPECT_ERROR(UP("circuit_breaker: { failure_ratio: 1.5 }"), "5:39: 'failure_ratio' must be between 0.01 and 1");
    EXPECT_ERROR(UP("circuit_breaker: { failure_ratio: half }"), "5:39: expected a number for 'failure_ratio'");
    EXPECT_ERROR(UP("circuit_breaker: { open_timeout: 5s, max_open_timeout: 1s }"),
                 "5:60: max_open_timeout must be at least open_timeout");
    EXPECT_ERROR(UP("circuit_breaker: { half_open: 2 }"),
                 "5:24: unknown key 'half_open' in 'circuit_breaker' of upstream 'u'");
    EXPECT_ERROR(UP("retry: { attempts: 2, on: [404] }"), "5:32: 'on' must be between 500 and 599");
    EXPECT_ERROR(UP("retry: { attempts: 2, on: [reset] }"),
                 "5:32: unknown retry condition 'reset' (expected a 5xx status, connect_error or timeout)");
    EXPECT_ERROR(UP("retry: { attempts: 0 }"), "5:24: 'attempts' must be between 1 and 10");
    EXPECT_ERROR(UP("health: { active: { type: udp } }"), "5:31: unknown probe type 'udp' (expected http, tcp or grpc)");
    EXPECT_ERROR(UP("health: { active: { type: tcp, path: /h } }"), "5:42: a tcp probe has no path");
    EXPECT_ERROR(UP("health: { active: { path: health } }"),
                 "5:31: probe path 'health' must start with '/' and contain no spaces");
#undef UP
#define RT(extra) LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ] } ]\n" \
                  "routes:\n  - name: r\n    " extra "\n"
    EXPECT_ERROR(RT("upstream: u\n    split: [ { upstream: u, weight: 1 } ]"),
                 "6:5: route 'r' has both upstream and split: keep one");
    EXPECT_ERROR(RT("split: [ { upstream: nope, weight: 1 } ]"),
                 "5:26: split[0] of route 'r' names unknown upstream 'nope'");
    EXPECT_ERROR(RT("split: [ { upstream: u } ]"), "5:14: split[0] of route 'r' needs a weight or a match");
    EXPECT_ERROR(RT("split: [ { upstream: u, match: { cookies: { a: b }, header: x } }, { upstream: u, weight: 1 } ]"),
                 "5:57: unknown key 'header' in 'split[0].match' of route 'r' (did you mean 'headers'?)");
    EXPECT_ERROR(RT("split: [ { upstream: u, weight: 0 } ]"),
                 "5:12: split needs an arm without match whose weight is above 0");
    EXPECT_ERROR(RT("split: [ { upstream: u, match: { headers: { A: b, C: d } } }, { upstream: u, weight: 1 } ]"),
                 "5:47: 'headers' of a split arm takes exactly one NAME: VALUE");
    EXPECT_ERROR(RT("split: [ { upstream: u, weight: 1, match: { cookies: { a: b } } } ]"),
                 "5:29: split[0] of route 'r' takes a weight or a match, not both");
    EXPECT_ERROR(RT("split: []"), "5:12: split needs at least one arm");
#undef RT
}

/* issue 5's consumers: credentials checked for the built-in auth plugins, unique keys */
static void test_consumers(void) {
    sl_config_t *cfg = PARSE_OK(LISTENER
                                "consumer_header: X-Authenticated-User\n"
                                "consumers:\n"
                                "  - name: alice\n"
                                "    credentials:\n"
                                "      key-auth: { key: k-123 }\n"
                                "      basic-auth: { username: alice, password_hash: \"$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1\" }\n"
                                "  - { name: bob, credentials: { my-auth: { token: 7 } } }\n"
                                "  - { name: carol }\n");
    if (cfg) {
        CHECK_INT(cfg->nconsumers, 3);
        CHECK_STR(cfg->consumer_header, "X-Authenticated-User");
        CHECK_STR(cfg->consumers[0].name, "alice");
        CHECK_STR(cfg->consumers[0].credentials_json,
                  "{\"key-auth\":{\"key\":\"k-123\"},\"basic-auth\":{\"username\":\"alice\",\"password_hash\":\"$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1\"}}");
        CHECK_STR(cfg->consumers[1].credentials_json, "{\"my-auth\":{\"token\":7}}");
        CHECK_STR(cfg->consumers[2].credentials_json, "{}");
        sl_config_free(cfg);
    }
    /* built-in credentials are the text written, whatever YAML would make of it unquoted;
     * other kinds keep YAML's reading */
    cfg = PARSE_OK(LISTENER "consumers:\n"
                            "  - { name: a, credentials: { key-auth: { key: 1.50 }, my-auth: { n: 1.50 } } }\n"
                            "  - { name: b, credentials: { key-auth: { key: 12345678901234567890 } } }\n"
                            "  - { name: c, credentials: { basic-auth: { username: true, password_hash: \"$5$abcdefgh$sI6g8tHKrJ6RX7w.YoN9B7a/5wK5jYEOMmMnt3tPl0/\" },\n"
                            "                              mtls-auth: { subject: 1e3, san: 007 } } }\n");
    if (cfg) {
        CHECK_STR(cfg->consumers[0].credentials_json, "{\"key-auth\":{\"key\":\"1.50\"},\"my-auth\":{\"n\":1.50}}");
        CHECK_STR(cfg->consumers[1].credentials_json, "{\"key-auth\":{\"key\":\"12345678901234567890\"}}");
        CHECK_STR(cfg->consumers[2].credentials_json,
                  "{\"basic-auth\":{\"username\":\"true\",\"password_hash\":\"$5$abcdefgh$sI6g8tHKrJ6RX7w.YoN9B7a/5wK5jYEOMmMnt3tPl0/\"},"
                  "\"mtls-auth\":{\"subject\":\"1e3\",\"san\":\"007\"}}");
        sl_config_free(cfg);
    }
    cfg = PARSE_OK(LISTENER);
    if (cfg) {
        CHECK_STR(cfg->consumer_header, "X-Consumer");
        CHECK_INT(cfg->nconsumers, 0);
        sl_config_free(cfg);
    }
    EXPECT_ERROR(LISTENER "consumers: [ { name: a }, { name: a } ]\n",
                 "2:35: duplicate consumer name 'a' (first defined at line 2)");
    EXPECT_ERROR(LISTENER "consumers: [ { name: a, credentials: { key-auth: { key: x } } },\n"
                          "             { name: b, credentials: { key-auth: { key: x } } } ]\n",
                 "3:57: key-auth key is used by another consumer too: 'a' (line 2)");
    EXPECT_ERROR(LISTENER "consumers: [ { name: a, credentials: { key-auth: { key: y, secret: x } } } ]\n",
                 "2:60: unknown key 'secret' in 'key-auth' credentials of consumer 'a'");
    EXPECT_ERROR(LISTENER "consumers: [ { name: a, credentials: { basic-auth: { username: a } } } ]\n",
                 "2:52: missing required key 'password_hash' in 'basic-auth' credentials of consumer 'a'");
    EXPECT_ERROR(LISTENER "consumers: [ { name: a, credentials: { basic-auth: { username: \"a:b\", password_hash: \"$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1\" } } } ]\n",
                 "2:64: basic-auth username 'a:b' cannot hold ':' (Basic credentials end the username at the first colon)");
    EXPECT_ERROR(LISTENER "consumers: [ { name: a, credentials: { key-auth: { key: \"\" } } } ]\n",
                 "2:57: 'key' must not be empty");
    EXPECT_ERROR(LISTENER "consumers: [ { name: a, credentials: [x] } ]\n", "2:38: expected a mapping for 'credentials'");
    EXPECT_ERROR(LISTENER "consumers: [ { name: a, credentials: { basic-auth: { username: a, password_hash: \"$1$abc$iCQ2D3nhptRYi27fDYv2s1\" } } } ]\n",
                 "2:82: password_hash: unsupported password hash (crypt(3) $y$, $6$, $5$, $2b$, $2y$; "
                 "$pbkdf2-sha256$, $pbkdf2-sha512$)");
    EXPECT_ERROR(LISTENER "consumer_header: \"X Bad\"\n", "2:18: consumer_header 'X Bad' is not a valid header name");
    EXPECT_ERROR(LISTENER "consumer_header: Host\n", "2:18: consumer_header 'Host' would overwrite a header the proxy owns");
}

/* A route's upgrade: protocols, lower-cased; "*" for any; h2c refused where it is written. */
static void test_upgrade(void) {
    sl_config_t *cfg = PARSE_OK(LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ] } ]\n"
                                         "routes:\n"
                                         "  - { name: ws, upstream: u, upgrade: [WebSocket, foo/2] }\n"
                                         "  - { name: any, upstream: u, upgrade: [\"*\"] }\n"
                                         "  - { name: plain, upstream: u }\n"
                                         "  - { name: empty, upstream: u, upgrade: [] }\n");
    if (!cfg) return;
    CHECK_INT(cfg->routes[0].nupgrade, 2);
    CHECK_STR(cfg->routes[0].upgrade[0], "websocket");
    CHECK_STR(cfg->routes[0].upgrade[1], "foo/2");
    CHECK_INT(cfg->routes[1].nupgrade, 1);
    CHECK_STR(cfg->routes[1].upgrade[0], "*");
    CHECK_INT(cfg->routes[2].nupgrade, 0);
    CHECK_INT(cfg->routes[3].nupgrade, 0);
    sl_config_free(cfg);

#define UP_ROUTE(list) LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ] } ]\n" \
                               "routes: [ { name: r, upstream: u, upgrade: " list " } ]\n"
    EXPECT_ERROR(UP_ROUTE("[websocket, h2c]"),
                 "3:56: upgrade: h2c is never forwarded (sluice speaks HTTP/1.1 to upstreams)");
    EXPECT_ERROR(UP_ROUTE("[H2C]"), "3:45: upgrade: h2c is never forwarded (sluice speaks HTTP/1.1 to upstreams)");
    EXPECT_ERROR(UP_ROUTE("[h2c/1]"), "3:45: upgrade: h2c is never forwarded (sluice speaks HTTP/1.1 to upstreams)");
    EXPECT_ERROR(UP_ROUTE("[\"web socket\"]"),
                 "3:45: upgrade protocol 'web socket' is not a token (NAME or NAME/VERSION)");
    EXPECT_ERROR(UP_ROUTE("[a/b/c]"), "3:45: upgrade protocol 'a/b/c' is not a token (NAME or NAME/VERSION)");
    EXPECT_ERROR(UP_ROUTE("websocket"), "3:44: expected a list for 'upgrade'");
    EXPECT_ERROR(LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ] } ]\n"
                          "routes: [ { name: r, upstream: u, upgrades: [websocket] } ]\n",
                 "3:35: unknown key 'upgrades' in route 'r' (did you mean 'upgrade'?)");
#undef UP_ROUTE
}

/* sni_routes of tcp listeners: where they may stand, their names, duplicates, upstreams. */
static void test_sni_routes(void) {
#define SNI_UP "upstreams: [ { name: u, targets: [ { address: 127.0.0.1:9 } ] } ]\n"
    sl_config_t *c = PARSE_OK("listeners:\n"
                              "  - { name: t, listen: 127.0.0.1:2, protocol: tcp,\n"
                              "      sni_routes: [ { sni: [A.Test, \"*.B.test\"], upstream: u } ] }\n" SNI_UP);
    if (c) {
        const sl_listener_conf_t *l = &c->listeners[0];
        CHECK_INT(l->upstream, -1); /* no default: optional with sni_routes */
        CHECK_INT(l->nsni_routes, 1);
        CHECK_INT(l->nsni_exact, 1);
        CHECK_INT(l->nsni_wild, 1);
        CHECK_STR(l->sni_routes[0].names[0], "a.test");
        CHECK_STR(l->sni_names[1].name, ".b.test");
    }
    sl_config_free(c);
    /* an absolute name (a trailing dot) is the name without it, as a ClientHello's is: kept
     * with its dot it would never match */
    c = PARSE_OK("listeners:\n"
                 "  - { name: t, listen: 127.0.0.1:2, protocol: tcp,\n"
                 "      sni_routes: [ { sni: [A.Test., \"*.b.test.\"], upstream: u } ] }\n" SNI_UP);
    if (c) {
        CHECK_STR(c->listeners[0].sni_routes[0].names[0], "a.test");
        CHECK_STR(c->listeners[0].sni_routes[0].names[1], "*.b.test");
    }
    sl_config_free(c);
    c = PARSE_OK("listeners: [ { name: web, listen: 127.0.0.1:2 } ]\n" SNI_UP
                 "routes: [ { name: r, match: { hosts: [Api.Test.] }, upstream: u } ]\n");
    if (c) CHECK_STR(c->routes[0].hosts[0], "api.test");
    sl_config_free(c);
    EXPECT_ERROR("listeners: [ { name: h, listen: 127.0.0.1:1, sni_routes: [ { sni: [a.test], upstream: u } ] } ]\n" SNI_UP,
                 "1:46: 'sni_routes' belongs to protocol: tcp listeners (http routes match hosts)");
    EXPECT_ERROR("listeners: [ { name: t, listen: 127.0.0.1:1, protocol: tcp } ]\n" SNI_UP,
                 "1:14: missing required key 'upstream' in listener 't' (protocol: tcp, no sni_routes or plugins)");
    EXPECT_ERROR("listeners: [ { name: t, listen: 127.0.0.1:1, protocol: tcp, sni_routes: [] } ]\n" SNI_UP,
                 "1:73: 'sni_routes' of listener 't' needs at least one entry");
#define SNI_L(routes) "listeners: [ { name: t, listen: 127.0.0.1:1, protocol: tcp, sni_routes: [ " routes " ] } ]\n" SNI_UP
    EXPECT_ERROR(SNI_L("{ sni: [a.test, A.TEST], upstream: u }"), "1:91: sni 'a.test' is listed twice in listener 't'");
    EXPECT_ERROR(SNI_L("{ sni: [a.test, a.test.], upstream: u }"), "1:91: sni 'a.test' is listed twice in listener 't'");
    EXPECT_ERROR(SNI_L("{ sni: [\"*.a.test\"], upstream: u }, { sni: [\"*.A.test\"], upstream: u }"),
                 "1:119: sni '*.a.test' is listed twice in listener 't'");
    EXPECT_ERROR(SNI_L("{ sni: [a.test], upstream: u, weight: 1 }"),
                 "1:105: unknown key 'weight' in sni_routes[0] of listener 't'");
    EXPECT_ERROR(SNI_L("{ sni: [10.0.0.1], upstream: u }"),
                 "1:83: sni '10.0.0.1': an IP address is never a TLS server name (RFC 6066)");
    EXPECT_ERROR(SNI_L("{ sni: [\"a*.test\"], upstream: u }"),
                 "1:83: host 'a*.test': '*' is only allowed as a whole first label, as in *.example.com");
    EXPECT_ERROR(SNI_L("{ sni: [a.test:443], upstream: u }"), "1:83: host 'a.test:443': hosts match without the port");
    EXPECT_ERROR(SNI_L("{ sni: [a.test], upstream: nope }"),
                 "1:102: sni_routes[0] of listener 't' names unknown upstream 'nope'");
    EXPECT_ERROR(SNI_L("{ sni: [a.test] }"), "1:75: missing required key 'upstream' in sni_routes[0] of listener 't'");
    EXPECT_ERROR(SNI_L("{ sni: [], upstream: u }"), "1:82: 'sni' of sni_routes[0] of listener 't' needs at least one name");
#undef SNI_L
    /* a tcp listener's preread chain: tcp only; plugins and no upstream is valid */
    EXPECT_ERROR("listeners: [ { name: h, listen: 127.0.0.1:1, plugins: [ { name: x } ] } ]\n" SNI_UP,
                 "1:46: 'plugins' belongs to protocol: tcp listeners (the preread phase; http routes list "
                 "their own plugins)");
    c = PARSE_OK("listeners: [ { name: t, listen: 127.0.0.1:1, protocol: tcp, plugins: [ { name: x } ] } ]\n" SNI_UP);
    if (c) {
        CHECK_INT(c->listeners[0].nplugins, 1);
        CHECK_STR(c->listeners[0].plugins[0].name, "x");
        CHECK_INT(c->listeners[0].upstream, -1);
        CHECK_INT(c->listeners[0].connect_timeout_ms, 2000);
    }
    sl_config_free(c);
#undef SNI_UP
}

/* issue 26: a key accepted where nothing reads it is an error at the key, saying why. */
static void test_keys_that_do_nothing(void) {
#define UP(extra) LISTENER "upstreams:\n  - name: u\n    targets: [ { address: 1.2.3.4:5 } ]\n    " extra "\n"
    /* hedging acts on every protocol: a stream over HTTP/2 */
    sl_config_t *c = PARSE_OK(UP("protocol: h2c\n    retry: { hedge_after: 50ms }"));
    if (c) CHECK_INT(c->upstreams[0].retry.hedge_after_ms, 50);
    sl_config_free(c);
    c = PARSE_OK(UP("protocol: h2c\n    retry: { hedge_after: 0ms, max_body: 2MiB }"));
    if (c) CHECK_INT(c->upstreams[0].retry.max_body, 2 << 20); /* h2: a GOAWAY replay's bound */
    sl_config_free(c);
    /* with one attempt nothing is tried again */
    static const char *const once[] = {"on: [502]", "backoff: 10ms", "max_backoff: 1s", "max_body: 2MiB"};
    for (size_t i = 0; i < sizeof once / sizeof once[0]; i++) {
        char yaml[256], want[256];
        snprintf(yaml, sizeof yaml, UP("retry: { %s }"), once[i]);
        size_t klen = strcspn(once[i], ":");
        snprintf(want, sizeof want,
                 "5:14: '%.*s' does nothing with attempts: 1 (no request is tried again; attempts counts "
                 "the first try)",
                 (int)klen, once[i]);
        const char *w[] = {want};
        expect_errors(__LINE__, yaml, 1, w);
    }
    sl_config_free(PARSE_OK(UP("retry: { attempts: 2, on: [502], backoff: 10ms, max_backoff: 1s, max_body: 2MiB }")));
    /* harmless leftovers stay accepted: an idle_timeout beside max_idle: 0 */
    sl_config_free(PARSE_OK(UP("keepalive: { max_idle: 0, idle_timeout: 5s }")));
    EXPECT_ERROR(UP("registry: { enabled: false, max_targets: 8 }"),
                 "5:33: 'max_targets' does nothing with enabled: false");
    EXPECT_ERROR(UP("health: { active: { type: tcp, expect_status: 200 } }"),
                 "5:51: expect_status is for an http probe");
#undef UP
    /* an upstream a tcp listener uses: what its sessions never read */
#define TCP_UP(extra)                                                                              \
    "listeners: [ { name: t, listen: 127.0.0.1:1, protocol: tcp, upstream: u } ]\n"                \
    "upstreams:\n  - name: u\n    " extra "\n"
#define TARGETS "targets: [ { address: 1.2.3.4:5 } ]\n    "
    static const struct {
        const char *extra, *at, *key, *why;
    } tcp_cases[] = {
        {TARGETS "retry: { attempts: 2 }", "5:5", "retry",
         "a failed connect is tried once more on another target, whatever retry says"},
        {TARGETS "keepalive: { max_idle: 4 }", "5:5", "keepalive", "a tcp session's connection is never pooled"},
        {TARGETS "protocol: h2c", "5:5", "protocol", "a tcp listener relays bytes and speaks no HTTP to the targets"},
        {TARGETS "timeouts: { connect: 1s, read: 5s }", "5:30", "timeouts.read",
         "a tcp session that moves no byte either way is closed at the listener's idle_timeout"},
        {TARGETS "timeouts: { write: 5s }", "5:17", "timeouts.write",
         "a tcp session that moves no byte either way is closed at the listener's idle_timeout"},
        {TARGETS "balancer: consistent-hash\n    hash_on: path", "6:5", "hash_on",
         "consistent-hash hashes a tcp session's client IP (a session has no path, header or cookie)"},
        {"targets: [ { address: 1.2.3.4:5, tls: { verify: false } } ]", "4:38", "tls",
         "a tcp listener relays the client's bytes as they are and never speaks TLS to a target"},
    };
    for (size_t i = 0; i < sizeof tcp_cases / sizeof tcp_cases[0]; i++) {
        char yaml[512], want[512];
        snprintf(yaml, sizeof yaml, TCP_UP("%s"), tcp_cases[i].extra);
        snprintf(want, sizeof want, "%s: '%s' does nothing for tcp listener 't', which uses this upstream: %s",
                 tcp_cases[i].at, tcp_cases[i].key, tcp_cases[i].why);
        const char *w[] = {want};
        expect_errors(__LINE__, yaml, 1, w);
    }
    c = PARSE_OK(TCP_UP(TARGETS "balancer: consistent-hash\n    hash_on: ip\n    timeouts: { connect: 1s }\n"
                        "    circuit_breaker: {}\n    health: { active: { type: tcp }, passive: {} }"));
    sl_config_free(c);
    /* through sni_routes too */
    EXPECT_ERROR("listeners: [ { name: s, listen: 127.0.0.1:1, protocol: tcp, sni_routes: [ { sni: [a.test], "
                 "upstream: u } ] } ]\n"
                 "upstreams:\n  - name: u\n    " TARGETS "retry: { attempts: 2 }\n",
                 "5:5: 'retry' does nothing for tcp listener 's', which uses this upstream: a failed "
                 "connect is tried once more on another target, whatever retry says");
#undef TARGETS
#undef TCP_UP
    /* a tcp listener reads no HTTP head; header_timeout only bounds a PROXY header or ClientHello */
#define TCP_L(extra)                                                                               \
    "listeners:\n  - { name: t, listen: 127.0.0.1:1, protocol: tcp, upstream: u,\n      " extra " }\n" \
    "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ] } ]\n"
    static const char *const http_keys[] = {"max_body: 1MiB", "max_header_size: 8KiB", "max_request_line: 1KiB"};
    for (size_t i = 0; i < sizeof http_keys / sizeof http_keys[0]; i++) {
        char yaml[512], want[256];
        snprintf(yaml, sizeof yaml, TCP_L("%s"), http_keys[i]);
        snprintf(want, sizeof want,
                 "3:7: '%.*s' belongs to protocol: http listeners (a tcp session has no HTTP head or body)",
                 (int)strcspn(http_keys[i], ":"), http_keys[i]);
        const char *w[] = {want};
        expect_errors(__LINE__, yaml, 1, w);
    }
    sl_config_free(PARSE_OK(TCP_L("header_timeout: 5s")));
    sl_config_free(PARSE_OK(TCP_L("header_timeout: 5s, accept_proxy_protocol: { from: [10.0.0.0/8] }")));
#undef TCP_L
    /* routes with only tcp listeners are accepted (a config grown from a template, a fleet's
     * routes); an upstream an http route also names keeps its HTTP keys */
#define TCP_ONLY "listeners: [ { name: t, listen: 127.0.0.1:1, protocol: tcp, upstream: u } ]\n"
    sl_config_free(PARSE_OK(TCP_ONLY "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ] } ]\n"
                                     "routes: [ { name: r, upstream: u } ]\n"));
    sl_config_free(PARSE_OK(TCP_ONLY "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ],\n"
                                     "    keepalive: { max_idle: 4 }, timeouts: { read: 5s } } ]\n"
                                     "routes: [ { name: r, upstream: u } ]\n"));
    sl_config_free(PARSE_OK(TCP_ONLY "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ], keepalive: { max_idle: 4 } },\n"
                                     "             { name: v, targets: [ { address: 1.2.3.4:6 } ] } ]\n"
                                     "routes: [ { name: r, split: [ { upstream: v, weight: 1 }, { upstream: u, weight: 1 } ] } ]\n"));
    EXPECT_ERROR(TCP_ONLY "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ], keepalive: { max_idle: 4 } } ]\n",
                 "2:62: 'keepalive' does nothing for tcp listener 't', which uses this upstream: a tcp session's "
                 "connection is never pooled");
#undef TCP_ONLY
    EXPECT_ERROR("listeners: [ { name: w, listen: 127.0.0.1:1, http2: { enabled: false, max_concurrent_streams: 8 } } ]\n",
                 "1:71: 'max_concurrent_streams' does nothing with enabled: false");
    EXPECT_ERROR(LISTENER "admin: { listen: off, token_env: SOME_TOKEN }\n",
                 "2:23: 'token_env' does nothing with listen: off (there is no admin API to guard)");
    EXPECT_ERROR("listeners:\n  - name: web\n    listen: 127.0.0.1:1\n    tls:\n"
                 "      certificates: [ { cert: a.crt, key: a.key } ]\n      min_version: \"1.3\"\n"
                 "      ciphers: ECDHE-ECDSA-AES128-GCM-SHA256\n",
                 "7:7: 'ciphers' does nothing with min_version 1.3 (it lists TLS 1.2 suites; TLS 1.3 uses "
                 "OpenSSL's AEAD suites)");
    /* an Upgrade never reaches an HTTP/2 upstream */
#define H2_RT(route)                                                                               \
    LISTENER "upstreams: [ { name: u, targets: [ { address: 1.2.3.4:5 } ] },\n"                     \
             "             { name: g, protocol: h2c, targets: [ { address: 1.2.3.4:6 } ] } ]\n"   \
             "routes: [ " route " ]\n"
    EXPECT_ERROR(H2_RT("{ name: r, upstream: g, upgrade: [websocket] }"),
                 "4:35: route 'r': 'upgrade' does nothing for upstream 'g' (protocol: h2c): an Upgrade is "
                 "never forwarded to an HTTP/2 upstream (WebSockets need protocol: http1)");
    EXPECT_ERROR(H2_RT("{ name: r, split: [ { upstream: u, weight: 1 }, { upstream: g, weight: 1 } ], upgrade: [\"*\"] }"),
                 "4:89: route 'r': 'upgrade' does nothing for upstream 'g' (protocol: h2c): an Upgrade is "
                 "never forwarded to an HTTP/2 upstream (WebSockets need protocol: http1)");
    sl_config_free(PARSE_OK(H2_RT("{ name: r, upstream: u, upgrade: [websocket] }")));
#undef H2_RT
}

int main(void) {
    test_sni_routes();
    test_full_config();
    test_resilience();
    test_consumers();
    test_defaults();
    test_upgrade();
    test_keys_that_do_nothing();
    test_unknown_and_unsupported_keys();
    test_types();
    test_required_and_names();
    test_dynamic_targets();
    test_values();
    test_yaml_errors_and_collection();
    test_scalar_parsers();
    test_errors_list();
    test_shipped_configs();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
