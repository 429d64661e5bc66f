-- cors: answers preflight requests itself and adds CORS headers to responses.
local sluice = require("sluice")

local request, response = sluice.request, sluice.response
local concat, floor = table.concat, math.floor

local M = {
    name = "cors",
    version = "1.0",
    schema = {
        origins = { type = "array", items = { type = "string" }, default = { "*" } },
        methods = { type = "array", items = { type = "string" },
                    default = { "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS" } },
        headers = { type = "array", items = { type = "string" }, default = {} },
        expose_headers = { type = "array", items = { type = "string" }, default = {} },
        credentials = { type = "boolean", default = false },
        max_age = { type = "duration", default = 600, min = 0 }, -- 600, "10m"
    },
}

function M.check(conf)
    for _, o in ipairs(conf.origins) do
        if o == "*" and conf.credentials then
            return nil, "credentials cannot be used with origin '*' (browsers refuse it)"
        end
    end
    return true
end

local function allowed_origin(conf, origin)
    for _, o in ipairs(conf.origins) do
        if o == "*" then return "*" end
        if o == origin then return origin end
    end
    return nil
end

function M.rewrite(conf, ctx)
    local origin = request.get_header("Origin")
    if not origin then return end
    local allow = allowed_origin(conf, origin)
    ctx.cors_origin = allow
    if request.get_method() == "OPTIONS" and request.get_header("Access-Control-Request-Method") then
        if not allow then return response.exit(403, { error = "origin not allowed" }) end
        local h = {
            ["Access-Control-Allow-Origin"] = allow,
            ["Access-Control-Allow-Methods"] = concat(conf.methods, ", "),
            ["Access-Control-Max-Age"] = ("%.0f"):format(floor(conf.max_age)), -- whole seconds, in digits
            ["Vary"] = "Origin",
        }
        local req_headers = request.get_header("Access-Control-Request-Headers")
        if #conf.headers > 0 then
            h["Access-Control-Allow-Headers"] = concat(conf.headers, ", ")
        elseif req_headers then
            h["Access-Control-Allow-Headers"] = req_headers
        end
        if conf.credentials then h["Access-Control-Allow-Credentials"] = "true" end
        return response.exit(204, nil, h)
    end
end

-- Is every origin answered "*"? Then no answer depends on the request's Origin.
local function any_origin(conf)
    for _, o in ipairs(conf.origins) do
        if o == "*" then return true end
    end
    return false
end

function M.header_filter(conf, ctx)
    -- a preflight answered in rewrite already carries its headers
    if response.get_header("Access-Control-Allow-Origin") then return end
    -- With a list of origins the answer depends on Origin, also when it carries no CORS
    -- header (another origin, or no Origin at all): without Vary a cache would hand that
    -- answer to an allowed origin (Fetch, "CORS protocol and HTTP caches").
    if not any_origin(conf) then response.add_header("Vary", "Origin") end
    local allow = ctx.cors_origin
    if not allow then return end
    response.set_header("Access-Control-Allow-Origin", allow)
    if conf.credentials then response.set_header("Access-Control-Allow-Credentials", "true") end
    if #conf.expose_headers > 0 then
        response.set_header("Access-Control-Expose-Headers", concat(conf.expose_headers, ", "))
    end
end

return M
