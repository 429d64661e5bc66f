-- fault-injection: abort and delay, each at its percentage.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local function now()
    local ffi = require("ffi")
    pcall(ffi.cdef, "typedef struct { long tv_sec; long tv_nsec; } sl_spec_ts_t; int clock_gettime(int, sl_spec_ts_t *);")
    local ts = ffi.new("sl_spec_ts_t")
    ffi.C.clock_gettime(1, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

describe("fault-injection", function()
    local up, gw
    local function route(name, conf)
        return { name = name, match = { paths = { "/" .. name } }, upstream = "u",
                 plugins = { { name = "fault-injection", config = conf } } }
    end

    setup(function()
        up = test.upstream()
        gw = assert(test.start({ upstreams = { { name = "u", targets = { { address = up:address() } } } },
                                 routes = {
            route("abort", { abort = { status = 503, body = "chaos\n", headers = { ["Retry-After"] = "1" } } }),
            route("never", { abort = { status = 500, percentage = 0 } }),
            route("half", { abort = { status = 500, percentage = 50 } }),
            route("delay", { delay = { duration = "200ms" } }),
            route("both", { delay = { duration = "100ms" }, abort = { status = 429 } }),
        } }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    it("aborts with the status, body and headers at 100%", function()
        local res = assert(gw:request({ path = "/abort" }))
        assert.equal(503, res.status)
        assert.equal("chaos\n", res.body)
        assert.equal("1", res.headers["retry-after"])
    end)

    it("never aborts at 0%", function()
        for _ = 1, 20 do assert.equal(200, assert(gw:request({ path = "/never" })).status) end
    end)

    it("aborts about half at 50%", function()
        local n = 0
        for _ = 1, 200 do
            if assert(gw:request({ path = "/half" })).status == 500 then n = n + 1 end
        end
        assert.is_true(n > 60 and n < 140, "aborted " .. n .. " of 200")
    end)

    it("delays, then lets the request through", function()
        local t0 = now()
        local res = assert(gw:request({ path = "/delay" }))
        local took = now() - t0
        assert.equal(200, res.status)
        assert.is_true(took >= 0.19, "took " .. took)
        t0 = now()
        assert.equal(429, assert(gw:request({ path = "/both" })).status)
        assert.is_true(now() - t0 >= 0.09)
    end)

    it("refuses a config with neither abort nor delay, a bad status, or abort headers the gateway owns", function()
        local function starts(conf)
            local g = test.start({ routes = { { name = "r", match = { paths = { "/" } },
                plugins = { { name = "fault-injection", config = conf }, { name = "echo" } } } } })
            if g then g:stop() end
            return g ~= nil
        end
        assert.is_true(starts({ abort = { status = 500 } }))
        for _, conf in ipairs({ {}, { abort = { status = 99 } }, { abort = {} }, { delay = { duration = "soon" } },
                                { abort = { status = 500, percentage = 101 } },
                                { abort = { status = 503, headers = { ["Content-Length"] = "5" } } },
                                { abort = { status = 503, headers = { ["X-A"] = "a\nb" } } } }) do
            assert.is_false(starts(conf))
        end
    end)
end)
