-- noop-access: a plugin whose one phase (access) does nothing. scripts/bench puts one of
-- them on a route (what the first phase costs a request) and many on another (what each
-- further plugin call in a phase costs); docs/BENCHMARKS.md, "Plugins".
local M = {
    name = "noop-access",
    version = "1.0",
    schema = {},
}

function M.access(conf, ctx) end

return M
