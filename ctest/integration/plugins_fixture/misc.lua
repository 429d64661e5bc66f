-- misc: time.now(), json.encode/decode, random_hex, answered as JSON.
local sluice = require("sluice")

local M = { name = "misc", version = "1.0", schema = {} }

function M.access()
    local json = sluice.json
    local decoded = json.decode('{"a":[1,2,3],"b":{"c":"d"},"n":null}')
    local bad, err = json.decode("{not json")
    return sluice.response.exit(200, {
        now = sluice.time.now(),
        encoded = json.encode({ k = "v" }),
        a2 = decoded.a[2],
        c = decoded.b.c,
        n_is_null = decoded.n == json.null,
        bad_is_nil = bad == nil,
        bad_err = type(err) == "string",
        hex = sluice.random_hex(20),
    })
end

return M
