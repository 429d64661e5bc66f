-- switch-upstream: sluice.upstream.set(conf.to) in access; an unknown name answers 500
-- with the error returned (nil, err).
local sluice = require("sluice")

local M = {
    name = "switch-upstream",
    version = "1.0",
    schema = { to = { type = "string", required = true } },
}

function M.access(conf)
    local ok, err = sluice.upstream.set(conf.to)
    if not ok then return sluice.response.exit(500, { error = err }) end
end

return M
