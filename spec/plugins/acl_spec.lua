-- acl: allow/deny by the consumer's groups; the order rule against auth plugins.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local CONSUMERS = {
    { name = "alice", groups = { "admin", "staff" }, credentials = { ["key-auth"] = { key = "ka" } } },
    { name = "bob", groups = { "staff" }, credentials = { ["key-auth"] = { key = "kb" } } },
    { name = "carol", credentials = { ["key-auth"] = { key = "kc" } } },
}

local function route(name, acl, auth_first)
    local plugins = { { name = "key-auth", config = { header = "X-Key" } }, { name = "acl", config = acl } }
    if not auth_first then plugins = { plugins[2], plugins[1] } end
    return { name = name, match = { paths = { "/" .. name } }, upstream = "u", plugins = plugins }
end

describe("acl", function()
    local up, gw

    setup(function()
        up = test.upstream()
        gw = assert(test.start({
            consumers = CONSUMERS,
            upstreams = { { name = "u", targets = { { address = up:address() } } } },
            routes = {
                route("admins", { allow = { "admin" } }, true),
                route("no-staff", { deny = { "staff" } }, true),
                route("hidden", { allow = { "staff" }, hide_groups_header = true }, true),
                { name = "anon", match = { paths = { "/anon" } }, upstream = "u",
                  plugins = { { name = "acl", config = { deny = { "x" } } } } },
            },
        }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    local function status(path, key, extra)
        local headers = { ["X-Key"] = key }
        for k, v in pairs(extra or {}) do headers[k] = v end
        return assert(gw:request({ path = path, headers = headers }))
    end

    it("allow: only consumers in a listed group pass", function()
        local res = status("/admins", "ka")
        assert.equal(200, res.status)
        assert.equal("admin, staff", res.json().headers["x-consumer-groups"])
        assert.equal(403, status("/admins", "kb").status)
        assert.equal(403, status("/admins", "kc").status) -- no groups at all
    end)

    it("deny: consumers in a listed group are refused, others (also without groups) pass", function()
        assert.equal(403, status("/no-staff", "ka").status)
        assert.equal(403, status("/no-staff", "kb").status)
        local res = status("/no-staff", "kc", { ["X-Consumer-Groups"] = "admin" })
        assert.equal(200, res.status)
        assert.is_nil(res.json().headers["x-consumer-groups"]) -- the client's claim is dropped
    end)

    it("hide_groups_header: nothing sent upstream, not even the client's", function()
        local res = status("/hidden", "kb", { ["X-Consumer-Groups"] = "admin" })
        assert.equal(200, res.status)
        assert.is_nil(res.json().headers["x-consumer-groups"])
    end)

    it("refuses a request without an authenticated consumer", function()
        local res = assert(gw:request({ path = "/anon" }))
        assert.equal(403, res.status)
        assert.equal("forbidden", res.json().error)
    end)

    local function errors(conf)
        local g, errs = test.start(conf)
        if g then g:stop() return nil end
        return tostring(errs)
    end

    it("is refused before an auth plugin, in the route or after the global chain", function()
        local base = { consumers = CONSUMERS, upstreams = { { name = "u", targets = { { address = up:address() } } } } }
        base.routes = { route("wrong", { allow = { "admin" } }, false) }
        assert.matches("must come after 'key%-auth'", errors(base))
        base.routes = { { name = "r", match = { paths = { "/" } }, upstream = "u",
                          plugins = { { name = "key-auth" } } } }
        base.plugins = { { name = "acl", config = { allow = { "admin" } } } }
        assert.matches("must come after 'key%-auth'", errors(base))
        base.plugins = { { name = "key-auth" } }
        base.routes[1].plugins = { { name = "acl", config = { allow = { "admin" } } } }
        assert.is_nil(errors(base))
    end)

    it("needs exactly one of allow and deny; groups are plain names", function()
        local base = { routes = { { name = "r", match = { paths = { "/" } }, plugins = { { name = "echo" } } } } }
        base.routes[1].plugins[2] = { name = "acl", config = {} }
        assert.matches("exactly one of allow and deny", errors(base))
        base.routes[1].plugins[2] = { name = "acl", config = { allow = { "a" }, deny = { "b" } } }
        assert.matches("exactly one of allow and deny", errors(base))
        base.routes[1].plugins[2] = nil
        base.consumers = { { name = "x", groups = { "has space" } } }
        assert.matches("group 'has space'", errors(base))
    end)
end)
