-- request-id: makes sure every request carries an id, upstream and (optionally) back.
--
-- The id is the request's own (request.get_id(): what log lines carry), taken from a
-- client's header when that can be an id. The gateway's id goes into the headers without
-- becoming a Lua string (request.set_id_header): with a new id per request, a string would
-- be a new allocation per request.
local sluice = require("sluice")

local request, response = sluice.request, sluice.response
local find = string.find

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
    if id and not conf.override and #id > 0 and #id <= 32 and not find(id, "[^\33-\126]") then
        request.set_id(id) -- log lines and the access log carry the same id
        ctx.request_id = id
        return
    end
    if conf.override and id then
        -- a client's id that must be replaced: by a fresh one, not the gateway's (which the
        -- client may have seen)
        id = sluice.random_hex(32)
        request.set_id(id)
        ctx.request_id = id
    end
    request.set_id_header(conf.header)
end

function M.header_filter(conf)
    if conf.response then response.set_id_header(conf.header) end
end

return M
