-- ip-restriction: allow or deny clients by CIDR. Deny wins; with an allow list, only
-- listed clients pass. The client address is the socket's peer (or what a trusted PROXY
-- header said). Works on routes (access) and on tcp listeners (preread).
local sluice = require("sluice")
local cidr = require("sluice.cidr")

local request, response, session = sluice.request, sluice.response, sluice.session
local parse_ip_buf = cidr.parse_ip_buf

local M = {
    name = "ip-restriction",
    version = "1.0",
    schema = {
        allow = { type = "array", items = { type = "string" }, default = {} },
        deny = { type = "array", items = { type = "string" }, default = {} },
        status = { type = "integer", default = 403, min = 400, max = 599 },
    },
}

function M.check(conf)
    for _, key in ipairs({ "allow", "deny" }) do
        for _, s in ipairs(conf[key]) do
            if not cidr.parse(s) then return nil, ("%s: '%s' is not an address or CIDR"):format(key, s) end
        end
    end
    return true
end

-- The lists compiled once per config generation and worker into matchers (byte arrays
-- compared in place: no string per request); phases receive them.
function M.prepare(conf)
    local allow = cidr.compile(conf.allow)
    return { allow = cidr.matcher(allow), any_allow = #allow > 0, deny = cidr.matcher(cidr.compile(conf.deny)) }
end

local function allowed(c, client_ip)
    local ip = parse_ip_buf(client_ip)
    if not ip or c.deny(ip) then return false end
    return not c.any_allow or c.allow(ip)
end

function M.access(conf, _, c)
    if not allowed(c, request.get_client_ip()) then return response.exit(conf.status, { error = "forbidden" }) end
end

-- On a tcp listener: a refused client is closed before an upstream is chosen (`status`
-- does not apply).
function M.preread(_, _, c)
    if not allowed(c, session.get_client_ip()) then return session.close() end
end

return M
