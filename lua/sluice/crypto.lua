-- sluice.crypto: digests, HMAC, base64url and a constant-time compare, from OpenSSL's
-- libcrypto through FFI (the same library the C core links for TLS).
local ffi = require("ffi")

local ffi_string, ffi_new = ffi.string, ffi.new
local type, error = type, error
local byte, char, concat = string.byte, string.char, table.concat
local bit = require("bit")
local band, bor, bxor, lshift, rshift = bit.band, bit.bor, bit.bxor, bit.lshift, bit.rshift

ffi.cdef[[
typedef struct evp_md_st EVP_MD;
const EVP_MD *EVP_get_digestbyname(const char *name);
int EVP_Digest(const void *data, size_t count, unsigned char *md, unsigned int *size,
               const EVP_MD *type, void *impl);
unsigned char *HMAC(const EVP_MD *evp_md, const void *key, int key_len, const unsigned char *d,
                    size_t n, unsigned char *md, unsigned int *md_len);
]]

local ok, lib = pcall(ffi.load, "libcrypto.so.3")
if not ok then lib = ffi.load("crypto") end

local _M = {}

local md_buf = ffi_new("unsigned char[64]")
local md_len = ffi_new("unsigned int[1]")
local mds = {}

local function md(name)
    local m = mds[name]
    if m == nil then
        local map = { sha256 = "SHA256", sha384 = "SHA384", sha512 = "SHA512", sha1 = "SHA1" }
        if not map[name] then error("unknown digest '" .. tostring(name) .. "' (sha256, sha384, sha512, sha1)", 3) end
        m = lib.EVP_get_digestbyname(map[name])
        mds[name] = m
    end
    return m
end

-- Raw digest bytes of s: name is "sha256", "sha384", "sha512" or "sha1".
function _M.digest(name, s)
    if type(s) ~= "string" then error("digest input must be a string", 2) end
    if lib.EVP_Digest(s, #s, md_buf, md_len, md(name), nil) ~= 1 then return nil, "digest failed" end
    return ffi_string(md_buf, md_len[0])
end

function _M.sha256(s) return _M.digest("sha256", s) end

-- Raw HMAC bytes of s under key.
function _M.hmac(name, key, s)
    if type(key) ~= "string" or type(s) ~= "string" then error("hmac key and input must be strings", 2) end
    if lib.HMAC(md(name), key, #key, s, #s, md_buf, md_len) == nil then return nil, "hmac failed" end
    return ffi_string(md_buf, md_len[0])
end

-- base64url (RFC 4648 section 5) without padding, as JWTs use it.
local ALPHA = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local ENC, DEC = {}, {}
for i = 1, 64 do
    ENC[i - 1] = ALPHA:sub(i, i)
    DEC[byte(ALPHA, i)] = i - 1
end

function _M.base64url_encode(s)
    local out, n = {}, #s
    for i = 1, n, 3 do
        local a, b, c = byte(s, i, i + 2)
        local v = lshift(a, 16) + lshift(b or 0, 8) + (c or 0)
        out[#out + 1] = ENC[band(rshift(v, 18), 63)] .. ENC[band(rshift(v, 12), 63)]
            .. (b and ENC[band(rshift(v, 6), 63)] or "") .. (c and ENC[band(v, 63)] or "")
    end
    return concat(out)
end

-- Decodes base64url (padding tolerated); nil, err on any other character or a bad length.
function _M.base64url_decode(s)
    if type(s) ~= "string" then return nil, "not a string" end
    s = s:gsub("=+$", "")
    if #s % 4 == 1 then return nil, "bad base64url length" end
    local out = {}
    for i = 1, #s, 4 do
        local v, k = 0, 0
        for j = i, i + 3 do
            local ch = byte(s, j)
            if ch then
                local d = DEC[ch]
                if not d then return nil, "bad base64url character" end
                v = bor(lshift(v, 6), d)
                k = k + 1
            end
        end
        v = lshift(v, (4 - k) * 6)
        local b1, b2, b3 = band(rshift(v, 16), 255), band(rshift(v, 8), 255), band(v, 255)
        if k == 4 then out[#out + 1] = char(b1, b2, b3)
        elseif k == 3 then out[#out + 1] = char(b1, b2)
        elseif k == 2 then out[#out + 1] = char(b1) end
    end
    return concat(out)
end

-- Compares two strings in time that depends only on their lengths.
function _M.equal(a, b)
    if type(a) ~= "string" or type(b) ~= "string" then return false end
    if #a ~= #b then return false end
    local d = 0
    for i = 1, #a do d = bor(d, bxor(byte(a, i), byte(b, i))) end
    return d == 0
end

return _M
