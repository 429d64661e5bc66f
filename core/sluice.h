/* sluice.h — the C ABI that LuaJIT reaches through FFI. The only header Lua reads.
 *
 * Rules (STYLE.md): fixed-width integers, opaque handles, plain structs; no
 * unions, bitfields, varargs or callbacks into Lua. Strings go in as pointer +
 * length and come out through out-parameters pointing into gateway memory that
 * stays valid until the current phase call returns. Returns: 0 OK, negative
 * SL_E* (SL_DECLINED = -5 for "not there").
 *
 * lua/sluice/base.lua declares the same functions and checks SL_ABI_VERSION.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#define SL_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/** A request being served; valid only during the phase call that received it. */
typedef struct sl_req_s sl_req_t;

/** The ABI version this core was built with; Lua refuses to load on a mismatch. */
int sl_ffi_abi_version(void);

/** Request method, path (without query), query (without '?'), and the normalized host
 *  (lower-case, port removed). Worker thread, during a phase call. */
int sl_ffi_req_get_method(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_get_path(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_get_query(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_get_host(sl_req_t *r, const char **p, size_t *len);

/** First header named `name` (case-insensitive): 0 and its value, or SL_DECLINED. */
int sl_ffi_req_get_header(sl_req_t *r, const char *name, size_t name_len, const char **p,
                          size_t *len);

/** Number of request headers, and the i-th one (0-based): 0, or SL_DECLINED past the end. */
int sl_ffi_req_header_count(sl_req_t *r);
int sl_ffi_req_header_at(sl_req_t *r, int i, const char **name, size_t *name_len,
                         const char **value, size_t *value_len);

#ifdef __cplusplus
}
#endif

#endif
