-- access-log: one JSON line per request, written to a file in the log phase.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local ffi = require("ffi")
local cjson = require("cjson")

pcall(ffi.cdef, "int usleep(unsigned int usec);")

local DEFAULT_FIELDS = { "ts", "request_id", "route", "method", "path", "status", "bytes_in", "bytes_out",
                         "duration_ms", "upstream", "target", "client" }

local function read_lines(path)
    local out = {}
    local f = io.open(path, "r")
    if not f then return out end
    for line in f:lines() do out[#out + 1] = assert(cjson.decode(line), "not JSON: " .. line) end
    f:close()
    return out
end

-- The line is written after the response went out: poll until `n` lines are there.
local function wait_lines(path, n)
    for _ = 1, 400 do
        local lines = read_lines(path)
        if #lines >= n then return lines end
        ffi.C.usleep(5000)
    end
    error(("timed out waiting for %d line(s) in %s (have %d)"):format(n, path, #read_lines(path)), 2)
end

local function keys(t)
    local out = {}
    for k in pairs(t) do out[#out + 1] = k end
    table.sort(out)
    return out
end

local function sorted(list)
    local out = { unpack(list) }
    table.sort(out)
    return out
end

describe("access-log", function()
    local up, gw, file, custom
    setup(function()
        up = test.upstream()
        file, custom = os.tmpname(), os.tmpname()
        gw = assert(test.start({
            upstreams = { { name = "u", targets = { { address = up:address() } } } },
            routes = {
                { name = "proxied", match = { paths = { "/api" } }, upstream = "u",
                  plugins = { { name = "access-log", config = { path = file } } } },
                { name = "answered", match = { paths = { "/mock" } },
                  plugins = { { name = "access-log", config = { path = file } },
                              { name = "response", config = { status = 202, body = "queued" } } } },
                { name = "custom", match = { paths = { "/custom" } }, upstream = "u",
                  plugins = { { name = "access-log", config = { path = custom,
                                fields = { "query", "host", "user_agent", "status" } } } } },
            },
        }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
        os.remove(file)
        os.remove(custom)
    end)
    before_each(function()
        assert(io.open(file, "w")):close()
        assert(io.open(custom, "w")):close()
    end)

    it("writes the documented default fields for a proxied request", function()
        local raw = "GET /api/items?page=2 HTTP/1.1\r\nHost: api.test\r\nX-Request-ID: al-1\r\nConnection: close\r\n\r\n"
        local res = assert(gw:request({ raw = raw }))
        assert.equal(200, res.status)
        local l = wait_lines(file, 1)[1]
        assert.same(sorted(DEFAULT_FIELDS), keys(l))
        assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", l.ts)
        assert.equal("al-1", l.request_id)
        assert.equal("proxied", l.route)
        assert.equal("GET", l.method)
        assert.equal("/api/items", l.path)
        assert.equal(200, l.status)
        assert.equal(#raw, l.bytes_in)
        assert.equal(#res.raw, l.bytes_out)
        assert.is_number(l.duration_ms)
        assert.is_true(l.duration_ms >= 0 and l.duration_ms < 5000)
        assert.equal("u", l.upstream)
        assert.equal(up:address(), l.target)
        assert.equal("127.0.0.1", l.client)
        -- the timestamp is now, in UTC
        local y, mo, d, h, mi, s = l.ts:match("^(%d+)%-(%d+)%-(%d+)T(%d+):(%d+):(%d+)")
        local t = os.time({ year = y, month = mo, day = d, hour = h, min = mi, sec = s, isdst = false })
        local utc_now = os.time(os.date("!*t"))
        assert.is_true(math.abs(t - utc_now) <= 5, l.ts)
    end)

    it("counts the request body in bytes_in", function()
        local body = ("x"):rep(1000)
        local res = assert(gw:request({ method = "POST", path = "/api/upload", body = body }))
        assert.equal(200, res.status)
        local l = wait_lines(file, 1)[1]
        assert.equal("POST", l.method)
        assert.is_true(l.bytes_in > 1000, tostring(l.bytes_in))
        assert.equal(#res.raw, l.bytes_out)
    end)

    it("leaves upstream and target out when a plugin answered", function()
        local res = assert(gw:request({ path = "/mock" }))
        assert.equal(202, res.status)
        local l = wait_lines(file, 1)[1]
        assert.equal("answered", l.route)
        assert.equal(202, l.status)
        assert.is_nil(l.upstream)
        assert.is_nil(l.target)
        assert.equal(32, #l.request_id) -- the gateway's own id
        assert.equal(#res.raw, l.bytes_out)
    end)

    it("writes exactly one line per request, and none for a request no route matched", function()
        for i = 1, 5 do assert.equal(200, assert(gw:request({ path = "/api/" .. i })).status) end
        assert.equal(404, assert(gw:request({ path = "/nowhere" })).status)
        assert.equal(202, assert(gw:request({ path = "/mock" })).status)
        local lines = wait_lines(file, 6)
        ffi.C.usleep(20000) -- a late 7th line would show up by now
        lines = read_lines(file)
        assert.equal(6, #lines)
        local paths = {}
        for i, l in ipairs(lines) do paths[i] = l.path end
        assert.same({ "/api/1", "/api/2", "/api/3", "/api/4", "/api/5", "/mock" }, sorted(paths))
    end)

    it("writes only the configured fields, including query, host and user_agent", function()
        local res = assert(gw:request({ path = "/custom?a=1&b=2", host = "Shop.Example:8080",
                                        headers = { ["User-Agent"] = "spec/1.0" } }))
        assert.equal(200, res.status)
        local l = wait_lines(custom, 1)[1]
        assert.same({ query = "a=1&b=2", host = "shop.example", user_agent = "spec/1.0", status = 200 }, l)
        assert.equal(0, #read_lines(file))
    end)

    it("rejects an unknown field and a file it cannot open", function()
        local g, err = test.start({ routes = { { name = "r", plugins = { { name = "access-log",
            config = { path = file, fields = { "status", "referer" } } } } } } })
        assert.is_nil(g)
        assert.matches("route 'r', plugin 'access-log': unknown field 'referer'", err, 1, true)
        g, err = test.start({ routes = { { name = "r", plugins = { { name = "access-log",
            config = { path = "/nonexistent-dir/access.log" } } } } } })
        assert.is_nil(g)
        assert.matches("route 'r', plugin 'access-log': cannot open /nonexistent-dir/access.log", err, 1, true)
    end)
end)
