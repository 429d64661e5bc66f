-- sluice.tls.get_client_cert through the real core: a listener with tls.client_auth
-- (mode: optional) and curl presenting conf/test.crt (a self-signed CA certificate, so it
-- verifies against itself) or nothing. The CA/CRL/expiry cases are it.test_mtls's.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")
local cjson = require("cjson")

local ROOT = test.SOURCE_DIR
local CERT, KEY = ROOT .. "/conf/test.crt", ROOT .. "/conf/test.key"

-- Runs a command without the sanitizer runtimes a sanitizer build preloads into busted
-- (curl with libasan preloaded hangs).
local function sh(cmd)
    local f = assert(io.popen("env -u LD_PRELOAD " .. cmd))
    local out = f:read("*a")
    f:close()
    return out
end

describe("sluice.tls.get_client_cert", function()
    local gw

    setup(function()
        gw = assert(test.start({
            plugin_paths = { "../fixtures/plugins" },
            listeners = {
                { name = "web", listen = "127.0.0.1:0" },
                { name = "mtls", listen = "127.0.0.1:0",
                  tls = { certificates = { { cert = CERT, key = KEY } },
                          client_auth = { ca = CERT, mode = "optional" } } },
            },
            routes = { { name = "r", match = { paths = { "/" } }, plugins = { { name = "client-cert" } } } },
        }))
    end)
    teardown(function() gw:stop() end)

    local function cert_over_tls(with_cert)
        local args = with_cert and ("--cert %s --key %s"):format(CERT, KEY) or ""
        local out = sh(("curl -sk --max-time 5 %s https://%s/"):format(args, gw:address("mtls")))
        return cjson.decode(out).cert
    end

    it("gives the certificate's fields, as openssl prints them", function()
        local c = cert_over_tls(true)
        assert.equal("CN=example.com", c.subject)
        assert.equal("CN=example.com", c.issuer)
        assert.is_true(c.verified)
        assert.is_nil(c.verify_error)
        local serial = sh(("openssl x509 -in %s -noout -serial"):format(CERT)):match("=(%x+)")
        assert.equal(serial, c.serial)
        local fp = sh(("openssl x509 -in %s -noout -fingerprint -sha256"):format(CERT)):match("=([%x:]+)")
        assert.equal(fp:gsub(":", ""):lower(), c.fingerprint)
        assert.same({ "example.com", "*.example.com", "localhost" }, c.sans.dns)
        assert.is_true(c.not_before < os.time() and os.time() < c.not_after)
    end)

    it("is nil without a client certificate, and on a plain listener", function()
        assert.is_false(cert_over_tls(false))
        local res = assert(gw:request({ path = "/" }))
        assert.is_false(res.json().cert)
    end)

    it("raises outside a phase", function()
        local tls = require("sluice.tls")
        assert.has_error(function() tls.get_client_cert() end,
                         "no request is being served here (sluice API used outside a phase)")
    end)
end)
