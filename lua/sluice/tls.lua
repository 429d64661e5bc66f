-- sluice.tls: the client certificate of the request's connection, on a listener with
-- tls.client_auth (docs/config.md). The core keeps the certificate with the connection and
-- makes its fields into text once (core/net/tls.c); each call builds a new table from them.
--
--   local cert = sluice.tls.get_client_cert()   -- nil when the client sent none
--   if cert and cert.verified then ... cert.subject, cert.sans.uri[1] ... end
local ffi = require("ffi")
local base = require("sluice.base")

ffi.cdef[[
typedef struct {
    const char *subject;
    size_t subject_len;
    const char *issuer;
    size_t issuer_len;
    const char *serial;
    size_t serial_len;
    const char *fingerprint;
    size_t fingerprint_len;
    const char *sans;
    size_t sans_len;
    int64_t not_before;
    int64_t not_after;
    int32_t verify;
    const char *verify_error;
    size_t verify_error_len;
} sl_client_cert_t;
int sl_ffi_req_client_cert(sl_req_t *r, sl_client_cert_t *out);
]]

local C = ffi.C
local ffi_string, tonumber, error = ffi.string, tonumber, error
local find, sub = string.find, string.sub
local OK, DECLINED = C.SL_OK, C.SL_DECLINED

local _M = {}

local out = ffi.new("sl_client_cert_t")
local KINDS = { DNS = "dns", URI = "uri", email = "email" }

-- "DNS:a\nURI:b" -> { dns = { "a" }, uri = { "b" }, email = {} }. Plain finds only:
-- gmatch would abort the JIT trace of every request that asks.
local function sans_of(text)
    local t = { dns = {}, uri = {}, email = {} }
    local pos, n = 1, #text
    while pos <= n do
        local nl = find(text, "\n", pos, true) or n + 1
        local colon = find(text, ":", pos, true)
        if colon and colon < nl then
            local list = t[KINDS[sub(text, pos, colon - 1)]]
            if list then list[#list + 1] = sub(text, colon + 1, nl - 1) end
        end
        pos = nl + 1
    end
    return t
end

-- The client certificate, or nil when there is none: { subject, issuer, serial,
-- fingerprint, sans = { dns, uri, email }, not_before, not_after, verified, verify_error }.
function _M.get_client_cert()
    local r = base.reqp()
    if r == nil then error("no request is being served here (sluice API used outside a phase)", 2) end
    local rc = C.sl_ffi_req_client_cert(r, out)
    if rc == DECLINED then return nil end
    if rc ~= OK then error("get_client_cert: out of memory", 2) end
    return {
        subject = ffi_string(out.subject, out.subject_len),
        issuer = ffi_string(out.issuer, out.issuer_len),
        serial = ffi_string(out.serial, out.serial_len),
        fingerprint = ffi_string(out.fingerprint, out.fingerprint_len),
        sans = sans_of(ffi_string(out.sans, out.sans_len)),
        not_before = tonumber(out.not_before),
        not_after = tonumber(out.not_after),
        verified = out.verify == 0,
        verify_error = out.verify ~= 0 and ffi_string(out.verify_error, out.verify_error_len) or nil,
    }
end

return _M
