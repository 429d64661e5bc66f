-- redirect: answers with a Location to `to`, optionally keeping the request's path and query
-- (inserted before `to`'s own #fragment).
local sluice = require("sluice")

local request, response = sluice.request, sluice.response

local M = {
    name = "redirect",
    version = "1.0",
    schema = {
        to = { type = "string", required = true, min = 1 },
        status = { type = "enum", one_of = { 301, 302, 303, 307, 308 }, default = 302 },
        keep_path = { type = "boolean", default = false },
        keep_query = { type = "boolean", default = true },
    },
}

function M.check(conf)
    if conf.to:find("[\r\n]") then return nil, "'to' must not contain CR or LF" end
    return true
end

function M.access(conf)
    -- `to` may carry its own query and fragment: the request's path goes before the query,
    -- its query after `to`'s, and the fragment stays last (after it a query is no query).
    local to, frag = conf.to:match("^([^#]*)(#.*)$")
    to, frag = to or conf.to, frag or ""
    local base, query = to:match("^([^?]*)%?(.*)$")
    base = base or to
    if conf.keep_path then
        base = base:gsub("/$", "")
        local path = request.get_path()
        -- after a bare "/" the client's path starts the Location: "//evil.example/x" (or
        -- "/\evil.example", which browsers read alike) would name another host
        if base == "" then path = path:gsub("^[/\\]+", "/") end
        base = base .. path
    end
    if conf.keep_query then
        local q = request.get_query()
        if q ~= "" then query = query and query ~= "" and (query .. "&" .. q) or q end
    end
    local loc = ((query and query ~= "") and (base .. "?" .. query) or base) .. frag
    return response.exit(conf.status, "", { Location = loc })
end

return M
