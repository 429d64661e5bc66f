-- redirect: answers with a Location built from `to`, the request's path and query.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local function route(name, config)
    return { name = name, match = { paths = { "/" }, headers = { ["X-Case"] = name } },
             plugins = { { name = "redirect", config = config } } }
end

describe("redirect", function()
    local gw
    setup(function()
        gw = assert(test.start({
            routes = {
                route("plain", { to = "https://new.example/" }),
                route("path", { to = "https://new.example/", keep_path = true, status = 301 }),
                route("path-noslash", { to = "https://new.example/base", keep_path = true }),
                route("no-query", { to = "https://new.example/landing", keep_query = false, status = 308 }),
                route("path-only", { to = "https://new.example/", keep_path = true, keep_query = false }),
                route("own-query", { to = "https://new.example/p?a=1", status = 307 }),
                route("own-query-path", { to = "https://new.example/p/?a=1", keep_path = true, status = 303 }),
                route("own-query-drop", { to = "https://new.example/p?a=1", keep_query = false }),
                route("empty-own-query", { to = "https://new.example/p?" }),
                route("relative", { to = "/v2", keep_path = true }),
                route("fragment", { to = "https://new.example/doc#top" }),
                route("root", { to = "/", keep_path = true }),
                route("fragment-path", { to = "https://new.example/doc/?a=1#top", keep_path = true }),
            },
        }))
    end)
    teardown(function() gw:stop() end)

    local function go(case, path)
        local res = assert(gw:request({ path = path, headers = { ["X-Case"] = case } }))
        return res.status, res.headers.location
    end

    it("defaults to 302, keeps the query but not the path", function()
        assert.same({ 302, "https://new.example/?x=1" }, { go("plain", "/old/a?x=1") })
        local res = assert(gw:request({ path = "/old", headers = { ["X-Case"] = "plain" } }))
        assert.equal("", res.body)
        assert.equal("0", res.headers["content-length"])
        assert.same({ 302, "https://new.example/" }, { go("plain", "/old/a") })
    end)

    it("keep_path appends the path after dropping the trailing slash of `to`", function()
        assert.same({ 301, "https://new.example/old/a?x=1" }, { go("path", "/old/a?x=1") })
        assert.same({ 301, "https://new.example/" }, { go("path", "/") })
        assert.same({ 302, "https://new.example/base/old/a" }, { go("path-noslash", "/old/a") })
        assert.same({ 302, "/v2/x/y?q" }, { go("relative", "/x/y?q") })
    end)

    it("keep_query = false drops the request's query, with or without keep_path", function()
        assert.same({ 308, "https://new.example/landing" }, { go("no-query", "/old/a?x=1") })
        assert.same({ 302, "https://new.example/old/a" }, { go("path-only", "/old/a?x=1&y=2") })
    end)

    it("joins the request's query after `to`'s own query with &", function()
        assert.same({ 307, "https://new.example/p?a=1&x=1&y=2" }, { go("own-query", "/old?x=1&y=2") })
        assert.same({ 307, "https://new.example/p?a=1" }, { go("own-query", "/old") })
    end)

    it("puts the path before `to`'s own query", function()
        assert.same({ 303, "https://new.example/p/old/a?a=1&x=1" }, { go("own-query-path", "/old/a?x=1") })
    end)

    it("keeps `to`'s own query when the request's is dropped", function()
        assert.same({ 302, "https://new.example/p?a=1" }, { go("own-query-drop", "/old?x=1") })
    end)

    it("keeps `to`'s #fragment last, after the path and query it adds", function()
        assert.same({ 302, "https://new.example/doc?x=1#top" }, { go("fragment", "/old?x=1") })
        assert.same({ 302, "https://new.example/doc#top" }, { go("fragment", "/old") })
        assert.same({ 302, "https://new.example/doc/old/a?a=1&x=1#top" }, { go("fragment-path", "/old/a?x=1") })
    end)

    it("never turns the request's path into another host (//host, /\\host) after a bare `/`", function()
        assert.same({ 302, "/evil.example/x?q=1" }, { go("root", "//evil.example/x?q=1") })
        assert.same({ 302, "/evil.example" }, { go("root", "/\\evil.example") })
        assert.same({ 302, "/a//b" }, { go("root", "/a//b") })
    end)

    it("does not leave a dangling ? for an empty query", function()
        assert.same({ 302, "https://new.example/p" }, { go("empty-own-query", "/old") })
        assert.same({ 302, "https://new.example/p?x=1" }, { go("empty-own-query", "/old?x=1") })
    end)

    it("rejects a config without `to`, an empty `to`, CR/LF in `to` and an unlisted status", function()
        local function err_of(config)
            local g, err = test.start({ routes = { { name = "r", plugins = { { name = "redirect", config = config } } } } })
            assert.is_nil(g)
            return err
        end
        assert.matches("route 'r', plugin 'redirect': missing required key 'to'", err_of({ status = 301 }), 1, true)
        assert.matches("to: must be at least 1 characters", err_of({ to = "" }), 1, true)
        assert.matches("'to' must not contain CR or LF", err_of({ to = "https://a/\r\nX-Evil: 1" }), 1, true)
        assert.matches("status: expected one of: 301, 302, 303, 307, 308", err_of({ to = "/x", status = 300 }), 1, true)
    end)
end)
