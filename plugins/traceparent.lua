-- traceparent: W3C Trace Context. Propagates a valid incoming traceparent with a new
-- span id (ours, as the parent of the upstream's), or starts a trace; tracestate passes
-- through unchanged (and is dropped with an invalid or absent traceparent). sample_ratio
-- decides the sampled flag of traces started here. The work is the core's own tracing
-- code (sluice.trace.context, the same as `telemetry:` uses): with telemetry configured,
-- the plugin only reads the ids the core made.
local sluice = require("sluice")

local context = sluice.trace.context

local M = {
    name = "traceparent",
    version = "1.0",
    schema = {
        sample_ratio = { type = "number", default = 1.0, min = 0, max = 1 },
    },
}

function M.rewrite(conf, ctx)
    ctx.trace_id, ctx.span_id = context(conf.sample_ratio)
end

return M
