-- resp-probe: in header_filter, reports response.get_status / get_header through
-- response headers, and sets / clears the ones its config names.
local sluice = require("sluice")

local M = {
    name = "resp-probe",
    version = "1.0",
    schema = {
        read = { type = "string", default = "X-Up" },
        set = { type = "map", values = { type = "string" }, default = {} },
        clear = { type = "array", items = { type = "string" }, default = {} },
    },
}

function M.header_filter(conf)
    local resp = sluice.response
    local st = resp.get_status()
    local seen = resp.get_header(conf.read)
    resp.set_header("X-Seen-Status", tostring(st))
    resp.set_header("X-Seen-Header", seen == nil and "<nil>" or seen)
    for _, name in ipairs(conf.clear) do resp.clear_header(name) end
    for k, v in pairs(conf.set) do resp.set_header(k, v) end
end

return M
