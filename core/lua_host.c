/* lua_host.c — per-worker LuaJIT VMs: opening, route compilation, the routing call. */
#include "lua_host.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

const char *sl_lua_dir(void) {
    const char *d = getenv("SLUICE_LUA_DIR");
    return d && *d ? d : SL_SOURCE_DIR "/lua";
}

static void push_strings(lua_State *L, char **v, size_t n) {
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, v[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
}

/* routes = { {name=, index=, hosts={}, paths={}, methods={}, headers={{name,value}}}, ... } */
static void push_routes(lua_State *L, const sl_config_t *cfg) {
    lua_createtable(L, (int)cfg->nroutes, 0);
    for (size_t i = 0; i < cfg->nroutes; i++) {
        const sl_route_conf_t *rc = &cfg->routes[i];
        lua_createtable(L, 0, 8);
        lua_pushstring(L, rc->name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, (lua_Integer)i);
        lua_setfield(L, -2, "index");
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
        lua_pushboolean(L, rc->strip_prefix);
        lua_setfield(L, -2, "strip_prefix");
        lua_rawseti(L, -2, (int)i + 1);
    }
}

int sl_lua_open(sl_worker_t *w, const char **err) {
    static __thread char msg[512];
    lua_State *L = luaL_newstate();
    if (!L) {
        *err = "cannot create a Lua VM";
        return SL_ERROR;
    }
    luaL_openlibs(L);
    char path[1024];
    snprintf(path, sizeof(path), "package.path = '%s/?.lua;%s/?/init.lua;' .. package.path", sl_lua_dir(),
             sl_lua_dir());
    if (luaL_dostring(L, path) != 0) goto fail;
    lua_getglobal(L, "require");
    lua_pushliteral(L, "sluice.router");
    if (lua_pcall(L, 1, 1, 0) != 0) goto fail;
    lua_getfield(L, -1, "new");
    push_routes(L, w->cfg);
    if (lua_pcall(L, 1, 1, 0) != 0) goto fail;
    w->lua_dispatch = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(L, 0);
    w->L = L;
    return SL_OK;
fail:
    snprintf(msg, sizeof(msg), "lua: %s", lua_tostring(L, -1));
    *err = msg;
    lua_close(L);
    return SL_ERROR;
}

void sl_lua_close(sl_worker_t *w) {
    if (w->L) lua_close(w->L);
    w->L = NULL;
}

int sl_lua_route(sl_worker_t *w, sl_req_t *r, uint32_t *strip) {
    lua_State *L = w->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->lua_dispatch);
    lua_pushlightuserdata(L, r);
    if (lua_pcall(L, 1, 2, 0) != 0) {
        sl_log_err("router error: %s", lua_tostring(L, -1));
        lua_settop(L, 0);
        *strip = 0;
        return -1;
    }
    int idx = (int)lua_tointeger(L, -2);
    *strip = (uint32_t)lua_tointeger(L, -1);
    lua_settop(L, 0);
    return idx;
}
