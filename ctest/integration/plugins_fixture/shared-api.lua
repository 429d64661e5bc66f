-- shared-api: drives sluice.shared from the query string and answers JSON:
--   ?op=get&k=K | ?op=set&k=K&v=V[&num=1][&ttl=S] (no v: the request body) | ?op=incr&k=K&d=N[&init=N][&ttl=S] | ?op=delete&k=K
local sluice = require("sluice")

local M = { name = "shared-api", version = "1.0", schema = {} }

local function args()
    local out = {}
    for k, v in sluice.request.get_query():gmatch("([^&=]+)=([^&]*)") do out[k] = v end
    return out
end

function M.access()
    local a = args()
    local shared = sluice.shared
    local res = {}
    if a.op == "get" then
        local v = shared.get(a.k)
        res.value, res.type = v, type(v)
    elseif a.op == "set" then
        local v = a.v
        if v == nil then v = sluice.request.get_body() or "" end
        if a.num then v = tonumber(v) end
        res.ok, res.err = shared.set(a.k, v, tonumber(a.ttl))
    elseif a.op == "incr" then
        local init = a.init and tonumber(a.init) or nil
        res.value, res.err = shared.incr(a.k, tonumber(a.d), init, tonumber(a.ttl))
    elseif a.op == "delete" then
        res.ok = shared.delete(a.k)
    else
        return sluice.response.exit(400, { error = "op?" })
    end
    if res.value == nil and res.type == nil then res.type = "nil" end
    return sluice.response.exit(200, res)
end

return M
