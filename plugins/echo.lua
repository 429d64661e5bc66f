-- echo: answers 200 with the request as JSON:
-- {"method","path","query","headers":{lower-case name: value},"body"}.
-- For smoke tests, demos and as the default config's answer.
local sluice = require("sluice")

local request, response, json = sluice.request, sluice.response, sluice.json

local M = {
    name = "echo",
    version = "1.0",
    schema = {},
}

function M.access(conf, ctx)
    local body, err = request.get_body()
    if err then
        return response.exit(413, { error = err })
    end
    local out = json.encode({
        method = request.get_method(),
        path = request.get_path(),
        query = request.get_query(),
        headers = request.get_headers(),
        body = body or "",
    })
    return response.exit(200, out .. "\n", { ["Content-Type"] = "application/json" })
end

return M
