/* cli_lua.h — the subcommands written in Lua: test, spec, new (lua/sluice/cli.lua). */
#ifndef SL_SERVER_CLI_LUA_H
#define SL_SERVER_CLI_LUA_H

/** Whether `cmd` is one of the Lua subcommands. */
int sl_cli_lua_has(const char *cmd);

/**
 * Runs subcommand `cmd` with its arguments argv[0..argc) in a Lua VM of this process
 * (the binary's LuaJIT, with the core's FFI symbols exported). Returns the exit status.
 */
int sl_cli_lua(const char *cmd, int argc, char **argv);

#endif
