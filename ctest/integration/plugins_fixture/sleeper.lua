-- sleeper: sluice.sleep(conf.seconds) in access, then answers 200.
local sluice = require("sluice")

local M = {
    name = "sleeper",
    version = "1.0",
    schema = {
        seconds = { type = "number", default = 0.1, min = 0 },
        answer = { type = "boolean", default = true },
    },
}

function M.access(conf)
    local t0 = sluice.time.now()
    sluice.sleep(conf.seconds)
    local waited = sluice.time.now() - t0
    if conf.answer then
        return sluice.response.exit(200, ("slept %.3f"):format(waited))
    end
    sluice.request.set_header("X-Slept", ("%.3f"):format(waited))
end

return M
