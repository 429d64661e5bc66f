-- append: adds conf.value to a comma-separated request header (get_header/set_header),
-- in the phase conf.phase; optionally bumps a shared counter, to prove it ran.
local sluice = require("sluice")

local M = {
    name = "append",
    version = "1.0",
    schema = {
        value = { type = "string", required = true },
        header = { type = "string", default = "X-Order" },
        phase = { type = "enum", one_of = { "rewrite", "access" }, default = "access" },
        counter = { type = "string" },
    },
}

local function run(conf, phase)
    if conf.phase ~= phase then return end
    local old = sluice.request.get_header(conf.header)
    sluice.request.set_header(conf.header, old and (old .. "," .. conf.value) or conf.value)
    if conf.counter then sluice.shared.incr(conf.counter, 1, 0) end
end

function M.rewrite(conf) run(conf, "rewrite") end
function M.access(conf) run(conf, "access") end

return M
