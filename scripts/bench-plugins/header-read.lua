-- header-read: one access phase that reads one request header into ctx, the smallest
-- useful plugin. scripts/bench puts it alone on a route: what one phase with one header
-- read costs a request (issue 20's ≤ 0.7 µs); docs/BENCHMARKS.md, "Plugins".
local request = require("sluice").request

return {
    name = "header-read",
    version = "1.0",
    schema = {},
    access = function(_, ctx)
        ctx.agent = request.get_header("User-Agent")
    end,
}
