-- response-transformer: response headers and JSON body fields, as the client receives them.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local cjson = require("cjson")

describe("response-transformer", function()
    local gw
    local function route(name, answer, conf)
        return { name = name, match = { paths = { "/" .. name } },
                 plugins = { { name = "response-transformer", config = conf }, { name = "response", config = answer } } }
    end
    local JSON = { ["Content-Type"] = "application/json", ["X-Drop"] = "1", ["X-Old"] = "o", ["X-Rep"] = "r",
                   ["X-Keep"] = "mine" }
    local CONF = {
        remove = { headers = { "X-Drop" }, json = { "secret" } },
        rename = { headers = { "X-Old:X-New" }, json = { "old:new" } },
        replace = { headers = { "X-Rep:replaced", "X-Absent:never" }, json = { "rep:R", "absent:x" } },
        add = { headers = { "X-Add:added", "X-Keep:not-this" }, json = { "added:yes", "keep:no" } },
        append = { headers = { "X-App:two" }, json = { "tags:t2" } },
        max_body = 100,
    }

    setup(function()
        gw = assert(test.start({ routes = {
            route("json", { headers = JSON, body = cjson.encode({ secret = 1, old = 2, rep = 3, keep = 4, tags = { "t1" } }) }, CONF),
            route("text", { headers = { ["Content-Type"] = "text/plain" }, body = '{"secret":1}' }, CONF),
            route("big", { headers = { ["Content-Type"] = "application/json" },
                           body = '{"secret":"' .. ("x"):rep(200) .. '"}' }, CONF),
            route("array", { headers = { ["Content-Type"] = "application/json" }, body = "[1,2]" }, CONF),
            route("exact", { headers = { ["Content-Type"] = "application/json" },
                             body = '{"id":1234567890123456,"l":[],"d":{"a":[]},"tags":[],"rep":3}' }, CONF),
        } }))
    end)
    teardown(function() gw:stop() end)

    it("edits headers and top-level JSON fields in Kong's order", function()
        local res = assert(gw:request({ path = "/json" }))
        assert.equal(200, res.status)
        local hs = res.headers
        assert.is_nil(hs["x-drop"])
        assert.is_nil(hs["x-old"])
        assert.equal("o", hs["x-new"])
        assert.equal("replaced", hs["x-rep"])
        assert.is_nil(hs["x-absent"])
        assert.equal("added", hs["x-add"])
        assert.equal("mine", hs["x-keep"])
        assert.equal("two", hs["x-app"])
        assert.same({ new = 2, rep = "R", keep = 4, added = "yes", tags = { "t1", "t2" } }, cjson.decode(res.body))
        assert.equal(tostring(#res.body), hs["content-length"])
    end)

    it("sends the fields no section names exactly as the upstream wrote them", function()
        -- decoding and encoding the whole body turned 1234567890123456 into
        -- 1.2345678901235e+15 and [] into {}
        local res = assert(gw:request({ path = "/exact" }))
        assert.equal('{"id":1234567890123456,"l":[],"d":{"a":[]},"tags":["t2"],"rep":"R","added":"yes","keep":"no"}', res.body)
    end)

    it("leaves a body that is not JSON, over max_body, or not an object as it is", function()
        assert.equal('{"secret":1}', assert(gw:request({ path = "/text" })).body)
        local res = assert(gw:request({ path = "/big" }))
        assert.equal('{"secret":"' .. ("x"):rep(200) .. '"}', res.body)
        assert.equal("[1,2]", assert(gw:request({ path = "/array" })).body)
    end)

    it("refuses malformed entries", function()
        local function starts(conf)
            local g = test.start({ routes = { route("r", {}, conf) } })
            if g then g:stop() end
            return g ~= nil
        end
        assert.is_true(starts({ add = { json = { "a:1" } } }))
        assert.is_false(starts({ add = { json = { "no-colon" } } }))
        assert.is_false(starts({ remove = { headers = { "Content-Length" } } }))
        assert.is_false(starts({ add = { body = { "a:1" } } })) -- Kong's key is json
    end)
end)
