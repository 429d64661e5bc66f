-- body-reader: reads the request body in access; answers it back (exit = true) or
-- lets the request go on to the upstream with X-Body-Len / X-Body-Sha set.
local sluice = require("sluice")

local M = {
    name = "body-reader",
    version = "1.0",
    schema = {
        exit = { type = "boolean", default = true },
        phase = { type = "enum", one_of = { "rewrite", "access" }, default = "access" },
    },
}

local function run(conf, phase)
    if conf.phase ~= phase then return end
    local body, err = sluice.request.get_body()
    if err then return sluice.response.exit(413, { error = err }) end
    local again = sluice.request.get_body()   -- a second read gives the same bytes
    if again ~= body then return sluice.response.exit(500, "second get_body differs") end
    if conf.exit then
        return sluice.response.exit(200, body or "<nil>", { ["X-Body-Len"] = body and #body or -1 })
    end
    sluice.request.set_header("X-Body-Len", body and #body or -1)
end

function M.rewrite(conf) return run(conf, "rewrite") end
function M.access(conf) return run(conf, "access") end

return M
