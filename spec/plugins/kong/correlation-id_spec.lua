-- A Kong-style correlation id (spec/fixtures/kong/kong-correlation-id), unmodified.
package.path = "lua/?.lua;lua/?/init.lua;spec/fixtures/?.lua;" .. package.path
local kg = require("kong_gateway")

describe("Kong plugin: correlation id", function()
    local gw, up
    setup(function()
        gw, up = kg.start({
            kg.route("counter", { { name = "kong-correlation-id", config = { echo_downstream = true } } }),
            kg.route("uuid", { { name = "kong-correlation-id", config = { generator = "uuid", header_name = "X-Corr" } } }),
            kg.route("tracker", { { name = "kong-correlation-id", config = { generator = "tracker" } } }),
        })
    end)
    teardown(function() gw:stop() up:stop() end)

    it("counts per worker after a uuid made in init_worker, and echoes it back", function()
        local a = assert(gw:request({ path = "/counter" }))
        local b = assert(gw:request({ path = "/counter" }))
        local ida, idb = a.json().headers["kong-request-id"], b.json().headers["kong-request-id"]
        local uuid, n = ida:match("^(%x+%-%x+%-%x+%-%x+%-%x+)#(%d+)$")
        assert.truthy(uuid, ida)
        assert.equal(uuid .. "#" .. (tonumber(n) + 1), idb)
        assert.equal(ida, a.headers["kong-request-id"])
    end)

    it("keeps a client's id", function()
        local res = assert(gw:request({ path = "/counter", headers = { ["Kong-Request-ID"] = "mine" } }))
        assert.equal("mine", res.json().headers["kong-request-id"])
        assert.equal("mine", res.headers["kong-request-id"])
    end)

    it("makes uuids under another header, not echoed unless asked", function()
        local res = assert(gw:request({ path = "/uuid" }))
        assert.matches("^%x+%-%x+%-4%x+%-%x+%-%x+$", res.json().headers["x-corr"])
        assert.is_nil(res.headers["x-corr"])
    end)

    it("tracks with ngx.var and the node id", function()
        local seen = assert(gw:request({ path = "/tracker" })).json()
        local id = seen.headers["kong-request-id"]
        assert.matches("^%x+%-%d+%-127%.0%.0%.1%-[%d%.]+%-" .. seen.headers["x-request-id"] .. "$", id)
    end)
end)
