-- tenant: every request names its tenant in a header; the upstream gets it as a
-- normalised id, unknown tenants are refused before they reach it.
local sluice = require("sluice")

local M = {
    name = "tenant",
    version = "1.0",
    schema = {
        header = { type = "string", default = "X-Tenant" },
        tenants = { type = "array", items = { type = "string" }, required = true },
        upstream_header = { type = "string", default = "X-Tenant-Id" },
    },
}

function M.check(conf)
    if #conf.tenants == 0 then return nil, "list at least one tenant" end
    return true
end

-- Built once per config generation: a set of the known tenants, lower-cased.
function M.prepare(conf)
    local known = {}
    for _, t in ipairs(conf.tenants) do known[t:lower()] = true end
    return known
end

function M.access(conf, ctx, known)
    local t = sluice.request.get_header(conf.header)
    if not t then
        return sluice.response.exit(400, { error = "missing " .. conf.header })
    end
    t = t:lower()
    if not known[t] then
        return sluice.response.exit(403, { error = "unknown tenant" })
    end
    ctx.tenant = t
    sluice.request.clear_header(conf.header)
    sluice.request.set_header(conf.upstream_header, t)
end

function M.header_filter(conf, ctx)
    if ctx.tenant then sluice.response.set_header("X-Served-Tenant", ctx.tenant) end
end

return M
