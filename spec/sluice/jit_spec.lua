-- JIT check (the style rules, Tests): loops hot Lua APIs a few hundred times under jit.attach
-- and fails on trace aborts that mean "this code runs in the interpreter" (NYI and the
-- like). Aborts that are only LuaJIT choosing where a trace starts ("leaving loop in
-- root trace", "inner loop in root trace", "loop unroll limit reached", "call unroll limit
-- reached") are not failures.
--
-- Two parts. The per-request path (runtime's phase dispatcher, the
-- sluice.request/response accessors, the built-in plugins' phases) runs in worker VMs,
-- separate lua_States on the gateway's threads that jit.attach here does not see: the
-- fixture plugin jit-probe attaches there and reports each non-benign abort through the
-- shared dict, while the spec sends requests through chains of built-in plugins. What
-- runs without a request is checked in this VM:
--   * sluice.shared.get/set/incr, sluice.random_hex, sluice.time.now: per-request APIs
--     that take no request (rate limits, request ids, trace ids), on the real core;
--   * sluice.schema.validate: not per request (once per plugin use and config
--     generation), checked because it is the largest pure-Lua function of the runtime.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test") -- loads libsluice.so globally, so `sluice` binds to it
local sluice = require("sluice")
local schema = require("sluice.schema")

-- BENIGN and fmterr: shared with the jit-probe fixture, which runs in worker VMs
local aborts_lib = dofile(test.source_path("spec/fixtures/jit_aborts.lua"))
local BENIGN, fmterr = aborts_lib.BENIGN, aborts_lib.fmterr
local jutil = require("jit.util")

-- Runs fn(n) once untraced (as a worker VM would have: C symbols resolved, modules
-- warm), then fn(N) under a trace recorder; returns the traces completed and the
-- non-benign aborts. The handler touches only locals (busted's environment proxies
-- globals), and is detached by passing it again without an event.
local attach, flush, funcinfo, pcall = jit.attach, jit.flush, jutil.funcinfo, pcall
-- Enough iterations that a loop LuaJIT penalised after a benign abort (its hot counter
-- is reset to a growing, randomised penalty) is still retried and compiled: 300 was not
-- (about 1 run in 20 ended while the retry was still recording).
local N = 5000
local function traced(fn)
    fn(1)
    flush()
    local stops, aborts, seen = 0, {}, {}
    local function handler(what, _, func, pc, otr, oex)
        if what == "stop" then
            stops = stops + 1
        elseif what == "abort" then
            local msg = fmterr(otr, oex)
            if not BENIGN[msg] then
                local fi = funcinfo(func, pc)
                local where = (fi.loc or fi.source or "?") .. ": " .. msg
                if not seen[where] then
                    seen[where] = true
                    aborts[#aborts + 1] = where
                end
            end
        end
    end
    attach(handler, "trace")
    local ok, err = pcall(fn, N)
    attach(handler)
    assert(ok, err)
    return stops, aborts
end

describe("JIT: hot Lua APIs compile", function()
    local gw
    setup(function()
        assert(jit.status(), "the JIT is off in this VM")
        -- a gateway is not needed by the APIs below, but proves the core they call is live
        gw = assert(test.start({ routes = { { name = "e", plugins = { { name = "echo" } } } } }))
    end)
    teardown(function() gw:stop() end)

    it("sluice.shared get/set/incr/delete", function()
        local shared = sluice.shared
        local stops, aborts = traced(function(n)
            for i = 1, n do
                shared.incr("jit:hits", 1, 0, 60)
                shared.get("jit:hits")
                shared.set("jit:str", "value")
                shared.get("jit:str")
                shared.set("jit:num", i)
                shared.delete("jit:num")
            end
        end)
        assert.same({}, aborts)
        assert.is_true(stops > 0, "nothing was compiled")
        assert.is_true(shared.get("jit:hits") >= N)
    end)

    it("sluice.random_hex and sluice.time.now", function()
        local last
        local stops, aborts = traced(function(n)
            for _ = 1, n do
                last = sluice.random_hex(16) .. sluice.random_hex()
                sluice.time.now()
            end
        end)
        assert.same({}, aborts)
        assert.is_true(stops > 0, "nothing was compiled")
        assert.equal(48, #last)
    end)

    it("sluice.schema.validate", function()
        local S = {
            status = { type = "integer", default = 200, min = 100, max = 599 },
            body = { type = "string", default = "" },
            headers = { type = "map", values = { type = "string" }, default = {} },
            mode = { type = "enum", one_of = { "a", "b" }, default = "a" },
            list = { type = "array", items = { type = "string" }, default = { "x" } },
            rec = { type = "record", default = {}, fields = { n = { type = "number", default = 1 } } },
        }
        local conf = { status = 201, headers = { ["X-A"] = "b" }, list = { "p", "q" } }
        local out
        local stops, aborts = traced(function(n)
            for _ = 1, n do out = schema.validate(S, conf) end
        end)
        assert.equal(201, out.status)
        assert.same({}, aborts)
        assert.is_true(stops > 0, "nothing was compiled")
    end)
end)

describe("JIT: the per-request path in a worker VM compiles", function()
    local lib = test.lib
    local mock, gw
    setup(function()
        mock = lib.sl_mock_start()
        lib.sl_mock_set(mock, 0, 200, 0, "", 0, "", 0)
        local function route(name, plugins)
            table.insert(plugins, 1, { name = "jit-probe" })
            return { name = name, match = { paths = { "/" .. name } }, upstream = "m", plugins = plugins }
        end
        local conf = {
            plugin_paths = { test.source_path("spec/fixtures/plugins"), test.source_path("scripts/bench-plugins") },
            upstreams = { { name = "m", targets = { { address = "127.0.0.1:" .. lib.sl_mock_port(mock) } } } },
            routes = {
                route("three", { { name = "request-id" },
                                 { name = "headers", config = { request = { set = { ["X-A"] = "1" }, remove = { "X-R" } },
                                                                response = { set = { ["X-B"] = "2" }, add = { ["X-C"] = "3" } } } },
                                 { name = "ip-restriction", config = { allow = { "127.0.0.0/8" }, deny = { "10.0.0.0/8" } } } }),
                route("read", { { name = "header-read" } }),
                -- the Kong plugin scripts/bench measures against the same logic written for sluice
                route("kong", { { name = "kong-same-logic" } }),
                -- under a first segment of its own, among the fillers below: found deeper in
                -- the router's prefix tree
                { name = "bucketed", match = { paths = { "/b/read/" } }, upstream = "m",
                  plugins = { { name = "jit-probe" }, { name = "header-read" } } },
            },
        }
        for i = 1, 40 do
            conf.routes[#conf.routes + 1] = { name = "f" .. i, match = { paths = { "/f" .. i .. "/" } }, upstream = "m" }
        end
        gw = assert(test.start(conf))
    end)
    teardown(function()
        if gw then gw:stop() end
        if mock then lib.sl_mock_stop(mock) end
    end)

    -- Every request goes through the phase dispatcher and the chain (routing is C's:
    -- core/config/router.c).
    for _, case in ipairs({
        { "request-id, headers, ip-restriction (the gateway's id)", "three", "" },
        { "request-id, headers, ip-restriction (a client's id)", "three", "X-Request-ID: abc-1\r\n" },
        { "one header read in access", "read", "X-Probe: 1\r\n" },
        { "a Kong plugin: kong.request.get_header, kong.service.request.set_header, kong.response.set_header, kong.ctx.plugin",
          "kong", "User-Agent: jit\r\n" },
        { "the same, routed among a long route list", "b/read/x", "X-Probe: 1\r\n" },
    }) do
        it(case[1], function()
            local req = "GET /" .. case[2] .. " HTTP/1.1\r\nHost: a\r\n" .. case[3] .. "\r\n"
            -- a first round runs what happens once per worker and generation (the plugins'
            -- prepare: ip-restriction compiles its lists): a loop there may be recorded and
            -- abort (LuaJIT's hot counters are shared by PC hash), which says nothing of the
            -- per-request path measured next
            gw:keepalive(64, req)
            sluice.shared.set("jit-probe:aborts", 0)
            gw:keepalive(N, req)
            local aborts = {}
            for i = 1, sluice.shared.get("jit-probe:aborts") or 0 do
                aborts[#aborts + 1] = sluice.shared.get("jit-probe:abort:" .. i)
            end
            assert.same({}, aborts)
        end)
    end
end)
