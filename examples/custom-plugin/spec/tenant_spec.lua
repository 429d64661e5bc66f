-- sluice spec examples/custom-plugin/spec
local test = require("sluice.test")

describe("tenant", function()
    local gw, up

    local function start(config)
        return test.start({
            plugin_paths = { "../plugins" },      -- relative to this spec's folder
            upstreams = { { name = "api", targets = { { address = up:address() } } } },
            routes = { { name = "api", match = { paths = { "/" } }, upstream = "api",
                         plugins = { { name = "tenant", config = config } } } },
        })
    end

    before_each(function() up = test.upstream() end)      -- an echo upstream
    after_each(function()
        if gw then gw:stop() end
        up:stop()
        gw = nil
    end)

    it("passes the tenant upstream as X-Tenant-Id, lower-cased", function()
        gw = assert(start({ tenants = { "acme" } }))
        local res = assert(gw:request({ path = "/x", headers = { ["X-Tenant"] = "Acme" } }))
        assert.equal(200, res.status)
        local seen = res:json()
        assert.equal("acme", seen.headers["x-tenant-id"])
        assert.is_nil(seen.headers["x-tenant"])
        assert.equal("acme", res.headers["x-served-tenant"])
    end)

    it("answers 400 without the header and 403 for an unknown tenant", function()
        gw = assert(start({ tenants = { "acme" } }))
        assert.equal(400, gw:request({ path = "/x" }).status)
        assert.equal(403, gw:request({ path = "/x", headers = { ["X-Tenant"] = "other" } }).status)
    end)

    it("refuses a config without tenants, at the config's position", function()
        local ok, err = start({ tenants = {} })
        assert.is_nil(ok)
        assert.matches("list at least one tenant", err, 1, true)
    end)
end)
