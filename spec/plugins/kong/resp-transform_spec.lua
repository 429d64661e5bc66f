-- A Kong-style response transformation (spec/fixtures/kong/kong-resp-transform), unmodified.
package.path = "lua/?.lua;lua/?/init.lua;spec/fixtures/?.lua;" .. package.path
local kg = require("kong_gateway")

describe("Kong plugin: response transformation", function()
    local gw, up
    setup(function()
        gw, up = kg.start({
            kg.route("json", { { name = "kong-resp-transform", config = {
                add_headers = { ["X-Transformed"] = "1" }, remove_headers = { "X-Request-ID" },
                add_json = { added = "yes" }, remove_json = { "headers" } } } }),
            kg.route("upper", { { name = "kong-resp-transform", config = { upper_body = true } } }),
        })
    end)
    teardown(function() gw:stop() up:stop() end)

    it("rewrites a JSON body whole and edits the headers", function()
        local res = assert(gw:request({ path = "/json?q=1", method = "POST", body = string.rep("x", 100000) }))
        assert.equal(200, res.status)
        local body = res.json()
        assert.equal("yes", body.added)
        assert.is_nil(body.headers)
        assert.equal("/json", body.path)
        assert.equal(100000, #body.body)
        assert.equal("1", res.headers["x-transformed"])
    end)

    it("rewrites every piece through ngx.arg", function()
        local res = assert(gw:request({ path = "/upper" }))
        assert.equal(200, res.status)
        assert.matches('"PATH":"\\/UPPER"', res.body, 1, true)
    end)
end)
