-- A Kong-style key check against the consumers (spec/fixtures/kong/kong-key-check), unmodified.
package.path = "lua/?.lua;lua/?/init.lua;spec/fixtures/?.lua;" .. package.path
local kg = require("kong_gateway")

describe("Kong plugin: key check with consumers", function()
    local gw, up
    setup(function()
        gw, up = kg.start({
            kg.route("k", { { name = "kong-key-check" } }),
            kg.route("hide", { { name = "kong-key-check", config = { hide_credentials = true, key_names = { "x-key" } } } }),
            kg.route("anon", { { name = "kong-key-check", config = { anonymous = "guest" } } }),
        }, { consumers = { { name = "alice", credentials = { ["key-auth"] = { key = "k-123" } } }, { name = "guest" } } })
    end)
    teardown(function() gw:stop() up:stop() end)

    it("needs a key", function()
        local res = assert(gw:request({ path = "/k" }))
        assert.equal(401, res.status)
        assert.same({ message = "No API key found in request" }, res.json())
        assert.equal('Key realm="kong"', res.headers["www-authenticate"])
    end)

    it("refuses an unknown key", function()
        local res = assert(gw:request({ path = "/k", headers = { apikey = "wrong" } }))
        assert.equal(401, res.status)
        assert.same({ message = "Invalid authentication credentials" }, res.json())
    end)

    it("names the consumer of a good key upstream, from a header or the query", function()
        for _, req in ipairs({ { path = "/k", headers = { apikey = "k-123" } }, { path = "/k?apikey=k-123" } }) do
            local res = assert(gw:request(req))
            assert.equal(200, res.status)
            local h = res.json().headers
            assert.equal("alice", h["x-consumer-id"])
            assert.equal("alice", h["x-consumer-username"])
            assert.equal("alice:key-auth", h["x-credential-identifier"])
            assert.equal("alice", h["x-consumer"]) -- what sluice's own auth plugins send
        end
    end)

    it("hides the credential when asked", function()
        local seen = assert(gw:request({ path = "/hide", headers = { ["X-Key"] = "k-123" } })).json()
        assert.is_nil(seen.headers["x-key"])
        assert.equal("alice", seen.headers["x-consumer-id"])
        seen = assert(gw:request({ path = "/hide?x-key=k-123&keep=1" })).json()
        assert.equal("keep=1", seen.query)
    end)

    it("lets an anonymous consumer through", function()
        local seen = assert(gw:request({ path = "/anon" })).json()
        assert.equal("true", seen.headers["x-anonymous-consumer"])
        assert.equal("guest", seen.headers["x-consumer-username"])
    end)
end)
