-- cors: preflights answered by the gateway, CORS headers on other responses.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local APP = "https://app.example"

describe("cors", function()
    local up, gw
    setup(function()
        up = test.upstream()
        local function route(name, config)
            return { name = name, match = { paths = { "/" .. name } }, upstream = "u",
                     plugins = { { name = "cors", config = config } } }
        end
        gw = assert(test.start({
            upstreams = { { name = "u", targets = { { address = up:address() } } } },
            routes = {
                route("strict", { origins = { APP }, credentials = true, headers = { "Authorization", "Content-Type" },
                                  expose_headers = { "X-Total", "X-Page" }, max_age = 3600, methods = { "GET", "PUT" } }),
                route("any", nil),
                route("two", { origins = { "https://a.example", "https://b.example" } }),
                route("long", { max_age = "100000000000h" }),
            },
        }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    local function preflight(path, origin, extra)
        local h = { Origin = origin, ["Access-Control-Request-Method"] = "PUT" }
        for k, v in pairs(extra or {}) do h[k] = v end
        return assert(gw:request({ method = "OPTIONS", path = path, headers = h }))
    end

    it("answers a preflight from an allowed origin itself, with every allow header", function()
        local res = preflight("/strict/x", APP, { ["Access-Control-Request-Headers"] = "X-Ignored" })
        assert.equal(204, res.status)
        assert.equal("", res.body) -- not the echo upstream's JSON: the upstream was not asked
        assert.equal(APP, res.headers["access-control-allow-origin"])
        assert.equal("GET, PUT", res.headers["access-control-allow-methods"])
        assert.equal("Authorization, Content-Type", res.headers["access-control-allow-headers"])
        assert.equal("3600", res.headers["access-control-max-age"])
        assert.equal("true", res.headers["access-control-allow-credentials"])
        assert.equal("Origin", res.headers.vary)
        -- header_filter does not add a second set on top of the preflight's
        assert.equal(1, select(2, res.raw:lower():gsub("access%-control%-allow%-origin:", "")))
    end)

    it("with the defaults allows any origin and grants the headers the preflight asks for", function()
        local res = preflight("/any", "https://anywhere.example",
                              { ["Access-Control-Request-Headers"] = "X-Custom, Content-Type" })
        assert.equal(204, res.status)
        assert.equal("*", res.headers["access-control-allow-origin"])
        assert.equal("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", res.headers["access-control-allow-methods"])
        assert.equal("X-Custom, Content-Type", res.headers["access-control-allow-headers"])
        assert.equal("600", res.headers["access-control-max-age"])
        assert.is_nil(res.headers["access-control-allow-credentials"])
        -- no Access-Control-Request-Headers: no Allow-Headers
        assert.is_nil(preflight("/any", "https://x.example").headers["access-control-allow-headers"])
    end)

    it("refuses a preflight from another origin with 403 and no CORS headers", function()
        local res = preflight("/strict", "https://evil.example")
        assert.equal(403, res.status)
        assert.same({ error = "origin not allowed" }, res.json())
        assert.is_nil(res.headers["access-control-allow-origin"])
        assert.is_nil(res.headers["access-control-allow-credentials"])
        assert.equal(403, preflight("/two", "https://c.example").status)
        assert.equal("https://b.example", preflight("/two", "https://b.example").headers["access-control-allow-origin"])
    end)

    it("adds origin, credentials, expose headers and Vary to a simple request from an allowed origin", function()
        local res = assert(gw:request({ path = "/strict/data", headers = { Origin = APP } }))
        assert.equal(200, res.status)
        local seen = res.json()
        assert.equal(APP, seen.headers.origin) -- the request went upstream, Origin included
        assert.equal(APP, res.headers["access-control-allow-origin"])
        assert.equal("true", res.headers["access-control-allow-credentials"])
        assert.equal("X-Total, X-Page", res.headers["access-control-expose-headers"])
        assert.equal("Origin", res.headers.vary)
        assert.is_nil(res.headers["access-control-allow-methods"])
        assert.is_nil(res.headers["access-control-max-age"])
    end)

    it("answers * to any origin with the defaults, without Vary", function()
        local res = assert(gw:request({ method = "POST", path = "/any", body = "{}", headers = { Origin = "https://z.example" } }))
        assert.equal(200, res.status)
        assert.equal("*", res.headers["access-control-allow-origin"])
        assert.is_nil(res.headers.vary)
        assert.is_nil(res.headers["access-control-allow-credentials"])
        assert.is_nil(res.headers["access-control-expose-headers"])
    end)

    it("passes requests from other origins or without Origin unchanged, but for Vary: Origin", function()
        for _, h in ipairs({ { Origin = "https://evil.example" }, {} }) do
            local res = assert(gw:request({ path = "/strict", headers = h }))
            assert.equal(200, res.status)
            assert.equal("GET", res.json().method)
            assert.is_nil(res.headers["access-control-allow-origin"])
            assert.is_nil(res.headers["access-control-allow-credentials"])
            -- a cache must not hand this answer (no Allow-Origin) to an allowed origin
            assert.equal("Origin", res.headers.vary)
        end
        -- with origins "*" no answer depends on Origin
        assert.is_nil(assert(gw:request({ path = "/any" })).headers.vary)
    end)

    it("sends an OPTIONS without Access-Control-Request-Method upstream, as a simple request", function()
        local res = assert(gw:request({ method = "OPTIONS", path = "/strict", headers = { Origin = APP } }))
        assert.equal(200, res.status)
        assert.equal("OPTIONS", res.json().method)
        assert.equal(APP, res.headers["access-control-allow-origin"])
    end)

    it("sends a long max_age as whole seconds in digits", function()
        -- delta-seconds are digits (RFC 9110 1.2); 3.6e14 was sent as "3.6e+14"
        assert.equal("360000000000000", preflight("/long", APP).headers["access-control-max-age"])
    end)

    it("rejects credentials with origin *", function()
        local g, err = test.start({ routes = { { name = "r", upstream = "u", plugins = { { name = "cors", config = { credentials = true } } } } },
                                    upstreams = { { name = "u", targets = { { address = "127.0.0.1:9" } } } } })
        assert.is_nil(g)
        assert.matches("route 'r', plugin 'cors': credentials cannot be used with origin '*'", err, 1, true)
        g, err = test.start({ routes = { { name = "r", plugins = { { name = "cors", config = { max_age = -1 } } } } } })
        assert.is_nil(g)
        assert.matches("max_age: must be >= 0", err, 1, true)
    end)
end)
