-- boom: raises error("boom") in the phase conf.phase (other phases do nothing).
-- misuse = "sleep" | "exit" instead misuses the API in that phase (sleep outside rewrite/access,
-- exit in header_filter) so the error comes from the sluice API itself; sleep_first > 0
-- fails only after the request's coroutine waited and was resumed.
local sluice = require("sluice")

local M = {
    name = "boom",
    version = "1.0",
    schema = {
        phase = { type = "enum", one_of = { "rewrite", "access", "header_filter", "log" }, default = "access" },
        misuse = { type = "enum", one_of = { "none", "sleep", "exit" }, default = "none" },
        sleep_first = { type = "number", default = 0, min = 0 },   -- wait, then fail (rewrite/access)
    },
}

local function run(conf, phase)
    if conf.phase ~= phase then return end
    if conf.misuse == "sleep" then sluice.sleep(0.01) return end
    if conf.misuse == "exit" then return sluice.response.exit(299, "nope") end
    if conf.sleep_first > 0 then sluice.sleep(conf.sleep_first) end
    error("boom")
end

function M.rewrite(conf) return run(conf, "rewrite") end
function M.access(conf) return run(conf, "access") end
function M.header_filter(conf) return run(conf, "header_filter") end
function M.log(conf) return run(conf, "log") end

return M
