-- acl: lets a request through by the groups of its authenticated consumer (ctx.consumer,
-- set by an auth plugin; the consumer's `groups:` in the config). Kong's acl: `allow` or
-- `deny`, one of the two; 403 otherwise. It runs in access and is marked `after_auth`:
-- a config listing an auth plugin after it (in the global chain and the route's, in that
-- order) is refused at load, so it always sees the consumer.
local sluice = require("sluice")

local request, response, consumers = sluice.request, sluice.response, sluice.consumers
local ipairs, concat = ipairs, table.concat

local M = {
    name = "acl",
    version = "1.0",
    after_auth = true,
    schema = {
        allow = { type = "array", items = { type = "string", min = 1 } },
        deny = { type = "array", items = { type = "string", min = 1 } },
        hide_groups_header = { type = "boolean", default = false },
    },
}

function M.check(conf)
    if (conf.allow == nil) == (conf.deny == nil) then
        return nil, "needs exactly one of allow and deny"
    end
    if #(conf.allow or conf.deny) == 0 then return nil, "the group list is empty" end
    return true
end

local function set_of(list)
    local s = {}
    for _, g in ipairs(list or {}) do s[g] = true end
    return s
end

function M.prepare(conf)
    return { allow = conf.allow and set_of(conf.allow), deny = conf.deny and set_of(conf.deny),
             joined = {} }
end

local FORBIDDEN = { error = "forbidden" }

-- true when one of the consumer's groups is in the set
local function any_in(groups, set)
    for _, g in ipairs(groups) do
        if set[g] then return true end
    end
    return false
end

function M.access(conf, ctx, p)
    local name = ctx.consumer
    if not name then return response.exit(403, FORBIDDEN) end -- nobody authenticated
    local groups = consumers.groups(name)
    if p.allow then
        if not any_in(groups, p.allow) then return response.exit(403, FORBIDDEN) end
    elseif any_in(groups, p.deny) then
        return response.exit(403, FORBIDDEN)
    end
    if conf.hide_groups_header or #groups == 0 then
        request.clear_header("X-Consumer-Groups")
        return
    end
    -- joined once per listed consumer (a name without groups, e.g. a jwt claim, is never
    -- memoised: the table stays bounded by the config)
    local joined = p.joined[name]
    if not joined then
        joined = concat(groups, ", ")
        p.joined[name] = joined
    end
    request.set_header("X-Consumer-Groups", joined)
end

return M
