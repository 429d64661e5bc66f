-- sluice.crypto against known answers (FIPS 180 / RFC 4231 / RFC 4648 test vectors), the
-- JWS examples of RFC 7515 and RFC 8037, and keys and signatures made by an independent
-- implementation: the openssl command line, run in a temporary folder.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test") -- loads libsluice.so globally: sluice.crypto calls the core's ABI
local crypto = require("sluice.crypto")

local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end
local function unhex(h) return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end
local b64 = crypto.base64url_decode

local function flip(s, i)
    i = i or #s
    return s:sub(1, i - 1) .. string.char(bit.bxor(s:byte(i), 1)) .. s:sub(i + 1)
end

describe("sluice.crypto", function()
    it("digests: SHA-1/256/384/512 of 'abc'", function()
        assert.equal("a9993e364706816aba3e25717850c26c9cd0d89d", hex(crypto.digest("sha1", "abc")))
        assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", hex(crypto.sha256("abc")))
        assert.equal("cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7",
                     hex(crypto.digest("sha384", "abc")))
        assert.equal("ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
                     .. "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
                     hex(crypto.digest("sha512", "abc")))
        assert.equal("900150983cd24fb0d6963f7d28e17f72", hex(crypto.digest("md5", "abc"))) -- ngx.md5's
        assert.has_error(function() crypto.digest("md4", "x") end,
                         "unknown digest 'md4' (sha256, sha384, sha512, sha1, md5)")
    end)

    it("HMAC-SHA256, RFC 4231 test case 2, and with an empty key", function()
        assert.equal("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
                     hex(crypto.hmac("sha256", "Jefe", "what do ya want for nothing?")))
        assert.equal("b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad",
                     hex(crypto.hmac("sha256", "", "")))
        assert.has_error(function() crypto.hmac("md4", "k", "x") end)
    end)

    it("base64url round-trips every length and rejects bad input", function()
        for n = 0, 40 do
            local s = ""
            for i = 1, n do s = s .. string.char((i * 37 + n) % 256) end
            local e = crypto.base64url_encode(s)
            assert.is_nil(e:find("[+/=]"))
            assert.equal(s, crypto.base64url_decode(e))
        end
        assert.equal("Zm9vYmFy", crypto.base64url_encode("foobar"))
        assert.equal("foob", crypto.base64url_decode("Zm9vYg"))
        assert.is_nil((crypto.base64url_decode("Zm9v+g")))
        assert.is_nil((crypto.base64url_decode("Z")))
    end)

    it("equal compares whole strings", function()
        assert.is_true(crypto.equal("secret", "secret"))
        assert.is_false(crypto.equal("secret", "secreT"))
        assert.is_false(crypto.equal("secret", "secrets"))
        assert.is_false(crypto.equal("secret", nil))
    end)
end)

describe("sluice.crypto.verify: RFC test vectors", function()
    -- RFC 7515 Appendix A: the same payload signed four ways.
    local PAYLOAD = "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"

    -- Splits a compact JWS into its signing input and raw signature.
    local function jws(header, sig) return header .. "." .. PAYLOAD, assert(b64(sig)) end

    it("RFC 7515 A.1: HS256 with a secret string", function()
        local key = b64("AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow")
        local input, sig = jws("eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9", "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
        assert.is_true(crypto.verify("HS256", key, input, sig))
        assert.is_false(crypto.verify("HS256", key, input, flip(sig)))
        assert.is_false(crypto.verify("HS256", key .. "x", input, sig))
        assert.is_false(crypto.verify("HS512", key, input, sig))
    end)

    it("RFC 7515 A.2: RS256 with the JWK of n and e", function()
        local key = assert(crypto.jwk_key({ kty = "RSA", e = "AQAB",
            n = "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-"
                .. "SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXB"
                .. "dQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9i"
                .. "aGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ" }))
        assert.same({ "RSA", nil, 2048 }, { key:info() })
        local input, sig = jws("eyJhbGciOiJSUzI1NiJ9",
            "cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF"
            .. "9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383L"
            .. "cOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWyw"
            .. "lVmtVrBp0igcN_IoypGlUPQGe77Rw")
        assert.is_true(crypto.verify("RS256", key, input, sig))
        assert.is_false(crypto.verify("RS256", key, input, flip(sig, 100)))
        assert.is_false(crypto.verify("RS256", key, input .. " ", sig))
        assert.is_false(crypto.verify("RS384", key, input, sig))
        assert.is_false(crypto.verify("PS256", key, input, sig))
    end)

    it("RFC 7515 A.3: ES256 with the JWK of x and y", function()
        local key = assert(crypto.jwk_key({ kty = "EC", crv = "P-256",
            x = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", y = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0" }))
        assert.same({ "EC", "P-256", 256 }, { key:info() })
        local input, sig = jws("eyJhbGciOiJFUzI1NiJ9",
            "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q")
        assert.equal(64, #sig)
        assert.is_true(crypto.verify("ES256", key, input, sig))
        assert.is_false(crypto.verify("ES256", key, input, flip(sig, 1)))
        assert.is_false(crypto.verify("ES256", key, input, flip(sig, 33)))
        -- a signature of the wrong size is a bad signature, not an error
        local ok, why = crypto.verify("ES256", key, input, sig .. "\0")
        assert.is_false(ok)
        assert.matches("wrong length", why)
    end)

    it("RFC 8037 A.4: EdDSA (Ed25519) with the OKP JWK", function()
        local key = assert(crypto.jwk_key({ kty = "OKP", crv = "Ed25519", x = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" }))
        assert.same({ "OKP", "Ed25519", 256 }, { key:info() })
        local input = "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc"
        local sig = b64("hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg")
        assert.is_true(crypto.verify("EdDSA", key, input, sig))
        assert.is_false(crypto.verify("EdDSA", key, input, flip(sig, 5)))
        assert.is_false(crypto.verify("EdDSA", key, input .. "x", sig))
        -- the key decides: an Ed25519 key is no key for ES256 or RS256
        local ok, err = crypto.verify("ES256", key, input, sig)
        assert.is_nil(ok)
        assert.equal("ES256 needs an EC P-256 key", err)
        assert.is_nil((crypto.verify("RS256", key, input, sig)))
    end)
end)

describe("sluice.crypto.verify: keys and signatures from the openssl CLI", function()
    local dir
    local DATA = "eyJhbGciOiJ4In0.eyJzdWIiOiJhbGljZSIsIm4iOjQyfQ" -- what a JWT signs
    local keys, pems = {}, {}

    local function sh(cmd)
        local full = "cd " .. dir .. " && (" .. cmd .. ") 2>/dev/null"
        local rc = os.execute(full)
        assert(rc == 0 or rc == true, "failed: " .. full)
    end
    local function read(name)
        local f = assert(io.open(dir .. "/" .. name, "rb"))
        local s = f:read("*a")
        f:close()
        return s
    end

    -- An openssl signature of DATA (written to data.txt) with key `name`.
    local function sign(name, opts)
        sh(("openssl dgst %s -sign %s.pem -out sig.bin data.txt"):format(opts, name))
        return read("sig.bin")
    end
    local function sign_eddsa(name)
        sh(("openssl pkeyutl -sign -inkey %s.pem -rawin -in data.txt -out sig.bin"):format(name))
        return read("sig.bin")
    end

    -- openssl writes ECDSA-Sig-Value (DER SEQUENCE of INTEGER r, s); JWS wants r || s,
    -- each left-padded to the coordinate size. Decoded here, independently of the core.
    local function der_to_raw(der, size)
        local pos = 3
        if der:byte(2) == 0x81 then pos = 4 end
        local out = {}
        for _ = 1, 2 do
            assert(der:byte(pos) == 0x02, "INTEGER expected")
            local len = der:byte(pos + 1)
            local v = der:sub(pos + 2, pos + 1 + len):gsub("^%z+", "")
            assert(#v <= size)
            out[#out + 1] = string.rep("\0", size - #v) .. v
            pos = pos + 2 + len
        end
        return out[1] .. out[2]
    end

    setup(function()
        dir = assert(io.popen("mktemp -d")):read("*l")
        local f = assert(io.open(dir .. "/data.txt", "wb"))
        f:write(DATA)
        f:close()
        local gen = {
            rsa = "-algorithm RSA -pkeyopt rsa_keygen_bits:2048",
            rsa2 = "-algorithm RSA -pkeyopt rsa_keygen_bits:2048",
            p256 = "-algorithm EC -pkeyopt ec_paramgen_curve:P-256",
            p384 = "-algorithm EC -pkeyopt ec_paramgen_curve:P-384",
            p521 = "-algorithm EC -pkeyopt ec_paramgen_curve:P-521",
            ed25519 = "-algorithm ED25519",
            ed448 = "-algorithm ED448",
        }
        for name, opts in pairs(gen) do
            sh(("openssl genpkey %s -out %s.pem"):format(opts, name))
            sh(("openssl pkey -in %s.pem -pubout -out %s.pub"):format(name, name))
            pems[name] = read(name .. ".pub")
            keys[name] = assert(crypto.public_key(pems[name]))
        end
    end)

    teardown(function()
        if dir then os.execute("rm -rf " .. dir) end
    end)

    it("RS256/384/512 (PKCS#1 v1.5)", function()
        for _, bits in ipairs({ 256, 384, 512 }) do
            local alg, sig = "RS" .. bits, sign("rsa", "-sha" .. bits)
            assert.is_true(crypto.verify(alg, keys.rsa, DATA, sig))
            assert.is_false(crypto.verify(alg, keys.rsa, DATA, flip(sig, 7)))
            assert.is_false(crypto.verify(alg, keys.rsa, DATA .. ".", sig))
            assert.is_false(crypto.verify(alg, keys.rsa2, DATA, sig))
            assert.is_false(crypto.verify("PS" .. bits, keys.rsa, DATA, sig))
        end
    end)

    it("PS256/384/512 (PSS, MGF1 with the same digest, salt as long as the digest)", function()
        for _, bits in ipairs({ 256, 384, 512 }) do
            local pss = "-sha" .. bits .. " -sigopt rsa_padding_mode:pss -sigopt rsa_mgf1_md:sha" .. bits
            local alg, sig = "PS" .. bits, sign("rsa", pss .. " -sigopt rsa_pss_saltlen:digest")
            assert.is_true(crypto.verify(alg, keys.rsa, DATA, sig))
            assert.is_false(crypto.verify(alg, keys.rsa, DATA, flip(sig)))
            assert.is_false(crypto.verify(alg, keys.rsa2, DATA, sig))
            assert.is_false(crypto.verify("RS" .. bits, keys.rsa, DATA, sig))
            -- RFC 7518 section 3.5 fixes the salt length: the maximum salt is refused
            assert.is_false(crypto.verify(alg, keys.rsa, DATA, sign("rsa", pss .. " -sigopt rsa_pss_saltlen:max")))
        end
    end)

    it("ES256/384/512 (r || s)", function()
        for _, c in ipairs({ { "ES256", "p256", 256, 32 }, { "ES384", "p384", 384, 48 }, { "ES512", "p521", 512, 66 } }) do
            local alg, key, size = c[1], keys[c[2]], c[4]
            for _ = 1, 8 do -- r and s of every shape: leading zeros, top bit set
                local der = sign(c[2], "-sha" .. c[3])
                local sig = der_to_raw(der, size)
                assert.is_true(crypto.verify(alg, key, DATA, sig))
                assert.is_false(crypto.verify(alg, key, DATA, flip(sig, size)))
                assert.is_false(crypto.verify(alg, key, DATA, flip(sig, 2 * size)))
                -- openssl's own DER form is not a JWS signature
                local ok, why = crypto.verify(alg, key, DATA, der)
                assert.is_false(ok)
                assert.matches("wrong length", why)
            end
        end
    end)

    it("EdDSA with Ed25519 and Ed448", function()
        for _, name in ipairs({ "ed25519", "ed448" }) do
            local sig = sign_eddsa(name)
            assert.is_true(crypto.verify("EdDSA", keys[name], DATA, sig))
            assert.is_false(crypto.verify("EdDSA", keys[name], DATA, flip(sig, 9)))
            assert.is_false(crypto.verify("EdDSA", keys[name], DATA .. "x", sig))
        end
        assert.is_false(crypto.verify("EdDSA", keys.ed25519, DATA, sign_eddsa("ed448")))
    end)

    it("a key never verifies for an alg of another key type or curve", function()
        local sig = sign("p256", "-sha256")
        local cases = {
            { "ES256", "rsa", "ES256 needs an EC P-256 key" },
            { "ES256", "p384", "ES256 needs an EC P-256 key" },
            { "ES384", "p256", "ES384 needs an EC P-384 key" },
            { "ES512", "p384", "ES512 needs an EC P-521 key" },
            { "RS256", "p256", "RS256 needs an RSA key" },
            { "PS256", "ed25519", "PS256 needs an RSA key" },
            { "EdDSA", "rsa", "EdDSA needs an OKP key (Ed25519 or Ed448)" },
            { "HS256", "rsa", "HS256 needs a secret string, not a public key" },
            { "none", "rsa", "unknown alg (RS256/384/512, PS256/384/512, ES256/384/512, EdDSA)" },
            { "rs256", "rsa", "unknown alg (RS256/384/512, PS256/384/512, ES256/384/512, EdDSA)" },
        }
        for _, c in ipairs(cases) do
            local ok, err = crypto.verify(c[1], keys[c[2]], DATA, sig)
            assert.is_nil(ok)
            assert.equal(c[3], err)
        end
        -- the classic confusion: the RSA public key's PEM used as an HMAC secret
        local forged = crypto.hmac("sha256", pems.rsa, DATA)
        assert.is_true(crypto.verify("HS256", pems.rsa, DATA, forged)) -- a string is a secret ...
        local ok, err = crypto.verify("RS256", pems.rsa, DATA, forged) -- ... never an RSA key
        assert.is_nil(ok)
        assert.equal("RS256 needs a public key, not a secret string", err)
        -- an alg no key verifies is unknown with a secret too, not one that "needs a public key"
        for _, alg in ipairs({ "none", "rs256", "XX256" }) do
            ok, err = crypto.verify(alg, "secret", DATA, forged)
            assert.is_nil(ok)
            assert.equal("unknown alg (RS256/384/512, PS256/384/512, ES256/384/512, EdDSA)", err)
        end
    end)

    it("reads PKCS#1 RSA PUBLIC KEY and CERTIFICATE PEMs, and refuses private keys", function()
        local sig = sign("rsa", "-sha256")
        sh("openssl rsa -in rsa.pem -RSAPublicKey_out -out rsa1.pub")
        sh("openssl req -new -x509 -key rsa.pem -subj /CN=sluice -days 1 -out rsa.crt")
        sh("openssl req -new -x509 -key p384.pem -subj /CN=sluice -days 1 -out p384.crt")
        local pkcs1, crt = read("rsa1.pub"), read("rsa.crt")
        assert.matches("BEGIN RSA PUBLIC KEY", pkcs1)
        for _, pem in ipairs({ pkcs1, crt, "comment line\n" .. pems.rsa }) do
            local key = assert(crypto.public_key(pem))
            assert.same({ "RSA", nil, 2048 }, { key:info() })
            assert.is_true(crypto.verify("RS256", key, DATA, sig))
        end
        assert.same({ "EC", "P-384", 384 }, { assert(crypto.public_key(read("p384.crt"))):info() })
        assert.same({ "OKP", "Ed448", 456 }, { keys.ed448:info() })

        local key, err = crypto.public_key(read("rsa.pem"))
        assert.is_nil(key)
        assert.matches("a private key", err)
        assert.same({ nil, "no PEM block (-----BEGIN ...-----) found" }, { crypto.public_key("") })
        assert.same({ nil, "bad PEM public key" },
                    { crypto.public_key("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n") })
        assert.same({ nil, "unsupported PEM block (PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE)" },
                    { crypto.public_key("-----BEGIN X509 CRL-----\n-----END X509 CRL-----\n") })
        -- keys OpenSSL reads but no JWS alg uses
        for name, opts in pairs({ k1 = "-algorithm EC -pkeyopt ec_paramgen_curve:secp256k1",
                                  x25519 = "-algorithm X25519", pss = "-algorithm RSA-PSS" }) do
            sh(("openssl genpkey %s | openssl pkey -pubout -out %s.pub"):format(opts, name))
            assert.same({ nil, "unsupported key type (RSA, EC P-256/P-384/P-521, Ed25519, Ed448)" },
                        { crypto.public_key(read(name .. ".pub")) })
        end
    end)

    it("a JWK made from the PEM key's numbers verifies what the PEM key verifies", function()
        -- RSA: n from `openssl rsa -modulus`, e = 65537
        sh("openssl rsa -in rsa.pem -noout -modulus -out modulus.txt")
        local n = unhex(read("modulus.txt"):match("Modulus=(%x+)"))
        local rsa = assert(crypto.jwk_key({ kty = "RSA", n = crypto.base64url_encode(n), e = "AQAB", kid = "k1" }))
        assert.same({ keys.rsa:info() }, { rsa:info() })
        for _, c in ipairs({ { "RS256", "-sha256" }, { "PS384", "-sha384 -sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:digest" } }) do
            local sig = sign("rsa", c[2])
            assert.is_true(crypto.verify(c[1], rsa, DATA, sig))
            assert.is_true(crypto.verify(c[1], keys.rsa, DATA, sig))
            assert.is_false(crypto.verify(c[1], rsa, DATA, flip(sig)))
        end

        -- EC and OKP: x (and y) are the last bytes of the SubjectPublicKeyInfo DER
        local function spki(name)
            sh(("openssl pkey -pubin -in %s.pub -outform DER -out %s.der"):format(name, name))
            return read(name .. ".der")
        end
        for _, c in ipairs({ { "p256", "P-256", 32, "ES256", "-sha256" }, { "p521", "P-521", 66, "ES512", "-sha512" } }) do
            local der, size = spki(c[1]), c[3]
            local point = der:sub(-(2 * size + 1))
            assert.equal(4, point:byte(1))
            local key = assert(crypto.jwk_key({ kty = "EC", crv = c[2],
                x = crypto.base64url_encode(point:sub(2, size + 1)), y = crypto.base64url_encode(point:sub(size + 2)) }))
            assert.is_true(crypto.verify(c[4], key, DATA, der_to_raw(sign(c[1], c[5]), size)))
        end
        local ed = assert(crypto.jwk_key({ kty = "OKP", crv = "Ed25519", x = crypto.base64url_encode(spki("ed25519"):sub(-32)) }))
        assert.is_true(crypto.verify("EdDSA", ed, DATA, sign_eddsa("ed25519")))
    end)
end)

describe("sluice.crypto.jwk_key refuses", function()
    local X = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"
    local Y = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
    local cases = {
        { { kty = "oct", k = "c2VjcmV0" }, "unsupported JWK kty 'oct' (RSA, EC, OKP)" },
        { { n = "AQAB" }, "unsupported JWK kty 'nil' (RSA, EC, OKP)" },
        { { kty = "RSA", e = "AQAB" }, "JWK RSA key needs 'n'" },
        { { kty = "RSA", n = "oQ*", e = "AQAB" }, "JWK 'n': bad base64url character" },
        { { kty = "RSA", n = "oAAA", e = "AQAB" }, "not an RSA public key (n and e must be odd, e greater than 1)" },
        { { kty = "EC", x = X, y = Y }, "JWK EC key needs 'crv'" },
        { { kty = "EC", crv = "P-256", x = X }, "JWK EC key needs 'y'" },
        { { kty = "EC", crv = "secp256k1", x = X, y = Y }, "unsupported EC curve (P-256, P-384, P-521)" },
        { { kty = "EC", crv = "Ed25519", x = X, y = Y }, "unsupported EC curve (P-256, P-384, P-521)" },
        { { kty = "EC", crv = "P-384", x = X, y = Y },
          "EC x and y must each be the curve's coordinate size (32, 48 or 66 bytes)" },
        { { kty = "EC", crv = "P-256", x = X, y = X }, "bad EC public key (is the point on the curve?)" },
        { { kty = "OKP", crv = "X25519", x = X }, "unsupported OKP curve (Ed25519, Ed448)" },
        { { kty = "OKP", crv = "Ed448", x = X },
          "OKP x must be the curve's public key size (32 bytes for Ed25519, 57 for Ed448)" },
    }
    for i, c in ipairs(cases) do
        it(("case %d: %s"):format(i, c[2]), function()
            assert.same({ nil, c[2] }, { crypto.jwk_key(c[1]) })
        end)
    end
end)

describe("sluice.crypto: timing_safe_equal, base64_decode", function()
    it("timing_safe_equal compares whole strings (its timing: ctest/crypto_test.c)", function()
        assert.is_true(crypto.timing_safe_equal("secret", "secret"))
        assert.is_true(crypto.timing_safe_equal("", ""))
        assert.is_true(crypto.timing_safe_equal("a\0b", "a\0b"))
        assert.is_false(crypto.timing_safe_equal("a\0b", "a\0c"))
        assert.is_false(crypto.timing_safe_equal("secret", "Secret"))
        assert.is_false(crypto.timing_safe_equal("secret", "secrets"))
        assert.is_false(crypto.timing_safe_equal("secret", nil))
        assert.is_false(crypto.timing_safe_equal(1, 1))
    end)

    it("base64_decode: RFC 4648 section 10 vectors, padding optional, '+' and '/'", function()
        local vectors = { [""] = "", Zg = "f", ["Zg=="] = "f", ["Zm8="] = "fo", Zm9v = "foo",
                          ["Zm9vYg=="] = "foob", ["Zm9vYmE="] = "fooba", Zm9vYmFy = "foobar" }
        for enc, dec in pairs(vectors) do assert.equal(dec, crypto.base64_decode(enc)) end
        assert.equal("\251\255\191", crypto.base64_decode("+/+/"))
        for _, bad in ipairs({ "-_-_", "Zg=", "Zg===", "Z", "Zm9v!", "Zm 9v", "=Zg=" }) do
            assert.is_nil((crypto.base64_decode(bad)))
        end
    end)
end)

describe("sluice.crypto.password_verify: hashes from openssl passwd and Python's hashlib", function()
    local passwords = dofile((test.SOURCE_DIR:sub(1, 1) == "/" and test.SOURCE_DIR
        or (os.getenv("PWD") .. "/" .. test.SOURCE_DIR)) .. "/spec/fixtures/passwords.lua")

    it("crypt(3) SHA-512 ($6$), with default and explicit rounds, and SHA-256 ($5$)", function()
        for _, v in ipairs({ { "-6" }, { "-6", "rounds=1000$" }, { "-5" }, { "-5", "rounds=2000$" } }) do
            local h = passwords.crypt(v[1], "open sesame", v[2])
            assert.is_true(crypto.password_check(h))
            assert.is_true(crypto.password_verify("open sesame", h), h)
            assert.is_false(crypto.password_verify("open sesamE", h))
            assert.is_false(crypto.password_verify("open sesame\0", h))
            assert.is_false(crypto.password_verify("", h))
        end
    end)

    it("PBKDF2-SHA256 and PBKDF2-SHA512 in passlib's format", function()
        for _, md in ipairs({ "sha256", "sha512" }) do
            local h = passwords.pbkdf2(md, "correct horse", 1000 + math.random(0, 5000))
            assert.is_true(crypto.password_check(h))
            assert.is_true(crypto.password_verify("correct horse", h))
            assert.is_false(crypto.password_verify("correct horse ", h))
            assert.is_false(crypto.password_verify("correct horse\0", h)) -- HMAC pads keys with zeros
        end
    end)

    it("answers nil, err for hashes in no supported format", function()
        local cases = {
            { "plaintext", "unsupported password hash" },
            { "$1$abc$iCQ2D3nhptRYi27fDYv2s1", "unsupported password hash" },
            { "$6$salt$tooshort", "malformed crypt(3) hash: wrong length" },
            { "$pbkdf2-sha256$12$c2FsdA$AAAA", "malformed PBKDF2 hash: rounds must be 1000 to 10000000" },
        }
        for _, c in ipairs(cases) do
            for _, f in ipairs({ crypto.password_check, function(h) return crypto.password_verify("x", h) end }) do
                local ok, err = f(c[1])
                assert.is_nil(ok)
                assert.matches(c[2], err, 1, true)
            end
        end
    end)
end)

describe("sluice.crypto programming errors raise", function()
    it("on arguments of the wrong type", function()
        assert.has_error(function() crypto.public_key(nil) end, "public_key: pem must be a string")
        assert.has_error(function() crypto.jwk_key("{}") end, "jwk_key: jwk must be a table")
        assert.has_error(function() crypto.verify("RS256", nil, "d", "s") end,
                         "verify: key must be a secret string or a key from public_key/jwk_key")
        assert.has_error(function() crypto.verify("RS256", {}, "d", "s") end)
        assert.has_error(function() crypto.verify("HS256", "k", nil, "s") end,
                         "verify: alg, data and signature must be strings")
    end)

    it("on password_verify and password_check arguments that are not strings", function()
        assert.has_error(function() crypto.password_verify(nil, "$6$x$y") end,
                         "password_verify: password and hash must be strings")
        assert.has_error(function() crypto.password_verify("x", 1) end,
                         "password_verify: password and hash must be strings")
        assert.has_error(function() crypto.password_check(nil) end, "password_check: hash must be a string")
    end)
end)
