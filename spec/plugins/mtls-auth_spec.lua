-- mtls-auth: a verified client certificate names a consumer by subject or SAN; the
-- forwarded subject header; the 401s; the config checks. The TLS handshake itself (CA,
-- CRL, modes, HTTP/2) is ctest/integration/test_mtls.py's: the test client here speaks
-- plain HTTP, so the fake-cert fixture stands in for sluice.tls.get_client_cert.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local cjson = require("cjson")

local FIXTURES = "../fixtures/plugins"
local CERT = "../../conf/test.crt"
local KEY = "../../conf/test.key"

-- a plain listener for the requests, and one with client_auth (mtls-auth needs one)
local LISTENERS = {
    { name = "web", listen = "127.0.0.1:0" },
    { name = "mtls", listen = "127.0.0.1:0",
      tls = { certificates = { { cert = CERT, key = KEY } }, client_auth = { ca = CERT } } },
}

local CONSUMERS = {
    { name = "alice", groups = { "staff" },
      credentials = { ["mtls-auth"] = { subject = "CN=alice,O=Example" } } },
    { name = "bob", credentials = { ["mtls-auth"] = { san = "spiffe://example.org/bob" } } },
    { name = "both", credentials = { ["mtls-auth"] = { subject = "CN=both", san = "both.example.org" } } },
}

local function route(name, plugins)
    local list = { { name = "fake-cert" } }
    for _, p in ipairs(plugins) do list[#list + 1] = p end
    return { name = name, match = { paths = { "/" .. name } }, upstream = "u", plugins = list }
end

local function conf(routes, extra)
    local c = { plugin_paths = { FIXTURES }, listeners = LISTENERS, consumers = CONSUMERS,
                upstreams = { { name = "u", targets = { { address = "127.0.0.1:9" } } } }, routes = routes }
    for k, v in pairs(extra or {}) do c[k] = v end
    return c
end

describe("mtls-auth", function()
    local up, gw

    setup(function()
        up = test.upstream()
        local c = conf({
            route("auth", { { name = "mtls-auth" } }),
            route("acl", { { name = "mtls-auth" }, { name = "acl", config = { allow = { "staff" } } } }),
            route("san-first", { { name = "mtls-auth", config = { consumer_by = { "san", "subject" } } } }),
            route("subject-only", { { name = "mtls-auth", config = { consumer_by = { "subject" } } } }),
            route("gate", { { name = "mtls-auth", config = { skip_consumer_lookup = true } } }),
            route("own-header", { { name = "mtls-auth", config = { header = "X-Cert-DN" } } }),
            route("no-header", { { name = "mtls-auth", config = { header = "" } } }),
        })
        c.upstreams[1].targets[1].address = up:address()
        gw = assert(test.start(c))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    local function req(path, cert, headers)
        headers = headers or {}
        if cert then headers["X-Fake-Cert"] = cjson.encode(cert) end
        return assert(gw:request({ path = path, headers = headers }))
    end

    local ALICE = { subject = "CN=alice,O=Example", verified = true }
    local BOB = { subject = "CN=bob", verified = true, sans = { uri = { "spiffe://example.org/bob" } } }

    it("a certificate whose subject a consumer names: the consumer, and its subject upstream", function()
        local res = req("/auth", ALICE, { ["X-Client-Cert-Subject"] = "CN=root", ["X-Consumer"] = "root" })
        assert.equal(200, res.status)
        local h = res.json().headers
        assert.equal("CN=alice,O=Example", h["x-client-cert-subject"])
        assert.equal("alice", h["x-consumer"])
    end)

    it("a SAN a consumer names (any of DNS, URI, email)", function()
        local res = req("/auth", BOB)
        assert.equal(200, res.status)
        assert.equal("bob", res.json().headers["x-consumer"])
        res = req("/auth", { subject = "CN=x", verified = true, sans = { dns = { "both.example.org" } } })
        assert.equal("both", res.json().headers["x-consumer"])
    end)

    it("consumer_by sets which fields are tried, in order", function()
        -- subject says alice, a SAN says both: the first field listed wins
        local cert = { subject = "CN=alice,O=Example", verified = true, sans = { email = { "both.example.org" } } }
        assert.equal("alice", req("/auth", cert).json().headers["x-consumer"])
        assert.equal("both", req("/san-first", cert).json().headers["x-consumer"])
        assert.equal(401, req("/subject-only", BOB).status) -- bob is known by SAN only
    end)

    it("no certificate, an unverified one, an unknown one: 401 and the upstream is not asked", function()
        local res = req("/auth")
        assert.equal(401, res.status)
        assert.same({ error = "a client certificate is required" }, res.json())
        res = req("/auth", { subject = "CN=alice,O=Example", verified = false, verify_error = "certificate revoked" })
        assert.equal(401, res.status)
        assert.same({ error = "the client certificate is not trusted" }, res.json())
        res = req("/auth", { subject = "CN=mallory", verified = true })
        assert.equal(401, res.status)
        assert.same({ error = "the client certificate names no consumer" }, res.json())
        -- the subject is compared exactly: RFC 2253 order and spacing
        assert.equal(401, req("/auth", { subject = "O=Example,CN=alice", verified = true }).status)
        -- a forged header alone does nothing
        assert.equal(401, req("/auth", nil, { ["X-Client-Cert-Subject"] = "CN=alice,O=Example" }).status)
    end)

    it("sets the consumer acl reads", function()
        assert.equal(200, req("/acl", ALICE).status)
        assert.equal(403, req("/acl", BOB).status) -- bob has no staff group
    end)

    it("skip_consumer_lookup: any verified certificate passes, no consumer", function()
        local res = req("/gate", { subject = "CN=anyone", verified = true })
        assert.equal(200, res.status)
        assert.is_nil(res.json().headers["x-consumer"])
        assert.equal("CN=anyone", res.json().headers["x-client-cert-subject"])
        assert.equal(401, req("/gate", { subject = "CN=anyone", verified = false }).status)
    end)

    it("header: another name, or none (the client's copy still removed)", function()
        local h = req("/own-header", ALICE, { ["X-Cert-DN"] = "forged" }).json().headers
        assert.equal("CN=alice,O=Example", h["x-cert-dn"])
        h = req("/no-header", ALICE, { ["X-Client-Cert-Subject"] = "forged" }).json().headers
        assert.is_nil(h["x-client-cert-subject"])
        assert.equal("alice", h["x-consumer"])
    end)
end)

describe("mtls-auth config", function()
    local function refused(c)
        local ok, err = test.start(c)
        if ok then ok:stop() end
        assert.is_nil(ok)
        return err
    end

    it("needs a listener with tls.client_auth", function()
        local c = conf({ route("a", { { name = "mtls-auth" } }) })
        c.listeners = { LISTENERS[1] }
        assert.matches("route 'a', plugin 'mtls-auth': no http listener has tls.client_auth", refused(c), 1, true)
    end)

    it("refuses a bad header name and an unknown consumer_by", function()
        assert.matches("header: 'a b' is not a header name",
                       refused(conf({ route("a", { { name = "mtls-auth", config = { header = "a b" } } }) })), 1, true)
        assert.matches("consumer_by",
                       refused(conf({ route("a", { { name = "mtls-auth", config = { consumer_by = { "cn" } } } }) })),
                       1, true)
    end)

    it("is an auth plugin: acl before it is refused", function()
        local err = refused(conf({ route("a", { { name = "acl", config = { allow = { "x" } } },
                                                 { name = "mtls-auth" } }) }))
        assert.matches("must come after 'mtls-auth'", err, 1, true)
    end)

    it("checks credentials: subject or san, unique across consumers", function()
        local err = refused(conf({}, { consumers = { { name = "x", credentials = { ["mtls-auth"] = {} } } } }))
        assert.matches("need 'subject' or 'san'", err, 1, true)
        err = refused(conf({}, { consumers = {
            { name = "x", credentials = { ["mtls-auth"] = { san = "a.example" } } },
            { name = "y", credentials = { ["mtls-auth"] = { san = "a.example" } } } } }))
        assert.matches("mtls-auth san 'a.example' is used by another consumer too", err, 1, true)
    end)
end)
