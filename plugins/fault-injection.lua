-- fault-injection: delays requests and answers some of them with an error, for chaos tests.
-- Each of `delay` and `abort` applies to its own random `percentage` of requests, decided
-- independently; a delayed request may then be aborted. Runs in access.
local sluice = require("sluice")
local schema = require("sluice.schema")

local response, sleep = sluice.response, sluice.sleep
local random = math.random

local M = {
    name = "fault-injection",
    version = "1.0",
    schema = {
        abort = { type = "record", fields = {
            status = { type = "integer", required = true, min = 200, max = 599 },
            body = { type = "string", default = "" },
            headers = { type = "map", values = { type = "string" }, default = {} },
            percentage = { type = "number", default = 100, min = 0, max = 100 },
        } },
        delay = { type = "record", fields = {
            duration = { type = "duration", required = true },
            percentage = { type = "number", default = 100, min = 0, max = 100 },
        } },
    },
}

function M.check(conf)
    if not conf.abort and not conf.delay then return nil, "needs abort, delay or both" end
    -- a header the core would refuse fails the config, not every aborted request
    local why = conf.abort and schema.header_map_error(conf.abort.headers)
    if why then return nil, "abort.headers: " .. why end
    return true
end

-- True for `percentage` % of calls: 100 always, 0 never (random() is in [0, 1)).
local function hit(percentage)
    return random() * 100 < percentage
end

function M.access(conf)
    local d, a = conf.delay, conf.abort
    if d and hit(d.percentage) then sleep(d.duration) end
    if a and hit(a.percentage) then return response.exit(a.status, a.body, a.headers) end
end

return M
