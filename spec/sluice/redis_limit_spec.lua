-- sluice.redis_limit's take script, run by LuaJIT against a fake Redis with a clock the
-- spec sets (TIME, GET, SET PX): the arithmetic of the local bucket (core/upstream/
-- limiter.h) to the microsecond, EVALSHA falling back to EVAL, and fail open.
-- it.test_rate_limit_redis runs the same script in a real redis-server.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
require("sluice.test")

local floor = math.floor

-- A Redis of one process: its clock in us, strings with expiry, loaded scripts.
local function fake_redis()
    local srv = { now = 1796143295 * 1e6 + 123456, kv = {}, expires = {}, loaded = {}, calls = {} }
    local api = {}
    function api.call(cmd, a, b, c, d)
        if cmd == "TIME" then
            return { tostring(floor(srv.now / 1e6)), tostring(srv.now % 1e6) }
        elseif cmd == "GET" then
            if srv.expires[a] and srv.expires[a] <= srv.now then srv.kv[a] = nil end
            return srv.kv[a] or false
        elseif cmd == "SET" then
            assert(c == "PX" and tonumber(d) > 0, "SET key value PX ms")
            srv.kv[a], srv.expires[a] = b, srv.now + tonumber(d) * 1000
            return "OK"
        end
        error("unexpected command " .. cmd)
    end
    local function eval(script, key, ...)
        local f = assert(loadstring(script))
        setfenv(f, { redis = api, KEYS = { key }, ARGV = { ... }, math = math, string = string,
                     tonumber = tonumber })
        local reply = f()
        for i, v in ipairs(reply) do reply[i] = v < 0 and -floor(-v) or floor(v) end -- integer replies
        return reply
    end
    -- sluice.redis's command, as the limiter script uses it
    srv.module = {
        command = function(cmd, script_or_sha, nkeys, key, ...)
            srv.calls[#srv.calls + 1] = cmd
            if srv.down then return nil, "redis unavailable" end
            assert(nkeys == "1")
            if cmd == "EVAL" then
                srv.loaded.script = script_or_sha
                return eval(script_or_sha, key, ...)
            end
            assert(cmd == "EVALSHA")
            if not srv.loaded.script then return nil, "NOSCRIPT No matching script" end
            return eval(srv.loaded.script, key, ...)
        end,
    }
    -- the same, with the level a misuse raises at (redis_limit names its caller's caller)
    srv.module.command_at = function(_, ...) return srv.module.command(...) end
    return srv
end

describe("sluice.redis_limit.take", function()
    local srv, rl
    before_each(function()
        srv = fake_redis()
        package.loaded["sluice.redis"] = srv.module
        package.loaded["sluice.redis_limit"] = nil
        rl = require("sluice.redis_limit")
    end)
    after_each(function()
        package.loaded["sluice.redis"] = nil
        package.loaded["sluice.redis_limit"] = nil
    end)

    it("admits burst + 1 at once, then refuses with the wait for one token", function()
        for i = 1, 5 do
            local ok, remaining, reset, retry, failopen = rl.take("k", 100, 4, 1)
            assert.same({ true, 5 - i, i * 0.01, 0 }, { ok, remaining, reset, retry })
            assert.is_nil(failopen)
        end
        local ok, remaining, reset, retry = rl.take("k", 100, 4, 1)
        assert.same({ false, 0, 0.05, 0.01 }, { ok, remaining, reset, retry })
        srv.now = srv.now + 10000 -- one token's period later: one more
        assert.is_true((rl.take("k", 100, 4, 1)))
        assert.is_false((rl.take("k", 100, 4, 1)))
    end)

    it("burst 0: 1,000 takes over one second admit 100, even jittered (the grid)", function()
        local start = srv.now
        local n = 0
        for i = 0, 999 do
            srv.now = start + i * 1000
            if rl.take("paced", 100, 0, 1) then n = n + 1 end
        end
        assert.equal(100, n)
        math.randomseed(12)
        start, n = srv.now + 5e6, 0 -- idle: full again
        for i = 0, 999 do
            srv.now = start + i * 1000 + floor(math.random() * 900)
            if rl.take("jitter", 100, 0, 1) then n = n + 1 end
        end
        assert.equal(100, n)
    end)

    it("cost > 1 takes cost tokens; a refused take takes nothing", function()
        local ok, remaining, reset, retry = rl.take("c", 2, 9, 5)
        assert.same({ true, 5, 2.5, 0 }, { ok, remaining, reset, retry })
        ok, remaining, reset, retry = rl.take("c", 2, 9, 5)
        assert.same({ true, 0, 5, 0 }, { ok, remaining, reset, retry })
        ok, remaining, reset, retry = rl.take("c", 2, 9, 5)
        assert.same({ false, 0, 5, 2.5 }, { ok, remaining, reset, retry })
        srv.now = srv.now + 500000 -- one token back: a take of 1 fits, one of 5 does not
        assert.is_false((rl.take("c", 2, 9, 5)))
        assert.is_true((rl.take("c", 2, 9, 1)))
    end)

    it("keeps times exact: microseconds of today's clock and long periods", function()
        -- rate 1/3 a second: a period of 3,000,000 us; burst 1e6: a capacity of 3e12 us
        for _ = 1, 3 do assert.is_true((rl.take("slow", 1 / 3, 1e6, 1))) end
        local ok, remaining, reset = rl.take("slow", 1 / 3, 1e6, 1)
        assert.is_true(ok)
        assert.equal(1e6 - 3, remaining)
        assert.equal(12, reset)
        assert.equal("1796143307123456", srv.kv["sluice:tb:slow"]) -- now + 4 periods, in us
    end)

    it("forgets a full bucket once it has been full a second; meanwhile keeps the grid", function()
        assert.is_true((rl.take("e", 10, 0, 1)))
        assert.is_not_nil(srv.kv["sluice:tb:e"])
        srv.now = srv.now + 150000 -- 1.5 periods: full, half a token on its way
        assert.is_true((rl.take("e", 10, 0, 1)))
        srv.now = srv.now + 50000 -- the grid: the next token came 0.05 s later, not 0.1 s
        assert.is_true((rl.take("e", 10, 0, 1)))
        -- the TAT is one period (0.1 s) ahead: the key expires a second after it
        assert.equal(srv.now + 100000 + 1e6, srv.expires["sluice:tb:e"])
    end)

    it("loads the script with EVAL after NOSCRIPT, then uses EVALSHA", function()
        rl.take("s", 1, 0, 1)
        rl.take("s", 1, 0, 1)
        assert.same({ "EVALSHA", "EVAL", "EVALSHA" }, srv.calls)
    end)

    it("fails open when Redis is unavailable", function()
        srv.down = true
        local ok, remaining, reset, retry, failopen = rl.take("d", 1, 0, 1)
        assert.same({ true, 0, 0, 0, "redis unavailable" }, { ok, remaining, reset, retry, failopen })
    end)
end)
