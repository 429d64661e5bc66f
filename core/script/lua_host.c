/* lua_host.c — per-worker LuaJIT VMs: opening, routing, phase calls and coroutines. */
#include "script/lua_host.h"

#include <lauxlib.h>
#include <lualib.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"

/* The Lua trees of an installed binary are at PREFIX/share/sluice next to PREFIX/bin/sluice,
 * whatever PREFIX is (/usr, /usr/local, a DESTDIR); a binary run from its build tree finds
 * no such folder and uses the source tree it was built from. Resolved once, from
 * /proc/self/exe, so a relative argv[0] or a later chdir changes nothing. Only a program
 * named sluice* looks next to itself: luajit running the specs through the build tree's
 * libsluice.so is /usr/bin/luajit, and must not pick up an installed package's files. */
static char lua_dir[4096], plugin_dir[4096];
static pthread_once_t dirs_once = PTHREAD_ONCE_INIT;

static void resolve_dirs(void) {
    const char *lua = getenv("SLUICE_LUA_DIR"), *plugins = getenv("SLUICE_PLUGIN_DIR");
    char share[4096] = "";
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0; /* PREFIX/bin */
        struct stat st;
        int k = -1;
        if (slash && strncmp(slash + 1, "sluice", 6) == 0)
            k = snprintf(share, sizeof(share), "%s/../share/sluice", exe);
        if (k <= 0 || (size_t)k >= sizeof(share) || stat(share, &st) != 0 || !S_ISDIR(st.st_mode)) share[0] = 0;
        char real[PATH_MAX];
        if (share[0] && realpath(share, real)) snprintf(share, sizeof(share), "%s", real);
    }
    if (lua && *lua) snprintf(lua_dir, sizeof(lua_dir), "%s", lua);
    else snprintf(lua_dir, sizeof(lua_dir), "%s/lua", share[0] ? share : SL_SOURCE_DIR);
    if (plugins && *plugins) snprintf(plugin_dir, sizeof(plugin_dir), "%s", plugins);
    else snprintf(plugin_dir, sizeof(plugin_dir), "%s/plugins", share[0] ? share : SL_SOURCE_DIR);
}

const char *sl_lua_dir(void) {
    pthread_once(&dirs_once, resolve_dirs);
    return lua_dir;
}

const char *sl_builtin_plugin_dir(void) {
    pthread_once(&dirs_once, resolve_dirs);
    return plugin_dir;
}

lua_State *sl_lua_new_state(const char **err) {
    static __thread char msg[512];
    lua_State *L = luaL_newstate();
    if (!L) {
        *err = "cannot create a Lua VM";
        return NULL;
    }
    luaL_openlibs(L);
    char code[1200];
    snprintf(code, sizeof(code), "package.path = '%s/?.lua;%s/?/init.lua;' .. package.path", sl_lua_dir(),
             sl_lua_dir());
    if (luaL_dostring(L, code) != 0) {
        snprintf(msg, sizeof(msg), "lua: %s", lua_tostring(L, -1));
        *err = msg;
        lua_close(L);
        return NULL;
    }
    return L;
}

static void push_strings(lua_State *L, char **v, size_t n) {
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, v[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
}

static void push_chain(lua_State *L, const sl_plugin_conf_t *p, size_t n) {
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, p[i].name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, p[i].config_json ? p[i].config_json : "{}");
        lua_setfield(L, -2, "config_json");
        lua_rawseti(L, -2, (int)i + 1);
    }
}

void sl__lua_set_match(lua_State *L, const sl_route_conf_t *rc) {
    push_strings(L, rc->hosts, rc->nhosts);
    lua_setfield(L, -2, "hosts");
    push_strings(L, rc->paths, rc->npaths);
    lua_setfield(L, -2, "paths");
    push_strings(L, rc->methods, rc->nmethods);
    lua_setfield(L, -2, "methods");
    lua_createtable(L, (int)rc->nheaders, 0);
    for (size_t k = 0; k < rc->nheaders; k++) {
        lua_createtable(L, 2, 0);
        lua_pushstring(L, rc->headers[k].name);
        lua_rawseti(L, -2, 1);
        lua_pushstring(L, rc->headers[k].value);
        lua_rawseti(L, -2, 2);
        lua_rawseti(L, -2, (int)k + 1);
    }
    lua_setfield(L, -2, "headers");
}

/* gen = { plugin_paths = {...}, global = chain, routes = { {name, index, hosts, paths,
 *         methods, headers, strip_prefix, plugins = chain}, ... } }: `routes` lists only
 * the routes the VM has work for (a chain, global or own, or a lua_routes match function);
 * the others run no Lua, and at 10,000 plain routes leaving them out saves the build
 * ~170,000 Lua objects. */
static void push_generation(lua_State *L, const sl_config_t *cfg) {
    lua_createtable(L, 0, 3);
    push_strings(L, cfg->plugin_search, cfg->nplugin_search);
    lua_setfield(L, -2, "plugin_paths");
    lua_pushstring(L, cfg->path ? cfg->path : "<config>"); /* sluice.files resolves against its folder */
    lua_setfield(L, -2, "config_path");
    lua_newtable(L); /* files = { [path] = text }: what the check read (sluice.files.read) */
    for (size_t i = 0; i < cfg->nplugin_files; i++) {
        if (!cfg->plugin_file_texts || !cfg->plugin_file_texts[i]) continue;
        lua_pushlstring(L, cfg->plugin_file_texts[i], cfg->plugin_file_lens[i]);
        lua_setfield(L, -2, cfg->plugin_files[i]);
    }
    lua_setfield(L, -2, "files");
    push_chain(L, cfg->plugins, cfg->nplugins);
    lua_setfield(L, -2, "global");
    /* the dispatcher reports each plugin's end (sl_ffi_plugin_timed) for the duration
     * metric and for debugged requests */
    lua_pushboolean(L, sl_config_timed(cfg));
    lua_setfield(L, -2, "timed");
    lua_createtable(L, (int)cfg->nconsumers, 0);
    for (size_t i = 0; i < cfg->nconsumers; i++) {
        lua_createtable(L, 0, 3);
        lua_pushstring(L, cfg->consumers[i].name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, cfg->consumers[i].credentials_json ? cfg->consumers[i].credentials_json : "{}");
        lua_setfield(L, -2, "credentials_json");
        push_strings(L, cfg->consumers[i].groups, cfg->consumers[i].ngroups);
        lua_setfield(L, -2, "groups");
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -2, "consumers");
    lua_createtable(L, cfg->nplugins ? (int)cfg->nroutes : 0, 0);
    for (size_t i = 0, n = 0; i < cfg->nroutes; i++) {
        const sl_route_conf_t *rc = &cfg->routes[i];
        if (!cfg->nplugins && !rc->nplugins && !rc->match_fn) continue;
        lua_createtable(L, 0, 9);
        lua_pushstring(L, rc->name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, (lua_Integer)i);
        lua_setfield(L, -2, "index");
        sl__lua_set_match(L, rc);
        lua_pushboolean(L, rc->strip_prefix);
        lua_setfield(L, -2, "strip_prefix");
        push_chain(L, rc->plugins, rc->nplugins);
        lua_setfield(L, -2, "plugins");
        if (rc->match_fn) {
            lua_pushstring(L, cfg->lua_route_files[rc->lua_file]);
            lua_setfield(L, -2, "lua_file");
            lua_pushinteger(L, rc->lua_index);
            lua_setfield(L, -2, "lua_index");
        }
        lua_rawseti(L, -2, (int)++n);
    }
    lua_setfield(L, -2, "routes");
    /* listeners = { {index, name, plugins = chain}, ... }: the tcp listeners with plugins */
    lua_newtable(L);
    for (size_t i = 0, n = 0; i < cfg->nlisteners; i++) {
        const sl_listener_conf_t *l = &cfg->listeners[i];
        if (!l->nplugins) continue;
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, (lua_Integer)i);
        lua_setfield(L, -2, "index");
        lua_pushstring(L, l->name);
        lua_setfield(L, -2, "name");
        push_chain(L, l->plugins, l->nplugins);
        lua_setfield(L, -2, "plugins");
        lua_rawseti(L, -2, (int)++n);
    }
    lua_setfield(L, -2, "listeners");
}

/* Requests' coroutines and ctx tables, kept for the next request instead of made and
 * collected per request (a coroutine is about 1 KB of Lua heap: the largest per-request
 * allocation there was). A coroutine is kept only when it ended normally (dead ones, and
 * ones still suspended because their request went away, are dropped); its ctx table is
 * emptied in place (keys and metatable; the table keeps its size). Bounded: requests in
 * flight beyond POOL_MAX make and drop their own. */
#define POOL_MAX 256
typedef struct {
    lua_State *co;
    int co_ref, ctx_ref;
} pooled_t;
struct sl_lua_pool_s {
    uint32_t n, serial;
    int base_ref; /* sluice.base: .plugin and .pos name the plugin a raised error came from */
    pooled_t v[POOL_MAX];
};

int sl_lua_open(sl_worker_t *w, const char **err) {
    static __thread char msg[1024];
    if (!w->cfg->router) { /* every request is routed by it: a config build compiles it */
        *err = "the config's routes were not compiled (sl_plugins_check)";
        return SL_ERROR;
    }
    lua_State *L = sl_lua_new_state(err);
    if (!L) return SL_ERROR;
    lua_getglobal(L, "require");
    lua_pushliteral(L, "sluice.runtime");
    if (lua_pcall(L, 1, 1, 0) != 0) goto fail;
    lua_getfield(L, -1, "new");
    push_generation(L, w->cfg);
    /* returns the match-function dispatcher, phase dispatcher, { [route index] = phase bits },
     * preread dispatcher */
    if (lua_pcall(L, 1, 4, 0) != 0) goto fail;
    w->lua_preread = luaL_ref(L, LUA_REGISTRYINDEX);
    w->route_phases = calloc(w->cfg->nroutes + 1, 1);
    if (!w->route_phases) {
        *err = "out of memory";
        lua_close(L);
        return SL_ERROR;
    }
    for (size_t i = 0; i < w->cfg->nroutes; i++) {
        lua_rawgeti(L, -1, (int)i);
        w->route_phases[i] = (uint8_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    w->lua_phase = luaL_ref(L, LUA_REGISTRYINDEX);
    w->lua_dispatch = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(L, 0);
    w->lua_pool = calloc(1, sizeof(*w->lua_pool));
    if (!w->lua_pool) {
        *err = "out of memory";
        lua_close(L);
        return SL_ERROR;
    }
    lua_getglobal(L, "require");
    lua_pushliteral(L, "sluice.base");
    if (lua_pcall(L, 1, 1, 0) != 0) goto fail;
    w->lua_pool->base_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    w->L = L;
    return SL_OK;
fail:
    snprintf(msg, sizeof(msg), "lua: %s", lua_tostring(L, -1));
    *err = msg;
    lua_close(L);
    free(w->lua_pool);
    w->lua_pool = NULL;
    return SL_ERROR;
}

void sl_lua_close(sl_worker_t *w) {
    if (w->L) lua_close(w->L);
    w->L = NULL;
    free(w->route_phases);
    w->route_phases = NULL;
    free(w->lua_pool);
    w->lua_pool = NULL;
}

bool sl_lua_route_match(sl_worker_t *w, void *req, int route) {
    lua_State *L = w->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->lua_dispatch);
    lua_pushnumber(L, (lua_Number)(uintptr_t)req); /* as in sl_lua_phase */
    lua_pushinteger(L, route);
    if (lua_pcall(L, 2, 1, 0) != 0) {
        sl_log_err("router error: %s", lua_tostring(L, -1));
        lua_settop(L, 0);
        return false;
    }
    bool yes = lua_toboolean(L, -1);
    lua_settop(L, 0);
    return yes;
}

uint8_t sl_lua_route_phases(sl_worker_t *w, int route) {
    return route >= 0 ? w->route_phases[route] : 0;
}

static void drop_coroutine(sl_worker_t *w, sl_lua_task_t *t) {
    if (t->co_ref) luaL_unref(w->L, LUA_REGISTRYINDEX, t->co_ref);
    t->co_ref = 0;
    t->co = NULL;
}

/* A sluice API function a plugin called as a tail call (`return sluice.response.exit(...)`,
 * the documented idiom) replaced the plugin's frame on the stack, so an error it raised "at
 * its caller" names the dispatcher's line in sluice/runtime.lua, not the plugin. The dead
 * coroutine's stack is still there (lua_resume does not unwind it): when msg starts with the
 * position of a runtime.lua frame that holds the plugin's phase function (upvalue `fn` of
 * runtime.lua's link, or body_filter's local `fn`), the message names that function's file
 * and first line instead.
 * Returns msg, or the new message (on co's stack). */
/* msg, its first n bytes (the position) cut, at the first line of the function on top of
 * co's stack, which is popped; msg as it is when that function has no line (C). */
static const char *blamed(lua_State *co, const char *msg, int n) {
    lua_Debug fi;
    if (lua_getinfo(co, ">S", &fi) && fi.linedefined > 0) /* pops the function */
        return lua_pushfstring(co, "%s:%d: %s (a tail call in the function defined at this line)", fi.short_src,
                               fi.linedefined, msg + n);
    return msg;
}

static const char *blame_plugin(lua_State *co, const char *msg) {
    lua_Debug ar;
    if (!lua_checkstack(co, 4)) return msg; /* a stack overflow's error: leave it as it is */
    for (int level = 0; msg && lua_getstack(co, level, &ar); level++) {
        if (!lua_getinfo(co, "Slf", &ar)) break;
        size_t sl = strlen(ar.source);
        char pos[LUA_IDSIZE + 32];
        int n = snprintf(pos, sizeof pos, "%s:%d: ", ar.short_src, ar.currentline);
        bool here = sl >= 19 && strcmp(ar.source + sl - 19, "/sluice/runtime.lua") == 0 && n > 0 &&
                    (size_t)n < sizeof pos && strncmp(msg, pos, (size_t)n) == 0;
        if (!here) {
            lua_pop(co, 1);
            continue;
        }
        /* the link's upvalue `fn`, or body_filter's local `fn` (its loop calls each plugin) */
        const char *name;
        for (int i = 1; (name = lua_getupvalue(co, -1, i)) != NULL; i++) {
            if (strcmp(name, "fn") == 0 && lua_isfunction(co, -1)) return blamed(co, msg, n);
            lua_pop(co, 1);
        }
        lua_pop(co, 1); /* the frame's function */
        for (int i = 1; (name = lua_getlocal(co, &ar, i)) != NULL; i++) {
            if (strcmp(name, "fn") == 0 && lua_isfunction(co, -1)) return blamed(co, msg, n);
            lua_pop(co, 1);
        }
        break;
    }
    return msg;
}

/* An error the dispatcher did not catch: a plugin's phase function raised (the dispatcher
 * calls them without a pcall, so that their traces compile; sluice.base's .pos and
 * .plugin say which), or the dispatcher itself failed (.pos is -1). The coroutine is dead.
 * sluice.base's UNWIND, raised by a call that answered the request (kong.response.exit),
 * is no error: the chain is DONE. */
static int uncaught(sl_worker_t *w, sl_lua_task_t *t, sl_lua_who_t who, const char *route) {
    lua_State *co = t->co, *L = w->L;
    const char *msg = lua_tostring(co, -1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->lua_pool->base_ref);
    lua_getfield(L, -1, "UNWIND");
    lua_getfield(L, -2, "exited");
    bool answered = lua_istable(co, -1) && lua_topointer(co, -1) == lua_topointer(L, -2) && lua_toboolean(L, -1);
    lua_pop(L, 2);
    if (answered) {
        lua_pushinteger(L, -1);
        lua_setfield(L, -2, "pos");
        lua_pop(L, 1);
        drop_coroutine(w, t); /* the request's later phases get a new one, with the same ctx */
        return SL_DONE;
    }
    lua_getfield(L, -1, "pos");
    lua_getfield(L, -2, "plugin");
    int pos = lua_isnumber(L, -2) ? (int)lua_tointeger(L, -2) : -1;
    const char *plugin = lua_tostring(L, -1);
    /* error({...}) or error(): say what was raised, as lua.c does, rather than "?" */
    if (!msg) msg = lua_checkstack(co, 1) ? lua_pushfstring(co, "(error object is a %s value)", luaL_typename(co, -1)) : "?";
    if (pos >= 0) {
        msg = blame_plugin(co, msg);
        sl_log_kv(SL_LOG_ERR,
                  (const char *[]){"route", route, "plugin", plugin ? plugin : "?", "request_id", who.rid}, 3,
                  "plugin error: %s", msg);
        sl_metrics_plugin_error(&w->metrics, who.route, pos);
        lua_pushinteger(L, -1);
        lua_setfield(L, -4, "pos");
    } else {
        sl_log_kv(SL_LOG_ERR, (const char *[]){"route", route, "request_id", who.rid}, 2, "lua: %s", msg);
    }
    lua_pop(L, 3);
    drop_coroutine(w, t);
    return SL_ERROR;
}

/* The dispatcher returns (code, chain position, plugin name, message):
 * code 0 = carry on, 1 = a plugin answered, 2 = a plugin failed (prepare, or a body_filter
 * result that is not a string). */
static int finish_resume(sl_worker_t *w, sl_lua_task_t *t, sl_lua_who_t who, int st) {
    lua_State *co = t->co;
    const char *route = who.route >= 0 ? w->cfg->routes[who.route].name : "none";
    if (st == LUA_YIELD) {
        lua_settop(co, 0);
        t->waiting = 1;
        return SL_EAGAIN;
    }
    t->waiting = 0;
    if (st != 0) return uncaught(w, t, who, route);
    int code = (int)lua_tointeger(co, 1);
    int rc = SL_OK;
    if (code == SL_CHAIN_DONE) {
        rc = SL_DONE;
    } else if (code == SL_CHAIN_ERROR) {
        int pos = (int)lua_tointeger(co, 2);
        const char *plugin = lua_tostring(co, 3);
        sl_log_kv(SL_LOG_ERR,
                  (const char *[]){"route", route, "plugin", plugin ? plugin : "?", "request_id", who.rid}, 3,
                  "plugin error: %s", lua_tostring(co, 4) ? lua_tostring(co, 4) : "?");
        sl_metrics_plugin_error(&w->metrics, who.route, pos);
        rc = SL_ERROR;
    }
    lua_settop(co, 0);
    return rc;
}

/* The request whose phase is running (per thread: one worker VM per thread). The phase
 * dispatcher marks each plugin's end with sl_ffi_plugin_timed(NULL, pos) instead of
 * passing the request: a pointer made from the request in Lua is a boxed cdata (an
 * allocation) wherever that code runs interpreted, e.g. after a plugin called a builtin
 * the JIT does not compile. */
static __thread void *current_req;

void *sl_lua_current(void) { return current_req; }

static int resume(sl_worker_t *w, sl_lua_task_t *t, sl_lua_who_t who, int nargs) {
    void *outer = current_req;
    current_req = who.req;
    int rc = finish_resume(w, t, who, lua_resume(t->co, nargs));
    current_req = outer;
    return rc;
}

/* Gives the request a coroutine and a ctx table: the pool's, else new ones. */
static void task_take(sl_worker_t *w, sl_lua_task_t *t) {
    lua_State *L = w->L;
    struct sl_lua_pool_s *pool = w->lua_pool;
    t->serial = ++pool->serial;
    if (pool->n) {
        pooled_t *p = &pool->v[--pool->n];
        t->co = p->co;
        t->co_ref = p->co_ref;
        t->ctx_ref = p->ctx_ref;
        return;
    }
    t->co = lua_newthread(L);
    t->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    t->ctx_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

int sl_lua_phase(sl_worker_t *w, sl_lua_task_t *t, sl_lua_who_t who, int phase) {
    if (!t->co && t->ctx_ref) {
        /* a failed phase dropped the coroutine: the request's later phases (log) get a new
         * one, with the same ctx */
        t->co = lua_newthread(w->L);
        t->co_ref = luaL_ref(w->L, LUA_REGISTRYINDEX);
    } else if (!t->co) {
        task_take(w, t);
    }
    lua_State *co = t->co;
    t->phase = (uint8_t)phase;
    if (sl_config_timed(w->cfg)) t->mark = sl_ticks();
    lua_rawgeti(co, LUA_REGISTRYINDEX, w->lua_phase);
    lua_pushinteger(co, phase);
    /* the request's address as a number: no allocation (a lightuserdata cannot be handed
     * to FFI calls in compiled code, and a boxed cdata would be one object per phase);
     * user-space addresses fit a double's 53 bits */
    lua_pushnumber(co, (lua_Number)(uintptr_t)who.req);
    lua_pushinteger(co, who.route);
    lua_rawgeti(co, LUA_REGISTRYINDEX, t->ctx_ref);
    lua_pushinteger(co, (lua_Integer)t->serial);
    int rc = resume(w, t, who, 5);
    if (rc == SL_EAGAIN && phase != SL_PHASE_REWRITE && phase != SL_PHASE_ACCESS) {
        /* Only rewrite and access may wait; elsewhere the response is already moving. */
        sl_log_kv(SL_LOG_ERR, (const char *[]){"request_id", who.rid}, 1, "a plugin yielded in a phase that cannot wait");
        t->waiting = 0;
        drop_coroutine(w, t);
        return SL_ERROR;
    }
    return rc;
}

int sl_lua_preread(sl_worker_t *w, void *session, uint32_t lidx) {
    lua_State *L = w->L;
    const char *listener = w->cfg->listeners[lidx].name;
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->lua_preread);
    lua_pushlightuserdata(L, session);
    lua_pushinteger(L, (lua_Integer)lidx);
    /* the dispatcher returns (code, chain position, plugin name, message), as the phase
     * dispatcher does: SL_CHAIN_NEXT, SL_CHAIN_DONE (closed by a plugin), SL_CHAIN_ERROR */
    if (lua_pcall(L, 2, 4, 0) != 0) {
        sl_log_kv(SL_LOG_ERR, (const char *[]){"listener", listener}, 1, "lua: %s", lua_tostring(L, -1));
        lua_settop(L, 0);
        return SL_ERROR;
    }
    int code = (int)lua_tointeger(L, 1);
    int rc = code == SL_CHAIN_NEXT ? SL_OK : code == SL_CHAIN_DONE ? SL_DONE : SL_ERROR;
    if (code == SL_CHAIN_ERROR) {
        const char *plugin = lua_tostring(L, 3);
        sl_log_kv(SL_LOG_ERR, (const char *[]){"listener", listener, "plugin", plugin ? plugin : "?"}, 2,
                  "plugin error in preread: %s", lua_tostring(L, 4) ? lua_tostring(L, 4) : "?");
        sl_metrics_listener_plugin_error(&w->metrics, lidx, (int)lua_tointeger(L, 2));
    }
    lua_settop(L, 0);
    return rc;
}

int sl_lua_resume(sl_worker_t *w, sl_lua_task_t *t, sl_lua_who_t who) {
    if (!t->co || !t->waiting) return SL_ERROR;
    return resume(w, t, who, 0);
}

/* Empties table idx in place: every key, and its metatable. */
static void clear_table(lua_State *L, int idx) {
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_pushnil(L);
        lua_rawset(L, idx); /* clearing a key already visited is allowed during lua_next */
    }
    lua_pushnil(L);
    lua_setmetatable(L, idx);
}

void sl_lua_task_abandon(sl_worker_t *w, sl_lua_task_t *t) {
    t->waiting = 0;
    drop_coroutine(w, t);
}

void sl_lua_task_end(sl_worker_t *w, sl_lua_task_t *t) {
    lua_State *L = w->L;
    if (!L || (!t->co && !t->ctx_ref)) return; /* no phase ran: a route without plugins */
    struct sl_lua_pool_s *pool = w->lua_pool;
    if (t->co && t->ctx_ref && !t->waiting && lua_status(t->co) == 0 && pool && pool->n < POOL_MAX) {
        lua_settop(t->co, 0);
        lua_rawgeti(L, LUA_REGISTRYINDEX, t->ctx_ref);
        clear_table(L, lua_gettop(L));
        lua_pop(L, 1);
        pool->v[pool->n++] = (pooled_t){t->co, t->co_ref, t->ctx_ref};
        t->co = NULL;
        t->co_ref = t->ctx_ref = 0;
        return;
    }
    drop_coroutine(w, t);
    if (t->ctx_ref) luaL_unref(L, LUA_REGISTRYINDEX, t->ctx_ref);
    t->ctx_ref = 0;
}
