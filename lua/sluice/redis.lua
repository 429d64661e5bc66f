-- sluice.redis: commands on the worker's Redis connection (config `redis:`), yielding the
-- request's coroutine until the reply (docs/plugins.md, "sluice.redis").
--
--   local n, err = sluice.redis.command("INCR", "hits:" .. ip)   -- 7, or nil, "redis timeout"
--
-- Replies: integer -> number, string/status -> string, nil -> nil (with no error), error
-- reply -> nil, "ERR ...", array -> a Lua list of those (one level). When Redis is down the
-- call returns nil, "redis unavailable" at once, without waiting; callers decide whether to
-- fail open. Misuse (outside rewrite/access, no redis configured) raises.
local ffi = require("ffi")
local base = require("sluice.base")

ffi.cdef[[
enum { SL_REDIS_NIL = 1, SL_REDIS_INTEGER = 2, SL_REDIS_STRING = 3, SL_REDIS_ERROR = 4, SL_REDIS_ARRAY = 5 };
int sl_ffi_redis_command(sl_req_t *r, int argc, const char **argv, const size_t *argvlen, const char **err);
int sl_ffi_redis_reply(sl_req_t *r, int i, int *type, long long *integer, const char **str, size_t *len,
                       int *n, const char **err);
void sl_ffi_redis_done(sl_req_t *r);
]]

local C = ffi.C
local ffi_new, ffi_string = ffi.new, ffi.string
local type, tostring, error, select = type, tostring, error, select

local _M = {}

local OK, DECLINED = C.SL_OK, C.SL_DECLINED
local INTEGER, STRING, ERROR, ARRAY = C.SL_REDIS_INTEGER, C.SL_REDIS_STRING, C.SL_REDIS_ERROR, C.SL_REDIS_ARRAY
local MAX_ARGS = 32

local argv = ffi_new("const char *[?]", MAX_ARGS)
local argvlen = ffi_new("size_t[?]", MAX_ARGS)
local type_p, int_p, n_p = ffi_new("int[1]"), ffi_new("long long[1]"), ffi_new("int[1]")
local str_p, len_p, err_p = base.str_p, base.len_p, base.err_p

local function item(r, i)
    if C.sl_ffi_redis_reply(r, i, type_p, int_p, str_p, len_p, n_p, err_p) ~= OK then
        return nil, ffi_string(err_p[0])
    end
    local t = type_p[0]
    if t == INTEGER then return tonumber(int_p[0]) end
    if t == STRING then return ffi_string(str_p[0], len_p[0]) end
    if t == ERROR then return nil, ffi_string(str_p[0], len_p[0]) end
    if t == ARRAY then return "array", n_p[0] end
    return nil
end

-- A number as Redis reads it back exactly: an integer in full ("%d", not LuaJIT's
-- "%.14g", which wrote 123456789012345 as "1.2345678901235e+14"), a fraction in its
-- shortest form that reads back as the same double.
local format, floor, huge = string.format, math.floor, math.huge
local function number_arg(x)
    if x == floor(x) and x > -2 ^ 63 and x < 2 ^ 63 then return format("%d", x) end
    if x ~= x or x == huge or x == -huge then return tostring(x) end
    local s = format("%.14g", x)
    if tonumber(s) == x then return s end
    return format("%.17g", x)
end

-- Sends one command (its name and arguments: strings or numbers) and waits for the reply.
-- A misuse raises at `level`, as error() counts from command_at's caller (1: that caller):
-- sluice.redis_limit names the plugin that called sluice.limit, not its own line.
local function command_at(level, ...)
    level = level + 1
    local r = base.reqp()
    if r == nil then error("no request is being served here (sluice API used outside a phase)", level) end
    local n = select("#", ...)
    if n < 1 or n > MAX_ARGS then error("redis.command takes 1 to " .. MAX_ARGS .. " arguments", level) end
    local keep = {} -- the Lua strings argv points into, alive until the command is sent
    for i = 1, n do
        local a = select(i, ...)
        if type(a) == "number" then a = number_arg(a) end
        if type(a) ~= "string" then error("redis arguments must be strings or numbers", level) end
        keep[i] = a
        argv[i - 1], argvlen[i - 1] = a, #a
    end
    local rc = C.sl_ffi_redis_command(r, n, argv, argvlen, err_p)
    if rc == DECLINED then return nil, ffi_string(err_p[0]) end
    if rc ~= OK then error(ffi_string(err_p[0]), level) end
    keep = nil
    base.wait()
    local v, e = item(r, -1)
    if v == "array" then
        local list = {}
        for i = 0, e - 1 do list[i + 1] = item(r, i) end
        C.sl_ffi_redis_done(r)
        return list
    end
    C.sl_ffi_redis_done(r)
    return v, e
end
_M.command_at = command_at

-- (a tail call: the frame below command_at is command's caller)
function _M.command(...) return command_at(1, ...) end

return _M
