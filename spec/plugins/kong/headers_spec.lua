-- A Kong-style header-rewriting plugin (spec/fixtures/kong/kong-headers), unmodified.
package.path = "lua/?.lua;lua/?/init.lua;spec/fixtures/?.lua;" .. package.path
local kg = require("kong_gateway")

describe("Kong plugin: header rewriting", function()
    local gw, up
    setup(function()
        gw, up = kg.start({ kg.route("h", { { name = "kong-headers", config = {
            set_request = { ["X-Added"] = "yes" }, remove_request = { "X-Secret" },
            add_response = { ["X-Served-By"] = "kong-style" }, remove_response = { "Content-Type" },
            upstream_path = "/elsewhere" } } }) })
    end)
    teardown(function() gw:stop() up:stop() end)

    it("rewrites the request's headers and path, and the response's headers", function()
        local res = assert(gw:request({ path = "/h", headers = { ["X-Secret"] = "s" } }))
        assert.equal(200, res.status)
        local seen = res.json()
        assert.equal("yes", seen.headers["x-added"])
        assert.is_nil(seen.headers["x-secret"])
        assert.equal("/elsewhere", seen.path)
        assert.equal("kong-style", res.headers["x-served-by"])
        assert.is_nil(res.headers["content-type"])
    end)

    it("validates the config with the schema's typedefs at load", function()
        local test = require("sluice.test")
        local bad, err = test.start({ plugin_paths = { test.source_path("spec/fixtures/kong") },
            routes = { { name = "r", match = { paths = { "/" } }, plugins = {
                { name = "kong-headers", config = { set_request = { ["bad name"] = "x" }, upstream_path = "rel" } },
                { name = "echo" } } } } })
        assert.is_nil(bad)
        assert.matches("set_request (key bad name): bad header name 'bad name'", err, 1, true)
    end)
end)
