/* config.c — YAML text to an immutable sl_config_t, with every error located and collected.
 *
 * libyaml loads the whole document into a node graph first; the walk then checks each
 * mapping against a fixed key table per section, one file per section (parse.h lists
 * them). Nothing stops at the first problem: every error is recorded with the node it
 * concerns, and at the end they are sorted by position and handed to the caller. Any
 * error means no config.
 *
 * Unknown keys are errors, and so are keys DESIGN.md names for features this
 * build does not have yet: a config that asks for a health check must not start
 * without one.
 *
 * This file: error lines, the entry points (parse, load) and sl_config_free.
 */

#include "config/parse.h"
#include "base/common.h"
#include "sluice.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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

/* ------------------------------------------------------------------------------------------ */
/* Entry points                                                                                */

static void yaml_error(sl__cx_t *cx, const yaml_parser_t *p, const char *text, size_t len) {
    if (p->error == YAML_MEMORY_ERROR) {
        cx->oom = true;
        return;
    }
    if (p->error == YAML_READER_ERROR) {
        /* the reader knows only a byte offset (bad UTF-8, control characters) */
        int line = 1, col = 1;
        for (size_t i = 0; i < p->problem_offset && i < len; i++) {
            col++;
            if (text[i] == '\n') {
                line++;
                col = 1;
            }
        }
        sl__cx_at(cx, line, col, "invalid input: %s", p->problem ? p->problem : "unreadable text");
        return;
    }
    int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
    if (p->context)
        sl__cx_at(cx, line, col, "YAML syntax error: %s (%s at line %d, column %d)",
              p->problem ? p->problem : "invalid YAML", p->context, (int)p->context_mark.line + 1,
              (int)p->context_mark.column + 1);
    else
        sl__cx_at(cx, line, col, "YAML syntax error: %s", p->problem ? p->problem : "invalid YAML");
}

static int cmp_err(const void *a, const void *b) {
    const sl__cx_err_t *x = a, *y = b;
    if (x->line != y->line) return x->line < y->line ? -1 : 1;
    if (x->col != y->col) return x->col < y->col ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int sl_config_parse(const char *path, const char *text, size_t len, sl_config_t **out,
                    sl_errors_t *errs) {
    yaml_parser_t parser;
    yaml_document_t doc;
    bool have_doc = false;
    sl__cx_t cx = {0};
    int rc = -1;

    *out = NULL;
    if (!yaml_parser_initialize(&parser)) {
        sl_errors_add(errs, path, 1, 1, "out of memory");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!(cx.cfg = sl__cx_calloc(&cx, 1, sizeof *cx.cfg)) ||
        !(cx.cfg->path = sl__cx_strdup(&cx, path ? path : "<config>")))
        goto done;
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_error(&cx, &parser, text, len);
        goto done;
    }
    have_doc = true;
    cx.doc = &doc;

    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root)
        sl__cx_at(&cx, 1, 1, "the configuration is empty: 'listeners' is required");
    else
        sl__cfg_parse_root(&cx, root);

    yaml_document_t extra;
    if (!yaml_parser_load(&parser, &extra)) {
        yaml_error(&cx, &parser, text, len);
    } else {
        yaml_node_t *r2 = yaml_document_get_root_node(&extra);
        if (r2) sl__cx_err(&cx, r2, "only one YAML document is allowed in a configuration");
        yaml_document_delete(&extra);
    }

done:
    if (cx.nerrs == 0 && !cx.oom) {
        *out = cx.cfg;
        rc = 0;
    } else {
        qsort(cx.errs, cx.nerrs, sizeof *cx.errs, cmp_err);
        for (size_t i = 0; i < cx.nerrs; i++)
            sl_errors_add(errs, path, cx.errs[i].line, cx.errs[i].col, "%s", cx.errs[i].msg);
        if (cx.oom) sl_errors_add(errs, path, 1, 1, "out of memory");
        sl_config_free(cx.cfg);
    }
    for (size_t i = 0; i < cx.nerrs; i++) free(cx.errs[i].msg);
    free(cx.errs);
    if (have_doc) yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

int sl_config_load(const char *path, sl_config_t **out, sl_errors_t *errs) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = -1;
    if (!f) {
        sl_errors_add(errs, path, 1, 1, "cannot open: %s", strerror(errno));
        return -1;
    }
    for (;;) {
        if (len == cap) {
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
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    if (ferror(f)) {
        sl_errors_add(errs, path, 1, 1, "cannot read: %s", strerror(errno));
        goto fail;
    }
    rc = sl_config_parse(path, buf, len, out, errs);
fail:
    free(buf);
    fclose(f);
    return rc;
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
    free(cfg->path);
    free(cfg->consumer_header);
    addr_free(&cfg->redis_address);
    for (size_t i = 0; cfg->consumers && i < cfg->nconsumers; i++) {
        free(cfg->consumers[i].name);
        free(cfg->consumers[i].credentials_json);
    }
    free(cfg->consumers);
    addr_free(&cfg->admin_listen);
    strs_free(cfg->plugin_paths, cfg->nplugin_paths);
    strs_free(cfg->plugin_search, cfg->nplugin_search);
    strs_free(cfg->lua_routes, cfg->nlua_routes);
    strs_free(cfg->lua_route_files, cfg->nlua_route_files);
    plugins_free(cfg->plugins, cfg->nplugins);
    for (size_t i = 0; cfg->listeners && i < cfg->nlisteners; i++) {
        free(cfg->listeners[i].name);
        free(cfg->listeners[i].upstream_name);
        free(cfg->listeners[i].proxy_from);
        sl__cfg_tls_listener_free(cfg->listeners[i].tls);
        for (size_t k = 0; k < cfg->listeners[i].nsni_routes; k++) {
            strs_free(cfg->listeners[i].sni_routes[k].names, cfg->listeners[i].sni_routes[k].nnames);
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
        for (size_t j = 0; u->targets && j < u->ntargets; j++) {
            addr_free(&u->targets[j].addr);
            sl__cfg_tls_target_free(u->targets[j].tls);
        }
        free(u->targets);
    }
    free(cfg->upstreams);
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
