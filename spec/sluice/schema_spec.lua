-- sluice.schema: validate() and check_schema(), called directly (pure Lua, no gateway).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local schema = require("sluice.schema")

-- validate, asserting no errors; returns the filled config
local function ok(s, conf)
    local out, errs = schema.validate(s, conf)
    assert.same({}, errs)
    return out
end

-- validate, returning the errors only
local function errs_of(s, conf)
    local _, errs = schema.validate(s, conf)
    return errs
end

local function one(s, conf)
    local errs = errs_of(s, conf)
    assert.equal(1, #errs, "expected one error, got " .. #errs)
    return errs[1]
end

describe("sluice.schema.validate", function()
    describe("types", function()
        it("string", function()
            local s = { v = { type = "string" } }
            assert.same({ v = "x" }, ok(s, { v = "x" }))
            assert.same({ v = "" }, ok(s, { v = "" }))
            assert.same({ path = "v", at = "value", msg = "expected a string" }, one(s, { v = 1 }))
            assert.same({ path = "v", at = "value", msg = "expected a string" }, one(s, { v = true }))
            assert.same({ path = "v", at = "value", msg = "expected a string" }, one(s, { v = { "x" } }))
        end)

        it("duration: 500ms, 1s, 1m, 1h or a number of seconds, validated to seconds", function()
            local s = { v = { type = "duration", min = 0.1, max = 7200 } }
            assert.same({ v = 0.5 }, ok(s, { v = "500ms" }))
            assert.same({ v = 1 }, ok(s, { v = "1s" }))
            assert.same({ v = 60 }, ok(s, { v = "1m" }))
            assert.same({ v = 3600 }, ok(s, { v = "1h" }))
            assert.same({ v = 600 }, ok(s, { v = 600 }))   -- existing numeric configs keep working
            assert.same({ v = 2.5 }, ok(s, { v = 2.5 }))
            local bad = "expected a duration: 500ms, 10s, 5m, 1h, or a number of seconds"
            for _, x in ipairs({ "10", "1.5s", "1m30s", "10 s", "5d", "", "-1s", true, {} }) do
                assert.same({ path = "v", at = "value", msg = bad }, one(s, { v = x }))
            end
            assert.same({ path = "v", at = "value", msg = "must be >= 0.1s" }, one(s, { v = "50ms" }))
            assert.same({ path = "v", at = "value", msg = "must be <= 7200s" }, one(s, { v = "3h" }))
            assert.same({ path = "v", at = "value", msg = "must be >= 0s" }, one({ v = { type = "duration" } }, { v = -1 }))
            -- a default in units goes through the spec too
            assert.same({ v = 90 }, ok({ v = { type = "duration", default = "90s" } }, {}))
            -- the core's bounds: inf (1e400 in YAML) or NaN is no duration, nor are more
            -- milliseconds than 64 bits hold (a plugin got Access-Control-Max-Age: inf, a
            -- cache ttl that expired at once, a 500 on every request for rate-limit's per)
            local any = { v = { type = "duration" } }
            assert.same({ v = 3600e6 }, ok(any, { v = "1000000h" }))
            local finite = "must be a finite number of seconds"
            for _, x in ipairs({ math.huge, -math.huge, 0 / 0 }) do
                assert.same({ path = "v", at = "value", msg = finite }, one(any, { v = x }))
            end
            for _, x in ipairs({ "99999999999999999999h", "18446744073709552s", 1e17 }) do
                assert.same({ path = "v", at = "value", msg = "duration is too large" }, one(any, { v = x }))
            end
        end)

        it("size: 512, 64KiB, 10MiB, 1GiB or a number of bytes, validated to bytes", function()
            local s = { v = { type = "size", max = 2 * 1024 ^ 3 } }
            assert.same({ v = 512 }, ok(s, { v = 512 }))
            assert.same({ v = 512 }, ok(s, { v = "512" }))
            assert.same({ v = 65536 }, ok(s, { v = "64KiB" }))
            assert.same({ v = 10 * 1024 * 1024 }, ok(s, { v = "10MiB" }))
            assert.same({ v = 1024 ^ 3 }, ok(s, { v = "1GiB" }))
            local bad = "expected a size: 512, 64KiB, 10MiB, 1GiB, or a number of bytes"
            for _, x in ipairs({ "10MB", "1k", "1.5MiB", "10 MiB", 1.5, "-1", false }) do
                assert.same({ path = "v", at = "value", msg = bad }, one(s, { v = x }))
            end
            assert.same({ path = "v", at = "value", msg = "must be <= 2147483648 bytes" }, one(s, { v = "3GiB" }))
            assert.same({ path = "v", at = "value", msg = "must be >= 0 bytes" }, one(s, { v = -1 }))
            local any = { v = { type = "size" } }
            assert.same({ path = "v", at = "value", msg = "must be a finite number of bytes" },
                        one(any, { v = math.huge }))
            assert.same({ path = "v", at = "value", msg = "size is too large" }, one(any, { v = "99999999999999999999GiB" }))
        end)

        it("every built-in plugin takes its durations in units", function()
            require("sluice.test") -- loads the core the plugins' modules bind to
            local cases = {
                { "cors", { max_age = "10m" }, "max_age", 600 },
                { "jwt-auth", { algorithms = { "HS256" }, secret_env = "X", jwks_refresh = "5m",
                                jwks_timeout = "500ms", leeway = "1m" }, "jwks_timeout", 0.5 },
                { "rate-limit", { rate = 10, per = "1m" }, "per", 60 },
            }
            for _, c in ipairs(cases) do
                local mod = dofile("plugins/" .. c[1] .. ".lua")
                local out = ok(mod.schema, c[2])
                assert.equal(c[4], out[c[3]], c[1])
            end
        end)

        it("number", function()
            local s = { v = { type = "number" } }
            assert.same({ v = 1.5 }, ok(s, { v = 1.5 }))
            assert.same({ v = -3 }, ok(s, { v = -3 }))
            assert.same({ path = "v", at = "value", msg = "expected a number" }, one(s, { v = "1.5" }))
        end)

        it("integer, accepting numbers without a fraction", function()
            local s = { v = { type = "integer" } }
            assert.same({ v = 3 }, ok(s, { v = 3 }))
            assert.same({ v = 3 }, ok(s, { v = 3.0 }))
            assert.same({ path = "v", at = "value", msg = "expected an integer" }, one(s, { v = 3.5 }))
            assert.same({ path = "v", at = "value", msg = "expected an integer" }, one(s, { v = "3" }))
        end)

        it("boolean", function()
            local s = { v = { type = "boolean" } }
            assert.same({ v = false }, ok(s, { v = false }))
            assert.same({ v = true }, ok(s, { v = true }))
            assert.same({ path = "v", at = "value", msg = "expected a boolean (true or false)" }, one(s, { v = "yes" }))
            assert.same({ path = "v", at = "value", msg = "expected a boolean (true or false)" }, one(s, { v = 1 }))
        end)

        it("enum, compared with ==", function()
            local s = { v = { type = "enum", one_of = { 301, 302, "temp" } } }
            assert.same({ v = 302 }, ok(s, { v = 302 }))
            assert.same({ v = "temp" }, ok(s, { v = "temp" }))
            assert.same({ path = "v", at = "value", msg = "expected one of: 301, 302, temp" }, one(s, { v = "302" }))
            assert.same({ path = "v", at = "value", msg = "expected one of: 301, 302, temp" }, one(s, { v = 303 }))
        end)

        it("array", function()
            local s = { v = { type = "array" } }
            assert.same({ v = { 1, "a", true } }, ok(s, { v = { 1, "a", true } }))
            assert.same({ v = {} }, ok(s, { v = {} }))
            assert.same({ path = "v", at = "value", msg = "expected a list" }, one(s, { v = { a = 1 } }))
            assert.same({ path = "v", at = "value", msg = "expected a list" }, one(s, { v = { [1] = "a", [3] = "c" } }))
            assert.same({ path = "v", at = "value", msg = "expected a list" }, one(s, { v = "a" }))
        end)

        it("map", function()
            local s = { v = { type = "map" } }
            assert.same({ v = { a = 1, b = "x" } }, ok(s, { v = { a = 1, b = "x" } }))
            assert.same({ v = {} }, ok(s, { v = {} }))
            assert.same({ path = "v", at = "value", msg = "expected a mapping" }, one(s, { v = { "a", "b" } }))
            assert.same({ path = "v", at = "value", msg = "expected a mapping" }, one(s, { v = 1 }))
        end)

        it("record", function()
            local s = { v = { type = "record", fields = { a = { type = "string" }, b = { type = "integer" } } } }
            assert.same({ v = { a = "x", b = 2 } }, ok(s, { v = { a = "x", b = 2 } }))
            assert.same({ v = {} }, ok(s, { v = {} }))
            assert.same({ path = "v", at = "value", msg = "expected a mapping" }, one(s, { v = { "x" } }))
            assert.same({ path = "v", at = "value", msg = "expected a mapping" }, one(s, { v = "x" }))
            assert.same({ path = "v.b", at = "value", msg = "expected an integer" }, one(s, { v = { b = "2" } }))
        end)

        it("an unknown type is a schema error at the value", function()
            assert.same({ path = "v", at = "value", msg = "schema error: unknown type 'text'" },
                        one({ v = { type = "text" } }, { v = "x" }))
        end)
    end)

    describe("required", function()
        it("reports a missing key at the enclosing mapping's path", function()
            local s = { to = { type = "string", required = true } }
            assert.same({ path = "", at = "value", msg = "missing required key 'to'" }, one(s, {}))
            assert.same({ to = "x" }, ok(s, { to = "x" }))
            local nested = { outer = { type = "record", fields = { inner = { type = "record", fields = {
                key = { type = "number", required = true } } } } } }
            assert.same({ path = "outer.inner", at = "value", msg = "missing required key 'key'" },
                        one(nested, { outer = { inner = {} } }))
        end)

        it("is satisfied by false and by an empty string", function()
            local s = { b = { type = "boolean", required = true }, s = { type = "string", required = true } }
            assert.same({ b = false, s = "" }, ok(s, { b = false, s = "" }))
        end)

        it("reports every missing key", function()
            local s = { a = { type = "string", required = true }, b = { type = "string", required = true } }
            assert.same({ { path = "", at = "value", msg = "missing required key 'a'" },
                          { path = "", at = "value", msg = "missing required key 'b'" } }, errs_of(s, {}))
        end)
    end)

    describe("defaults", function()
        it("fill absent keys and leave given ones", function()
            local s = { n = { type = "integer", default = 3 }, b = { type = "boolean", default = true },
                        s = { type = "string", default = "d" }, e = { type = "enum", one_of = { 1, 2 }, default = 2 } }
            assert.same({ n = 3, b = true, s = "d", e = 2 }, ok(s, {}))
            assert.same({ n = 7, b = false, s = "x", e = 1 }, ok(s, { n = 7, b = false, s = "x", e = 1 }))
        end)

        it("are deep copies: one config's table is not another's, nor the schema's", function()
            local s = { list = { type = "array", items = { type = "string" }, default = { "a" } },
                        m = { type = "map", default = { k = { "v" } } } }
            local a, b = ok(s, {}), ok(s, {})
            assert.same({ "a" }, a.list)
            assert.are_not.equal(a.list, b.list)
            assert.are_not.equal(s.list.default, a.list)
            a.list[2] = "mutated"
            a.m.k[1] = "mutated"
            assert.same({ "a" }, s.list.default)
            assert.same({ k = { "v" } }, s.m.default)
            assert.same({ "a" }, b.list)
        end)

        it("fill a record's fields, given or defaulted, at every level", function()
            local s = {
                limits = { type = "record", default = {}, fields = {
                    burst = { type = "integer", default = 5 },
                    window = { type = "record", default = {}, fields = {
                        seconds = { type = "number", default = 1 },
                        mode = { type = "string", default = "sliding" },
                    } },
                } },
            }
            -- the record absent: its default {} gets its fields' defaults
            assert.same({ limits = { burst = 5, window = { seconds = 1, mode = "sliding" } } }, ok(s, {}))
            -- the record given in part: the rest is filled
            assert.same({ limits = { burst = 9, window = { seconds = 2, mode = "sliding" } } },
                        ok(s, { limits = { burst = 9, window = { seconds = 2 } } }))
            -- a record default with some fields set keeps them and fills the others
            local s2 = { r = { type = "record", default = { a = "given" },
                               fields = { a = { type = "string", default = "x" }, b = { type = "string", default = "y" } } } }
            assert.same({ r = { a = "given", b = "y" } }, ok(s2, {}))
        end)

        it("do not apply to a key that is given, even as an empty table", function()
            local s = { list = { type = "array", default = { "a" } } }
            assert.same({ list = {} }, ok(s, { list = {} }))
        end)
    end)

    describe("unknown keys", function()
        it("are errors at the key, with their path, at every level", function()
            local s = { a = { type = "string" }, r = { type = "record", fields = {
                inner = { type = "record", fields = { x = { type = "number" } } } } } }
            assert.same({ path = "stauts", at = "key", msg = "unknown key 'stauts'" }, one(s, { stauts = 1 }))
            assert.same({ path = "r.inner.y", at = "key", msg = "unknown key 'y' in 'r.inner'" },
                        one(s, { r = { inner = { x = 1, y = 2 } } }))
        end)

        it("suggest a close key, as the core config does", function()
            local s = { status = { type = "integer" }, body = { type = "string" }, to = { type = "string" } }
            assert.same({ path = "stauts", at = "key", msg = "unknown key 'stauts' (did you mean 'status'?)" },
                        one(s, { stauts = 1 }))
            assert.same({ path = "bdy", at = "key", msg = "unknown key 'bdy' (did you mean 'body'?)" }, one(s, { bdy = "" }))
            assert.same({ path = "colour", at = "key", msg = "unknown key 'colour'" }, one(s, { colour = 1 }))
            assert.same({ path = "t", at = "key", msg = "unknown key 't'" }, one(s, { t = 1 })) -- one letter: no guess
        end)

        it("are all reported, sorted by name", function()
            assert.same({ { path = "a", at = "key", msg = "unknown key 'a'" },
                          { path = "b", at = "key", msg = "unknown key 'b'" } }, errs_of({}, { b = 1, a = 2 }))
        end)

        it("make every key unknown for a plugin without a schema", function()
            assert.same({}, ok(nil, {}))
            assert.same({ path = "x", at = "key", msg = "unknown key 'x'" }, one(nil, { x = 1 }))
        end)

        it("are not checked inside maps", function()
            assert.same({ m = { anything = "x" } }, ok({ m = { type = "map" } }, { m = { anything = "x" } }))
        end)
    end)

    describe("min and max", function()
        it("bound numbers and integers", function()
            local s = { n = { type = "number", min = 0, max = 1 }, i = { type = "integer", min = 100, max = 599 } }
            assert.same({ n = 0, i = 599 }, ok(s, { n = 0, i = 599 }))
            assert.same({ n = 1, i = 100 }, ok(s, { n = 1, i = 100 }))
            assert.same({ path = "n", at = "value", msg = "must be >= 0" }, one(s, { n = -0.5 }))
            assert.same({ path = "n", at = "value", msg = "must be <= 1" }, one(s, { n = 1.5 }))
            assert.same({ path = "i", at = "value", msg = "must be >= 100" }, one(s, { i = 99 }))
            assert.same({ path = "i", at = "value", msg = "must be <= 599" }, one(s, { i = 600 }))
        end)

        it("bound a string's length", function()
            local s = { s = { type = "string", min = 2, max = 3 } }
            assert.same({ s = "ab" }, ok(s, { s = "ab" }))
            assert.same({ s = "abc" }, ok(s, { s = "abc" }))
            assert.same({ path = "s", at = "value", msg = "must be at least 2 characters" }, one(s, { s = "a" }))
            assert.same({ path = "s", at = "value", msg = "must be at most 3 characters" }, one(s, { s = "abcd" }))
        end)

        it("bound an array's number of items", function()
            local s = { l = { type = "array", min = 1, max = 2 } }
            assert.same({ l = { 1, 2 } }, ok(s, { l = { 1, 2 } }))
            assert.same({ path = "l", at = "value", msg = "needs at least 1 item(s)" }, one(s, { l = {} }))
            assert.same({ path = "l", at = "value", msg = "takes at most 2 item(s)" }, one(s, { l = { 1, 2, 3 } }))
        end)
    end)

    describe("items and values", function()
        it("check every array element, with its 1-based index in the path", function()
            local s = { l = { type = "array", items = { type = "string", min = 1 } } }
            assert.same({ l = { "a", "b" } }, ok(s, { l = { "a", "b" } }))
            assert.same({ { path = "l.2", at = "value", msg = "expected a string" },
                          { path = "l.3", at = "value", msg = "must be at least 1 characters" } },
                        errs_of(s, { l = { "a", 2, "" } }))
        end)

        it("check every map value, with its key in the path", function()
            local s = { m = { type = "map", values = { type = "integer" } } }
            assert.same({ m = { a = 1 } }, ok(s, { m = { a = 1 } }))
            assert.same({ path = "m.b", at = "value", msg = "expected an integer" }, one(s, { m = { a = 1, b = "2" } }))
        end)

        it("nest: arrays of records and maps of arrays", function()
            local s = {
                rules = { type = "array", items = { type = "record", fields = {
                    name = { type = "string", required = true },
                    weight = { type = "integer", default = 1 } } } },
                tags = { type = "map", values = { type = "array", items = { type = "enum", one_of = { "a", "b" } } } },
            }
            assert.same({ rules = { { name = "x", weight = 1 }, { name = "y", weight = 5 } }, tags = { k = { "a" } } },
                        ok(s, { rules = { { name = "x" }, { name = "y", weight = 5 } }, tags = { k = { "a" } } }))
            local errs = errs_of(s, { rules = { { name = "x" }, { weight = 2, extra = true } }, tags = { k = { "a", "c" } } })
            table.sort(errs, function(p, q) return p.path < q.path end)
            assert.same({
                { path = "rules.2", at = "value", msg = "missing required key 'name'" },
                { path = "rules.2.extra", at = "key", msg = "unknown key 'extra' in 'rules.2'" },
                { path = "tags.k.2", at = "value", msg = "expected one of: a, b" },
            }, errs)
        end)
    end)

    it("refuses a config that is not a table", function()
        local out, errs = schema.validate({}, "x")
        assert.is_nil(out)
        assert.same({ { path = "", at = "value", msg = "expected a mapping" } }, errs)
    end)

    it("does not modify the config it is given", function()
        local s = { a = { type = "string", default = "d" }, l = { type = "array", items = { type = "string" } } }
        local conf = { l = { "x" } }
        local out = ok(s, conf)
        assert.same({ l = { "x" } }, conf)
        assert.are_not.equal(conf, out)
        assert.are_not.equal(conf.l, out.l)
    end)
end)

describe("sluice.schema.check_schema", function()
    it("accepts nil, an empty schema and every valid type", function()
        assert.is_true(schema.check_schema(nil))
        assert.is_true(schema.check_schema({}))
        local s = {}
        for _, t in ipairs({ "string", "number", "integer", "boolean", "array", "map", "record" }) do
            s[t] = { type = t }
        end
        s.enum = { type = "enum", one_of = { "a" } }
        assert.is_true(schema.check_schema(s))
        -- an enum allows only its one_of values: without them nothing could ever pass
        assert.is_nil(schema.check_schema({ e = { type = "enum" } }))
    end)

    it("rejects a schema that is not a table, a field without a valid type, also inside records", function()
        assert.same({ nil, "schema must be a table" }, { schema.check_schema("x") })
        assert.same({ nil, "field 'a' has no valid type" }, { schema.check_schema({ a = { type = "text" } }) })
        assert.same({ nil, "field 'a' has no valid type" }, { schema.check_schema({ a = "string" }) })
        assert.same({ nil, "field 'r.inner.x' has no valid type" }, { schema.check_schema({
            r = { type = "record", fields = { inner = { type = "record", fields = { x = {} } } } } }) })
    end)

    it("rejects array items and map values without a valid type", function()
        -- else the plugin loads and the mistake shows only when a config uses a non-empty list
        assert.is_nil((schema.check_schema({ l = { type = "array", items = { type = "text" } } })))
        assert.is_nil((schema.check_schema({ m = { type = "map", values = { type = "strin" } } })))
        assert.is_nil((schema.check_schema({ l = { type = "array", items = { type = "record",
            fields = { x = { type = "nope" } } } } })))
    end)
end)
