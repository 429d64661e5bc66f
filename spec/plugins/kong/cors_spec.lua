-- A Kong-style CORS plugin (spec/fixtures/kong/kong-cors), unmodified.
package.path = "lua/?.lua;lua/?/init.lua;spec/fixtures/?.lua;" .. package.path
local kg = require("kong_gateway")

describe("Kong plugin: CORS", function()
    local gw, up
    setup(function()
        gw, up = kg.start({
            kg.route("any", { { name = "kong-cors" } }),
            kg.route("list", { { name = "kong-cors", config = {
                origins = { "https://a.example", [[https://.*\.example\.org]] }, credentials = true, max_age = 600,
                headers = { "X-Custom" }, exposed_headers = { "X-Total" }, methods = { "GET", "POST" } } } }),
        })
    end)
    teardown(function() gw:stop() up:stop() end)

    local PREFLIGHT = { ["Access-Control-Request-Method"] = "POST" }
    local function preflight(path, origin)
        local h = { Origin = origin }
        for k, v in pairs(PREFLIGHT) do h[k] = v end
        return assert(gw:request({ method = "OPTIONS", path = path, headers = h }))
    end

    it("answers a preflight itself, any origin", function()
        local res = preflight("/any", "https://x.test")
        assert.equal(200, res.status)
        assert.equal("*", res.headers["access-control-allow-origin"])
        assert.equal("GET,HEAD,PUT,PATCH,POST,DELETE,OPTIONS", res.headers["access-control-allow-methods"])
    end)

    it("matches listed origins exactly and by regex (ngx.re)", function()
        local res = preflight("/list", "https://api.example.org")
        assert.equal("https://api.example.org", res.headers["access-control-allow-origin"])
        assert.equal("true", res.headers["access-control-allow-credentials"])
        assert.equal("600", res.headers["access-control-max-age"])
        assert.equal("X-Custom", res.headers["access-control-allow-headers"])
        assert.equal("GET,POST", res.headers["access-control-allow-methods"])
        assert.equal("Origin", res.headers["vary"])
        res = preflight("/list", "https://evil.example.org.attacker.test")
        assert.is_nil(res.headers["access-control-allow-origin"])
    end)

    it("decorates an ordinary response from the upstream", function()
        local res = assert(gw:request({ path = "/list", headers = { Origin = "https://a.example" } }))
        assert.equal(200, res.status)
        assert.equal("/list", res.json().path)
        assert.equal("https://a.example", res.headers["access-control-allow-origin"])
        assert.equal("X-Total", res.headers["access-control-expose-headers"])
    end)

    it("refuses an origin that is not a regex, at load", function()
        local test = require("sluice.test")
        local bad, err = test.start({ plugin_paths = { test.source_path("spec/fixtures/kong") },
            routes = { { name = "r", match = { paths = { "/" } }, plugins = {
                { name = "kong-cors", config = { origins = { "(" } } } } } } })
        assert.is_nil(bad)
        assert.matches("origins[1]: not a valid regex: (", err, 1, true)
    end)
end)
