-- sluice.log_fields: the fields of an access-log line, built for the running request (in
-- its log phase): shared by access-log (a file) and http-logger (an HTTP collector).
--
--   local log_fields = require("sluice.log_fields")
--   local ok, err = log_fields.check(conf.fields)  -- names known?
--   local line = log_fields.build(conf.fields, ctx) -- { ts = ..., status = ..., ... }
local sluice = require("sluice")

local request = sluice.request
local date, floor, ipairs = os.date, math.floor, ipairs

local _M = {}

-- The default fields, in order.
_M.DEFAULT = { "ts", "request_id", "route", "method", "path", "status", "bytes_in", "bytes_out",
               "duration_ms", "upstream", "target", "client" }
local KNOWN = {}
for _, f in ipairs(_M.DEFAULT) do KNOWN[f] = true end
KNOWN.query, KNOWN.host, KNOWN.user_agent, KNOWN.consumer = true, true, true, true

function _M.check(fields)
    for _, f in ipairs(fields) do
        if not KNOWN[f] then return nil, ("unknown field '%s'"):format(f) end
    end
    return true
end

local function value(f, st, ctx)
    if f == "ts" then
        -- whole milliseconds, truncated: rounding the fraction alone turned x.9996 into
        -- "x.000", a second early
        local ms = floor(sluice.time.now() * 1000)
        return date("!%Y-%m-%dT%H:%M:%S", floor(ms / 1000)) .. (".%03dZ"):format(ms % 1000)
    elseif f == "request_id" then return ctx.request_id or request.get_id()
    elseif f == "route" then return st.route
    elseif f == "method" then return request.get_method()
    elseif f == "path" then return request.get_path()
    elseif f == "query" then return request.get_query()
    elseif f == "host" then return request.get_host()
    elseif f == "user_agent" then return request.get_header("User-Agent")
    elseif f == "status" then return st.status
    elseif f == "bytes_in" then return st.bytes_in
    elseif f == "bytes_out" then return st.bytes_out
    elseif f == "duration_ms" then return floor(st.duration_ms * 1000 + 0.5) / 1000
    elseif f == "upstream" then return st.upstream ~= "" and st.upstream or nil
    elseif f == "target" then return st.target ~= "" and st.target or nil
    elseif f == "client" then return request.get_client_ip()
    elseif f == "consumer" then return ctx.consumer
    end
end

-- The running request's line as a table of the fields asked for (absent ones left out).
function _M.build(fields, ctx)
    local st = request.get_stats()
    local line = {}
    for _, f in ipairs(fields) do line[f] = value(f, st, ctx) end
    return line
end

return _M
