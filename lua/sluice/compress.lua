-- sluice.compress: the compression plugin's helpers. Choosing a coding from
-- Accept-Encoding, matching a response's Content-Type against a list of types, and the
-- response's streaming encoder, which lives in the core (core/proto/compress.c): Lua hands
-- it each piece of the body and gets the encoded bytes back; the per-byte work is C.
--
--   local compress = require("sluice.compress")
--   local coding = compress.choose(accept_encoding, { "br", "gzip" })  -- "br", "gzip" or nil
--   local match = compress.types({ "text/*", "application/json" })
--   match(content_type)                                                 -- true / false
--   local n = compress.body_length()                                    -- header_filter
--   local ok, err = compress.begin("gzip", 5)                           -- header_filter
--   local out = compress.piece(chunk, eof)                              -- body_filter
--
-- choose: the rule is RFC 9110 12.5.3's. Each coding's weight is its own q, else the q of
-- `*`, else 0 (not acceptable); identity's is its own q, else `*`'s, else none (acceptable
-- but never preferred: RFC 9110 gives it no weight when unlisted). The coding
-- with the highest weight above 0 wins; at equal weight the order of `prefer` decides (br
-- before gzip by default) and any coding beats identity. nil (send identity) when no coding
-- of `prefer` is acceptable, or identity weighs more than every one of them. A client that
-- refuses identity too (`identity;q=0`, `*;q=0`) still gets identity: no 406. No header: nil.
local ffi = require("ffi")
local base = require("sluice.base")

ffi.cdef[[
enum { SL_CODING_GZIP = 1, SL_CODING_BR = 2 };
int sl_ffi_compress_begin(sl_req_t *r, int coding, int level, const char **err);
int sl_ffi_compress_piece(sl_req_t *r, const char *p, size_t len, int eof, const char **out, size_t *out_len,
                          const char **err);
int64_t sl_ffi_resp_body_length(sl_req_t *r);
]]

local C = ffi.C
local ffi_string, tonumber, type, error = ffi.string, tonumber, type, error
local lower, find, sub, gmatch, match = string.lower, string.find, string.sub, string.gmatch, string.match
local OK = base.OK
local str_p, len_p, err_p = base.str_p, base.len_p, base.err_p

local _M = {}

local CODING = { gzip = C.SL_CODING_GZIP, br = C.SL_CODING_BR }
-- x-gzip is gzip (RFC 9110 8.4.1.3)
local ALIAS = { ["x-gzip"] = "gzip" }

-- { coding = q } for one Accept-Encoding value; invalid elements are ignored.
local function weights(ae)
    local w = {}
    for elem in gmatch(ae, "[^,]+") do
        local name, params = match(elem, "^%s*([^;%s]+)%s*(.*)$")
        if name then
            name = lower(name)
            name = ALIAS[name] or name
            local q = 1
            local qs = match(params, ";%s*[qQ]%s*=%s*([^;%s]*)")
            if qs then q = match(qs, "^[%d%.]+$") and tonumber(qs) end
            if q and q >= 0 and q <= 1 and (w[name] == nil or q > w[name]) then w[name] = q end
        end
    end
    return w
end

local function decide(ae, prefer)
    local w = weights(ae)
    local star = w["*"]
    local identity = w.identity or star or 0
    local best, best_q = nil, 0
    for i = 1, #prefer do
        local c = prefer[i]
        local q = w[c] or star or 0
        if q > best_q then best, best_q = c, q end
    end
    if best and best_q >= identity then return best end
    return nil
end

-- Decisions per (preference list, Accept-Encoding value): browsers send a handful of
-- distinct values, so each is parsed once; the table is dropped when it grows past 256.
local cache = setmetatable({}, { __mode = "k" })

function _M.choose(ae, prefer)
    if type(prefer) ~= "table" then error("prefer must be a list of codings", 2) end
    if ae == nil then return nil end
    local pc = cache[prefer]
    if not pc then
        pc = { n = 0 }
        cache[prefer] = pc
    end
    local d = pc[ae]
    if d == nil then
        d = decide(ae, prefer) or false
        if pc.n >= 256 then
            pc = { n = 0 }
            cache[prefer] = pc
        end
        pc[ae], pc.n = d, pc.n + 1
    end
    return d or nil
end

-- A matcher for a list of media types: "type/subtype" exactly, "type/*" any subtype,
-- "*/*" or "*" anything; case-insensitive; a Content-Type's parameters are ignored. The
-- answer per Content-Type value is kept (a route sees a few distinct values; the table is
-- dropped when it grows past 256), so the steady state is one table lookup.
function _M.types(list)
    local exact, prefixes, any = {}, {}, false
    for i = 1, #list do
        local t = lower(list[i])
        if t == "*" or t == "*/*" then
            any = true
        elseif sub(t, -2) == "/*" then
            prefixes[#prefixes + 1] = sub(t, 1, -2)
        else
            exact[t] = true
        end
    end
    local function decide_type(ctype)
        local semi = find(ctype, ";", 1, true)
        local t = lower(match(semi and sub(ctype, 1, semi - 1) or ctype, "^%s*(.-)%s*$"))
        if t == "" then return false end
        if any or exact[t] then return true end
        for i = 1, #prefixes do
            local p = prefixes[i]
            if sub(t, 1, #p) == p then return true end
        end
        return false
    end
    local seen, n = {}, 0
    return function(ctype)
        if ctype == nil then return false end
        local d = seen[ctype]
        if d == nil then
            d = decide_type(ctype)
            if n >= 256 then seen, n = {}, 0 end
            seen[ctype], n = d, n + 1
        end
        return d
    end
end

-- The running response's body length when known before it streams (header_filter): the
-- upstream's Content-Length (hidden from response.get_header as a framing field) or a
-- plugin answer's body; nil when unknown.
function _M.body_length()
    local n = C.sl_ffi_resp_body_length(base.reqp())
    if n < 0 then return nil end
    return tonumber(n)
end

-- Starts the running response's encoder (header_filter). true, or nil, err.
function _M.begin(coding, level)
    local c = CODING[coding]
    if not c then error("unknown coding: " .. tostring(coding), 2) end
    if C.sl_ffi_compress_begin(base.reqp(), c, level, err_p) ~= OK then
        return nil, ffi_string(err_p[0])
    end
    return true
end

-- Encodes the next piece of the body (body_filter): the bytes to send instead. Raises
-- on a codec failure (the response is then cut off, as for any body_filter error).
function _M.piece(chunk, eof)
    if C.sl_ffi_compress_piece(base.reqp(), chunk, #chunk, eof and 1 or 0, str_p, len_p, err_p) ~= OK then
        error(ffi_string(err_p[0]), 2)
    end
    return ffi_string(str_p[0], len_p[0])
end

return _M
