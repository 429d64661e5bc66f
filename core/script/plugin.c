/* plugin.c — validates the plugins a config uses, with positions from the YAML. */
#include "script/plugin.h"

#include <dirent.h>
#include <lauxlib.h>
#include <libgen.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "config/router.h"
#include "script/lua_host.h"

static char *join_path(const char *dir, const char *rel) {
    if (rel[0] == '/' || !dir || !*dir) return strdup(rel);
    size_t a = strlen(dir), b = strlen(rel);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, rel, b + 1);
    return p;
}

static int resolve_search(sl_config_t *cfg) {
    /* Relative plugin paths are relative to the config file, so a config runs the same
     * plugins whatever the working directory; the embedded default resolves against ".". */
    char *dir = NULL;
    if (cfg->path && cfg->path[0] != '<') {
        char *copy = strdup(cfg->path);
        if (!copy) return SL_ERROR;
        dir = strdup(dirname(copy));
        free(copy);
        if (!dir) return SL_ERROR;
    }
    cfg->plugin_search = calloc(cfg->nplugin_paths + 2, sizeof(char *));
    if (!cfg->plugin_search) {
        free(dir);
        return SL_ERROR;
    }
    size_t n = 0;
    for (size_t i = 0; i < cfg->nplugin_paths; i++)
        if ((cfg->plugin_search[n] = join_path(dir, cfg->plugin_paths[i]))) n++;
    if ((cfg->plugin_search[n] = strdup(sl_builtin_plugin_dir()))) n++;
    cfg->nplugin_search = n;
    if (cfg->nlua_routes) {
        cfg->lua_route_files = calloc(cfg->nlua_routes, sizeof(char *));
        if (!cfg->lua_route_files) {
            free(dir);
            return SL_ERROR;
        }
        for (size_t i = 0; i < cfg->nlua_routes; i++)
            if ((cfg->lua_route_files[cfg->nlua_route_files] = join_path(dir, cfg->lua_routes[i])))
                cfg->nlua_route_files++;
    }
    free(dir);
    return SL_OK;
}

static char **take_strings(lua_State *L, int idx, size_t *n) {
    size_t len = lua_objlen(L, idx);
    char **v = calloc(len + 1, sizeof(char *));
    *n = 0;
    if (!v) return NULL;
    for (size_t i = 1; i <= len; i++) {
        lua_rawgeti(L, idx, (int)i);
        if (lua_isstring(L, -1)) v[(*n)++] = strdup(lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    return v;
}

static int field_int(lua_State *L, int idx, const char *k) {
    lua_getfield(L, idx, k);
    int v = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : 1;
    lua_pop(L, 1);
    return v;
}

static char *field_str(lua_State *L, int idx, const char *k) {
    lua_getfield(L, idx, k);
    char *s = lua_isstring(L, -1) ? strdup(lua_tostring(L, -1)) : NULL;
    lua_pop(L, 1);
    return s;
}

/* Appends the routes of the lua_routes files (described by loader.lua_routes) to cfg. */
static int add_lua_routes(lua_State *L, sl_config_t *cfg, sl_errors_t *errs, const char *path) {
    lua_getfield(L, -1, "lua_routes");
    lua_createtable(L, (int)cfg->nlua_route_files, 0);
    for (size_t i = 0; i < cfg->nlua_route_files; i++) {
        lua_pushstring(L, cfg->lua_route_files[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    if (lua_pcall(L, 1, 2, 0) != 0) {
        sl_errors_add(errs, path, cfg->lua_routes_line, cfg->lua_routes_col, "lua_routes: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return SL_ERROR;
    }
    /* Every error of every file, at the Lua file's own line and column. */
    int rc = SL_OK;
    size_t ne = lua_objlen(L, -1);
    for (size_t i = 1; i <= ne; i++) {
        lua_rawgeti(L, -1, (int)i);
        lua_getfield(L, -1, "file");
        lua_getfield(L, -2, "line");
        lua_getfield(L, -3, "col");
        lua_getfield(L, -4, "msg");
        sl_errors_add(errs, lua_tostring(L, -4), (int)lua_tointeger(L, -3), (int)lua_tointeger(L, -2), "%s",
                      lua_tostring(L, -1));
        lua_pop(L, 5);
        rc = SL_ERROR;
    }
    lua_pop(L, 1);
    int list = lua_gettop(L);
    size_t n = lua_objlen(L, list);
    sl_route_conf_t *routes = realloc(cfg->routes, (cfg->nroutes + n + 1) * sizeof(*routes));
    if (!routes) {
        lua_pop(L, 1);
        sl_errors_add(errs, path, 1, 1, "out of memory");
        return SL_ERROR;
    }
    cfg->routes = routes;
    for (size_t i = 1; i <= n; i++) {
        lua_rawgeti(L, list, (int)i);
        int d = lua_gettop(L);
        sl_route_conf_t *r = &cfg->routes[cfg->nroutes];
        memset(r, 0, sizeof(*r));
        r->name = field_str(L, d, "name");
        lua_getfield(L, d, "file");
        r->lua_file = (int)lua_tointeger(L, -1);
        lua_getfield(L, d, "index");
        r->lua_index = (int)lua_tointeger(L, -1);
        lua_getfield(L, d, "match_fn");
        r->match_fn = lua_toboolean(L, -1);
        lua_getfield(L, d, "strip_prefix");
        r->strip_prefix = lua_toboolean(L, -1);
        lua_pop(L, 4);
        lua_getfield(L, d, "upgrade"); /* checked and lower-cased by loader.lua */
        r->upgrade = take_strings(L, lua_gettop(L), &r->nupgrade);
        lua_pop(L, 1);
        r->line = field_int(L, d, "line");
        r->col = field_int(L, d, "col");
        lua_getfield(L, d, "hosts");
        r->hosts = take_strings(L, lua_gettop(L), &r->nhosts);
        lua_getfield(L, d, "paths");
        r->paths = take_strings(L, lua_gettop(L), &r->npaths);
        lua_getfield(L, d, "methods");
        r->methods = take_strings(L, lua_gettop(L), &r->nmethods);
        lua_pop(L, 3);
        lua_getfield(L, d, "headers");
        size_t nh = lua_objlen(L, -1);
        r->headers = calloc(nh + 1, sizeof(sl_kv_t));
        for (size_t k = 1; r->headers && k <= nh; k++) {
            lua_rawgeti(L, -1, (int)k);
            lua_rawgeti(L, -1, 1);
            lua_rawgeti(L, -2, 2);
            r->headers[r->nheaders].name = strdup(lua_tostring(L, -2));
            r->headers[r->nheaders].value = strdup(lua_tostring(L, -1));
            r->nheaders++;
            lua_pop(L, 3);
        }
        lua_pop(L, 1);
        lua_getfield(L, d, "plugins");
        size_t np = lua_objlen(L, -1);
        r->plugins = calloc(np + 1, sizeof(sl_plugin_conf_t));
        for (size_t k = 1; r->plugins && k <= np; k++) {
            lua_rawgeti(L, -1, (int)k);
            sl_plugin_conf_t *pc = &r->plugins[r->nplugins++];
            pc->name = field_str(L, lua_gettop(L), "name");
            pc->config_json = field_str(L, lua_gettop(L), "config_json");
            pc->positions_json = field_str(L, lua_gettop(L), "positions_json");
            pc->line = pc->name_line = field_int(L, lua_gettop(L), "nline");
            pc->col = pc->name_col = field_int(L, lua_gettop(L), "ncol");
            pc->config_line = field_int(L, lua_gettop(L), "cline");
            pc->config_col = field_int(L, lua_gettop(L), "ccol");
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        r->upstream = -1;
        char *up = field_str(L, d, "upstream");
        cfg->nroutes++;
        const char *file = cfg->lua_route_files[r->lua_file];
        if (up) {
            for (size_t u = 0; u < cfg->nupstreams; u++)
                if (cfg->upstreams[u].name && strcmp(cfg->upstreams[u].name, up) == 0) r->upstream = (int)u;
            if (r->upstream < 0) {
                sl_errors_add(errs, file, field_int(L, d, "upstream_line"), field_int(L, d, "upstream_col"),
                              "route '%s' names unknown upstream '%s'", r->name, up);
                rc = SL_ERROR;
            } else if (r->nupgrade && cfg->upstreams[r->upstream].protocol != SL_UP_HTTP1) {
                const sl_upstream_conf_t *uc = &cfg->upstreams[r->upstream];
                sl_errors_add(errs, file, field_int(L, d, "upgrade_line"), field_int(L, d, "upgrade_col"),
                              "route '%s': " SL_UPGRADE_H2_FMT, r->name, uc->name,
                              sl_upstream_protocol_name(uc->protocol));
                rc = SL_ERROR;
            }
            free(up);
        }
        for (size_t k = 0; k + 1 < cfg->nroutes; k++)
            if (r->name && cfg->routes[k].name && strcmp(cfg->routes[k].name, r->name) == 0) {
                if (cfg->routes[k].lua_file >= 0)
                    sl_errors_add(errs, file, r->line, r->col, "duplicate route name '%s' (first in %s:%d)", r->name,
                                  cfg->lua_route_files[cfg->routes[k].lua_file], cfg->routes[k].line);
                else
                    sl_errors_add(errs, file, r->line, r->col, "duplicate route name '%s' (first in %s:%d)", r->name,
                                  path, cfg->routes[k].line);
                rc = SL_ERROR;
                break;
            }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return rc;
}

/* The plugin names on the search paths (NAME.lua and NAME/init.lua), for loader's "did you
 * mean": pushes a list. */
static void push_known_plugins(lua_State *L, const sl_config_t *cfg) {
    lua_newtable(L);
    int k = 1;
    for (size_t i = 0; i < cfg->nplugin_search; i++) {
        DIR *d = opendir(cfg->plugin_search[i]);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            size_t l = strlen(e->d_name);
            if (e->d_name[0] == '.') continue;
            if (l > 4 && strcmp(e->d_name + l - 4, ".lua") == 0)
                lua_pushlstring(L, e->d_name, l - 4);
            else if (e->d_type == DT_DIR || e->d_type == DT_UNKNOWN)
                lua_pushstring(L, e->d_name);
            else
                continue;
            lua_rawseti(L, -2, k++);
        }
        if (d) closedir(d);
    }
}

/* One plugin use for loader.validate_all; `layer` is "http" (routes, the global chain) or
 * "tcp" (a tcp listener's preread chain): the phases it defines must run there. */
static void push_use(lua_State *L, const sl_plugin_conf_t *p, const char *where, const char *layer,
                     const char *file, int idx) {
    lua_createtable(L, 0, 11);
    lua_pushstring(L, file);
    lua_setfield(L, -2, "file");
    lua_pushstring(L, layer);
    lua_setfield(L, -2, "layer");
    lua_pushstring(L, p->name ? p->name : "");
    lua_setfield(L, -2, "name");
    lua_pushstring(L, p->config_json ? p->config_json : "{}");
    lua_setfield(L, -2, "config_json");
    lua_pushstring(L, p->positions_json ? p->positions_json : "{}");
    lua_setfield(L, -2, "positions_json");
    lua_pushinteger(L, p->config_line);
    lua_setfield(L, -2, "cline");
    lua_pushinteger(L, p->config_col);
    lua_setfield(L, -2, "ccol");
    lua_pushinteger(L, p->name_line);
    lua_setfield(L, -2, "nline");
    lua_pushinteger(L, p->name_col);
    lua_setfield(L, -2, "ncol");
    lua_pushstring(L, where);
    lua_setfield(L, -2, "where");
    lua_rawseti(L, -2, idx);
}

/* The files the checks read (sluice.files.noted(), the module at index files) become
 * cfg->plugin_files: the generation's content includes them (server/reload.c), and the text
 * read from each goes to every worker VM (lua_host.c), so all of a generation's workers see
 * the same file whenever their plugins prepare. */
static int note_files(lua_State *L, int files, sl_config_t *cfg) {
    lua_getfield(L, files, "noted");
    if (lua_pcall(L, 0, 2, 0) != 0 || !lua_istable(L, -2)) {
        lua_pop(L, 2);
        return SL_OK;
    }
    size_t n = lua_objlen(L, -2);
    cfg->plugin_files = calloc(n + 1, sizeof(char *));
    cfg->plugin_file_texts = calloc(n + 1, sizeof(char *));
    cfg->plugin_file_lens = calloc(n + 1, sizeof(size_t));
    if (!cfg->plugin_files || !cfg->plugin_file_texts || !cfg->plugin_file_lens) {
        lua_pop(L, 2);
        return SL_ERROR;
    }
    for (size_t i = 1; i <= n; i++) {
        lua_rawgeti(L, -2, (int)i);
        const char *p = lua_tostring(L, -1);
        if (p && (cfg->plugin_files[cfg->nplugin_files] = strdup(p))) {
            size_t len = 0;
            lua_getfield(L, -2, p); /* its text, when read */
            const char *text = lua_tolstring(L, -1, &len);
            if (text && (cfg->plugin_file_texts[cfg->nplugin_files] = malloc(len + 1))) {
                memcpy(cfg->plugin_file_texts[cfg->nplugin_files], text, len + 1);
                cfg->plugin_file_lens[cfg->nplugin_files] = len;
            }
            lua_pop(L, 1);
            cfg->nplugin_files++;
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    return SL_OK;
}

/* Compiles cfg's routes (YAML and lua_routes, in cfg->routes order) into cfg->router: 0, or
 * SL_ERROR with *err when out of memory. */
static int compile_routes(sl_config_t *cfg, const char **err) {
    /* The config's routes as definitions: pointers into the config, headers flattened. */
    size_t nh = 0;
    for (size_t i = 0; i < cfg->nroutes; i++) nh += cfg->routes[i].nheaders;
    sl_route_def_t *defs = calloc(cfg->nroutes + 1, sizeof *defs);
    const char **hv = calloc(2 * nh + 1, sizeof *hv);
    if (!defs || !hv) {
        free(defs);
        free(hv);
        *err = "out of memory compiling the routes";
        return SL_ERROR;
    }
    for (size_t i = 0, h = 0; i < cfg->nroutes; i++) {
        const sl_route_conf_t *r = &cfg->routes[i];
        defs[i] = (sl_route_def_t){
            .hosts = (const char *const *)r->hosts, .nhosts = (uint32_t)r->nhosts,
            .paths = (const char *const *)r->paths, .npaths = (uint32_t)r->npaths,
            .methods = (const char *const *)r->methods, .nmethods = (uint32_t)r->nmethods,
            .headers = hv + h, .nheaders = (uint32_t)r->nheaders,
            .strip_prefix = r->strip_prefix, .match_fn = r->match_fn};
        for (size_t k = 0; k < r->nheaders; k++) {
            hv[h++] = r->headers[k].name;
            hv[h++] = r->headers[k].value;
        }
    }
    sl_router_t *rt = sl_router_build(defs, cfg->nroutes, err);
    free(defs);
    free(hv);
    if (!rt) return SL_ERROR;
    sl_router_free(cfg->router);
    cfg->router = rt;
    return SL_OK;
}

int sl_plugins_check(sl_config_t *cfg, sl_errors_t *errs) {
    const char *path = cfg->path ? cfg->path : "<config>";
    if (!cfg->plugin_search && resolve_search(cfg) != SL_OK) {
        sl_errors_add(errs, path, 1, 1, "out of memory");
        return SL_ERROR;
    }
    size_t before = errs->n;
    for (size_t i = 0; i < cfg->nroutes; i++)
        if (cfg->routes[i].name && cfg->nplugins + cfg->routes[i].nplugins > SL_MAX_CHAIN)
            sl_errors_add(errs, path, cfg->routes[i].line, cfg->routes[i].col,
                          "route '%s' runs %zu plugins with the global chain (at most %d)",
                          cfg->routes[i].name, cfg->nplugins + cfg->routes[i].nplugins, SL_MAX_CHAIN);
    for (size_t i = 0; i < cfg->nlisteners; i++)
        if (cfg->listeners[i].name && cfg->listeners[i].nplugins > SL_MAX_CHAIN)
            sl_errors_add(errs, path, cfg->listeners[i].line, cfg->listeners[i].col,
                          "listener '%s' runs %zu plugins (at most %d)", cfg->listeners[i].name,
                          cfg->listeners[i].nplugins, SL_MAX_CHAIN);

    const char *err = NULL;
    lua_State *L = sl_lua_new_state(&err);
    if (!L) {
        sl_errors_add(errs, path, 1, 1, "%s", err);
        return SL_ERROR;
    }
    /* sluice.files: relative paths against the config's folder, and the files read noted */
    lua_getglobal(L, "require");
    lua_pushliteral(L, "sluice.files");
    if (lua_pcall(L, 1, 1, 0) != 0) goto lua_fail;
    int files = lua_gettop(L);
    lua_getfield(L, files, "set_config_path");
    lua_pushstring(L, cfg->path ? cfg->path : "<config>");
    if (lua_pcall(L, 1, 0, 0) != 0) goto lua_fail;
    lua_getglobal(L, "require");
    lua_pushliteral(L, "sluice.loader");
    if (lua_pcall(L, 1, 1, 0) != 0) goto lua_fail;
    /* lua_routes errors do not stop the plugin checks: every error of the build at once. */
    if (cfg->nlua_route_files) add_lua_routes(L, cfg, errs, path);
    lua_getfield(L, -1, "validate_all");
    lua_createtable(L, (int)cfg->nplugin_search, 0);
    for (size_t i = 0; i < cfg->nplugin_search; i++) {
        lua_pushstring(L, cfg->plugin_search[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_newtable(L);
    int k = 1;
    /* A partial config (one with YAML-level errors) has entries that did not parse: their
     * errors are said already, and checking them would only add noise. */
#define USABLE(p) ((p)->name && (p)->config_json)
    for (size_t i = 0; i < cfg->nplugins; i++)
        if (USABLE(&cfg->plugins[i])) push_use(L, &cfg->plugins[i], "the global chain", "http", path, k++);
    for (size_t r = 0; r < cfg->nroutes; r++) {
        const sl_route_conf_t *rt = &cfg->routes[r];
        if (!rt->name) continue; /* a route item that did not parse (partial config) */
        char where[160];
        snprintf(where, sizeof(where), "route '%s'", rt->name ? rt->name : "?");
        const char *file = rt->lua_file >= 0 ? cfg->lua_route_files[rt->lua_file] : path;
        for (size_t i = 0; i < rt->nplugins; i++)
            if (USABLE(&rt->plugins[i])) push_use(L, &rt->plugins[i], where, "http", file, k++);
    }
    for (size_t l = 0; l < cfg->nlisteners; l++) {
        char where[160];
        snprintf(where, sizeof(where), "listener '%s'", cfg->listeners[l].name ? cfg->listeners[l].name : "?");
        for (size_t i = 0; i < cfg->listeners[l].nplugins; i++)
            if (USABLE(&cfg->listeners[l].plugins[i]))
                push_use(L, &cfg->listeners[l].plugins[i], where, "tcp", path, k++);
    }
#undef USABLE
    push_known_plugins(L, cfg);
    if (lua_pcall(L, 3, 1, 0) != 0) goto lua_fail;
    size_t n = lua_objlen(L, -1);
    for (size_t i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, (int)i);
        lua_getfield(L, -1, "line");
        lua_getfield(L, -2, "col");
        lua_getfield(L, -3, "msg");
        lua_getfield(L, -4, "file");
        sl_errors_add(errs, lua_isstring(L, -1) ? lua_tostring(L, -1) : path, (int)lua_tointeger(L, -4),
                      (int)lua_tointeger(L, -3), "%s", lua_tostring(L, -2));
        lua_pop(L, 5);
    }
    lua_pop(L, 1);
    if (note_files(L, files, cfg) != SL_OK) sl_errors_add(errs, path, 1, 1, "out of memory");
    lua_close(L);
    /* The routes are final (lua_routes appended): compile them, once for every worker. A
     * config with errors anywhere (its YAML too) never serves, so it gets no router. */
    if (errs->n == 0 && compile_routes(cfg, &err) != SL_OK) sl_errors_add(errs, path, 1, 1, "%s", err);
    return errs->n > before ? SL_ERROR : SL_OK;
lua_fail:
    sl_errors_add(errs, path, 1, 1, "plugin validation failed: %s", lua_tostring(L, -1));
    lua_close(L);
    return SL_ERROR;
}

int sl_config_build(const char *path, const char *text, size_t len, sl_config_t **out, sl_errors_t *errs) {
    *out = NULL;
    char *owned = NULL;
    if (!text) {
        if (sl_config_read(path, &owned, &len, errs) != 0) return SL_ERROR;
        text = owned;
    }
    sl_config_t *cfg = NULL;
    int rc = sl_config_parse_partial(path, text, len, &cfg, errs);
    free(owned);
    if (cfg && sl_plugins_check(cfg, errs) != SL_OK) rc = SL_ERROR;
    if (rc != 0) {
        sl_errors_sort(errs);
        sl_config_free(cfg);
        return SL_ERROR;
    }
    *out = cfg;
    return SL_OK;
}

static void push_chain_names(lua_State *L, const sl_plugin_conf_t *p, size_t n) {
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 1);
        lua_pushstring(L, p[i].name);
        lua_setfield(L, -2, "name");
        lua_rawseti(L, -2, (int)i + 1);
    }
}

int sl_plugins_explain(const sl_config_t *cfg, const char *route) {
    const char *err = NULL;
    lua_State *L = sl_lua_new_state(&err);
    if (!L) {
        fprintf(stderr, "%s\n", err);
        return SL_ERROR;
    }
    lua_getglobal(L, "require");
    lua_pushliteral(L, "sluice.loader");
    int rc = SL_ERROR;
    if (lua_pcall(L, 1, 1, 0) != 0) goto out;
    lua_getfield(L, -1, "explain");
    lua_createtable(L, (int)cfg->nplugin_search, 0);
    for (size_t i = 0; i < cfg->nplugin_search; i++) {
        lua_pushstring(L, cfg->plugin_search[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    push_chain_names(L, cfg->plugins, cfg->nplugins);
    lua_createtable(L, (int)cfg->nroutes, 0);
    for (size_t r = 0; r < cfg->nroutes; r++) {
        const sl_route_conf_t *rc_ = &cfg->routes[r];
        lua_createtable(L, 0, 14);
        lua_pushstring(L, rc_->name);
        lua_setfield(L, -2, "name");
        if (rc_->upstream >= 0) {
            lua_pushstring(L, cfg->upstreams[rc_->upstream].name);
            lua_setfield(L, -2, "upstream");
        } else if (rc_->nsplit) {
            char buf[512];
            size_t off = (size_t)snprintf(buf, sizeof buf, "split");
            for (size_t k = 0; k < rc_->nsplit && off < sizeof buf; k++) {
                const sl_split_conf_t *a = &rc_->split[k];
                if (a->header || a->cookie)
                    off += (size_t)snprintf(buf + off, sizeof buf - off, " %s (%s %s=%s)", cfg->upstreams[a->upstream].name,
                                            a->header ? "header" : "cookie", a->header ? a->header : a->cookie,
                                            a->header ? a->header_value : a->cookie_value);
                else
                    off += (size_t)snprintf(buf + off, sizeof buf - off, " %s (weight %u)",
                                            cfg->upstreams[a->upstream].name, a->weight);
            }
            lua_pushstring(L, buf);
            lua_setfield(L, -2, "upstream");
        }
        /* what sluice.router.ranks reads, and where the route was written */
        lua_pushinteger(L, (lua_Integer)r);
        lua_setfield(L, -2, "index");
        sl__lua_set_match(L, rc_);
        lua_pushboolean(L, rc_->match_fn);
        lua_setfield(L, -2, "match_fn");
        lua_pushboolean(L, rc_->lua_file >= 0);
        lua_setfield(L, -2, "lua_routes");
        lua_pushstring(L, rc_->lua_file >= 0 ? cfg->lua_route_files[rc_->lua_file] : cfg->path);
        lua_setfield(L, -2, "file");
        lua_pushinteger(L, rc_->line);
        lua_setfield(L, -2, "line");
        push_chain_names(L, rc_->plugins, rc_->nplugins);
        lua_setfield(L, -2, "plugins");
        lua_rawseti(L, -2, (int)r + 1);
    }
    if (route) lua_pushstring(L, route); else lua_pushnil(L);
    if (lua_pcall(L, 4, 2, 0) != 0) goto out;
    if (lua_isnil(L, -2)) {
        fprintf(stderr, "sluice explain: %s\n", lua_tostring(L, -1));
        goto done;
    }
    fputs(lua_tostring(L, -2), stdout);
    rc = SL_OK;
    goto done;
out:
    fprintf(stderr, "sluice explain: %s\n", lua_tostring(L, -1));
done:
    lua_close(L);
    return rc;
}
