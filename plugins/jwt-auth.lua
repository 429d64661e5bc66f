-- jwt-auth: authenticates a request by a JWT in compact JWS form (RFC 7519, RFC 7515)
-- and names its consumer from one claim (ctx.consumer; the core sends X-Consumer).
--
-- Verification order, cheapest and least trusting first: the token's shape and
-- base64url, the header's JSON, its `alg` against `algorithms` (so `none` and anything
-- unlisted never reach a key), `crit`, the key (HS* only ever with the secret of
-- `secret_env`; every other alg only with a JWKS key of the fitting type and curve), the
-- signature, and only then the payload's JSON and its claims.
--
-- A verified token is cached per worker under the raw header value until its `exp`
-- (plus leeway), so a repeat costs two table lookups and a clock read: no base64url,
-- no JSON, no crypto, no new strings. See docs/plugins.md, "jwt-auth".
local sluice = require("sluice")
local crypto = require("sluice.crypto")
local tnew = require("table.new")

local request, response, json, log = sluice.request, sluice.response, sluice.json, sluice.log
local get_header, now = request.get_header, sluice.time.now
local b64_decode, verify = crypto.base64url_decode, crypto.verify
local type, ipairs, pcall, floor, ceil, min = type, ipairs, pcall, math.floor, math.ceil, math.min
local getenv = os.getenv

-- What each alg needs: the secret of at least `secret` bytes (HS*, RFC 7518 3.2), or a
-- key of this type (and curve).
local ALGS = {
    HS256 = { secret = 32 }, HS384 = { secret = 48 }, HS512 = { secret = 64 },
    RS256 = { kty = "RSA" }, RS384 = { kty = "RSA" }, RS512 = { kty = "RSA" },
    PS256 = { kty = "RSA" }, PS384 = { kty = "RSA" }, PS512 = { kty = "RSA" },
    ES256 = { kty = "EC", crv = { ["P-256"] = true } },
    ES384 = { kty = "EC", crv = { ["P-384"] = true } },
    ES512 = { kty = "EC", crv = { ["P-521"] = true } },
    EdDSA = { kty = "OKP", crv = { Ed25519 = true, Ed448 = true } },
}
local ALG_NAMES = { "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384",
                    "PS512", "ES256", "ES384", "ES512", "EdDSA" }

local JWKS_MAX_BODY = 1024 * 1024
-- Until a jwks_uri was fetched once, a failed fetch may be retried this soon (seconds).
local FIRST_RETRY = 1

local M = {
    name = "jwt-auth",
    version = "1.0",
    auth = true, -- sets ctx.consumer: an after_auth plugin (acl) must come later
    schema = {
        algorithms = { type = "array", required = true, min = 1,
                       items = { type = "enum", one_of = ALG_NAMES } },
        secret_env = { type = "string", min = 1 },
        jwks_file = { type = "string", min = 1 },
        jwks_uri = { type = "string", min = 1 },
        jwks_ca = { type = "string", min = 1 }, -- https jwks_uri: a PEM file of trusted CAs
        jwks_refresh = { type = "duration", default = 60, min = 1 },
        jwks_max_age = { type = "duration", default = 300, min = 1 }, -- keys older are refetched
        jwks_timeout = { type = "duration", default = 5, min = 0.001 },
        issuer = { type = "string" },
        issuers = { type = "array", min = 1, items = { type = "string" } },
        audience = { type = "string" },
        leeway = { type = "duration", default = 30, min = 0 },
        header = { type = "string", default = "Authorization", min = 1 },
        consumer_claim = { type = "string", default = "sub", min = 1 },
        hide_credentials = { type = "boolean", default = false },
        cache_size = { type = "integer", default = 4096, min = 0 },
    },
}

-- ---------------------------------------------------------------- key sets

-- One JWKS member as a key entry { key, kty, crv, alg, kid }; false for a key that is
-- not for signatures (`use` other than "sig") or symmetric (`oct`: HS* takes only the
-- secret of secret_env); nil, err for a key that does not build.
local function jwk_entry(i, jwk)
    if type(jwk) ~= "table" then return nil, ("key %d is not a JSON object"):format(i) end
    if (jwk.use ~= nil and jwk.use ~= "sig") or (jwk.kty ~= "RSA" and jwk.kty ~= "EC" and jwk.kty ~= "OKP") then
        return false
    end
    local kid = jwk.kid
    if kid ~= nil and type(kid) ~= "string" then return nil, ("key %d: kid must be a string"):format(i) end
    local key, err = crypto.jwk_key(jwk)
    if not key then return nil, ("key %d%s: %s"):format(i, kid and (" (kid '" .. kid .. "')") or "", err) end
    local kty, crv = key:info()
    return { key = key, kty = kty, crv = crv, kid = kid, alg = type(jwk.alg) == "string" and jwk.alg or nil }
end

-- A JWKS document as { all = {entry...}, by_kid = { kid = {entry...} } }. With
-- `lenient` (a fetched set) a key that does not build is skipped and named in the
-- second result; otherwise (jwks_file) it is an error.
local function parse_jwks(text, lenient)
    local doc = json.decode(text)
    if type(doc) ~= "table" or type(doc.keys) ~= "table" then
        return nil, "not a JWKS (a JSON object with a \"keys\" list)"
    end
    local set, skipped = { all = {}, by_kid = {} }, {}
    for i, jwk in ipairs(doc.keys) do
        local e, err = jwk_entry(i, jwk)
        if e then
            set.all[#set.all + 1] = e
            if e.kid then
                local l = set.by_kid[e.kid] or {}
                l[#l + 1] = e
                set.by_kid[e.kid] = l
            end
        elseif e == nil then
            if not lenient then return nil, err end
            skipped[#skipped + 1] = err
        end
    end
    return set, skipped
end

local function fits(e, alg)
    local need = ALGS[alg]
    return e.kty == need.kty and (not need.crv or need.crv[e.crv] == true)
        and (e.alg == nil or e.alg == alg)
end

-- The first configured alg no key of the set can verify, if any.
local function unfit_alg(set, algorithms)
    for _, alg in ipairs(algorithms) do
        if not ALGS[alg].secret then
            local any = false
            for _, e in ipairs(set.all) do any = any or fits(e, alg) end
            if not any then return alg end
        end
    end
    return nil
end

-- ---------------------------------------------------------------- per-config state

-- Built once per config generation and worker by prepare (check builds one too, to
-- refuse a config whose keys do not load, and drops it).

local function is_token(s) return not s:find("[^!#$%%&'*+%-.^_`|~%w]") end

local function build_state(conf)
    local st = { allowed = {}, epoch = 0, n = 0, old = {},
                 half = ceil(conf.cache_size / 2), authorization = conf.header:lower() == "authorization" }
    st.cur = tnew(0, st.half)
    local secret_len, asym
    for _, alg in ipairs(conf.algorithms) do
        st.allowed[alg] = true
        local need = ALGS[alg].secret
        if need then
            if need > (secret_len or 0) then secret_len = need end
        else
            asym = asym or alg
        end
    end
    if not is_token(conf.header) then return nil, ("header: '%s' is not a header name"):format(conf.header) end
    if conf.issuer and conf.issuers then return nil, "issuer and issuers are exclusive: use one" end
    if conf.issuer or conf.issuers then
        st.issuers = {}
        for _, iss in ipairs(conf.issuers or { conf.issuer }) do st.issuers[iss] = true end
    end

    local env = conf.secret_env
    if secret_len and not env then
        return nil, "HS algorithms need secret_env (the name of an environment variable holding the secret)"
    elseif env and not secret_len then
        return nil, "secret_env is set but algorithms has no HS256, HS384 or HS512"
    elseif env then
        local secret = getenv(env)
        if not secret then return nil, ("environment variable '%s' (secret_env) is not set"):format(env) end
        if #secret < secret_len then
            return nil, ("the secret in '%s' has %d bytes: HS%d needs at least %d (RFC 7518 3.2)")
                :format(env, #secret, secret_len * 8, secret_len)
        end
        st.secret = secret
    end

    local file, uri = conf.jwks_file, conf.jwks_uri
    if asym and not file and not uri then
        return nil, asym .. " needs jwks_file or jwks_uri"
    elseif file and uri then
        return nil, "jwks_file and jwks_uri are exclusive: use one"
    elseif (file or uri) and not asym then
        return nil, (file and "jwks_file" or "jwks_uri") .. " is set but algorithms has only HS algorithms"
            .. " (they are verified with secret_env only)"
    elseif uri then
        if not uri:find("^https?://[^/]") then
            return nil, "jwks_uri: expected an http:// or https:// URL"
        elseif conf.jwks_ca and not uri:find("^https://") then
            return nil, "jwks_ca is set but jwks_uri is not https://"
        elseif conf.jwks_ca then
            conf.jwks_ca = sluice.files.path(conf.jwks_ca) -- a replaced CA bundle: a new generation
        end
    elseif file then
        -- through sluice.files: the key set is part of the generation, so a reload (or the
        -- file watch) after a rotation builds a new one
        local text, err = sluice.files.read(file)
        if not text then return nil, ("cannot read jwks_file: %s"):format(err) end
        local set, perr = parse_jwks(text)
        if not set then return nil, ("jwks_file '%s': %s"):format(file, perr) end
        local alg = unfit_alg(set, conf.algorithms)
        if alg then return nil, ("jwks_file '%s' has no key for %s"):format(file, alg) end
        st.keys = set
    end
    return st
end

function M.check(conf)
    local st, err = build_state(conf)
    if not st then return nil, err end
    return true
end

function M.prepare(conf)
    return assert(build_state(conf))
end

-- ---------------------------------------------------------------- token cache

-- Two generations of at most `half` entries each: a hit in the older one is copied
-- into the newer; when the newer is full it becomes the older and the oldest is
-- dropped whole. Bounded (cache_size entries) and LRU-ish, with no per-hit
-- bookkeeping. An entry is { valid_until, consumer, claims }.
local function cache_put(st, raw, e)
    if st.n >= st.half then
        st.old, st.cur, st.n = st.cur, tnew(0, st.half), 0
    end
    st.cur[raw] = e
    st.n = st.n + 1
end

-- A changed key set may have dropped a key: tokens verified by it must be checked again.
local function cache_flush(st)
    st.old, st.cur, st.n = {}, tnew(0, st.half), 0
    st.epoch = st.epoch + 1
end

-- ---------------------------------------------------------------- jwks_uri

-- One fetch per worker at a time: a request arriving during a fetch waits for it.
local function fetch_jwks(conf, st)
    if st.fetching then
        local deadline = now() + conf.jwks_timeout + 1
        while st.fetching and now() < deadline do sluice.sleep(0.005) end
        return
    end
    st.fetching, st.fetched_at = true, now()
    -- https is verified (sluice.http's ssl_verify) against jwks_ca, else the system's store
    local ok, res, err = pcall(sluice.http.request, { url = conf.jwks_uri, timeout = conf.jwks_timeout,
        max_body = JWKS_MAX_BODY, headers = { Accept = "application/json" }, ca = conf.jwks_ca })
    st.fetching = false
    if not ok then error(res, 0) end
    if not res then return log.warn("jwks_uri", conf.jwks_uri, "fetch failed:", err) end
    if res.status ~= 200 then return log.warn("jwks_uri", conf.jwks_uri, "answered", res.status) end
    if res.body == st.jwks_body then
        st.keys_at = st.fetched_at
        return
    end
    local set, skipped = parse_jwks(res.body, true)
    if not set then return log.warn("jwks_uri", conf.jwks_uri, skipped) end
    for _, why in ipairs(skipped) do log.warn("jwks_uri", conf.jwks_uri, "key skipped:", why) end
    st.keys, st.jwks_body, st.keys_at = set, res.body, st.fetched_at
    cache_flush(st)
end

-- May the key set be fetched (or a fetch in flight be waited for) now? The first
-- time, yes; after that once per jwks_refresh, or FIRST_RETRY while no fetch has
-- brought a key set yet.
local function may_fetch(conf, st)
    if not conf.jwks_uri then return false end
    local last = st.fetched_at
    if st.fetching or not last then return true end
    local every = conf.jwks_refresh
    if not st.keys and FIRST_RETRY < every then every = FIRST_RETRY end
    return now() - last >= every
end

-- Is the key set older than jwks_max_age (a key withdrawn at the identity provider must
-- stop verifying without a reload)? Then one request refetches it; the others go on with
-- the keys there are meanwhile, and a failed refetch is retried after jwks_refresh.
local function keys_stale(conf, st, t)
    if not (st.keys and conf.jwks_uri) or st.fetching then return false end
    return t - st.keys_at >= conf.jwks_max_age and t - st.fetched_at >= min(conf.jwks_refresh, conf.jwks_max_age)
end

-- ---------------------------------------------------------------- verification

-- Verifies sig over input with the set's keys that fit alg (by kid when the token
-- names one). Returns true, false, or nil when no key fits (an unknown kid).
local function verify_with_set(set, alg, kid, input, sig)
    local list = kid and set.by_kid[kid] or (not kid and set.all)
    if not list then return nil end
    local any = false
    for i = 1, #list do
        local e = list[i]
        if fits(e, alg) then
            any = true
            if verify(alg, e.key, input, sig) then return true end
        end
    end
    if not any then return nil end
    return false
end

local function has_aud(aud, want)
    if aud == want then return true end
    if type(aud) ~= "table" then return false end
    for _, a in ipairs(aud) do if a == want then return true end end
    return false
end

local function consumer_of(v)
    if type(v) == "number" and v == floor(v) and v >= 0 and v < 2 ^ 53 then v = ("%d"):format(v) end
    if type(v) ~= "string" or #v < 1 or #v > 64 or v:find("[^!-~]") then return nil end
    return v
end

-- The full check of one header value. Returns a cache entry { valid_until, consumer,
-- claims }, or nil, detail (for the 401), or nil, detail, 503 when the key set is
-- unavailable, or nil, detail, "missing" when Authorization holds no Bearer token.
local function check_token(conf, st, raw)
    local token = raw
    local scheme, rest = raw:match("^(%S+)[ \t]+(%S+)$")
    if scheme and scheme:lower() == "bearer" then
        token = rest
    elseif st.authorization then
        -- another scheme (Basic ...), or no token after it: no bearer credentials at all, so
        -- the challenge carries no error code (RFC 6750 3.1)
        return nil, "not a Bearer token", "missing"
    end
    local h64, p64, s64 = token:match("^([%w_-]+)%.([%w_-]+)%.([%w_-]*)$")
    if not h64 then return nil, "malformed token (expected three base64url parts)" end
    local htext = b64_decode(h64)
    local hdr = htext and json.decode(htext)
    if type(hdr) ~= "table" then return nil, "malformed token header" end
    local alg = hdr.alg
    if type(alg) ~= "string" then return nil, "token header has no alg" end
    if not st.allowed[alg] then
        if alg == "none" then return nil, "unsecured tokens (alg none) are refused" end
        return nil, ("alg '%s' is not allowed"):format(alg:sub(1, 16))
    end
    if hdr.crit ~= nil then return nil, "token header has crit: no extension is understood" end
    local kid = hdr.kid
    if kid ~= nil and type(kid) ~= "string" then return nil, "token header kid is not a string" end
    local sig = b64_decode(s64)
    if not sig then return nil, "malformed token signature" end

    local input, ok = h64 .. "." .. p64, nil
    if ALGS[alg].secret then
        ok = verify(alg, st.secret, input, sig)
    else
        if not st.keys and may_fetch(conf, st) then fetch_jwks(conf, st) end
        if not st.keys then return nil, "key set unavailable", 503 end
        ok = verify_with_set(st.keys, alg, kid, input, sig)
        if ok == nil and may_fetch(conf, st) then
            fetch_jwks(conf, st)
            ok = verify_with_set(st.keys, alg, kid, input, sig)
        end
        if ok == nil then
            return nil, kid and ("no %s key with kid '%s'"):format(alg, kid:sub(1, 64)) or ("no %s key"):format(alg)
        end
    end
    if not ok then return nil, "signature does not verify" end

    local ptext = b64_decode(p64)
    local claims = ptext and json.decode(ptext)
    if type(claims) ~= "table" then return nil, "malformed token payload" end
    local t, leeway = now(), conf.leeway
    local exp, nbf = claims.exp, claims.nbf
    if exp ~= nil and type(exp) ~= "number" then return nil, "exp is not a number" end
    if nbf ~= nil and type(nbf) ~= "number" then return nil, "nbf is not a number" end
    if exp and t > exp + leeway then return nil, "token expired" end
    if nbf and t + leeway < nbf then return nil, "token not valid yet" end
    if st.issuers and not (type(claims.iss) == "string" and st.issuers[claims.iss]) then
        return nil, "issuer not accepted"
    end
    if conf.audience and not has_aud(claims.aud, conf.audience) then
        return nil, "audience not accepted"
    end
    local consumer = consumer_of(claims[conf.consumer_claim])
    if not consumer then
        return nil, ("claim '%s' is not a consumer name (1-64 visible ASCII characters)"):format(conf.consumer_claim)
    end
    return { exp and exp + leeway or 1 / 0, consumer, claims }
end

-- ---------------------------------------------------------------- access

local MISSING = { ["WWW-Authenticate"] = "Bearer" }
local INVALID = { ["WWW-Authenticate"] = 'Bearer error="invalid_token"' }

local function refuse(detail, status)
    log.debug("token refused:", detail)
    if status == "missing" then
        return response.exit(401, { error = "unauthorized", error_description = detail }, MISSING)
    end
    if status then return response.exit(status, { error = detail }) end
    return response.exit(401, { error = "invalid_token", error_description = detail }, INVALID)
end

function M.access(conf, ctx, st)
    local raw = get_header(conf.header)
    if not raw then
        return response.exit(401, { error = "unauthorized", error_description = "no token" }, MISSING)
    end
    local t = now() -- one clock read for the key set's age and a cached token's expiry
    if keys_stale(conf, st, t) then
        fetch_jwks(conf, st) -- a changed set empties the cache
        t = now()
    end
    local e = st.cur[raw]
    if not e then
        e = st.old[raw]
        if e then cache_put(st, raw, e) end
    end
    if e then
        -- a cached token was fully verified: only its time can run out
        if t > e[1] then return refuse("token expired") end
    else
        local epoch, detail, status = st.epoch, nil, nil
        e, detail, status = check_token(conf, st, raw)
        if not e then return refuse(detail, status) end
        -- a token checked while the key set changed is not cached: its key may be gone
        if st.half > 0 and epoch == st.epoch then cache_put(st, raw, e) end
    end
    ctx.consumer, ctx.jwt_claims = e[2], e[3]
    if conf.hide_credentials then
        request.clear_header(conf.header)
    else
        -- only the first field was verified: a second one (a forged token after the good
        -- one) must not reach an upstream that reads the last, or all of them
        request.set_header(conf.header, raw)
    end
end

return M
