-- probe: answers what the request API reports, as JSON (after its own edits, so the
-- answer shows what get_* see after set_header/clear_header/set_path).
local sluice = require("sluice")

local M = {
    name = "probe",
    version = "1.0",
    schema = {
        set = { type = "map", values = { type = "string" }, default = {} },
        clear = { type = "array", items = { type = "string" }, default = {} },
        path = { type = "string" },
        answer = { type = "boolean", default = true },
    },
}

function M.access(conf)
    local req = sluice.request
    for _, name in ipairs(conf.clear) do req.clear_header(name) end
    for k, v in pairs(conf.set) do req.set_header(k, v) end
    if conf.path then req.set_path(conf.path) end
    if not conf.answer then return end
    local missing = req.get_header("X-Definitely-Missing")
    return sluice.response.exit(200, {
        method = req.get_method(),
        path = req.get_path(),
        query = req.get_query(),
        host = req.get_host(),
        client_ip = req.get_client_ip(),
        id = req.get_id(),
        x_probe = req.get_header("x-PROBE"),
        missing = missing == nil,
        headers = req.get_headers(),
    })
end

return M
