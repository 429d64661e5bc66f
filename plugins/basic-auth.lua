-- basic-auth: HTTP Basic credentials (RFC 7617) checked against a consumer's stored
-- password hash (crypt(3) or PBKDF2, see sluice.crypto.password_verify).
--
-- A stored hash costs milliseconds to check, on this worker's thread, holding up its
-- other requests (ctest unit.crypto_test prints the costs: "$6$" with the default 5000
-- rounds 1.1-1.4 ms, yescrypt's defaults 60-160 ms). Every request paying that would cap
-- a worker below 1000 requests a second, so each worker remembers the Authorization
-- values it verified, keyed by HMAC-SHA256 under a random per-worker key (neither the
-- password nor a fast unkeyed hash of it is kept), for as long as its VM lives: one
-- config generation. A reload that changes a password starts with an empty cache.
-- Failures are not cached: a wrong password costs a full hash every time (put rate-limit
-- in front against guessing).
local sluice = require("sluice")
local clear = require("table.clear")

local request, response, consumers, crypto = sluice.request, sluice.response,
    sluice.consumers, sluice.crypto
local tostring = tostring

local M = {
    name = "basic-auth",
    version = "1.0",
    auth = true, -- sets ctx.consumer: an after_auth plugin (acl) must come later
    schema = {
        realm = { type = "string", default = "sluice" },
        hide_credentials = { type = "boolean", default = true },
    },
}

function M.check(conf)
    if conf.realm:find('[%c"\\]') then
        return nil, "realm: quotes, backslashes and control characters are not allowed"
    end
    return true
end

local CACHE_MAX = 4096 -- entries per worker; when full, the cache starts over
local cache, cached = {}, 0
local cache_key
do
    local f = assert(io.open("/dev/urandom", "rb"))
    cache_key = f:read(32)
    f:close()
    assert(cache_key and #cache_key == 32, "basic-auth: short read from /dev/urandom")
end

-- The challenge's headers, built once per config use (generation and worker).
function M.prepare(conf)
    return { ["WWW-Authenticate"] = ('Basic realm="%s", charset="UTF-8"'):format(conf.realm) }
end

local function deny(challenge, msg)
    return response.exit(401, { error = msg }, challenge)
end

-- username, password from "Basic <base64(user:pass)>"; nil when malformed.
local function credentials(h)
    local scheme, b64 = h:match("^(%a+) +([%w+/]+=*) *$")
    if not scheme or scheme:lower() ~= "basic" then return nil end
    local raw = crypto.base64_decode(b64)
    if not raw then return nil end
    return raw:match("^([^:]*):(.*)$")
end

-- The consumer these credentials belong to, or nil. Logs a hash the core cannot read.
local function verify(h)
    local user, password = credentials(h)
    if not user then return nil, "malformed Authorization header" end
    local name = consumers.find("basic-auth", "username", user)
    local cred = name and consumers.credential(name, "basic-auth")
    if not cred then return nil, "invalid credentials" end
    local ok, err = crypto.password_verify(password, tostring(cred.password_hash))
    if ok == nil then
        sluice.log.err(("basic-auth: consumer '%s': password_hash: %s"):format(name, err))
    end
    if not ok then return nil, "invalid credentials" end
    return name
end

function M.access(conf, ctx, challenge)
    local h = request.get_header("Authorization")
    if not h then return deny(challenge, "missing credentials") end
    local mac = crypto.hmac("sha256", cache_key, h)
    local name = cache[mac]
    if not name then
        local err
        name, err = verify(h)
        if not name then return deny(challenge, err) end
        if cached >= CACHE_MAX then
            clear(cache)
            cached = 0
        end
        cache[mac] = name
        cached = cached + 1
    end
    if conf.hide_credentials then
        request.clear_header("Authorization")
    else
        -- only the first field was checked: a later one must not reach the upstream unchecked
        request.set_header("Authorization", h)
    end
    ctx.consumer = name
end

return M
