-- mirror: a copy of the request to another address; the request itself is unchanged.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local ffi = require("ffi")
pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")

local function metric(gw, pattern)
    local body = assert(gw:request({ listener = "admin", path = "/metrics" })).body
    return tonumber(body:match(pattern)) or 0
end

local function eventually(f)
    for _ = 1, 300 do
        if f() then return true end
        ffi.C.poll(nil, 0, 10)
    end
    return f()
end

describe("mirror", function()
    local up, copy, gw

    setup(function()
        up = test.upstream()
        copy = assert(test.start({ routes = { { name = "copy", match = { paths = { "/" } },
                                                plugins = { { name = "echo" } } } } }))
        local function route(name, config)
            return { name = name, match = { paths = { "/" .. name } }, upstream = "u",
                     plugins = { { name = "mirror", config = config } } }
        end
        gw = assert(test.start({ upstreams = { { name = "u", targets = { { address = up:address() } } },
                                               { name = "m", targets = { { address = copy:address() } } } },
                                 routes = { route("addr", { address = copy:address(), max_body = 16 }),
                                            route("named", { upstream = "m" }),
                                            route("refused", { address = "127.0.0.1:1" }),
                                            route("never", { address = copy:address(), sample_ratio = 0 }) } }))
    end)
    teardown(function()
        gw:stop()
        copy:stop()
        up:stop()
    end)

    local function copies()
        return metric(copy, 'sluice_requests_total{route="copy",code="200"} (%d+)')
    end

    it("sends a copy to an address and to an upstream; the request is answered as without it", function()
        local before = copies()
        local res = assert(gw:request({ method = "POST", path = "/addr?x=1", body = "hello",
                                        headers = { ["X-A"] = "1" } }))
        assert.equal(200, res.status)
        assert.equal("hello", res.json().body)
        assert.equal("/addr", res.json().path)
        assert.equal(200, assert(gw:request({ path = "/named" })).status)
        assert.truthy(eventually(function() return copies() == before + 2 end))
    end)

    it("does not copy a body over max_body, and still proxies it whole", function()
        local before = metric(gw, 'sluice_mirror_requests_total{result="too_large"} (%d+)')
        local res = assert(gw:request({ method = "POST", path = "/addr", body = ("b"):rep(17) }))
        assert.equal(200, res.status)
        assert.equal(("b"):rep(17), res.json().body)
        assert.equal(before + 1, metric(gw, 'sluice_mirror_requests_total{result="too_large"} (%d+)'))
    end)

    it("a refusing mirror changes nothing for the client and is counted as failed", function()
        local before = metric(gw, 'sluice_mirror_requests_total{result="failed"} (%d+)')
        for _ = 1, 3 do assert.equal(200, assert(gw:request({ path = "/refused" })).status) end
        assert.truthy(eventually(function()
            return metric(gw, 'sluice_mirror_requests_total{result="failed"} (%d+)') == before + 3
        end))
    end)

    it("sample_ratio 0 copies nothing", function()
        local before = copies()
        assert.equal(200, assert(gw:request({ path = "/never" })).status)
        ffi.C.poll(nil, 0, 100)
        assert.equal(before, copies())
    end)

    it("needs exactly one of upstream or address", function()
        local _, err = test.start({ routes = { { name = "r", match = { paths = { "/" } },
            plugins = { { name = "mirror", config = {} } } } } })
        assert.matches("set one of upstream", err)
        _, err = test.start({ routes = { { name = "r", match = { paths = { "/" } },
            plugins = { { name = "mirror", config = { upstream = "a", address = "127.0.0.1:1" } } } } } })
        assert.matches("set one of upstream", err)
        _, err = test.start({ routes = { { name = "r", match = { paths = { "/" } },
            plugins = { { name = "mirror", config = { address = "nope" } } } } } })
        assert.matches("HOST:PORT", err)
    end)
end)
