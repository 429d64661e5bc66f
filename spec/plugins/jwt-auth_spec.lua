-- jwt-auth through sluice.test, with keys and tokens made by the openssl command line
-- (spec/fixtures/jwt/mint.lua) and the RFC 7515 appendix A examples. The upstream and
-- the JWKS server are one in-process gateway running the jwt-peer fixture: it counts
-- what reached the upstream (so a refusal can be shown to reach nothing) and serves a
-- JWKS the spec replaces between requests (rotation without a reload).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local cjson = require("cjson")
local ffi = require("ffi")

pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")

local FIX = (test.SOURCE_DIR:sub(1, 1) == "/" and test.SOURCE_DIR
    or (os.getenv("PWD") .. "/" .. test.SOURCE_DIR)) .. "/spec/fixtures/jwt"

local function read_file(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("*a")
    f:close()
    return s
end

local RFC = cjson.decode(read_file(FIX .. "/rfc7515-a.json"))
-- 48 bytes: enough for HS256 (32) and HS384 (48), not for HS512 (64)
local SECRET = "spec-secret-0123456789-abcdefghijklmnopqrstuvwxy"
assert(#SECRET == 48)
-- jwks_refresh of the route whose refetches are counted (seconds): what the spec waits
-- for, and how long a request may take (ASan builds) without blurring the count
local REFRESH = 2

-- Flips one base64url character of a token's signature (never its last: its low bits
-- may be padding that decodes to the same bytes).
local function tamper(token)
    local i = #token - 5
    local c = token:sub(i, i)
    return token:sub(1, i - 1) .. (c == "A" and "B" or "A") .. token:sub(i + 1)
end

describe("jwt-auth", function()
    local mint, peer, gw, peer_url
    local t0 = os.time()

    local function claims(extra)
        local c = { sub = "alice", iat = t0, exp = t0 + 3600 }
        for k, v in pairs(extra or {}) do c[k] = v end
        return c
    end

    -- The gateway's answer to a request carrying `token` (Bearer, unless headers say otherwise).
    local function call(path, token, headers)
        headers = headers or {}
        if token and not headers.Authorization then headers.Authorization = "Bearer " .. token end
        return assert(gw:request({ path = path, headers = headers }))
    end

    local function peer_stats() return assert(peer:request({ path = "/__hits" })):json() end

    -- 200, and what the upstream saw (the echo plugin's JSON).
    local function pass(path, token, headers)
        local res = call(path, token, headers)
        assert.equal(200, res.status, res.body)
        return res:json()
    end

    -- 401 with the Bearer challenge, the detail matching `why`, and nothing upstream.
    local function refused(path, token, why, headers)
        local before = peer_stats().upstream
        local res = call(path, token, headers)
        assert.equal(401, res.status, res.body)
        assert.equal('Bearer error="invalid_token"', res.headers["www-authenticate"])
        local body = res:json()
        assert.equal("invalid_token", body.error)
        if why then assert.matches(why, body.error_description, 1, true) end
        assert.equal(before, peer_stats().upstream)
        return body
    end

    local function serve_jwks(list)
        assert.equal(204, assert(peer:request({ method = "POST", path = "/jwks", body = mint.jwks(list) })).status)
    end

    local jwk = {}

    setup(function()
        mint = dofile(FIX .. "/mint.lua").new()
        jwk.rsa = mint:jwk("rsa", { kid = "rsa-1", use = "sig" })
        jwk.rsa2 = mint:jwk("rsa2", { kid = "rsa-2", alg = "RS256" })
        jwk.p256 = mint:jwk("p256", { kid = "ec-1" })
        jwk.p384 = mint:jwk("p384", { kid = "ec-384" })
        jwk.ed = mint:jwk("ed25519", { kid = "ed-1" })
        -- an encryption key of the same kid is never used to verify
        local enc = mint:jwk("rsa2", { kid = "rsa-1", use = "enc" })
        mint:write("main.jwks", mint.jwks({ jwk.rsa, jwk.p256, jwk.p384, jwk.ed, enc }))

        assert.equal(0, ffi.C.setenv("JWT_SPEC_SECRET", SECRET, 1))
        assert.equal(0, ffi.C.setenv("JWT_SPEC_RFC_SECRET", mint:out("printf '%s' '" .. RFC.a1_secret
            .. "==' | tr '_-' '/+' | base64 -d"), 1))

        peer = assert(test.start({ plugin_paths = { FIX }, admin = { listen = "off" },
            routes = { { name = "peer", match = { paths = { "/" } },
                         plugins = { { name = "jwt-peer" }, { name = "echo" } } } } }))
        peer_url = "http://" .. peer:address()
        serve_jwks({ jwk.rsa })

        local main = mint:path("main.jwks")
        local ALL = { "HS256", "RS256", "PS256", "ES256", "ES384", "EdDSA" }
        local function route(name, config, more)
            local plugins = { { name = "jwt-auth", config = config } }
            for _, p in ipairs(more or {}) do plugins[#plugins + 1] = p end
            return { name = name, match = { paths = { "/" .. name .. "/" } }, upstream = "peer", plugins = plugins }
        end
        local probe = { { name = "claims-probe" } }
        local rfc = { algorithms = { "HS256", "RS256", "ES256" }, secret_env = "JWT_SPEC_RFC_SECRET",
                      jwks_file = FIX .. "/rfc7515-a.jwks.json", consumer_claim = "iss" }
        local rfc_lenient = {}
        for k, v in pairs(rfc) do rfc_lenient[k] = v end
        rfc_lenient.leeway = 1e10 -- the examples expired in 2011
        gw = assert(test.start({
            plugin_paths = { FIX },
            upstreams = { { name = "peer", targets = { { address = peer:address() } } } },
            routes = {
                route("all", { algorithms = ALL, secret_env = "JWT_SPEC_SECRET", jwks_file = main }, probe),
                route("rs", { algorithms = { "RS256" }, jwks_file = main }),
                route("claims", { algorithms = { "RS256" }, jwks_file = main, issuer = "https://idp.example",
                                  audience = "api", leeway = 10 }),
                route("issuers", { algorithms = { "RS256" }, jwks_file = main,
                                   issuers = { "https://a.example", "https://b.example" } }),
                route("hide", { algorithms = { "RS256" }, jwks_file = main, hide_credentials = true }),
                route("custom", { algorithms = { "EdDSA" }, jwks_file = main, header = "X-Token" }),
                route("tenant", { algorithms = { "ES256" }, jwks_file = main, consumer_claim = "tenant" }),
                route("rfc", rfc_lenient),
                route("rfc-strict", rfc),
                route("small", { algorithms = { "HS256" }, secret_env = "JWT_SPEC_SECRET", cache_size = 4 }, probe),
                route("nocache", { algorithms = { "HS256" }, secret_env = "JWT_SPEC_SECRET", cache_size = 0 }, probe),
                route("short", { algorithms = { "HS256" }, secret_env = "JWT_SPEC_SECRET", leeway = 0 }, probe),
                route("uri-slow", { algorithms = { "RS256" }, jwks_uri = peer_url .. "/jwks/slow", jwks_refresh = 3600 }),
                route("uri-fast", { algorithms = { "RS256" }, jwks_uri = peer_url .. "/jwks/fast",
                                    jwks_refresh = REFRESH }),
                route("uri-down", { algorithms = { "RS256" }, jwks_uri = "http://127.0.0.1:1/jwks", jwks_timeout = 1 }),
            },
        }))
    end)

    teardown(function()
        if gw then gw:stop() end
        if peer then peer:stop() end
        if mint then mint:close() end
    end)

    describe("tokens made by openssl", function()
        it("HS256, RS256, PS256, ES256, ES384 and EdDSA pass; the upstream sees X-Consumer", function()
            local cases = {
                { "HS256", SECRET, {} },
                { "RS256", "rsa", { kid = "rsa-1" } },
                { "PS256", "rsa", { kid = "rsa-1" } },
                { "ES256", "p256", { kid = "ec-1" } },
                { "ES384", "p384", { kid = "ec-384" } },
                { "EdDSA", "ed25519", { kid = "ed-1" } },
            }
            for _, c in ipairs(cases) do
                local seen = pass("/all/x", mint:token(c[1], c[2], c[3], claims({ sub = "user-" .. c[1] })))
                assert.equal("user-" .. c[1], seen.headers["x-consumer"])
                assert.equal("/all/x", seen.path)
            end
        end)

        it("a client's own X-Consumer is replaced by the token's consumer", function()
            local tok = mint:token("RS256", "rsa", { kid = "rsa-1" }, claims())
            local seen = pass("/rs/", tok, { ["X-Consumer"] = "mallory" })
            assert.equal("alice", seen.headers["x-consumer"])
        end)

        it("a token without kid is checked with the keys that fit its alg", function()
            assert.equal("alice", pass("/rs/", mint:token("RS256", "rsa", {}, claims())).headers["x-consumer"])
        end)

        it("the Bearer scheme is case-insensitive", function()
            local tok = mint:token("ES256", "p256", { kid = "ec-1" }, claims())
            pass("/all/", nil, { Authorization = "bearer " .. tok })
            pass("/all/", nil, { Authorization = "BEARER " .. tok })
        end)

        it("exp and nbf inside the leeway pass", function()
            pass("/claims/", mint:token("RS256", "rsa", { kid = "rsa-1" },
                claims({ iss = "https://idp.example", aud = "api", exp = os.time() - 2 })))
            pass("/claims/", mint:token("RS256", "rsa", { kid = "rsa-1" },
                claims({ iss = "https://idp.example", aud = "api", nbf = os.time() + 2 })))
        end)

        it("iss and aud (a string or a list in the token) that match pass", function()
            pass("/claims/", mint:token("RS256", "rsa", { kid = "rsa-1" }, claims({ iss = "https://idp.example", aud = "api" })))
            pass("/claims/", mint:token("RS256", "rsa", { kid = "rsa-1" },
                claims({ iss = "https://idp.example", aud = { "web", "api" } })))
            pass("/issuers/", mint:token("RS256", "rsa", { kid = "rsa-1" }, claims({ iss = "https://b.example" })))
        end)

        it("hide_credentials removes the token before proxying; by default it goes upstream", function()
            local tok = mint:token("RS256", "rsa", { kid = "rsa-1" }, claims())
            assert.is_nil(pass("/hide/", tok).headers.authorization)
            assert.equal("Bearer " .. tok, pass("/rs/", tok).headers.authorization)
        end)

        it("another header may carry the bare token; consumer_claim names the claim", function()
            local tok = mint:token("EdDSA", "ed25519", { kid = "ed-1" }, claims())
            assert.equal("alice", pass("/custom/", nil, { ["X-Token"] = tok }).headers["x-consumer"])
            assert.equal("alice", pass("/custom/", nil, { ["X-Token"] = "Bearer " .. tok }).headers["x-consumer"])
            local t2 = mint:token("ES256", "p256", { kid = "ec-1" }, claims({ tenant = "acme" }))
            assert.equal("acme", pass("/tenant/", t2).headers["x-consumer"])
        end)
    end)

    describe("refuses with 401 and reaches no upstream:", function()
        it("no token (the challenge has no error code, RFC 6750 3.1)", function()
            local before = peer_stats().upstream
            local res = call("/all/", nil)
            assert.equal(401, res.status)
            assert.equal("Bearer", res.headers["www-authenticate"])
            assert.equal(before, peer_stats().upstream)
        end)

        it("an Authorization that is not Bearer: the challenge has no error code either (RFC 6750 3.1)", function()
            for _, v in ipairs({ "Basic YWxpY2U6cHc=", "Bearer", "Bearer " }) do
                local before = peer_stats().upstream
                local res = call("/all/", nil, { Authorization = v })
                assert.equal(401, res.status)
                assert.equal("Bearer", res.headers["www-authenticate"])
                assert.same({ error = "unauthorized", error_description = "not a Bearer token" }, res:json())
                assert.equal(before, peer_stats().upstream)
            end
        end)

        it("alg none", function()
            refused("/all/", mint:token("none", nil, {}, claims()), "alg none")
            -- with the signature of an allowed alg attached
            local good = mint:token("HS256", SECRET, {}, claims())
            refused("/all/", mint:token("none", nil, {}, claims()) .. good:match("[^.]+$"), "alg none")
        end)

        it("an alg outside algorithms", function()
            refused("/all/", mint:token("RS512", "rsa", { kid = "rsa-1" }, claims()), "alg 'RS512' is not allowed")
            refused("/rs/", mint:token("HS256", SECRET, {}, claims()), "alg 'HS256' is not allowed")
            refused("/rs/", mint:token("PS256", "rsa", { kid = "rsa-1" }, claims()), "alg 'PS256' is not allowed")
        end)

        it("key confusion: HS256 signed with the public key (PEM, or the JWK's n)", function()
            local pem = mint:read("rsa.pub")
            for _, path in ipairs({ "/all/", "/rs/" }) do
                refused(path, mint:token("HS256", pem, { kid = "rsa-1" }, claims()))
                refused(path, mint:token("HS256", jwk.rsa.n, { kid = "rsa-1" }, claims()))
            end
            -- and an asymmetric alg never pairs with a key of another type or curve
            refused("/all/", mint:token("ES256", "p256", { kid = "rsa-1" }, claims()), "no ES256 key with kid 'rsa-1'")
            refused("/all/", mint:token("ES256", "p384", { kid = "ec-384" }, claims()), "no ES256 key with kid 'ec-384'")
        end)

        it("a bad signature", function()
            local cases = {
                { "HS256", SECRET, {} }, { "RS256", "rsa", { kid = "rsa-1" } }, { "PS256", "rsa", { kid = "rsa-1" } },
                { "ES256", "p256", { kid = "ec-1" } }, { "EdDSA", "ed25519", { kid = "ed-1" } },
            }
            for _, c in ipairs(cases) do
                refused("/all/", tamper(mint:token(c[1], c[2], c[3], claims())), "signature does not verify")
            end
            -- signed by another key under the known kid; HMAC with another secret
            refused("/all/", mint:token("RS256", "rsa2", { kid = "rsa-1" }, claims()), "signature does not verify")
            refused("/all/", mint:token("HS256", SECRET .. "x", {}, claims()), "signature does not verify")
            -- the payload changed after signing
            local h, _, s = mint:token("RS256", "rsa", { kid = "rsa-1" }, claims()):match("^(.-)%.(.-)%.(.*)$")
            refused("/all/", h .. "." .. mint:b64u(cjson.encode(claims({ sub = "root" }))) .. "." .. s,
                    "signature does not verify")
        end)

        it("malformed base64url", function()
            local tok = mint:token("HS256", SECRET, {}, claims())
            local h, p, s = tok:match("^(.-)%.(.-)%.(.*)$")
            refused("/all/", h .. "=." .. p .. "." .. s, "malformed token")          -- padding
            refused("/all/", h .. "." .. p .. "." .. s:sub(1, -2) .. "+", "malformed token") -- base64, not base64url
            refused("/all/", h .. "." .. p:gsub("^.", "*", 1) .. "." .. s, "malformed token")
            refused("/all/", h .. ("x"):rep((1 - #h) % 4) .. "." .. p .. "." .. s, "malformed token header")
            local bad = s .. ("x"):rep((1 - #s) % 4) -- 4n+1 characters never decode
            assert.equal(1, #bad % 4)
            refused("/all/", h .. "." .. p .. "." .. bad, "malformed token signature")
            -- a payload of a bad base64url length, properly signed
            refused("/all/", mint:compact("HS256", SECRET, h, "abcde"), "malformed token payload")
        end)

        it("malformed JSON, or not three parts", function()
            refused("/all/", mint:token("HS256", SECRET, '{"alg":"HS256"', claims()), "malformed token header")
            refused("/all/", mint:token("HS256", SECRET, '["HS256"]', claims()), "no alg")
            refused("/all/", mint:token("HS256", SECRET, {}, "not json"), "malformed token payload")
            refused("/all/", mint:token("HS256", SECRET, {}, '"alice"'), "malformed token payload")
            local tok = mint:token("HS256", SECRET, {}, claims())
            refused("/all/", tok:match("^[^.]+%.[^.]+"), "three base64url parts")
            refused("/all/", tok .. ".x", "three base64url parts")
        end)

        it("a crit header (no extension is understood)", function()
            refused("/all/", mint:token("RS256", "rsa", { kid = "rsa-1", crit = { "exp" } }, claims()), "crit")
            refused("/all/", mint:token("HS256", SECRET, { crit = { "x-unknown" }, ["x-unknown"] = 1 }, claims()), "crit")
        end)

        it("exp or nbf outside the leeway", function()
            local iss = { iss = "https://idp.example", aud = "api" }
            local function at(c) for k, v in pairs(iss) do c[k] = v end return claims(c) end
            refused("/claims/", mint:token("RS256", "rsa", { kid = "rsa-1" }, at({ exp = os.time() - 60 })), "token expired")
            refused("/claims/", mint:token("RS256", "rsa", { kid = "rsa-1" }, at({ nbf = os.time() + 60 })), "not valid yet")
            refused("/claims/", mint:token("RS256", "rsa", { kid = "rsa-1" }, at({ exp = "tomorrow" })), "exp is not a number")
        end)

        it("iss or aud that do not match", function()
            local function tok(c) return mint:token("RS256", "rsa", { kid = "rsa-1" }, claims(c)) end
            refused("/claims/", tok({ iss = "https://evil.example", aud = "api" }), "issuer not accepted")
            refused("/claims/", tok({ aud = "api" }), "issuer not accepted")
            refused("/issuers/", tok({ iss = "https://c.example" }), "issuer not accepted")
            refused("/claims/", tok({ iss = "https://idp.example", aud = "web" }), "audience not accepted")
            refused("/claims/", tok({ iss = "https://idp.example", aud = { "web", "apis" } }), "audience not accepted")
            refused("/claims/", tok({ iss = "https://idp.example" }), "audience not accepted")
        end)

        it("an unknown kid, or no consumer claim", function()
            refused("/rs/", mint:token("RS256", "rsa", { kid = "rsa-9" }, claims()), "no RS256 key with kid 'rsa-9'")
            refused("/rs/", mint:token("RS256", "rsa", { kid = "rsa-1" }, { exp = t0 + 3600 }), "claim 'sub'")
            refused("/rs/", mint:token("RS256", "rsa", { kid = "rsa-1" }, claims({ sub = "has space" })), "claim 'sub'")
        end)
    end)

    describe("RFC 7515 appendix A", function()
        -- The examples' exp is 1300819380 (2011): route /rfc/ has leeway 1e10 s and
        -- consumer_claim iss ("joe"); /rfc-strict/ has the default leeway, where each
        -- example fails only at exp, i.e. after its signature verified.
        it("A.1 (HS256, the JWK's k as secret_env), A.2 (RS256) and A.3 (ES256) verify", function()
            for _, name in ipairs({ "a1", "a2", "a3" }) do
                assert.equal("joe", pass("/rfc/", RFC[name]).headers["x-consumer"])
                refused("/rfc-strict/", RFC[name], "token expired")
                refused("/rfc/", tamper(RFC[name]), "signature does not verify")
            end
        end)

        it("A.5 (unsecured, alg none) is refused", function()
            refused("/rfc/", RFC.a5, "alg none")
        end)
    end)

    describe("the token cache", function()
        local function serial(path, token) return pass(path, token).headers["x-claims-serial"] end

        it("a repeated token is served from the cache (the same claims table, nothing decoded)", function()
            local a = mint:token("RS256", "rsa", { kid = "rsa-1" }, claims({ sub = "cache-a" }))
            local b = mint:token("RS256", "rsa", { kid = "rsa-1" }, claims({ sub = "cache-b" }))
            local sa = serial("/all/", a)
            assert.equal(sa, serial("/all/", a))
            assert.equal(sa, serial("/all/", a))
            assert.not_equal(sa, serial("/all/", b))
            local n = mint:token("HS256", SECRET, {}, claims())
            assert.not_equal(serial("/nocache/", n), serial("/nocache/", n)) -- cache_size 0
        end)

        it("is bounded: cache_size 4 forgets a token after enough others", function()
            local first = mint:token("HS256", SECRET, {}, claims({ sub = "first" }))
            local s1 = serial("/small/", first)
            assert.equal(s1, serial("/small/", first))
            for i = 1, 8 do serial("/small/", mint:token("HS256", SECRET, {}, claims({ sub = "u" .. i }))) end
            assert.not_equal(s1, serial("/small/", first))
        end)

        it("an entry lasts until the token's exp (plus leeway), then the token is refused", function()
            local exp = os.time() + 3
            local tok = mint:token("HS256", SECRET, {}, claims({ exp = exp }))
            local s = serial("/short/", tok)
            assert.equal(s, serial("/short/", tok))
            while os.time() <= exp do os.execute("sleep 0.2") end
            refused("/short/", tok, "token expired")
        end)
    end)

    describe("the cached path, in this VM", function()
        -- Worker VMs are out of jit.attach's reach (see spec/sluice/jit_spec.lua), so the
        -- plugin is loaded here with get_header stubbed and crypto.verify and json.decode
        -- counted, and its access phase is looped on one token: one full check, then hits.
        it("repeats cost no JSON decode and no signature check, and compile (no trace aborts)", function()
            local sluice, schema = require("sluice"), require("sluice.schema")
            local crypto = require("sluice.crypto")
            local header, calls = nil, { verify = 0, decode = 0 }
            local saved = { sluice.request.get_header, crypto.verify, sluice.json.decode, sluice.request.set_header }
            local forwarded
            sluice.request.get_header = function() return header end
            sluice.request.set_header = function(_, v) forwarded = v end
            crypto.verify = function(...) calls.verify = calls.verify + 1 return saved[2](...) end
            sluice.json.decode = function(...) calls.decode = calls.decode + 1 return saved[3](...) end
            finally(function()
                sluice.request.get_header, crypto.verify, sluice.json.decode = saved[1], saved[2], saved[3]
                sluice.request.set_header = saved[4]
            end)
            local plugin = assert(loadfile(test.SOURCE_DIR .. "/plugins/jwt-auth.lua"))("jwt-auth")

            local conf = schema.validate(plugin.schema, { algorithms = { "RS256" }, jwks_file = mint:path("main.jwks") })
            assert(plugin.check(conf))
            local st = plugin.prepare(conf) -- what the runtime does once per generation and worker
            calls.decode = 0 -- the JWKS file's
            header = "Bearer " .. mint:token("RS256", "rsa", { kid = "rsa-1" }, claims())
            local ctx = {}
            plugin.access(conf, ctx, st)
            assert.equal("alice", ctx.consumer)
            assert.same({ verify = 1, decode = 2 }, calls)

            -- the JIT specs' shared judgement of aborts (its own copy lacked "call unroll limit
            -- reached", LuaJIT restarting a trace elsewhere, and failed a clean-clone run once)
            local aborts_lib = dofile(test.source_path("spec/fixtures/jit_aborts.lua"))
            local BENIGN = aborts_lib.BENIGN
            local aborts, stops = {}, 0
            local function handler(what, _, _, _, err, info)
                if what == "stop" then stops = stops + 1 end
                if what == "abort" then
                    local msg = aborts_lib.fmterr(err, info)
                    if not BENIGN[msg] then aborts[msg] = true end
                end
            end
            jit.flush()
            jit.attach(handler, "trace")
            for _ = 1, 5000 do
                ctx.consumer = nil
                plugin.access(conf, ctx, st)
            end
            jit.attach(handler)
            assert.equal("alice", ctx.consumer)
            assert.equal(header, forwarded) -- the verified field alone goes upstream
            assert.same({ verify = 1, decode = 2 }, calls)
            assert.same({}, aborts)
            assert.is_true(stops > 0, "nothing was compiled")
        end)
    end)

    describe("jwks_uri", function()
        local function fetches() return peer_stats().fetches end
        local function rs(kid, key, sub) return mint:token("RS256", key, { kid = kid }, claims({ sub = sub or "alice" })) end

        it("is fetched on first use, a JWKS rotation (new kid) is picked up without a reload,"
           .. " and refetches are at most one per jwks_refresh", function()
            -- tokens are made first: openssl takes long enough to blur the timing below
            local old, new = rs("rsa-1", "rsa", "old"), rs("rsa-2", "rsa2", "new")
            local unknown = { rs("rsa-9", "rsa", "x"), rs("rsa-8", "rsa", "y"), rs("rsa-7", "rsa", "z") }
            assert.is_nil(fetches().fast)
            pass("/uri-fast/", old)
            pass("/uri-slow/", old)
            assert.same({ fast = 1, slow = 1 }, fetches())

            -- the identity provider adds rsa-2
            serve_jwks({ jwk.rsa, jwk.rsa2 })
            refused("/uri-slow/", new, "no RS256 key with kid 'rsa-2'") -- jwks_refresh 3600: no refetch
            os.execute("sleep " .. REFRESH + 0.1)
            assert.equal("new", pass("/uri-fast/", new).headers["x-consumer"]) -- unknown kid: refetched
            pass("/uri-fast/", old)
            -- unknown kids right after a fetch do not fetch again
            refused("/uri-fast/", unknown[1], "no RS256 key with kid 'rsa-9'")
            refused("/uri-fast/", unknown[2], "no RS256 key with kid 'rsa-8'")
            assert.same({ fast = 2, slow = 1 }, fetches())

            -- rsa-1 is withdrawn: once a refetch happens, its cached tokens are checked again
            serve_jwks({ jwk.rsa2 })
            pass("/uri-fast/", old) -- still the cached verification
            os.execute("sleep " .. REFRESH + 0.1)
            refused("/uri-fast/", unknown[3], "no RS256 key with kid 'rsa-7'")
            assert.same({ fast = 3, slow = 1 }, fetches())
            refused("/uri-fast/", old, "no RS256 key with kid 'rsa-1'")
            pass("/uri-fast/", new)
        end)

        it("an unreachable key set answers 503 (the token may be fine)", function()
            local res = call("/uri-down/", rs("rsa-1", "rsa"))
            assert.equal(503, res.status)
            assert.same({ error = "key set unavailable" }, res:json())
        end)
    end)

    describe("config errors (sluice check)", function()
        local function err_of(config)
            local g, err = test.start({ routes = { { name = "r", plugins = { { name = "jwt-auth", config = config } } } } })
            if g then g:stop() end
            assert.is_nil(g)
            return err
        end
        local function main() return mint:path("main.jwks") end

        it("an unset or short secret_env variable", function()
            assert.matches("route 'r', plugin 'jwt-auth': environment variable 'JWT_SPEC_UNSET_VAR' (secret_env) is not set",
                err_of({ algorithms = { "HS256" }, secret_env = "JWT_SPEC_UNSET_VAR" }), 1, true)
            local err = err_of({ algorithms = { "HS512" }, secret_env = "JWT_SPEC_SECRET" })
            assert.matches("the secret in 'JWT_SPEC_SECRET' has 48 bytes: HS512 needs at least 64", err, 1, true)
            assert.is_nil(err:find(SECRET, 1, true))
        end)

        it("an unreadable or unusable jwks_file", function()
            assert.matches("route 'r', plugin 'jwt-auth': cannot read jwks_file: /nonexistent/jwks.json: No such file",
                err_of({ algorithms = { "RS256" }, jwks_file = "/nonexistent/jwks.json" }), 1, true)
            mint:write("bad.jwks", "{\"keys\": 1}")
            assert.matches("not a JWKS", err_of({ algorithms = { "RS256" }, jwks_file = mint:path("bad.jwks") }), 1, true)
            mint:write("broken.jwks", mint.jwks({ { kty = "RSA", kid = "k", n = "oAAA", e = "AQAB" } }))
            assert.matches("key 1 (kid 'k'): not an RSA public key",
                err_of({ algorithms = { "RS256" }, jwks_file = mint:path("broken.jwks") }), 1, true)
            mint:write("ec.jwks", mint.jwks({ jwk.p256 }))
            assert.matches("has no key for RS256",
                err_of({ algorithms = { "ES256", "RS256" }, jwks_file = mint:path("ec.jwks") }), 1, true)
        end)

        it("keys that do not fit the algorithms", function()
            assert.matches("HS algorithms need secret_env", err_of({ algorithms = { "HS256" } }), 1, true)
            assert.matches("RS256 needs jwks_file or jwks_uri", err_of({ algorithms = { "RS256" } }), 1, true)
            assert.matches("secret_env is set but algorithms has no HS",
                err_of({ algorithms = { "RS256" }, secret_env = "JWT_SPEC_SECRET", jwks_file = main() }), 1, true)
            assert.matches("jwks_file is set but algorithms has only HS algorithms",
                err_of({ algorithms = { "HS256" }, secret_env = "JWT_SPEC_SECRET", jwks_file = main() }), 1, true)
            assert.matches("jwks_file and jwks_uri are exclusive",
                err_of({ algorithms = { "RS256" }, jwks_file = main(), jwks_uri = "http://127.0.0.1:1/" }), 1, true)
        end)

        it("bad values", function()
            assert.matches("algorithms.1: expected one of: HS256", err_of({ algorithms = { "none" } }), 1, true)
            assert.matches("algorithms: needs at least 1 item", err_of({ algorithms = {} }), 1, true)
            assert.matches("missing required key 'algorithms'", err_of({ jwks_file = main() }), 1, true)
            assert.matches("jwks_ca is set but jwks_uri is not https://",
                err_of({ algorithms = { "RS256" }, jwks_uri = "http://idp.example/jwks", jwks_ca = "/ca.pem" }), 1, true)
            assert.matches("jwks_uri: expected an http:// or https:// URL",
                err_of({ algorithms = { "RS256" }, jwks_uri = "idp.example/jwks" }), 1, true)
            assert.matches("issuer and issuers are exclusive", err_of({ algorithms = { "RS256" }, jwks_file = main(),
                issuer = "a", issuers = { "b" } }), 1, true)
            assert.matches("header: 'X Token' is not a header name",
                err_of({ algorithms = { "RS256" }, jwks_file = main(), header = "X Token" }), 1, true)
        end)
    end)
end)
