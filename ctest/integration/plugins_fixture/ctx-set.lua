-- ctx-set: stores conf.value in sluice.ctx.x during rewrite (and ctx.y via the ctx argument).
local sluice = require("sluice")

local M = {
    name = "ctx-set",
    version = "1.0",
    schema = { value = { type = "string", default = "from-ctx-set" } },
}

function M.rewrite(conf, ctx)
    sluice.ctx.x = conf.value
    ctx.y = conf.value .. "-arg"
end

return M
