-- ip-restriction: allow/deny by the peer address (specs connect from 127.0.0.1).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

describe("ip-restriction", function()
    local up, gw
    local cases = {
        -- name = { config, expected status }
        ["allow-exact"] = { { allow = { "127.0.0.1" } }, 200 },
        ["allow-other"] = { { allow = { "10.0.0.0/8", "192.168.0.0/16" } }, 403 },
        ["allow-list"] = { { allow = { "10.0.0.0/8", "127.0.0.0/8" } }, 200 },
        ["deny-exact"] = { { deny = { "127.0.0.1" } }, 403 },
        ["deny-other"] = { { deny = { "10.0.0.0/8", "::1" } }, 200 },
        ["deny-wins"] = { { allow = { "127.0.0.0/8" }, deny = { "127.0.0.1/32" } }, 403 },
        ["deny-wins-order"] = { { deny = { "127.0.0.0/24" }, allow = { "127.0.0.1" } }, 403 },
        ["odd-prefix-in"] = { { allow = { "127.0.0.0/31" } }, 200 },   -- .0 and .1
        ["odd-prefix-out"] = { { allow = { "127.0.0.2/31" } }, 403 },  -- .2 and .3
        ["short-prefix"] = { { allow = { "126.0.0.0/7" } }, 200 },     -- 126.0.0.0 - 127.255.255.255
        ["short-prefix-out"] = { { allow = { "124.0.0.0/7" } }, 403 },
        ["all-v4"] = { { allow = { "0.0.0.0/0" } }, 200 },
        ["v6-loopback"] = { { allow = { "::1" } }, 403 },              -- ::1 is not 127.0.0.1
        ["v6-mapped"] = { { allow = { "::ffff:127.0.0.1" } }, 200 },
        ["v6-ula"] = { { allow = { "fd00::/8" } }, 403 },
        ["custom-status"] = { { deny = { "127.0.0.1" }, status = 451 }, 451 },
        ["empty"] = { nil, 200 },
    }

    setup(function()
        up = test.upstream()
        local routes = {}
        for name, c in pairs(cases) do
            routes[#routes + 1] = { name = name, match = { paths = { "/" .. name } }, upstream = "u",
                                    plugins = { { name = "ip-restriction", config = c[1] } } }
        end
        gw = assert(test.start({ upstreams = { { name = "u", targets = { { address = up:address() } } } },
                                 routes = routes }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    it("allows or refuses 127.0.0.1 as each allow/deny list says", function()
        local got, want = {}, {}
        for name, c in pairs(cases) do
            want[name] = c[2]
            got[name] = assert(gw:request({ path = "/" .. name })).status
        end
        assert.same(want, got)
    end)

    it("lets an allowed client through to the upstream", function()
        local res = assert(gw:request({ path = "/allow-exact/x" }))
        assert.equal(200, res.status)
        assert.equal("/allow-exact/x", res.json().path)
    end)

    it("answers a refused client with JSON and never asks the upstream", function()
        for _, name in ipairs({ "deny-wins", "custom-status", "allow-other" }) do
            local res = assert(gw:request({ method = "POST", path = "/" .. name, body = "x" }))
            assert.equal(cases[name][2], res.status)
            assert.equal("application/json", res.headers["content-type"])
            assert.same({ error = "forbidden" }, res.json())
        end
    end)

    it("rejects entries that are not addresses or CIDRs, and statuses outside 400-599", function()
        local function err_of(config)
            local g, err = test.start({ routes = { { name = "r", plugins = { { name = "ip-restriction", config = config } } } } })
            assert.is_nil(g)
            return err
        end
        assert.matches("route 'r', plugin 'ip-restriction': allow: '10.0.0.0/33' is not an address or CIDR",
                       err_of({ allow = { "10.0.0.0/33" } }), 1, true)
        assert.matches("deny: 'localhost' is not an address or CIDR", err_of({ deny = { "localhost" } }), 1, true)
        assert.matches("deny: '::1/129' is not an address or CIDR", err_of({ deny = { "::1/129" } }), 1, true)
        assert.matches("allow: '1.2.3.4/' is not an address or CIDR", err_of({ allow = { "1.2.3.4/" } }), 1, true)
        assert.matches("allow: '300.1.1.1' is not an address or CIDR", err_of({ allow = { "300.1.1.1" } }), 1, true)
        assert.matches("status: must be >= 400", err_of({ status = 302 }), 1, true)
        assert.matches("allow.1: expected a string", err_of({ allow = { 10 } }), 1, true)
    end)
end)
