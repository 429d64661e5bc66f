-- headers: request edits seen by the upstream, response edits seen by the client.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

describe("headers", function()
    local echo, origin, gw
    setup(function()
        echo = test.upstream()
        -- an upstream whose response carries headers for the response side to edit
        origin = assert(test.start({
            admin = { listen = "off" },
            routes = { { name = "o", match = { paths = { "/" } }, plugins = { { name = "response", config = {
                status = 200, body = "from origin",
                headers = { Server = "origin/1.0", ["X-Powered-By"] = "php", ["X-Keep"] = "1",
                            ["X-Replace"] = "old", ["Content-Type"] = "text/plain" } } } } } },
        }))
        gw = assert(test.start({
            upstreams = { { name = "echo", targets = { { address = echo:address() } } },
                          { name = "origin", targets = { { address = origin:address() } } } },
            routes = {
                { name = "req", match = { paths = { "/req" } }, upstream = "echo", plugins = { { name = "headers", config = {
                    request = { set = { ["X-Env"] = "prod", ["User-Agent"] = "sluice-spec" },
                                add = { ["X-Via"] = "sluice" },
                                remove = { "Cookie", "X-Env", "X-Absent" } } } } } },
                { name = "resp", match = { paths = { "/resp" } }, upstream = "origin", plugins = { { name = "headers", config = {
                    response = { remove = { "Server", "X-Powered-By" },
                                 set = { ["X-Replace"] = "new", ["X-Frame-Options"] = "DENY" },
                                 add = { ["X-Keep"] = "2" } } } } } },
                { name = "both", match = { paths = { "/both" } }, upstream = "echo", plugins = { { name = "headers", config = {
                    request = { remove = { "X-A" }, set = { ["X-A"] = "set" }, add = { ["X-A"] = "added" } },
                    response = { set = { ["Content-Type"] = "text/x-spec" }, add = { ["X-Side"] = "response" } } } } } },
                { name = "answer", match = { paths = { "/answer" } }, plugins = {
                    { name = "headers", config = { response = { set = { ["X-On-Answer"] = "yes" }, remove = { "X-From-Answer" } } } },
                    { name = "response", config = { status = 418, body = "teapot",
                                                    headers = { ["X-From-Answer"] = "1", ["X-Other"] = "2" } } } } },
                { name = "noop", match = { paths = { "/noop" } }, upstream = "echo", plugins = { { name = "headers" } } },
            },
        }))
    end)
    teardown(function()
        gw:stop()
        origin:stop()
        echo:stop()
    end)

    it("removes, then sets, then adds request headers toward the upstream", function()
        local res = assert(gw:request({ path = "/req", headers = {
            Cookie = "session=1", ["X-Env"] = "dev", ["X-Via"] = "client", ["User-Agent"] = "curl/8" } }))
        assert.equal(200, res.status)
        local seen = res.json().headers
        assert.is_nil(seen.cookie)
        assert.equal("prod", seen["x-env"]) -- removed and set again: set wins
        assert.equal("sluice-spec", seen["user-agent"])
        assert.equal("client, sluice", seen["x-via"])
        -- the client's response is not edited by request-side rules
        assert.is_nil(res.headers["x-env"])
    end)

    it("edits the upstream's response headers toward the client", function()
        local res = assert(gw:request({ path = "/resp" }))
        assert.equal(200, res.status)
        assert.equal("from origin", res.body)
        assert.is_nil(res.headers.server)
        assert.is_nil(res.headers["x-powered-by"])
        assert.equal("new", res.headers["x-replace"])
        assert.equal("DENY", res.headers["x-frame-options"])
        assert.equal("1, 2", res.headers["x-keep"])
        assert.equal("text/plain", res.headers["content-type"])
    end)

    it("applies remove, set and add of one name in that order, on both sides", function()
        local res = assert(gw:request({ path = "/both", headers = { ["X-A"] = "client" } }))
        assert.equal(200, res.status)
        assert.equal("set, added", res.json().headers["x-a"])
        assert.equal("text/x-spec", res.headers["content-type"])
        assert.equal("response", res.headers["x-side"])
        assert.is_nil(res.headers["x-a"])
    end)

    it("edits a plugin's answer too", function()
        local res = assert(gw:request({ path = "/answer" }))
        assert.equal(418, res.status)
        assert.equal("teapot", res.body)
        assert.equal("yes", res.headers["x-on-answer"])
        assert.equal("2", res.headers["x-other"])
        assert.is_nil(res.headers["x-from-answer"])
    end)

    it("passes everything through unchanged with no config", function()
        local res = assert(gw:request({ path = "/noop", headers = { Cookie = "c=1", ["X-Via"] = "client" } }))
        assert.equal(200, res.status)
        local seen = res.json().headers
        assert.equal("c=1", seen.cookie)
        assert.equal("client", seen["x-via"])
    end)

    it("rejects framing headers, bad names, control characters and non-string values", function()
        local function err_of(config)
            local g, err = test.start({ routes = { { name = "r", plugins = { { name = "headers", config = config } } } } })
            assert.is_nil(g)
            return err
        end
        assert.matches("route 'r', plugin 'headers': request: 'Content-Length' is a framing or hop-by-hop header",
                       err_of({ request = { set = { ["Content-Length"] = "1" } } }), 1, true)
        assert.matches("response: 'Transfer-Encoding' is a framing or hop-by-hop header",
                       err_of({ response = { remove = { "Transfer-Encoding" } } }), 1, true)
        assert.matches("response: 'connection' is a framing or hop-by-hop header",
                       err_of({ response = { add = { connection = "close" } } }), 1, true)
        assert.matches("request: 'Bad Name' is not a valid header name",
                       err_of({ request = { add = { ["Bad Name"] = "x" } } }), 1, true)
        assert.matches("request: the value of 'X-A' has control characters",
                       err_of({ request = { set = { ["X-A"] = "a\r\nX-Injected: 1" } } }), 1, true)
        assert.matches("request.set.X-Version: expected a string",
                       err_of({ request = { set = { ["X-Version"] = 2 } } }), 1, true)
        assert.matches("response.remove: expected a list",
                       err_of({ response = { remove = { a = "b" } } }), 1, true)
        assert.matches("unknown key 'sett' in 'request' (did you mean 'set'?)", err_of({ request = { sett = { A = "1" } } }), 1, true)
        -- the upstream needs its Host (the API refuses to clear it); the response has none
        assert.matches("request: 'host' is required upstream (set replaces it)",
                       err_of({ request = { remove = { "host" } } }), 1, true)
        local g = assert(test.start({ routes = { { name = "r", plugins = {
            { name = "headers", config = { response = { remove = { "Host" } } } } } } } }))
        g:stop()
    end)
end)
