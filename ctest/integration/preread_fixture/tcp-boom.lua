-- tcp-boom: raises in preread (misuse = "sleep": calls sluice.sleep, which preread cannot
-- do; "request": reads a request header, which a tcp session has not).
local sluice = require("sluice")

local M = {
    name = "tcp-boom",
    version = "1.0",
    schema = { misuse = { type = "enum", one_of = { "none", "sleep", "request" }, default = "none" } },
}

function M.preread(conf)
    if conf.misuse == "sleep" then return sluice.sleep(0.01) end
    if conf.misuse == "request" then return sluice.request.get_header("host") end
    error("tcp boom")
end

return M
