/* ffi_req.c — the request accessors of the FFI ABI (core/sluice.h). */
#include "sluice.h"

#include "http_conn.h"

int sl_ffi_abi_version(void) { return SL_ABI_VERSION; }

static int out(sl_str_t s, const char **p, size_t *len) {
    *p = s.p ? s.p : "";
    *len = s.len;
    return SL_OK;
}

int sl_ffi_req_get_method(sl_req_t *r, const char **p, size_t *len) { return out(r->head.method, p, len); }
int sl_ffi_req_get_path(sl_req_t *r, const char **p, size_t *len) { return out(r->head.path, p, len); }
int sl_ffi_req_get_query(sl_req_t *r, const char **p, size_t *len) { return out(r->head.query, p, len); }

int sl_ffi_req_get_host(sl_req_t *r, const char **p, size_t *len) {
    return out((sl_str_t){r->host, r->host_len}, p, len);
}

int sl_ffi_req_get_header(sl_req_t *r, const char *name, size_t name_len, const char **p, size_t *len) {
    for (uint16_t i = 0; i < r->head.nheaders; i++)
        if (sl_str_ieq2(r->head.headers[i].name, (sl_str_t){name, name_len}))
            return out(r->head.headers[i].value, p, len);
    return SL_DECLINED;
}

int sl_ffi_req_header_count(sl_req_t *r) { return r->head.nheaders; }

int sl_ffi_req_header_at(sl_req_t *r, int i, const char **name, size_t *name_len, const char **value,
                         size_t *value_len) {
    if (i < 0 || i >= r->head.nheaders) return SL_DECLINED;
    out(r->head.headers[i].name, name, name_len);
    return out(r->head.headers[i].value, value, value_len);
}
