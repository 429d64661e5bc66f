-- pick-target (test fixture): a balancer phase that sends the request to the target whose
-- address the X-Target header names (or the one with the lowest in-flight when absent),
-- and reports what it saw in X-Seen-* response headers via ctx.
local sluice = require("sluice")

return {
    name = "pick-target",
    version = "1.0",
    schema = { fail = { type = "boolean", default = false } },
    balancer = function(conf, ctx)
        if conf.fail then error("balancer hook failed") end
        local want = sluice.request.get_header("X-Target")
        local targets = sluice.balancer.targets()
        ctx.calls = (ctx.calls or 0) + 1
        ctx.seen = #targets
        ctx.tried = 0
        for _, t in ipairs(targets) do if t.tried then ctx.tried = ctx.tried + 1 end end
        ctx.state = sluice.breaker.state("picked", targets[1].address)
        if want then sluice.balancer.set_target(want) end
    end,
    header_filter = function(conf, ctx)
        sluice.response.set_header("X-Seen-Targets", tostring(ctx.seen))
        sluice.response.set_header("X-Seen-Calls", tostring(ctx.calls))
        sluice.response.set_header("X-Seen-Tried", tostring(ctx.tried))
        sluice.response.set_header("X-Seen-Breaker", tostring(ctx.state))
    end,
}
