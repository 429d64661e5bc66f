-- Plugin config errors, as test.start (the same check as `sluice check`) reports them:
-- "FILE:LINE:COL: route 'R', plugin 'P': [PATH: ]message", pointing at the key or value.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local cjson = require("cjson.safe")
local ffi = require("ffi")

pcall(ffi.cdef, "int mkdir(const char *path, unsigned int mode); int rmdir(const char *path);")

local function absolute(dir)
    if dir:sub(1, 1) == "/" then return dir end
    local cwd = os.getenv("PWD") or assert(io.popen("pwd")):read("*l")
    return (cwd .. "/" .. dir):gsub("/%./", "/"):gsub("/%.$", "")
end
local FIXTURES = absolute(test.SOURCE_DIR) .. "/spec/fixtures/plugins"

local function copy(t)
    if type(t) ~= "table" then return t end
    local o = {}
    for k, v in pairs(t) do o[k] = copy(v) end
    return o
end

-- The JSON text test.start sends for `conf` (built the same way, so the same key order):
-- error columns index into it, the config being one line.
local function text_of(conf)
    conf = copy(conf)
    conf.workers = conf.workers or 1
    conf.admin = conf.admin or { listen = "127.0.0.1:0" }
    conf.listeners = conf.listeners or { { name = "web", listen = "127.0.0.1:0" } }
    return assert(cjson.encode(conf))
end

-- A plugin file that does not compile is made at run time, in a folder searched after
-- the fixtures (a broken file in the tree would trip every Lua linter).
local BROKEN_DIR = os.tmpname() .. ".d"
local BROKEN = BROKEN_DIR .. "/broken-syntax.lua"

-- A config with route 'r' using plugin `name` with `config`; returns its errors as
-- { { col = n, msg = "..." }, ... } and the JSON text they point into.
local function errors_of(name, config, global)
    local conf = { plugin_paths = { FIXTURES, BROKEN_DIR },
                   routes = { { name = "r", match = { paths = { "/" } },
                                plugins = { { name = name, config = config } } } },
                   plugins = global }
    local g, err = test.start(conf)
    if g then
        g:stop()
        error("config was accepted", 2)
    end
    local out = {}
    for line in err:gmatch("[^\n]+") do
        local col, msg = line:match("^[^:]+:1:(%d+): (.*)$")
        assert(col, "no FILE:LINE:COL in " .. line)
        out[#out + 1] = { col = tonumber(col), msg = msg }
    end
    return out, text_of(conf), err
end

-- The text an error points at.
local function at(text, e, n) return text:sub(e.col, e.col + n - 1) end

local VALID = { target = "x", limits = { window = { seconds = 1 } } }
local function with(extra)
    local c = copy(VALID)
    for k, v in pairs(extra) do c[k] = v end
    return c
end

describe("plugin config errors", function()
    setup(function()
        assert(ffi.C.mkdir(BROKEN_DIR, tonumber("700", 8)) == 0, "cannot create " .. BROKEN_DIR)
        local f = assert(io.open(BROKEN, "w"))
        f:write('return { name = "broken-syntax", access = function( end }\n')
        f:close()
    end)
    teardown(function()
        os.remove(BROKEN)
        ffi.C.rmdir(BROKEN_DIR)
        os.remove((BROKEN_DIR:gsub("%.d$", "")))
    end)

    it("accepts a valid config and fills defaults, nested records included", function()
        local gw = assert(test.start({ plugin_paths = { FIXTURES },
            routes = { { name = "r", match = { paths = { "/" } }, plugins = { { name = "conf-check", config = VALID } } } } }))
        local conf = assert(gw:request({ path = "/" })).json()
        gw:stop()
        assert.same({ target = "x", limits = { burst = 5, window = { seconds = 1 } }, tags = {}, mode = "safe", raise = false },
                    conf)
    end)

    it("reports a missing required key at the config mapping", function()
        local errs, text = errors_of("conf-check", { limits = { window = { seconds = 1 } } })
        assert.equal(1, #errs)
        assert.equal("route 'r', plugin 'conf-check': missing required key 'target'", errs[1].msg)
        assert.equal("{", at(text, errs[1], 1))
    end)

    it("reports a missing required key of a nested record with the record's path", function()
        local errs = errors_of("conf-check", { target = "x", limits = { burst = 1 } })
        assert.equal(1, #errs)
        assert.equal("route 'r', plugin 'conf-check': limits: missing required key 'window'", errs[1].msg)
    end)

    it("treats JSON null as absent", function()
        local errs = errors_of("conf-check", with({ target = cjson.null }))
        assert.equal("route 'r', plugin 'conf-check': missing required key 'target'", errs[1].msg)
    end)

    it("reports a wrong type with the key path, at the value", function()
        local errs, text = errors_of("conf-check", with({ target = 5 }))
        assert.equal(1, #errs)
        assert.equal("route 'r', plugin 'conf-check': target: expected a string", errs[1].msg)
        assert.equal("5", at(text, errs[1], 1))

        errs, text = errors_of("conf-check", with({ limits = { window = { seconds = "1" } } }))
        assert.equal("route 'r', plugin 'conf-check': limits.window.seconds: expected a number", errs[1].msg)
        assert.equal('"1"', at(text, errs[1], 3))

        errs, text = errors_of("conf-check", with({ tags = { a = { "ok", 2 } } }))
        assert.equal("route 'r', plugin 'conf-check': tags.a.2: expected a string", errs[1].msg)
        assert.equal("2]", at(text, errs[1], 2))
    end)

    it("reports bad values: enum, bounds, integer", function()
        local errs = errors_of("conf-check", with({ mode = "slow" }))
        assert.equal("route 'r', plugin 'conf-check': mode: expected one of: fast, safe", errs[1].msg)
        errs = errors_of("conf-check", with({ limits = { window = { seconds = 1 }, burst = 101 } }))
        assert.equal("route 'r', plugin 'conf-check': limits.burst: must be <= 100", errs[1].msg)
        errs = errors_of("conf-check", with({ limits = { window = { seconds = 1 }, burst = 1.5 } }))
        assert.equal("route 'r', plugin 'conf-check': limits.burst: expected an integer", errs[1].msg)
        errs = errors_of("conf-check", with({ target = "" }))
        assert.equal("route 'r', plugin 'conf-check': target: must be at least 1 characters", errs[1].msg)
    end)

    it("reports an unknown key at the key, at every level", function()
        local errs, text = errors_of("conf-check", with({ colour = 1 }))
        assert.equal(1, #errs)
        assert.equal("route 'r', plugin 'conf-check': unknown key 'colour'", errs[1].msg)
        assert.equal('"colour"', at(text, errs[1], 8))

        errs, text = errors_of("conf-check", with({ limits = { window = { seconds = 1, sec = 2 } } }))
        assert.equal(1, #errs)
        assert.equal("route 'r', plugin 'conf-check': unknown key 'sec' in 'limits.window'", errs[1].msg)
        assert.equal('"sec"', at(text, errs[1], 5))
    end)

    it("reports a failing check() at the config mapping, and an error raised in it", function()
        local errs, text = errors_of("conf-check", with({ mode = "fast", limits = { burst = 0, window = { seconds = 1 } } }))
        assert.equal(1, #errs)
        assert.equal("route 'r', plugin 'conf-check': mode fast needs a burst above 0", errs[1].msg)
        assert.equal("{", at(text, errs[1], 1))
        errs = errors_of("conf-check", with({ raise = true }))
        assert.matches("^route 'r', plugin 'conf%-check': check failed: .*conf%-check%.lua:%d+: asked to raise$", errs[1].msg)
    end)

    it("reports every error of a config, one line each", function()
        local errs = errors_of("conf-check", { target = 5, colour = 1, limits = { window = { seconds = -1 } } })
        local msgs = {}
        for i, e in ipairs(errs) do msgs[i] = e.msg end
        table.sort(msgs)
        assert.same({
            "route 'r', plugin 'conf-check': limits.window.seconds: must be >= 0",
            "route 'r', plugin 'conf-check': target: expected a string",
            "route 'r', plugin 'conf-check': unknown key 'colour'",
        }, msgs)
    end)

    it("names the global chain for a global plugin", function()
        local errs = errors_of("conf-check", VALID, { { name = "conf-check", config = { target = true, limits = { window = { seconds = 1 } } } } })
        assert.equal(1, #errs)
        assert.equal("the global chain, plugin 'conf-check': target: expected a string", errs[1].msg)
    end)

    it("reports plugins that cannot be used at the name", function()
        local errs, text = errors_of("no-such-plugin", nil)
        assert.equal(1, #errs)
        assert.matches("^route 'r', plugin 'no%-such%-plugin': unknown plugin 'no%-such%-plugin' %(searched .*/spec/fixtures/plugins, .*%.d, .*plugins%)$",
                       errs[1].msg)
        assert.equal('"no-such-plugin"', at(text, errs[1], 16))
        errs = errors_of("broken-syntax", nil)
        assert.matches("^route 'r', plugin 'broken%-syntax': cannot load .*broken%-syntax%.lua", errs[1].msg)
        errs = errors_of("bad-phase", nil)
        assert.matches("^route 'r', plugin 'bad%-phase': .*bad%-phase%.lua: access must be a function$", errs[1].msg)
        errs = errors_of("bad-schema", nil)
        assert.matches("^route 'r', plugin 'bad%-schema': .*bad%-schema%.lua: field 'nope' has no valid type$", errs[1].msg)
    end)

    it("reports errors of the built-in plugins the same way", function()
        local errs = errors_of("redirect", { to = "/x", stauts = 301 })
        assert.equal("route 'r', plugin 'redirect': unknown key 'stauts' (did you mean 'status'?)", errs[1].msg)
        errs = errors_of("response", { status = "200" })
        assert.equal("route 'r', plugin 'response': status: expected an integer", errs[1].msg)
        errs = errors_of("echo", { anything = 1 })
        assert.equal("route 'r', plugin 'echo': unknown key 'anything'", errs[1].msg)
        errs = errors_of("cors", { origins = "https://a.example" })
        assert.equal("route 'r', plugin 'cors': origins: expected a list", errs[1].msg)
    end)
end)
