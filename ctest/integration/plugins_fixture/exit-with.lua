-- exit-with: ends the chain with a fixed answer from rewrite or access.
local sluice = require("sluice")

local M = {
    name = "exit-with",
    version = "1.0",
    schema = {
        status = { type = "integer", default = 418 },
        body = { type = "string", default = "short and stout" },
        json = { type = "boolean", default = false },
        phase = { type = "enum", one_of = { "rewrite", "access" }, default = "access" },
    },
}

local function run(conf, phase)
    if conf.phase ~= phase then return end
    if conf.json then
        return sluice.response.exit(conf.status, { body = conf.body, list = { 1, 2 } })
    end
    return sluice.response.exit(conf.status, conf.body, { ["X-Exit"] = "exit-with" })
end

function M.rewrite(conf) return run(conf, "rewrite") end
function M.access(conf) return run(conf, "access") end

return M
