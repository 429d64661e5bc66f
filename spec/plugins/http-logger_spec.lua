-- http-logger: access-log lines batched to an HTTP collector by the core, off the request.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local cjson = require("cjson")
local ffi = require("ffi")
pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")
local lib = test.lib

local function metric(gw, pattern)
    local body = assert(gw:request({ listener = "admin", path = "/metrics" })).body
    return tonumber(body:match(pattern)) or 0
end

local function eventually(f)
    for _ = 1, 300 do
        if f() then return true end
        ffi.C.poll(nil, 0, 10)
    end
    return f()
end

local lastbuf = ffi.new("char[?]", 1048576)
local function last(m)
    local n = tonumber(lib.sl_mock_last(m, lastbuf, 1048576))
    local raw = ffi.string(lastbuf, math.min(n, 1048576))
    local head, body = raw:match("^(.-\r\n\r\n)(.*)$")
    return head, body
end

describe("http-logger", function()
    local mock, gw

    setup(function()
        mock = lib.sl_mock_start()
        lib.sl_mock_set(mock, 0, 200, 0, "", 0, "", 0)
        local url = ("http://127.0.0.1:%d/logs"):format(lib.sl_mock_port(mock))
        gw = assert(test.start({ routes = {
            { name = "logged", match = { paths = { "/logged" } }, plugins = {
                { name = "http-logger", config = { endpoint = url, batch_max = 5, flush = "150ms",
                                                   headers = { ["X-Key"] = "k1" },
                                                   fields = { "route", "path", "status", "method" } } },
                { name = "response", config = { status = 201 } } } },
            { name = "down", match = { paths = { "/down" } }, plugins = {
                { name = "http-logger", config = { endpoint = "http://127.0.0.1:1/", batch_max = 100,
                                                   flush = "10s", queue_max = 3, retries = 0 } },
                { name = "response", config = { status = 200 } } } } } }))
    end)
    teardown(function()
        gw:stop()
        lib.sl_mock_stop(mock)
    end)

    it("sends batch_max lines as one JSON array POST with the configured headers", function()
        local before = tonumber(lib.sl_mock_count(mock))
        for i = 1, 5 do assert.equal(201, assert(gw:request({ path = "/logged/" .. i })).status) end
        assert.truthy(eventually(function() return tonumber(lib.sl_mock_count(mock)) == before + 1 end))
        local head, body = last(mock)
        assert.matches("^POST /logs HTTP/1.1\r\n", head)
        assert.matches("\r\nX%-Key: k1\r\n", head)
        assert.matches("\r\nContent%-Type: application/json\r\n", head)
        local lines = cjson.decode(body)
        assert.equal(5, #lines)
        for i, l in ipairs(lines) do
            assert.same({ route = "logged", path = "/logged/" .. i, status = 201, method = "GET" }, l)
        end
    end)

    it("flushes fewer lines after `flush`", function()
        local before = tonumber(lib.sl_mock_count(mock))
        for i = 1, 2 do gw:request({ path = "/logged/f" .. i }) end
        assert.equal(before, tonumber(lib.sl_mock_count(mock)))
        assert.truthy(eventually(function() return tonumber(lib.sl_mock_count(mock)) == before + 1 end))
        local _, body = last(mock)
        assert.equal(2, #cjson.decode(body))
        assert.truthy(eventually(function()
            return metric(gw, 'sluice_http_logger_lines_total{result="sent"} (%d+)') >= 7
        end))
    end)

    it("drops past queue_max and counts it; the requests are answered all the same", function()
        local before = metric(gw, 'sluice_http_logger_lines_total{result="dropped"} (%d+)')
        for _ = 1, 5 do assert.equal(200, assert(gw:request({ path = "/down" })).status) end
        -- the log phase runs after the response went out: the last line may come a moment later
        assert.truthy(eventually(function()
            return metric(gw, 'sluice_http_logger_lines_total{result="dropped"} (%d+)') == before + 2
        end))
        ffi.C.poll(nil, 0, 50)
        assert.equal(before + 2, metric(gw, 'sluice_http_logger_lines_total{result="dropped"} (%d+)'))
    end)

    it("refuses a bad endpoint, an https one, an unknown field", function()
        local function err_of(config)
            local _, err = test.start({ routes = { { name = "r", match = { paths = { "/" } },
                plugins = { { name = "http-logger", config = config } } } } })
            return err
        end
        assert.matches("endpoint", err_of({ endpoint = "not a url" }))
        assert.matches("https collectors", err_of({ endpoint = "https://127.0.0.1/" }))
        assert.matches("unknown field 'nope'", err_of({ endpoint = "http://127.0.0.1/", fields = { "nope" } }))
        assert.matches("set by the sender", err_of({ endpoint = "http://127.0.0.1/",
                                                     headers = { ["Content-Length"] = "1" } }))
    end)
end)
