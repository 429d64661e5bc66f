-- sluice.base: what every module of lua/sluice shares: the ABI's common types and result
-- codes, the ABI version check, scratch out-parameters, and the running request's state.
--
-- Declarations (the lua-resty-core way): each module declares with ffi.cdef, at its top,
-- only the C functions and constants it calls, copied from core/sluice.h, and binds
-- `local C = ffi.C` once (LuaJIT calls a function looked up in ffi.C directly; one cached
-- in a local goes through a function pointer). Each declaration is made by exactly one
-- module (LuaJIT refuses a second enum constant of the same name and silently keeps the
-- first of two differing function declarations); a module calling a function another owns
-- requires that module (the router requires sluice for the request accessors).
-- spec/sluice/abi_spec.lua fails when a declaration here differs from core/sluice.h.
local ffi = require("ffi")

local _M = {}

ffi.cdef[[
enum { SL_ABI_VERSION = 4 };
enum {
    SL_OK = 0,
    SL_ERROR = -1,
    SL_EAGAIN = -2,
    SL_DECLINED = -5
};
enum {
    SL_PHASE_REWRITE = 0,
    SL_PHASE_ACCESS = 1,
    SL_PHASE_HEADER_FILTER = 2,
    SL_PHASE_BODY_FILTER = 3,
    SL_PHASE_LOG = 4,
    SL_PHASE_PREREAD = 5,
    SL_PHASE_BALANCER = 6
};
int sl_ffi_abi_version(void);
typedef struct sl_req_s sl_req_t;
typedef struct sl_session_s sl_session_t;
int memcmp(const void *a, const void *b, size_t n);
void *memchr(const void *s, int c, size_t n);
]]

local C = ffi.C
_M.ABI_VERSION = C.SL_ABI_VERSION
_M.OK, _M.ERROR, _M.AGAIN, _M.DECLINED = C.SL_OK, C.SL_ERROR, C.SL_EAGAIN, C.SL_DECLINED

-- Out-parameters made once at load: no per-call garbage on hot paths.
_M.str_p = ffi.new("const char *[1]")
_M.len_p = ffi.new("size_t[1]")
_M.str2_p = ffi.new("const char *[1]")
_M.len2_p = ffi.new("size_t[1]")
_M.err_p = ffi.new("const char *[1]")
_M.num_p = ffi.new("double[1]")

--- Adds v under k in an args table: the first value alone, a repeated key's values as a
-- list in arrival order (what get_query and kong.request.get_query return).
function _M.args_put(out, k, v)
    local old = out[k]
    if old == nil then
        out[k] = v
    elseif type(old) == "table" then
        old[#old + 1] = v
    else
        out[k] = { old, v }
    end
end

-- The request whose phase is running, its ctx and route: set by the phase dispatcher
-- (and restored after every yield), read by the API. One VM serves one request at a time.
-- req is the request's address as a number (what the phase dispatcher gets from C: a
-- number costs no allocation, a boxed cdata pointer would, every phase) or a cdata
-- pointer (a lua_routes match function's); _M.reqp() gives it as `sl_req_t *`.
_M.req = nil
_M.ctx = nil
_M.route = nil
_M.plugin = nil
-- The chain position of the plugin whose phase function runs (-1 between calls): a plugin
-- that raises is not caught in Lua (a pcall around each call kept its traces from
-- returning into the dispatcher, "NYI: return to lower frame"); the error ends the
-- coroutine and the core reads this and _M.plugin to report it.
_M.pos = -1
_M.exited = false
-- The running phase (SL_PHASE_*; nil for a tcp session's preread) and the request's number
-- in this worker (requests reuse ctx tables: this tells them apart).
_M.phase = nil
_M.serial = nil
-- Raised (error(_M.UNWIND, 0)) by a call that answered the request (exited is true) and
-- ends the plugin's phase function there: kong.response.exit in rewrite and access. It
-- unwinds the request's coroutine, and the core takes it for "a plugin answered", not an
-- error (lua_host.c), so no pcall sits between the dispatcher and a plugin (one would
-- keep the plugin's traces from returning into the dispatcher, as above).
_M.UNWIND = setmetatable({}, { __tostring = function() return "the request was answered" end })
-- True while a plugin's prepare(conf) runs (sluice.runtime): waiting is refused then.
_M.preparing = false
-- The tcp session whose preread chain is running (nil otherwise): while it is set there is
-- no request, so the request API refuses instead of reading a stale one.
_M.sess = nil

function _M.begin(req, ctx, route, phase, serial)
    _M.req, _M.ctx, _M.route, _M.exited, _M.sess, _M.phase, _M.serial = req, ctx, route, false, nil, phase, serial
end

-- Suspends the running request's coroutine (the caller armed what resumes it) and, once
-- resumed, puts back what the API reads: other requests' phases (and tcp sessions'
-- preread) ran in between and left their own req, ctx, route, plugin and exit flag. Every
-- API that waits goes through here.
local co_yield = coroutine.yield
function _M.wait()
    if _M.preparing then
        error("prepare cannot wait (sleep, http, redis, get_body): it runs once for all requests", 2)
    end
    local req, ctx, route, plugin, pos, exited = _M.req, _M.ctx, _M.route, _M.plugin, _M.pos, _M.exited
    local phase, serial = _M.phase, _M.serial
    co_yield()
    _M.req, _M.ctx, _M.route, _M.plugin, _M.pos, _M.exited, _M.sess = req, ctx, route, plugin, pos, exited, nil
    _M.phase, _M.serial = phase, serial
end

function _M.begin_session(sess, ctx, listener)
    _M.req, _M.sess, _M.ctx, _M.route, _M.exited, _M.phase, _M.serial = nil, sess, ctx, nil, false, nil, nil
    _M.listener = listener
end

local REQ_PTR, ffi_cast = ffi.typeof("sl_req_t *"), ffi.cast
_M.REQ_PTR = REQ_PTR
-- The running request as the pointer FFI calls take, or nil. Compiled, the cast is free
-- (the pointer lives in a register); it is boxed only when it escapes.
function _M.reqp()
    local r = _M.req
    if r == nil then return nil end
    return ffi_cast(REQ_PTR, r)
end

local got = C.sl_ffi_abi_version()
if got ~= _M.ABI_VERSION then
    error(("sluice ABI mismatch: core has %d, lua/sluice expects %d"):format(got, _M.ABI_VERSION))
end

return _M
