-- A Kong-style request-termination plugin (spec/fixtures/kong/kong-terminate), unmodified.
package.path = "lua/?.lua;lua/?/init.lua;spec/fixtures/?.lua;" .. package.path
local kg = require("kong_gateway")
local test = require("sluice.test")

describe("Kong plugin: request termination", function()
    local gw, up
    setup(function()
        gw, up = kg.start({
            kg.route("default", { { name = "kong-terminate" } }),
            kg.route("body", { { name = "kong-terminate", config = { status_code = 418, body = "teapot",
                                                                   content_type = "text/plain" } } }),
            kg.route("echo", { { name = "kong-terminate", config = { status_code = 200, echo = true } } }),
            kg.route("trigger", { { name = "kong-terminate", config = { status_code = 403, trigger = "X-Stop",
                                                                      message = "stopped" } } }),
        })
    end)
    teardown(function() gw:stop() up:stop() end)

    it("answers 503 with Kong's default message, never reaching the upstream", function()
        local res = assert(gw:request({ path = "/default" }))
        assert.equal(503, res.status)
        assert.same({ message = "Service unavailable" }, res.json())
    end)

    it("answers a raw body; the handler stops at kong.response.exit without a return", function()
        local res = assert(gw:request({ path = "/body" }))
        assert.equal(418, res.status)
        assert.equal("teapot", res.body)
        assert.equal("text/plain", res.headers["content-type"])
        assert.is_nil(res.headers["x-after-exit"])
    end)

    it("echoes the request", function()
        local res = assert(gw:request({ path = "/echo?a=1", headers = { ["X-One"] = "1" } }))
        assert.equal(200, res.status)
        local r = res.json().request
        assert.equal("GET", r.method)
        assert.equal("/echo", r.path)
        assert.same({ a = "1" }, r.query)
        assert.equal("1", r.headers["x-one"])
    end)

    it("terminates only on the trigger header", function()
        assert.equal(200, assert(gw:request({ path = "/trigger" })).status)
        local res = assert(gw:request({ path = "/trigger", headers = { ["X-Stop"] = "1" } }))
        assert.equal(403, res.status)
        assert.same({ message = "stopped" }, res.json())
    end)

    it("refuses message with body (the schema's entity check) and a status out of range", function()
        local bad, err = test.start({ plugin_paths = { test.source_path("spec/fixtures/kong") },
            routes = { { name = "r", match = { paths = { "/" } }, plugins = {
                { name = "kong-terminate", config = { message = "a", body = "b" } } } },
                { name = "s", match = { paths = { "/s" } }, plugins = {
                { name = "kong-terminate", config = { status_code = 99 } } } } } })
        assert.is_nil(bad)
        assert.matches("only one or none of these fields must be set: message, body", err, 1, true)
        assert.matches("status_code: must be >= 100", err, 1, true)
    end)
end)
