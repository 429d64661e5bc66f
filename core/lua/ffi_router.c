/* ffi_router.c — the route matcher through the FFI ABI (sluice.h's router section): Lua
 * asks the generation's router (sluice.router.c_match), or compiles routes of its own (the
 * differential spec, tools), with the same code the core routes requests with. */
#include "config/router.h"
#include "http/request.h"
#include "sluice.h"

int sl_ffi_router_next(const sl_router_t *rt, const sl_route_query_t *q, sl_route_cursor_t *c) {
    return sl_router_next(rt, q, c);
}

sl_router_t *sl_ffi_router_new(const sl_route_def_t *routes, uint32_t n, const char **err) {
    return sl_router_build(routes, n, err);
}

void sl_ffi_router_free(sl_router_t *rt) { sl_router_free(rt); }

const sl_router_t *sl_ffi_req_router(sl_req_t *r) { return r->w->cfg->router; }
