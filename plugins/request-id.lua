-- request-id: makes sure every request carries an id, upstream and (optionally) back.
local sluice = require("sluice")

local request, response = sluice.request, sluice.response

local M = {
    name = "request-id",
    version = "1.0",
    schema = {
        header = { type = "string", default = "X-Request-ID" },
        override = { type = "boolean", default = false },
        response = { type = "boolean", default = true },
    },
}

function M.rewrite(conf, ctx)
    local id = request.get_header(conf.header)
    -- a client's id is kept only when it can be an id: 1..32 visible ASCII characters
    if conf.override or not id or not id:match("^[\33-\126]+$") or #id > 32 then
        -- the gateway's own id (what its log lines carry), unless a client's must be replaced
        id = (conf.override and id) and sluice.random_hex(32) or request.get_id()
        if conf.override and not id then id = sluice.random_hex(32) end
        request.set_header(conf.header, id)
    end
    request.set_id(id) -- log lines and the access log carry the same id
    ctx.request_id = id
end

function M.header_filter(conf, ctx)
    if conf.response and ctx.request_id then
        response.set_header(conf.header, ctx.request_id)
    end
end

return M
