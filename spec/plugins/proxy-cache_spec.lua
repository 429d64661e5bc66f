-- proxy-cache: the Lua part (config checks, key compilation and building) and, through
-- the real core, what the C part decides from the upstream's Cache-Control.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local function plugin()
    package.loaded["plugins.proxy-cache"] = nil
    return dofile("plugins/proxy-cache.lua")
end

local function conf(over)
    local c = { ttl = 60, methods = { "GET", "HEAD" }, statuses = { 200, 301, 404 },
                key = { "method", "host", "path", "query" }, vary = {}, max_body = 1048576,
                stale_if_error = 0, lock_timeout = 5, cache_set_cookie = false }
    for k, v in pairs(over or {}) do c[k] = v end
    return c
end

-- a request as build_key reads it
local function getter(req)
    return {
        method = function() return req.method or "GET" end,
        host = function() return req.host or "example.com" end,
        path = function() return req.path or "/" end,
        query = function() return req.query or "" end,
        header = function(n) return (req.headers or {})[n] end,
        consumer = function() return req.consumer end,
    }
end

describe("proxy-cache key", function()
    local M = plugin()

    local function key(c, req)
        local parts = M.compile(conf(c))
        return M.build_key(parts, getter(req))
    end

    it("defaults to method, host, path and query", function()
        assert.equal("GET example.com/a?b=1", key(nil, { path = "/a", query = "b=1" }))
        -- a HEAD is answered from the GET's entry
        assert.equal("GET example.com/a", key(nil, { method = "HEAD", path = "/a" }))
        assert.equal("POST example.com/a", key(nil, { method = "POST", path = "/a" }))
        local _, default = M.compile(conf())
        assert.is_true(default)
    end)

    it("adds header and consumer parts, names lower-cased, absent values empty", function()
        local c = { key = { "method", "path", "header:X-Tenant", "consumer" }, vary = { "Accept-Language" } }
        assert.equal("GET /p\nx-tenant:t1\nconsumer:alice\naccept-language:",
                     key(c, { path = "/p", headers = { ["x-tenant"] = "t1" }, consumer = "alice" }))
        assert.equal("GET /p\nx-tenant:\nconsumer:\naccept-language:fr",
                     key(c, { path = "/p", headers = { ["accept-language"] = "fr" } }))
        local _, default = M.compile(conf(c))
        assert.is_false(default)
    end)

    it("keeps two requests apart only by their key's parts", function()
        local c = { key = { "path" } }
        assert.equal(key(c, { path = "/x", query = "a" }), key(c, { path = "/x", query = "b", method = "HEAD" }))
        assert.not_equal(key(nil, { path = "/x", query = "a" }), key(nil, { path = "/x", query = "b" }))
    end)

    it("reuses its buffer without leftovers", function()
        local buf = {}
        local parts = M.compile(conf({ key = { "method", "path", "header:a", "header:b" } }))
        M.build_key(parts, getter({ path = "/long", headers = { a = "1", b = "2" } }), buf)
        parts = M.compile(conf({ key = { "path" } }))
        assert.equal("/x", M.build_key(parts, getter({ path = "/x" }), buf))
    end)

    it("checks key parts, vary names, methods and statuses", function()
        assert.is_true(M.check(conf()))
        local ok, err = M.check(conf({ key = { "method", "cookie:x" } }))
        assert.is_nil(ok)
        assert.matches("cookie:x", err, 1, true)
        assert.is_nil((M.check(conf({ key = {} }))))
        assert.is_nil((M.check(conf({ key = { "header:bad name" } }))))
        assert.is_nil((M.check(conf({ vary = { "a b" } }))))
        assert.is_nil((M.check(conf({ methods = { "get" } }))))
        local many = {}
        for i = 1, 17 do many[i] = 200 + i end
        assert.is_nil((M.check(conf({ statuses = many }))))
    end)
end)

describe("proxy-cache through the core", function()
    local origin, gw
    local function origin_route(name, headers)
        return { name = name, match = { paths = { "/" .. name } },
                 plugins = { { name = "response", config = { status = 200, body = name, headers = headers } } } }
    end

    setup(function()
        origin = assert(test.start({ admin = { listen = "off" }, routes = {
            origin_route("plain", {}),
            origin_route("private", { ["Cache-Control"] = "private, max-age=60" }),
            origin_route("nostore", { ["Cache-Control"] = "no-store" }),
            origin_route("nocache", { ["Cache-Control"] = "no-cache" }),
            origin_route("smaxage", { ["Cache-Control"] = "max-age=0, s-maxage=60" }),
            origin_route("maxage0", { ["Cache-Control"] = "max-age=0" }),
            origin_route("badage", { ["Cache-Control"] = "max-age=soon" }),
            origin_route("quoted", { ["Cache-Control"] = 'max-age="60"' }),
            origin_route("cookie", { ["Set-Cookie"] = "a=1" }),
            origin_route("varystar", { Vary = "*" }),
            origin_route("authed", {}),
            origin_route("authpublic", { ["Cache-Control"] = "public" }),
            origin_route("authsmax", { ["Cache-Control"] = "s-maxage=60" }),
            origin_route("aged", { ["Cache-Control"] = "max-age=10", Age = "100" }),
            origin_route("agedttl", { Age = "100" }),
            origin_route("aging", { ["Cache-Control"] = "max-age=600", Age = "100" }),
            origin_route("agelong", { ["Cache-Control"] = "max-age=99999999999" }),
            origin_route("ttllong", {}),
        } }))
        gw = assert(test.start({
            upstreams = { { name = "o", targets = { { address = origin:address() } } } },
            routes = { { name = "c", match = { paths = { "/" } }, upstream = "o",
                         plugins = { { name = "proxy-cache" } } },
                       { name = "long", match = { paths = { "/ttllong" } }, upstream = "o",
                         plugins = { { name = "proxy-cache", config = { ttl = "10000000h" } } } } },
        }))
    end)
    teardown(function()
        gw:stop()
        origin:stop()
    end)

    local function twice(path)
        local a = assert(gw:request({ path = path }))
        local b = assert(gw:request({ path = path }))
        return a.headers["x-cache-status"], b.headers["x-cache-status"], b
    end

    it("stores a plain 200 and answers it as a HIT", function()
        local a, b, res = twice("/plain")
        assert.same({ "MISS", "HIT" }, { a, b })
        assert.equal("plain", res.body)
    end)

    for path, why in pairs({ ["/private"] = "private", ["/nostore"] = "no-store", ["/nocache"] = "no-cache",
                             ["/maxage0"] = "max-age=0", ["/badage"] = "an unreadable max-age",
                             ["/cookie"] = "Set-Cookie", ["/varystar"] = "Vary: *" }) do
        it("never stores a response with " .. why, function()
            local a, b = twice(path)
            assert.same({ "BYPASS", "BYPASS" }, { a, b })
        end)
    end

    it("lets s-maxage win over max-age, and reads a quoted max-age", function()
        local a, b = twice("/smaxage")
        assert.same({ "MISS", "HIT" }, { a, b })
        a, b = twice("/quoted")
        assert.same({ "MISS", "HIT" }, { a, b })
    end)

    it("stores an answer to a request with Authorization only when the upstream says it may", function()
        -- RFC 9111 3.5: stored, the answer to alice's credentials went to every client
        local auth = { Authorization = "Basic YWxpY2U6c2VjcmV0" }
        local a = assert(gw:request({ path = "/authed", headers = auth }))
        local b = assert(gw:request({ path = "/authed" }))
        assert.same({ "BYPASS", "MISS" }, { a.headers["x-cache-status"], b.headers["x-cache-status"] })
        for _, path in ipairs({ "/authpublic", "/authsmax" }) do
            a = assert(gw:request({ path = path, headers = auth }))
            b = assert(gw:request({ path = path }))
            assert.same({ "MISS", "HIT" }, { a.headers["x-cache-status"], b.headers["x-cache-status"] })
        end
    end)

    it("counts a response's age from the upstream's Age (RFC 9111 4.2.3)", function()
        -- max-age=10 (or ttl's 60s) with Age: 100: stale already, so never stored
        for _, path in ipairs({ "/aged", "/agedttl" }) do
            local a, b = twice(path)
            assert.same({ "BYPASS", "BYPASS" }, { a, b })
        end
        local a, b, res = twice("/aging")
        assert.same({ "MISS", "HIT" }, { a, b })
        local age = tonumber(res.headers["age"])
        assert.is_true(age >= 100 and age < 110, "Age " .. tostring(res.headers["age"]))
    end)

    it("keeps a response fresh for centuries when max-age or ttl says so", function()
        -- 3170 years (max-age) and 1141 years (ttl) in ns overflowed 64 bits: the entry
        -- was stored already expired and every request went upstream (EXPIRED)
        for _, path in ipairs({ "/agelong", "/ttllong" }) do
            local a, b = twice(path)
            assert.same({ "MISS", "HIT" }, { a, b }, path)
        end
    end)

    it("bypasses methods it does not cache", function()
        local res = assert(gw:request({ method = "POST", path = "/plain", body = "x" }))
        assert.equal("BYPASS", res.headers["x-cache-status"])
    end)
end)
