-- key-auth: a consumer's key in a header or the query; what the upstream then sees.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

describe("key-auth", function()
    local up, gw
    local CHALLENGE = 'Key realm="sluice"'

    setup(function()
        up = test.upstream()
        local function route(name, config)
            return { name = name, match = { paths = { "/" .. name } }, upstream = "u",
                     plugins = { { name = "key-auth", config = config } } }
        end
        gw = assert(test.start({
            consumers = {
                { name = "alice", credentials = { ["key-auth"] = { key = "k-alice-123" } } },
                { name = "bob", credentials = { ["key-auth"] = { key = "k bob+456" } } },
                { name = "num", credentials = { ["key-auth"] = { key = 12345 } } },   -- YAML `key: 12345`
                { name = "erin", credentials = { ["basic-auth"] = { username = "erin", password_hash = "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1" } } },
                { name = "jwt-only" },
            },
            upstreams = { { name = "u", targets = { { address = up:address() } } } },
            routes = {
                route("ka"),
                route("keep", { hide_credentials = false }),
                route("hdr", { header = "X-API-Key", query = "" }),
                route("qry", { header = "", query = "key" }),
                route("warn"),
            },
        }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    local function get(path, headers)
        return assert(gw:request({ path = path, headers = headers }))
    end

    local function refused(res, msg)
        assert.equal(401, res.status)
        assert.equal(CHALLENGE, res.headers["www-authenticate"])
        assert.same({ error = msg }, res.json()) -- the plugin's answer, not the echo upstream's
    end

    it("takes a key in the header, names the consumer upstream and hides the key", function()
        local res = get("/ka/x", { apikey = "k-alice-123", ["X-Other"] = "kept" })
        assert.equal(200, res.status)
        local seen = res.json()
        assert.equal("/ka/x", seen.path)
        assert.equal("alice", seen.headers["x-consumer"])
        assert.is_nil(seen.headers.apikey)
        assert.equal("kept", seen.headers["x-other"])
    end)

    it("replaces a client's own X-Consumer with the authenticated name", function()
        local seen = get("/ka", { apikey = "k-alice-123", ["X-Consumer"] = "mallory" }).json()
        assert.equal("alice", seen.headers["x-consumer"])
    end)

    it("takes a key in the query, form-decoded ('+' a space, %XX a byte)", function()
        local res = get("/ka?a=1&apikey=k+bob%2B456&b=2")
        assert.equal(200, res.status)
        assert.equal("bob", res.json().headers["x-consumer"])
        assert.equal("alice", get("/ka?apikey=k%2Dalice-123").json().headers["x-consumer"])
        assert.equal("alice", get("/ka?z&apikeyx=1&apikey=k-alice-123").json().headers["x-consumer"])
    end)

    it("uses the first query value only", function()
        refused(get("/ka?apikey=wrong&apikey=k-alice-123"), "invalid API key")
    end)

    it("removes a query key before the upstream (hide_credentials), keeping the rest", function()
        local a = get("/warn?x=1&apikey=k-alice-123&y=2").json()
        assert.equal("alice", a.headers["x-consumer"])
        assert.equal("x=1&y=2", a.query)
        local b = get("/warn?apikey=k-alice-123").json()
        assert.equal("", b.query)
        local kept = get("/keep?apikey=k-alice-123&x=1").json()
        assert.equal("apikey=k-alice-123&x=1", kept.query) -- hide_credentials: false
    end)

    it("refuses a request without a key, and never asks the upstream", function()
        refused(get("/ka"), "missing API key")
        refused(get("/ka", { apikey = "" }), "missing API key")
        refused(get("/ka?apikey="), "missing API key")
        refused(get("/ka?other=k-alice-123"), "missing API key")
    end)

    it("refuses wrong keys: unknown, a prefix, a longer one, another case", function()
        for _, key in ipairs({ "nope", "k-alice-12", "k-alice-1234", "K-ALICE-123", "k-alice-123\t1" }) do
            refused(get("/ka", { apikey = key }), "invalid API key")
        end
        refused(get("/ka?apikey=k-alice-12"), "invalid API key")
        refused(get("/ka?apikey=k-alice-123%20"), "invalid API key") -- a header's OWS is trimmed by HTTP
    end)

    it("looks only at key-auth credentials (a basic-auth username is no key)", function()
        refused(get("/ka", { apikey = "erin" }), "invalid API key")
    end)

    it("uses the header when both are sent", function()
        refused(get("/ka?apikey=k-alice-123", { apikey = "wrong" }), "invalid API key")
        assert.equal("bob", get("/ka?apikey=wrong", { apikey = "k bob+456" }).json().headers["x-consumer"])
    end)

    it("sends no query key upstream when the header's key was the one checked", function()
        local seen = get("/ka?x=1&apikey=k+bob%2B456&y=2", { apikey = "k-alice-123" }).json()
        assert.equal("alice", seen.headers["x-consumer"])
        assert.is_nil(seen.headers.apikey)
        assert.equal("x=1&y=2", seen.query) -- hide_credentials: neither copy
        seen = get("/keep?x=1&apikey=forged", { apikey = "k-alice-123" }).json()
        assert.equal("k-alice-123", seen.headers.apikey)
        assert.equal("x=1", seen.query) -- hide_credentials: false: the checked key alone
        assert.equal("q=apikey", get("/keep?q=apikey", { apikey = "k-alice-123" }).json().query)
    end)

    it("matches a key written as a YAML number", function()
        assert.equal("num", get("/ka", { apikey = "12345" }).json().headers["x-consumer"])
    end)

    it("passes the key on with hide_credentials: false", function()
        local seen = get("/keep", { apikey = "k-alice-123" }).json()
        assert.equal("alice", seen.headers["x-consumer"])
        assert.equal("k-alice-123", seen.headers.apikey)
    end)

    it("with hide_credentials: false passes on only the key it checked, not a later copy", function()
        local res = assert(gw:request({ raw = "GET /keep HTTP/1.1\r\nHost: x\r\napikey: k-alice-123\r\n"
                                              .. "APIKEY: forged\r\nConnection: close\r\n\r\n" }))
        assert.equal(200, res.status)
        assert.equal("k-alice-123", res.json().headers.apikey)
        local seen = get("/keep?a=1&apikey=k-alice-123&b=2&apikey=forged&apikey=k+bob%2B456&c=3").json()
        assert.equal("alice", seen.headers["x-consumer"])
        assert.equal("a=1&apikey=k-alice-123&b=2&c=3", seen.query)
    end)

    it("reads only the configured header, case-insensitively, and hides it", function()
        local seen = get("/hdr", { ["x-api-key"] = "k-alice-123" }).json()
        assert.equal("alice", seen.headers["x-consumer"])
        assert.is_nil(seen.headers["x-api-key"])
        refused(get("/hdr", { apikey = "k-alice-123" }), "missing API key")
        refused(get("/hdr?apikey=k-alice-123"), "missing API key") -- query: ""
    end)

    it("reads only the configured query parameter with header: ''", function()
        assert.equal("alice", get("/qry?key=k-alice-123").json().headers["x-consumer"])
        refused(get("/qry", { apikey = "k-alice-123" }), "missing API key")
        refused(get("/qry?apikey=k-alice-123"), "missing API key")
    end)

    it("rejects a config with no place for the key, or a header that is no token", function()
        local function err_of(config)
            local g, err = test.start({ routes = { { name = "r", plugins = { { name = "key-auth", config = config } } } } })
            assert.is_nil(g)
            return err
        end
        assert.matches("route 'r', plugin 'key-auth': header and query cannot both be empty",
                       err_of({ header = "", query = "" }), 1, true)
        assert.matches("header: 'api key' is not a header name", err_of({ header = "api key" }), 1, true)
        assert.matches("unknown key 'realm'", err_of({ realm = "x" }), 1, true)
        assert.matches("hide_credentials: expected a boolean", err_of({ hide_credentials = "yes" }), 1, true)
    end)
end)
