-- sluice.http.request through sluice.test: a gateway whose plugin calls another in-process
-- gateway (test.upstream(), an echo server) and reports what it got. The failure modes
-- against misbehaving servers are in ctest/integration/test_http_client.py.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local cjson = require("cjson")

local FIXTURES = (test.SOURCE_DIR:sub(1, 1) == "/" and test.SOURCE_DIR
    or (os.getenv("PWD") .. "/" .. test.SOURCE_DIR)) .. "/spec/fixtures/plugins"

describe("sluice.http.request", function()
    local up, gw
    setup(function()
        up = test.upstream()
        local base = "http://" .. up:address()
        gw = assert(test.start({
            plugin_paths = { FIXTURES },
            routes = {
                { name = "get", match = { paths = { "/get" } },
                  plugins = { { name = "caller", config = { url = base .. "/seen?x=1" } } } },
                { name = "post", match = { paths = { "/post" } },
                  plugins = { { name = "caller", config = { url = base .. "/p", method = "POST", body = "payload" } } } },
                { name = "refused", match = { paths = { "/refused" } },
                  plugins = { { name = "caller", config = { url = "http://127.0.0.1:1/" } } } },
            },
        }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    it("GET: the callee saw the call, the plugin got status, headers and body", function()
        local res = assert(gw:request({ path = "/get", headers = { ["X-Request-ID"] = "call-1" } }))
        assert.equal(200, res.status)
        local got = res:json()
        assert.equal(200, got.status)
        assert.equal("application/json", got.headers["content-type"])
        local seen = cjson.decode(got.body) -- the echo callee's view of the call
        assert.equal("GET", seen.method)
        assert.equal("/seen", seen.path)
        assert.equal("x=1", seen.query)
        assert.equal("call-1", seen.headers["x-asked-by"])
    end)

    it("POST carries its body", function()
        local got = assert(gw:request({ path = "/post" })):json()
        local seen = cjson.decode(got.body)
        assert.equal("POST", seen.method)
        assert.equal("payload", seen.body)
    end)

    it("a refused connection is (nil, err) for the plugin to handle", function()
        local res = assert(gw:request({ path = "/refused" }))
        assert.equal(502, res.status)
        assert.equal("connect: connection refused", res:json().err)
    end)
end)
