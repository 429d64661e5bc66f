/* cli_lua.c — runs `sluice test|spec|new` through lua/sluice/cli.lua.
 *
 * They are tools around the gateway rather than the gateway: reading spec
 * files, printing diffs, writing templates and starting busted read best in
 * Lua, and `sluice test` starts its in-process gateways through the same FFI
 * entry points sluice.test uses from busted: the core's found in the binary itself
 * (it exports its symbols) instead of in libsluice.so, the harness's (sl_test_*,
 * sl_mock_*) in libsluice_test.so, which sluice.test loads beside the binary.
 */
#include "server/cli_lua.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "script/lua_host.h"

static const char *const cmds[] = {"test", "spec", "new"};

int sl_cli_lua_has(const char *cmd) {
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (strcmp(cmd, cmds[i]) == 0) return 1;
    return 0;
}

int sl_cli_lua(const char *cmd, int argc, char **argv) {
    const char *err = NULL;
    lua_State *L = sl_lua_new_state(&err);
    if (!L) {
        fprintf(stderr, "sluice %s: %s\n", cmd, err);
        return 2;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    lua_getglobal(L, "require");
    lua_pushliteral(L, "sluice.cli");
    if (lua_pcall(L, 1, 1, 0) != 0) goto fail;
    lua_getfield(L, -1, "main");
    lua_pushstring(L, cmd);
    lua_createtable(L, argc, 0);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_createtable(L, 0, 3);
    lua_pushstring(L, exe);
    lua_setfield(L, -2, "exe");
    lua_pushstring(L, sl_lua_dir());
    lua_setfield(L, -2, "lua_dir");
    lua_pushstring(L, sl_builtin_plugin_dir());
    lua_setfield(L, -2, "plugin_dir");
    if (lua_pcall(L, 3, 1, 0) != 0) goto fail;
    int rc = (int)lua_tointeger(L, -1);
    lua_close(L);
    return rc;
fail:
    fprintf(stderr, "sluice %s: %s\n", cmd, lua_tostring(L, -1));
    lua_close(L);
    return 2;
}
