-- response: a fixed answer with no upstream (mocks, maintenance pages).
local sluice = require("sluice")
local schema = require("sluice.schema")

local M = {
    name = "response",
    version = "1.0",
    schema = {
        status = { type = "integer", default = 200, min = 200, max = 599 }, -- a final answer: no 1xx
        body = { type = "string", default = "" },
        headers = { type = "map", values = { type = "string" }, default = {} },
    },
}

-- A header the core would refuse fails the config, not every request.
function M.check(conf)
    local why = schema.header_map_error(conf.headers)
    if why then return nil, "headers: " .. why end
    return true
end

function M.access(conf)
    return sluice.response.exit(conf.status, conf.body, conf.headers)
end

return M
