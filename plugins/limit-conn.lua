-- limit-conn: at most `max` requests in flight at once for each key (client IP, a header,
-- the consumer, or the whole route), `burst` more admitted and counted apart; the rest
-- get `status` (503).
--
-- The count lives in the core (core/upstream/conn_limit.c), one table for all workers. A
-- request's slot is released by the core when the request ends, whatever ended it (its
-- response, a client abort or RST_STREAM, an upstream error, a timeout, a plugin's error
-- or exit): not by a log phase here, which a request that never ran one would skip.
local sluice = require("sluice")
local limit_key = require("sluice.limit_key")

local request, response, limit = sluice.request, sluice.response, sluice.limit

local M = {
    name = "limit-conn",
    version = "1.0",
    schema = {
        max = { type = "integer", required = true, min = 1, max = 2147483647 }, -- the core counts in 32 bits
        burst = { type = "integer", default = 0, min = 0, max = 2147483647 },
        status = { type = "integer", default = 503, min = 200, max = 599 },
        key = { type = "string", default = "ip" }, -- sluice.limit_key
        trusted_proxies = { type = "array", items = { type = "string" }, default = {} },
    },
}

function M.check(conf)
    return limit_key.check(conf)
end

-- Once per config generation and worker: the key's parts and a cache of route indexes.
function M.prepare(conf)
    -- Each use counts its own requests: the global chain's limit-conn and a route's (by
    -- the same key) must not take from one count. A use is told apart by its bounds,
    -- which are the same on every worker and across a reload that keeps them.
    return { key = limit_key.prepare(conf), routes = {}, scope = ("%d+%d@"):format(conf.max, conf.burst) }
end

function M.access(conf, ctx, c)
    local rname = request.get_route()
    local route = c.routes[rname]
    if not route then
        route = limit.conn_route(rname)
        c.routes[rname] = route
    end
    local result = limit.conn_acquire(route, c.scope .. limit_key.of(c.key, ctx), conf.max, conf.burst)
    if result == "rejected" then
        return response.exit(conf.status, { error = "too many requests in flight" })
    end
end

return M
