-- counter: sluice.shared.incr(conf.key, 1, 0), answers the new value.
local sluice = require("sluice")

local M = {
    name = "counter",
    version = "1.0",
    schema = { key = { type = "string", default = "hits" } },
}

function M.access(conf)
    local n, err = sluice.shared.incr(conf.key, 1, 0)
    if not n then return sluice.response.exit(500, "incr failed: " .. tostring(err)) end
    return sluice.response.exit(200, tostring(n))
end

return M
