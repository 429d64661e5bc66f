-- sluice.base: the FFI declarations of core/sluice.h, shared scratch out-parameters,
-- and the ABI check. Every other module takes its C functions from here.
local ffi = require("ffi")

local _M = { ABI_VERSION = 1 }

ffi.cdef[[
typedef struct sl_req_s sl_req_t;
int sl_ffi_abi_version(void);
int sl_ffi_req_get_method(void *r, const char **p, size_t *len);
int sl_ffi_req_get_path(void *r, const char **p, size_t *len);
int sl_ffi_req_get_query(void *r, const char **p, size_t *len);
int sl_ffi_req_get_host(void *r, const char **p, size_t *len);
int sl_ffi_req_get_header(void *r, const char *name, size_t name_len, const char **p, size_t *len);
int sl_ffi_req_header_count(void *r);
int sl_ffi_req_header_at(void *r, int i, const char **name, size_t *name_len,
                         const char **value, size_t *value_len);
int memcmp(const void *a, const void *b, size_t n);
]]

local C = ffi.C
_M.C = C
_M.OK = 0
_M.DECLINED = -5

-- Out-parameters made once at load: no per-call garbage on hot paths.
_M.str_p = ffi.new("const char *[1]")
_M.len_p = ffi.new("size_t[1]")
_M.str2_p = ffi.new("const char *[1]")
_M.len2_p = ffi.new("size_t[1]")

local got = C.sl_ffi_abi_version()
if got ~= _M.ABI_VERSION then
    error(("sluice ABI mismatch: core has %d, lua/sluice expects %d"):format(got, _M.ABI_VERSION))
end

return _M
