-- response: a fixed answer with no upstream, against the real core through sluice.test.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local function route(name, path, config)
    return { name = name, match = { paths = { path } }, plugins = { { name = "response", config = config } } }
end

describe("response", function()
    local gw
    setup(function()
        gw = assert(test.start({
            routes = {
                route("defaults", "/defaults", nil),
                route("maint", "/maint", { status = 503, body = "down for maintenance\n",
                                           headers = { ["Content-Type"] = "text/plain", ["Retry-After"] = "600" } }),
                route("empty", "/empty", { status = 204, body = "ignored", headers = { ["X-Kept"] = "1" } }),
                route("notmod", "/notmod", { status = 304, body = "ignored", headers = { ETag = '"v1"' } }),
                route("created", "/created", { status = 201, body = '{"id":7}',
                                               headers = { ["Content-Type"] = "application/json" } }),
            },
        }))
    end)
    teardown(function() gw:stop() end)

    it("answers 200 with an empty body by default", function()
        local res = assert(gw:request({ path = "/defaults" }))
        assert.equal(200, res.status)
        assert.equal("", res.body)
        assert.equal("0", res.headers["content-length"])
    end)

    it("sends the configured status, body and headers", function()
        local res = assert(gw:request({ path = "/maint/x?y=1" }))
        assert.equal(503, res.status)
        assert.equal("down for maintenance\n", res.body)
        assert.equal("text/plain", res.headers["content-type"])
        assert.equal("600", res.headers["retry-after"])
        assert.equal(tostring(#"down for maintenance\n"), res.headers["content-length"])
    end)

    it("answers any method, and a POST body does not reach anything", function()
        local res = assert(gw:request({ method = "POST", path = "/created", body = "payload" }))
        assert.equal(201, res.status)
        assert.equal('{"id":7}', res.body)
        assert.equal("application/json", res.headers["content-type"])
    end)

    -- 304 too: a Content-Length there must be the 200's length, and a 0 would tell a cache
    -- refreshing its entry that the stored content is empty
    it("sends no body and no Content-Length with 204 and 304, but keeps their headers", function()
        for _, c in ipairs({ { "/empty", 204, "x-kept", "1" }, { "/notmod", 304, "etag", '"v1"' } }) do
            local res = assert(gw:request({ path = c[1] }))
            assert.equal(c[2], res.status)
            assert.equal(c[4], res.headers[c[3]])
            assert.is_nil(res.headers["content-length"])
            assert.is_nil(res.headers["transfer-encoding"])
            -- nothing after the head: the raw bytes end with the blank line
            assert.equal("\r\n\r\n", res.raw:sub(-4))
            assert.is_nil(res.raw:find("ignored", 1, true))
        end
    end)

    it("sends the Content-Length but no body to HEAD", function()
        local res = assert(gw:request({ method = "HEAD", path = "/maint" }))
        assert.equal(503, res.status)
        assert.equal(tostring(#"down for maintenance\n"), res.headers["content-length"])
        assert.equal("\r\n\r\n", res.raw:sub(-4))
    end)

    it("refuses at config load a 1xx status the core cannot send as a final answer", function()
        -- the core's response.exit takes 200..599 only, so a 1xx here would be a 500 on
        -- every request: the config must be rejected instead
        local g, err = test.start({ routes = { route("r", "/", { status = 101 }) } })
        if g then
            local res = g:request({ path = "/" })
            g:stop()
            error(("status 101 was accepted; a request then got %s"):format(res and res.status or "nothing"))
        end
        assert.matches("route 'r', plugin 'response': status: ", err, 1, true)
    end)

    it("refuses at config load a header every request would fail on (framing, bad name or value)", function()
        for _, h in ipairs({ { ["Content-Length"] = "99" }, { ["transfer-encoding"] = "chunked" },
                             { Connection = "close" }, { ["Bad Name"] = "x" }, { ["X-V"] = "a\r\nX-Smuggled: 1" } }) do
            local g, err = test.start({ routes = { route("r", "/", { body = "hi", headers = h }) } })
            if g then
                local res = g:request({ path = "/" })
                g:stop()
                error(("headers %s were accepted; a request then got %s"):format(next(h), res and res.status or "nothing"))
            end
            assert.matches("route 'r', plugin 'response': headers: '", err, 1, true)
        end
    end)

    it("rejects a status outside 200-599 and a non-string header value", function()
        local g, err = test.start({ routes = { route("r", "/", { status = 600 }) } })
        assert.is_nil(g)
        assert.matches("route 'r', plugin 'response': status: must be <= 599", err, 1, true)
        g, err = test.start({ routes = { route("r", "/", { headers = { ["X-N"] = 2 } }) } })
        assert.is_nil(g)
        assert.matches("headers.X-N: expected a string", err, 1, true)
    end)
end)
