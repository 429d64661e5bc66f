-- request-size-limit: 413 past `max`, for a Content-Length and a chunked body alike.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local function chunked(body, piece)
    local parts = {}
    for i = 1, #body, piece do
        local s = body:sub(i, i + piece - 1)
        parts[#parts + 1] = ("%x\r\n%s\r\n"):format(#s, s)
    end
    return table.concat(parts) .. "0\r\n\r\n"
end

local function raw(path, head, body)
    return ("POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n%s"):format(path, head, body)
end

describe("request-size-limit", function()
    local up, gw

    setup(function()
        up = test.upstream()
        local function route(name, max)
            return { name = name, match = { paths = { "/" .. name } }, upstream = "u",
                     plugins = { { name = "request-size-limit", config = { max = max } } } }
        end
        gw = assert(test.start({ upstreams = { { name = "u", targets = { { address = up:address() } } } },
                                 routes = { route("small", 10), route("kib", "1KiB"), route("zero", 0) } }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    it("passes a Content-Length body up to max, refuses one byte more with 413", function()
        local res = assert(gw:request({ method = "POST", path = "/small", body = ("x"):rep(10) }))
        assert.equal(200, res.status)
        assert.equal(("x"):rep(10), res.json().body)
        res = assert(gw:request({ method = "POST", path = "/small", body = ("x"):rep(11) }))
        assert.equal(413, res.status)
        assert.equal("request body too large", res.json().error)
    end)

    it("reads a size with units", function()
        assert.equal(200, assert(gw:request({ method = "POST", path = "/kib", body = ("y"):rep(1024) })).status)
        assert.equal(413, assert(gw:request({ method = "POST", path = "/kib", body = ("y"):rep(1025) })).status)
    end)

    it("counts a chunked body's bytes, not its framing", function()
        local body = ("z"):rep(10)
        local res = assert(gw:request({ raw = raw("/small", "Transfer-Encoding: chunked\r\n", chunked(body, 3)) }))
        assert.equal(200, res.status)
        assert.equal(body, res.json().body)
        res = assert(gw:request({ raw = raw("/small", "Transfer-Encoding: chunked\r\n", chunked(body .. "!", 3)) }))
        assert.equal(413, res.status)
    end)

    it("lets bodiless requests through, also at max 0", function()
        assert.equal(200, assert(gw:request({ path = "/zero" })).status)
        assert.equal(413, assert(gw:request({ method = "POST", path = "/zero", body = "a" })).status)
        local res = assert(gw:request({ raw = raw("/zero", "Transfer-Encoding: chunked\r\n", "1\r\na\r\n0\r\n\r\n") }))
        assert.equal(413, res.status)
    end)

    it("refuses a config without max or with a malformed size", function()
        local function bad(conf)
            local g, errs = test.start({ routes = { { name = "r", match = { paths = { "/" } },
                plugins = { { name = "request-size-limit", config = conf }, { name = "echo" } } } } })
            if g then g:stop() end
            return g == nil and errs
        end
        assert.truthy(bad({}))
        assert.truthy(bad({ max = "10 MB" }))
        assert.truthy(bad({ max = -1 }))
    end)
end)
