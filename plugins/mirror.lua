-- mirror: a copy of each request (method, path and query, headers, a body up to max_body)
-- goes to another upstream or address, and its answer is dropped. The copy never delays,
-- fails or changes the request: the core sends it on the worker's loop (core/http/mirror.c)
-- with nothing waiting for it, at most max_in_flight copies per worker on their way (more
-- are dropped and counted).
local sluice = require("sluice")

local request, http = sluice.request, sluice.http
local random, tonumber = math.random, tonumber

local M = {
    name = "mirror",
    version = "1.0",
    schema = {
        upstream = { type = "string" },
        address = { type = "string" },
        sample_ratio = { type = "number", default = 1, min = 0, max = 1 },
        max_body = { type = "size", default = "64KiB" },
        timeout = { type = "duration", default = "5s", min = 0.001 },
        max_in_flight = { type = "integer", default = 64, min = 1 },
    },
}

function M.check(conf)
    if (conf.upstream == nil) == (conf.address == nil) then
        return nil, "set one of upstream (a configured upstream's name) or address (HOST:PORT)"
    end
    if conf.address and not conf.address:match("^%[?[%w.:%-]+%]?:%d+$") then
        return nil, "address must be HOST:PORT"
    end
    return true
end

function M.access(conf)
    if conf.sample_ratio < 1 and random() >= conf.sample_ratio then return end
    local cl = request.get_header("Content-Length")
    local n = cl and tonumber(cl)
    if n and n > conf.max_body then
        -- not read: the request's body streams to its upstream as it would without mirror
        return http.mirror_too_large()
    end
    -- a body within max_body is read whole first (as nginx's mirror does), so the copy
    -- carries it; a body of unannounced length is not read and not copied (too_large)
    if n and n > 0 then request.get_body() end
    local res, err = http.mirror(conf.upstream, conf.address, conf.max_in_flight, conf.timeout)
    if not res then sluice.log.warn("mirror: " .. err) end
end

return M
