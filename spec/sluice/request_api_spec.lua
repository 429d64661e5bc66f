-- The request API additions (docs/plugins.md): request.get_query_arg / get_query_args,
-- request.get_scheme, client.get_ip through trusted proxies, response.get_headers.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local function absolute(dir)
    if dir:sub(1, 1) == "/" then return dir end
    local cwd = os.getenv("PWD") or assert(io.popen("pwd")):read("*l")
    return (cwd .. "/" .. dir):gsub("/%./", "/"):gsub("/%.$", "")
end
local FIXTURES = absolute(test.SOURCE_DIR) .. "/spec/fixtures/plugins"

local function conf(trusted)
    return {
        plugin_paths = { FIXTURES },
        listeners = { { name = "web", listen = "127.0.0.1:0", trusted_proxies = trusted, max_request_line = "64KiB" } },
        routes = {
            { name = "q", match = { paths = { "/q" } }, plugins = { { name = "inspect-more" } } },
            { name = "named", match = { paths = { "/n" } },
              plugins = { { name = "inspect-more", config = { arg = "a b" } } } },
            { name = "resp", match = { paths = { "/r" } }, plugins = {
                { name = "inspect-more", config = { answer = false } },
                { name = "response", config = { status = 201, body = "x",
                                                headers = { ["X-One"] = "1", ["X-Drop"] = "gone" } } } } },
        },
    }
end

describe("request API additions", function()
    local gw, trusting
    setup(function()
        gw = assert(test.start(conf(nil)))
        trusting = assert(test.start(conf({ "127.0.0.1", "10.0.0.0/8" })))
    end)
    teardown(function()
        gw:stop()
        trusting:stop()
    end)

    it("get_query_arg: decoded, the first of repeats, true without '=', nil when absent", function()
        local j = assert(gw:request({ path = "/q?a=x%20y+z&a=second&flag&b=100%25" })).json()
        assert.equal("x y z", j.arg)
        assert.same({ a = { "x y z", "second" }, flag = true, b = "100%" }, j.args)
        assert.equal(true, assert(gw:request({ path = "/q?z=1&a" })).json().arg)
        assert.equal(test.null or require("cjson").null, assert(gw:request({ path = "/q?b=1" })).json().arg)
        assert.same({}, assert(gw:request({ path = "/q" })).json().args)
        -- names are compared decoded; values longer than the scratch buffer still come whole
        assert.equal("v", assert(gw:request({ path = "/n?a%20b=v" })).json().arg)
        local long = string.rep("k", 9000)
        local j2 = assert(gw:request({ path = "/q?a=" .. long .. "&" .. long .. "=1" })).json()
        assert.equal(long, j2.arg)
        assert.equal("1", j2.args[long])
    end)

    it("get_scheme: http on a plain listener", function()
        assert.equal("http", assert(gw:request({ path = "/q" })).json().scheme)
    end)

    it("client.get_ip: the peer unless the peer is a trusted proxy", function()
        local xff = { ["X-Forwarded-For"] = "203.0.113.9, 10.1.2.3" }
        local j = assert(gw:request({ path = "/q", headers = xff })).json()
        assert.equal("127.0.0.1", j.client_ip) -- untrusted peer: its X-Forwarded-For is not believed
        j = assert(trusting:request({ path = "/q", headers = xff })).json()
        assert.equal("203.0.113.9", j.client_ip) -- 10.1.2.3 is trusted too: one hop further left
        assert.equal("127.0.0.1", j.peer_ip)
        j = assert(trusting:request({ path = "/q", headers = { ["X-Forwarded-For"] = "198.51.100.7" } })).json()
        assert.equal("198.51.100.7", j.client_ip)
        j = assert(trusting:request({ path = "/q", headers = { ["X-Forwarded-For"] = "bogus, 198.51.100.7" } })).json()
        assert.equal("198.51.100.7", j.client_ip) -- a non-address ends the walk at the last good one
        j = assert(trusting:request({ path = "/q", headers = { ["X-Forwarded-For"] = "[2001:db8::1]:443" } })).json()
        assert.equal("2001:db8::1", j.client_ip)
        j = assert(trusting:request({ path = "/q" })).json()
        assert.equal("127.0.0.1", j.client_ip) -- no header: the peer
    end)

    it("client.get_ip skips empty X-Forwarded-For elements, as nginx's realip does", function()
        local function ip(v)
            return assert(trusting:request({ path = "/q", headers = { ["X-Forwarded-For"] = v } })).json().client_ip
        end
        assert.equal("198.51.100.7", ip("198.51.100.7, "))
        assert.equal("198.51.100.7", ip("198.51.100.7,"))
        assert.equal("203.0.113.9", ip("198.51.100.7,,203.0.113.9"))
        assert.equal("198.51.100.7", ip("198.51.100.7, ,10.1.2.3, ")) -- trusted: one hop further left
    end)

    it("response.get_headers: the response's fields after the chain's edits", function()
        local res = assert(gw:request({ path = "/r" }))
        assert.equal(201, res.status)
        local seen = require("cjson").decode(res.headers["x-resp-headers"] or res.headers["X-Resp-Headers"])
        assert.equal("1", seen["x-one"])
        assert.equal("yes", seen["x-added"])
        assert.is_nil(seen["x-drop"])
    end)
end)
