-- sluice.limit: rate limits. take() is a token bucket, window() a sliding window; with
-- store "local" (the default) their state lives in the core (core/limiter.c), one table
-- shared by every worker. The semantics, exactly, are at the top of core/limiter.h.
--
--   local limit = require("sluice").limit
--   local ok, remaining, reset, retry_after = limit.take(key, rate, burst, store, cost)
--   local ok, remaining, reset, retry_after = limit.window(key, limit, window_s, store, cost)
--
-- With store "redis" the same algorithms run in Redis (sluice.redis_limit), shared by
-- every gateway using it; take means exactly what it means locally (to the microsecond),
-- window is the same two-window approximation (limiter.h).
--
-- take: `rate` tokens a second, capacity burst + 1 (burst defaults to 0), starting full;
-- takes `cost` tokens (default 1). window: `limit` units per `window_s` seconds. Both
-- return whether the call was admitted (a refused one takes nothing), the whole tokens or
-- units left, the seconds until the bucket is full again (take) or the window ends
-- (window), and the seconds until a call of the same cost would be admitted (0 when
-- admitted). Invalid arguments raise; a runtime failure (no memory for a new key) returns
-- nil, err. Nothing is allocated per call.
--
--   limit.count("allowed" | "limited" | "failopen")
--
-- count: records what a rate-limiting plugin decided for the running request, in the
-- metric sluice_ratelimit_total{route, result} (rewrite/access/... of a request).
--
--   local route = limit.conn_route(name)                 -- once per config generation
--   local result, in_flight = limit.conn_acquire(route, key, max, burst)
--
-- conn_acquire: takes a slot of `key` for the running request when the key has fewer than
-- max + burst requests in flight, in the core's table shared by every worker
-- (core/upstream/conn_limit.h). result is "admitted" (under max), "burst" (within burst),
-- "rejected" or "failopen" (the table of keys is full: let through, uncounted); in_flight
-- is the key's count after the call. The slot is released by the core when the request
-- ends, however it ends; Lua never releases it. Rewrite and access.
local ffi = require("ffi")
local base = require("sluice.base")

ffi.cdef[[
typedef struct {
    int allowed;
    double remaining;
    double reset;
    double retry_after;
    double limit;
} sl_limit_result_t;
int sl_ffi_limit_take(const char *key, size_t key_len, double rate, double burst, double cost,
                      sl_limit_result_t *out, const char **err);
int sl_ffi_limit_window(const char *key, size_t key_len, double limit, double window_s, double cost,
                        sl_limit_result_t *out, const char **err);
enum { SL_RL_ALLOWED = 0, SL_RL_LIMITED = 1, SL_RL_FAILOPEN = 2 };
void sl_ffi_ratelimit_count(sl_req_t *r, int result);
enum { SL_CONN_ADMITTED = 0, SL_CONN_BURST = 1, SL_CONN_REJECTED = 2, SL_CONN_FAILOPEN = 3 };
int sl_ffi_limit_conn_route(const char *name, size_t len);
int sl_ffi_limit_conn_acquire(sl_req_t *r, int route, const char *key, size_t len, int max, int burst,
                              int *in_flight, const char **err);
]]

-- The namespace, not its functions: LuaJIT calls a C function looked up in ffi.C directly,
-- and one cached in a local through a function pointer.
local C = ffi.C
local ffi_string, type, error = ffi.string, type, error
local huge = math.huge

local _M = {}

-- The core's bounds (core/limiter.h): a token's period is at least 1 ns, a window at most
-- 2^62 ns (146 years). The core checks them too; here they raise at the caller.
local RATE_MAX, WINDOW_MAX, MAX_FINITE = 1e9, 2 ^ 62 / 1e9, 1.7976931348623157e308

-- Made once: every call writes its result here and returns the fields.
local res = ffi.new("sl_limit_result_t")
local err_p = ffi.new("const char *[1]")

-- Argument checks raise at the level of take/window's caller.
local function check_key(key)
    if type(key) ~= "string" or #key == 0 then error("key must be a non-empty string", 3) end
end

local function check_positive(v, max, msg)
    if type(v) ~= "number" or not (v > 0 and v <= max) then error(msg, 3) end
end

local function check_cost(cost, max, what)
    if type(cost) ~= "number" or not (cost >= 0 and cost <= max) then
        error("cost must be a number >= 0 and <= " .. what, 3)
    end
end

-- nil and "local" are the core's table; "redis" is the config's Redis (sluice.redis_limit:
-- the same algorithms in server-side scripts; when Redis is down or slow the call
-- admits, and its fifth result says why: fail open).
local function check_store(store)
    if store == nil or store == "local" then return false end
    if store == "redis" then return true end
    error("store must be \"local\" or \"redis\"", 3)
end

-- Arguments were checked: a failure here is a runtime one (no memory for a new key).
local function result(rc)
    if rc ~= 0 then return nil, ffi_string(err_p[0]) end
    return res.allowed ~= 0, res.remaining, res.reset, res.retry_after
end

-- Token bucket: `rate` tokens a second, capacity burst + 1.
function _M.take(key, rate, burst, store, cost)
    check_key(key)
    check_positive(rate, RATE_MAX, "rate must be a number > 0 and <= 1e9 (tokens per second)")
    burst = burst or 0
    if type(burst) ~= "number" or not (burst >= 0 and burst < huge) then
        error("burst must be a finite number >= 0", 2)
    end
    cost = cost or 1
    check_cost(cost, burst + 1, "burst + 1")
    if check_store(store) then
        -- the same bucket, on the Redis server's clock
        return require("sluice.redis_limit").take(key, rate, burst, cost)
    end
    return result(C.sl_ffi_limit_take(key, #key, rate, burst, cost, res, err_p))
end

-- Sliding window: `limit` units per `window_s` seconds.
function _M.window(key, limit, window_s, store, cost)
    check_key(key)
    check_positive(limit, MAX_FINITE, "limit must be a finite number > 0")
    check_positive(window_s, WINDOW_MAX,
                   "window must be a number of seconds > 0 (at most 146 years)")
    cost = cost or 1
    check_cost(cost, limit, "limit")
    if check_store(store) then return require("sluice.redis_limit").window(key, limit, window_s, cost) end
    return result(C.sl_ffi_limit_window(key, #key, limit, window_s, cost, res, err_p))
end

local COUNT = { allowed = C.SL_RL_ALLOWED, limited = C.SL_RL_LIMITED, failopen = C.SL_RL_FAILOPEN }

-- Counts a rate-limit decision on the running request's route (sluice_ratelimit_total).
function _M.count(result)
    local code = COUNT[result]
    if not code then error('result must be "allowed", "limited" or "failopen"', 2) end
    local r = base.reqp()
    if r == nil then error("no request is being served here (sluice API used outside a phase)", 2) end
    C.sl_ffi_ratelimit_count(r, code)
end

local CONN_RESULT = { [C.SL_CONN_ADMITTED] = "admitted", [C.SL_CONN_BURST] = "burst",
                      [C.SL_CONN_REJECTED] = "rejected", [C.SL_CONN_FAILOPEN] = "failopen" }
local in_flight_p = ffi.new("int[1]")

-- The core's index of a route's name, for conn_acquire and the limit-conn metrics.
function _M.conn_route(name)
    if type(name) ~= "string" then error("route must be a string", 2) end
    return C.sl_ffi_limit_conn_route(name, #name)
end

-- One more request in flight for key, when there is room (max + burst).
-- The core counts in 32 bits: a larger or fractional count would reach it changed.
local COUNT_MAX = 2147483647
local function check_count(v, min, what)
    if type(v) ~= "number" or not (v >= min and v <= COUNT_MAX) or v % 1 ~= 0 then
        error(what .. " must be an integer " .. min .. " .. 2147483647", 3)
    end
end

function _M.conn_acquire(route, key, max, burst)
    check_key(key)
    check_count(max, 1, "max")
    check_count(burst or 0, 0, "burst")
    local r = base.reqp()
    if r == nil then error("no request is being served here (sluice API used outside a phase)", 2) end
    local rc = C.sl_ffi_limit_conn_acquire(r, route, key, #key, max, burst or 0, in_flight_p, err_p)
    local res = CONN_RESULT[rc]
    if not res then error(ffi_string(err_p[0]), 2) end
    return res, in_flight_p[0]
end

return _M
