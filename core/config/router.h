/* router.h — the route matcher of a config generation, in C.
 *
 * Compiled once per config build (script/plugin.c, main thread, from the config's routes)
 * into cfg->router and freed with the config; immutable afterwards, so every worker reads
 * the one copy without locks. It knows only sluice.h's types, not the config's.
 *
 * Precedence (the design, and what lua/sluice/router.lua, the reference, does): an exact
 * host over a wildcard host (the longest suffix first) over no host, each class tried
 * whole before the next; within one, the longest path prefix; then the route with more
 * conditions; then file order. A route whose `match` is a Lua function ranks like a "/"
 * route with one more condition; the matcher hands it to the caller as a candidate
 * (cursor.lua) instead of calling Lua.
 *
 * The query, cursor and route-definition types are sluice.h's (Lua reaches the same
 * matcher through sl_ffi_router_*).
 */
#ifndef SL_ROUTER_H
#define SL_ROUTER_H

#include <stddef.h>

#include "sluice.h"

/** Compiles routes[0..n). NULL with *err (static) when out of memory. Any thread. */
sl_router_t *sl_router_build(const sl_route_def_t *routes, size_t n, const char **err);

/** The next candidate route of q (sluice.h's sl_ffi_router_next). */
int sl_router_next(const sl_router_t *rt, const sl_route_query_t *q, sl_route_cursor_t *c);

void sl_router_free(sl_router_t *rt);

#endif
