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
int sl_ffi_req_set_header(void *r, const char *n, size_t nl, const char *v, size_t vl, const char **err);
int sl_ffi_req_add_header(void *r, const char *n, size_t nl, const char *v, size_t vl, const char **err);
int sl_ffi_req_clear_header(void *r, const char *n, size_t nl, const char **err);
int sl_ffi_req_set_path(void *r, const char *p, size_t len, const char **err);
int sl_ffi_req_set_query(void *r, const char *q, size_t len, const char **err);
int sl_ffi_req_get_body(void *r, const char **p, size_t *len, const char **err);
int sl_ffi_req_client_ip(void *r, const char **p, size_t *len);
int sl_ffi_req_id(void *r, const char **p, size_t *len);
int sl_ffi_req_set_id(void *r, const char *id, size_t len, const char **err);
int sl_ffi_req_route(void *r, const char **p, size_t *len);
int sl_ffi_resp_exit(void *r, int status, const char *body, size_t len, const char **err);
int sl_ffi_resp_get_status(void *r);
int sl_ffi_resp_get_header(void *r, const char *n, size_t nl, const char **p, size_t *len);
int sl_ffi_resp_set_header(void *r, const char *n, size_t nl, const char *v, size_t vl, const char **err);
int sl_ffi_resp_add_header(void *r, const char *n, size_t nl, const char *v, size_t vl, const char **err);
int sl_ffi_resp_clear_header(void *r, const char *n, size_t nl, const char **err);
int sl_ffi_upstream_set(void *r, const char *name, size_t len, const char **err);
int sl_ffi_sleep(void *r, uint64_t ms, const char **err);
int sl_ffi_http_request(void *r, const char *host, size_t host_len, int port, const char *req,
                        size_t req_len, int is_head, double timeout_ms, double max_body, int tls, int verify,
                        const char *ca, const char **err);
int sl_ffi_http_result(void *r, int *status, int *nheaders, const char **body, size_t *body_len,
                       const char **err);
int sl_ffi_http_header_at(void *r, int i, const char **name, size_t *name_len, const char **value,
                          size_t *value_len);
void sl_ffi_http_done(void *r);
typedef struct {
    const char *address;
    int weight, healthy, breaker, in_flight, tried;
    double ewma_ms;
} sl_target_info_t;
int sl_ffi_balancer_count(void *r);
int sl_ffi_balancer_target(void *r, int i, sl_target_info_t *out);
int sl_ffi_balancer_set_target(void *r, const char *addr, size_t len, const char **err);
int sl_ffi_breaker_state(void *r, const char *up, size_t ul, const char *target, size_t tl, const char **err);
int sl_ffi_body_chunk(void *r, const char **p, size_t *len, int *eof);
int sl_ffi_req_set_consumer(void *r, const char *name, size_t len, const char **err);
int sl_ffi_redis_command(void *r, int argc, const char **argv, const size_t *argvlen, const char **err);
int sl_ffi_redis_reply(void *r, int i, int *type, long long *integer, const char **str, size_t *len,
                       int *n, const char **err);
void sl_ffi_redis_done(void *r);
void sl_ffi_ratelimit_count(void *r, int result);
int sl_ffi_body_set(void *r, const char *p, size_t len, const char **err);
void sl_ffi_log(void *r, int level, const char *plugin, const char *msg, size_t len);
double sl_ffi_now(void);
typedef struct {
    int status;
    uint64_t bytes_in, bytes_out;
    double duration_ms;
    const char *route, *upstream, *target;
} sl_req_stats_t;
int sl_ffi_req_stats(void *r, sl_req_stats_t *st);
void sl_ffi_random_hex(char *out, size_t n);
int sl_ffi_shdict_get(const char *k, size_t kl, double *num, const char **str, size_t *sl, char *buf, size_t bufsz);
int sl_ffi_shdict_set(const char *k, size_t kl, int is_num, double num, const char *s, size_t sl, double ttl, const char **err);
int sl_ffi_shdict_incr(const char *k, size_t kl, double delta, int has_init, double init, double ttl, double *out, const char **err);
int sl_ffi_shdict_delete(const char *k, size_t kl);
int memcmp(const void *a, const void *b, size_t n);
typedef struct sl_session_s sl_session_t;
int sl_ffi_session_client_ip(sl_session_t *s, const char **p, size_t *len);
int sl_ffi_session_client_port(sl_session_t *s);
int sl_ffi_session_sni(sl_session_t *s, const char **p, size_t *len);
int sl_ffi_session_listener(sl_session_t *s, const char **p, size_t *len);
int sl_ffi_session_upstream(sl_session_t *s, const char **p, size_t *len);
int sl_ffi_session_set_upstream(sl_session_t *s, const char *name, size_t len, const char **err);
void sl_ffi_session_close(sl_session_t *s, const char *msg, size_t len);
void sl_ffi_session_log(sl_session_t *s, int level, const char *plugin, const char *msg, size_t len);
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
_M.err_p = ffi.new("const char *[1]")
_M.num_p = ffi.new("double[1]")

-- The request whose phase is running, its ctx and route: set by the phase dispatcher
-- (and restored after every yield), read by the API. One VM serves one request at a time.
_M.req = nil
_M.ctx = nil
_M.route = nil
_M.plugin = nil
_M.exited = false
-- The tcp session whose preread chain is running (nil otherwise): while it is set there is
-- no request, so the request API refuses instead of reading a stale one.
_M.sess = nil

function _M.begin(req, ctx, route)
    _M.req, _M.ctx, _M.route, _M.exited, _M.sess = req, ctx, route, false, nil
end

-- Suspends the running request's coroutine (the caller armed what resumes it) and, once
-- resumed, puts back what the API reads: other requests' phases (and tcp sessions'
-- preread) ran in between and left their own req, ctx, route, plugin and exit flag. Every
-- API that waits goes through here.
local co_yield = coroutine.yield
function _M.wait()
    local req, ctx, route, plugin, exited = _M.req, _M.ctx, _M.route, _M.plugin, _M.exited
    co_yield()
    _M.req, _M.ctx, _M.route, _M.plugin, _M.exited, _M.sess = req, ctx, route, plugin, exited, nil
end

function _M.begin_session(sess, ctx, listener)
    _M.req, _M.sess, _M.ctx, _M.route, _M.exited = nil, sess, ctx, nil, false
    _M.listener = listener
end

local got = C.sl_ffi_abi_version()
if got ~= _M.ABI_VERSION then
    error(("sluice ABI mismatch: core has %d, lua/sluice expects %d"):format(got, _M.ABI_VERSION))
end

return _M
