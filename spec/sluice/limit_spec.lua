-- sluice.limit against the real core's local store (core/limiter.c, semantics in
-- core/limiter.h): the values take and window return, burst and cost, argument errors,
-- and that a take in a loop compiles (no trace aborts) and allocates nothing.
-- ctest/limiter_test.c pins the exact arithmetic on an injected clock; here the clock is
-- the real one, so rates are slow enough that the test's own run time refills nothing.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test") -- loads libsluice.so globally: sluice.limit calls the core's ABI
local limit = require("sluice.limit")

-- Keys are process-wide and outlive a spec: each run and test gets its own.
local run = ("spec-limit:%x:"):format(os.time())
local n = 0
local function key(name)
    n = n + 1
    return run .. name .. ":" .. n
end

-- The time a test takes, generously, for fields that count down in real time.
local SLACK = 0.5

-- allowed and remaining of a call's results.
local function two(a, b) return { a, b } end

describe("sluice.limit.take", function()
    it("admits burst + 1 at once, then refuses with the wait for the next token", function()
        local k = key("burst")
        for i = 1, 6 do
            local ok, remaining, reset, retry_after = limit.take(k, 1, 5)
            assert.is_true(ok)
            assert.equal(6 - i, remaining)
            assert.is_true(reset <= i and reset > i - SLACK, "reset " .. reset)
            assert.equal(0, retry_after)
        end
        local ok, remaining, reset, retry_after = limit.take(k, 1, 5)
        assert.is_false(ok)
        assert.equal(0, remaining)
        assert.is_true(reset <= 6 and reset > 6 - SLACK, "reset " .. reset)
        assert.is_true(retry_after <= 1 and retry_after > 1 - SLACK, "retry_after " .. retry_after)
        -- the same store by its name, and a refusal took nothing
        assert.is_false((limit.take(k, 1, 5, "local")))
    end)

    it("burst defaults to 0: one, then none for a period", function()
        local k = key("strict")
        local ok, remaining, reset = limit.take(k, 0.5)
        assert.is_true(ok)
        assert.equal(0, remaining)
        assert.is_true(reset <= 2 and reset > 2 - SLACK)
        local ok2, _, _, retry_after = limit.take(k, 0.5)
        assert.is_false(ok2)
        assert.is_true(retry_after <= 2 and retry_after > 2 - SLACK)
    end)

    it("takes cost tokens, and cost 0 only reads", function()
        local k = key("cost")
        assert.same({ true, 6 }, two(limit.take(k, 1, 5, nil, 0)))
        assert.same({ true, 2 }, two(limit.take(k, 1, 5, nil, 4)))
        local ok, remaining = limit.take(k, 1, 5, nil, 3)
        assert.is_false(ok)
        assert.equal(2, remaining)
        assert.same({ true, 0 }, two(limit.take(k, 1, 5, nil, 2)))
    end)

    it("keys are bytes: a long key is a key, and differs from its prefix", function()
        local long = key("long") .. ("x"):rep(1000)
        assert.is_true((limit.take(long, 1, 0)))
        assert.is_false((limit.take(long, 1, 0)))
        assert.is_true((limit.take(long .. "y", 1, 0)))
        assert.is_true((limit.take(long:sub(1, 300), 1, 0)))
        assert.is_true((limit.take(key("nul") .. "\0\1", 1, 0)))
    end)

    it("raises on invalid arguments, at the caller", function()
        local k = key("args")
        assert.has_error(function() limit.take(nil, 1) end, "key must be a non-empty string")
        assert.has_error(function() limit.take("", 1) end, "key must be a non-empty string")
        assert.has_error(function() limit.take(5, 1) end, "key must be a non-empty string")
        local rate_err = "rate must be a number > 0 and <= 1e9 (tokens per second)"
        for _, bad in ipairs({ 0, -1, 0 / 0, math.huge, 2e9, "10" }) do
            assert.has_error(function() limit.take(k, bad) end, rate_err)
        end
        for _, bad in ipairs({ -1, 0 / 0, math.huge, "1" }) do
            assert.has_error(function() limit.take(k, 1, bad) end,
                             "burst must be a finite number >= 0")
        end
        for _, bad in ipairs({ -1, 0 / 0, 7, "1" }) do
            assert.has_error(function() limit.take(k, 1, 5, nil, bad) end,
                             "cost must be a number >= 0 and <= burst + 1")
        end
        assert.has_error(function() limit.take(k, 1, 0, "memcached") end,
                         'store must be "local" or "redis"')
        -- store redis talks to the request's worker: outside a request it is misuse
        -- (it.test_rate_limit covers it against a real redis-server)
        assert.has_error(function() limit.take(k, 1, 0, "redis") end,
                         "no request is being served here (sluice API used outside a phase)")
        local ok, err = pcall(function() limit.take(k, -1) end)
        assert.is_false(ok)
        assert.matches("^spec/sluice/limit_spec%.lua:%d+: rate must be", err)
        -- nothing was taken by the refused calls
        assert.is_true((limit.take(k, 1, 0)))
    end)
end)

describe("sluice.limit.window", function()
    it("admits limit per window, then refuses until the window has slid", function()
        local k = key("window")
        for i = 1, 3 do
            local ok, remaining, reset, retry_after = limit.window(k, 3, 3600)
            assert.is_true(ok)
            assert.equal(3 - i, remaining)
            assert.is_true(reset > 0 and reset <= 3600)
            assert.equal(0, retry_after)
        end
        local ok, remaining, reset, retry_after = limit.window(k, 3, 3600)
        assert.is_false(ok)
        assert.equal(0, remaining)
        -- the next window, and then a third of it for the 3 to weigh 2 (2 + 1 <= 3)
        assert.is_true(retry_after > reset and retry_after <= reset + 1200 + 1e-6,
                       ("reset %g, retry_after %g"):format(reset, retry_after))
        -- a token bucket of the same key string is another state
        assert.is_true((limit.take(k, 1, 0)))
        assert.same({ true, 0 }, two(limit.window(key("wcost"), 5, 60, "local", 5)))
    end)

    it("raises on invalid arguments", function()
        local k = key("wargs")
        assert.has_error(function() limit.window("", 1, 1) end, "key must be a non-empty string")
        for _, bad in ipairs({ 0, -1, 0 / 0, math.huge, "3" }) do
            assert.has_error(function() limit.window(k, bad, 1) end,
                             "limit must be a finite number > 0")
            assert.has_error(function() limit.window(k, 3, bad) end,
                             "window must be a number of seconds > 0 (at most 146 years)")
        end
        assert.has_error(function() limit.window(k, 3, 1e10) end,
                         "window must be a number of seconds > 0 (at most 146 years)")
        assert.has_error(function() limit.window(k, 3, 1, nil, 4) end,
                         "cost must be a number >= 0 and <= limit")
        assert.has_error(function() limit.window(k, 3, 1, "redis") end,
                         "no request is being served here (sluice API used outside a phase)")
    end)
end)

describe("sluice.limit.conn_acquire", function()
    it("raises on a max or burst the core's 32-bit counts would change", function()
        for _, bad in ipairs({ 0, 1.5, 3e9, 2 ^ 32 + 1, 0 / 0, "3" }) do
            assert.has_error(function() limit.conn_acquire(0, "k", bad, 0) end, "max must be an integer 1 .. 2147483647")
        end
        for _, bad in ipairs({ -1, 0.5, 5e9, 2 ^ 32 }) do
            assert.has_error(function() limit.conn_acquire(0, "k", 1, bad) end, "burst must be an integer 0 .. 2147483647")
        end
    end)
end)

-- The JIT check of spec/sluice/jit_spec.lua for these two calls: a loop compiles without
-- aborts other than LuaJIT choosing where a trace starts, and once compiled allocates
-- nothing (the result struct is made once, the results come back as multiple values).
describe("sluice.limit JIT", function()
    -- the JIT specs' one judgement of an abort (spec/fixtures/jit_aborts.lua)
    local aborts_lib = dofile(test.source_path("spec/fixtures/jit_aborts.lua"))
    local BENIGN = aborts_lib.BENIGN

    local function loop(n, k)
        local admitted = 0
        for i = 1, n do
            local ok, remaining = limit.take(k, 1e9, 1e6)
            if ok and remaining >= 0 then admitted = admitted + 1 end
            local ok2 = limit.window(k, 1e12, 60, nil, i % 2)
            if ok2 then admitted = admitted + 1 end
        end
        return admitted
    end

    it("take and window compile and allocate nothing", function()
        assert(jit.status(), "the JIT is off in this VM")
        local k = key("jit")
        loop(1, k)
        jit.flush()
        local stops, aborts = 0, {}
        local function handler(what, _, _, _, otr, oex)
            if what == "stop" then
                stops = stops + 1
            elseif what == "abort" then
                local msg = aborts_lib.fmterr(otr, oex)
                if not BENIGN[msg] then
                    aborts[#aborts + 1] = msg .. " (" .. tostring(oex) .. ")"
                end
            end
        end
        jit.attach(handler, "trace")
        local ok, err = pcall(loop, 5000, k)
        jit.attach(handler)
        assert(ok, err)
        assert.same({}, aborts)
        assert.is_true(stops > 0, "nothing was compiled")

        collectgarbage("collect")
        collectgarbage("stop")
        local before = collectgarbage("count")
        local admitted = loop(20000, k)
        local grown = collectgarbage("count") - before
        collectgarbage("restart")
        assert.equal(40000, admitted)
        assert.is_true(grown < 1, ("the loop allocated %.1f KiB"):format(grown))
    end)
end)
