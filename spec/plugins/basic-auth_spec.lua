-- basic-auth: HTTP Basic credentials against consumers' stored hashes. The hashes are made
-- here by independent implementations (spec/fixtures/passwords.lua): `openssl passwd` for
-- crypt(3) SHA-512/SHA-256 and Python's hashlib for PBKDF2 in passlib's format.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local crypto = require("sluice.crypto")

local passwords = dofile((test.SOURCE_DIR:sub(1, 1) == "/" and test.SOURCE_DIR
    or (os.getenv("PWD") .. "/" .. test.SOURCE_DIR)) .. "/spec/fixtures/passwords.lua")

-- Standard base64, as a client builds the header.
local function b64(s)
    local u = crypto.base64url_encode(s):gsub("[-_]", { ["-"] = "+", ["_"] = "/" })
    return u .. ("="):rep((4 - #u % 4) % 4)
end
local function basic(user, password) return "Basic " .. b64(user .. ":" .. password) end

describe("basic-auth", function()
    local up, gw
    local CHALLENGE = 'Basic realm="sluice", charset="UTF-8"'

    setup(function()
        up = test.upstream()
        local function user(name, hash)
            return { name = name, credentials = { ["basic-auth"] = { username = name, password_hash = hash } } }
        end
        local function route(name, config)
            return { name = name, match = { paths = { "/" .. name } }, upstream = "u",
                     plugins = { { name = "basic-auth", config = config } } }
        end
        gw = assert(test.start({
            consumers = {
                user("alice", passwords.crypt("-6", "wonderland")),
                user("carl", passwords.crypt("-5", "c4rl pass")),
                user("bob", passwords.pbkdf2("sha256", "builder", 29000)),
                user("frank", passwords.crypt("-6", "pa:ss")),
                user("uma", passwords.crypt("-6", "pässwörd")),
                { name = "erin", credentials = { ["key-auth"] = { key = "erin" } } },
            },
            upstreams = { { name = "u", targets = { { address = up:address() } } } },
            routes = {
                route("ba"),
                route("keep", { hide_credentials = false }),
                route("staff", { realm = "Staff only" }),
            },
        }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    local function get(path, authorization)
        return assert(gw:request({ path = path, headers = { Authorization = authorization } }))
    end

    local function refused(res, msg, challenge)
        assert.equal(401, res.status)
        assert.equal(challenge or CHALLENGE, res.headers["www-authenticate"])
        assert.same({ error = msg }, res.json()) -- the plugin's answer, not the echo upstream's
    end

    it("accepts a crypt(3) SHA-512 hash, names the consumer and hides the credentials", function()
        local res = get("/ba/x", basic("alice", "wonderland"))
        assert.equal(200, res.status)
        local seen = res.json()
        assert.equal("/ba/x", seen.path)
        assert.equal("alice", seen.headers["x-consumer"])
        assert.is_nil(seen.headers.authorization)
    end)

    it("accepts crypt(3) SHA-256 and PBKDF2-SHA256 hashes", function()
        assert.equal("carl", get("/ba", basic("carl", "c4rl pass")).json().headers["x-consumer"])
        assert.equal("bob", get("/ba", basic("bob", "builder")).json().headers["x-consumer"])
    end)

    it("splits at the first colon and takes UTF-8 passwords", function()
        assert.equal("frank", get("/ba", basic("frank", "pa:ss")).json().headers["x-consumer"])
        assert.equal("uma", get("/ba", basic("uma", "pässwörd")).json().headers["x-consumer"])
    end)

    it("takes the scheme in any case", function()
        local creds = b64("alice:wonderland")
        assert.equal(200, get("/ba", "basic " .. creds).status)
        assert.equal(200, get("/ba", "BASIC  " .. creds).status)
    end)

    it("refuses a wrong password, the same way as an unknown user", function()
        refused(get("/ba", basic("alice", "Wonderland")), "invalid credentials")
        refused(get("/ba", basic("alice", "wonderland ")), "invalid credentials")
        refused(get("/ba", basic("alice", "")), "invalid credentials")
        refused(get("/ba", basic("bob", "wonderland")), "invalid credentials")
        refused(get("/ba", basic("mallory", "wonderland")), "invalid credentials")
        refused(get("/ba", basic("erin", "erin")), "invalid credentials") -- key-auth only
        refused(get("/ba", basic("ALICE", "wonderland")), "invalid credentials")
    end)

    it("does not let a cached success open the door to another password", function()
        assert.equal(200, get("/ba", basic("alice", "wonderland")).status)
        assert.equal(200, get("/ba", basic("alice", "wonderland")).status) -- from the cache
        refused(get("/ba", basic("alice", "wonderland2")), "invalid credentials")
        refused(get("/ba", basic("alice", "wonderlan")), "invalid credentials")
    end)

    it("refuses a request without credentials, and never asks the upstream", function()
        refused(get("/ba"), "missing credentials")
    end)

    it("refuses malformed headers: other scheme, not base64, no colon, empty", function()
        local malformed = {
            "Bearer " .. b64("alice:wonderland"),
            "Basic",
            "Basic ",
            "Basic !!!!",
            "Basic " .. b64("alice:wonderland") .. "=",                -- padding that does not fit
            "Basic " .. b64("alice"),                                   -- no colon
            "Basic " .. b64("alice:wonderland") .. " extra",
            "Basicx " .. b64("alice:wonderland"),
        }
        for _, h in ipairs(malformed) do
            refused(get("/ba", h), "malformed Authorization header")
        end
    end)

    it("names the configured realm in the challenge", function()
        refused(get("/staff"), "missing credentials", 'Basic realm="Staff only", charset="UTF-8"')
        assert.equal(200, get("/staff", basic("alice", "wonderland")).status)
    end)

    it("passes the credentials on with hide_credentials: false", function()
        local seen = get("/keep", basic("alice", "wonderland")).json()
        assert.equal("alice", seen.headers["x-consumer"])
        assert.equal(basic("alice", "wonderland"), seen.headers.authorization)
    end)

    it("with hide_credentials: false passes on only the Authorization it checked, not a later one", function()
        local res = assert(gw:request({ raw = "GET /keep HTTP/1.1\r\nHost: x\r\nAuthorization: "
            .. basic("alice", "wonderland") .. "\r\nAuthorization: " .. basic("admin", "forged")
            .. "\r\nConnection: close\r\n\r\n" }))
        assert.equal(200, res.status)
        assert.equal(basic("alice", "wonderland"), res.json().headers.authorization)
    end)

    it("refuses a config whose consumer has a hash in a format it does not take", function()
        local g, err = test.start({
            consumers = { { name = "dave", credentials = { ["basic-auth"] = {
                username = "dave", password_hash = "$1$abc$iCQ2D3nhptRYi27fDYv2s1" } } } }, -- MD5-crypt
            routes = { { name = "r", plugins = { { name = "basic-auth" } } } },
        })
        assert.is_nil(g)
        assert.matches("password_hash: unsupported password hash", err, 1, true)
    end)

    it("rejects a realm that cannot be a quoted string", function()
        local function err_of(config)
            local g, err = test.start({ routes = { { name = "r", plugins = { { name = "basic-auth", config = config } } } } })
            assert.is_nil(g)
            return err
        end
        assert.matches("route 'r', plugin 'basic-auth': realm: quotes, backslashes and control characters",
                       err_of({ realm = 'say "hi"' }), 1, true)
        assert.matches("realm: quotes", err_of({ realm = "a\\b" }), 1, true)
        assert.matches("unknown key 'header'", err_of({ header = "x" }), 1, true)
    end)
end)
