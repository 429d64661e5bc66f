-- rate-limit: at most `rate` requests per `per` for each key (client IP, a header, the
-- consumer, or the whole route), with `burst` extra; the rest get 429 with Retry-After.
--
-- A token bucket (capacity burst + 1, refilled at rate/per: burst 0 is a strict rate).
-- store local: in the core, shared by all workers. store redis: the same bucket in Redis
-- on its server's clock, shared by every gateway using that Redis; when Redis is down or
-- slow the request is admitted (fail open) and counted as such.
-- Answers carry the IETF RateLimit and RateLimit-Policy fields
-- (draft-ietf-httpapi-ratelimit-headers: `"name";q=QUOTA;w=WINDOW` and `"name";r=REMAINING;t=SECONDS`).
local sluice = require("sluice")
local cidr = require("sluice.cidr")

local request, response, limit = sluice.request, sluice.response, sluice.limit
local ceil, floor, max, tostring = math.ceil, math.floor, math.max, tostring

local M = {
    name = "rate-limit",
    version = "1.0",
    schema = {
        rate = { type = "number", required = true, min = 0.001 },
        per = { type = "duration", default = "1s", min = 0.001 }, -- seconds once validated
        burst = { type = "integer", default = 0, min = 0 },
        key = { type = "string", default = "ip" },
        store = { type = "enum", one_of = { "local", "redis" }, default = "local" },
        trusted_proxies = { type = "array", items = { type = "string" }, default = {} },
        policy = { type = "string", default = "default" },
        headers = { type = "boolean", default = true },
    },
}

local function key_kind(k)
    if k == "ip" or k == "consumer" or k == "route" then return k end
    local h = k:match("^header:([!#$%%&'*+%-.^_`|~%w]+)$")
    if h then return "header", h end
    return nil
end

function M.check(conf)
    if not key_kind(conf.key) then return nil, "key must be ip, consumer, route or header:NAME" end
    local _, bad = cidr.compile(conf.trusted_proxies)
    if bad then return nil, ("trusted_proxies: '%s' is not an address or CIDR"):format(bad) end
    if not conf.policy:match("^[%w_.%-]+$") then return nil, "policy must be letters, digits, '.', '-' or '_'" end
    return true
end

-- Once per config generation and worker: the parsed parts of a conf, which the phases
-- receive.
function M.prepare(conf)
    local kind, header = key_kind(conf.key)
    local per = conf.per
    local c = {
        kind = kind, header = header, per = per,
        rate_per_s = conf.rate / per,
        trusted = cidr.compile(conf.trusted_proxies),
        quota = floor(conf.rate + conf.burst),
        window = max(1, ceil(per)),
    }
    c.policy = ('"%s";q=%d;w=%d'):format(conf.policy, c.quota, c.window)
    return c
end

-- The client address: the socket's peer, or, when the peer is a trusted proxy, the
-- rightmost X-Forwarded-For entry that is not one.
local function client_ip(c)
    local peer = request.get_client_ip()
    if #c.trusted == 0 then return peer end
    local ip = cidr.parse_ip(peer)
    if not ip or not cidr.any(ip, c.trusted) then return peer end
    local xff = request.get_header("X-Forwarded-For")
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

local function key_of(c, ctx)
    if c.kind == "route" then return "route" end
    if c.kind == "consumer" and ctx.consumer then return "c:" .. tostring(ctx.consumer) end
    if c.kind == "header" then
        local v = request.get_header(c.header)
        if v then return "h:" .. v end
    end
    return "ip:" .. client_ip(c)
end

function M.access(conf, ctx, c)
    -- a limit belongs to its route: two routes with the same config count apart
    local key = request.get_route() .. "|" .. key_of(c, ctx)
    -- one token bucket in either store: the same config admits the same requests
    local allowed, remaining, reset, retry, failopen = limit.take(key, c.rate_per_s, conf.burst, conf.store)
    if allowed == nil then failopen = remaining end -- the local table is out of memory
    if failopen then
        limit.count("failopen")
        return
    end
    local state = ('"%s";r=%d;t=%d'):format(conf.policy, floor(remaining), ceil(allowed and reset or retry))
    if not allowed then
        limit.count("limited")
        return response.exit(429, { error = "rate limited" }, {
            ["Retry-After"] = tostring(max(1, ceil(retry))),
            ["RateLimit-Policy"] = c.policy,
            ["RateLimit"] = state,
        })
    end
    limit.count("allowed")
    if conf.headers then ctx.ratelimit_state, ctx.ratelimit_policy = state, c.policy end
end

function M.header_filter(conf, ctx)
    if ctx.ratelimit_state then
        response.set_header("RateLimit-Policy", ctx.ratelimit_policy)
        response.set_header("RateLimit", ctx.ratelimit_state)
    end
end

return M
