-- http-logger: each request's access-log fields as a JSON object, batched to an HTTP
-- collector: POSTs of a JSON array of up to batch_max lines, every `flush` or as soon as
-- batch_max lines wait. The core sends them from the worker's loop (core/http/
-- http_logger.c), never from the request's coroutine; the queue is bounded (queue_max:
-- lines past it are dropped and counted), and a failed batch is retried with a doubling
-- backoff `retries` times, then dropped and counted. Kong's http-log shape (`endpoint`,
-- `headers`, `timeout`, `queue` sizes).
local sluice = require("sluice")
local log_fields = require("sluice.log_fields")

local http, json = sluice.http, sluice.json
local pcall, pairs, tostring = pcall, pairs, tostring

-- Framing and the connection are the sender's (as for sluice.http.request).
local FRAMING = { ["content-length"] = true, ["transfer-encoding"] = true, connection = true,
                  ["keep-alive"] = true, te = true, upgrade = true, trailer = true }

local M = {
    name = "http-logger",
    version = "1.0",
    schema = {
        endpoint = { type = "string", required = true },
        headers = { type = "map", values = { type = "string" }, default = {} },
        timeout = { type = "duration", default = "5s", min = 0.001 },
        batch_max = { type = "integer", default = 100, min = 1 },
        flush = { type = "duration", default = "1s", min = 0.001 },
        queue_max = { type = "integer", default = 10000, min = 1 },
        retries = { type = "integer", default = 3, min = 0, max = 10 },
        fields = { type = "array", items = { type = "string" }, default = log_fields.DEFAULT },
    },
}

function M.check(conf)
    local ok, err = log_fields.check(conf.fields)
    if not ok then return nil, err end
    local good, res = pcall(http.check_url, conf.endpoint)
    if not good then return nil, "endpoint: " .. tostring(res):gsub("^.-:%d+: ", "") end
    if not res then return nil, "endpoint: https collectors are not supported yet (http:// only)" end
    for k, v in pairs(conf.headers) do
        if not k:match("^[!#$%%&'*+%-.^_`|~%w]+$") or v:find("[%z\r\n]") then
            return nil, ("headers: '%s' is not a valid header"):format(k)
        end
        if FRAMING[k:lower()] then return nil, ("headers: '%s' is set by the sender itself"):format(k) end
    end
    return true
end

-- Once per config generation and worker: the logger is opened at the first line (it needs
-- the worker, which a request carries) and kept here.
function M.prepare()
    return {}
end

function M.log(conf, ctx, c)
    local lg = c.logger
    if not lg then
        local err
        lg, err = http.logger({ url = conf.endpoint, headers = conf.headers, batch_max = conf.batch_max,
                                queue_max = conf.queue_max, flush = conf.flush, timeout = conf.timeout,
                                retries = conf.retries })
        if not lg then return sluice.log.err("http-logger: " .. err) end
        c.logger = lg
    end
    http.logger_push(lg, json.encode(log_fields.build(conf.fields, ctx)))
end

return M
