/* ffi_cache.c — the proxy-cache's functions of the FFI ABI (core/sluice.h, section cache):
 * the access phase's lookup. The store is upstream/cache.c, the request's side
 * http/cache_req.c. Worker thread, during the request's access phase. */
#include "http/request.h"
#include "sluice.h"

int sl_ffi_cache_lookup(sl_req_t *r, const char *key, size_t len, const sl_cache_policy_t *pol,
                        int may_wait, const char **err) {
    if (r->lua.phase != SL_PHASE_ACCESS && r->lua.phase != SL_PHASE_REWRITE) {
        *err = "the cache is looked up in rewrite or access only";
        return SL_ERROR;
    }
    return sl__cache_req_lookup(r, key ? (sl_str_t){key, len} : (sl_str_t){NULL, 0}, pol, may_wait != 0);
}

int sl_ffi_cache_wait(sl_req_t *r, uint64_t ms, const char **err) {
    if (r->lua.phase != SL_PHASE_ACCESS && r->lua.phase != SL_PHASE_REWRITE) {
        *err = "the cache is waited for in rewrite or access only";
        return SL_ERROR;
    }
    if (r->wait || !r->cache) {
        *err = r->wait ? "already waiting" : "no cache lookup to wait for";
        return SL_ERROR;
    }
    if (sl__cache_req_wait(r, ms) != SL_OK) {
        *err = "out of memory";
        return SL_ERROR;
    }
    return SL_OK;
}
