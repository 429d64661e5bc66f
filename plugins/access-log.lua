-- access-log: one JSON line per request, after the response went out.
local sluice = require("sluice")
local log_fields = require("sluice.log_fields")

local json = sluice.json
local io_open, io_stderr = io.open, io.stderr

local M = {
    name = "access-log",
    version = "1.0",
    schema = {
        path = { type = "string", default = "stderr" },
        fields = { type = "array", items = { type = "string" }, default = log_fields.DEFAULT },
    },
}

-- The file to write: a relative path is under the config file's folder, like every other
-- path in a config (not the working directory, which is / under systemd).
local function target(conf)
    return conf.path == "stderr" and "stderr" or sluice.files.resolve(conf.path)
end

function M.check(conf)
    local ok, err = log_fields.check(conf.fields)
    if not ok then return nil, err end
    if conf.path ~= "stderr" then
        local f, oerr = io_open(target(conf), "a")
        if not f then return nil, "cannot open " .. target(conf) .. ": " .. tostring(oerr) end
        f:close()
    end
    return true
end

-- The file is opened once per config generation and worker (a reload reopens it: log
-- rotation); the log phase receives it.
function M.prepare(conf)
    if conf.path == "stderr" then return io_stderr end
    local fh = assert(io_open(target(conf), "a"))
    fh:setvbuf("line")
    return fh
end

function M.log(conf, ctx, fh)
    fh:write(json.encode(log_fields.build(conf.fields, ctx)) .. "\n")
end

return M
