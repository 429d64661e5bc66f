-- sluice.http: a plugin's own HTTP/1.1 requests (docs/plugins.md, "sluice.http").
--
--   local res, err = sluice.http.request{ url = "http://127.0.0.1:9000/check?u=1",
--       method = "POST", headers = { ["Content-Type"] = "application/json" },
--       body = '{"a":1}', timeout = 2 }
--   -- res.status, res.headers (lower-case names), res.body; or nil, "timeout"
--
-- The request's coroutine yields while the core connects, writes and reads on the
-- worker's loop (core/http_client.c); the worker serves other requests meanwhile.
-- Misuse (a bad url, header or option) raises an error; a failed exchange returns
-- nil and the reason.
local ffi = require("ffi")
local base = require("sluice.base")

ffi.cdef[[
int sl_ffi_http_request(sl_req_t *r, const char *host, size_t host_len, int port, const char *req,
                        size_t req_len, int is_head, double timeout_ms, double max_body, int tls, int verify,
                        const char *ca, const char **err);
int sl_ffi_http_result(sl_req_t *r, int *status, int *nheaders, const char **body, size_t *body_len,
                       const char **err);
int sl_ffi_http_header_at(sl_req_t *r, int i, const char **name, size_t *name_len, const char **value,
                          size_t *value_len);
void sl_ffi_http_done(sl_req_t *r);
enum { SL_MIRROR_SENT = 0, SL_MIRROR_FAILED = 1, SL_MIRROR_DROPPED = 2, SL_MIRROR_TOO_LARGE = 3 };
int sl_ffi_mirror_send(sl_req_t *r, const char *up, size_t ul, const char *address, size_t al, int max_in_flight,
                       double timeout_ms, const char **err);
int sl_ffi_mirror_count(int result);
typedef struct sl_httplog_s sl_httplog_t;
sl_httplog_t *sl_ffi_httplog_open(sl_req_t *r, const char *host, size_t hl, int port, const char *head,
                                  size_t head_len, int batch_max, int queue_max, double flush_ms, double timeout_ms,
                                  int retries, const char **err);
int sl_ffi_httplog_push(sl_httplog_t *lg, const char *line, size_t len);
]]

local C = ffi.C
local ffi_new, ffi_string = ffi.new, ffi.string
local type, tostring, tonumber, pairs, error = type, tostring, tonumber, pairs, error
local lower, upper, concat, find = string.lower, string.upper, table.concat, string.find

local _M = {}

-- Defaults: a whole exchange gets 10 s; a response body may have 4 MiB.
_M.DEFAULT_TIMEOUT = 10
_M.DEFAULT_MAX_BODY = 4 * 1024 * 1024

local status_p, count_p = ffi_new("int[1]"), ffi_new("int[1]")
local str_p, len_p, str2_p, len2_p, err_p = base.str_p, base.len_p, base.str2_p, base.len2_p, base.err_p

-- Framing and the connection are the core's business.
local RESERVED = { ["content-length"] = true, ["transfer-encoding"] = true, connection = true,
                   ["keep-alive"] = true, te = true, upgrade = true, trailer = true }

local function is_token(s) return s ~= "" and not find(s, "[^!#$%%&'*+%-.^_`|~%w]") end
-- Field values: visible ASCII, obs-text, space and tab; no CR, LF or NUL.
local function is_value(s) return not find(s, "[%z\1-\8\10-\31\127]") end

-- "http://host[:port]/path?query" -> host, port, target, authority. A bad url raises at
-- `level` (as error() counts from parse_url's caller; default 2: that caller's caller).
local function parse_url(url, level)
    local lvl = (level or 2) + 1
    local scheme, rest = url:match("^(%a[%w+.-]*)://(.*)$")
    if not scheme then error("url must be absolute (http://host[:port]/path)", lvl) end
    scheme = lower(scheme)
    if scheme ~= "http" and scheme ~= "https" then error("url scheme must be http or https, got " .. scheme, lvl) end
    local authority, target = rest:match("^([^/?#]*)([^#]*)")
    if find(authority, "@", 1, true) then error("url must not carry user:password@", lvl) end
    local host, port
    if authority:sub(1, 1) == "[" then
        host, port = authority:match("^%[([%x:.]+)%]:?(%d*)$")
    else
        host, port = authority:match("^([%w.-]+):?(%d*)$")
    end
    if not host then error("url has a bad host: " .. authority, lvl) end
    port = port == "" and (scheme == "https" and 443 or 80) or tonumber(port)
    if port < 1 or port > 65535 then error("url has a bad port: " .. authority, lvl) end
    if target == "" then target = "/" elseif target:sub(1, 1) == "?" then target = "/" .. target end
    if find(target, "[%z\1-\32\127]") then error("url path must not contain spaces or controls", lvl) end
    return host, port, target, authority, scheme == "https"
end

-- The request's bytes; with head_only, the request line and fields only (each ending in
-- CRLF), without framing, for a sender that frames each body itself.
local function build(opts, head_only)
    if type(opts.url) ~= "string" then error("http.request needs url", 3) end
    local host, port, target, authority, tls = parse_url(opts.url, 3) -- build's caller's caller: the plugin
    local body = opts.body
    if body ~= nil and type(body) ~= "string" then error("body must be a string", 3) end
    local method = opts.method or (body and "POST" or "GET")
    if type(method) ~= "string" or not is_token(method) then error("method must be a token", 3) end
    method = upper(method)
    local lines = { method .. " " .. target .. " HTTP/1.1" }
    local has_host, has_ua = false, false
    if opts.headers ~= nil then
        if type(opts.headers) ~= "table" then error("headers must be a table", 3) end
        for k, v in pairs(opts.headers) do
            if type(k) ~= "string" or not is_token(k) then error("header name must be a token: " .. tostring(k), 3) end
            local lk = lower(k)
            if RESERVED[lk] then error("http.request sets " .. k .. " itself", 3) end
            if type(v) == "number" then v = tostring(v) end
            if type(v) ~= "string" or not is_value(v) then error("header " .. k .. " has a bad value", 3) end
            if lk == "host" then has_host = true end
            if lk == "user-agent" then has_ua = true end
            lines[#lines + 1] = k .. ": " .. v
        end
    end
    if not has_host then lines[#lines + 1] = "Host: " .. authority end
    if not has_ua then lines[#lines + 1] = "User-Agent: sluice" end
    if head_only then return host, port, concat(lines, "\r\n") .. "\r\n", tls end
    if body or method == "POST" or method == "PUT" or method == "PATCH" then
        lines[#lines + 1] = "Content-Length: " .. (body and #body or 0)
    end
    lines[#lines + 1] = "Connection: close"
    return host, port, concat(lines, "\r\n") .. "\r\n\r\n" .. (body or ""), method == "HEAD", tls
end

local function number_opt(v, default, what)
    if v == nil then return default end
    if type(v) ~= "number" or v <= 0 then error(what .. " must be a positive number", 3) end
    return v
end

-- Sends one request and waits (yielding) for the whole response.
-- request{ url, method?, headers?, body?, timeout? (s), max_body? (bytes),
--          ssl_verify? (https: default true), ca? (https: a CA file instead of the system's) }, or
-- request(url, opts). Returns { status, headers, body } or nil, err.
function _M.request(opts, more)
    if type(opts) == "string" then
        local o = {}
        if more ~= nil then
            if type(more) ~= "table" then error("http.request(url, opts): opts must be a table", 2) end
            for k, v in pairs(more) do o[k] = v end
        end
        o.url = opts
        opts = o
    elseif type(opts) ~= "table" then
        error("http.request takes a table { url = ..., ... } or (url, opts)", 2)
    end
    local r = base.reqp()
    if r == nil then error("no request is being served here (sluice API used outside a phase)", 2) end
    local host, port, raw, is_head, tls = build(opts)
    local verify = opts.ssl_verify
    if verify == nil then verify = true end
    if type(verify) ~= "boolean" then error("ssl_verify must be a boolean", 2) end
    local ca = opts.ca
    if ca ~= nil and type(ca) ~= "string" then error("ca must be a file name", 2) end
    local timeout = number_opt(opts.timeout, _M.DEFAULT_TIMEOUT, "timeout")
    local max_body = number_opt(opts.max_body, _M.DEFAULT_MAX_BODY, "max_body")

    if C.sl_ffi_http_request(r, host, #host, port, raw, #raw, is_head and 1 or 0, timeout * 1000, max_body,
                             tls and 1 or 0, verify and 1 or 0, ca, err_p) ~= C.SL_OK then
        local msg = ffi_string(err_p[0])
        if msg:find("works in rewrite and access only", 1, true) or msg == "already waiting" then
            error(msg, 2)
        end
        return nil, msg
    end
    base.wait()

    if C.sl_ffi_http_result(r, status_p, count_p, str_p, len_p, err_p) ~= C.SL_OK then
        local msg = ffi_string(err_p[0])
        C.sl_ffi_http_done(r)
        return nil, msg
    end
    local res = { status = status_p[0], body = ffi_string(str_p[0], len_p[0]) }
    local headers = {}
    for i = 0, count_p[0] - 1 do
        C.sl_ffi_http_header_at(r, i, str_p, len_p, str2_p, len2_p)
        local k, v = lower(ffi_string(str_p[0], len_p[0])), ffi_string(str2_p[0], len2_p[0])
        local prev = headers[k]
        headers[k] = prev and (prev .. ", " .. v) or v
    end
    res.headers = headers
    C.sl_ffi_http_done(r)
    return res
end

-- A copy of the running request (method, target, headers, and its body when it was read
-- whole: get_body first) to upstream `up`'s first target or to `address` ("HOST:PORT"),
-- sent on the worker's loop by the core; its answer is dropped and nothing waits for it.
-- Returns "sent" (on its way), "dropped" (this worker already has max_in_flight copies on
-- their way), "too_large" (a body that was not read: nothing sent) or "failed"; nil, err
-- for an upstream without a target or a bad address. Counted in
-- sluice_mirror_requests_total{result}. Rewrite/access.
local MIRROR_RESULT = { [C.SL_MIRROR_SENT] = "sent", [C.SL_MIRROR_FAILED] = "failed",
                        [C.SL_MIRROR_DROPPED] = "dropped", [C.SL_MIRROR_TOO_LARGE] = "too_large" }
function _M.mirror(up, address, max_in_flight, timeout)
    local r = base.reqp()
    if r == nil then error("no request is being served here (sluice API used outside a phase)", 2) end
    up, address = up or "", address or ""
    local rc = C.sl_ffi_mirror_send(r, up, #up, address, #address, max_in_flight or 64,
                                    (timeout or _M.DEFAULT_TIMEOUT) * 1000, err_p)
    local res = MIRROR_RESULT[rc]
    if not res then return nil, ffi_string(err_p[0]) end
    return res
end

-- Counts a copy not made because the body is over max_body (sluice_mirror_requests_total).
function _M.mirror_too_large()
    C.sl_ffi_mirror_count(C.SL_MIRROR_TOO_LARGE)
end

-- A batching sender of log lines to an HTTP collector, run by the core on the worker's
-- loop (core/http/http_logger.c): opts.url (http only), opts.headers, opts.batch_max,
-- opts.queue_max, opts.flush and opts.timeout (seconds), opts.retries. Lines are POSTed
-- as a JSON array with Content-Type: application/json. Returns the worker's logger for
-- these options (the same one for the same options), or nil, err. Any phase of a request.
function _M.logger(opts)
    local r = base.reqp()
    if r == nil then error("no request is being served here (sluice API used outside a phase)", 2) end
    local hdrs, typed = {}, false
    for k, v in pairs(opts.headers or {}) do
        hdrs[k] = v
        typed = typed or lower(k) == "content-type"
    end
    if not typed then hdrs["Content-Type"] = "application/json" end
    local host, port, head, tls = build({ url = opts.url, method = "POST", headers = hdrs }, true)
    if tls then return nil, "https collectors are not supported yet" end
    local lg = C.sl_ffi_httplog_open(r, host, #host, port, head, #head, opts.batch_max, opts.queue_max,
                                     opts.flush * 1000, opts.timeout * 1000, opts.retries, err_p)
    if lg == nil then return nil, ffi_string(err_p[0]) end
    return lg
end

-- Queues one line (JSON text without newlines) on a logger: true, or false when its queue
-- is full (the line is dropped and counted in sluice_http_logger_lines_total).
function _M.logger_push(lg, line)
    return C.sl_ffi_httplog_push(lg, line, #line) == 0
end

-- Raises (at the caller's caller) when url is not a usable absolute http:// URL.
function _M.check_url(url)
    local _, _, _, _, tls = parse_url(url)
    return not tls
end

return _M
