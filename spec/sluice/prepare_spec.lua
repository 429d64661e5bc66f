-- The prepare(conf) plugin hook (docs/plugins.md, "prepare"): once per config generation
-- per worker and plugin instance, its value the last argument of every phase, and a
-- raising prepare a plugin error (500, logged with route and plugin).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local sluice = require("sluice") -- the same libsluice: sluice.shared reads what the gateway wrote
local ffi = require("ffi")

pcall(ffi.cdef, "int usleep(unsigned int usec);")

local FIXTURES = test.SOURCE_DIR .. "/spec/fixtures/plugins"
if FIXTURES:sub(1, 1) ~= "/" then
    FIXTURES = (os.getenv("PWD") or assert(io.popen("pwd")):read("*l")) .. "/" .. FIXTURES
end

local function prepares(key) return sluice.shared.get("prepare:" .. key) or 0 end

local function wait_for(pred, what)
    for _ = 1, 200 do
        if pred() then return end
        ffi.C.usleep(5000)
    end
    error("timed out: " .. what, 2)
end

-- A unique key per run: the shared dict outlives gateways in this process.
local RUN = tostring(os.time()) .. tostring(math.random(1e6))
local function key(k) return k .. "-" .. RUN end

local function config(keys)
    local up = keys.up
    return {
        workers = 1,
        plugin_paths = { FIXTURES },
        upstreams = { { name = "echo", targets = { { address = up:address() } } } },
        plugins = { { name = "prepared", config = { key = keys.global } } },
        routes = {
            { name = "a", match = { paths = { "/a" } }, upstream = "echo",
              plugins = { { name = "prepared", config = { key = keys.a } } } },
            { name = "b", match = { paths = { "/b" } }, upstream = "echo" },
            { name = "fail", match = { paths = { "/fail" } }, upstream = "echo",
              plugins = { { name = "prepared", config = { key = keys.fail, fail = true } } } },
            { name = "wait", match = { paths = { "/wait" } }, upstream = "echo",
              plugins = { { name = "prepared", config = { key = keys.wait, wait = true } } } },
        },
    }
end

describe("prepare", function()
    local up
    setup(function() up = test.upstream() end)
    teardown(function() up:stop() end)

    it("runs once per generation and plugin instance, however many requests", function()
        local g, a = key("global"), key("a")
        local gw = assert(test.start(config({ up = up, global = g, a = a, fail = key("f1"), wait = key("w1") })))
        assert.equal(0, prepares(g))
        for i = 1, 60 do
            local res = assert(gw:request({ path = (i % 2 == 0) and "/a" or "/b" }))
            assert.equal(200, res.status)
        end
        -- the global plugin is one instance for every route; route a's use is another
        assert.equal(1, prepares(g))
        assert.equal(1, prepares(a))
        gw:stop()

        -- a second config generation prepares again, once
        local gw2 = assert(test.start(config({ up = up, global = g, a = a, fail = key("f2"), wait = key("w2") })))
        for _ = 1, 20 do assert.equal(200, assert(gw2:request({ path = "/a" })).status) end
        assert.equal(2, prepares(g))
        assert.equal(2, prepares(a))
        gw2:stop()
    end)

    it("hands its value to every phase", function()
        local g, a = key("g3"), key("a3")
        local gw = assert(test.start(config({ up = up, global = g, a = a, fail = key("f3"), wait = key("w3") })))
        local res = assert(gw:request({ path = "/a" }))
        assert.equal(200, res.status)
        -- body_filter runs in chain order: the global plugin, then the route's
        local body, tail = res.body:match("^(.*)|" .. g:gsub("%-", "%%-") .. "|" .. a:gsub("%-", "%%-") .. "$")
        assert.is_truthy(body, "body_filter tails missing: " .. res.body:sub(-80))
        local seen = require("cjson").decode(body)
        local h = seen.headers
        -- set_header replaces: the route's plugin runs after the global one
        assert.equal(a .. "#1", h["x-prep-rewrite"])
        assert.equal(a, h["x-prep-access"])
        assert.equal(a, res.headers["x-prep-header"])
        assert.is_nil(tail)
        wait_for(function() return (sluice.shared.get("log:" .. a) or 0) >= 1 end, "log phase")
        assert.equal(1, sluice.shared.get("log:" .. g))
        gw:stop()
    end)

    it("answers 500 when it raises, logged with route and plugin, and tries again", function()
        local f = key("f4")
        local gw = assert(test.start(config({ up = up, global = key("g4"), a = key("a4"), fail = f, wait = key("w4") })))
        test.capture_logs(true)
        assert.equal(500, assert(gw:request({ path = "/fail" })).status)
        assert.equal(500, assert(gw:request({ path = "/fail" })).status)
        assert.equal(200, assert(gw:request({ path = "/b" })).status) -- other routes are unaffected
        local found = {}
        for _, l in ipairs(test.logs()) do
            if l.msg and l.msg:find("prepare: ", 1, true) and l.msg:find("cannot prepare " .. f, 1, true) then
                found[#found + 1] = l
            end
        end
        test.capture_logs(false)
        -- one line per request: the request's later phases skip the plugin
        assert.equal(2, #found)
        found = found[1]
        assert.is_truthy(found, "no plugin error logged")
        assert.equal("fail", found.route)
        assert.equal("prepared", found.plugin)
        assert.equal(2, prepares(f)) -- a failed prepare is not kept: the next request runs it again
        gw:stop()
    end)

    it("cannot wait: sleeping in prepare is a plugin error", function()
        local w = key("w5")
        local gw = assert(test.start(config({ up = up, global = key("g5"), a = key("a5"), fail = key("f5"), wait = w })))
        test.capture_logs(true)
        assert.equal(500, assert(gw:request({ path = "/wait" })).status)
        local found
        for _, l in ipairs(test.logs()) do
            if l.msg and l.msg:find("prepare cannot wait", 1, true) then found = l end
        end
        test.capture_logs(false)
        assert.is_truthy(found, "no 'prepare cannot wait' error logged")
        gw:stop()
    end)
end)
