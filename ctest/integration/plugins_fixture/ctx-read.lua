-- ctx-read: in header_filter, copies ctx.x / ctx.y (set by ctx-set earlier in the request)
-- into response headers; counts requests in ctx.n to show each request has a fresh ctx.
local sluice = require("sluice")

local M = { name = "ctx-read", version = "1.0", schema = {} }

function M.header_filter(conf, ctx)
    ctx.n = (ctx.n or 0) + 1
    sluice.response.set_header("X-Ctx-X", tostring(sluice.ctx.x))
    sluice.response.set_header("X-Ctx-Y", tostring(ctx.y))
    sluice.response.set_header("X-Ctx-N", tostring(sluice.ctx.n))
end

return M
