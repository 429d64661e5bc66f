-- odd-check: a config-time check() that refuses an odd n.
local M = {
    name = "odd-check",
    version = "1.0",
    schema = { n = { type = "integer", default = 2 } },
}

function M.check(conf)
    if conf.n % 2 == 1 then return nil, "n must be even" end
    return true
end

function M.access() end

return M
