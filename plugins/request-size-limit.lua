-- request-size-limit: a request body over `max` bytes is answered 413 before any of it
-- reaches the upstream. It runs in rewrite, so the cap is set before any plugin reads the
-- body. A Content-Length over max is refused from the head alone (the body is never read);
-- a body of unannounced length (chunked, or HTTP/2 without content-length) is read whole
-- into the gateway, at most max bytes, and sent upstream only once complete.
local sluice = require("sluice")

local request, response = sluice.request, sluice.response
local tonumber = tonumber

local M = {
    name = "request-size-limit",
    version = "1.0",
    schema = {
        max = { type = "size", required = true },
    },
}

local TOO_LARGE = { error = "request body too large" }

function M.rewrite(conf)
    local max = conf.max
    -- the core has already refused a malformed or conflicting length
    local cl = tonumber(request.get_header("Content-Length") or "")
    if cl then
        if cl > max then return response.exit(413, TOO_LARGE) end
        return
    end
    -- No length announced: chunked, HTTP/2 without content-length, or no body at all (read
    -- at once: nothing waits).
    local n, err = request.read_body(max)
    if not n then return response.exit(err == TOO_LARGE.error and 413 or 400, { error = err }) end
end

return M
