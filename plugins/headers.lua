-- headers: set, add and remove request headers (toward the upstream) and response
-- headers (toward the client).
local sluice = require("sluice")

local request, response = sluice.request, sluice.response
local pairs, ipairs = pairs, ipairs


local ops = {
    type = "record",
    default = {},
    fields = {
        set = { type = "map", values = { type = "string" }, default = {} },
        add = { type = "map", values = { type = "string" }, default = {} },
        remove = { type = "array", items = { type = "string" }, default = {} },
    },
}

local M = {
    name = "headers",
    version = "1.0",
    schema = { request = ops, response = ops },
}

-- The gateway owns framing and connection management; a plugin edit of these would be
-- refused on every request, so refuse the config instead.
local OWNED = { ["content-length"] = true, ["transfer-encoding"] = true, connection = true,
                ["keep-alive"] = true, te = true, trailer = true, upgrade = true }

local function bad_name(name)
    if not name:match("^[!#$%%&'*+.^_`|~0-9A-Za-z-]+$") then return "is not a valid header name" end
    if OWNED[name:lower()] then return "is a framing or hop-by-hop header the gateway sets itself" end
    return nil
end

function M.check(conf)
    for _, side in ipairs({ "request", "response" }) do
        local o = conf[side]
        for _, list in ipairs({ o.set, o.add }) do
            for name, value in pairs(list) do
                local why = bad_name(name)
                if why then return nil, ("%s: '%s' %s"):format(side, name, why) end
                if value:find("[%z\1-\8\10-\31\127]") then
                    return nil, ("%s: the value of '%s' has control characters"):format(side, name)
                end
            end
        end
        for _, name in ipairs(o.remove) do
            local why = bad_name(name)
            if not why and side == "request" and name:lower() == "host" then
                why = "is required upstream (set replaces it)"
            end
            if why then return nil, ("%s: '%s' %s"):format(side, name, why) end
        end
    end
    return true
end

-- The edits of one side compiled once per config generation and worker (prepare): a
-- chain of closures, removes first, then sets, then adds (names sorted within each), each
-- calling the next. No `pairs` per request (its iteration order is arbitrary, and a loop
-- over one or two entries starts traces LuaJIT abandons on leaving it), no table read
-- per edit.
local function noop() end

local function compile(api, o)
    local ops = {}
    for _, name in ipairs(o.remove) do ops[#ops + 1] = { api.clear_header, name } end
    for _, edit in ipairs({ { api.set_header, o.set }, { api.add_header, o.add } }) do
        local names = {}
        for name in pairs(edit[2]) do names[#names + 1] = name end
        table.sort(names)
        for _, name in ipairs(names) do ops[#ops + 1] = { edit[1], name, edit[2][name] } end
    end
    local f = noop
    for i = #ops, 1, -1 do
        local fn, name, value, nxt = ops[i][1], ops[i][2], ops[i][3], f
        f = function()
            fn(name, value)
            return nxt()
        end
    end
    return f
end

function M.prepare(conf)
    return { request = compile(request, conf.request), response = compile(response, conf.response) }
end

function M.rewrite(_, _, c)
    c.request()
end

function M.header_filter(_, _, c)
    c.response()
end

return M
