-- Lua allocations per request in a worker VM (issue 20): a chain of plugins that allocate
-- nothing themselves costs the runtime no Lua allocation either. The ctx table and the
-- coroutine come from the worker's pool, the request is handed to the dispatcher as a
-- number (not a boxed cdata), the built-in plugins keep no per-request strings.
--
-- How: spec/fixtures/plugins/gc-probe stops the worker VM's collector at its first
-- header_filter and publishes collectgarbage("count") in the shared dict at each one; the
-- spec warms the chain up (the JIT compiles it), reads the count, sends 10,000 requests
-- on one keep-alive connection and reads it again. With the collector stopped the count
-- only grows, by every byte allocated in between: a single 16-byte object per request
-- would show as 160 KB. The slack allowed (16 KB over the 10,000) is for traces LuaJIT
-- may still record (GC objects too), not for anything per request.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local sluice = require("sluice")

local lib = test.lib
local WARM, N, SLACK_KB = 3000, 10000, 16

local function allocated_per_request(gw, route, headers)
    local req = "GET /" .. route .. " HTTP/1.1\r\nHost: a\r\n" .. (headers or "") .. "\r\n"
    gw:keepalive(WARM, req)
    local before = assert(sluice.shared.get("gc-probe:kb"))
    gw:keepalive(N, req)
    local after = assert(sluice.shared.get("gc-probe:kb"))
    return (after - before) * 1024 / N, after - before
end

describe("Lua allocations per request", function()
    local mock, gw
    setup(function()
        mock = lib.sl_mock_start()
        lib.sl_mock_set(mock, 0, 200, 0, "", 0, "", 0) -- 200, empty body, keep-alive
        local function route(name, plugins)
            return { name = name, match = { paths = { "/" .. name } }, upstream = "m", plugins = plugins }
        end
        gw = assert(test.start({
            plugin_paths = { test.source_path("spec/fixtures/plugins") },
            upstreams = { { name = "m", targets = { { address = "127.0.0.1:" .. lib.sl_mock_port(mock) } } } },
            routes = {
                route("probe", { { name = "gc-probe" } }),
                route("read", { { name = "gc-probe" }, { name = "header-read" } }),
                route("three", { { name = "gc-probe" }, { name = "request-id" },
                                 { name = "headers", config = { request = { set = { ["X-A"] = "1" } },
                                                                response = { set = { ["X-B"] = "2" } } } },
                                 { name = "ip-restriction", config = { allow = { "127.0.0.0/8" } } } }),
            },
        }))
    end)
    teardown(function()
        if gw then gw:stop() end
        if mock then lib.sl_mock_stop(mock) end
    end)

    -- Each case runs on the same worker VM, whose collector the probe stopped: the counts
    -- only compare within one case.
    for _, case in ipairs({
        { "a plugin phase alone", "probe" },
        { "one header read in access", "read", "X-Probe: 1\r\n" },
        { "request-id, headers and ip-restriction (the gateway's own id)", "three" },
        { "request-id, headers and ip-restriction (the client's id kept)", "three", "X-Request-ID: abc-123\r\n" },
    }) do
        it(case[1] .. ": 0 bytes", function()
            local per, kb = allocated_per_request(gw, case[2], case[3])
            assert(kb <= SLACK_KB, ("%.1f bytes per request (%.1f KB over %d requests)"):format(per, kb, N))
        end)
    end
end)
