-- request-validation: the JSON Schema subset over body, query and headers; 400 naming the
-- first failing path.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local cjson = require("cjson")

local BODY = {
    type = "object",
    required = { "name", "items" },
    additionalProperties = false,
    properties = {
        name = { type = "string", minLength = 2, maxLength = 5, pattern = "^%a+$" },
        kind = { enum = { "a", "b" } },
        age = { type = "integer", minimum = 0, maximum = 150 },
        score = { type = "number" },
        tags = { type = "array", items = { type = "string" } },
        items = { type = "array", items = { type = "object", required = { "id" },
                                            properties = { id = { type = "integer" } } } },
        meta = { type = "object", additionalProperties = { type = "string" } },
        maybe = { type = { "string", "null" } },
        nick = { type = "string", maxLength = 3 },
    },
}

describe("request-validation", function()
    local up, gw
    setup(function()
        up = test.upstream()
        gw = assert(test.start({ upstreams = { { name = "u", targets = { { address = up:address() } } } }, routes = {
            { name = "b", match = { paths = { "/b" } }, upstream = "u",
              plugins = { { name = "request-validation", config = { body_schema = BODY, max_body = 1000 } } } },
            { name = "q", match = { paths = { "/q" } }, upstream = "u",
              plugins = { { name = "request-validation", config = {
                  query_schema = { type = "object", required = { "page" }, properties = {
                      page = { type = "integer", minimum = 1 }, flag = { type = "boolean" } } },
                  header_schema = { type = "object", required = { "X-Api-Version" }, properties = {
                      ["X-Api-Version"] = { enum = { "1", "2" } } } },
                  rejected_code = 422 } } } },
        } }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    local function post(doc)
        local body = type(doc) == "string" and doc or cjson.encode(doc)
        return assert(gw:request({ method = "POST", path = "/b", body = body,
                                   headers = { ["Content-Type"] = "application/json" } }))
    end
    local function fails(doc, path)
        local res = post(doc)
        assert.equal(400, res.status)
        assert.equal(path, res.json().path)
        return res.json().reason
    end

    it("passes a valid body to the upstream unchanged", function()
        local doc = '{"name":"abc","items":[{"id":1}],"age":3,"tags":["x"],"meta":{"k":"v"},"maybe":null,"kind":"a"}'
        local res = post(doc)
        assert.equal(200, res.status)
        assert.equal(doc, res.json().body)
    end)

    it("names the first failing path and why", function()
        assert.equal("is required", fails({ items = {} }, "body.name"))
        assert.equal("expected string", fails({ name = 5, items = {} }, "body.name"))
        assert.equal("shorter than 2", fails({ name = "a", items = {} }, "body.name"))
        assert.equal("longer than 5", fails({ name = "abcdef", items = {} }, "body.name"))
        assert.equal("does not match the pattern", fails({ name = "ab1", items = {} }, "body.name"))
        assert.equal("not one of the allowed values", fails({ name = "ab", items = {}, kind = "c" }, "body.kind"))
        assert.equal("expected integer", fails({ name = "ab", items = {}, age = 1.5 }, "body.age"))
        assert.equal("must be <= 150", fails({ name = "ab", items = {}, age = 151 }, "body.age"))
        assert.equal("must be >= 0", fails({ name = "ab", items = {}, age = -1 }, "body.age"))
        assert.equal("is required", fails({ name = "ab", items = { { id = 1 }, {} } }, "body.items[1].id"))
        assert.equal("expected string", fails({ name = "ab", items = {}, tags = { "a", 2 } }, "body.tags[1]"))
        assert.equal("is not allowed", fails({ name = "ab", items = {}, zz = 1, aa = 2 }, "body.aa"))
        assert.equal("expected string", fails({ name = "ab", items = {}, meta = { k = 1 } }, "body.meta.k"))
        assert.equal("expected string or null", fails({ name = "ab", items = {}, maybe = 1 }, "body.maybe"))
        assert.equal("expected object", fails("[1]", "body"))
        assert.equal("not valid JSON", fails("{nope", "body"))
        -- lua-cjson's default reader takes these; no JSON parser upstream does
        assert.equal("not valid JSON", fails('{"name":"ab","items":[],"age":0x10}', "body"))
        assert.equal("not valid JSON", fails('{"name":"ab","items":[],"age":Infinity}', "body"))
        assert.equal("not valid JSON", fails('{"name":"ab","items":[],"age":NaN}', "body"))
    end)

    it("counts characters, not bytes", function()
        assert.equal(200, post({ name = "ab", items = {}, nick = ("ü"):rep(3) }).status)
        assert.equal("longer than 3", fails({ name = "ab", items = {}, nick = ("ü"):rep(4) }, "body.nick"))
    end)

    it("refuses a body over max_body with 413", function()
        assert.equal(413, post({ name = "ab", items = {}, tags = { ("x"):rep(1000) } }).status)
    end)

    it("reads query arguments and headers as their declared types", function()
        local ok = assert(gw:request({ path = "/q?page=2&flag=true", headers = { ["X-Api-Version"] = "2" } }))
        assert.equal(200, ok.status)
        local res = assert(gw:request({ path = "/q?page=0", headers = { ["X-Api-Version"] = "2" } }))
        assert.equal(422, res.status)
        assert.equal("query.page", res.json().path)
        res = assert(gw:request({ path = "/q?page=x", headers = { ["X-Api-Version"] = "2" } }))
        assert.equal("query.page", res.json().path)
        -- only numbers as JSON writes them: Lua's tonumber takes all of these
        for _, page in ipairs({ "0x10", "inf", "%201", "1%20", "nan", "1e", "--1" }) do
            res = assert(gw:request({ path = "/q?page=" .. page, headers = { ["X-Api-Version"] = "2" } }))
            assert.equal(422, res.status, page)
            assert.equal("query.page", res.json().path)
        end
        for _, page in ipairs({ "1e2", "10", "2.0" }) do
            res = assert(gw:request({ path = "/q?page=" .. page, headers = { ["X-Api-Version"] = "2" } }))
            assert.equal(200, res.status, page)
        end
        res = assert(gw:request({ path = "/q?page=1&flag=maybe", headers = { ["X-Api-Version"] = "2" } }))
        assert.equal("query.flag", res.json().path)
        res = assert(gw:request({ path = "/q?page=1" }))
        assert.equal("headers.x-api-version", res.json().path)
        res = assert(gw:request({ path = "/q?page=1", headers = { ["X-Api-Version"] = "3" } }))
        assert.equal("headers.x-api-version", res.json().path)
    end)

    it("refuses schemas it cannot run", function()
        local function starts(conf)
            local g = test.start({ routes = { { name = "r", match = { paths = { "/" } },
                plugins = { { name = "request-validation", config = conf }, { name = "echo" } } } } })
            if g then g:stop() end
            return g ~= nil
        end
        assert.is_true(starts({ body_schema = { type = "object" } }))
        assert.is_false(starts({}))
        assert.is_false(starts({ body_schema = { type = "object", oneOf = {} } }))
        assert.is_false(starts({ body_schema = { type = "thing" } }))
        assert.is_false(starts({ body_schema = { properties = { a = { minimum = "1" } } } }))
        assert.is_false(starts({ body_schema = { type = "string", pattern = "(" } }))
    end)
end)
