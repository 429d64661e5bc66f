-- grpc-web: serves gRPC-Web clients (browsers; grpc/doc/PROTOCOL-WEB.md) from a gRPC
-- upstream, over HTTP/1.1 or HTTP/2.
--
-- A request of `application/grpc-web[+proto]` goes upstream as `application/grpc[+proto]`
-- (its body is already gRPC's framing); `application/grpc-web-text` bodies are base64 and
-- are decoded first (gRPC-Web has no client streaming: the body is read whole). The
-- response's content type goes back to the client's, its body streams as it comes (server
-- streaming streams), and the upstream's trailers become the body's final frame (flag
-- 0x80, "name:value\r\n" lines); a trailers-only answer (grpc-status in the head, as the
-- gateway's own gRPC errors are) needs none. -text responses are base64 as they stream.
-- Requests of other types pass untouched. CORS (the browser's preflight) is the cors
-- plugin's: list it first, and expose grpc-status and grpc-message.
local sluice = require("sluice")
local gw = require("sluice.grpc_web")

local request, response = sluice.request, sluice.response
local lower, match = string.lower, string.match

local M = {
    name = "grpc-web",
    version = "1.0",
    schema = {
        max_body = { type = "size", default = 4194304, min = 0 }, -- a -text request body, encoded
    },
}

function M.rewrite(conf, ctx)
    local ct = request.get_header("Content-Type")
    if not ct then return end
    local lct = lower(ct)
    local rest = match(lct, "^application/grpc%-web%-text(.*)")
    local text = rest ~= nil
    if not text then
        rest = match(lct, "^application/grpc%-web(.*)")
        if not rest then return end
    end
    if rest ~= "" and not match(rest, "^[+;]") then return end -- another type
    ctx.grpc_web = { text = text, ctype = ct }
    request.set_header("Content-Type", "application/grpc" .. rest)
    if text then
        local body, err = request.get_body()
        if err then return response.exit(413, err) end
        if body and #body > conf.max_body then return response.exit(413, "request body too large") end
        local raw = body and gw.b64_decode(body)
        if body and not raw then return response.exit(400, "grpc-web-text body is not base64") end
        request.set_body(raw or "")
    end
end

function M.header_filter(conf, ctx)
    local st = ctx.grpc_web
    if not st then return end
    local ct = response.get_header("Content-Type")
    if not ct or not match(lower(ct), "^application/grpc") then
        ctx.grpc_web = nil -- not a gRPC answer (an upstream's HTTP error): left as it is
        return
    end
    response.set_header("Content-Type", st.ctype)
    -- trailers-only: the status is in the head, where gRPC-Web clients read it too
    st.done = response.get_header("grpc-status") ~= nil
    if st.text then st.enc = gw.encoder() end
end

function M.body_filter(conf, ctx, chunk, eof)
    local st = ctx.grpc_web
    if not st then return nil end
    local out = chunk
    if eof and not st.done then
        local tr = gw.trailers(true)
        if #tr > 0 then out = out .. gw.trailer_frame(tr) end
    end
    if st.enc then return st.enc:push(out, eof) end
    if out == chunk then return nil end
    return out
end

return M
