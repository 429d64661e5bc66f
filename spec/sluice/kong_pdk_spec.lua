-- sluice.kong: every function of the kong.* PDK subset and of the ngx basics, called by a
-- Kong-style plugin (spec/fixtures/kong/kong-pdk-probe) in a real gateway, through a real
-- request. The last test fails when a PDK function has no test here.
package.path = "lua/?.lua;lua/?/init.lua;spec/fixtures/?.lua;" .. package.path
local test = require("sluice.test")
local kg = require("kong_gateway")
local cjson = require("cjson")
local ffi = require("ffi")
pcall(ffi.cdef, "int usleep(unsigned int usec);")

local gw, up, up2
local tested = {}

-- The results of access case `name`, as the list its function returned.
local function call(name, req)
    req = req or {}
    req.path = req.path or "/probe"
    req.headers = req.headers or {}
    req.headers["X-Probe"] = name
    local res = assert(gw:request(req))
    assert.equal(200, res.status, res.body)
    return res.json().results, res
end

-- A request that passes through (the case edits it): what the upstream received.
local function pass(name, req)
    req = req or {}
    req.path = req.path or "/probe"
    req.headers = req.headers or {}
    req.headers["X-Probe"] = name
    local res = assert(gw:request(req))
    assert.equal(200, res.status, res.body)
    return res.json(), res
end

local function hf(name, req)
    req = req or {}
    req.path = req.path or "/probe"
    req.headers = req.headers or {}
    req.headers["X-Probe-HF"] = name
    local res = assert(gw:request(req))
    return cjson.decode(res.headers["x-probe-result"] or "null"), res
end

local function pdk(name, fn)
    tested[name] = true
    it(name, fn)
end

local function logged(msg)
    for _ = 1, 100 do
        for _, l in ipairs(test.logs()) do
            if type(l.msg) == "string" and l.msg:find(msg, 1, true) then return l end
        end
        ffi.C.usleep(5000)
    end
    return nil
end

describe("kong PDK", function()
    setup(function()
        test.capture_logs(true)
        up2 = test.upstream()
        gw, up = kg.start({
            kg.route("probe", { { name = "kong-pdk-probe" } }),
            { name = "other", match = { paths = { "/other" } }, plugins = { { name = "kong-pdk-probe" } },
              upstream = "u" },
        }, { listeners = { { name = "web", listen = "127.0.0.1:0", trusted_proxies = { "127.0.0.0/8" } },
                           { name = "direct", listen = "127.0.0.1:0" } } }) -- no trusted proxy
    end)
    teardown(function()
        gw:stop()
        up:stop()
        up2:stop()
    end)

    -- ------------------------------------------------------------ kong.request
    pdk("kong.request.get_scheme", function() assert.same({ "http" }, call("kong.request.get_scheme")) end)
    pdk("kong.request.get_host", function()
        assert.same({ "api.example.com" }, call("kong.request.get_host", { host = "API.example.com:8080" }))
    end)
    pdk("kong.request.get_port", function()
        local port = tonumber(gw:address():match(":(%d+)$"))
        assert.same({ port }, call("kong.request.get_port"))
    end)
    pdk("kong.request.get_method", function()
        assert.same({ "DELETE" }, call("kong.request.get_method", { method = "DELETE" }))
    end)
    pdk("kong.request.get_path", function() assert.same({ "/probe/x" }, call("kong.request.get_path", { path = "/probe/x?a=1" })) end)
    pdk("kong.request.get_raw_path", function()
        assert.same({ "/probe/y" }, call("kong.request.get_raw_path", { path = "/probe/y?a=1" }))
    end)
    pdk("kong.request.get_raw_query", function()
        assert.same({ "a=1&b=%20" }, call("kong.request.get_raw_query", { path = "/probe?a=1&b=%20" }))
        assert.same({ "" }, call("kong.request.get_raw_query"))
    end)
    pdk("kong.request.get_path_with_query", function()
        assert.same({ "/probe?a=1" }, call("kong.request.get_path_with_query", { path = "/probe?a=1" }))
        assert.same({ "/probe" }, call("kong.request.get_path_with_query"))
    end)
    pdk("kong.request.get_query_arg", function()
        assert.same({ "x y", true, cjson.null }, call("kong.request.get_query_arg", { path = "/probe?a=x+y&flag" }))
    end)
    pdk("kong.request.get_query", function()
        local r = call("kong.request.get_query", { path = "/probe?a=1&a=2&b=x%20y&f" })
        assert.same({ a = { "1", "2" }, b = "x y", f = true }, r[1])
        assert.same({ a = "1" }, r[2]) -- max_args 1
    end)
    it("kong.request.get_query reads 100 arguments unless told (1..1000), as Kong's; ngx's 0 is all", function()
        local q = {}
        for i = 1, 150 do q[i] = "k" .. i .. "=" .. i end
        q[151] = "k1=again"
        local r = call("get_query limits", { path = "/probe?" .. table.concat(q, "&") })
        assert.same({ 100, "truncated", 151, 100, 151, "max_args must be >= 1", "max_args must be <= 1000",
                      "max_args must be a number", false, "max_headers must be >= 1" }, r)
    end)
    -- behind a trusted proxy (the listener "web") the X-Forwarded-* headers say; from any
    -- other peer ("direct") they are ignored, as in Kong
    local FWD = { ["X-Forwarded-Proto"] = "HTTPS", ["X-Forwarded-Host"] = "user@Shop.Example.com:8443",
                  ["X-Forwarded-Path"] = "/orig/p", ["X-Forwarded-Prefix"] = "/pre" }
    local function fwd(name, headers, listener)
        return call(name, { path = "/probe/x", host = "gw.local:81", headers = headers, listener = listener })
    end
    pdk("kong.request.get_forwarded_scheme", function()
        assert.same({ "https" }, fwd("kong.request.get_forwarded_scheme", FWD))
        assert.same({ "http" }, fwd("kong.request.get_forwarded_scheme", FWD, "direct"))
        assert.same({ "http" }, fwd("kong.request.get_forwarded_scheme", {}))
    end)
    pdk("kong.request.get_forwarded_host", function()
        assert.same({ "shop.example.com" }, fwd("kong.request.get_forwarded_host", FWD))
        assert.same({ "gw.local" }, fwd("kong.request.get_forwarded_host", FWD, "direct"))
    end)
    pdk("kong.request.get_forwarded_port", function()
        local port = tonumber(gw:address("direct"):match(":(%d+)$"))
        assert.same({ 8443 }, fwd("kong.request.get_forwarded_port", FWD)) -- from X-Forwarded-Host
        local h = { ["X-Forwarded-Port"] = "444", ["X-Forwarded-Host"] = "a:8443" }
        assert.same({ 444 }, fwd("kong.request.get_forwarded_port", h))
        assert.same({ port }, fwd("kong.request.get_forwarded_port", h, "direct"))
    end)
    pdk("kong.request.get_forwarded_path", function()
        assert.same({ "/orig/p" }, fwd("kong.request.get_forwarded_path", FWD))
        assert.same({ "/probe/x" }, fwd("kong.request.get_forwarded_path", FWD, "direct"))
    end)
    pdk("kong.request.get_forwarded_prefix", function()
        assert.same({ "/pre" }, fwd("kong.request.get_forwarded_prefix", FWD))
        assert.same({ cjson.null }, fwd("kong.request.get_forwarded_prefix", FWD, "direct"))
    end)
    pdk("kong.request.get_header", function()
        assert.same({ "2", "2", cjson.null }, call("kong.request.get_header", { headers = { ["X-Two"] = "2" } }))
    end)
    pdk("kong.request.get_headers", function()
        assert.same({ "2", "kong.request.get_headers" }, call("kong.request.get_headers", { headers = { ["X-Two"] = "2" } }))
    end)
    pdk("kong.request.get_raw_body", function()
        assert.same({ "the body" }, call("kong.request.get_raw_body", { method = "POST", body = "the body" }))
        assert.same({ "" }, call("kong.request.get_raw_body"))
    end)
    pdk("kong.request.get_body", function()
        local r = call("kong.request.get_body", { method = "POST", body = '{"a":[1,2]}',
                                                  headers = { ["Content-Type"] = "application/json" } })
        assert.same({ { a = { 1, 2 } }, cjson.null, "application/json" }, r)
        r = call("kong.request.get_body", { method = "POST", body = "a=1&b=x+y",
                                            headers = { ["Content-Type"] = "application/x-www-form-urlencoded" } })
        assert.same({ { a = "1", b = "x y" }, cjson.null, "application/x-www-form-urlencoded" }, r)
        r = call("kong.request.get_body", { method = "POST", body = "{bad", headers = { ["Content-Type"] = "application/json" } })
        assert.same({ cjson.null, "invalid json body", "application/json" }, r)
        r = call("kong.request.get_body", { method = "POST", body = "x", headers = { ["Content-Type"] = "text/plain" } })
        assert.equal(cjson.null, r[1])
        assert.matches("unsupported content type", r[2])
    end)

    -- ------------------------------------------------------------ kong.response
    pdk("kong.response.exit", function()
        local res = assert(gw:request({ path = "/probe", headers = { ["X-Probe"] = "kong.response.exit" } }))
        assert.equal(201, res.status)
        assert.same({ made = true }, res.json())
        assert.equal("1", res.headers["x-exit"])
        assert.equal("application/json; charset=utf-8", res.headers["content-type"])
        assert.is_nil(res.headers["x-after"]) -- the method ended at exit
    end)
    it("kong.response.exit in header_filter is a plugin error naming the plugin's line", function()
        local _, res = hf("exit")
        assert.equal(500, res.status)
        local l = logged("kong.response.exit works in rewrite and access only")
        assert.truthy(l, "no log line")
        assert.matches("kong%-pdk%-probe/handler%.lua:%d+: kong%.response%.exit works", l.msg)
    end)
    pdk("kong.response.error", function()
        local function err(status, accept, msg)
            local res = assert(gw:request({ path = "/probe", headers = { ["X-Probe"] = "kong.response.error",
                ["X-Err-Status"] = tostring(status), Accept = accept, ["X-Err-Msg"] = msg } }))
            assert.equal(status, res.status)
            assert.equal("1", res.headers["x-e"])
            assert.is_nil(res.headers["x-after"]) -- the method ended at error
            return res.headers["content-type"], res.body
        end
        -- JSON unless the client's Accept prefers another of Kong's formats; Kong's messages
        local ct, body = err(401)
        assert.equal("application/json; charset=utf-8", ct)
        assert.same({ message = "Unauthorized" }, cjson.decode(body))
        ct, body = err(429, "text/html;q=0.5, text/plain")
        assert.equal("text/plain; charset=utf-8", ct)
        assert.equal("Too many requests\n", body)
        ct, body = err(403, "application/xml", "go away")
        assert.equal("application/xml; charset=utf-8", ct)
        assert.matches("<message>go away</message>", body, 1, true)
        ct, body = err(503, "text/html")
        assert.equal("text/html; charset=utf-8", ct)
        assert.matches("<p>The upstream server is currently unavailable.</p>", body, 1, true)
        ct, body = err(499, "*/*", 'a "quoted" word')
        assert.same({ message = 'a "quoted" word' }, cjson.decode(body))
    end)
    pdk("kong.response.get_status", function()
        local r = hf("kong.response.get_status")
        assert.same({ 200 }, r)
    end)
    pdk("kong.response.get_header", function()
        assert.same({ "application/json", "application/json" }, (hf("kong.response.get_header")))
    end)
    pdk("kong.response.get_headers", function() assert.same({ "application/json" }, (hf("kong.response.get_headers"))) end)
    pdk("kong.response.set_header", function()
        local _, res = hf("kong.response.set_header")
        assert.equal("set", res.headers["x-resp"])
    end)
    pdk("kong.response.add_header", function()
        local _, res = hf("kong.response.add_header")
        assert.equal("a, b", res.headers["x-resp"])
    end)
    pdk("kong.response.clear_header", function()
        local _, res = hf("kong.response.clear_header")
        assert.is_nil(res.headers["content-type"])
        assert.equal(200, res.status) -- Content-Length is the gateway's: clearing it is a no-op
        assert.is_table(res.json())
    end)
    pdk("kong.response.set_headers", function()
        local _, res = hf("kong.response.set_headers")
        assert.equal("1", res.headers["x-h1"])
        assert.equal("2", res.headers["x-h2"])
    end)
    pdk("kong.response.get_raw_body", function()
        local res = assert(gw:request({ path = "/probe/abc", headers = { ["X-Probe-Body"] = "raw" } }))
        assert.equal(200, res.status)
        assert.matches('^%[%d+%]{"', res.body) -- the whole body's length, then its start
    end)
    pdk("kong.response.set_raw_body", function()
        local res = assert(gw:request({ path = "/probe/abc", headers = { ["X-Probe-Body"] = "raw" } }))
        local n = tonumber(res.body:match("^%[(%d+)%]"))
        assert.is_true(n > 50)
        assert.equal(#("[" .. n .. "]") + 9, #res.body)
    end)

    it("kong.response.set_raw_body (or ngx.arg[2] = true) on a piece before the last ends the body there", function()
        local big = string.rep("x", 400000)
        local function req(mode)
            return assert(gw:request({ method = "POST", path = "/probe/abc", body = big,
                                       headers = { ["X-Probe-Body"] = mode } }))
        end
        local n = tonumber(req("count").body)
        assert.is_true(n > 1, "the body came in one piece: nothing to test")
        local res = req("first")
        assert.equal(200, res.status)
        assert.equal("replaced", res.body:sub(1, 40)) -- a short message when it is not
        assert.equal(8, #res.body)
        local cut = req("eof").body
        assert.equal("cut", cut:sub(1, 40))
        assert.equal(3, #cut)
    end)

    -- ------------------------------------------------------------ kong.service
    pdk("kong.service.set_upstream", function()
        local r = call("kong.service.set_upstream")
        assert.equal(cjson.null, r[1])
        assert.is_string(r[2])
    end)
    pdk("kong.service.set_target", function()
        local seen, res = pass("kong.service.set_target", { headers = { ["X-Target"] = up2:address() } })
        assert.equal(200, res.status)
        assert.equal(up2:address(), seen.headers["x-target"])
    end)
    it("a refused kong.service.request call is logged at the plugin's file and line", function()
        for _, case in ipairs({ "bad set_path", "bad clear_header" }) do
            local res = assert(gw:request({ path = "/probe", headers = { ["X-Probe"] = case } }))
            assert.equal(500, res.status)
        end
        for _, msg in ipairs({ "path must not contain spaces", "Host is required upstream" }) do
            local l = logged(msg)
            assert.truthy(l, "no log line " .. msg)
            assert.matches("kong%-pdk%-probe/handler%.lua:%d+: ", l.msg)
        end
    end)
    pdk("kong.service.request.set_header", function()
        assert.equal("v", pass("kong.service.request.set_header").headers["x-set"])
    end)
    pdk("kong.service.request.add_header", function()
        assert.equal("2, three", pass("kong.service.request.add_header", { headers = { ["X-Two"] = "2" } }).headers["x-two"])
    end)
    pdk("kong.service.request.clear_header", function()
        assert.is_nil(pass("kong.service.request.clear_header", { headers = { ["X-Two"] = "2" } }).headers["x-two"])
    end)
    pdk("kong.service.request.set_headers", function()
        local h = pass("kong.service.request.set_headers").headers
        assert.equal("1", h["x-m1"])
        assert.equal("2", h["x-m2"])
    end)
    pdk("kong.service.request.set_path", function()
        assert.equal("/rewritten", pass("kong.service.request.set_path").path)
    end)
    pdk("kong.service.request.set_raw_query", function()
        assert.equal("x=1&y", pass("kong.service.request.set_raw_query", { path = "/probe?old=1" }).query)
    end)
    pdk("kong.service.request.set_query", function()
        assert.equal("a=1&a=x%20y&b=2&f", pass("kong.service.request.set_query").query)
    end)
    pdk("kong.service.request.set_raw_body", function()
        assert.equal("replaced", pass("kong.service.request.set_raw_body", { method = "POST", body = "original" }).body)
    end)
    pdk("kong.service.request.set_body", function()
        local seen = pass("kong.service.request.set_body", { method = "POST", body = '{"a":1}',
                                                              headers = { ["Content-Type"] = "application/json" } })
        assert.same({ a = 1, added = "yes" }, cjson.decode(seen.body))
        assert.equal("application/json", seen.headers["content-type"])
    end)
    pdk("kong.service.response.get_status", function()
        assert.same({ 200 }, (hf("kong.service.response.get_status")))
        -- no upstream answered (kong.response.exit in access): nil, as in Kong, not the exit's 201
        local r, res = hf("kong.service.response.get_status", { headers = { ["X-Probe"] = "kong.response.exit" } })
        assert.equal(201, res.status)
        assert.same({ cjson.null }, r)
    end)
    pdk("kong.service.response.get_header", function()
        assert.same({ "application/json" }, (hf("kong.service.response.get_header")))
    end)
    pdk("kong.service.response.get_headers", function()
        assert.same({ "application/json" }, (hf("kong.service.response.get_headers")))
    end)

    -- ------------------------------------------------------------ kong.ctx
    pdk("kong.ctx.shared", function()
        -- access sets it, header_filter of the same request reads it
        local r = hf("kong.ctx.shared", { headers = { ["X-Probe"] = "kong.ctx.shared" } })
        assert.same({ "k" }, r)
        assert.same({ cjson.null }, (hf("kong.ctx.shared"))) -- a new request starts empty
    end)
    pdk("kong.ctx.plugin", function()
        -- a request's table starts empty: the ctx tables (and the plugin's table in each) are
        -- reused by later requests, emptied first
        for _ = 1, 5 do
            assert.same({ "mine" }, (hf("kong.ctx.plugin", { headers = { ["X-Probe"] = "kong.ctx.plugin" } })))
            assert.same({ cjson.null }, (hf("kong.ctx.plugin")))
        end
    end)

    -- ------------------------------------------------------------ kong.log
    -- each at the level it maps to; a line below the process's level (SLUICE_LOG_LEVEL) is
    -- not written at all
    local RANK = { debug = 0, info = 1, warn = 2, error = 3 }
    local min = RANK[({ err = "error" })[os.getenv("SLUICE_LOG_LEVEL") or "info"] or os.getenv("SLUICE_LOG_LEVEL") or "info"]
    for i, level in ipairs({ "debug", "info", "notice", "warn", "err", "crit", "alert", "emerg" }) do
        local word = ({ "dbg", "inf", "note", "wrn", "er", "crit", "alert", "emerg" })[i]
        local want = ({ debug = "debug", info = "info", notice = "info", warn = "warn" })[level] or "error"
        pdk("kong.log." .. level, function()
            call("kong.log." .. level)
            local l = logged(word .. " " .. i) -- the arguments joined without a separator
            if RANK[want] < min then
                assert.is_nil(l)
                return
            end
            assert.truthy(l, "no log line " .. word .. " " .. i)
            assert.equal(want, l.level)
            assert.equal("kong-pdk-probe", l.plugin)
        end)
    end
    pdk("kong.log.inspect", function()
        call("kong.log.inspect")
        local l = logged('{"a":1} x')
        if min > RANK.debug then assert.is_nil(l) else assert.equal("debug", l.level) end
    end)
    pdk("kong.log.serialize", function()
        local key = "serialize-" .. os.time() .. math.random(1e6)
        assert(gw:request({ path = "/probe/s?q=1", headers = { ["X-Serialize"] = key } }))
        local got
        for _ = 1, 100 do
            got = call("cached", { headers = { ["X-Key"] = key } })[1]
            if got ~= cjson.null then break end
            ffi.C.usleep(5000)
        end
        assert.equal("GET", got.request.method)
        assert.equal("/probe/s?q=1", got.request.uri)
        assert.same({ q = "1" }, got.request.querystring)
        assert.equal(200, got.response.status)
        assert.equal("probe", got.route.name)
        assert.equal("u", got.service.name)
        assert.equal("127.0.0.1", got.client_ip)
        assert.is_number(got.latencies.request)
    end)

    -- ------------------------------------------------------------ kong.client
    pdk("kong.client.get_ip", function()
        assert.same({ "127.0.0.1" }, call("kong.client.get_ip", { headers = { ["X-Forwarded-For"] = "203.0.113.9" } }))
    end)
    pdk("kong.client.get_forwarded_ip", function()
        -- the peer is a trusted proxy here: the address it forwarded
        assert.same({ "203.0.113.9" }, call("kong.client.get_forwarded_ip", { headers = { ["X-Forwarded-For"] = "203.0.113.9" } }))
    end)
    pdk("kong.client.get_protocol", function() assert.same({ "http" }, call("kong.client.get_protocol")) end)
    pdk("kong.client.load_consumer", function()
        local r = call("kong.client.load_consumer")
        assert.same({ id = "alice", username = "alice" }, r[1])
        assert.same({ cjson.null, "consumer not found" }, { r[2], r[3] })
    end)
    pdk("kong.client.authenticate", function()
        assert.equal("alice", pass("kong.client.authenticate").headers["x-consumer"]) -- sluice's consumer header
    end)
    pdk("kong.client.get_consumer", function()
        assert.same({ { id = "alice", username = "alice" }, { id = "cred-1" } }, call("kong.client.get_consumer"))
    end)
    pdk("kong.client.get_credential", function()
        assert.same({ { id = "cred-2" }, cjson.null }, call("kong.client.get_credential"))
    end)

    -- ------------------------------------------------------------ kong.db (consumers)
    pdk("kong.db.consumers:select", function()
        assert.same({ { id = "alice", username = "alice" }, cjson.null }, call("kong.db.consumers:select"))
    end)
    pdk("kong.db.consumers:select_by_username", function()
        assert.same({ { id = "alice", username = "alice" } }, call("kong.db.consumers:select_by_username"))
    end)
    pdk("kong.db.consumers:cache_key", function()
        assert.same({ "consumers:alice" }, call("kong.db.consumers:cache_key"))
    end)
    pdk("kong.db.keyauth_credentials:select_by_key", function()
        assert.same({ { id = "alice:key-auth", key = "k-123", consumer = { id = "alice" } }, cjson.null },
                    call("kong.db.keyauth_credentials:select_by_key"))
    end)
    pdk("kong.db.keyauth_credentials:cache_key", function()
        assert.same({ "keyauth_credentials:k-123" }, call("kong.db.keyauth_credentials:cache_key"))
    end)

    -- ------------------------------------------------------------ router, node
    pdk("kong.router.get_route", function()
        assert.same({ { id = "other", name = "other" } }, call("kong.router.get_route", { path = "/other" }))
    end)
    pdk("kong.node.get_id", function()
        local r = call("kong.node.get_id")
        assert.matches("^%x+%-%x+%-4%x+%-a%x+%-%x+$", r[1])
        assert.equal(36, #r[1])
        assert.equal(r[1], r[2])
        assert.equal(r[1], call("kong.node.get_id")[1])
    end)
    pdk("kong.node.get_hostname", function()
        local f = io.open("/proc/sys/kernel/hostname")
        local h = f:read("*l")
        f:close()
        assert.same({ h }, call("kong.node.get_hostname"))
    end)

    -- ------------------------------------------------------------ kong.cache
    local function key() return "k" .. os.time() .. "-" .. math.random(1e9) end
    pdk("kong.cache:get", function()
        local r = call("kong.cache:get", { headers = { ["X-Key"] = key() } })
        assert.same({ v = "one" }, r[1])
        assert.same({ v = "one" }, r[2]) -- the second get is a hit: its callback never ran
        assert.equal(1, r[3])
        assert.equal(cjson.null, r[4])
        assert.matches("callback threw an error: .*boom", r[5])
    end)
    pdk("kong.cache:probe", function()
        assert.same({ cjson.null, "v" }, call("kong.cache:probe", { headers = { ["X-Key"] = key() } }))
    end)
    pdk("kong.cache:invalidate", function()
        assert.same({ 2 }, call("kong.cache:invalidate", { headers = { ["X-Key"] = key() } }))
    end)
    pdk("kong.cache:invalidate_local", function()
        assert.same({ 3 }, call("kong.cache:invalidate_local", { headers = { ["X-Key"] = key() } }))
    end)

    -- ------------------------------------------------------------ table, ip
    pdk("kong.table.new", function() assert.same({ "x", "y" }, call("kong.table.new")) end)
    pdk("kong.table.clear", function() assert.same({ true }, call("kong.table.clear")) end)
    pdk("kong.ip.is_trusted", function() assert.same({ true, false }, call("kong.ip.is_trusted")) end)

    -- ------------------------------------------------------------ ngx
    pdk("ngx.var", function()
        local port = gw:address():match(":(%d+)$")
        local v = call("ngx.var", { method = "POST", path = "/probe/v?a=1", body = "xy",
                                    headers = { ["X-Two"] = "2", Cookie = "b=0; c=cookie!", ["Content-Type"] = "text/plain" } })[1]
        assert.same({
            request_method = "POST", uri = "/probe/v", request_uri = "/probe/v?a=1", args = "a=1",
            query_string = "a=1", is_args = "?", host = "localhost", scheme = "http", https = "",
            server_port = port, remote_addr = "127.0.0.1", realip_remote_addr = "127.0.0.1",
            request_id = v.request_id, content_type = "text/plain", content_length = "2",
            http_host = "localhost", hostname = v.hostname, http_x_two = "2", arg_a = "1",
            cookie_c = "cookie!", status = v.status,
        }, v)
        assert.equal(32, #v.request_id)
        assert.same({ "200" }, (hf("ngx.var")))
    end)
    pdk("ngx.ctx", function() assert.same({ "n" }, call("ngx.ctx")) end)
    pdk("ngx.now", function()
        local t = call("ngx.now")[1]
        assert.is_true(math.abs(t - os.time()) < 2)
        assert.is_true(t % 1 ~= 0 or true)
    end)
    pdk("ngx.time", function()
        local t = call("ngx.time")[1]
        assert.equal(math.floor(t), t)
        assert.is_true(math.abs(t - os.time()) < 2)
    end)
    pdk("ngx.today", function() assert.same({ os.date("!%Y-%m-%d") }, call("ngx.today")) end)
    pdk("ngx.update_time", function() assert.same({ true }, call("ngx.update_time")) end)
    pdk("ngx.http_time", function() assert.same({ "Thu, 01 Jan 1970 00:00:00 GMT" }, call("ngx.http_time")) end)
    pdk("ngx.cookie_time", function() assert.same({ "Thu, 01-Jan-70 00:00:00 GMT" }, call("ngx.cookie_time")) end)
    pdk("ngx.sleep", function()
        local d = call("ngx.sleep")[1]
        assert.is_true(d >= 0.045, tostring(d))
    end)
    pdk("ngx.encode_base64", function() assert.same({ "aGVsbG8/Pg==", "YQ" }, call("ngx.encode_base64")) end)
    pdk("ngx.decode_base64", function() assert.same({ "hello?>", cjson.null }, call("ngx.decode_base64")) end)
    pdk("ngx.md5", function() assert.same({ "900150983cd24fb0d6963f7d28e17f72" }, call("ngx.md5")) end)
    pdk("ngx.md5_bin", function() assert.same({ 16 }, call("ngx.md5_bin")) end)
    pdk("ngx.sha1_bin", function() assert.same({ "qZk+NkcGgWq6PiVxeFDCbJzQ2J0=" }, call("ngx.sha1_bin")) end)
    pdk("ngx.hmac_sha1", function() assert.same({ "3nybhbi3iqa8ino29wqQcBydtNk=" }, call("ngx.hmac_sha1")) end)
    pdk("ngx.crc32_short", function() assert.same({ 907060870 }, call("ngx.crc32_short")) end)
    pdk("ngx.crc32_long", function() assert.same({ 907060870 }, call("ngx.crc32_long")) end)
    pdk("ngx.escape_uri", function() assert.same({ "a%20b%2Fc%3Fd" }, call("ngx.escape_uri")) end)
    pdk("ngx.unescape_uri", function() assert.same({ "a b c" }, call("ngx.unescape_uri")) end)
    pdk("ngx.encode_args", function() assert.same({ "a=x%20y&b=2" }, call("ngx.encode_args")) end)
    pdk("ngx.decode_args", function() assert.same({ { a = { "1", "2" }, b = "x y", f = true } }, call("ngx.decode_args")) end)
    pdk("ngx.quote_sql_str", function() assert.same({ "'it\\'s'" }, call("ngx.quote_sql_str")) end)
    pdk("ngx.re.match", function()
        assert.same({ "user=alice id=42", "user", "alice", "42", "user", cjson.null, true }, call("ngx.re.match"))
    end)
    pdk("ngx.re.find", function() assert.same({ 7, 9, 8, 9 }, call("ngx.re.find")) end)
    pdk("ngx.re.gmatch", function() assert.same({ { "a1", "b2" } }, call("ngx.re.gmatch")) end)
    pdk("ngx.re.sub", function() assert.same({ "heLlo", 1 }, call("ngx.re.sub")) end)
    pdk("ngx.re.gsub", function() assert.same({ "a<1>b<22>", 2, "a1b2" }, call("ngx.re.gsub")) end)
    pdk("ngx.log", function()
        call("ngx.log")
        local l = logged("ngx warn")
        assert.truthy(l)
        assert.equal("warn", l.level)
    end)
    pdk("ngx.exit", function()
        local res = assert(gw:request({ path = "/probe", headers = { ["X-Probe"] = "ngx.exit" } }))
        assert.equal(403, res.status)
        assert.is_nil(res.headers["x-after"])
    end)
    it("ngx.exit(ngx.OK) ends the method without an answer, and the chain goes on", function()
        local h = pass("ngx.exit(ngx.OK)").headers
        assert.equal("1", h["x-before"])
        assert.is_nil(h["x-after"])
    end)
    pdk("ngx.arg", function()
        local res = assert(gw:request({ path = "/probe/abc", headers = { ["X-Probe-Body"] = "arg" } }))
        assert.matches('"PATH":"\\/PROBE\\/ABC"', res.body, 1, true)
    end)
    pdk("ngx.header", function()
        local r, res = hf("ngx.header")
        assert.same({ "application/json" }, r)
        assert.equal("h", res.headers["x-ngx"])
        assert.equal("1, 2", res.headers["x-multi"])
    end)
    it("ngx.header: clearing Content-Length or Transfer-Encoding is a no-op, as kong.response.clear_header's", function()
        local r, res = hf("ngx.header framing")
        assert.equal(200, res.status)
        assert.same({ true }, r)
        assert.is_table(res.json())
    end)
    pdk("ngx.req", function()
        local r, res = call("ngx.req", { method = "PUT", path = "/probe?a=7", body = "b", headers = { ["X-Two"] = "2" } })
        assert.same({ "PUT", "ngx.req", "7", "b", true }, r)
        assert.equal(200, res.status)
    end)
    pdk("ngx constants", function() assert.same({ 200, 404, 4, true, "http", 0 }, call("ngx constants")) end)

    it("has a test for every function of the kong and ngx tables", function()
        local kmod = require("sluice.kong")
        local kngx = require("sluice.kong.ngx")
        local missing = {}
        local function walk(t, path, seen)
            if seen[t] then return end
            seen[t] = true
            for k, v in pairs(t) do
                local method = path:match("^kong%.db%.[%w_]+$") or path == "kong.cache"
                local p = path .. (method and ":" or ".") .. k
                if type(v) == "function" then
                    local covered = tested[p]
                    -- ngx.re.X, ngx.req.X, ngx.worker.X, ngx.config: tested through their table's case
                    for prefix in pairs(tested) do
                        if p:sub(1, #prefix + 1) == prefix .. "." then covered = true end
                    end
                    if not covered and not p:find("^ngx%.worker") then missing[#missing + 1] = p end
                elseif type(v) == "table" and k ~= "db" or (k == "db" and path == "kong") then
                    walk(v, path .. "." .. k, seen)
                end
            end
        end
        walk(kmod.kong, "kong", {})
        walk(kngx.ngx, "ngx", {})
        table.sort(missing)
        assert.same({}, missing)
    end)
end)
