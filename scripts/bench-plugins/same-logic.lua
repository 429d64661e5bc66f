-- same-logic: a request header read into ctx, a header set upstream, one set on the
-- response. scripts/bench runs it against kong-same-logic/ (the same logic written as a Kong
-- plugin): what the Kong layer costs a plugin.
local sluice = require("sluice")
local request, response = sluice.request, sluice.response

return {
    name = "same-logic",
    version = "1.0",
    schema = { header = { type = "string", default = "X-Bench-Req" } },
    access = function(conf, ctx)
        ctx.agent = request.get_header("User-Agent")
        request.set_header(conf.header, "1")
    end,
    header_filter = function(_, ctx)
        if ctx.agent then response.set_header("X-Bench-Resp", "1") end
    end,
}
