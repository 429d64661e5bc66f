-- hex: answers sluice.random_hex(conf.n) (the default n when conf.n is absent).
local sluice = require("sluice")

local M = { name = "hex", version = "1.0", schema = { n = { type = "integer", min = 1 } } }

function M.access(conf)
    local ok, s = pcall(sluice.random_hex, conf.n)
    if not ok then return sluice.response.exit(400, { error = tostring(s) }) end
    return sluice.response.exit(200, s)
end

return M
