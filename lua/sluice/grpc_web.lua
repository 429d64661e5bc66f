-- sluice.grpc_web: gRPC-Web framing for the grpc-web plugin (grpc/doc/PROTOCOL-WEB.md).
--
--   local gw = require("sluice.grpc_web")
--   gw.b64_encode(s), gw.b64_decode(s)       -- base64 (decode takes padded segments in a row)
--   local enc = gw.encoder(); enc:push(piece, eof)  -- a streamed body as base64, each piece padded
--   gw.trailer_frame({ {name, value}, ... })  -- the final frame: flag 0x80, length, "k:v\r\n"...
--   gw.trailers(take)                         -- the upstream response's trailers (body_filter)
--
-- The byte work (base64) is C (core/lua/grpc_web.c): a LuaJIT loop goes a byte at a time.
local ffi = require("ffi")
local base = require("sluice.base")

ffi.cdef[[
size_t sl_ffi_grpcweb_b64_encode(const char *in, size_t n, char *out);
long sl_ffi_grpcweb_b64_decode(const char *in, size_t n, char *out);
int sl_ffi_grpcweb_trailer_count(sl_req_t *r);
int sl_ffi_grpcweb_trailer_at(sl_req_t *r, int i, const char **name, size_t *name_len, const char **value,
                              size_t *value_len);
void sl_ffi_grpcweb_trailers_drop(sl_req_t *r);
]]

local C = ffi.C
local ffi_string, ffi_new = ffi.string, ffi.new
local char, concat, lower = string.char, table.concat, string.lower
local floor, setmetatable, error, type = math.floor, setmetatable, error, type
local bit = require("bit")
local band, rshift = bit.band, bit.rshift

local _M = {}

-- One scratch buffer for every call, grown on demand.
local buf_size = 16384
local buf = ffi_new("char[?]", buf_size)
local function scratch(n)
    if n > buf_size then
        while buf_size < n do buf_size = buf_size * 2 end
        buf = ffi_new("char[?]", buf_size)
    end
    return buf
end

function _M.b64_encode(s)
    local n = #s
    if n == 0 then return "" end
    local out = scratch(4 * floor((n + 2) / 3))
    return ffi_string(out, C.sl_ffi_grpcweb_b64_encode(s, n, out))
end

-- nil, err for a string that is not base64.
function _M.b64_decode(s)
    local n = #s
    if n == 0 then return "" end
    local out = scratch(3 * floor(n / 4) + 3)
    local got = tonumber(C.sl_ffi_grpcweb_b64_decode(s, n, out))
    if got < 0 then return nil, "not base64" end
    return ffi_string(out, got)
end

-- A streamed body as base64: each push encodes its whole piece, padded. The pieces follow
-- one another as padded segments (PROTOCOL-WEB lets a server pad wherever it flushes, and
-- clients decode them in groups of 4), so each message the upstream sent is readable by the
-- client as soon as its piece arrives: 3-byte aligned pieces would hold a message's last
-- one or two bytes back until the next message (a server stream's message one behind).
local Encoder = {}
Encoder.__index = Encoder

function Encoder:push(piece)
    return _M.b64_encode(piece)
end

function _M.encoder()
    return setmetatable({}, Encoder)
end

local function be32(n)
    return char(band(rshift(n, 24), 255), band(rshift(n, 16), 255), band(rshift(n, 8), 255), band(n, 255))
end

-- The trailer frame of gRPC-Web: trailers as an HTTP/1 header block (lower-case names)
-- behind a 0x80 flag byte and the block's length.
function _M.trailer_frame(fields)
    local t = {}
    for i = 1, #fields do
        local f = fields[i]
        if type(f[1]) ~= "string" or type(f[2]) ~= "string" then error("fields are {name, value} strings", 2) end
        t[i] = lower(f[1]) .. ":" .. f[2] .. "\r\n"
    end
    local block = concat(t)
    return "\128" .. be32(#block) .. block
end

local np, nl, vp, vl = ffi_new("const char *[1]"), ffi_new("size_t[1]"), ffi_new("const char *[1]"), ffi_new("size_t[1]")

-- The upstream response's trailers as { {name, value}, ... } (body_filter of a request).
-- take = true: they go into the body, the client gets no HTTP trailers (HTTP/2) besides.
function _M.trailers(take)
    local r = base.reqp()
    if not r then error("no request is running", 2) end
    local out = {}
    for i = 0, C.sl_ffi_grpcweb_trailer_count(r) - 1 do
        if C.sl_ffi_grpcweb_trailer_at(r, i, np, nl, vp, vl) == C.SL_OK then
            out[#out + 1] = { ffi_string(np[0], nl[0]), ffi_string(vp[0], vl[0]) }
        end
    end
    if take then C.sl_ffi_grpcweb_trailers_drop(r) end
    return out
end

return _M
