-- mtls-auth: the client is the consumer its TLS client certificate names. The listener's
-- tls.client_auth asks for and verifies the certificate in the handshake (core/net/tls.c,
-- against its CA and CRL); this plugin maps a verified certificate to a consumer by its
-- subject or a subjectAltName (`consumers: [{ name, credentials: { mtls-auth: { subject:
-- "CN=alice,O=Example" } } }]`, or `san:`), sets ctx.consumer like the other auth plugins
-- (so acl runs after it) and forwards the subject upstream in X-Client-Cert-Subject,
-- replacing whatever the client sent there. No certificate, an unverified one (mode:
-- optional lets both through the handshake) or one no consumer names: 401. With mode:
-- required, such clients never finish the handshake.
local sluice = require("sluice")

local request, response, consumers, tls = sluice.request, sluice.response, sluice.consumers,
    sluice.tls
local ipairs = ipairs

local DEFAULT_HEADER = "X-Client-Cert-Subject"

local M = {
    name = "mtls-auth",
    version = "1.0",
    auth = true, -- sets ctx.consumer: an after_auth plugin (acl) must come later
    schema = {
        -- which certificate fields name the consumer, tried in this order
        consumer_by = { type = "array", items = { type = "enum", one_of = { "subject", "san" } },
                        min = 1, default = { "subject", "san" } },
        -- any verified certificate passes, no consumer is set (a mutual-TLS gate only)
        skip_consumer_lookup = { type = "boolean", default = false },
        -- the header the subject goes upstream in; "": none (a client's copy is still removed)
        header = { type = "string", default = DEFAULT_HEADER },
    },
}

function M.check(conf)
    if conf.header ~= "" and not conf.header:find("^[%w!#$%%&'*+.^_`|~-]+$") then
        return nil, ("header: '%s' is not a header name"):format(conf.header)
    end
    return true
end

local NO_CERT = { error = "a client certificate is required" }
local UNTRUSTED = { error = "the client certificate is not trusted" }
local UNKNOWN = { error = "the client certificate names no consumer" }
local SAN_KINDS = { "dns", "uri", "email" }

local function by_san(sans)
    for _, kind in ipairs(SAN_KINDS) do
        for _, v in ipairs(sans[kind]) do
            local name = consumers.find("mtls-auth", "san", v)
            if name then return name end
        end
    end
end

function M.access(conf, ctx)
    local cert = tls.get_client_cert()
    if not cert then return response.exit(401, NO_CERT) end
    if not cert.verified then return response.exit(401, UNTRUSTED) end
    if not conf.skip_consumer_lookup then
        local name
        for _, by in ipairs(conf.consumer_by) do
            if by == "subject" then
                name = consumers.find("mtls-auth", "subject", cert.subject)
            else
                name = by_san(cert.sans)
            end
            if name then break end
        end
        if not name then return response.exit(401, UNKNOWN) end
        ctx.consumer = name
    end
    if conf.header ~= "" then
        request.set_header(conf.header, cert.subject)
    else
        request.clear_header(DEFAULT_HEADER)
    end
end

return M
