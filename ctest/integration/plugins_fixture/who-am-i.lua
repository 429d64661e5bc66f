-- who-am-i (test fixture): a toy auth plugin over sluice.consumers. The X-Key header is
-- looked up as a key-auth credential; a known key sets ctx.consumer (the core sends it
-- upstream in the consumer header), an unknown one answers 401. `as` forces a name
-- (to test the core's checks on ctx.consumer).
local sluice = require("sluice")

return {
    name = "who-am-i",
    version = "1.0",
    schema = { as = { type = "string" } },
    access = function(conf, ctx)
        if conf.as then
            ctx.consumer = conf.as
            return
        end
        local name = sluice.consumers.find("key-auth", "key", sluice.request.get_header("X-Key"))
        if not name then return sluice.response.exit(401, { error = "who are you?" }) end
        local basic = sluice.consumers.credential(name, "basic-auth")
        ctx.consumer = name
        sluice.request.set_header("X-Has-Basic", basic and basic.username or "no")
    end,
}
