-- tcp-info: answers the client itself with what preread sees (JSON), then closes.
local sluice = require("sluice")

local M = { name = "tcp-info", version = "1.0", schema = {} }

function M.preread(conf, ctx)
    local s = sluice.session
    sluice.log.info("tcp-info for", s.get_client_ip())
    return s.close(sluice.json.encode({
        listener = s.get_listener(), ip = s.get_client_ip(), port = s.get_client_port(),
        sni = s.get_sni() or sluice.json.null, upstream = s.get_upstream() or sluice.json.null,
        routed_by = ctx.routed_by or sluice.json.null,
    }) .. "\n")
end

return M
