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
local limit_key = require("sluice.limit_key")

local request, response, limit = sluice.request, sluice.response, sluice.limit
local ceil, floor, max, tostring = math.ceil, math.floor, math.max, tostring

local M = {
    name = "rate-limit",
    version = "1.0",
    schema = {
        rate = { type = "number", required = true, min = 0.001 },
        per = { type = "duration", default = "1s", min = 0.001 }, -- seconds once validated
        burst = { type = "integer", default = 0, min = 0, max = 1e9 },
        store = { type = "enum", one_of = { "local", "redis" }, default = "local" },
        policy = { type = "string", default = "default" },
        headers = { type = "boolean", default = true },
        key = { type = "string", default = "ip" }, -- sluice.limit_key
        trusted_proxies = { type = "array", items = { type = "string" }, default = {} },
    },
}

-- The core's limiter takes at most 1e9 tokens a second (a token's period is >= 1 ns).
local RATE_MAX = 1e9

function M.check(conf)
    if conf.rate / conf.per > RATE_MAX then
        return nil, ("rate / per must be at most 1e9 a second (here %g)"):format(conf.rate / conf.per)
    end
    local ok, err = limit_key.check(conf)
    if not ok then return nil, err end
    if not conf.policy:match("^[%w_.%-]+$") then return nil, "policy must be letters, digits, '.', '-' or '_'" end
    return true
end

-- Once per config generation and worker: the parsed parts of a conf, which the phases
-- receive.
function M.prepare(conf, chain)
    local per = conf.per
    local c = {
        key = limit_key.prepare(conf), per = per,
        rate_per_s = conf.rate / per,
    }
    -- The policy's window is whole seconds, long enough for one request at the rate: a
    -- `per` under a second, or a rate under one a window, is said as the quota of that
    -- window (10 per 500ms: q=20;w=1; 0.5 per 1s: q=1;w=2), not as q=10;w=1 or q=0.
    c.window = max(1, ceil(per - 1e-9), ceil(per / conf.rate - 1e-9))
    c.quota = floor(conf.rate * c.window / per + 1e-9) + conf.burst
    c.policy = ('"%s";q=%d;w=%d'):format(conf.policy, c.quota, c.window)
    -- a named policy's keys start with its name (the client's part of a key comes last,
    -- so no header value can reach another policy's bucket); "default" keeps the plain key.
    -- The global chain's limits count apart from a route's own (a global 100 a minute and a
    -- route's 2 a minute shared the route's bucket, and the route refused every request).
    if conf.policy ~= "default" then c.scope = conf.policy .. "@" end
    if chain == "global" then c.scope = "global@" .. (c.scope or "") end
    return c
end

-- The fields so far with this plugin's policy added (two limits on a route, or the global
-- chain's and the route's, are both named: the fields are lists), kept in ctx.
local function add_state(ctx, policy, state)
    local p = ctx.rate_limit_policy
    if p then policy, state = p .. ", " .. policy, ctx.rate_limit_state .. ", " .. state end
    ctx.rate_limit_policy, ctx.rate_limit_state = policy, state
    return policy, state
end

function M.access(conf, ctx, c)
    -- a limit belongs to its route: two routes with the same config count apart; and to
    -- its policy: two limits on one route (per second and per minute) count apart
    local key = limit_key.of(c.key, ctx)
    if c.scope then key = c.scope .. key end
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
        local policies, states = add_state(ctx, c.policy, state)
        return response.exit(429, { error = "rate limited" }, {
            ["Retry-After"] = tostring(max(1, ceil(retry))),
            ["RateLimit-Policy"] = policies,
            ["RateLimit"] = states,
        })
    end
    limit.count("allowed")
    if conf.headers then add_state(ctx, c.policy, state) end
end

-- Every rate-limit plugin of the chain that decided added its policy; whichever plugin's
-- header_filter runs writes the same lists, the 429's included.
function M.header_filter(conf, ctx)
    if ctx.rate_limit_policy then
        response.set_header("RateLimit-Policy", ctx.rate_limit_policy)
        response.set_header("RateLimit", ctx.rate_limit_state)
    end
end

return M
