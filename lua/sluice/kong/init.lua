-- sluice.kong: the `kong` PDK subset Kong plugins run on, backed by the sluice API.
--
-- Each function keeps Kong's name, arguments and return values (docs/plugins.md, "Kong
-- plugins", lists them and the gaps). The tables are strict: reading a name sluice does not
-- provide raises "kong.X.Y is not supported", and sluice.kong.plugin checks a plugin's
-- source against these same tables at load, so an unsupported call is found before the
-- first request. One `kong` table per VM; per-request state lives in the request's ctx
-- (sluice.base.ctx), which the phase dispatcher sets and restores across waits.
local sluice = require("sluice")
local base = require("sluice.base")
local cjson = require("cjson.safe")
local consumers = require("sluice.consumers")

local request, response, client = sluice.request, sluice.response, sluice.client
local shared = sluice.shared
local type, pairs, ipairs, tostring, tonumber, error, select, setmetatable, rawget =
    type, pairs, ipairs, tostring, tonumber, error, select, setmetatable, rawget
local lower, gsub, find, sub, concat, sort = string.lower, string.gsub, string.find, string.sub,
    table.concat, table.sort

local table_new, table_clear = require("table.new"), require("table.clear")

local _M = {}

-- kong.response.exit in rewrite and access ends the phase function, as Kong's ends the
-- handler: it raises sluice.base's UNWIND, which the core takes for "a plugin answered"
-- (no pcall around the method: one would keep its traces from compiling). ngx.exit(ngx.OK)
-- ends the method without an answer: it raises NGX_OK, which the pcall sluice.kong.plugin
-- puts around the methods of a plugin whose source calls ngx.exit catches.
_M.EXIT = base.UNWIND
_M.NGX_OK = setmetatable({}, { __tostring = function() return "ngx.exit(ngx.OK)" end })
-- phase ids as the dispatcher numbers them (sluice.loader.PHASES, from 0: sluice.h SL_PHASE_*)
local REWRITE, ACCESS
for i, name in ipairs(require("sluice.loader").PHASES) do
    if name == "rewrite" then REWRITE = i - 1 elseif name == "access" then ACCESS = i - 1 end
end

-- True in the phases where kong.response.exit and ngx.exit end the method.
function _M.ends_method()
    local ph = base.phase
    return ph == ACCESS or ph == REWRITE
end
local ends_method = _M.ends_method

-- Keys in the request's ctx.
local BODY_BUF = "kong.body"

local function strict(t, path)
    return setmetatable(t, { __index = function(_, k)
        error(("%s.%s is not supported by sluice's Kong layer (docs/plugins.md, \"Kong plugins\")")
              :format(path, tostring(k)), 2)
    end })
end
_M.strict = strict

local kong = { version = "3.4.0", version_num = 3004000 }
_M.kong = kong

-- ---------------------------------------------------------------- helpers

-- "X_Foo" and "x-foo" name one header, as Kong's get_header reads ngx.var.http_x_foo. The
-- names a plugin passes are mostly its source's constants: each is looked at once and its
-- answer kept (up to HNAMES_MAX names; past that, looked at on every call), so the
-- per-request call is a table lookup.
local HNAMES_MAX, hnames_n = 512, 0
local function hname_of(name)
    if not find(name, "_", 1, true) then return name end
    return (gsub(name, "_", "-"))
end
local hnames = setmetatable({}, { __index = function(t, name)
    local v = hname_of(name)
    if hnames_n < HNAMES_MAX then
        hnames_n = hnames_n + 1
        t[name] = v
    end
    return v
end })
local function hname(name)
    if type(name) ~= "string" then error("header name must be a string", 3) end
    return hnames[name]
end

local function unescape(s)
    s = gsub(s, "+", " ")
    return (gsub(s, "%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function escape(s)
    return (gsub(tostring(s), "[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end))
end
_M.escape_uri, _M.unescape_uri = escape, unescape

-- A query or form string as Kong's table: value, true for a bare name, a list for repeats.
-- With max (> 0), the first max arguments and "truncated" when there were more (ngx's).
local function decode_args(s, max)
    local out, n = {}, 0
    for pair in s:gmatch("[^&]+") do
        n = n + 1
        if max and max > 0 and n > max then return out, "truncated" end
        local k, eq, v = pair:match("^([^=]*)(=?)(.*)$")
        k = unescape(k)
        base.args_put(out, k, eq == "" and true or unescape(v))
    end
    return out
end
_M.decode_args = decode_args

-- A table as a query string, keys sorted (Kong's encode_args): lists repeat the name, true
-- gives a bare name, false drops it.
local function encode_args(t)
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = tostring(k) end
    sort(keys)
    local out = {}
    for _, k in ipairs(keys) do
        local v = t[k]
        local vs = type(v) == "table" and v or { v }
        for _, x in ipairs(vs) do
            if x == true then
                out[#out + 1] = escape(k)
            elseif x ~= false then
                out[#out + 1] = escape(k) .. "=" .. escape(x)
            end
        end
    end
    return concat(out, "&")
end
_M.encode_args = encode_args

-- ---------------------------------------------------------------- kong.request

local kreq = {}
kong.request = kreq

function kreq.get_scheme() return request.get_scheme() end
function kreq.get_host() return request.get_host() end
function kreq.get_port() return request.get_port() end
function kreq.get_method() return request.get_method() end
-- kong.request is the client's request: kong.service.request.set_path changes what goes
-- upstream, not these (Kong's read ngx.var.request_uri). The query is ngx.var.args, which
-- Kong's set_query and set_raw_query do change: get_raw_query and get_query see them.
local orig_path = request.get_original_path
function kreq.get_path() return orig_path() end
function kreq.get_raw_path() return orig_path() end
function kreq.get_raw_query() return request.get_query() end

function kreq.get_path_with_query()
    local q = request.get_original_query()
    if q == "" then return orig_path() end
    return orig_path() .. "?" .. q
end

-- The X-Forwarded-* of a request whose peer is one of the listener's trusted_proxies (Kong's
-- trusted_ips), else what the request itself says. Host and port may come from
-- X-Forwarded-Host ("user@host:port").
local function forwarded(name)
    if client.is_trusted(request.get_client_ip()) ~= true then return nil end
    return request.get_header(name)
end

local function forwarded_host()
    local h = forwarded("X-Forwarded-Host")
    if not h then return nil end
    local at = find(h, "@", 1, true)
    if at then h = sub(h, at + 1) end
    local colon = find(h, ":", 1, true)
    if colon then return sub(h, 1, colon - 1), sub(h, colon + 1) end
    return h
end

local function port_of(s)
    local n = tonumber(s)
    if n and n >= 1 and n <= 65535 and n % 1 == 0 then return n end
    return nil
end

function kreq.get_forwarded_scheme()
    local s = forwarded("X-Forwarded-Proto")
    return s and lower(s) or request.get_scheme()
end

function kreq.get_forwarded_host()
    local h = forwarded_host()
    return h and lower(h) or request.get_host()
end

function kreq.get_forwarded_port()
    local p = port_of(forwarded("X-Forwarded-Port"))
    if p then return p end
    local _, hp = forwarded_host()
    return port_of(hp) or request.get_port()
end

function kreq.get_forwarded_path() return forwarded("X-Forwarded-Path") or orig_path() end
function kreq.get_forwarded_prefix() return forwarded("X-Forwarded-Prefix") end

function kreq.get_query_arg(name) return request.get_query_arg(name) end

-- Kong's limits on the arguments and header fields a table holds: 100 unless told, 1..1000.
local MAX_DEFAULT, MAX_MAX = 100, 1000
local function limit(n, what)
    if n == nil then return MAX_DEFAULT end
    if type(n) ~= "number" then error(what .. " must be a number", 3) end
    if n < 1 then error(what .. " must be >= 1", 3) end
    if n > MAX_MAX then error(what .. " must be <= " .. MAX_MAX, 3) end
    return n
end
_M.limit = limit

-- The query's first max arguments (all when max is 0), and "truncated" when it had more.
local function query_args(max)
    local q = request.get_query()
    if max == 0 then return request.get_query_args() end
    -- fewer '&' than max: every argument fits, read by the core
    local amps, at = 0, 0
    while amps < max do
        at = find(q, "&", at + 1, true)
        if not at then return request.get_query_args() end
        amps = amps + 1
    end
    return decode_args(q, max)
end
_M.query_args = query_args

function kreq.get_query(max_args) return query_args(limit(max_args, "max_args")) end

function kreq.get_header(name) return request.get_header(hname(name)) end

-- A headers table's names read in any case, with `_` for `-` (ngx.req.get_headers' and
-- ngx.resp.get_headers' metatable): h["Content-Type"] and h.content_type are h["content-type"].
local HEADERS_MT = { __index = function(t, name)
    if type(name) ~= "string" then return nil end
    local n = lower(hname_of(name))
    if n == name then return nil end
    return rawget(t, n)
end }

-- { lower-case name = value }, a list of values for a repeated header (ngx.req.get_headers).
-- max counts fields, as ngx does: a repeated header's values count one each.
local function headers_of(side, max)
    local all = side.get_headers(true)
    if max and max > 0 then
        local n = 0
        for _, v in pairs(all) do n = n + (type(v) == "table" and #v or 1) end
        if n <= max then max = nil end
    end
    if not (max and max > 0) then return setmetatable(all, HEADERS_MT) end
    local out = setmetatable({}, HEADERS_MT)
    local n = 0
    for k, v in pairs(all) do
        if type(v) == "table" then
            local keep = {}
            for _, x in ipairs(v) do
                if n >= max then break end
                n = n + 1
                keep[#keep + 1] = x
            end
            if #keep == 1 then out[k] = keep[1] elseif #keep > 1 then out[k] = keep end
        elseif n < max then
            n = n + 1
            out[k] = v
        end
        if n >= max then break end
    end
    return out
end

function kreq.get_headers(max_headers) return headers_of(request, limit(max_headers, "max_headers")) end
function _M.headers(max) return headers_of(request, max) end -- ngx.req.get_headers: 0 is all

-- The body as a string ("" when there is none), or nil, err.
function kreq.get_raw_body()
    local body, err = request.get_body()
    if body == nil then
        if err then return nil, err end
        return ""
    end
    return body
end

-- The body decoded by its content type (or mimetype): a table, nil, the mime type; or
-- nil, err, mime type. application/json and application/x-www-form-urlencoded.
function kreq.get_body(mimetype, max_args)
    local ct = mimetype or request.get_header("Content-Type")
    if not ct then return nil, "missing content type" end
    ct = lower(ct)
    local body, err = kreq.get_raw_body()
    if not body then return nil, err, ct end
    if find(ct, "application/json", 1, true) then
        local t = cjson.decode(body)
        if type(t) ~= "table" then return nil, "invalid json body", "application/json" end
        return t, nil, "application/json"
    elseif find(ct, "application/x-www-form-urlencoded", 1, true) then
        return (decode_args(body, limit(max_args, "max_args"))), nil, "application/x-www-form-urlencoded"
    end
    return nil, "unsupported content type '" .. ct .. "'", ct
end

-- ---------------------------------------------------------------- kong.response

local kresp = {}
kong.response = kresp

-- A header value may be a list (Kong's normalize_multi_header): one field per element, which
-- sluice's own set_header/add_header/exit do (docs/plugins.md).
function kresp.get_status() return response.get_status() end
function kresp.get_header(name) return response.get_header(hname(name)) end
function kresp.get_headers(max_headers) return headers_of(response, limit(max_headers, "max_headers")) end
kresp.set_header = response.set_header -- the same function: no call in between, and an
kresp.add_header = response.add_header -- error is reported at the plugin's line
-- Content-Length and Transfer-Encoding are the gateway's: it frames a body a body_filter
-- changed by itself, so Kong's usual clear_header("Content-Length") before one is a no-op.
local FRAMING = { ["content-length"] = true, ["transfer-encoding"] = true }
function kresp.clear_header(name)
    if type(name) == "string" and FRAMING[lower(name)] then return end
    return response.clear_header(name)
end
function kresp.set_headers(headers)
    for k, v in pairs(headers) do response.set_header(k, v) end
end

-- Ends the request with this answer; in rewrite and access the plugin's phase function
-- ends here too, as in Kong. A table body is JSON.
local EXIT = _M.EXIT
function kresp.exit(status, body, headers)
    -- Kong also takes it in header_filter (no body: a new status); sluice's answer is
    -- decided by then. Said at the plugin's line, not at this file's.
    if not ends_method() then
        error("kong.response.exit works in rewrite and access only in sluice's Kong layer (docs/plugins.md, \"Kong plugins\")", 2)
    end
    if type(status) ~= "number" then error("code must be a number", 2) end
    if type(body) == "table" then
        headers = headers or {}
        local has_ct = false
        for k in pairs(headers) do if lower(k) == "content-type" then has_ct = true end end
        if not has_ct then
            response.set_header("Content-Type", "application/json; charset=utf-8")
        end
        body = cjson.encode(body)
    end
    response.exit(status, body, headers) -- a list value is one field per element there too
    if ends_method() then error(EXIT, 0) end
end

-- kong.response.error(status, message?, headers?): an error answer in the format the
-- client's Accept prefers (JSON, HTML, XML or plain text, JSON by default), with Kong's
-- message for the status when none is given; Kong 3.4's templates.
local ERROR_MESSAGES = {
    [400] = "Bad request", [401] = "Unauthorized", [402] = "Payment required", [403] = "Forbidden",
    [404] = "Not found", [405] = "Method not allowed", [406] = "Not acceptable",
    [407] = "Proxy authentication required", [408] = "Request timeout", [409] = "Conflict", [410] = "Gone",
    [411] = "Length required", [412] = "Precondition failed", [413] = "Payload too large",
    [414] = "URI too long", [415] = "Unsupported media type", [416] = "Range not satisfiable",
    [417] = "Expectation failed", [418] = "I'm a teapot", [421] = "Misdirected request",
    [422] = "Unprocessable entity", [423] = "Locked", [424] = "Failed dependency", [425] = "Too early",
    [426] = "Upgrade required", [428] = "Precondition required", [429] = "Too many requests",
    [431] = "Request header fields too large", [451] = "Unavailable for legal reasons",
    [494] = "Request header or cookie too large", [500] = "An unexpected error occurred",
    [501] = "Not implemented", [502] = "An invalid response was received from the upstream server",
    [503] = "The upstream server is currently unavailable", [504] = "The upstream server is timing out",
    [505] = "HTTP version not supported", [506] = "Variant also negotiates", [507] = "Insufficient storage",
    [508] = "Loop detected", [510] = "Not extended", [511] = "Network authentication required",
}
local JSON_CT, HTML_CT = "application/json; charset=utf-8", "text/html; charset=utf-8"
local XML_CT, PLAIN_CT = "application/xml; charset=utf-8", "text/plain; charset=utf-8"
local MEDIA = { ["application/json"] = JSON_CT, ["text/html"] = HTML_CT, ["application/xml"] = XML_CT,
                ["text/plain"] = PLAIN_CT, ["application/*"] = JSON_CT, ["text/*"] = PLAIN_CT }
local function xml_escape(m)
    return (gsub(m, "[<>&\"']", { ["<"] = "&lt;", [">"] = "&gt;", ["&"] = "&amp;", ['"'] = "&quot;", ["'"] = "&apos;" }))
end
local TEMPLATES = {
    [JSON_CT] = function(m) return '{\n  "message":' .. cjson.encode(m) .. '\n}' end,
    [HTML_CT] = function(m)
        return "<!doctype html>\n<html>\n  <head>\n    <meta charset=\"utf-8\">\n    <title>Error</title>\n"
            .. "  </head>\n  <body>\n    <h1>Error</h1>\n    <p>" .. xml_escape(m) .. ".</p>\n  </body>\n</html>\n"
    end,
    [XML_CT] = function(m)
        return '<?xml version="1.0" encoding="UTF-8"?>\n<error>\n  <message>' .. xml_escape(m) .. "</message>\n</error>\n"
    end,
    [PLAIN_CT] = function(m) return m .. "\n" end,
}

-- The media type of the highest q in Accept (the first of equals); an unknown type counts
-- as JSON, as Kong's get_response_type does.
local function response_type(accept)
    local ct, best = JSON_CT, 0
    if type(accept) ~= "string" then return ct end
    for item in accept:gmatch("[^,]+") do
        local media = item:match("^%s*([^;%s]+)")
        if media then
            local q = tonumber(item:match(";%s*[qQ]%s*=%s*([%d.]+)")) or 1
            if q > best then
                best = q
                ct = MEDIA[lower(media)] or JSON_CT
            end
        end
    end
    return ct
end

function kresp.error(status, message, headers)
    if not ends_method() then
        error("kong.response.error works in rewrite and access only in sluice's Kong layer (docs/plugins.md, \"Kong plugins\")", 2)
    end
    if type(status) ~= "number" or status < 400 or status > 599 then
        error("code must be a number between 400 and 599", 2)
    end
    if message ~= nil and type(message) ~= "string" then error("message must be a nil or a string", 2) end
    if headers ~= nil and type(headers) ~= "table" then error("headers must be a nil or table", 2) end
    local out, ct = {}, nil
    for k, v in pairs(headers or {}) do
        out[k] = v
        if type(k) == "string" and lower(k) == "content-type" then ct = type(v) == "table" and v[1] or v end
    end
    if not ct then
        ct = response_type(request.get_header("Accept"))
        out["Content-Type"] = ct
    end
    local render = TEMPLATES[ct] or TEMPLATES[MEDIA[lower(ct:match("^[^;%s]+") or "")] or JSON_CT]
    local msg = message or ERROR_MESSAGES[status] or ("The upstream server responded with " .. status)
    return kresp.exit(status, render(msg), out)
end

-- body_filter only: the whole response body once its last piece is here (nil before).
function kresp.get_raw_body()
    local c = base.ctx
    local arg = _M.arg
    local buf = c[BODY_BUF]
    if not buf then buf = {}; c[BODY_BUF] = buf end
    if arg[1] and arg[1] ~= "" then buf[#buf + 1] = arg[1] end
    arg[1] = ""
    if not arg[2] then return nil end
    local body = concat(buf)
    c[BODY_BUF] = nil
    arg[1] = body
    return body
end

-- body_filter only: the body is this and ends here, as Kong's (ngx.arg[1] = body,
-- ngx.arg[2] = true): on a piece before the last, the rest of the upstream's body is
-- dropped (sluice.kong.plugin stops calling the method for it).
function kresp.set_raw_body(body)
    if type(body) ~= "string" then error("body must be a string", 2) end
    local arg = _M.arg
    arg[1], arg[2] = body, true
    base.ctx[BODY_BUF] = nil
end

-- ---------------------------------------------------------------- kong.service

local service = { request = {}, response = {} }
kong.service = service
local sreq, sresp = service.request, service.response

function service.set_upstream(name)
    local ok, err = sluice.upstream.set(name)
    if not ok then return nil, err end
    return true
end

function service.set_target(host, port)
    if type(host) ~= "string" or type(port) ~= "number" then error("host and port are needed", 2) end
    local ok, err = sluice.upstream.set(host .. ":" .. port)
    if not ok then return nil, err end
    return true
end

-- sluice's own functions where nothing is added: a refused call is reported at the
-- plugin's line, not at a line of this file (so are the tail calls below)
sreq.set_header = request.set_header
sreq.add_header = request.add_header
sreq.clear_header = request.clear_header
function sreq.set_headers(headers)
    for k, v in pairs(headers) do request.set_header(k, v) end
end
sreq.set_path = request.set_path
sreq.set_raw_query = request.set_query
function sreq.set_query(args)
    if type(args) ~= "table" then error("args must be a table", 2) end
    return request.set_query(encode_args(args))
end

function sreq.set_raw_body(body)
    if type(body) ~= "string" then error("body must be a string", 2) end
    request.get_body() -- the body is read before it is replaced
    return request.set_body(body)
end

-- Encodes args by mimetype (or the request's Content-Type; JSON when there is none) and
-- sets it with its Content-Type. Returns true, or nil, err.
function sreq.set_body(args, mimetype)
    if type(args) ~= "table" then error("args must be a table", 2) end
    local ct = lower(mimetype or request.get_header("Content-Type") or "application/json")
    local body
    if find(ct, "application/json", 1, true) then
        body = cjson.encode(args)
        ct = "application/json"
    elseif find(ct, "application/x-www-form-urlencoded", 1, true) then
        body = encode_args(args)
        ct = "application/x-www-form-urlencoded"
    else
        return nil, "unsupported content type '" .. ct .. "'"
    end
    sreq.set_raw_body(body)
    request.set_header("Content-Type", ct)
    return true
end

-- Kong: nil when no upstream answered (kong.response.exit, an error of the gateway's).
function sresp.get_status() return response.get_upstream_status() end
function sresp.get_header(name) return response.get_header(hname(name)) end
function sresp.get_headers(max_headers) return headers_of(response, limit(max_headers, "max_headers")) end

-- ---------------------------------------------------------------- kong.ctx

-- kong.ctx.shared is the request's ctx: what sluice plugins of the chain see as ctx.
-- kong.ctx.plugin is a table per plugin per request. Requests reuse ctx tables (lua_host.c
-- keeps a pool of them), and each ctx table keeps one table per Kong plugin, emptied when a
-- new request (base.serial) first asks for it: no table is made per request. (A plugin that
-- keeps kong.ctx.plugin past its request, in a timer say, sees it emptied by a later one.)
local plugin_ctx = setmetatable({}, { __mode = "k" }) -- ctx table -> { [plugin] = table }
local plugin_serial = setmetatable({}, { __mode = "k" }) -- such a table -> the request's serial
local function plugin_table(c)
    local of = plugin_ctx[c]
    if not of then
        of = {}
        plugin_ctx[c] = of
    end
    local name, serial = base.plugin, base.serial
    local t = of[name]
    if not t then
        t = table_new(0, 4)
        of[name] = t
        plugin_serial[t] = serial
    elseif plugin_serial[t] ~= serial then -- the first use in this request
        table_clear(t)
        plugin_serial[t] = serial
    end
    return t
end

kong.ctx = setmetatable({}, { __index = function(_, k)
    local c = base.ctx
    if k == "plugin" then
        if not c then return nil end
        return plugin_table(c)
    end
    if k == "shared" then return c end
    error(("kong.ctx.%s is not supported by sluice's Kong layer"):format(tostring(k)), 2)
end })

-- ---------------------------------------------------------------- kong.log

local klog = {}
kong.log = klog
local slog = sluice.log

-- Kong joins the arguments without a separator (ngx.log does).
local function joined(...)
    local n = select("#", ...)
    if n == 1 then return tostring((...)) end
    local parts = {}
    for i = 1, n do parts[i] = tostring((select(i, ...))) end
    return concat(parts)
end
_M.joined = joined

local function logger(fn) return function(...) fn(joined(...)) end end
klog.debug = logger(slog.debug)
klog.info = logger(slog.info)
klog.notice = logger(slog.info)
klog.warn = logger(slog.warn)
klog.err = logger(slog.err)
klog.crit = logger(slog.err)
klog.alert = logger(slog.err)
klog.emerg = logger(slog.err)
function klog.inspect(...)
    local parts = {}
    for i = 1, select("#", ...) do
        local v = select(i, ...)
        parts[i] = type(v) == "table" and (cjson.encode(v) or tostring(v)) or tostring(v)
    end
    slog.debug(concat(parts, " "))
end

-- What Kong's log plugins send (a subset): request, response, latencies, route, service,
-- consumer, client_ip, started_at. Most useful in the log phase.
function klog.serialize()
    local st = request.get_stats()
    local c = base.ctx or {}
    local consumer = c.authenticated_consumer
    local q = request.get_query()
    local rh = request.get_headers(true)
    -- Kong never logs credentials: these two are "REDACTED" in what it serializes
    if rh.authorization ~= nil then rh.authorization = "REDACTED" end
    if rh["proxy-authorization"] ~= nil then rh["proxy-authorization"] = "REDACTED" end
    return {
        request = {
            method = request.get_method(), uri = kreq.get_path_with_query(),
            url = request.get_scheme() .. "://" .. request.get_host() .. ":" .. request.get_port()
                .. kreq.get_path_with_query(),
            querystring = decode_args(q), headers = rh, size = st.bytes_in,
        },
        response = { status = st.status, headers = response.get_headers(true), size = st.bytes_out },
        latencies = { request = st.duration_ms, kong = 0, proxy = 0 },
        route = { name = st.route, id = st.route },
        service = st.upstream ~= "" and { name = st.upstream, id = st.upstream } or nil,
        upstream_uri = q == "" and request.get_path() or request.get_path() .. "?" .. q, -- as sent upstream
        consumer = consumer,
        client_ip = request.get_client_ip(),
        started_at = math.floor((sluice.time.now() - st.duration_ms / 1000) * 1000),
    }
end

-- ---------------------------------------------------------------- kong.client

local kclient = {}
kong.client = kclient

function kclient.get_ip() return request.get_client_ip() end
function kclient.get_forwarded_ip() return client.get_ip() end
function kclient.get_protocol() return request.get_scheme() end

local function consumer_entity(name)
    if not consumers.exists(name) then return nil end
    return { id = name, username = name, custom_id = nil }
end
_M.consumer_entity = consumer_entity

-- Marks the request authenticated: the consumer's name goes upstream (X-Consumer) as the
-- sluice auth plugins' does; get_consumer and get_credential return the two tables.
function kclient.authenticate(consumer, credential)
    if consumer ~= nil and type(consumer) ~= "table" then error("consumer must be a table or nil", 2) end
    if credential ~= nil and type(credential) ~= "table" then error("credential must be a table or nil", 2) end
    if not consumer and not credential then error("either credential or consumer must be provided", 2) end
    local c = base.ctx
    c.authenticated_consumer, c.authenticated_credential = consumer, credential
    if consumer then c.consumer = consumer.username or consumer.id end
end

function kclient.get_consumer() return base.ctx.authenticated_consumer end
function kclient.get_credential() return base.ctx.authenticated_credential end

-- The consumer (a table) of that id, or by username when search_by_username; nil, err
-- when there is none. sluice consumers have a name: it is both id and username.
function kclient.load_consumer(consumer_id, search_by_username)
    if type(consumer_id) ~= "string" then error("consumer_id must be a string", 2) end
    local _ = search_by_username
    local c = consumer_entity(consumer_id)
    if not c then return nil, "consumer not found" end
    return c
end

-- ---------------------------------------------------------------- kong.db (consumers only)

-- The config's consumers as Kong's DAOs: consumers and keyauth_credentials, read-only.
local db = {}
kong.db = db
local function dao(t, name) return strict(t, "kong.db." .. name) end

db.consumers = dao({}, "consumers")
function db.consumers.select(_, pk)
    local id = type(pk) == "table" and pk.id or pk
    return consumer_entity(tostring(id))
end
function db.consumers.select_by_username(_, username) return consumer_entity(tostring(username)) end
function db.consumers.cache_key(_, id) return "consumers:" .. tostring(id) end

db.keyauth_credentials = dao({}, "keyauth_credentials")
function db.keyauth_credentials.select_by_key(_, key)
    local name = consumers.find("key-auth", "key", tostring(key))
    if not name then return nil end
    return { id = name .. ":key-auth", key = key, consumer = { id = name } }
end
function db.keyauth_credentials.cache_key(_, key) return "keyauth_credentials:" .. tostring(key) end

-- ---------------------------------------------------------------- kong.router, kong.node

kong.router = {}
function kong.router.get_route()
    local name = request.get_route()
    return { id = name, name = name }
end

kong.node = {}
local node_id
local function hostname()
    local f = io.open("/proc/sys/kernel/hostname", "r")
    local h = f and f:read("*l") or "localhost"
    if f then f:close() end
    return h
end

-- A UUID made from the host name and the process id: the same in every worker of one
-- sluice process (as Kong's is the same in every nginx worker), new when it restarts.
function kong.node.get_id()
    if not node_id then
        local ffi = require("ffi")
        pcall(ffi.cdef, "int getpid(void);")
        local h = sluice.crypto.digest("md5", hostname() .. "/" .. tostring(ffi.C.getpid()))
        local hex = h:gsub(".", function(c) return ("%02x"):format(c:byte()) end)
        node_id = ("%s-%s-4%s-a%s-%s"):format(hex:sub(1, 8), hex:sub(9, 12), hex:sub(14, 16), hex:sub(18, 20),
                                             hex:sub(21, 32))
    end
    return node_id
end
function kong.node.get_hostname() return hostname() end

-- ---------------------------------------------------------------- kong.cache

-- kong.cache on sluice.shared: one store for all workers. Values are kept encoded (type
-- tag + text) so tables, booleans and nil (a miss worth remembering) survive.
local cache = {}
kong.cache = cache
local PREFIX = "kong:cache:"
local NIL_TAG = "0"

local function encode(v)
    local t = type(v)
    if v == nil then return NIL_TAG end
    if t == "string" then return "s" .. v end
    if t == "number" then return "n" .. tostring(v) end
    if t == "boolean" then return v and "bt" or "bf" end
    if t == "table" then
        local js = cjson.encode(v)
        if js then return "j" .. js end
    end
    return nil, "cannot cache a " .. t
end

local function decode(s)
    local tag = sub(s, 1, 1)
    if tag == "s" then return sub(s, 2) end
    if tag == "n" then return tonumber(sub(s, 2)) end
    if tag == "b" then return s == "bt" end
    if tag == "j" then return cjson.decode(sub(s, 2)) end
    return nil
end

-- cache:get(key, opts, cb, ...): the value cached under key, else cb(...)'s, stored for
-- opts.ttl seconds (a nil result for opts.neg_ttl); returns value, or nil, err when cb
-- raised or returned nil, err.
function cache.get(_, key, opts, cb, ...)
    if type(key) ~= "string" then error("key must be a string", 2) end
    local hit = shared.get(PREFIX .. key)
    if hit ~= nil then return decode(hit) end
    if cb == nil then return nil end
    if type(cb) ~= "function" then error("callback must be a function", 2) end
    local ok, v, err, ttl = pcall(cb, ...)
    if not ok then return nil, "callback threw an error: " .. tostring(v) end
    if err then return nil, err end
    local enc, eerr = encode(v)
    if not enc then return nil, eerr end
    opts = opts or {}
    ttl = ttl or (v == nil and (opts.neg_ttl or opts.ttl) or opts.ttl) or 0
    shared.set(PREFIX .. key, enc, ttl > 0 and ttl or nil)
    return v
end

-- The ttl left is not kept by the shared store: probe answers (nil, nil, value) / nil.
function cache.probe(_, key)
    local hit = shared.get(PREFIX .. key)
    if hit == nil then return nil end
    return 0, nil, decode(hit)
end

function cache.invalidate(_, key) shared.delete(PREFIX .. key) end
cache.invalidate_local = cache.invalidate

-- ---------------------------------------------------------------- kong.table, kong.ip

kong.table = {
    new = function(narr, nrec) return table_new(narr or 0, nrec or 0) end,
    clear = function(t) table_clear(t) end,
}

kong.ip = {
    -- whether the address is one of the listener's trusted_proxies
    is_trusted = function(ip)
        local ok, err = client.is_trusted(ip)
        if ok == nil then error(err .. ": " .. tostring(ip), 2) end
        return ok
    end,
}

-- ---------------------------------------------------------------- strictness

for _, path in ipairs({ "request", "response", "service", "service.request", "service.response", "log",
                        "client", "db", "router", "node", "cache", "table", "ip" }) do
    local t = kong
    for part in path:gmatch("[^.]+") do t = rawget(t, part) end
    strict(t, "kong." .. path)
end
strict(kong, "kong")

-- Per-phase state the plugin wrapper sets: ngx.arg for body_filter.
_M.arg = {}

return _M
