-- real-ip: the client address from a header, only from trusted peers (specs connect from
-- 127.0.0.1), seen by the plugins after it.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

-- relative to this spec's folder (test.start anchors plugin_paths there): spec/fixtures/plugins
local FIXTURES = "../fixtures/plugins"

describe("real-ip", function()
    local gw
    local function route(name, conf, between)
        local plugins = { { name = "real-ip", config = conf } }
        if between then plugins[2] = between end
        plugins[#plugins + 1] = { name = "client-ips" }
        return { name = name, match = { paths = { "/" .. name } }, plugins = plugins }
    end

    setup(function()
        gw = assert(test.start({ plugin_paths = { FIXTURES }, routes = {
            route("rec", { trusted = { "127.0.0.1", "10.0.0.0/8" } }),
            route("flat", { trusted = { "127.0.0.1", "10.0.0.0/8" }, recursive = false }),
            route("untrusted", { trusted = { "10.0.0.0/8" } }),
            route("xri", { trusted = { "127.0.0.0/8" }, from = "header:X-Real-IP" }),
            route("deny", { trusted = { "127.0.0.1" } },
                  { name = "ip-restriction", config = { deny = { "203.0.113.0/24" } } }),
        } }))
    end)
    teardown(function() gw:stop() end)

    local function ips(path, xff, name)
        local res = assert(gw:request({ path = path, headers = xff and { [name or "X-Forwarded-For"] = xff } }))
        if res.status ~= 200 then return res.status end
        local d = res.json()
        assert.equal(d.client_ip, d.get_ip)
        return d.client_ip
    end

    it("recursive: the rightmost X-Forwarded-For entry that is not trusted", function()
        assert.equal("203.0.113.9", ips("/rec", "198.51.100.7, 203.0.113.9, 10.1.2.3"))
        assert.equal("198.51.100.7", ips("/rec", "198.51.100.7"))
        assert.equal("10.0.0.1", ips("/rec", "10.0.0.1, 10.1.2.3")) -- all trusted: the leftmost
        assert.equal("2001:db8::1", ips("/rec", "[2001:db8::1]:443, 10.1.2.3"))
        assert.equal("203.0.113.9", ips("/rec", "2001:db8::1, 203.0.113.9:80"))
    end)

    it("stops at a malformed entry, keeping the last good one", function()
        assert.equal("10.1.2.3", ips("/rec", "198.51.100.7, garbage, 10.1.2.3"))
        assert.equal("127.0.0.1", ips("/rec", "garbage"))
    end)

    it("skips empty elements (a trailing comma, ',,'), as nginx's realip does", function()
        assert.equal("198.51.100.7", ips("/rec", "198.51.100.7, "))
        assert.equal("198.51.100.7", ips("/rec", "198.51.100.7,"))
        assert.equal("203.0.113.9", ips("/rec", "198.51.100.7,,203.0.113.9"))
        assert.equal("198.51.100.7", ips("/rec", "198.51.100.7, , 10.1.2.3,"))
        assert.equal("203.0.113.9", ips("/flat", "198.51.100.7,203.0.113.9, "))
        assert.equal("127.0.0.1", ips("/rec", " , ")) -- nothing but separators: the peer
    end)

    it("not recursive: the rightmost entry, trusted or not", function()
        assert.equal("10.1.2.3", ips("/flat", "198.51.100.7, 203.0.113.9, 10.1.2.3"))
    end)

    it("believes nothing from a peer outside trusted", function()
        assert.equal("127.0.0.1", ips("/untrusted", "198.51.100.7"))
    end)

    it("reads another header: X-Real-IP", function()
        assert.equal("198.51.100.7", ips("/xri", "198.51.100.7", "X-Real-IP"))
        assert.equal("127.0.0.1", ips("/xri", "198.51.100.7")) -- X-Forwarded-For is not read
    end)

    it("is the address ip-restriction judges", function()
        assert.equal(403, ips("/deny", "203.0.113.5"))
        assert.equal("198.51.100.7", ips("/deny", "198.51.100.7"))
    end)

    it("refuses a bad from or trusted entry", function()
        local function starts(conf)
            local g = test.start({ routes = { { name = "r", match = { paths = { "/" } },
                plugins = { { name = "real-ip", config = conf }, { name = "echo" } } } } })
            if g then g:stop() end
            return g ~= nil
        end
        assert.is_true(starts({ trusted = { "10.0.0.0/8" } }))
        assert.is_false(starts({}))
        assert.is_false(starts({ trusted = { "ten" } }))
        assert.is_false(starts({ trusted = { "10.0.0.0/8" }, from = "X-Real-IP" }))
    end)
end)
