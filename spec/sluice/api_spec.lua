-- The sluice plugin API (docs/plugins.md), through fixture plugins in spec/fixtures/plugins
-- running in the real core's worker VMs.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local ffi = require("ffi")

pcall(ffi.cdef, "int usleep(unsigned int usec);")

local function absolute(dir)
    if dir:sub(1, 1) == "/" then return dir end
    local cwd = os.getenv("PWD") or assert(io.popen("pwd")):read("*l")
    return (cwd .. "/" .. dir):gsub("/%./", "/"):gsub("/%.$", "")
end
local FIXTURES = absolute(test.SOURCE_DIR) .. "/spec/fixtures/plugins"

local function route(name, plugins, extra)
    local r = { name = name, match = { paths = { "/" .. name } }, plugins = plugins }
    for k, v in pairs(extra or {}) do r[k] = v end
    return r
end

-- Log lines of the log phase are written after the client has its answer: poll.
local function wait_logs(pred, what)
    for _ = 1, 200 do
        local found = {}
        for _, l in ipairs(test.logs()) do
            if pred(l) then found[#found + 1] = l end
        end
        if #found > 0 then return found end
        ffi.C.usleep(5000)
    end
    error("timed out waiting for a log line: " .. what, 2)
end

describe("sluice API", function()
    local up, origin, gw
    setup(function()
        up = test.upstream()
        origin = assert(test.start({
            admin = { listen = "off" },
            routes = { { name = "o", match = { paths = { "/" } }, plugins = { { name = "response", config = {
                status = 203, body = "origin",
                headers = { ["X-Up"] = "from-origin", ["X-Drop"] = "1", Server = "origin/1" } } } } } },
        }))
        gw = assert(test.start({
            plugin_paths = { FIXTURES },
            listeners = { { name = "web", listen = "127.0.0.1:0", max_body = "1KiB" } },
            upstreams = { { name = "echo", targets = { { address = up:address() } } },
                          { name = "origin", targets = { { address = origin:address() } } } },
            routes = {
                route("inspect", { { name = "inspect" } }),
                route("inspect-hdr", { { name = "inspect", config = { header = "x-custom" } } }),
                route("edit", { { name = "edit-request" } }, { upstream = "echo" }),
                route("read-body", { { name = "edit-request", config = { read_body = true } } }, { upstream = "echo" }),
                route("set-path", { { name = "edit-request", config = { path = "/new/place" } } },
                      { upstream = "echo", strip_prefix = true }),
                route("exit-json", { { name = "exit-table" } }),
                route("exit-ct", { { name = "exit-table", config = { content_type = "application/vnd.x+json", status = 200 } } }),
                route("resp-edit", { { name = "resp-edit" } }, { upstream = "origin" }),
                route("resp-edit-answer", { { name = "resp-edit" }, { name = "response", config = {
                    status = 202, headers = { ["X-Up"] = "answer", ["X-Drop"] = "1" } } } }),
                route("ctx", { { name = "ctx-b" }, { name = "ctx-a" } }, { upstream = "echo" }),
                route("logged", { { name = "logger", config = { msg = "spec line" } } }, { upstream = "echo" }),
                route("levels", { { name = "logger" }, { name = "response" } }),
                route("boom-rewrite", { { name = "boom", config = { phase = "rewrite" } } }, { upstream = "echo" }),
                route("boom-access", { { name = "boom", config = { phase = "access", what = "runtime" } } }, { upstream = "echo" }),
                route("boom-misuse", { { name = "boom", config = { phase = "access", what = "misuse" } } }, { upstream = "echo" }),
                route("boom-hf", { { name = "boom", config = { phase = "header_filter" } } }, { upstream = "echo" }),
                route("boom-hf-sleep", { { name = "boom", config = { phase = "header_filter", what = "sleep" } } }, { upstream = "echo" }),
                route("boom-log", { { name = "boom", config = { phase = "log" } } }, { upstream = "echo" }),
                route("shared", { { name = "shared-ops" } }),
                route("sleep", { { name = "sleeper", config = { seconds = 0.1 } } }),
                route("sleep0", { { name = "sleeper", config = { seconds = 0 } } }),
                route("fallthrough", { { name = "ctx-a" } }),
            },
        }))
    end)
    teardown(function()
        gw:stop()
        origin:stop()
        up:stop()
        test.capture_logs(false)
    end)

    describe("sluice.request", function()
        it("reads method, path, query, host, client address, id and headers", function()
            local res = assert(gw:request({ method = "PUT", path = "/inspect/a%20b?x=1&y=2", host = "Shop.Example:8080",
                headers = { ["X-A"] = "first", ["X-Request-ID"] = "api-1", ["X-Multi"] = "1" } }))
            assert.equal(200, res.status)
            local j = res.json()
            assert.equal("PUT", j.method)
            assert.equal("/inspect/a%20b", j.path)
            assert.equal("x=1&y=2", j.query)
            assert.equal("shop.example", j.host)
            assert.equal("127.0.0.1", j.client_ip)
            assert.equal("api-1", j.id)
            assert.equal("first", j.header)
            assert.is_true(j.absent)
            assert.equal("first", j.headers["x-a"])
            assert.equal("Shop.Example:8080", j.headers.host)
            assert.equal("1", j.headers["x-multi"])
        end)

        it("finds header names case-insensitively and joins repeated fields", function()
            local raw = "GET /inspect-hdr HTTP/1.1\r\nHost: h\r\nX-CUSTOM: one\r\nx-custom: two\r\nConnection: close\r\n\r\n"
            local j = assert(gw:request({ raw = raw })).json()
            assert.equal("one", j.header)
            assert.equal("one, two", j.headers["x-custom"])
            assert.equal("", j.query)
        end)

        it("reads the body, the same bytes twice, and nil when there is none", function()
            local j = assert(gw:request({ method = "POST", path = "/inspect", body = "hello body" })).json()
            assert.equal("hello body", j.body)
            assert.is_true(j.body_again_same)
            local chunked = assert(gw:request({ method = "POST", path = "/inspect",
                headers = { ["Transfer-Encoding"] = "chunked" }, body = "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n" })).json()
            assert.equal("abcde", chunked.body)
            local null = require("cjson").null
            assert.equal(null, assert(gw:request({ path = "/inspect" })).json().body)
            assert.equal(null, assert(gw:request({ method = "POST", path = "/inspect", body = "" })).json().body)
        end)

        it("returns nil, err for a body over the listener's max_body", function()
            local res = assert(gw:request({ method = "POST", path = "/inspect",
                headers = { ["Transfer-Encoding"] = "chunked" },
                body = ("400\r\n" .. ("x"):rep(1024) .. "\r\n"):rep(2) .. "0\r\n\r\n" }))
            -- a chunked body is only known to be too large once read: get_body says so
            assert.equal(200, res.status)
            local j = res.json()
            assert.equal("request body too large", j.body_err)
            assert.equal(require("cjson").null, j.body)
            -- a Content-Length over the limit is refused before any plugin runs
            res = assert(gw:request({ method = "POST", path = "/inspect", body = ("x"):rep(1025) }))
            assert.equal(413, res.status)
            -- exactly at the limit passes
            j = assert(gw:request({ method = "POST", path = "/inspect", body = ("x"):rep(1024) })).json()
            assert.equal(1024, #j.body)
        end)

        it("sends a body a plugin read on to the upstream, re-framed with a Content-Length", function()
            local res = assert(gw:request({ method = "POST", path = "/read-body",
                headers = { ["Transfer-Encoding"] = "chunked" }, body = "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n" }))
            assert.equal(200, res.status)
            local j = res.json()
            assert.equal("hello world", j.body)
            assert.equal("11", j.headers["x-saw-body-len"])
            assert.equal("11", j.headers["content-length"])
            assert.is_nil(j.headers["transfer-encoding"])
            res = assert(gw:request({ method = "POST", path = "/read-body", body = "sized" }))
            assert.equal("sized", res.json().body)
            assert.equal("5", res.json().headers["x-saw-body-len"])
        end)

        it("edits headers toward the upstream: set, add, clear, as later plugins see them", function()
            local res = assert(gw:request({ path = "/edit/x?q=1", headers = { ["X-Set"] = "client", ["X-Drop"] = "bye" } }))
            assert.equal(200, res.status)
            local j = res.json()
            assert.equal("one", j.headers["x-set"])
            assert.equal("1, 2", j.headers["x-added"])
            assert.is_nil(j.headers["x-drop"])
            assert.equal("nil", j.headers["x-saw-drop"])
            assert.equal("1, 2", j.headers["x-saw-added"])
            assert.equal("/edit/x", j.path)
            assert.equal("q=1", j.query)
        end)

        it("set_path changes the upstream path, keeps the query and disables strip_prefix", function()
            local res = assert(gw:request({ path = "/set-path/old?q=2" }))
            assert.equal(200, res.status)
            local j = res.json()
            assert.equal("/new/place", j.path)
            assert.equal("q=2", j.query)
            assert.equal("/new/place", j.headers["x-saw-path"]) -- get_path sees the new path
        end)
    end)

    describe("sluice.response", function()
        it("exit sends a table body as JSON with a JSON Content-Type and its headers", function()
            local res = assert(gw:request({ path = "/exit-json" }))
            assert.equal(201, res.status)
            assert.equal("application/json", res.headers["content-type"])
            assert.same({ ok = true, list = { 1, 2, 3 }, nested = { a = "b" } }, res.json())
            res = assert(gw:request({ path = "/exit-ct" }))
            assert.equal(200, res.status)
            assert.equal("application/vnd.x+json", res.headers["content-type"])
            assert.same({ ok = true, list = { 1, 2, 3 }, nested = { a = "b" } }, res.json())
            res = assert(gw:request({ path = "/inspect" }))
            assert.equal("1", res.headers["x-inspect"])
        end)

        it("header_filter sees the upstream's status and headers and edits them", function()
            local res = assert(gw:request({ path = "/resp-edit" }))
            assert.equal(203, res.status)
            assert.equal("origin", res.body)
            assert.equal("203", res.headers["x-saw-status"])
            assert.equal("from-origin", res.headers["x-saw-up"])
            assert.equal("replaced", res.headers["x-up"])
            assert.equal("a, b", res.headers["x-multi"])
            assert.is_nil(res.headers["x-drop"])
            assert.is_nil(res.headers.server)
        end)

        it("header_filter edits a plugin's answer too", function()
            local res = assert(gw:request({ path = "/resp-edit-answer" }))
            assert.equal(202, res.status)
            assert.equal("202", res.headers["x-saw-status"])
            assert.equal("answer", res.headers["x-saw-up"])
            assert.equal("replaced", res.headers["x-up"])
            assert.is_nil(res.headers["x-drop"])
        end)
    end)

    describe("ctx", function()
        it("is one table per request shared by every plugin and phase, in chain order per phase", function()
            local res = assert(gw:request({ path = "/ctx" }))
            assert.equal(200, res.status)
            assert.equal("alice", res.headers["x-user"])
            -- ctx-a is listed after ctx-b, but every rewrite runs before any access
            assert.equal("ctx-a.rewrite,ctx-b.access,ctx-b.header_filter", res.headers["x-order"])
            assert.equal("true", res.headers["x-same"])
            assert.equal("1", res.headers["x-count"])
            -- a fresh ctx for the next request
            assert.equal("1", assert(gw:request({ path = "/ctx" })).headers["x-count"])
        end)

        it("reads nil and refuses writes outside a request", function()
            local sluice = require("sluice")
            assert.is_nil(sluice.ctx.user)
            assert.has_error(function() sluice.ctx.user = "x" end, "no request is being served here")
            assert.has_error(function() sluice.request.get_path() end,
                             "no request is being served here (sluice API used outside a phase)")
        end)

        it("a chain that does not answer on a route without upstream gets 503", function()
            local res = assert(gw:request({ path = "/fallthrough" }))
            assert.equal(503, res.status)
            assert.same({ error = "no answer" }, res.json())
        end)
    end)

    describe("sluice.log", function()
        it("writes JSON lines with route, plugin and request_id", function()
            test.capture_logs(true)
            local res = assert(gw:request({ path = "/logged/x", headers = { ["X-Request-ID"] = "log-api-1" } }))
            assert.equal(200, res.status)
            local lines = wait_logs(function(l) return l.request_id == "log-api-1" end, "log-api-1")
            test.capture_logs(false)
            assert.equal(1, #lines)
            local l = lines[1]
            assert.equal("warn", l.level)
            assert.equal("spec line /logged/x", l.msg)
            assert.equal("logged", l.route)
            assert.equal("logger", l.plugin)
            assert.matches("^%d%d%d%d%-%d%d%-%d%dT", l.ts)
        end)

        it("joins arguments of any type with spaces, at each level the process logs", function()
            test.capture_logs(true)
            local res = assert(gw:request({ path = "/levels" }))
            assert.equal(200, res.status)
            local lines = wait_logs(function(l) return l.route == "levels" and l.level == "error" end, "levels")
            local all = test.logs()
            test.capture_logs(false)
            assert.equal("at err 1 nil true 2.5", lines[1].msg)
            assert.equal("logger", lines[1].plugin)
            local level = os.getenv("SLUICE_LOG_LEVEL") or "info"
            local seen = {}
            for _, l in ipairs(all) do
                if l.route == "levels" then seen[l.msg] = l.level end
            end
            assert.equal(level == "debug" and "debug" or nil, seen["at debug"])
            assert.equal((level == "debug" or level == "info") and "info" or nil, seen["at info"])
        end)
    end)

    describe("a plugin error", function()
        local function check_500(path, pattern)
            test.capture_logs(true)
            local res = assert(gw:request({ path = path }))
            assert.equal(500, res.status)
            assert.same({ error = "plugin error" }, res.json())
            assert.equal("application/json", res.headers["content-type"])
            assert.is_nil(res.headers["x-before-error"]) -- headers set by plugins are dropped
            local lines = wait_logs(function(l) return l.plugin == "boom" and l.route == path:sub(2) end, path)
            test.capture_logs(false)
            assert.equal(1, #lines)
            assert.equal("error", lines[1].level)
            assert.matches(pattern, lines[1].msg)
            assert.equal(32, #lines[1].request_id)
        end

        it("in rewrite answers 500 and logs route, plugin, request_id and file:line", function()
            check_500("/boom-rewrite", "^plugin error: .*boom%.lua:%d+: boom in rewrite$")
        end)

        it("in access (a runtime error) answers 500", function()
            check_500("/boom-access", "^plugin error: .*boom%.lua:%d+: attempt to index")
        end)

        it("from an API misuse answers 500", function()
            check_500("/boom-misuse", "^plugin error: .*boom%.lua:%d+: .*")
        end)

        it("in header_filter discards the upstream's response for a 500", function()
            check_500("/boom-hf", "^plugin error: .*boom%.lua:%d+: boom in header_filter$")
        end)

        it("sleep in header_filter raises: 500", function()
            check_500("/boom-hf-sleep", "^plugin error: .*sleep works in rewrite and access only")
        end)

        it("in log leaves the response alone and is logged", function()
            test.capture_logs(true)
            local res = assert(gw:request({ path = "/boom-log" }))
            assert.equal(200, res.status)
            assert.equal("/boom-log", res.json().path)
            local lines = wait_logs(function(l) return l.plugin == "boom" and l.route == "boom-log" end, "boom-log")
            test.capture_logs(false)
            assert.matches("^plugin error: .*boom in log$", lines[1].msg)
        end)

        it("leaves the worker serving: the next requests are answered normally", function()
            for _ = 1, 3 do
                assert.equal(500, assert(gw:request({ path = "/boom-access" })).status)
                local res = assert(gw:request({ path = "/inspect", headers = { ["X-A"] = "after" } }))
                assert.equal(200, res.status)
                assert.equal("after", res.json().header)
            end
        end)

        it("is counted per route and plugin in the metrics", function()
            local res = assert(gw:request({ listener = "admin", path = "/metrics" }))
            assert.equal(200, res.status)
            local n = tonumber(res.body:match('sluice_plugin_errors_total{route="boom%-access",plugin="boom"} (%d+)'))
            assert.is_number(n)
            assert.is_true(n >= 4, res.body)
        end)
    end)

    describe("sluice.shared", function()
        local prefix = "spec:" .. tostring(os.time()) .. ":" .. tostring(math.random(1e9)) .. ":"
        local function op(q)
            local res = assert(gw:request({ path = "/shared?" .. q }))
            assert.equal(200, res.status)
            local j = res.json()
            local null = require("cjson").null
            if j.r1 == null then j.r1 = nil end
            if j.r2 == null then j.r2 = nil end
            return j
        end

        it("incr starts a missing key at init and adds atomically", function()
            local k = prefix .. "hits"
            assert.equal(1, op("op=incr&key=" .. k .. "&delta=1&init=0").r1)
            assert.equal(3, op("op=incr&key=" .. k .. "&delta=2&init=0").r1)
            assert.equal(2.5, op("op=incr&key=" .. k .. "&delta=-0.5").r1)
            assert.equal(2.5, op("op=get&key=" .. k).r1)
        end)

        it("incr without init fails on a missing key, and on a string", function()
            local j = op("op=incr&key=" .. prefix .. "missing&delta=1")
            assert.is_nil(j.r1)
            assert.equal("not found", j.r2)
            assert.is_true(op("op=set&key=" .. prefix .. "s&value=text").r1)
            j = op("op=incr&key=" .. prefix .. "s&delta=1&init=0")
            assert.is_nil(j.r1)
            assert.equal("not a number", j.r2)
        end)

        it("set and get keep numbers and strings apart; delete removes", function()
            assert.is_true(op("op=set&key=" .. prefix .. "n&value=42").r1)
            local j = op("op=get&key=" .. prefix .. "n")
            assert.same({ 42, "number" }, { j.r1, j.type })
            op("op=set&key=" .. prefix .. "str&value=hello")
            j = op("op=get&key=" .. prefix .. "str")
            assert.same({ "hello", "string" }, { j.r1, j.type })
            assert.is_true(op("op=delete&key=" .. prefix .. "str").r1)
            assert.is_nil(op("op=get&key=" .. prefix .. "str").r1)
            assert.is_nil(op("op=get&key=" .. prefix .. "never-set").r1)
        end)

        it("expires keys after their ttl; incr's ttl applies only when it creates the key", function()
            local k = prefix .. "ttl"
            assert.equal(1, op("op=incr&key=" .. k .. "&delta=1&init=0&ttl=0.15").r1)
            assert.equal(2, op("op=incr&key=" .. k .. "&delta=1&init=0&ttl=100").r1)
            op("op=set&key=" .. prefix .. "forever&value=1")
            ffi.C.usleep(250000)
            assert.is_nil(op("op=get&key=" .. k).r1)
            assert.equal(1, op("op=incr&key=" .. k .. "&delta=1&init=0").r1) -- starts again
            assert.equal(1, op("op=get&key=" .. prefix .. "forever").r1)
        end)

        it("is one key space for the whole process", function()
            local shared = require("sluice").shared
            op("op=set&key=" .. prefix .. "seen&value=from-worker")
            assert.equal("from-worker", shared.get(prefix .. "seen"))
            assert.is_true(shared.set(prefix .. "other", 7))
            assert.equal(7, op("op=get&key=" .. prefix .. "other").r1)
        end)
    end)

    describe("sluice.sleep", function()
        it("suspends the request for the time asked", function()
            local t0 = test.lib.sl_now_ns()
            local res = assert(gw:request({ path = "/sleep" }))
            local ms = tonumber(test.lib.sl_now_ns() - t0) / 1e6
            assert.equal(200, res.status)
            local slept = res.json().slept
            assert.is_true(slept >= 0.095 and slept < 1, tostring(slept))
            assert.is_true(ms >= 95, tostring(ms))
        end)

        it("does not block the worker: concurrent sleeps overlap", function()
            -- 20 connections to the one worker, each request sleeping 0.1 s; in series
            -- they would take 2 s. Plain blocking sockets: send all, then read all.
            pcall(ffi.cdef, [[
                struct spec_sockaddr_in { uint16_t family; uint16_t port; uint32_t addr; uint8_t zero[8]; };
                int socket(int domain, int type, int protocol);
                int connect(int fd, const void *addr, uint32_t len);
                long send(int fd, const void *buf, size_t len, int flags);
                long recv(int fd, void *buf, size_t len, int flags);
                int close(int fd);
                int inet_pton(int af, const char *src, void *dst);
            ]])
            local C = ffi.C
            local host, port = gw:address():match("^(.*):(%d+)$")
            local sa = ffi.new("struct spec_sockaddr_in")
            sa.family = 2
            port = tonumber(port)
            local bit = require("bit")
            sa.port = bit.bor(bit.rshift(port, 8), bit.lshift(bit.band(port, 0xff), 8))
            assert(C.inet_pton(2, host, ffi.cast("void *", ffi.cast("char *", sa) + 4)) == 1)
            local req = "GET /sleep HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            local t0 = test.lib.sl_now_ns()
            local fds = {}
            for i = 1, 20 do
                local fd = C.socket(2, 1, 0)
                assert(fd >= 0)
                assert(C.connect(fd, sa, ffi.sizeof(sa)) == 0)
                assert(C.send(fd, req, #req, 0) == #req)
                fds[i] = fd
            end
            local buf = ffi.new("char[4096]")
            local ok = 0
            for _, fd in ipairs(fds) do
                local got = {}
                while true do
                    local n = C.recv(fd, buf, 4096, 0)
                    if n <= 0 then break end
                    got[#got + 1] = ffi.string(buf, n)
                end
                C.close(fd)
                if table.concat(got):match("^HTTP/1%.1 200") then ok = ok + 1 end
            end
            local ms = tonumber(test.lib.sl_now_ns() - t0) / 1e6
            assert.equal(20, ok)
            -- in series they take 2,000 ms; sanitizer builds get slack for their slowdown
            local slack = os.getenv("SLUICE_SANITIZE") == "1" and 1.8 or 1
            assert.is_true(ms < 1000 * slack, ("20 sleeps of 100 ms took %.0f ms"):format(ms))
        end)

        it("returns at once for 0", function()
            local res = assert(gw:request({ path = "/sleep0" }))
            assert.equal(200, res.status)
            assert.is_true(res.json().slept < 0.05)
        end)
    end)
end)
