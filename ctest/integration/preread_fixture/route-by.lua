-- route-by: a tcp listener's preread picks the upstream by the TLS server name, then by
-- the client's address; `to` maps an address to "IP:PORT" (no upstream, no balancer).
local sluice = require("sluice")

local M = {
    name = "route-by",
    version = "1.0",
    schema = {
        sni = { type = "map", values = { type = "string" }, default = {} },
        ip = { type = "map", values = { type = "string" }, default = {} },
    },
}

function M.preread(conf, ctx)
    local session = sluice.session
    local name = session.get_sni()
    local to = name and conf.sni[name] or conf.ip[session.get_client_ip()]
    if to then
        local ok, err = sluice.upstream.set(to)
        if not ok then error("upstream.set(" .. to .. "): " .. err) end
        ctx.routed_by = name and "sni" or "ip"
    end
end

return M
