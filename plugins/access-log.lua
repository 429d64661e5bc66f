-- access-log: one JSON line per request, after the response went out.
local sluice = require("sluice")

local request, json = sluice.request, sluice.json
local io_open, io_stderr, date, ipairs = io.open, io.stderr, os.date, ipairs

local FIELDS = { "ts", "request_id", "route", "method", "path", "status", "bytes_in", "bytes_out",
                 "duration_ms", "upstream", "target", "client" }
local KNOWN = {}
for _, f in ipairs(FIELDS) do KNOWN[f] = true end
KNOWN.query, KNOWN.host, KNOWN.user_agent, KNOWN.consumer = true, true, true, true

local M = {
    name = "access-log",
    version = "1.0",
    schema = {
        path = { type = "string", default = "stderr" },
        fields = { type = "array", items = { type = "string" }, default = FIELDS },
    },
}

function M.check(conf)
    for _, f in ipairs(conf.fields) do
        if not KNOWN[f] then return nil, ("unknown field '%s'"):format(f) end
    end
    if conf.path ~= "stderr" then
        local f, err = io_open(conf.path, "a")
        if not f then return nil, "cannot open " .. conf.path .. ": " .. tostring(err) end
        f:close()
    end
    return true
end

-- The file is opened once per config generation and worker (a reload reopens it: log
-- rotation); the log phase receives it.
function M.prepare(conf)
    if conf.path == "stderr" then return io_stderr end
    local fh = assert(io_open(conf.path, "a"))
    fh:setvbuf("line")
    return fh
end

local function value(f, st, ctx)
    if f == "ts" then
        local now = sluice.time.now()
        return date("!%Y-%m-%dT%H:%M:%S", math.floor(now)) .. ("%.3fZ"):format(now % 1):sub(2)
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
    elseif f == "duration_ms" then return math.floor(st.duration_ms * 1000 + 0.5) / 1000
    elseif f == "upstream" then return st.upstream ~= "" and st.upstream or nil
    elseif f == "target" then return st.target ~= "" and st.target or nil
    elseif f == "client" then return request.get_client_ip()
    elseif f == "consumer" then return ctx.consumer
    end
end

function M.log(conf, ctx, fh)
    local st = request.get_stats()
    local line = {}
    for _, f in ipairs(conf.fields) do line[f] = value(f, st, ctx) end
    fh:write(json.encode(line) .. "\n")
end

return M
