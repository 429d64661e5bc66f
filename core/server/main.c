/* main.c — the sluice command line: run, check, version. */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu.h"
#include "config/config.h"
#include "base/log.h"
#include "script/plugin.h"
#include "server/cli_lua.h"
#include "server/etcd.h"
#include "server/server.h"

extern const char sl_default_conf[];
extern const size_t sl_default_conf_len;

static void usage(FILE *f) {
    fprintf(f, "usage: sluice [run] [-c FILE] [--ready-file PATH]\n"
               "       sluice check [-c FILE]\n"
               "       sluice reload [-c FILE] [--ready-file PATH | --admin ADDR] [--timeout D]\n"
               "       sluice explain [-c FILE] [ROUTE]\n"
               "       sluice explain --costs [-c FILE] [--ready-file PATH | --admin ADDR]\n"
               "                      [--timeout D] [ROUTE]\n"
               "       sluice test SPEC.yaml|DIR... [--junit FILE] [-v]\n"
               "       sluice spec [DIR] [BUSTED ARGS...]\n"
               "       sluice new plugin NAME [--dir D]\n"
               "       sluice push -c FILE --etcd URL [--prefix P]\n"
               "       sluice pull --etcd URL [--prefix P] [--plugins DIR]\n"
               "       sluice version | --version | -V\n");
}

/* Where a command that talks to a running instance finds its admin API: --admin ADDR,
 * else the "admin" address of the instance's --ready-file (the real port when the config
 * says port 0, as CI configs do), else the config's admin.listen. */
typedef struct {
    const char *admin;      /* --admin ADDR */
    const char *ready_file; /* --ready-file PATH */
    const char *timeout;    /* --timeout D as written (for messages) */
    uint64_t timeout_ms;    /* the most one exchange with the admin API may take */
} sl_target_opts_t;

/* Reads the "admin":"HOST:PORT" field of a ready file into out. 0, or -1 with a message. */
static int admin_from_ready_file(const char *path, char *out, size_t size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "sluice: cannot read the ready file %s: %s\n", path, strerror(errno));
        return -1;
    }
    char buf[16384];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *a = strstr(buf, "\"admin\":\"");
    const char *end = a ? strchr(a + 9, '"') : NULL;
    if (!a || !end || (size_t)(end - (a + 9)) >= size) {
        fprintf(stderr, "sluice: the ready file %s names no admin address (is the admin listener off?)\n",
                path);
        return -1;
    }
    memcpy(out, a + 9, (size_t)(end - (a + 9)));
    out[end - (a + 9)] = 0;
    return 0;
}

/* One request to the running instance's admin API (found as sl_target_opts_t says): the
 * whole answer into buf (NUL-terminated). The bearer token is the config's
 * (admin.token_env) when a config was loaded. 0, or 1 with a message naming `who`. */
static int admin_call(const sl_config_t *cfg, const sl_target_opts_t *to, const char *who, const char *method,
                      const char *path, char *buf, size_t cap, char *text, size_t text_cap) {
    sl_addr_t addr = {0};
    if (to->admin || to->ready_file) {
        if (to->admin)
            snprintf(text, text_cap, "%s", to->admin);
        else if (admin_from_ready_file(to->ready_file, text, text_cap) != 0)
            return 1;
        if (sl_parse_addr(text, &addr) != 0) {
            fprintf(stderr, "%s: '%s' is not an admin address (HOST:PORT)\n", who, text);
            return 1;
        }
        free(addr.text);
    } else if (!cfg || !cfg->admin_enabled) {
        fprintf(stderr, "%s: this config has no admin listener\n", who);
        return 1;
    } else {
        addr = cfg->admin_listen;
        snprintf(text, text_cap, "%s", cfg->admin_listen.text);
        const struct sockaddr *s = (const struct sockaddr *)&addr.ss;
        uint16_t port = s->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)s)->sin6_port
                                                 : ((const struct sockaddr_in *)s)->sin_port;
        if (port == 0) {
            fprintf(stderr, "%s: the config's admin listens on port 0 (a port the kernel "
                            "picks): name the instance with --ready-file PATH or --admin ADDR\n", who);
            return 1;
        }
    }
    const char *token = cfg ? cfg->admin_token : "";
    size_t token_len = cfg ? cfg->admin_token_len : 0;
    const struct sockaddr *sa = (const struct sockaddr *)&addr.ss;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* A wedged or stopped instance, or an address that accepts and never answers, must
     * not hang a deploy script: SO_SNDTIMEO bounds connect and write, the poll below the
     * answer, all within one deadline. */
    uint64_t deadline = sl_now_ns() + to->timeout_ms * 1000000u;
    struct timeval tv = {.tv_sec = (time_t)(to->timeout_ms / 1000),
                         .tv_usec = (suseconds_t)(to->timeout_ms % 1000) * 1000};
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (fd < 0 || connect(fd, sa, addr.len) != 0) {
        if (errno == EINPROGRESS || errno == EAGAIN)
            fprintf(stderr, "%s: no connection to the admin API at %s within %s\n", who, text,
                    to->timeout);
        else
            fprintf(stderr, "%s: cannot reach the admin API at %s: %s\n", who, text, strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    /* admin.token_env was read when the config loaded: the token is the running
     * instance's as long as both see the same environment variable. */
    char req[SL_ADMIN_TOKEN_MAX + 200];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: sluice\r\nContent-Length: 0\r\n%s%.*s%s"
                     "Connection: close\r\n\r\n", method, path, token_len ? "Authorization: Bearer " : "",
                     (int)token_len, token, token_len ? "\r\n" : "");
    ssize_t w = write(fd, req, (size_t)n);
    explicit_bzero(req, sizeof(req));
    if (w != (ssize_t)n) {
        close(fd);
        return 1;
    }
    size_t got = 0;
    ssize_t r = 1;
    while (got < cap - 1 && r > 0) {
        uint64_t now = sl_now_ns();
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        uint64_t ms = now >= deadline ? 0 : (deadline - now + 999999) / 1000000;
        int left = (int)SL_MIN(ms, (uint64_t)INT32_MAX);
        if (left == 0 || poll(&pf, 1, left) == 0) {
            close(fd);
            fprintf(stderr, "%s: the admin API at %s did not answer within %s\n", who, text,
                    to->timeout);
            return 1;
        }
        if ((r = read(fd, buf + got, cap - 1 - got)) > 0) got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    if (strncmp(buf, "HTTP/1.1 401", 12) == 0)
        fprintf(stderr, "%s: the admin API at %s wants a bearer token: %s\n", who, text,
                token_len ? "the one in admin.token_env was refused"
                          : "give the config that sets admin.token_env with -c");
    return 0;
}

/* sluice reload: POST /reload to the running instance's admin API; prints the answer. */
static int reload_remote(const sl_config_t *cfg, const sl_target_opts_t *to) {
    char text[256], buf[65536];
    if (admin_call(cfg, to, "sluice reload", "POST", "/reload", buf, sizeof buf, text, sizeof text) != 0) return 1;
    const char *body = strstr(buf, "\r\n\r\n");
    printf("%s", body ? body + 4 : buf);
    return strncmp(buf, "HTTP/1.1 200", 12) == 0 ? 0 : 1;
}

/* A quantile from one series' cumulative buckets (bounds le[], n of them, then +Inf). */
static void quantile_text(char *out, size_t cap, const double *le, const double *cum, int n, double total, double q) {
    if (total <= 0) {
        snprintf(out, cap, "-");
        return;
    }
    for (int i = 0; i < n; i++)
        if (cum[i] >= q * total) {
            snprintf(out, cap, "<= %g ms", le[i] * 1000);
            return;
        }
    snprintf(out, cap, "> %g ms", n ? le[n - 1] * 1000 : 0);
}

/* One route of `explain --costs`: its name and its chain's plugin names (each once). */
typedef struct {
    char name[256];
    const char *plugins[64];
    size_t nplugins;
} cost_route_t;

static void cost_add_plugin(cost_route_t *r, const char *name) {
    for (size_t j = 0; j < r->nplugins; j++)
        if (strcmp(r->plugins[j], name) == 0) return;
    if (r->nplugins < sizeof r->plugins / sizeof r->plugins[0]) r->plugins[r->nplugins++] = name;
}

/* The routes of the running instance, from its GET /status (the names in "routes", in
 * order) and its metrics (the plugins timed on each route, in the order of the series).
 * Returns how many were found, at most cap; plugin names point into `metrics`, which is
 * cut into pieces (NULs) as they are read. */
static size_t instance_routes(const char *status, char *metrics, cost_route_t *out, size_t cap) {
    size_t n = 0;
    const char *p = strstr(status, "\"routes\":[");
    if (!p) return 0;
    p += 10;
    int depth = 0;
    for (; *p && depth >= 0; p++) {
        if (*p == '"') { /* a string outside the route objects' first key: skip it */
            for (p++; *p && *p != '"'; p++)
                if (*p == '\\' && p[1]) p++;
            continue;
        }
        if (*p == '{' || *p == '[') {
            if (*p == '{' && depth == 0 && strncmp(p, "{\"name\":\"", 9) == 0 && n < cap) {
                const char *q = p + 9, *e = strchr(q, '"');
                if (e && (size_t)(e - q) < sizeof out[n].name) {
                    memcpy(out[n].name, q, (size_t)(e - q));
                    out[n].name[e - q] = 0;
                    out[n++].nplugins = 0;
                }
            }
            depth++;
        } else if (*p == '}' || *p == ']') {
            depth--;
        }
    }
    static const char series[] = "sluice_plugin_duration_seconds" "_count{route=\"";
    for (char *m = strstr(metrics, series); m; m = strstr(m, series)) {
        char *route = m + sizeof series - 1, *re = strchr(route, '"');
        if (!re || strncmp(re, "\",plugin=\"", 10) != 0) break;
        char *plugin = re + 10, *pe = strchr(plugin, '"');
        if (!pe) break;
        m = pe + 1;
        *re = 0, *pe = 0; /* the names, cut out of the text (read once, in order) */
        for (size_t r = 0; r < n; r++)
            if (strcmp(out[r].name, route) == 0) cost_add_plugin(&out[r], plugin);
    }
    return n;
}

/* sluice explain --costs: each route's chain with every plugin phase's calls, p50 and p99,
 * from the running instance's sluice_plugin_duration_seconds (GET /metrics). The routes are
 * the config's given with -c, else the instance's own (GET /status): without -c, a config
 * file found by default may not be what the instance serves. */
static int explain_costs(const sl_config_t *cfg, bool from_instance, const sl_target_opts_t *to,
                         const char *route) {
    char text[256];
    size_t cap = 8 << 20;
    char *buf = malloc(cap), *status = malloc(1 << 20), *copy = NULL;
    cost_route_t *routes = NULL;
    size_t nroutes = 0;
    int rc = 1;
    if (!buf || !status || admin_call(cfg, to, "sluice explain", "GET", "/metrics", buf, cap, text, sizeof text) != 0)
        goto out;
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0) {
        fprintf(stderr, "sluice explain: GET /metrics at %s: %.40s\n", text, buf);
        goto out;
    }
    if (from_instance) {
        if (admin_call(cfg, to, "sluice explain", "GET", "/status", status, 1 << 20, text, sizeof text) != 0)
            goto out;
        if (strncmp(status, "HTTP/1.1 200", 12) != 0) {
            fprintf(stderr, "sluice explain: GET /status at %s: %.40s\n", text, status);
            goto out;
        }
        size_t max = 0;
        for (const char *p = strstr(status, "{\"name\":"); p; p = strstr(p + 1, "{\"name\":")) max++;
        if (!(routes = calloc(max + 1, sizeof *routes)) || !(copy = strdup(buf))) goto out;
        nroutes = instance_routes(status, copy, routes, max);
        printf("routes of the instance at %s (no -c: its own, from GET /status)\n", text);
    } else {
        if (!(routes = calloc(cfg->nroutes + 1, sizeof *routes))) goto out;
        for (size_t r = 0; r < cfg->nroutes; r++) {
            const sl_route_conf_t *rt = &cfg->routes[r];
            snprintf(routes[r].name, sizeof routes[r].name, "%s", rt->name);
            for (size_t k = 0; k < cfg->nplugins + rt->nplugins; k++)
                cost_add_plugin(&routes[r], k < cfg->nplugins ? cfg->plugins[k].name : rt->plugins[k - cfg->nplugins].name);
        }
        nroutes = cfg->nroutes;
    }
    if (!strstr(buf, "# TYPE sluice_plugin_duration_seconds"))
        printf("(the instance at %s does not time plugins: metrics.plugin_timing is off)\n", text);
    static const char *const phases[] = {"rewrite", "access", "balancer", "header_filter", "body_filter", "log"};
    int shown = 0;
    for (size_t r = 0; r < nroutes; r++) {
        const cost_route_t *rt = &routes[r];
        if (route && strcmp(route, rt->name) != 0) continue;
        shown++;
        printf("route %s\n", rt->name);
        if (!rt->nplugins) printf("  (no plugins%s)\n", from_instance ? " timed" : "");
        for (size_t k = 0; k < rt->nplugins; k++) {
            const char *pn = rt->plugins[k];
            bool any = false;
            for (size_t ph = 0; ph < sizeof phases / sizeof phases[0]; ph++) {
                char key[640];
                int kl = snprintf(key, sizeof key, "%s_bucket{route=\"%s\",plugin=\"%s\",phase=\"%s\",le=\"",
                                  "sluice_plugin_duration_seconds", rt->name, pn, phases[ph]);
                double le[32], cum[32], total = 0;
                int n = 0;
                for (const char *p = strstr(buf, key); p; p = strstr(p + 1, key)) {
                    const char *v = p + kl;
                    double bound = strncmp(v, "+Inf", 4) == 0 ? -1 : strtod(v, NULL);
                    const char *sp = strstr(v, "} ");
                    double c = sp ? strtod(sp + 2, NULL) : 0;
                    if (bound < 0)
                        total = c;
                    else if (n < 32)
                        le[n] = bound, cum[n++] = c;
                }
                if (total <= 0) continue;
                char p50[32], p99[32];
                quantile_text(p50, sizeof p50, le, cum, n, total, 0.5);
                quantile_text(p99, sizeof p99, le, cum, n, total, 0.99);
                printf("  %-20s %-14s calls %-8.0f p50 %-14s p99 %s\n", pn, phases[ph], total, p50, p99);
                any = true;
            }
            if (!any) printf("  %-20s (no calls yet)\n", pn);
        }
    }
    rc = 0;
    if (route && !shown) {
        fprintf(stderr, "sluice explain: no route named '%s'%s\n", route, from_instance ? " in the instance" : "");
        rc = 1;
    }
out:
    free(buf);
    free(status);
    free(copy);
    free(routes);
    return rc;
}

/* Loads -c FILE, else ./conf/sluice.yaml, else the embedded default; *used names which. */
static sl_config_t *load(const char *path, bool quiet, const char **used) {
    sl_config_t *cfg = NULL;
    sl_errors_t errs = {0};
    int rc;
    if (!path && access("conf/sluice.yaml", R_OK) == 0) path = "conf/sluice.yaml";
    if (used) *used = path;
    if (path)
        rc = sl_config_build(path, NULL, 0, &cfg, &errs);
    else
        rc = sl_config_build("<embedded default>", sl_default_conf, sl_default_conf_len, &cfg, &errs);
    if (rc != 0) {
        for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "%s\n", errs.lines[i]);
        sl_errors_free(&errs);
        return NULL;
    }
    sl_errors_free(&errs);
    if (!quiet) sl_log_info("config %s loaded", path ? path : "<embedded default>");
    return cfg;
}

/* `sluice check`: a target name that does not resolve now is a warning, not an error (a
 * running gateway answers 503 for its upstream until it does). */
static void check_names(const sl_config_t *cfg) {
    for (size_t u = 0; u < cfg->nupstreams; u++)
        for (size_t k = 0; k < cfg->upstreams[u].nnames; k++) {
            const sl_dns_name_conf_t *nc = &cfg->upstreams[u].names[k];
            size_t n = 0;
            const char *why = NULL;
            int rc = sl_resolve_blocking(&cfg->resolver, nc->host, nc->port, &n, &why);
            if (rc != SL_DNS_OK)
                fprintf(stderr, "%s:%d:%d: warning: upstream '%s': %s does not resolve now (%s%s%s): the "
                        "upstream answers 503 until it does\n", cfg->path ? cfg->path : "<config>", nc->line,
                        nc->col, cfg->upstreams[u].name, nc->entry, sl_dns_result_names[rc], why ? ": " : "",
                        why ? why : "");
        }
}

/* The options that take the next argument as their value. */
static bool takes_value(const char *a) {
    static const char *const opts[] = {"-c",           "--config", "--etcd",   "--prefix",
                                       "--plugins",    "--ready-file", "--admin", "--timeout"};
    for (size_t k = 0; k < sizeof opts / sizeof *opts; k++)
        if (strcmp(a, opts[k]) == 0) return true;
    return false;
}

int main(int argc, char **argv) {
    const char *cmd = "run", *conf = NULL, *ready = NULL, *explain_route = NULL;
    bool costs = false;
    const char *etcd = NULL, *prefix = "/sluice", *plugins_dir = NULL; /* push, pull */
    /* 60 s: a reload builds a config and waits for the workers, but no deploy script
     * should wait forever for an instance that does not answer */
    sl_target_opts_t target = {.timeout = "60s", .timeout_ms = 60 * 1000};
    int i = 1;
    sl_cpus_init(); /* the CPUs the process was given, before any thread is placed */
    if (i < argc && argv[i][0] != '-') cmd = argv[i++];
    if (strcmp(cmd, "help") == 0) { /* as git, go and cargo: `help` is asking, not a mistake */
        usage(stdout);
        return 0;
    }
    if (sl_cli_lua_has(cmd)) return sl_cli_lua(cmd, argc - i, argv + i);
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
            ready = argv[++i]; /* run writes it; reload reads the instance's admin address from it */
        } else if (strcmp(argv[i], "--admin") == 0 && i + 1 < argc &&
                   (strcmp(cmd, "reload") == 0 || strcmp(cmd, "explain") == 0)) {
            target.admin = argv[++i];
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc &&
                   (strcmp(cmd, "reload") == 0 || strcmp(cmd, "explain") == 0)) {
            target.timeout = argv[++i];
            if (sl_parse_duration_ms(target.timeout, &target.timeout_ms) != 0 ||
                target.timeout_ms == 0 || target.timeout_ms > 24ull * 3600 * 1000) {
                fprintf(stderr, "sluice: --timeout '%s' is not a duration from 1ms to 24h "
                                "(e.g. 500ms, 10s, 2m)\n", target.timeout);
                return 2;
            }
        } else if (strcmp(argv[i], "--costs") == 0 && strcmp(cmd, "explain") == 0) {
            costs = true;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "-V") == 0 || strcmp(argv[i], "--version") == 0) {
            printf("sluice %s\n", SL_VERSION); /* as `sluice version`: what packagers' scripts try first */
            return 0;
        } else if (i + 1 == argc && takes_value(argv[i])) {
            fprintf(stderr, "sluice: '%s' needs a value\n", argv[i]);
            usage(stderr);
            return 2;
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
        const char *used = NULL;
        sl_config_t *cfg = load(conf, true, &used);
        if (!cfg) return 1;
        check_names(cfg);
        /* Without -c the file checked may be ./conf/sluice.yaml or the default built into
         * the binary: say which, so a CI step that forgot -c does not pass silently. */
        if (used)
            printf("%s: ok\n", used);
        else
            printf("<embedded default>: ok (no -c FILE and no ./conf/sluice.yaml: checked the "
                   "default config built into sluice)\n");
        sl_config_free(cfg);
        return 0;
    }
    if (strcmp(cmd, "explain") == 0) {
        sl_config_t *cfg = load(conf, true, NULL);
        if (!cfg) return 1;
        target.ready_file = ready;
        int rc = costs ? explain_costs(cfg, conf == NULL, &target, explain_route)
                       : sl_plugins_explain(cfg, explain_route);
        sl_config_free(cfg);
        return rc == 0 ? 0 : 1;
    }
    if (strcmp(cmd, "reload") == 0) {
        target.ready_file = ready;
        /* Named by --admin or --ready-file, the instance needs no config: one is read only
         * when given, for its admin token. */
        sl_config_t *cfg = NULL;
        if (conf || (!target.admin && !target.ready_file)) {
            if (!(cfg = load(conf, true, NULL))) return 1;
        }
        int rc = reload_remote(cfg, &target);
        sl_config_free(cfg);
        return rc;
    }
    if (strcmp(cmd, "push") == 0 || strcmp(cmd, "pull") == 0) {
        if (!etcd || (cmd[1] == 'u' && cmd[2] == 's' && !conf)) {
            fprintf(stderr, "sluice %s: %s\n", cmd, etcd ? "-c FILE is required" : "--etcd URL is required");
            usage(stderr);
            return 2;
        }
        /* config_source.etcd.prefix's rule: "" would make the range every key starting
         * with '/' (a push deletes what its file lacks: another application's keys too),
         * and "/sluice/" keys no gateway reads ("/sluice//routes/a") */
        size_t pl = strlen(prefix);
        if (prefix[0] != '/' || (pl > 1 && prefix[pl - 1] == '/')) {
            fprintf(stderr, "sluice %s: --prefix '%s' must start with '/' and not end with one (e.g. /sluice)\n", cmd,
                    prefix);
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
