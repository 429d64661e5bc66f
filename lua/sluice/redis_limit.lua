-- sluice.redis_limit: the redis store of sluice.limit — a sliding-window counter kept in
-- Redis by one server-side script, so gateways sharing a Redis share the limit.
--
-- The script runs atomically on the server with the server's clock (TIME), keeps two
-- fixed-window counters per key (current and previous, each expiring after two windows)
-- and weighs the previous one by how much of it still overlaps the sliding window. It is
-- sent by EVALSHA; a NOSCRIPT error (a restarted or flushed Redis) sends it again with
-- EVAL, which loads it. When Redis is down or slower than redis.timeout the caller is
-- told so (failopen = true) and admits the request.
local redis = require("sluice.redis")
local crypto = require("sluice.crypto")

local floor, tostring = math.floor, tostring

local _M = {}

_M.SCRIPT = [[
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = math.floor(now / window)
local ck, pk = KEYS[1] .. ":" .. cur, KEYS[1] .. ":" .. (cur - 1)
local c = tonumber(redis.call("GET", ck) or "0")
local p = tonumber(redis.call("GET", pk) or "0")
local elapsed = now - cur * window
local count = p * (window - elapsed) / window + c
local reset = window - elapsed
if count + cost > limit then
  local retry = reset
  if p > 0 and limit - c - cost >= 0 then
    retry = math.ceil(window * (1 - (limit - c - cost) / p)) - elapsed
    if retry < 1 then retry = 1 end
  end
  return {0, math.max(0, math.floor(limit - count)), reset, retry}
end
redis.call("INCRBY", ck, cost)
redis.call("PEXPIRE", ck, window * 2)
return {1, math.max(0, math.floor(limit - count - cost)), reset, 0}
]]

local sha
local function script_sha()
    if not sha then
        sha = crypto.digest("sha1", _M.SCRIPT):gsub(".", function(ch) return ("%02x"):format(ch:byte()) end)
    end
    return sha
end

-- window(key, limit, window_s, cost) -> allowed, remaining, reset_s, retry_after_s, failopen
function _M.window(key, limit, window_s, cost)
    local window_ms = floor(window_s * 1000 + 0.5)
    local args = { tostring(limit), tostring(window_ms), tostring(cost or 1) }
    local res, err = redis.command("EVALSHA", script_sha(), "1", "sluice:rl:" .. key, args[1], args[2], args[3])
    if not res and err and err:find("NOSCRIPT", 1, true) then
        res, err = redis.command("EVAL", _M.SCRIPT, "1", "sluice:rl:" .. key, args[1], args[2], args[3])
    end
    if type(res) ~= "table" or #res < 4 then
        return true, 0, 0, 0, err or "unexpected reply from the limiter script"
    end
    return res[1] == 1, res[2], res[3] / 1000, res[4] / 1000, nil
end

return _M
