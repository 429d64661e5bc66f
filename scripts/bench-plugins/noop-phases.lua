-- noop-phases: a plugin with every phase this build calls (rewrite, access, header_filter,
-- log), each doing nothing. Against noop-access it gives what entering one more phase
-- costs (docs/BENCHMARKS.md, "Plugins").
local M = {
    name = "noop-phases",
    version = "1.0",
    schema = {},
}

function M.rewrite(conf, ctx) end

function M.access(conf, ctx) end

function M.header_filter(conf, ctx) end

function M.log(conf, ctx) end

return M
