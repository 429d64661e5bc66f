-- sluice: the plugin API (docs/plugins.md). Request data is read through FFI
-- accessors on the running request; nothing is copied into Lua until asked for.
-- Programmer mistakes raise errors; runtime failures return nil, err.
local ffi = require("ffi")
local base = require("sluice.base")
local cjson = require("cjson.safe")

ffi.cdef[[
int sl_ffi_req_get_method(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_traceparent(sl_req_t *r, double sample_ratio, char *out);
int sl_ffi_req_get_path(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_get_query(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_get_host(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_orig_path(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_orig_query(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_get_header(sl_req_t *r, const char *name, size_t name_len, const char **p,
                          size_t *len);
int sl_ffi_req_header_count(sl_req_t *r);
int sl_ffi_req_header_at(sl_req_t *r, int i, const char **name, size_t *name_len,
                         const char **value, size_t *value_len);
int sl_ffi_req_client_ip(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_is_tls(sl_req_t *r);
int sl_ffi_req_server_port(sl_req_t *r);
int sl_ffi_req_trusted_ip(sl_req_t *r, const char *ip, size_t len);
int sl_ffi_req_get_query_arg(sl_req_t *r, const char *name, size_t nl, char *buf, size_t cap,
                             size_t *len);
int sl_ffi_req_query_next(sl_req_t *r, size_t *off, char *buf, size_t cap, size_t *klen,
                          size_t *vlen);
int sl_ffi_client_get_ip(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_id(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_route(sl_req_t *r, const char **p, size_t *len);
int sl_ffi_req_set_id(sl_req_t *r, const char *id, size_t len, const char **err);
int sl_ffi_req_set_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl,
                          const char **err);
int sl_ffi_req_add_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl,
                          const char **err);
int sl_ffi_req_clear_header(sl_req_t *r, const char *n, size_t nl, const char **err);
int sl_ffi_req_set_path(sl_req_t *r, const char *p, size_t len, const char **err);
int sl_ffi_req_set_query(sl_req_t *r, const char *q, size_t len, const char **err);
int sl_ffi_req_get_body(sl_req_t *r, const char **p, size_t *len, const char **err);
int sl_ffi_req_set_body_max(sl_req_t *r, uint64_t max, const char **err);
int sl_ffi_req_set_body(sl_req_t *r, const char *p, size_t len, const char **err);
int sl_ffi_req_set_client_ip(sl_req_t *r, const char *ip, size_t len, const char **err);
typedef struct {
    int status;
    uint64_t bytes_in, bytes_out;
    double duration_ms;
    const char *route, *upstream, *target;
} sl_req_stats_t;
int sl_ffi_req_stats(sl_req_t *r, sl_req_stats_t *st);
int sl_ffi_resp_exit(sl_req_t *r, int status, const char *body, size_t len, const char **err);
int sl_ffi_resp_get_status(sl_req_t *r);
int sl_ffi_resp_upstream_status(sl_req_t *r);
int sl_ffi_resp_get_header(sl_req_t *r, const char *n, size_t nl, const char **p, size_t *len);
int sl_ffi_resp_header_count(sl_req_t *r);
int sl_ffi_resp_header_at(sl_req_t *r, int i, const char **name, size_t *name_len,
                          const char **value, size_t *value_len);
int sl_ffi_resp_set_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl,
                           const char **err);
int sl_ffi_resp_add_header(sl_req_t *r, const char *n, size_t nl, const char *v, size_t vl,
                           const char **err);
int sl_ffi_resp_clear_header(sl_req_t *r, const char *n, size_t nl, const char **err);
int sl_ffi_upstream_set(sl_req_t *r, const char *name, size_t len, const char **err);
typedef struct {
    const char *address;
    int weight;
    int healthy;
    int breaker;
    int in_flight;
    int tried;
    double ewma_ms;
} sl_target_info_t;
int sl_ffi_balancer_count(sl_req_t *r);
int sl_ffi_balancer_target(sl_req_t *r, int i, sl_target_info_t *out);
int sl_ffi_balancer_set_target(sl_req_t *r, const char *addr, size_t len, const char **err);
enum { SL_BREAKER_CLOSED = 0, SL_BREAKER_OPEN = 1, SL_BREAKER_HALF_OPEN = 2 };
int sl_ffi_breaker_state(sl_req_t *r, const char *up, size_t ul, const char *target, size_t tl, const char **err);
int sl_ffi_session_client_ip(sl_session_t *s, const char **p, size_t *len);
int sl_ffi_session_client_port(sl_session_t *s);
int sl_ffi_session_sni(sl_session_t *s, const char **p, size_t *len);
int sl_ffi_session_listener(sl_session_t *s, const char **p, size_t *len);
int sl_ffi_session_upstream(sl_session_t *s, const char **p, size_t *len);
int sl_ffi_session_set_upstream(sl_session_t *s, const char *name, size_t len, const char **err);
void sl_ffi_session_close(sl_session_t *s, const char *msg, size_t len);
void sl_ffi_session_log(sl_session_t *s, int level, const char *plugin, const char *msg, size_t len);
enum { SL_LOG_DEBUG = 0, SL_LOG_INFO = 1, SL_LOG_WARN = 2, SL_LOG_ERR = 3 };
void sl_ffi_log(sl_req_t *r, int level, const char *plugin, const char *msg, size_t len);
int sl_ffi_sleep(sl_req_t *r, uint64_t ms, const char **err);
void sl_ffi_random_hex(char *out, size_t n);
double sl_ffi_now(void);
enum { SL_SHDICT_NUMBER = 1, SL_SHDICT_STRING = 2 };
int sl_ffi_shdict_get(const char *k, size_t kl, double *num, const char **str, size_t *sl, char *buf,
                      size_t bufsz);
int sl_ffi_shdict_set(const char *k, size_t kl, int is_num, double num, const char *s, size_t sl,
                      double ttl, const char **err);
int sl_ffi_shdict_incr(const char *k, size_t kl, double delta, int has_init, double init, double ttl,
                       double *out, const char **err);
int sl_ffi_shdict_delete(const char *k, size_t kl);
]]

local C = ffi.C
local OK, ERROR = C.SL_OK, C.SL_ERROR
local str_p, len_p, str2_p, len2_p, err_p, num_p =
    base.str_p, base.len_p, base.str2_p, base.len2_p, base.err_p, base.num_p
local ffi_string, tonumber, tostring, type, pairs, error = ffi.string, tonumber, tostring, type, pairs, error
local ffi_cast, REQ_PTR = ffi.cast, base.REQ_PTR
local lower, concat = string.lower, table.concat

local _M = { version = "0.1.0" }

local function cur()
    local r = base.req
    if r == nil then
        if base.sess ~= nil then
            error("a tcp listener's preread has no request: use sluice.session (and preread cannot wait: "
                  .. "no sleep, http or redis)", 3)
        end
        error("no request is being served here (sluice API used outside a phase)", 3)
    end
    return ffi_cast(REQ_PTR, r)
end

local function check_str(v, what)
    if type(v) ~= "string" then error(what .. " must be a string", 3) end
end

local function ffi_err(rc)
    if rc ~= OK then error(ffi_string(err_p[0]), 3) end
end

-- ---------------------------------------------------------------- request

local request = {}
_M.request = request

local function getter(fn)
    return function()
        fn(cur(), str_p, len_p)
        return ffi_string(str_p[0], len_p[0])
    end
end

request.get_method = getter(C.sl_ffi_req_get_method)
request.get_path = getter(C.sl_ffi_req_get_path)
request.get_query = getter(C.sl_ffi_req_get_query)
request.get_host = getter(C.sl_ffi_req_get_host)
request.get_original_path = getter(C.sl_ffi_req_orig_path)
request.get_original_query = getter(C.sl_ffi_req_orig_query)
request.get_client_ip = getter(C.sl_ffi_req_client_ip)
request.get_id = getter(C.sl_ffi_req_id)
request.get_route = getter(C.sl_ffi_req_route)

-- Replaces the client address every later plugin, log line and hash_on ip sees (the
-- real-ip plugin); an IPv4 or IPv6 address. Rewrite/access only.
function request.set_client_ip(ip)
    check_str(ip, "ip")
    ffi_err(C.sl_ffi_req_set_client_ip(cur(), ip, #ip, err_p))
end

-- Replaces the request's id (what log lines carry as request_id); 1..32 characters.
function request.set_id(id)
    check_str(id, "id")
    ffi_err(C.sl_ffi_req_set_id(cur(), id, #id, err_p))
end

function request.get_header(name)
    check_str(name, "header name")
    if C.sl_ffi_req_get_header(cur(), name, #name, str_p, len_p) ~= OK then return nil end
    return ffi_string(str_p[0], len_p[0])
end

-- All fields of one side as { lower-case name = value }, repeated ones joined with ", ";
-- Cookie fields with "; " (a cookie-string: what HTTP/2 makes of its split cookies, and
-- nginx's $http_cookie), since "a=1, b=2" would read as one cookie a = "1, b=2". With
-- lists, repeated ones are a list of their values in order, as ngx.req.get_headers gives them.
local function all_headers(count, at, lists)
    local r = cur()
    local out = {}
    local n = count(r)
    for i = 0, n - 1 do
        if at(r, i, str_p, len_p, str2_p, len2_p) == OK then
            local k = lower(ffi_string(str_p[0], len_p[0]))
            local v = ffi_string(str2_p[0], len2_p[0])
            local old = out[k]
            if old == nil then
                out[k] = v
            elseif not lists then
                out[k] = old .. (k == "cookie" and "; " or ", ") .. v
            elseif type(old) == "table" then
                old[#old + 1] = v
            else
                out[k] = { old, v }
            end
        end
    end
    return out
end

function request.get_headers(lists)
    return all_headers(C.sl_ffi_req_header_count, C.sl_ffi_req_header_at, lists)
end

-- "https" when the request arrived over TLS, else "http" (interned: no garbage).
function request.get_scheme()
    return C.sl_ffi_req_is_tls(cur()) == 1 and "https" or "http"
end

-- The port the client connected to (the listener's).
function request.get_port()
    return C.sl_ffi_req_server_port(cur())
end

-- Query arguments, decoded by the core into one scratch buffer made at load (grown once
-- for a longer value): the only garbage is the strings returned.
local qbuf_size = 4096
local qbuf = ffi.new("char[?]", qbuf_size)
local off_p, klen_p = ffi.new("size_t[1]"), ffi.new("size_t[1]")

local function grow_qbuf(n)
    qbuf_size = n
    qbuf = ffi.new("char[?]", n)
end

-- The first argument named `name`: its decoded value, true for `?name` without '=',
-- nil when absent.
function request.get_query_arg(name)
    check_str(name, "argument name")
    local r = cur()
    local rc = C.sl_ffi_req_get_query_arg(r, name, #name, qbuf, qbuf_size, len_p)
    if rc == ERROR then
        grow_qbuf(tonumber(len_p[0]))
        rc = C.sl_ffi_req_get_query_arg(r, name, #name, qbuf, qbuf_size, len_p)
    end
    if rc == OK then return ffi_string(qbuf, len_p[0]) end
    if rc == 1 then return true end
    return nil
end

-- Every argument: { name = value }, true for one without '=', a list of them for a name
-- given more than once (in order).
function request.get_query_args()
    local r = cur()
    local out = {}
    off_p[0] = 0
    while true do
        local rc = C.sl_ffi_req_query_next(r, off_p, qbuf, qbuf_size, klen_p, len_p)
        if rc == ERROR then
            grow_qbuf(tonumber(klen_p[0] + len_p[0]))
            rc = C.sl_ffi_req_query_next(r, off_p, qbuf, qbuf_size, klen_p, len_p)
        end
        if rc ~= OK and rc ~= 1 then break end
        local kl = tonumber(klen_p[0])
        local k = ffi_string(qbuf, kl)
        base.args_put(out, k, rc == 1 or ffi_string(qbuf + kl, len_p[0]))
    end
    return out
end

-- A header value as text: a string, or a number or boolean through tostring. nil (use
-- clear_header) and other types are a programmer's mistake: they raise at `level` (as
-- error() counts, from header_value's caller) instead of sending "nil" or "table: 0x...".
local function header_value(v, level)
    local t = type(v)
    if t == "string" then return v end
    if t == "number" or t == "boolean" then return tostring(v) end
    error("header value must be a string, a number or a boolean, or a list of them (got " .. t
          .. "; clear_header removes a field)", level + 1)
end

-- Puts field `name` = `value` on one side through `put` (the side's set or add): a list
-- value is one field per element (Kong's and ngx.header's arrays: several Set-Cookie),
-- the first through `put` and the rest added; set with an empty list removes the field.
-- Errors raise at `level` counted from put_header's caller.
local function put_header(r, put, add, clear, name, value, level)
    if type(value) ~= "table" then
        value = header_value(value, level + 1)
        if put(r, name, #name, value, #value, err_p) ~= OK then error(ffi_string(err_p[0]), level + 1) end
        return
    end
    local n = #value
    for i = 1, n do header_value(value[i], level + 1) end
    if n == 0 then
        if put ~= add and clear(r, name, #name, err_p) ~= OK then error(ffi_string(err_p[0]), level + 1) end
        return
    end
    for i = 1, n do
        local v = header_value(value[i], level + 1)
        if (i == 1 and put or add)(r, name, #name, v, #v, err_p) ~= OK then
            error(ffi_string(err_p[0]), level + 1)
        end
    end
end

-- set_header / add_header / clear_header for one side (request or response).
local function header_editors(api, set, add, clear)
    function api.set_header(name, value)
        check_str(name, "header name")
        put_header(cur(), set, add, clear, name, value, 2)
    end
    function api.add_header(name, value)
        check_str(name, "header name")
        put_header(cur(), add, add, clear, name, value, 2)
    end
    function api.clear_header(name)
        check_str(name, "header name")
        ffi_err(clear(cur(), name, #name, err_p))
    end
end

header_editors(request, C.sl_ffi_req_set_header, C.sl_ffi_req_add_header, C.sl_ffi_req_clear_header)

-- Sets header `name` (of the request toward the upstream, or of the response) to the
-- request's id, what request.get_id() returns, without making it a Lua string: a new id
-- per request would be a new string per request (request-id's hot path).
local function id_header(set)
    return function(name)
        check_str(name, "header name")
        local r = cur()
        C.sl_ffi_req_id(r, str_p, len_p)
        ffi_err(set(r, name, #name, str_p[0], len_p[0], err_p))
    end
end
request.set_id_header = id_header(C.sl_ffi_req_set_header)

function request.set_path(path)
    check_str(path, "path")
    ffi_err(C.sl_ffi_req_set_path(cur(), path, #path, err_p))
end

-- Replaces the query string sent upstream (without the '?'; "" removes it).
function request.set_query(query)
    check_str(query, "query")
    ffi_err(C.sl_ffi_req_set_query(cur(), query, #query, err_p))
end

-- The whole request body (nil when there is none). Waits for it without blocking the
-- worker: only in rewrite and access. Returns nil, err when it is over the limit.
function request.get_body()
    local r = cur()
    while true do
        local rc = C.sl_ffi_req_get_body(r, str_p, len_p, err_p)
        if rc == OK then
            if str_p[0] == nil then return nil end
            return ffi_string(str_p[0], len_p[0])
        elseif rc == C.SL_EAGAIN then
            base.wait()
        else
            return nil, ffi_string(err_p[0])
        end
    end
end

-- Reads the whole body into the gateway, at most max bytes (the listener's max_body still
-- applies), without copying it into Lua: its length (0 when there is none), or nil, err
-- ("request body too large" past max). The body then goes upstream from that buffer;
-- get_body returns it. Rewrite/access only.
function request.read_body(max)
    local r = cur()
    -- not (max >= 0) refuses NaN too, which the core's uint64 took as no limit at all
    if type(max) ~= "number" or not (max >= 0) then error("max must be a number of bytes >= 0", 2) end
    local rc = C.sl_ffi_req_set_body_max(r, max, err_p)
    if rc ~= OK then return nil, ffi_string(err_p[0]) end
    while true do
        rc = C.sl_ffi_req_get_body(r, str_p, len_p, err_p)
        if rc == OK then
            local n = tonumber(len_p[0])
            if n > max then return nil, "request body too large" end -- read before the cap was set
            return n
        end
        if rc ~= C.SL_EAGAIN then return nil, ffi_string(err_p[0]) end
        base.wait()
    end
end

-- Replaces the body sent upstream (after get_body or read_body; rewrite/access only).
function request.set_body(body)
    check_str(body, "body")
    ffi_err(C.sl_ffi_req_set_body(cur(), body, #body, err_p))
end

local stats = ffi.new("sl_req_stats_t")

-- What the request did so far: status, bytes_in, bytes_out, duration_ms, route,
-- upstream, target (for access logs; most useful in the log phase).
function request.get_stats()
    C.sl_ffi_req_stats(cur(), stats)
    return {
        status = stats.status,
        bytes_in = tonumber(stats.bytes_in),
        bytes_out = tonumber(stats.bytes_out),
        duration_ms = stats.duration_ms,
        route = ffi_string(stats.route),
        upstream = ffi_string(stats.upstream),
        target = ffi_string(stats.target),
    }
end

local hexbuf = ffi.new("char[64]")

-- W3C trace context of this request (the core's, shared with telemetry:): continues the
-- client's traceparent or starts a trace sampled at sample_ratio, sets the traceparent
-- the upstream gets; returns the trace id and this hop's span id (hex).
_M.trace = {}
function _M.trace.context(sample_ratio)
    sample_ratio = sample_ratio or 1.0
    if type(sample_ratio) ~= "number" or sample_ratio < 0 or sample_ratio > 1 then
        error("trace.context takes a sample ratio from 0 to 1", 2)
    end
    C.sl_ffi_traceparent(cur(), sample_ratio, hexbuf)
    return ffi_string(hexbuf, 32), ffi_string(hexbuf + 32, 16)
end

-- n (1..64, default 32) random hex digits.
function _M.random_hex(n)
    n = n or 32
    if type(n) ~= "number" or n < 1 or n > 64 or n % 1 ~= 0 then
        error("random_hex takes an integer from 1 to 64", 2)
    end
    C.sl_ffi_random_hex(hexbuf, n)
    return ffi_string(hexbuf, n)
end

-- ---------------------------------------------------------------- response

local response = {}
_M.response = response

-- Ends the chain with this answer once the current phase function returns
-- (`return sluice.response.exit(403, "no")`). A table body is sent as JSON.
function response.exit(status, body, headers)
    local r = cur()
    if type(status) ~= "number" then error("status must be a number", 2) end
    -- the core takes an int: 200.5 would go out as 200
    if status % 1 ~= 0 then error("status must be a whole number 200..599", 2) end
    if type(body) == "table" then
        body = cjson.encode(body)
        headers = headers or {}
        local has_ct = false
        for k in pairs(headers) do if lower(k) == "content-type" then has_ct = true end end
        if not has_ct then C.sl_ffi_resp_set_header(r, "Content-Type", 12, "application/json", 16, err_p) end
    elseif body ~= nil then
        body = tostring(body)
    end
    if headers then
        if type(headers) ~= "table" then error("headers must be a table of name = value", 2) end
        for k, v in pairs(headers) do
            put_header(r, C.sl_ffi_resp_set_header, C.sl_ffi_resp_add_header, C.sl_ffi_resp_clear_header,
                       tostring(k), v, 2)
        end
    end
    ffi_err(C.sl_ffi_resp_exit(r, status, body, body and #body or 0, err_p))
    base.exited = true
end

function response.get_status()
    return C.sl_ffi_resp_get_status(cur())
end

-- The status the upstream answered with; nil when none did (an exit, a cache HIT, the
-- gateway's own error), or not yet.
function response.get_upstream_status()
    local s = C.sl_ffi_resp_upstream_status(cur())
    if s == 0 then return nil end
    return s
end

function response.get_header(name)
    check_str(name, "header name")
    if C.sl_ffi_resp_get_header(cur(), name, #name, str_p, len_p) ~= OK then return nil end
    return ffi_string(str_p[0], len_p[0])
end

function response.get_headers(lists)
    return all_headers(C.sl_ffi_resp_header_count, C.sl_ffi_resp_header_at, lists)
end

header_editors(response, C.sl_ffi_resp_set_header, C.sl_ffi_resp_add_header, C.sl_ffi_resp_clear_header)
response.set_id_header = id_header(C.sl_ffi_resp_set_header)

-- ---------------------------------------------------------------- client

local client = {}
_M.client = client

-- The client's address: the peer's, or through the listener's trusted_proxies the
-- X-Forwarded-For entry nearest the right that is not a trusted proxy.
client.get_ip = getter(C.sl_ffi_client_get_ip)

-- Whether ip is one of the listener's trusted_proxies; nil, err when it is not an address.
function client.is_trusted(ip)
    check_str(ip, "ip")
    local rc = C.sl_ffi_req_trusted_ip(cur(), ip, #ip)
    if rc == ERROR then return nil, "not an IP address" end
    return rc == 1
end

-- ---------------------------------------------------------------- upstream

_M.upstream = {}

-- Sends this request (or, in preread, this tcp session) to another configured upstream
-- (by name) or to an IP:PORT address. Returns true or nil, err. Rewrite/access only: later
-- (balancer, header_filter, body_filter, log) the upstream was chosen, and a call there is
-- a programmer's mistake, raised like sleep's or response.exit's.
local REWRITE, ACCESS = C.SL_PHASE_REWRITE, C.SL_PHASE_ACCESS
function _M.upstream.set(name)
    check_str(name, "upstream")
    local s, rc = base.sess, nil
    if s ~= nil then
        rc = C.sl_ffi_session_set_upstream(s, name, #name, err_p)
    else
        local r = cur()
        local phase = base.phase
        if phase ~= REWRITE and phase ~= ACCESS then
            local phase_name = require("sluice.loader").PHASES[phase + 1] or tostring(phase)
            error(("upstream.set works in rewrite and access only (called in %s)"):format(phase_name), 2)
        end
        rc = C.sl_ffi_upstream_set(r, name, #name, err_p)
    end
    if rc ~= OK then return nil, ffi_string(err_p[0]) end
    return true
end

-- ---------------------------------------------------------------- session (tcp preread)

local session = {}
_M.session = session

local function sess()
    local s = base.sess
    if s == nil then error("sluice.session is for a tcp listener's preread phase", 3) end
    return s
end

local function sess_getter(fn)
    return function()
        if fn(sess(), str_p, len_p) ~= OK then return nil end
        return ffi_string(str_p[0], len_p[0])
    end
end

-- The client's address (the source its PROXY header gave, when accepted) and port.
session.get_client_ip = sess_getter(C.sl_ffi_session_client_ip)
function session.get_client_port() return C.sl_ffi_session_client_port(sess()) end
-- The TLS server name (lower-case) of the client's ClientHello on a listener with
-- sni_routes; nil when it sent none or the listener does not read it.
session.get_sni = sess_getter(C.sl_ffi_session_sni)
session.get_listener = sess_getter(C.sl_ffi_session_listener)
-- Where the session goes so far: an upstream's name or an IP:PORT; nil when nothing
-- matched and the listener has no default.
session.get_upstream = sess_getter(C.sl_ffi_session_upstream)

-- Closes the session when the current plugin returns; the rest of the chain does not
-- run and no upstream is connected. `message` (optional) is sent to the client first,
-- as far as its socket takes it at once.
function session.close(message)
    local s = sess()
    if message ~= nil then
        check_str(message, "message")
        C.sl_ffi_session_close(s, message, #message)
    else
        C.sl_ffi_session_close(s, nil, 0)
    end
    base.exited = true
end

-- ---------------------------------------------------------------- balancer, breaker

local balancer = {}
_M.balancer = balancer
local BREAKER = { [C.SL_BREAKER_CLOSED] = "closed", [C.SL_BREAKER_OPEN] = "open",
                  [C.SL_BREAKER_HALF_OPEN] = "half_open" }
local info = ffi.new("sl_target_info_t")

-- The targets of the request's upstream: { address, weight, healthy, breaker, in_flight,
-- ewma_ms, tried } each, in config order (an empty list before an upstream is chosen); a
-- DNS name's or the registry's targets are those holding an address now.
function balancer.targets()
    local r = cur()
    local out = {}
    for i = 0, C.sl_ffi_balancer_count(r) - 1 do
        C.sl_ffi_balancer_target(r, i, info)
        if info.address[0] ~= 0 then
            out[#out + 1] = {
                address = ffi_string(info.address), weight = info.weight, healthy = info.healthy ~= 0,
                breaker = BREAKER[info.breaker], in_flight = info.in_flight, ewma_ms = info.ewma_ms,
                tried = info.tried ~= 0,
            }
        end
    end
    return out
end

-- balancer phase: the attempt goes to this target (an address of the upstream's
-- targets) when it is eligible; otherwise the upstream's balancer picks.
function balancer.set_target(address)
    check_str(address, "address")
    ffi_err(C.sl_ffi_balancer_set_target(cur(), address, #address, err_p))
end

_M.breaker = {}
-- "closed", "open" or "half_open" for (upstream name, target address); nil, err when
-- there is no such target.
function _M.breaker.state(upstream, target)
    check_str(upstream, "upstream")
    check_str(target, "target")
    local st = C.sl_ffi_breaker_state(cur(), upstream, #upstream, target, #target, err_p)
    if st < 0 then return nil, ffi_string(err_p[0]) end
    return BREAKER[st]
end

-- ---------------------------------------------------------------- ctx

-- sluice.ctx reads and writes the running request's ctx (the table phases receive).
_M.ctx = setmetatable({}, {
    __index = function(_, k)
        local c = base.ctx
        return c and c[k]
    end,
    __newindex = function(_, k, v)
        local c = base.ctx
        if not c then error("no request is being served here", 2) end
        c[k] = v
    end,
})

-- ---------------------------------------------------------------- log

local log = {}
_M.log = log

local function logger(level)
    return function(...)
        local n = select("#", ...)
        local parts = {}
        for i = 1, n do parts[i] = tostring((select(i, ...))) end
        local msg = concat(parts, " ")
        local s = base.sess
        if s ~= nil then
            C.sl_ffi_session_log(s, level, base.plugin, msg, #msg)
        else
            C.sl_ffi_log(base.reqp(), level, base.plugin, msg, #msg)
        end
    end
end
log.debug, log.info, log.warn, log.err =
    logger(C.SL_LOG_DEBUG), logger(C.SL_LOG_INFO), logger(C.SL_LOG_WARN), logger(C.SL_LOG_ERR)

-- ---------------------------------------------------------------- sleep, time, json

-- A number that is neither NaN nor infinite.
local huge = math.huge
local function finite(x) return type(x) == "number" and x == x and x ~= huge and x ~= -huge end

-- Suspends the request's coroutine for s seconds; the worker serves others meanwhile.
function _M.sleep(s)
    local r = cur()
    -- NaN and inf are no time: both would reach the core as a timer of 2^63 ms, a request
    -- (and its client) hanging for good.
    if not finite(s) or s < 0 then
        error("sleep needs a finite number of seconds >= 0", 2)
    end
    ffi_err(C.sl_ffi_sleep(r, s * 1000, err_p))
    base.wait()
end

_M.time = {}
function _M.time.now() return tonumber(C.sl_ffi_now()) end

_M.json = { encode = cjson.encode, decode = cjson.decode, null = cjson.null }

-- sluice.crypto, sluice.http, sluice.tls and the others below load on first use.
local lazy = { crypto = "sluice.crypto", http = "sluice.http", consumers = "sluice.consumers",
               limit = "sluice.limit", redis = "sluice.redis", tls = "sluice.tls", files = "sluice.files" }
setmetatable(_M, { __index = function(t, k)
    local mod = lazy[k]
    if mod then
        local m = require(mod)
        rawset(t, k, m)
        return m
    end
end })

-- ---------------------------------------------------------------- shared

-- One key space shared by all workers, kept in C. Values are strings or numbers.
local shared = {}
_M.shared = shared
local shbuf = ffi.new("char[?]", 65536)
local SHDICT_NUMBER, SHDICT_STRING = C.SL_SHDICT_NUMBER, C.SL_SHDICT_STRING

function shared.get(key)
    check_str(key, "key")
    local rc = C.sl_ffi_shdict_get(key, #key, num_p, str_p, len_p, shbuf, 65536)
    if rc == SHDICT_NUMBER then return tonumber(num_p[0]) end
    if rc == SHDICT_STRING then return ffi_string(str_p[0], len_p[0]) end
    return nil
end

-- ttl: nil or 0 for no expiry, else seconds. A negative one (an expiry computed from a
-- time already past) or NaN is a mistake, not "forever": the core stores both as permanent.
local function check_ttl(ttl)
    if ttl == nil then return 0 end
    if type(ttl) ~= "number" or not (ttl >= 0) then
        error("ttl must be a number of seconds >= 0 (nil or 0: no expiry)", 3)
    end
    return ttl
end

function shared.set(key, value, ttl)
    check_str(key, "key")
    ttl = check_ttl(ttl)
    local rc
    if type(value) == "number" then
        rc = C.sl_ffi_shdict_set(key, #key, 1, value, nil, 0, ttl, err_p)
    elseif type(value) == "string" then
        rc = C.sl_ffi_shdict_set(key, #key, 0, 0, value, #value, ttl, err_p)
    else
        error("shared values are strings or numbers", 2)
    end
    if rc ~= OK then return nil, ffi_string(err_p[0]) end
    return true
end

-- Atomically adds delta; a missing key starts at init (or fails without one). A NaN or
-- infinite delta or init would store a value no later incr can bring back (NaN + x is NaN,
-- inf - inf is NaN): a counter poisoned for every worker, for good.
function shared.incr(key, delta, init, ttl)
    check_str(key, "key")
    if not finite(delta) then error("delta must be a finite number", 2) end
    if init ~= nil and not finite(init) then error("init must be a finite number", 2) end
    ttl = check_ttl(ttl)
    local rc = C.sl_ffi_shdict_incr(key, #key, delta, init ~= nil and 1 or 0, init or 0, ttl, num_p, err_p)
    if rc ~= OK then return nil, ffi_string(err_p[0]) end
    return tonumber(num_p[0])
end

function shared.delete(key)
    check_str(key, "key")
    C.sl_ffi_shdict_delete(key, #key)
    return true
end

return _M
