-- Loading Kong plugins: what is not supported fails at config load, naming the plugin, the
-- file, the line and the function, before any request.
package.path = "lua/?.lua;lua/?/init.lua;spec/fixtures/?.lua;" .. package.path
local test = require("sluice.test")

local function start_with(name)
    return test.start({ plugin_paths = { test.source_path("spec/fixtures/kong") },
        routes = { { name = "r", match = { paths = { "/" } }, plugins = { { name = name }, { name = "echo" } } } } })
end

describe("Kong plugin loading", function()
    it("fails on unsupported PDK calls, naming plugin, file, line and function", function()
        local gw, err = start_with("kong-unsupported")
        assert.is_nil(gw)
        assert.matches("plugin 'kong-unsupported'", err, 1, true)
        assert.matches("kong-unsupported/handler.lua:7: kong.service.request.set_method is not supported", err, 1, true)
        assert.matches("kong-unsupported/handler.lua:8: ngx.timer is not supported", err, 1, true)
        -- names in comments and strings are not calls
        assert.is_nil(err:find("get_http_version", 1, true))
        assert.is_nil(err:find("kong.nope", 1, true))
    end)

    it("fails on a phase sluice has no place for", function()
        local gw, err = start_with("kong-bad-phase")
        assert.is_nil(gw)
        assert.matches("phase 'certificate' is not supported", err, 1, true)
    end)

    it("fails on a schema type it cannot check", function()
        local gw, err = start_with("kong-bad-schema")
        assert.is_nil(gw)
        assert.matches("field 'owner': type 'foreign' is not supported", err, 1, true)
    end)

    it("raises the same message for a name reached around the load-time check", function()
        local kong = require("sluice.kong").kong
        local req = kong.request
        assert.has_error(function() return req["get_" .. "http_version"] end,
            "kong.request.get_http_version is not supported by sluice's Kong layer (docs/plugins.md, \"Kong plugins\")")
    end)
end)

describe("Kong plugin schemas", function()
    local function start(config)
        return test.start({ plugin_paths = { test.source_path("spec/fixtures/kong") },
            routes = { { name = "r", match = { paths = { "/" } },
                         plugins = { { name = "kong-records", config = config } } } } })
    end

    local function conf_of(config)
        local gw = assert(start(config))
        local res = assert(gw:request({ path = "/" }))
        gw:stop()
        assert.equal(200, res.status, res.body)
        return res.json()
    end

    it("fill an absent record with its fields' defaults, nested too (Kong makes records required)", function()
        local c = conf_of({ second = 1 })
        assert.same({ port = 6379, timeouts = { connect = 2000 } }, c.redis)
        assert.is_nil(c.extra) -- `required = false` keeps a record absent
        c = conf_of({ second = 1, redis = { host = "r.example" }, extra = {} })
        assert.same({ host = "r.example", port = 6379, timeouts = { connect = 2000 } }, c.redis)
        assert.same({ x = "d" }, c.extra)
    end)

    it("run the schema's top-level entity checks on the config's fields ('config.X.Y')", function()
        local gw, err = start({})
        assert.is_nil(gw)
        assert.matches("at least one of these fields must be non-empty: config.second, config.minute", err, 1, true)
        gw, err = start({ minute = 10, policy = "redis" })
        assert.is_nil(gw)
        assert.matches("config.redis.host: required field missing", err, 1, true)
        assert.equal("r.example", conf_of({ minute = 10, policy = "redis", redis = { host = "r.example" } }).redis.host)
    end)

    it("count an empty string or list as not set in entity checks, as Kong's is_nonempty", function()
        local cjson = require("cjson")
        local empty = setmetatable({}, cjson.array_mt)
        assert.same({ "10.0.0.0/8" }, conf_of({ second = 1, allow = empty, deny = { "10.0.0.0/8" } }).deny)
        local gw, err = start({ second = 1, allow = { "10.1.0.0/16" }, deny = { "10.0.0.0/8" } })
        assert.is_nil(gw)
        assert.matches("only one or none of these fields must be set: config.allow, config.deny", err, 1, true)
        gw, err = start({ second = 1, minute = 1, allow = empty })
        assert.truthy(gw, err)
        gw:stop()
    end)

    it("check a conditional's if_match and then_match with every validator they name", function()
        local gw, err = start({ second = 1, limit = 200 })
        assert.is_nil(gw)
        assert.matches("config.policy: expected one of: redis", err, 1, true)
        assert.equal("redis", conf_of({ second = 1, limit = 200, policy = "redis", redis = { host = "r" } }).policy)
        assert.equal("local", conf_of({ second = 1, limit = 100 }).policy)
    end)

    it("refuse an empty string, as Kong's strings have len_min 1 unless they say", function()
        local gw, err = start({ second = 1, label = "" })
        assert.is_nil(gw)
        assert.matches("label", err, 1, true)
        gw, err = start({ second = 1, allow = { "" } })
        assert.is_nil(gw)
        assert.matches("allow", err, 1, true)
        assert.equal("x", conf_of({ second = 1, label = "x" }).label)
    end)

    it("know Kong's typedefs for addresses, hosts, cookies and versions, and check them", function()
        local c = conf_of({ second = 1, allow = { "10.0.0.1", "2001:db8::/32" }, v4 = "192.168.0.0/16",
                            origin = "api.example.com:8443", wildcard = "*.example.com", cookie = "session",
                            min_version = "1.2.3" })
        assert.same({ "10.0.0.1", "2001:db8::/32" }, c.allow)
        for field, bad in pairs({ allow = { "10.0.0.300" }, v4 = "2001:db8::/32", origin = "api.example.com:99999",
                                  wildcard = "a.*.example.com", cookie = "a b", min_version = "v1" }) do
            local gw, err = start({ second = 1, [field] = bad })
            assert.is_nil(gw, field)
            assert.matches(field, err, 1, true)
        end
    end)

    it("take a shorthand field's value where its func puts it", function()
        local c = conf_of({ second = 1, redis_host = "r.example", redis = { port = 6380 } })
        assert.same({ host = "r.example", port = 6380, timeouts = { connect = 2000 } }, c.redis)
        assert.is_nil(c.redis_host)
        local gw, err = start({ second = 1, redis_host = 7 })
        assert.is_nil(gw)
        assert.matches("redis_host", err, 1, true)
    end)
end)
