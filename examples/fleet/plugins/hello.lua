-- A plugin whose code lives in etcd once pushed: edit it, push again, and every
-- gateway answers with the new code (no restart).
local sluice = require("sluice")

return {
    name = "hello",
    version = "1",
    schema = { say = { type = "string", default = "hello" } },
    access = function(conf)
        return sluice.response.exit(200, conf.say .. " from the fleet\n")
    end,
}
