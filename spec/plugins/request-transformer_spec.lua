-- request-transformer: headers, query, JSON body and uri, as the upstream receives them.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local cjson = require("cjson")

describe("request-transformer", function()
    local up, gw
    local function route(name, conf)
        return { name = name, match = { paths = { "/" .. name } }, upstream = "u",
                 plugins = { { name = "request-transformer", config = conf } } }
    end

    setup(function()
        up = test.upstream()
        gw = assert(test.start({ upstreams = { { name = "u", targets = { { address = up:address() } } } }, routes = {
            route("h", {
                remove = { headers = { "X-Drop" } },
                rename = { headers = { "X-Old:X-New" } },
                replace = { headers = { "X-Rep:replaced", "X-Absent:never" } },
                add = { headers = { "X-Add:added", "X-Keep:not-this" } },
                append = { headers = { "X-App:two" } },
            }),
            route("q", {
                remove = { querystring = { "drop" } },
                rename = { querystring = { "old:new" } },
                replace = { querystring = { "rep:r v", "absent:x" } },
                add = { querystring = { "add:a&b", "keep:no" } },
                append = { querystring = { "app:2" } },
            }),
            route("b", {
                remove = { body = { "secret" } },
                rename = { body = { "old:new" } },
                replace = { body = { "rep:R", "absent:x" } },
                add = { body = { "added:yes", "keep:no" } },
                append = { body = { "tags:t2", "one:o2" } },
                max_body = 200,
            }),
            route("u", { replace = { uri = "/fixed/path" } }),
            route("rx", { regex_uri = { "^/rx/(%w+)/(%w+)$", "/v2/$2/$1" } }),
        } }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    it("edits headers: remove, rename, replace only when present, add only when absent, append", function()
        local res = assert(gw:request({ path = "/h", headers = { ["X-Drop"] = "1", ["X-Old"] = "o", ["X-Rep"] = "r",
                                                               ["X-Keep"] = "mine", ["X-App"] = "one" } }))
        local hs = res.json().headers
        assert.is_nil(hs["x-drop"])
        assert.is_nil(hs["x-old"])
        assert.equal("o", hs["x-new"])
        assert.equal("replaced", hs["x-rep"])
        assert.is_nil(hs["x-absent"])
        assert.equal("added", hs["x-add"])
        assert.equal("mine", hs["x-keep"])
        assert.equal("one, two", hs["x-app"])
    end)

    it("edits query arguments, comparing names decoded and writing values encoded", function()
        local res = assert(gw:request({ path = "/q?drop=1&old=o&rep=1&keep=k&app=1&other=%41" }))
        assert.equal("new=o&keep=k&app=1&other=%41&rep=r%20v&add=a%26b&app=2", res.json().query)
    end)

    it("edits top-level JSON body fields", function()
        local body = cjson.encode({ secret = "s", old = 1, rep = "r", keep = "k", tags = { "t1" }, one = "o1" })
        local res = assert(gw:request({ method = "POST", path = "/b", body = body,
                                        headers = { ["Content-Type"] = "application/json" } }))
        local got = cjson.decode(res.json().body)
        assert.same({ new = 1, rep = "R", keep = "k", added = "yes", tags = { "t1", "t2" }, one = { "o1", "o2" } }, got)
    end)

    it("sends the fields no section names exactly as the client wrote them", function()
        -- decoding and encoding the whole body turned 1234567890123456 into
        -- 1.2345678901235e+15 and [] into {}
        local body = '{"id":1234567890123456,"list":[],"deep":{"a":[],"n":0.1},"tags":[ ],"old":1,"rep":2,"secret":0}'
        local res = assert(gw:request({ method = "POST", path = "/b", body = body,
                                        headers = { ["Content-Type"] = "application/json" } }))
        assert.equal('{"id":1234567890123456,"list":[],"deep":{"a":[],"n":0.1},"tags":["t2"],"new":1,"rep":"R",'
                     .. '"added":"yes","keep":"no","one":"o2"}', res.json().body)
    end)

    it("leaves a body that is not JSON, over max_body or chunked as it is", function()
        local res = assert(gw:request({ method = "POST", path = "/b", body = '{"secret":1}',
                                        headers = { ["Content-Type"] = "text/plain" } }))
        assert.equal('{"secret":1}', res.json().body)
        local big = '{"secret":"' .. ("x"):rep(300) .. '"}'
        res = assert(gw:request({ method = "POST", path = "/b", body = big, headers = { ["Content-Type"] = "application/json" } }))
        assert.equal(big, res.json().body)
        res = assert(gw:request({ raw = "POST /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
            .. "Transfer-Encoding: chunked\r\n\r\nc\r\n{\"secret\":1}\r\n0\r\n\r\n" }))
        assert.equal('{"secret":1}', res.json().body)
    end)

    it("replaces the uri, or rewrites it with regex_uri captures; the query is kept", function()
        assert.equal("/fixed/path", assert(gw:request({ path = "/u/x?a=1" })).json().path)
        local res = assert(gw:request({ path = "/rx/one/two?a=1" }))
        assert.equal("/v2/two/one", res.json().path)
        assert.equal("a=1", res.json().query)
        assert.equal("/rx/not/matched/here", assert(gw:request({ path = "/rx/not/matched/here" })).json().path)
    end)

    it("refuses malformed entries", function()
        local function starts(conf)
            local g = test.start({ routes = { { name = "r", match = { paths = { "/" } },
                plugins = { { name = "request-transformer", config = conf }, { name = "echo" } } } } })
            if g then g:stop() end
            return g ~= nil
        end
        assert.is_true(starts({ add = { headers = { "X-A:1" } } }))
        assert.is_false(starts({ add = { headers = { "no-colon" } } }))
        assert.is_false(starts({ add = { headers = { "Content-Length:5" } } }))
        assert.is_false(starts({ rename = { headers = { "X-A:bad name" } } }))
        assert.is_false(starts({ replace = { uri = "no-slash" } }))
        assert.is_false(starts({ regex_uri = { "(" , "/x" } }))
        assert.is_false(starts({ regex_uri = { "^/a" } }))
    end)
end)
