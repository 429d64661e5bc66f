-- logger: sluice.log.<level>(...) in access with several arguments, then carries on.
local sluice = require("sluice")

local M = {
    name = "logger",
    version = "1.0",
    schema = {
        level = { type = "enum", one_of = { "debug", "info", "warn", "err" }, default = "info" },
        tag = { type = "string", default = "tag" },
    },
}

function M.access(conf)
    sluice.log[conf.level]("hello from logger", conf.tag, 42)
end

return M
