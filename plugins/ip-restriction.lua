-- ip-restriction: allow or deny clients by CIDR. Deny wins; with an allow list, only
-- listed clients pass. The client address is the socket's peer.
local sluice = require("sluice")
local cidr = require("sluice.cidr")

local request, response = sluice.request, sluice.response
local parse_ip, any = cidr.parse_ip, cidr.any

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

-- Compiled once per config generation (conf tables live as long as their generation).
local cache = setmetatable({}, { __mode = "k" })

function M.access(conf)
    local c = cache[conf]
    if not c then
        c = { allow = cidr.compile(conf.allow), deny = cidr.compile(conf.deny) }
        cache[conf] = c
    end
    local ip = parse_ip(request.get_client_ip())
    if not ip then return response.exit(conf.status, { error = "forbidden" }) end
    if any(ip, c.deny) then return response.exit(conf.status, { error = "forbidden" }) end
    if #c.allow > 0 and not any(ip, c.allow) then return response.exit(conf.status, { error = "forbidden" }) end
end

return M
