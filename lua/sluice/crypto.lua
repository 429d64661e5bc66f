-- sluice.crypto: digests, HMAC and JWS signature verification from OpenSSL's libcrypto
-- through the core's ABI (core/crypto.c), plus base64url and a constant-time compare;
-- stored password hashes (crypt(3), PBKDF2) for basic-auth.
local ffi = require("ffi")
require("sluice.base") -- the shared result codes (SL_OK, SL_DECLINED) and the ABI check

local ffi_string, ffi_new, ffi_gc, ffi_istype = ffi.string, ffi.new, ffi.gc, ffi.istype
local type, error, tostring = type, error, tostring
local byte, char, concat = string.byte, string.char, table.concat
local bit = require("bit")
local band, bor, bxor, lshift, rshift = bit.band, bit.bor, bit.bxor, bit.lshift, bit.rshift

ffi.cdef[[
enum { SL_CRYPTO_MD_MAX = 64 };
typedef struct sl_pkey_s sl_pkey_t;
int sl_ffi_crypto_digest(const char *name, const unsigned char *data, size_t len,
                         unsigned char *out, size_t *outlen, const char **err);
int sl_ffi_crypto_hmac(const char *name, const unsigned char *key, size_t key_len,
                       const unsigned char *data, size_t len, unsigned char *out, size_t *outlen,
                       const char **err);
sl_pkey_t *sl_ffi_crypto_key_pem(const char *pem, size_t len, const char **err);
sl_pkey_t *sl_ffi_crypto_key_rsa(const unsigned char *n, size_t n_len, const unsigned char *e,
                                 size_t e_len, const char **err);
sl_pkey_t *sl_ffi_crypto_key_ec(const char *crv, const unsigned char *x, size_t x_len,
                                const unsigned char *y, size_t y_len, const char **err);
sl_pkey_t *sl_ffi_crypto_key_okp(const char *crv, const unsigned char *x, size_t x_len,
                                 const char **err);
void sl_ffi_crypto_key_info(const sl_pkey_t *k, const char **kty, const char **crv, int *bits);
void sl_ffi_crypto_key_free(sl_pkey_t *k);
int sl_ffi_crypto_verify(const sl_pkey_t *k, const char *alg, const unsigned char *data,
                         size_t data_len, const unsigned char *sig, size_t sig_len,
                         const char **err);
int sl_ffi_crypto_equal(const unsigned char *a, size_t a_len, const unsigned char *b,
                        size_t b_len);
int sl_ffi_crypto_password_verify(const char *password, size_t password_len, const char *hash,
                                  size_t hash_len, const char **err);
int sl_ffi_crypto_password_check(const char *hash, size_t hash_len, const char **err);
]]

local C = ffi.C
local DECLINED = C.SL_DECLINED
local crypto_digest, crypto_hmac, crypto_verify = C.sl_ffi_crypto_digest, C.sl_ffi_crypto_hmac,
    C.sl_ffi_crypto_verify
local key_free = C.sl_ffi_crypto_key_free
local crypto_equal, password_verify, password_check = C.sl_ffi_crypto_equal,
    C.sl_ffi_crypto_password_verify, C.sl_ffi_crypto_password_check

local _M = {}

-- Scratch out-parameters, made once.
local MD_MAX = C.SL_CRYPTO_MD_MAX
local md_buf = ffi_new("unsigned char[?]", MD_MAX)
local md_len = ffi_new("size_t[1]")
local err_p = ffi_new("const char *[1]")
local kty_p, crv_p = ffi_new("const char *[1]"), ffi_new("const char *[1]")
local bits_p = ffi_new("int[1]")

-- The result of a digest or HMAC call; call it as a statement, not in a tail call, so the
-- error level points at the caller of digest/hmac.
local function md_result(rc, name)
    if rc == DECLINED then
        error("unknown digest '" .. tostring(name) .. "' (sha256, sha384, sha512, sha1, md5)", 3)
    end
    if rc ~= 0 then return nil, ffi_string(err_p[0]) end
    return ffi_string(md_buf, md_len[0])
end

-- Raw digest bytes of s: name is "sha256", "sha384", "sha512", "sha1" or "md5" (md5 for
-- compatibility, never for a signature).
function _M.digest(name, s)
    if type(name) ~= "string" or type(s) ~= "string" then
        error("digest name and input must be strings", 2)
    end
    md_len[0] = MD_MAX
    local out, err = md_result(crypto_digest(name, s, #s, md_buf, md_len, err_p), name)
    return out, err
end

function _M.sha256(s) return _M.digest("sha256", s) end

-- Raw HMAC bytes of s under key.
function _M.hmac(name, key, s)
    if type(name) ~= "string" or type(key) ~= "string" or type(s) ~= "string" then
        error("hmac digest name, key and input must be strings", 2)
    end
    md_len[0] = MD_MAX
    local out, err = md_result(crypto_hmac(name, key, #key, s, #s, md_buf, md_len, err_p), name)
    return out, err
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

-- Compares two strings with OpenSSL's CRYPTO_memcmp: for equal lengths the time depends
-- on the length only, never on where the first difference is (unit-tested for timing in
-- ctest/crypto_test.c). What the auth plugins compare secrets with.
function _M.timing_safe_equal(a, b)
    if type(a) ~= "string" or type(b) ~= "string" then return false end
    return crypto_equal(a, #a, b, #b) == 1
end

-- Standard base64 (RFC 4648 section 4, as HTTP Basic credentials use it); padding may be
-- left out. nil, err on any other character or a bad length.
local TO_URL = { ["+"] = "-", ["/"] = "_" }
function _M.base64_decode(s)
    if type(s) ~= "string" then return nil, "not a string" end
    local body, pad = s:match("^([%w+/]*)(=*)$")
    if not body or #pad > 2 or (#pad > 0 and #s % 4 ~= 0) then return nil, "bad base64" end
    return _M.base64url_decode((body:gsub("[+/]", TO_URL)))
end

-- Whether password is the one a stored hash was made from: crypt(3) "$y$", "$6$", "$5$",
-- "$2b$"/"$2y$", or passlib's "$pbkdf2-sha256$..."/"$pbkdf2-sha512$..." (core/sluice.h).
-- true or false; nil, err for a hash in no supported format. It costs what the hash was
-- made to cost (milliseconds for "$6$"), on this worker: cache what was verified.
function _M.password_verify(password, hash)
    if type(password) ~= "string" or type(hash) ~= "string" then
        error("password_verify: password and hash must be strings", 2)
    end
    local rc = password_verify(password, #password, hash, #hash, err_p)
    if rc == 1 then return true end
    if rc == 0 then return false end
    return nil, ffi_string(err_p[0])
end

-- Whether password_verify can read a stored hash, without hashing: true, or nil, err.
function _M.password_check(hash)
    if type(hash) ~= "string" then error("password_check: hash must be a string", 2) end
    if password_check(hash, #hash, err_p) == C.SL_OK then return true end
    return nil, ffi_string(err_p[0])
end

-- ---------------------------------------------------------------- public keys

local pkey_t = ffi.typeof("sl_pkey_t *")

-- key:info() -> kty ("RSA", "EC", "OKP"), crv ("P-256" ... "Ed448", nil for RSA), bits.
ffi.metatype("struct sl_pkey_s", { __index = {
    info = function(k)
        C.sl_ffi_crypto_key_info(k, kty_p, crv_p, bits_p)
        return ffi_string(kty_p[0]), crv_p[0] ~= nil and ffi_string(crv_p[0]) or nil, bits_p[0]
    end,
} })

local function owned(k)
    if k == nil then return nil, ffi_string(err_p[0]) end
    return ffi_gc(k, key_free)
end

-- A public key from PEM text: "PUBLIC KEY", "RSA PUBLIC KEY" or "CERTIFICATE" (the first
-- block is read). Returns the key, or nil, err. Build keys once per config, not per request.
function _M.public_key(pem)
    if type(pem) ~= "string" then error("public_key: pem must be a string", 2) end
    return owned(C.sl_ffi_crypto_key_pem(pem, #pem, err_p))
end

-- A JWK member, base64url-decoded.
local function member(jwk, name)
    local v = jwk[name]
    if type(v) ~= "string" then return nil, "JWK " .. jwk.kty .. " key needs '" .. name .. "'" end
    local raw, err = _M.base64url_decode(v)
    if not raw then return nil, "JWK '" .. name .. "': " .. err end
    return raw
end

-- A public key from a JWK (a decoded JSON object, as a JWKS "keys" entry): kty "RSA"
-- (n, e), "EC" (crv P-256/P-384/P-521, x, y) or "OKP" (crv Ed25519/Ed448, x). Other
-- members (kid, alg, use) are the caller's to check. Returns the key, or nil, err.
function _M.jwk_key(jwk)
    if type(jwk) ~= "table" then error("jwk_key: jwk must be a table", 2) end
    local kty, crv = jwk.kty, jwk.crv
    if kty == "RSA" then
        local n, err = member(jwk, "n")
        if not n then return nil, err end
        local e, err2 = member(jwk, "e")
        if not e then return nil, err2 end
        return owned(C.sl_ffi_crypto_key_rsa(n, #n, e, #e, err_p))
    end
    if kty ~= "EC" and kty ~= "OKP" then
        return nil, "unsupported JWK kty '" .. tostring(kty) .. "' (RSA, EC, OKP)"
    end
    if type(crv) ~= "string" then return nil, "JWK " .. kty .. " key needs 'crv'" end
    local x, err = member(jwk, "x")
    if not x then return nil, err end
    if kty == "OKP" then return owned(C.sl_ffi_crypto_key_okp(crv, x, #x, err_p)) end
    local y, err2 = member(jwk, "y")
    if not y then return nil, err2 end
    return owned(C.sl_ffi_crypto_key_ec(crv, x, #x, y, #y, err_p))
end

-- ---------------------------------------------------------------- verify

local HMAC_ALGS = { HS256 = "sha256", HS384 = "sha384", HS512 = "sha512" }
-- the algs crypto.c verifies with a public key, and its answer for any other
local PKEY_ALGS = { RS256 = true, RS384 = true, RS512 = true, PS256 = true, PS384 = true, PS512 = true,
                    ES256 = true, ES384 = true, ES512 = true, EdDSA = true }
local UNKNOWN_ALG = "unknown alg (RS256/384/512, PS256/384/512, ES256/384/512, EdDSA)"

-- Verifies signature (raw bytes, not base64url) over data with a JWS alg: HS256/384/512
-- with a secret string as key; RS*, PS*, ES256/384/512 and EdDSA with a key from
-- public_key or jwk_key. Returns true; false, reason when the signature does not verify;
-- nil, err for an unknown alg or a key that does not fit the alg. The key decides what
-- it verifies: a secret never passes for an RS256 key, nor an RSA key for HS256.
function _M.verify(alg, key, data, signature)
    if type(alg) ~= "string" or type(data) ~= "string" or type(signature) ~= "string" then
        error("verify: alg, data and signature must be strings", 2)
    end
    local md = HMAC_ALGS[alg]
    if type(key) == "string" then
        if not md then
            -- "none" or "rs256" with a secret is an unknown alg, as with a key (crypto.c)
            if not PKEY_ALGS[alg] then return nil, UNKNOWN_ALG end
            return nil, alg .. " needs a public key, not a secret string"
        end
        if _M.equal(_M.hmac(md, key, data), signature) then return true end
        return false, "signature does not match"
    end
    if not ffi_istype(pkey_t, key) then
        error("verify: key must be a secret string or a key from public_key/jwk_key", 2)
    end
    if md then return nil, alg .. " needs a secret string, not a public key" end
    local rc = crypto_verify(key, alg, data, #data, signature, #signature, err_p)
    if rc == 1 then return true end
    if rc == 0 then return false, ffi_string(err_p[0]) end
    return nil, ffi_string(err_p[0])
end

return _M
