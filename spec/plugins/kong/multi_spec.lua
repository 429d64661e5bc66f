-- Repeated header fields through the Kong PDK (spec/fixtures/kong/kong-multi): Kong reads
-- them as lists (ngx.req.get_headers) and writes a list value as one field per element.
package.path = "lua/?.lua;lua/?/init.lua;spec/fixtures/?.lua;" .. package.path
local kg = require("kong_gateway")
local cjson = require("cjson")
local ffi = require("ffi")
pcall(ffi.cdef, "int usleep(unsigned int usec);")

local function raw(lines)
    return table.concat(lines, "\r\n") .. "\r\n\r\n"
end

local function fields(res, name)
    local out = {}
    for _, f in ipairs(res.header_list) do
        if f[1]:lower() == name then out[#out + 1] = f[2] end
    end
    return out
end

describe("Kong PDK: repeated header fields", function()
    local gw, up
    setup(function()
        gw, up = kg.start({ kg.route("m", { { name = "kong-multi" } }) })
    end)
    teardown(function() gw:stop() up:stop() end)

    it("kong.request.get_headers gives a repeated header as a list; max counts fields", function()
        local res = assert(gw:request({ raw = raw({ "GET /m HTTP/1.1", "Host: localhost", "X-Mode: get_headers",
                                                    "X-M: 1", "X-M: 2", "Connection: close" }) }))
        assert.equal(200, res.status, res.body)
        local t = res.json()
        assert.same({ "1", "2" }, t.all["x-m"])
        assert.equal("1", t.first) -- get_header: the first one
        local n = 0
        for _, v in pairs(t.two) do n = n + (type(v) == "table" and #v or 1) end
        assert.equal(2, n)
    end)

    it("get_headers tables read any case, and `_` for `-`, as Kong's (ngx.req/resp.get_headers)", function()
        local res = assert(gw:request({ raw = raw({ "GET /m HTTP/1.1", "Host: localhost", "X-Mode: names",
                                                    "X-M: 1", "X-M: 2", "Connection: close" }) }))
        assert.equal(200, res.status, res.body)
        assert.same({ "names", "names", { "1", "2" }, { "1", "2" }, "names" }, res.json())
        local ct = res.headers["content-type"]
        assert.same({ ct, ct, ct }, cjson.decode(res.headers["x-names"]))
    end)

    it("kong.response.exit sends a list value as one field per element", function()
        local res = assert(gw:request({ path = "/m", headers = { ["X-Mode"] = "exit" } }))
        assert.equal(200, res.status)
        assert.same({ "1", "2" }, fields(res, "x-l"))
        assert.same({ "one" }, fields(res, "x-one"))
    end)

    it("kong.service.request.set_header/add_header take lists", function()
        local res = assert(gw:request({ path = "/m", headers = { ["X-Mode"] = "set" } }))
        assert.equal(200, res.status)
        assert.equal("u1, u2, u3", res.json().headers["x-up"])
    end)

    it("kong.response.set_header/add_header/set_headers take lists; get_headers reads them back as one", function()
        local res = assert(gw:request({ path = "/m", headers = { ["X-Mode"] = "resp" } }))
        assert.equal(200, res.status)
        assert.same({ "s1", "s2", "s3" }, fields(res, "x-set"))
        assert.same({ "h1", "h2" }, fields(res, "x-hs"))
        assert.same({ "s1", "s2", "s3" }, cjson.decode(fields(res, "x-got")[1]))
    end)

    local function serialized(req)
        local key = "ser-" .. os.time() .. "-" .. math.random(1e9)
        req.headers["X-Serialize"] = key
        assert(gw:request(req))
        for _ = 1, 200 do
            local res = assert(gw:request({ path = "/m", headers = { ["X-Mode"] = "peek", ["X-Key"] = key } }))
            local got = res.headers["x-peek"]
            if got then return cjson.decode(got) end
            ffi.C.usleep(5000)
        end
        error("nothing serialized")
    end

    it("kong.log.serialize redacts credentials, lists repeated headers and names the upstream query", function()
        local s = serialized({ path = "/m?q=1", headers = { ["X-Mode"] = "rewrite", Authorization = "Basic Zm9vOmJhcg==",
                                                              ["Proxy-Authorization"] = "Basic eDp5" } })
        assert.equal("REDACTED", s.request.headers.authorization)
        assert.equal("REDACTED", s.request.headers["proxy-authorization"])
        assert.equal("/new?q=2", s.upstream_uri)
        assert.same({ "s1", "s2", "s3" }, s.response.headers["x-set"])
        assert.equal("string", type(s.response.headers["content-type"]))
    end)

    it("kong.request's path is the client's after kong.service.request.set_path; the query follows set_raw_query", function()
        local res = assert(gw:request({ path = "/m/orig?o=1", headers = { ["X-Mode"] = "client-path" } }))
        assert.equal(200, res.status)
        assert.equal("/rewritten", res.json().path) -- the upstream got the new one
        assert.same({ "/m/orig", "/m/orig", "/m/orig?o=1", "n=1", "/m/orig", "/m/orig?o=1" },
                    cjson.decode(res.headers["x-read"]))
    end)
end)
