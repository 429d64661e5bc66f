-- traceparent: W3C Trace Context. Propagates a valid incoming traceparent with a new
-- span id (ours, as the parent of the upstream's), or starts a trace; tracestate passes
-- through unchanged. sample_ratio decides the sampled flag of traces started here.
local sluice = require("sluice")

local request = sluice.request
local random_hex = sluice.random_hex

local M = {
    name = "traceparent",
    version = "1.0",
    schema = {
        sample_ratio = { type = "number", default = 1.0, min = 0, max = 1 },
    },
}

local ZERO_TRACE = ("0"):rep(32)
local ZERO_SPAN = ("0"):rep(16)

function M.rewrite(conf, ctx)
    local tp = request.get_header("traceparent")
    local version, trace, parent, flags
    if tp then
        version, trace, parent, flags = tp:match("^(%x%x)%-(%x+)%-(%x+)%-(%x%x)$")
        if not version or version == "ff" or #trace ~= 32 or #parent ~= 16 or trace == ZERO_TRACE
            or parent == ZERO_SPAN or trace:find("%u") or parent:find("%u") then
            version = nil
        end
    end
    local span = random_hex(16)
    if version then
        request.set_header("traceparent", ("00-%s-%s-%s"):format(trace, span, flags))
    else
        trace = random_hex(32)
        flags = math.random() < conf.sample_ratio and "01" or "00"
        request.set_header("traceparent", ("00-%s-%s-%s"):format(trace, span, flags))
        request.clear_header("tracestate") -- a tracestate without its traceparent means nothing
    end
    ctx.trace_id, ctx.span_id = trace, span
end

return M
