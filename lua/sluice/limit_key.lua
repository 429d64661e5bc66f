-- sluice.limit_key: what a limiting plugin counts a request under (rate-limit, limit-conn):
-- `key` is ip, consumer, route or header:NAME (each plugin's schema has `key` and
-- `trusted_proxies`, written out there for the docs checker).
--
--   local limit_key = require("sluice.limit_key")
--   local ok, err = limit_key.check(conf)        -- conf.key and conf.trusted_proxies
--   local c = limit_key.prepare(conf)            -- once per config generation
--   local key = limit_key.of(c, ctx)             -- "ROUTE|ip:1.2.3.4", per request
--
-- ip: the client address (the socket's peer or, when the peer is one of trusted_proxies,
-- the rightmost X-Forwarded-For hop that is not, over every field of that name);
-- consumer: ctx.consumer (the address when absent); header:NAME: that header's value
-- (the address when absent); route: the route.
-- A key always starts with the route's name: limits never cross routes.
local sluice = require("sluice")
local cidr = require("sluice.cidr")

local request = sluice.request
local tostring = tostring

local _M = {}

local function kind(k)
    if k == "ip" or k == "consumer" or k == "route" then return k end
    local h = k:match("^header:([!#$%%&'*+%-.^_`|~%w]+)$")
    if h then return "header", h end
    return nil
end

function _M.check(conf)
    local k = kind(conf.key)
    if not k then return nil, "key must be ip, consumer, route or header:NAME" end
    -- key route never looks at the client address, so trusted proxies would change nothing
    if k == "route" and #conf.trusted_proxies > 0 then
        return nil, "trusted_proxies does nothing with key: route (no client address is counted)"
    end
    local _, bad = cidr.compile(conf.trusted_proxies)
    if bad then return nil, ("trusted_proxies: '%s' is not an address or CIDR"):format(bad) end
    return true
end

-- The parsed parts of conf.key and conf.trusted_proxies.
function _M.prepare(conf)
    local k, header = kind(conf.key)
    return { kind = k, header = header, trusted = cidr.compile(conf.trusted_proxies) }
end

-- The client address: the socket's peer, or, when the peer is a trusted proxy, the
-- rightmost X-Forwarded-For entry that is not one.
local function client_ip(c)
    local peer = request.get_client_ip()
    if #c.trusted == 0 then return peer end
    local ip = cidr.parse_ip(peer)
    if not ip or not cidr.any(ip, c.trusted) then return peer end
    -- every X-Forwarded-For field, joined in order: a proxy that adds its own field after
    -- a client's (HAProxy's `option forwardfor`) is read from the last one, not the first
    local xff = request.get_headers()["x-forwarded-for"]
    if not xff then return peer end
    local hops = {}
    for part in xff:gmatch("[^,%s]+") do hops[#hops + 1] = part end
    for i = #hops, 1, -1 do
        local a = cidr.parse_ip(hops[i])
        if not a then return peer end -- a malformed hop: trust nothing before it
        if not cidr.any(a, c.trusted) then return hops[i] end
    end
    return peer
end

local function part(c, ctx)
    if c.kind == "route" then return "route" end
    if c.kind == "consumer" and ctx.consumer then return "c:" .. tostring(ctx.consumer) end
    if c.kind == "header" then
        local v = request.get_header(c.header)
        if v then return "h:" .. v end
    end
    return "ip:" .. client_ip(c)
end

-- The running request's key: its route's name, '|', then what conf.key names.
function _M.of(c, ctx)
    return request.get_route() .. "|" .. part(c, ctx)
end

return _M
