-- limit-conn: requests in flight per key, released by the core when a request ends.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local lib = test.lib
local ffi = require("ffi")
pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")

-- Sends a request on a connection of its own and leaves it in flight; returns the fd.
local function hold(gw, path, headers)
    local host, port = gw:address():match("^(.*):(%d+)$")
    local fd = lib.sl_test_connect(host, tonumber(port))
    assert(fd >= 0)
    local h = ""
    for k, v in pairs(headers or {}) do h = h .. k .. ": " .. v .. "\r\n" end
    local raw = ("GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n"):format(path, h)
    assert(lib.sl_test_send(fd, raw, #raw) == 0)
    return fd
end

local function metric(gw, pattern)
    local body = assert(gw:request({ listener = "admin", path = "/metrics" })).body
    return tonumber(body:match(pattern))
end

-- Polls until f() is true (at most 3 s).
local function eventually(f)
    for _ = 1, 300 do
        if f() then return true end
        ffi.C.poll(nil, 0, 10)
    end
    return f()
end

describe("limit-conn", function()
    local slow, gw, gw_exit

    setup(function()
        -- the upstream holds every request 600 ms, then echoes it
        slow = assert(test.start({ routes = { { name = "slow", match = { paths = { "/" } },
            plugins = { { name = "fault-injection", config = { delay = { duration = "600ms" } } },
                        { name = "echo" } } } } }))
        local function route(name, config)
            return { name = name, match = { paths = { "/" .. name } }, upstream = "u",
                     plugins = { { name = "limit-conn", config = config } } }
        end
        gw = assert(test.start({ upstreams = { { name = "u", targets = { { address = slow:address() } } } },
                                 routes = { route("two", { max = 2, key = "route" }),
                                            route("burst", { max = 1, burst = 1, key = "route", status = 429 }),
                                            route("hdr", { max = 1, key = "header:X-Tenant" }) } }))
        gw_exit = assert(test.start({ routes = { { name = "exit", match = { paths = { "/" } }, plugins = {
            { name = "limit-conn", config = { max = 1, key = "route" } },
            { name = "fault-injection", config = { abort = { status = 418 } } } } } } }))
    end)
    teardown(function()
        gw:stop()
        gw_exit:stop()
        slow:stop()
    end)

    it("refuses the request past max with 503, and admits again once one ends", function()
        local a, b = hold(gw, "/two"), hold(gw, "/two")
        assert.truthy(eventually(function()
            return metric(gw, 'sluice_limit_conn_in_flight{route="two"} (%d+)') == 2
        end))
        local res = assert(gw:request({ path = "/two" }))
        assert.equal(503, res.status)
        assert.equal("too many requests in flight", res.json().error)
        -- the clients go away mid-request: their slots come back once the requests end
        lib.sl_test_close(a)
        lib.sl_test_close(b)
        assert.truthy(eventually(function()
            return metric(gw, 'sluice_limit_conn_in_flight{route="two"} (%d+)') == 0
        end))
        assert.equal(200, assert(gw:request({ path = "/two" })).status)
        assert.equal(1, metric(gw, 'sluice_limit_conn_total{route="two",result="rejected"} (%d+)'))
    end)

    it("admits burst requests over max and counts them apart; status is configurable", function()
        local a, b = hold(gw, "/burst"), hold(gw, "/burst")
        assert.truthy(eventually(function()
            return metric(gw, 'sluice_limit_conn_in_flight{route="burst"} (%d+)') == 2
        end))
        assert.equal(429, assert(gw:request({ path = "/burst" })).status)
        assert.equal(1, metric(gw, 'sluice_limit_conn_total{route="burst",result="admitted"} (%d+)'))
        assert.equal(1, metric(gw, 'sluice_limit_conn_total{route="burst",result="burst"} (%d+)'))
        lib.sl_test_close(a)
        lib.sl_test_close(b)
        assert.truthy(eventually(function()
            return metric(gw, 'sluice_limit_conn_in_flight{route="burst"} (%d+)') == 0
        end))
    end)

    it("counts each header value apart", function()
        local a = hold(gw, "/hdr", { ["X-Tenant"] = "a" })
        assert.truthy(eventually(function()
            return metric(gw, 'sluice_limit_conn_in_flight{route="hdr"} (%d+)') == 1
        end))
        assert.equal(503, assert(gw:request({ path = "/hdr", headers = { ["X-Tenant"] = "a" } })).status)
        assert.equal(200, assert(gw:request({ path = "/hdr", headers = { ["X-Tenant"] = "b" } })).status)
        lib.sl_test_close(a)
        assert.truthy(eventually(function()
            return metric(gw, 'sluice_limit_conn_in_flight{route="hdr"} (%d+)') == 0
        end))
    end)

    it("counts each limit-conn of a chain apart (the global chain's and the route's)", function()
        -- global max 100 and route max 2, both by ip: one request in flight leaves room for
        -- a second (they shared one count, each request took two of it: max 2 admitted one)
        local g2 = assert(test.start({ upstreams = { { name = "u", targets = { { address = slow:address() } } } },
            plugins = { { name = "limit-conn", config = { max = 100 } } },
            routes = { { name = "pair", match = { paths = { "/pair" } }, upstream = "u",
                         plugins = { { name = "limit-conn", config = { max = 2 } } } } } }))
        local a = hold(g2, "/pair")
        assert.truthy(eventually(function()
            return metric(g2, 'sluice_limit_conn_in_flight{route="pair"} (%d+)') == 2 -- a slot of each
        end))
        local res = assert(g2:request({ path = "/pair" }))
        lib.sl_test_close(a)
        g2:stop()
        assert.equal(200, res.status)
    end)

    it("releases the slot of a request a later plugin answered", function()
        for _ = 1, 5 do assert.equal(418, assert(gw_exit:request({ path = "/" })).status) end
        -- released when the request object goes, just after its answer's write completed
        assert.truthy(eventually(function()
            return metric(gw_exit, 'sluice_limit_conn_in_flight{route="exit"} (%d+)') == 0
        end))
        assert.equal(5, metric(gw_exit, 'sluice_limit_conn_total{route="exit",result="admitted"} (%d+)'))
    end)

    it("rejects a bad key, max or burst in the config", function()
        local _, err = test.start({ routes = { { name = "r", match = { paths = { "/" } },
            plugins = { { name = "limit-conn", config = { max = 1, key = "cookie" } } } } } })
        assert.matches("key must be ip, consumer, route or header:NAME", err)
        _, err = test.start({ routes = { { name = "r", match = { paths = { "/" } },
            plugins = { { name = "limit-conn", config = { max = 0 } } } } } })
        assert.truthy(err)
        _, err = test.start({ routes = { { name = "r", match = { paths = { "/" } },
            plugins = { { name = "limit-conn", config = { burst = 1 } } } } } })
        assert.matches("max", err)
    end)
end)
