-- sluice.redis_limit: the redis store of sluice.limit, so gateways sharing a Redis share
-- a limit. Each call is one server-side script, atomic on the server and on the server's
-- clock (TIME): no gateway's clock or round trip enters the count.
--
-- take: the token bucket of the local store (core/upstream/limiter.h), the same GCRA on
-- the same grid: `rate` tokens a second, capacity burst + 1, starting full, `cost`
-- tokens a take, a refused take takes nothing; the same five results. The state is one
-- number per key, the TAT in microseconds of the server's clock (sluice:tb:KEY), kept
-- until the bucket is full again plus a second. Times are whole microseconds (the core
-- uses nanoseconds): a token's period is 1e6 / rate us rounded down, at least 1 us, so
-- the rate tops out at 1e6 a second per key and the long-run rate is high by less than
-- one part in the period (1e-4 at rate 100). Every number the script handles stays an
-- integer below 2^53, exact in Lua's doubles.
--
-- window: the explicit sliding-window API, an approximation: two fixed-window counters
-- (current and previous, sluice:rl:KEY:N, each expiring after two windows) with the
-- previous weighed by how much of it still overlaps the sliding window, as if its
-- requests had been spread evenly. A burst at the end of one window still weighs almost
-- fully at the start of the next, but one early in a window lets up to twice the limit
-- through across the boundary in less than a window: callers who need "at most N in any
-- window" want take. Its times are whole microseconds of the server's clock (a window of
-- at least 1 us); its counts may be fractional, as the local store's.
--
-- Scripts are sent by EVALSHA; a NOSCRIPT error (a restarted or flushed Redis) sends the
-- script again with EVAL, which loads it. When Redis is down or slower than
-- redis.timeout the call admits, and its fifth result says why (fail open).
local redis = require("sluice.redis")
local crypto = require("sluice.crypto")

local floor, format, max = math.floor, string.format, math.max

local _M = {}

-- ARGV: a token's period, the capacity and the take's cost (whole us), the most tokens
-- there can be (floor(burst + 1)). Returns allowed, remaining, reset (us), retry (us).
-- The arithmetic is sl_limiter_take_at's, line for line.
_M.TAKE = [[
local one, cap, inc, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local base = tonumber(redis.call("GET", KEYS[1]) or now)
if base < now then base = now - math.fmod(now - base, one) end
local owed = base - now
local debt = owed + inc
local ok = debt <= cap
if ok and inc > 0 then
  local tat = base + inc
  local ttl = math.max(0, math.ceil((tat - now) / 1000)) + 1000
  redis.call("SET", KEYS[1], string.format("%d", tat), "PX", ttl)
end
local lacks = owed
if ok then lacks = debt end
if lacks < 0 then lacks = 0 end
local remaining = 0
if lacks < cap then remaining = math.min(math.floor((cap - lacks) / one), limit) end
if ok then return {1, remaining, lacks, 0} end
return {0, remaining, lacks, debt - cap}
]]

-- ARGV: the limit, the window (whole us), the cost. Returns allowed, remaining, reset (us),
-- retry (us), as sl_limiter_window_at.
_M.WINDOW = [[
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = math.floor(now / window)
local ck, pk = KEYS[1] .. ":" .. cur, KEYS[1] .. ":" .. (cur - 1)
local c = tonumber(redis.call("GET", ck) or "0")
local p = tonumber(redis.call("GET", pk) or "0")
local elapsed = now - cur * window
local count = p * (window - elapsed) / window + c
local reset = window - elapsed
if count + cost > limit + 1e-9 then
  -- sl_limiter_window_at's wait: the previous window's weight falls through this one;
  -- when this one alone is too full, its count falls through the next one
  local retry
  if c + cost <= limit + 1e-9 then
    retry = window * (1 - (limit - c - cost) / p) - elapsed
  else
    retry = reset + window * (1 - (limit - cost) / c)
  end
  return {0, math.max(0, math.floor(limit - count + 1e-9)), reset, math.max(math.ceil(retry), 1)}
end
redis.call("INCRBYFLOAT", ck, ARGV[3])
redis.call("PEXPIRE", ck, math.ceil(window / 500))
return {1, math.max(0, math.floor(limit - count - cost + 1e-9)), reset, 0}
]]

local shas = {}
local function sha_of(script)
    local sha = shas[script]
    if not sha then
        sha = crypto.digest("sha1", script):gsub(".", function(ch) return ("%02x"):format(ch:byte()) end)
        shas[script] = sha
    end
    return sha
end

-- The core logs Redis down or slow (its errors all start "redis "); an answer that is
-- an error (READONLY from a replica, NOAUTH, OOM, a key of another type) is logged here,
-- as often: at most once per LOG_EVERY seconds in each worker's config generation.
local LOG_EVERY = 10
local logged_at
local function logged_failopen(err)
    local sluice = require("sluice")
    local now = sluice.time.now()
    if logged_at and now >= logged_at and now - logged_at < LOG_EVERY then return end
    logged_at = now
    sluice.log.warn(format("redis limiter: %s (callers fail open; logged once per %ds)", err, LOG_EVERY))
end

-- Runs a script on one key with four arguments; returns its reply with its times in
-- seconds (`per_s` of its units to a second), or fail open. sluice.limit and take/window
-- reach run by tail calls, so its caller is the plugin's: a misuse (a phase without
-- Redis, no redis: in the config) raises there.
local function run(script, key, per_s, a1, a2, a3, a4)
    local res, err = redis.command_at(2, "EVALSHA", sha_of(script), "1", key, a1, a2, a3, a4)
    if not res and err and err:find("NOSCRIPT", 1, true) then
        res, err = redis.command_at(2, "EVAL", script, "1", key, a1, a2, a3, a4)
    end
    if type(res) ~= "table" or #res < 4 then
        err = err or "unexpected reply from the limiter script"
        if err:sub(1, 6) ~= "redis " then logged_failopen(err) end
        return true, 0, 0, 0, err
    end
    return res[1] == 1, res[2], res[3] / per_s, res[4] / per_s, nil
end

-- Whole microseconds as the script's argument: exact integers, never "1e+15".
local function us(x) return format("%.0f", floor(x)) end

-- A number as the script's argument, exactly (17 significant digits read back as the same
-- double): the window's limit and cost may be fractional, as in the local store.
local function num(x) return format("%.17g", x) end

-- take(key, rate, burst, cost) -> allowed, remaining, reset_s, retry_after_s, failopen
-- Arguments as sluice.limit.take checked them.
function _M.take(key, rate, burst, cost)
    local period = max(1e6 / rate, 1)
    return run(_M.TAKE, "sluice:tb:" .. key, 1e6, us(period), us((burst + 1) * period),
               us(cost * period), us(burst + 1))
end

-- window(key, limit, window_s, cost) -> allowed, remaining, reset_s, retry_after_s, failopen
function _M.window(key, limit, window_s, cost)
    -- whole microseconds, at least one (the local store keeps nanoseconds)
    return run(_M.WINDOW, "sluice:rl:" .. key, 1e6, num(limit), us(max(window_s * 1e6 + 0.5, 1)),
               num(cost or 1), "")
end

return _M
