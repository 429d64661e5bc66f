-- by-client: a preread plugin for tcp listeners that picks the upstream by the client's
-- address: the first rule whose CIDR holds it wins; no rule, the session is closed with
-- a Redis error reply.
local sluice = require("sluice")
local cidr = require("sluice.cidr")

local M = {
    name = "by-client",
    version = "1.0",
    schema = {
        rules = {
            type = "array",
            required = true,
            items = {
                type = "record",
                fields = {
                    from = { type = "array", items = { type = "string" }, required = true },
                    upstream = { type = "string", required = true },
                },
            },
        },
        deny_message = { type = "string", default = "-ERR client not allowed\r\n" },
    },
}

function M.check(conf)
    for i, r in ipairs(conf.rules) do
        local ok, bad = cidr.compile(r.from)
        if not ok then return nil, ("rules[%d]: bad address or CIDR '%s'"):format(i, tostring(bad)) end
    end
    return true
end

-- Built once per config generation: the compiled blocks.
function M.prepare(conf)
    local rules = {}
    for i, r in ipairs(conf.rules) do rules[i] = { blocks = cidr.compile(r.from), upstream = r.upstream } end
    return rules
end

function M.preread(conf, ctx, rules)
    local ip = cidr.parse_ip(sluice.session.get_client_ip())
    for _, r in ipairs(rules) do
        for _, b in ipairs(r.blocks) do
            if ip and cidr.matches(ip, b) then
                assert(sluice.upstream.set(r.upstream))
                return
            end
        end
    end
    return sluice.session.close(conf.deny_message)
end

return M
