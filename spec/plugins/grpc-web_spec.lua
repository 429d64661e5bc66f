-- grpc-web: gRPC-Web framing (sluice.grpc_web) and the plugin against the real core.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local cjson = require("cjson")
local gw = require("sluice.grpc_web")

local function frame(msg, flags)
    local n = #msg
    return string.char(flags or 0, math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                       math.floor(n / 256) % 256, n % 256) .. msg
end

describe("sluice.grpc_web", function()
    it("encodes base64 with padding (RFC 4648 vectors)", function()
        for plain, enc in pairs({ [""] = "", f = "Zg==", fo = "Zm8=", foo = "Zm9v", foob = "Zm9vYg==",
                                  fooba = "Zm9vYmE=", foobar = "Zm9vYmFy" }) do
            assert.equal(enc, gw.b64_encode(plain))
            assert.equal(plain, gw.b64_decode(enc))
        end
        assert.equal("/+8=", gw.b64_encode("\255\239"))
    end)

    it("decodes padded segments in a row (one per message a -text client wrote) and an unpadded tail", function()
        assert.equal("ffoo", gw.b64_decode("Zg==Zm8=bw"))
        assert.equal("fo", gw.b64_decode("Zm8"))
    end)

    it("refuses what is not base64", function()
        for _, bad in ipairs({ "Z", "Zg=x", "Z===", "Zm9v!", "=Zm9", "Zm8==" }) do
            local got, err = gw.b64_decode(bad)
            assert.is_nil(got, bad)
            assert.equal("not base64", err)
        end
    end)

    it("round-trips every byte value, and large inputs (the scratch buffer grows)", function()
        local t = {}
        for i = 0, 255 do t[#t + 1] = string.char(i) end
        local all = table.concat(t)
        assert.equal(all, gw.b64_decode(gw.b64_encode(all)))
        local big = all:rep(300) -- 76,800 bytes: past the 16 KiB scratch
        assert.equal(big, gw.b64_decode(gw.b64_encode(big)))
    end)

    it("streams base64 a piece at a time, each padded: every piece decodes whole on arrival", function()
        local body = frame("hello") .. frame("world!!") .. frame("", 128)
        for _, cut in ipairs({ 1, 2, 3, 4, 7, 11 }) do
            local enc, out = gw.encoder(), {}
            local i = 1
            while i <= #body do
                local piece = body:sub(i, i + cut - 1)
                local got = enc:push(piece, false)
                assert.equal(0, #got % 4) -- nothing held back for the next piece
                assert.equal(piece, gw.b64_decode(got))
                out[#out + 1] = got
                i = i + cut
            end
            out[#out + 1] = enc:push("", true)
            assert.equal(body, gw.b64_decode(table.concat(out)))
        end
    end)

    it("builds the trailer frame: 0x80, a 32-bit length, lower-case 'name:value' lines", function()
        local f = gw.trailer_frame({ { "grpc-status", "0" }, { "Grpc-Message", "ok" }, { "x-t", "v" } })
        local block = "grpc-status:0\r\ngrpc-message:ok\r\nx-t:v\r\n"
        assert.equal("\128\0\0\0" .. string.char(#block) .. block, f)
        assert.equal("\128\0\0\0\0", gw.trailer_frame({}))
        assert.has_error(function() gw.trailer_frame({ { "a" } }) end)
    end)
end)

describe("grpc-web plugin", function()
    local up, g
    local MSG = frame("\10\5hello")
    setup(function()
        up = test.upstream()
        local function route(name, plugins, upstream)
            return { name = name, match = { paths = { "/" .. name .. "." } }, upstream = upstream, plugins = plugins }
        end
        g = assert(test.start({
            plugin_paths = { "../fixtures/plugins" },
            upstreams = { { name = "u", targets = { { address = up:address() } } } },
            routes = {
                route("echo", { { name = "grpc-web" } }, "u"),
                route("answer", { { name = "grpc-web" }, { name = "grpc-answer" } }),
                route("only", { { name = "grpc-web" }, { name = "grpc-answer", config = { status = "5" } } }),
                route("denied", { { name = "grpc-web" }, { name = "response", config = { status = 401, body = "who?" } } }),
                route("cors", { { name = "cors", config = { expose_headers = { "grpc-status", "grpc-message" } } },
                                { name = "grpc-web" } }, "u"),
            },
        }))
    end)
    teardown(function()
        g:stop()
        up:stop()
    end)

    it("sends a grpc-web request upstream as application/grpc, the body as it came", function()
        local res = assert(g:request({ method = "POST", path = "/echo.Svc/M", body = MSG,
                                       headers = { ["Content-Type"] = "application/grpc-web+proto", ["X-Grpc-Web"] = "1" } }))
        local seen = cjson.decode(res.body)
        assert.equal("application/grpc+proto", seen.headers["content-type"])
        assert.equal(MSG, seen.body)
        -- the echo's JSON is not a gRPC answer: left as it is
        assert.equal("application/json", res.headers["content-type"])
    end)

    it("decodes a grpc-web-text body (base64) before it goes upstream", function()
        local res = assert(g:request({ method = "POST", path = "/echo.Svc/M", body = gw.b64_encode(MSG),
                                       headers = { ["Content-Type"] = "application/grpc-web-text" } }))
        local seen = cjson.decode(res.body)
        assert.equal("application/grpc", seen.headers["content-type"])
        assert.equal(MSG, seen.body)
        res = assert(g:request({ method = "POST", path = "/echo.Svc/M", body = "!!!",
                                 headers = { ["Content-Type"] = "application/grpc-web-text" } }))
        assert.equal(200, res.status) -- a gRPC error: trailers-only
        assert.equal("13", res.headers["grpc-status"]) -- 400 -> INTERNAL
        assert.equal("application/grpc-web-text", res.headers["content-type"])
    end)

    it("leaves other requests alone", function()
        local res = assert(g:request({ method = "POST", path = "/echo.Svc/M", body = "x",
                                       headers = { ["Content-Type"] = "application/grpc-webx" } }))
        assert.equal("application/grpc-webx", cjson.decode(res.body).headers["content-type"])
    end)

    it("answers with the client's content type; -text bodies as base64", function()
        local res = assert(g:request({ method = "POST", path = "/answer.Svc/M", body = MSG,
                                       headers = { ["Content-Type"] = "application/grpc-web+proto" } }))
        assert.equal("application/grpc-web+proto", res.headers["content-type"])
        assert.equal(MSG, res.body)
        res = assert(g:request({ method = "POST", path = "/answer.Svc/M", body = gw.b64_encode(MSG),
                                 headers = { ["Content-Type"] = "application/grpc-web-text+proto" } }))
        assert.equal("application/grpc-web-text+proto", res.headers["content-type"])
        assert.equal(gw.b64_encode(MSG), res.body)
    end)

    it("adds no trailer frame to a trailers-only answer", function()
        local res = assert(g:request({ method = "POST", path = "/only.Svc/M", body = MSG,
                                       headers = { ["Content-Type"] = "application/grpc-web" } }))
        assert.equal("5", res.headers["grpc-status"])
        assert.equal("", res.body)
    end)

    it("an auth refusal reaches a grpc-web client as grpc-status 16 in the head", function()
        local res = assert(g:request({ method = "POST", path = "/denied.Svc/M", body = gw.b64_encode(MSG),
                                       headers = { ["Content-Type"] = "application/grpc-web-text" } }))
        assert.equal(200, res.status)
        assert.equal("16", res.headers["grpc-status"])
        assert.equal("who?", res.headers["grpc-message"])
        assert.equal("application/grpc-web-text", res.headers["content-type"])
    end)

    it("lets the cors plugin answer the browser's preflight", function()
        local res = assert(g:request({ method = "OPTIONS", path = "/cors.Svc/M", headers = {
            Origin = "https://app.example", ["Access-Control-Request-Method"] = "POST",
            ["Access-Control-Request-Headers"] = "content-type,x-grpc-web,x-user-agent" } }))
        assert.equal(204, res.status)
        assert.equal("*", res.headers["access-control-allow-origin"])
        assert.equal("content-type,x-grpc-web,x-user-agent", res.headers["access-control-allow-headers"])
        res = assert(g:request({ method = "POST", path = "/cors.Svc/M", body = MSG, headers = {
            Origin = "https://app.example", ["Content-Type"] = "application/grpc-web" } }))
        assert.equal("grpc-status, grpc-message", res.headers["access-control-expose-headers"])
    end)
end)

-- The per-piece work of a -text response (the streamed encoder over C base64) and a -text
-- request's decode compile: no trace aborts other than LuaJIT choosing where a trace starts.
describe("sluice.grpc_web JIT", function()
    -- the JIT specs' one judgement of an abort (down-recursion, for one, is LuaJIT
    -- restarting the trace at the caller: seen here under CI's ASan build)
    local aborts_lib = dofile(test.source_path("spec/fixtures/jit_aborts.lua"))
    local BENIGN = aborts_lib.BENIGN
    local function loop(n)
        local enc, total = gw.encoder(), 0
        local piece = frame("0123456789abcdefghij")
        for i = 1, n do
            local out = enc:push(piece, false)
            local back = gw.b64_decode(gw.b64_encode(piece))
            total = total + #out + #back + (i % 3)
        end
        return total
    end

    it("encodes and decodes in a loop without trace aborts", function()
        assert(jit.status(), "the JIT is off in this VM")
        loop(1)
        jit.flush()
        local stops, aborts = 0, {}
        local function handler(what, _, _, _, otr, oex)
            if what == "stop" then
                stops = stops + 1
            elseif what == "abort" then
                local msg = aborts_lib.fmterr(otr, oex)
                if not BENIGN[msg] then aborts[#aborts + 1] = msg .. " (" .. tostring(oex) .. ")" end
            end
        end
        jit.attach(handler, "trace")
        local ok, err = pcall(loop, 3000)
        jit.attach(handler)
        assert(ok, err)
        assert.same({}, aborts)
        assert.is_true(stops > 0, "nothing was compiled")
    end)
end)
