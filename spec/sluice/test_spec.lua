-- sluice.test itself: a gateway from a YAML file, errors naming the real file, plugin
-- paths relative to the file or to the calling spec, log lines kept off stderr.
local test = require("sluice.test")

local function tmpdir()
    local p = io.popen("mktemp -d")
    local d = p:read("*l")
    p:close()
    return d
end

local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

describe("sluice.test", function()
    local dir

    before_each(function()
        dir = tmpdir()
        os.execute("mkdir -p " .. dir .. "/plugins")
        write(dir .. "/plugins/stamp.lua", [[
local sluice = require("sluice")
return { name = "stamp", version = "1", schema = { value = { type = "string", required = true } },
         header_filter = function(conf) sluice.response.set_header("X-Stamp", conf.value) end }
]])
    end)
    after_each(function() os.execute("rm -rf " .. dir) end)

    it("starts a gateway from a YAML file, plugin_paths relative to that file", function()
        write(dir .. "/gw.yaml", [[
workers: 1
plugin_paths: [plugins]
admin: { listen: off }
listeners: [{ name: web, listen: "127.0.0.1:0" }]
routes:
  - name: r
    match: { paths: [/] }
    plugins: [{ name: stamp, config: { value: from-file } }, { name: echo }]
]])
        local gw, ms = test.start(dir .. "/gw.yaml")
        assert.truthy(gw, ms)
        local res = assert(gw:request({ path = "/a" }))
        gw:stop()
        assert.equal(200, res.status)
        assert.equal("from-file", res.headers["x-stamp"])
    end)

    it("names the real file, line and column in a file's config errors", function()
        write(dir .. "/bad.yaml", "listeners: [{ name: web, listen: \"127.0.0.1:0\" }]\n" ..
                                  "routes:\n  - name: r\n    match: { paths: [/] }\n" ..
                                  "    plugins: [{ name: stamp, config: { valeu: x } }]\n")
        local gw, err = test.start(dir .. "/bad.yaml")
        assert.is_nil(gw)
        assert.matches(dir .. "/bad.yaml:5:40: route 'r', plugin 'stamp': unknown key 'valeu'", err, 1, true)
        local _, err2 = test.start(dir .. "/missing.yaml")
        assert.matches(dir .. "/missing.yaml:1:1: cannot read the config", err2, 1, true)
    end)

    it("reports a YAML-level error and the plugin errors behind it at once, in file order", function()
        write(dir .. "/two.yaml", "listeners: [{ name: web, listen: \"127.0.0.1:0\" }]\n" ..
                                  "bogus_top: 1\n" ..
                                  "routes:\n  - name: r\n    match: { paths: [/] }\n" ..
                                  "    plugins: [{ name: stamp, config: { valeu: x } }]\n")
        local gw, err = test.start(dir .. "/two.yaml")
        assert.is_nil(gw)
        local a = err:find(dir .. "/two.yaml:2:1: unknown key 'bogus_top'", 1, true)
        local b = err:find(dir .. "/two.yaml:6:40: route 'r', plugin 'stamp': unknown key 'valeu'", 1, true)
        assert.truthy(a, err)
        assert.truthy(b, err)
        assert.truthy(a < b, err)
    end)

    it("reads a table config's relative plugin_paths from the calling spec's folder", function()
        -- this spec lives in spec/sluice/: ../fixtures/plugins is spec/fixtures/plugins
        local gw, err = test.start({ plugin_paths = { "../fixtures/plugins" },
            routes = { { name = "r", match = { paths = { "/" } }, plugins = { { name = "nope-not-here" } } } } })
        assert.is_nil(gw)
        assert.matches("searched [^\n]*/spec/sluice/%.%./fixtures/plugins", err)
    end)

    it("keeps log lines off stderr and in test.logs()", function()
        test.capture_logs(true)
        local gw = assert(test.start({ plugin_paths = { "../fixtures/plugins" },
            routes = { { name = "r", match = { paths = { "/" } }, plugins = { { name = "boom", config = { phase = "access" } } } } } }))
        assert.equal(500, gw:request({ path = "/logged" }).status)
        gw:stop()
        local seen = false
        for _, l in ipairs(test.logs()) do
            if l.level == "error" and tostring(l.msg):find("plugin error", 1, true) then seen = true end
        end
        assert.is_true(seen)
        -- the log writer skips stderr while lines are captured and this is set
        assert.equal("1", os.getenv("SLUICE_TEST_QUIET"))
    end)

    it("reads a keep-alive response as far as it is framed, without waiting for a close", function()
        local gw = assert(test.start({ routes = { { name = "r", match = { paths = { "/" } },
            plugins = { { name = "echo" } } } } }))
        local t0 = os.clock()
        local w0 = test.lib.sl_now_ns()
        local res = assert(gw:request({ path = "/ka", headers = { Connection = "keep-alive" }, timeout = 3 }))
        local ms = tonumber(test.lib.sl_now_ns() - w0) / 1e6
        gw:stop()
        assert.equal(200, res.status)
        assert.equal("/ka", res:json().path)
        assert.is_true(ms < 1000, "took " .. ms .. " ms")
        assert.is_true(os.clock() - t0 < 1)
    end)
end)
