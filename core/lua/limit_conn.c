/* limit_conn.c — the limit-conn functions of the FFI ABI (sluice.h, "limit-conn"): the
 * running request takes slots of core/upstream/conn_limit.c and holds them in
 * r->slots.v until sl__req_free gives them back.
 */
#include "http/request.h"
#include "sluice.h"
#include "upstream/conn_limit.h"

int sl_ffi_limit_conn_route(const char *name, size_t len) { return sl_conn_limit_route(name, len); }

int sl_ffi_limit_conn_acquire(sl_req_t *r, int route, const char *key, size_t len, int max, int burst,
                              int *in_flight, const char **err) {
    if (r->lua.phase != SL_PHASE_REWRITE && r->lua.phase != SL_PHASE_ACCESS) {
        *err = "limit-conn works in rewrite and access only";
        return SL_ERROR;
    }
    if (r->slots.n >= SL_REQ_CONN_SLOTS) {
        *err = "a request holds at most 4 limit-conn slots";
        return SL_ERROR;
    }
    if (max < 1 || burst < 0) {
        *err = "max must be >= 1 and burst >= 0";
        return SL_ERROR;
    }
    sl_conn_slot_t *slot;
    uint32_t n = 0;
    int rc = sl_conn_limit_acquire(route, key, len, (uint32_t)max, (uint32_t)burst, &slot, &n, err);
    if (slot) r->slots.v[r->slots.n++] = slot;
    *in_flight = (int)n;
    return rc;
}
