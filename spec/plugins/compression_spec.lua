-- compression: the coding chosen from Accept-Encoding (q-values, *, identity), the type
-- matcher, and the head of a compressed answer as the client receives it. The decoded
-- bodies (gzip, br, 1 B to 100 MiB, HTTP/1.1 and HTTP/2) are checked through the real
-- binary by ctest/integration/test_compression.py.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local compress = require("sluice.compress")

describe("compression: choosing a coding", function()
    local BOTH, GZIP_FIRST, GZIP = { "br", "gzip" }, { "gzip", "br" }, { "gzip" }
    local function choose(ae, prefer) return compress.choose(ae, prefer or BOTH) end

    it("takes the highest q, br before gzip at equal q", function()
        assert.equal("br", choose("gzip, deflate, br"))
        assert.equal("br", choose("br;q=1.0, gzip;q=1"))
        assert.equal("gzip", choose("gzip, deflate, br", GZIP_FIRST))
        assert.equal("gzip", choose("br;q=0.5, gzip;q=0.8"))
        assert.equal("br", choose("br;q=0.9, gzip;q=0.8"))
        assert.equal("gzip", choose("gzip"))
        assert.equal("gzip", choose("gzip, br", GZIP)) -- br not offered
        assert.equal("gzip", choose("x-gzip"))
        assert.equal("gzip", choose("GZIP ; Q=0.5"))
        assert.equal("gzip", choose("gzip;q=0.5")) -- unlisted identity is never preferred
    end)

    it("never picks a coding of q=0, nor one the client did not list", function()
        assert.is_nil(choose("br;q=0, gzip;q=0"))
        assert.equal("gzip", choose("br;q=0, gzip"))
        assert.is_nil(choose("deflate"))
        assert.is_nil(choose("identity"))
        assert.is_nil(choose(""))
        assert.is_nil(choose(nil)) -- no header: identity
        assert.is_nil(choose("br", GZIP))
    end)

    it("weighs * for unlisted codings and identity", function()
        assert.equal("br", choose("*"))
        assert.equal("gzip", choose("*, br;q=0"))
        assert.equal("br", choose("*;q=0.5, gzip;q=0.1"))
        assert.is_nil(choose("*;q=0"))
        assert.equal("gzip", choose("*;q=0, gzip")) -- identity refused too: gzip
    end)

    it("prefers identity when the client weighs it more than every coding", function()
        assert.is_nil(choose("gzip;q=0.5, identity"))
        assert.is_nil(choose("gzip;q=0.5, br;q=0.4, identity;q=0.6"))
        assert.equal("gzip", choose("gzip;q=0.5, identity;q=0.5")) -- a tie goes to the coding
        assert.equal("gzip", choose("gzip, identity;q=0"))
        -- refusing identity and every coding offered still gets identity: no 406
        assert.is_nil(choose("identity;q=0, deflate"))
    end)

    it("ignores elements it cannot read", function()
        assert.equal("gzip", choose("br;q=2, gzip"))
        assert.equal("gzip", choose("br;q=abc, gzip"))
        assert.equal("br", choose(" , ,br"))
        assert.equal("gzip", choose("gzip;q=0.3, gzip;q=0.2, br;q=0.25")) -- a repeat keeps its best q
    end)

    it("answers repeated values from its cache, the same as the first time", function()
        for _ = 1, 300 do assert.equal("br", choose("gzip, deflate, br")) end
        for i = 1, 600 do assert.is_nil(choose("deflate;q=0." .. i)) end -- the cache is bounded
        assert.equal("gzip", choose("gzip;q=0.7, br;q=0.6"))
    end)
end)

describe("compression: matching types", function()
    local m = compress.types({ "text/*", "application/json", "application/javascript", "image/svg+xml" })

    it("matches exact types, type/* prefixes, case-insensitively, without parameters", function()
        assert.is_true(m("text/html"))
        assert.is_true(m("text/plain; charset=utf-8"))
        assert.is_true(m("TEXT/CSS"))
        assert.is_true(m("application/json"))
        assert.is_true(m(" application/json ;charset=utf-8"))
        assert.is_true(m("image/svg+xml"))
        assert.is_false(m("application/jsonp"))
        assert.is_false(m("image/png"))
        assert.is_false(m("application/octet-stream"))
        assert.is_false(m("textual/plain"))
        assert.is_false(m(""))
        assert.is_false(m(nil))
    end)

    it("answers repeated values the same as the first time, its memory bounded", function()
        for _ = 1, 3 do assert.is_true(m("text/html; charset=utf-8")) end
        for i = 1, 600 do assert.is_false(m("image/x-" .. i)) end
        assert.is_true(m("text/html; charset=utf-8"))
        assert.is_false(m("image/png"))
    end)

    it("takes */* and * as anything", function()
        assert.is_true(compress.types({ "*/*" })("application/octet-stream"))
        assert.is_true(compress.types({ "*" })("image/png"))
        assert.is_false(compress.types({})("text/plain"))
    end)
end)

describe("compression plugin", function()
    local gw
    local BIG = ("sluice compresses this line.\n"):rep(100) -- 2900 bytes
    local function route(name, answer, conf)
        return { name = name, match = { paths = { "/" .. name } },
                 plugins = { { name = "compression", config = conf }, { name = "response", config = answer } } }
    end

    setup(function()
        gw = assert(test.start({ routes = {
            route("text", { headers = { ["Content-Type"] = "text/plain", ETag = '"v1"', Vary = "Origin" }, body = BIG }),
            route("small", { headers = { ["Content-Type"] = "text/plain", ETag = '"v1"' }, body = "tiny" }),
            route("png", { headers = { ["Content-Type"] = "image/png" }, body = BIG }),
            route("encoded", { headers = { ["Content-Type"] = "text/plain", ["Content-Encoding"] = "gzip" }, body = BIG }),
            route("notransform", { headers = { ["Content-Type"] = "text/plain", ["Cache-Control"] = "public, no-transform" },
                                   body = BIG }),
            route("gzonly", { headers = { ["Content-Type"] = "application/json" }, body = BIG },
                  { encodings = { "gzip" }, level = { gzip = 9 } }),
            { name = "twocc", match = { paths = { "/twocc" } }, plugins = {
                { name = "headers", config = { response = { add = { ["Cache-Control"] = "no-transform" } } } },
                { name = "compression" },
                { name = "response", config = { headers = { ["Content-Type"] = "text/plain", ["Cache-Control"] = "public" },
                                                body = BIG } } } },
        } }))
    end)
    teardown(function() gw:stop() end)

    local function get(path, ae)
        return assert(gw:request({ path = path, headers = { ["Accept-Encoding"] = ae } }))
    end

    it("encodes, weakens the ETag and appends to Vary", function()
        local res = get("/text", "gzip, br")
        assert.equal(200, res.status)
        assert.equal("br", res.headers["content-encoding"])
        assert.equal('W/"v1"', res.headers["etag"])
        assert.equal("Origin, Accept-Encoding", res.headers["vary"])
        assert.is_true(#res.body < #BIG / 4)
        assert.equal(tostring(#res.body), res.headers["content-length"]) -- a whole answer keeps an exact length
        local gz = get("/text", "gzip")
        assert.equal("gzip", gz.headers["content-encoding"])
        assert.equal("\31\139", gz.body:sub(1, 2)) -- the gzip magic
    end)

    it("sends identity with Vary when the client accepts no offered coding", function()
        local res = get("/text", "deflate")
        assert.is_nil(res.headers["content-encoding"])
        assert.equal('"v1"', res.headers["etag"])
        assert.equal("Origin, Accept-Encoding", res.headers["vary"])
        assert.equal(BIG, res.body)
        assert.equal(BIG, get("/text", nil).body)
        assert.equal(BIG, get("/gzonly", "br").body)
        assert.equal("gzip", get("/gzonly", "br, gzip").headers["content-encoding"])
    end)

    it("leaves short, untyped, encoded and no-transform answers alone", function()
        local res = get("/small", "gzip")
        assert.equal("tiny", res.body)
        assert.is_nil(res.headers["content-encoding"])
        assert.equal('"v1"', res.headers["etag"]) -- put back: the answer was too short after all
        res = get("/png", "gzip")
        assert.equal(BIG, res.body)
        assert.is_nil(res.headers["vary"])
        res = get("/encoded", "br")
        assert.equal("gzip", res.headers["content-encoding"])
        assert.equal(BIG, res.body)
        res = get("/notransform", "br")
        assert.is_nil(res.headers["content-encoding"])
        assert.equal(BIG, res.body)
    end)

    it("reads every field of Accept-Encoding and Cache-Control, not the first alone", function()
        local function raw(path, ...)
            local lines = { "GET " .. path .. " HTTP/1.1", "Host: x", "Connection: close" }
            for _, f in ipairs({ ... }) do lines[#lines + 1] = f end
            return assert(gw:request({ raw = table.concat(lines, "\r\n") .. "\r\n\r\n" }))
        end
        -- br refused in the second field: br would reach a client that cannot read it
        local res = raw("/text", "Accept-Encoding: *", "Accept-Encoding: br;q=0")
        assert.equal("gzip", res.headers["content-encoding"])
        res = raw("/text", "Accept-Encoding: br;q=0", "Accept-Encoding: gzip")
        assert.equal("gzip", res.headers["content-encoding"])
        res = raw("/twocc", "Accept-Encoding: gzip")
        assert.equal("public, no-transform", res.headers["cache-control"])
        assert.is_nil(res.headers["content-encoding"])
        assert.equal(BIG, res.body)
    end)

    it("refuses a bad config", function()
        local function starts(conf)
            local g = test.start({ routes = { route("r", {}, conf) } })
            if g then g:stop() end
            return g ~= nil
        end
        assert.is_true(starts({ level = { brotli = 11 }, min_length = "1KiB" }))
        assert.is_false(starts({ level = { gzip = 0 } }))
        assert.is_false(starts({ level = { brotli = 12 } }))
        assert.is_false(starts({ encodings = { "zstd" } }))
        assert.is_false(starts({ encodings = { "gzip", "gzip" } }))
        assert.is_false(starts({ types = { "html" } }))
        assert.is_false(starts({ encodings = {} }))
    end)

    it("refuses a chain with a body_filter after it", function()
        local function chain(plugins)
            local g, errs = test.start({ routes = { { name = "r", match = { paths = { "/" } }, plugins = plugins } } })
            if g then g:stop() end
            return g ~= nil, errs
        end
        local answer = { name = "response", config = {} }
        assert.is_true(chain({ { name = "response-transformer" }, { name = "compression" }, answer }))
        local ok, errs = chain({ { name = "compression" }, { name = "response-transformer" }, answer })
        assert.is_false(ok)
        assert.matches("must come after 'response%-transformer'", tostring(errs))
    end)
end)
