-- http-call (test fixture): makes one sluice.http.request described by the incoming
-- request's X-Call-* headers, and answers JSON: the outcome, or the error, and how long
-- it took. `phase` picks where the call is made (header_filter: a misuse).
local sluice = require("sluice")

local function call()
    local req = sluice.request
    local opts = {
        url = req.get_header("X-Call-Url"),
        method = req.get_header("X-Call-Method"),
        body = req.get_header("X-Call-Body"),
        timeout = tonumber(req.get_header("X-Call-Timeout") or ""),
        max_body = tonumber(req.get_header("X-Call-Max-Body") or ""),
        ca = req.get_header("X-Call-Ca"),
    }
    if req.get_header("X-Call-Verify") == "off" then opts.ssl_verify = false end
    local size = tonumber(req.get_header("X-Call-Body-Size") or "")
    if size then opts.body = string.rep("0123456789abcdef", size / 16) end
    local hv = req.get_header("X-Call-Header")
    if hv then opts.headers = { ["X-Sent"] = hv } end
    if req.get_header("X-Call-Inject") then opts.headers = { ["X-Bad"] = "a\r\nInjected: yes" } end
    local t0 = sluice.time.now()
    local res, err = sluice.http.request(opts)
    local out = { took = sluice.time.now() - t0 }
    if res then
        out.status, out.headers, out.body_len = res.status, res.headers, #res.body
        out.body = #res.body <= 4096 and res.body or nil
        out.sha256 = (sluice.crypto.digest("sha256", res.body):gsub(".", function(c)
            return ("%02x"):format(c:byte())
        end))
    else
        out.err = err
    end
    return out
end

return {
    name = "http-call",
    version = "1.0",
    schema = { phase = { type = "enum", one_of = { "access", "rewrite", "header_filter" }, default = "access" } },
    rewrite = function(conf)
        if conf.phase == "rewrite" then return sluice.response.exit(200, call()) end
    end,
    access = function(conf)
        if conf.phase == "access" then return sluice.response.exit(200, call()) end
    end,
    header_filter = function(conf)
        if conf.phase == "header_filter" then call() end
    end,
}
