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
            if why then return nil, ("%s: '%s' %s"):format(side, name, why) end
        end
    end
    return true
end

local function apply(api, o)
    for _, name in ipairs(o.remove) do api.clear_header(name) end
    for name, value in pairs(o.set) do api.set_header(name, value) end
    for name, value in pairs(o.add) do api.add_header(name, value) end
end

function M.rewrite(conf)
    apply(request, conf.request)
end

function M.header_filter(conf)
    apply(response, conf.response)
end

return M
