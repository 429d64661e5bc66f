/* lua_host.h — a worker's LuaJIT VM and the calls the C core makes into it.
 *
 * Each worker owns one VM (per config generation). C enters Lua through one
 * small dispatcher per concern (DESIGN.md: a handler called straight from C with
 * lua_pcall is never JIT-compiled; a dispatcher that calls it is).
 */
#ifndef SL_LUA_HOST_H
#define SL_LUA_HOST_H

#include "worker.h"

/** Opens w->L, loads lua/sluice/router.lua and compiles the config's routes. */
int sl_lua_open(sl_worker_t *w, const char **err);
void sl_lua_close(sl_worker_t *w);

/** Routes a request: the route index, or -1 when none matches; *strip = prefix bytes to drop. */
int sl_lua_route(sl_worker_t *w, sl_req_t *r, uint32_t *strip);

/** Where lua/ lives: $SLUICE_LUA_DIR, else the source tree this binary was built from. */
const char *sl_lua_dir(void);

#endif
