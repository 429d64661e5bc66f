-- key-auth: the client names itself with a consumer's API key, in a header or a query
-- parameter. The key finds its consumer through sluice.consumers (a hash lookup: its time
-- depends on the key's hash, not on how many leading bytes it shares with a stored key),
-- and is then compared with crypto.timing_safe_equal, whose time depends on the length
-- only: no byte-by-byte compare of a secret runs in Lua.
local sluice = require("sluice")

local request, response, consumers, crypto = sluice.request, sluice.response,
    sluice.consumers, sluice.crypto
local tostring, tonumber, char = tostring, tonumber, string.char

local M = {
    name = "key-auth",
    version = "1.0",
    auth = true, -- sets ctx.consumer: an after_auth plugin (acl) must come later
    schema = {
        header = { type = "string", default = "apikey" },          -- "": not from a header
        query = { type = "string", default = "apikey" },           -- "": not from the query
        hide_credentials = { type = "boolean", default = true },
    },
}

function M.check(conf)
    if conf.header == "" and conf.query == "" then
        return nil, "header and query cannot both be empty: the key would come from nowhere"
    end
    if conf.header ~= "" and not conf.header:find("^[%w!#$%%&'*+.^_`|~-]+$") then
        return nil, ("header: '%s' is not a header name"):format(conf.header)
    end
    return true
end

local CHALLENGE = { ["WWW-Authenticate"] = 'Key realm="sluice"' }
local MISSING = { error = "missing API key" }
local INVALID = { error = "invalid API key" }

local function hex_byte(h) return char(tonumber(h, 16)) end

-- Form decoding of a query component: '+' is a space, %XX a byte.
local function unescape(s)
    if not s:find("[%%+]") then return s end
    return (s:gsub("%+", " "):gsub("%%(%x%x)", hex_byte))
end

-- The first value of query parameter `name`, decoded; nil when absent.
local function query_arg(query, name)
    for pair in query:gmatch("[^&]+") do
        local k, v = pair:match("^([^=]*)=?(.*)$")
        if unescape(k) == name then return unescape(v) end
    end
end

-- The query without every `name` parameter (the others kept as they were sent).
local function without_arg(query, name)
    local kept = {}
    for pair in query:gmatch("[^&]+") do
        local k = pair:match("^([^=]*)")
        if unescape(k) ~= name then kept[#kept + 1] = pair end
    end
    return table.concat(kept, "&")
end

-- The query with only the first `name` parameter (later ones dropped, the rest as sent),
-- or nil when there is no later one.
local function first_arg_only(query, name)
    local kept, seen, dropped = {}, false, false
    for pair in query:gmatch("[^&]+") do
        if unescape(pair:match("^([^=]*)")) ~= name then
            kept[#kept + 1] = pair
        elseif seen then
            dropped = true
        else
            seen = true
            kept[#kept + 1] = pair
        end
    end
    return dropped and table.concat(kept, "&") or nil
end

function M.access(conf, ctx)
    local key, in_query
    if conf.header ~= "" then key = request.get_header(conf.header) end
    if not key and conf.query ~= "" then
        key = query_arg(request.get_query(), conf.query)
        in_query = true
    end
    if not key or key == "" then return response.exit(401, MISSING, CHALLENGE) end

    local name = consumers.find("key-auth", "key", key)
    local cred = name and consumers.credential(name, "key-auth")
    -- The core hands built-in credentials over as the text written (`key: 007` is "007").
    if not cred or not crypto.timing_safe_equal(tostring(cred.key), key) then
        return response.exit(401, INVALID, CHALLENGE)
    end
    -- A key in the query when the header had one is not checked: hidden or not, it must not
    -- reach the upstream (another client's key, or a forged one an upstream might read).
    local q = conf.query ~= "" and request.get_query() or ""
    local q_key = q ~= "" and query_arg(q, conf.query) ~= nil
    if conf.hide_credentials then
        if in_query then
            request.set_query(without_arg(q, conf.query))
        else
            request.clear_header(conf.header)
            if q_key then request.set_query(without_arg(q, conf.query)) end
        end
    elseif in_query then
        -- only the first one was checked: a later one must not reach the upstream unchecked
        local fq = first_arg_only(q, conf.query)
        if fq then request.set_query(fq) end
    else
        request.set_header(conf.header, key)
        if q_key then request.set_query(without_arg(q, conf.query)) end
    end
    ctx.consumer = name
end

return M
