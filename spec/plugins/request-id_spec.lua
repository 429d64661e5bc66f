-- request-id: the id the upstream, the client and the logs see, against the real core.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local ffi = require("ffi")
local cjson = require("cjson")

pcall(ffi.cdef, "int usleep(unsigned int usec);")

-- plugin_paths are absolute here: SOURCE_DIR is "." when busted runs from the checkout.
local function absolute(dir)
    if dir:sub(1, 1) == "/" then return dir end
    local cwd = os.getenv("PWD") or assert(io.popen("pwd")):read("*l")
    return (cwd .. "/" .. dir):gsub("/%./", "/"):gsub("/%.$", "")
end
local FIXTURES = absolute(test.SOURCE_DIR) .. "/spec/fixtures/plugins"

-- Lines written in the log phase go out after the client has its response: poll.
local function eventually(fn, what)
    for _ = 1, 200 do
        local v = fn()
        if v then return v end
        ffi.C.usleep(5000)
    end
    error("timed out waiting for " .. what, 2)
end

local function read_lines(path)
    local f = io.open(path, "r")
    if not f then return {} end
    local out = {}
    for line in f:lines() do out[#out + 1] = cjson.decode(line) end
    f:close()
    return out
end

describe("request-id", function()
    local up, gw, logfile
    setup(function()
        up = test.upstream()
        logfile = os.tmpname()
        local function route(name, config, extra)
            local plugins = { { name = "request-id", config = config } }
            for _, p in ipairs(extra or {}) do plugins[#plugins + 1] = p end
            return { name = name, match = { paths = { "/" .. name } }, upstream = "u", plugins = plugins }
        end
        gw = assert(test.start({
            plugin_paths = { FIXTURES },
            upstreams = { { name = "u", targets = { { address = up:address() } } } },
            routes = {
                route("default"),
                route("logged", nil, { { name = "logger" }, { name = "access-log", config = { path = logfile } } }),
                route("override", { override = true }),
                route("custom", { header = "X-Correlation-ID" }),
                route("quiet", { response = false }),
                { name = "plain", match = { paths = { "/none" } }, upstream = "u" },
            },
        }))
    end)
    teardown(function()
        if gw then gw:stop() end
        up:stop()
        os.remove(logfile)
    end)

    local function get(path, headers)
        local res = assert(gw:request({ path = path, headers = headers }))
        assert.equal(200, res.status)
        return res, res.json().headers
    end

    it("generates 32 hex digits, the same upstream and back to the client", function()
        local res, seen = get("/default")
        assert.matches("^%x+$", seen["x-request-id"])
        assert.equal(32, #seen["x-request-id"])
        assert.equal(seen["x-request-id"], res.headers["x-request-id"])
        local res2 = get("/default")
        assert.are_not.equal(res.headers["x-request-id"], res2.headers["x-request-id"])
    end)

    it("keeps a client's id", function()
        local res, seen = get("/default", { ["X-Request-ID"] = "client-id-1" })
        assert.equal("client-id-1", seen["x-request-id"])
        assert.equal("client-id-1", res.headers["x-request-id"])
    end)

    it("replaces a client's id that is too long to be a request id", function()
        local long = ("a"):rep(33)
        local res, seen = get("/default", { ["X-Request-ID"] = long })
        assert.matches("^%x+$", seen["x-request-id"])
        assert.equal(32, #seen["x-request-id"])
        assert.equal(seen["x-request-id"], res.headers["x-request-id"])
    end)

    it("replaces a client's id that is not visible ASCII instead of failing the request", function()
        local res, seen = get("/default", { ["X-Request-ID"] = "has space" })
        assert.equal(32, #seen["x-request-id"])
        assert.equal(seen["x-request-id"], res.headers["x-request-id"])
    end)

    it("override replaces a client's id, once, upstream and back", function()
        local res, seen = get("/override", { ["X-Request-ID"] = "client-id-2" })
        assert.matches("^%x+$", seen["x-request-id"])
        assert.equal(32, #seen["x-request-id"])
        assert.equal(seen["x-request-id"], res.headers["x-request-id"])
        -- and generates one when the client sent none
        res, seen = get("/override")
        assert.equal(32, #seen["x-request-id"])
        assert.equal(seen["x-request-id"], res.headers["x-request-id"])
    end)

    it("uses a custom header, and the gateway's X-Request-ID carries the same id", function()
        local res, seen = get("/custom", { ["X-Correlation-ID"] = "corr-7" })
        assert.equal("corr-7", seen["x-correlation-id"])
        assert.equal("corr-7", seen["x-request-id"])
        assert.equal("corr-7", res.headers["x-correlation-id"])
        assert.is_nil(res.headers["x-request-id"])
        res, seen = get("/custom")
        assert.equal(32, #seen["x-correlation-id"])
        assert.equal(seen["x-correlation-id"], seen["x-request-id"])
        assert.equal(seen["x-correlation-id"], res.headers["x-correlation-id"])
    end)

    it("response = false keeps the id off the response but still sends it upstream", function()
        local res, seen = get("/quiet", { ["X-Request-ID"] = "q-1" })
        assert.equal("q-1", seen["x-request-id"])
        assert.is_nil(res.headers["x-request-id"])
    end)

    it("without the plugin the gateway still sends an id upstream, none to the client", function()
        local res, seen = get("/none")
        assert.equal(32, #seen["x-request-id"])
        assert.is_nil(res.headers["x-request-id"])
    end)

    it("log lines and the access log carry the same id as the client and upstream", function()
        test.capture_logs(true)
        local res, seen = get("/logged", { ["X-Request-ID"] = "log-me-1" })
        local gen_res, gen_seen = get("/logged")
        local id = gen_res.headers["x-request-id"]
        assert.equal(id, gen_seen["x-request-id"])
        assert.equal("log-me-1", seen["x-request-id"])
        assert.equal("log-me-1", res.headers["x-request-id"])

        local lines = test.logs()
        test.capture_logs(false)
        local ids = {}
        for _, l in ipairs(lines) do
            if l.plugin == "logger" then ids[#ids + 1] = l.request_id end
        end
        assert.same({ "log-me-1", id }, ids)

        local access = eventually(function()
            local all = read_lines(logfile)
            local found = {}
            for _, l in ipairs(all) do
                if l.request_id == "log-me-1" or l.request_id == id then found[#found + 1] = l end
            end
            return #found == 2 and found
        end, "two access-log lines")
        assert.same({ "log-me-1", id }, { access[1].request_id, access[2].request_id })
    end)
end)
