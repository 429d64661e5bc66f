-- traceparent: W3C Trace Context. Propagates a valid incoming traceparent with a new
-- span id (ours, as the parent of the upstream's), or starts a trace; tracestate passes
-- through unchanged (and is dropped with an invalid or absent traceparent). sample_ratio
-- decides the sampled flag of traces started here. The work is the core's own tracing
-- code (sl_ffi_traceparent, the same as `telemetry:` uses): with telemetry configured,
-- the plugin only reads the ids the core made.
local ffi = require("ffi")
local base = require("sluice.base")

ffi.cdef[[
int sl_ffi_traceparent(sl_req_t *r, double sample_ratio, char *out);
]]
local C, ffi_string = ffi.C, ffi.string
local ids = ffi.new("char[48]")

local M = {
    name = "traceparent",
    version = "1.0",
    schema = {
        sample_ratio = { type = "number", default = 1.0, min = 0, max = 1 },
    },
}

function M.rewrite(conf, ctx)
    C.sl_ffi_traceparent(base.req, conf.sample_ratio, ids)
    ctx.trace_id, ctx.span_id = ffi_string(ids, 32), ffi_string(ids + 32, 16)
end

return M
