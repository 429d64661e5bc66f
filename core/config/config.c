/* config.c — YAML text to an immutable sl_config_t, with every error located and collected.
 *
 * libyaml loads the whole document into a node graph first; the walk then checks each
 * mapping against a fixed key table per section, one file per section (parse.h lists
 * them). Nothing stops at the first problem: every error is recorded with the node it
 * concerns, and at the end they are sorted by position and handed to the caller. Any
 * error means no config.
 *
 * Unknown keys are errors, and so are keys the design names for features this
 * build does not have yet: a config that asks for a health check must not start
 * without one.
 *
 * This file: error lines, sl_config_load and sl_config_free; sl_config_parse, the walk's
 * entry, is root.c's.
 */

#include "config/config.h"
#include "config/router.h"
#include "base/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CONFIG_FILE (16u << 20) /* a config larger than this is a mistake, not a config */

/* ------------------------------------------------------------------------------------------ */
/* Error lines                                                                                 */

static void errors_vadd(sl_errors_t *errs, const char *path, int line, int col, const char *fmt,
                        va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    int n = snprintf(NULL, 0, "%s:%d:%d: %s", path ? path : "<config>", line, col, msg);
    if (n < 0) return;
    if (errs->n == errs->cap) {
        size_t cap = errs->cap ? errs->cap * 2 : 8;
        char **lines = realloc(errs->lines, cap * sizeof *lines);
        if (!lines) return; /* nowhere to report it; the caller still sees the -1 */
        errs->lines = lines;
        errs->cap = cap;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) return;
    snprintf(s, (size_t)n + 1, "%s:%d:%d: %s", path ? path : "<config>", line, col, msg);
    errs->lines[errs->n++] = s;
}

void sl_errors_add(sl_errors_t *errs, const char *path, int line, int col, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errors_vadd(errs, path, line, col, fmt, ap);
    va_end(ap);
}

void sl_errors_free(sl_errors_t *errs) {
    if (!errs) return;
    for (size_t i = 0; i < errs->n; i++) free(errs->lines[i]);
    free(errs->lines);
    errs->lines = NULL;
    errs->n = errs->cap = 0;
}

int sl_config_read(const char *path, char **text, size_t *len_out, sl_errors_t *errs) {
    *text = NULL;
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!f) {
        sl_errors_add(errs, path, 1, 1, "cannot open: %s", strerror(errno));
        return -1;
    }
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= MAX_CONFIG_FILE) {
                sl_errors_add(errs, path, 1, 1, "file is larger than %u bytes", MAX_CONFIG_FILE);
                goto fail;
            }
            cap = cap ? cap * 2 : 16384;
            char *p = realloc(buf, cap);
            if (!p) {
                sl_errors_add(errs, path, 1, 1, "out of memory");
                goto fail;
            }
            buf = p;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
    }
    if (ferror(f)) {
        sl_errors_add(errs, path, 1, 1, "cannot read: %s", strerror(errno));
        goto fail;
    }
    fclose(f);
    buf[len] = '\0';
    *text = buf;
    *len_out = len;
    return 0;
fail:
    free(buf);
    fclose(f);
    return -1;
}

int sl_config_load(const char *path, sl_config_t **out, sl_errors_t *errs) {
    *out = NULL;
    char *text;
    size_t len;
    if (sl_config_read(path, &text, &len, errs) != 0) return -1;
    int rc = sl_config_parse(path, text, len, out, errs);
    free(text);
    return rc;
}

/* One error line's sort key: its file (the text before ":LINE:COL: "), line and column. */
typedef struct {
    char *s;
    size_t file_len;
    int file_rank, line, col;
    size_t seq;
} err_key_t;

static void err_key(err_key_t *k, char *s) {
    k->s = s;
    k->file_len = strlen(s);
    k->line = k->col = 0;
    /* the first ":N:N: " from the left: a file name may hold ':', a message surely does */
    for (char *p = s; (p = strchr(p, ':')) != NULL; p++) {
        int line, col, used = 0;
        if (sscanf(p, ":%d:%d: %n", &line, &col, &used) == 2 && used > 0) {
            k->file_len = (size_t)(p - s);
            k->line = line;
            k->col = col;
            return;
        }
    }
}

static int cmp_key(const void *a, const void *b) {
    const err_key_t *x = a, *y = b;
    if (x->file_rank != y->file_rank) return x->file_rank < y->file_rank ? -1 : 1;
    if (x->line != y->line) return x->line < y->line ? -1 : 1;
    if (x->col != y->col) return x->col < y->col ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

void sl_errors_sort(sl_errors_t *errs) {
    if (errs->n < 2) return;
    err_key_t *k = calloc(errs->n, sizeof *k);
    if (!k) return; /* unsorted, still every line */
    for (size_t i = 0; i < errs->n; i++) {
        err_key(&k[i], errs->lines[i]);
        k[i].seq = i;
        k[i].file_rank = (int)i;
        for (size_t j = 0; j < i; j++)
            if (k[j].file_len == k[i].file_len && memcmp(k[j].s, k[i].s, k[i].file_len) == 0) {
                k[i].file_rank = k[j].file_rank;
                break;
            }
    }
    qsort(k, errs->n, sizeof *k, cmp_key);
    for (size_t i = 0; i < errs->n; i++) errs->lines[i] = k[i].s;
    free(k);
}

static void addr_free(sl_addr_t *a) { free(a->text); }

static void strs_free(char **v, size_t n) {
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

static void plugins_free(sl_plugin_conf_t *p, size_t n) {
    for (size_t i = 0; p && i < n; i++) {
        free(p[i].name);
        free(p[i].config_json);
        free(p[i].positions_json);
    }
    free(p);
}

void sl_config_free(sl_config_t *cfg) {
    if (!cfg) return;
    sl_router_free(cfg->router);
    explicit_bzero(cfg->admin_token, sizeof cfg->admin_token); /* a secret: not left in freed memory */
    explicit_bzero(cfg->debug_token, sizeof cfg->debug_token);
    free(cfg->path);
    free(cfg->worker_cpus);
    for (size_t i = 0; cfg->plugin_file_texts && i < cfg->nplugin_files; i++) free(cfg->plugin_file_texts[i]);
    free(cfg->plugin_file_texts);
    free(cfg->plugin_file_lens);
    free(cfg->consumer_header);
    free(cfg->telemetry.host);
    free(cfg->telemetry.path);
    free(cfg->telemetry.service_name);
    for (size_t i = 0; i < cfg->telemetry.nheaders; i++) {
        free(cfg->telemetry.headers[i].name);
        free(cfg->telemetry.headers[i].value);
    }
    free(cfg->telemetry.headers);
    free(cfg->run_user);
    addr_free(&cfg->redis_address);
    free(cfg->redis_username);
    if (cfg->redis_password) explicit_bzero(cfg->redis_password, strlen(cfg->redis_password));
    free(cfg->redis_password);
    for (size_t i = 0; cfg->consumers && i < cfg->nconsumers; i++) {
        free(cfg->consumers[i].name);
        free(cfg->consumers[i].credentials_json);
        strs_free(cfg->consumers[i].groups, cfg->consumers[i].ngroups);
    }
    free(cfg->consumers);
    strs_free(cfg->source.endpoints, cfg->source.nendpoints);
    free(cfg->source.prefix);
    free(cfg->source.snapshot);
    free(cfg->source.username);
    if (cfg->source.password) explicit_bzero(cfg->source.password, strlen(cfg->source.password));
    free(cfg->source.password);
    addr_free(&cfg->admin_listen);
    strs_free(cfg->plugin_paths, cfg->nplugin_paths);
    strs_free(cfg->plugin_search, cfg->nplugin_search);
    strs_free(cfg->lua_routes, cfg->nlua_routes);
    strs_free(cfg->lua_route_files, cfg->nlua_route_files);
    strs_free(cfg->plugin_files, cfg->nplugin_files);
    plugins_free(cfg->plugins, cfg->nplugins);
    for (size_t i = 0; cfg->listeners && i < cfg->nlisteners; i++) {
        free(cfg->listeners[i].name);
        free(cfg->listeners[i].upstream_name);
        free(cfg->listeners[i].proxy_from);
        free(cfg->listeners[i].trusted_proxies);
        sl_tls_listener_conf_free(cfg->listeners[i].tls);
        for (size_t k = 0; k < cfg->listeners[i].nsni_routes; k++) {
            strs_free(cfg->listeners[i].sni_routes[k].names,
                      cfg->listeners[i].sni_routes[k].nnames);
            free(cfg->listeners[i].sni_routes[k].upstream_name);
        }
        free(cfg->listeners[i].sni_routes);
        free(cfg->listeners[i].sni_names);
        plugins_free(cfg->listeners[i].plugins, cfg->listeners[i].nplugins);
        addr_free(&cfg->listeners[i].listen);
    }
    free(cfg->listeners);
    for (size_t i = 0; cfg->upstreams && i < cfg->nupstreams; i++) {
        sl_upstream_conf_t *u = &cfg->upstreams[i];
        free(u->name);
        free(u->hash_name);
        free(u->health.path);
        free(u->health.service);
        for (size_t j = 0; u->targets && j < u->ntargets; j++) {
            if (u->targets[j].kind == SL_TARGET_STATIC) addr_free(&u->targets[j].addr);
            if (!u->targets[j].tls_borrowed) sl_tls_target_conf_free(u->targets[j].tls);
        }
        free(u->targets);
        for (size_t j = 0; u->names && j < u->nnames; j++) {
            free(u->names[j].host);
            free(u->names[j].entry);
        }
        free(u->names);
    }
    free(cfg->upstreams);
    free(cfg->resolver.nameservers);
    for (size_t i = 0; cfg->routes && i < cfg->nroutes; i++) {
        sl_route_conf_t *r = &cfg->routes[i];
        free(r->name);
        strs_free(r->hosts, r->nhosts);
        strs_free(r->paths, r->npaths);
        strs_free(r->methods, r->nmethods);
        strs_free(r->upgrade, r->nupgrade);
        for (size_t j = 0; r->headers && j < r->nheaders; j++) {
            free(r->headers[j].name);
            free(r->headers[j].value);
        }
        free(r->headers);
        for (size_t j = 0; r->split && j < r->nsplit; j++) {
            free(r->split[j].header);
            free(r->split[j].header_value);
            free(r->split[j].cookie);
            free(r->split[j].cookie_value);
        }
        free(r->split);
        plugins_free(r->plugins, r->nplugins);
    }
    free(cfg->routes);
    free(cfg);
}
