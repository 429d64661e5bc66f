-- sluice.kong.ngx: the `ngx` basics Kong plugins use, backed by the sluice API: ngx.var (a
-- subset, read-only), ngx.ctx, ngx.now/time/today/update_time, ngx.re (PCRE2), base64,
-- md5/sha1/hmac_sha1, URI and args coding, ngx.log and its levels, the HTTP status
-- constants, ngx.null, ngx.exit, ngx.sleep, ngx.arg (body_filter), ngx.header and a few of
-- ngx.req. Strict like sluice.kong: any other name raises "ngx.X is not supported".
local sluice = require("sluice")
local base = require("sluice.base")
local kmod = require("sluice.kong")
local cjson = require("cjson.safe")

local request, response, crypto = sluice.request, sluice.response, sluice.crypto
local type, tostring, error, setmetatable, floor = type, tostring, error, setmetatable, math.floor
local gsub, byte = string.gsub, string.byte
local pairs, ipairs, rawset = pairs, ipairs, rawset
local strict = kmod.strict

local _M = {}

local ngx = {}
_M.ngx = ngx

-- ---------------------------------------------------------------- constants

local LEVELS = { STDERR = 0, EMERG = 1, ALERT = 2, CRIT = 3, ERR = 4, WARN = 5, NOTICE = 6, INFO = 7,
                 DEBUG = 8 }
for k, v in pairs(LEVELS) do ngx[k] = v end

local STATUS = {
    HTTP_CONTINUE = 100, HTTP_SWITCHING_PROTOCOLS = 101, HTTP_OK = 200, HTTP_CREATED = 201,
    HTTP_ACCEPTED = 202, HTTP_NO_CONTENT = 204, HTTP_PARTIAL_CONTENT = 206,
    HTTP_SPECIAL_RESPONSE = 300, HTTP_MOVED_PERMANENTLY = 301, HTTP_MOVED_TEMPORARILY = 302,
    HTTP_SEE_OTHER = 303, HTTP_NOT_MODIFIED = 304, HTTP_TEMPORARY_REDIRECT = 307,
    HTTP_PERMANENT_REDIRECT = 308, HTTP_BAD_REQUEST = 400, HTTP_UNAUTHORIZED = 401,
    HTTP_PAYMENT_REQUIRED = 402, HTTP_FORBIDDEN = 403, HTTP_NOT_FOUND = 404, HTTP_NOT_ALLOWED = 405,
    HTTP_NOT_ACCEPTABLE = 406, HTTP_REQUEST_TIMEOUT = 408, HTTP_CONFLICT = 409, HTTP_GONE = 410,
    HTTP_UPGRADE_REQUIRED = 426, HTTP_TOO_MANY_REQUESTS = 429, HTTP_CLOSE = 444,
    HTTP_ILLEGAL = 451, HTTP_INTERNAL_SERVER_ERROR = 500, HTTP_METHOD_NOT_IMPLEMENTED = 501,
    HTTP_BAD_GATEWAY = 502, HTTP_SERVICE_UNAVAILABLE = 503, HTTP_GATEWAY_TIMEOUT = 504,
    HTTP_VERSION_NOT_SUPPORTED = 505, HTTP_INSUFFICIENT_STORAGE = 507,
    OK = 0, ERROR = -1, AGAIN = -2, DONE = -4, DECLINED = -5,
    HTTP_GET = "GET", HTTP_POST = "POST", HTTP_PUT = "PUT", HTTP_DELETE = "DELETE", HTTP_HEAD = "HEAD",
    HTTP_PATCH = "PATCH", HTTP_OPTIONS = "OPTIONS",
}
for k, v in pairs(STATUS) do ngx[k] = v end

ngx.null = cjson.null
ngx.config = strict({ subsystem = "http", ngx_lua_version = 10025, is_console = false }, "ngx.config")
ngx.worker = strict({ id = function() return 0 end, count = function() return 1 end }, "ngx.worker")

-- ---------------------------------------------------------------- time

function ngx.now() return sluice.time.now() end
function ngx.time() return floor(sluice.time.now()) end
function ngx.today() return os.date("!%Y-%m-%d", floor(sluice.time.now())) end
function ngx.update_time() end
function ngx.http_time(t) return os.date("!%a, %d %b %Y %H:%M:%S GMT", t) end
function ngx.cookie_time(t) return os.date("!%a, %d-%b-%y %H:%M:%S GMT", t) end
function ngx.sleep(s) sluice.sleep(s) end

-- ---------------------------------------------------------------- coding, digests

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

function ngx.encode_base64(s, no_padding)
    if type(s) ~= "string" then s = tostring(s) end
    local out = (crypto.base64url_encode(s):gsub("[-_]", { ["-"] = "+", ["_"] = "/" }))
    if not no_padding then out = out .. ("="):rep((3 - #s % 3) % 3) end
    return out
end

function ngx.decode_base64(s)
    if type(s) ~= "string" then error("string argument only", 2) end
    return (crypto.base64_decode(s))
end

local function hex(s) return (gsub(s, ".", function(c) return ("%02x"):format(byte(c)) end)) end
function ngx.md5_bin(s) return (crypto.digest("md5", tostring(s))) end
function ngx.md5(s) return hex(crypto.digest("md5", tostring(s))) end
function ngx.sha1_bin(s) return (crypto.digest("sha1", tostring(s))) end
function ngx.hmac_sha1(key, s) return (crypto.hmac("sha1", key, s)) end
function ngx.crc32_short(s)
    local crc = 0xffffffff
    local bit = require("bit")
    for i = 1, #s do
        crc = bit.bxor(crc, byte(s, i))
        for _ = 1, 8 do
            local mask = -bit.band(crc, 1)
            crc = bit.bxor(bit.rshift(crc, 1), bit.band(0xedb88320, mask))
        end
    end
    local v = bit.bnot(crc)
    return v < 0 and v + 2 ^ 32 or v
end
ngx.crc32_long = ngx.crc32_short

function ngx.escape_uri(s) return kmod.escape_uri(s) end
function ngx.unescape_uri(s) return kmod.unescape_uri(tostring(s)) end
function ngx.encode_args(t) return kmod.encode_args(t) end
function ngx.decode_args(s, max) return (kmod.decode_args(s, max or 100)) end
function ngx.quote_sql_str(s) return "'" .. gsub(tostring(s), "['\\]", "\\%0") .. "'" end

ngx.re = strict(require("sluice.kong.re"), "ngx.re")
rawset(ngx.re, "available", nil)

-- ---------------------------------------------------------------- log, exit

-- ngx.log(level, ...): ngx.ERR and worse log as err, WARN as warn, NOTICE and INFO as
-- info, DEBUG as debug.
function ngx.log(level, ...)
    local msg = kmod.joined(...)
    if level <= LEVELS.ERR then
        sluice.log.err(msg)
    elseif level == LEVELS.WARN then
        sluice.log.warn(msg)
    elseif level <= LEVELS.INFO then
        sluice.log.info(msg)
    else
        sluice.log.debug(msg)
    end
end

-- ngx.exit(status): kong.response.exit(status) for a status >= 200; ngx.OK (0) ends the
-- phase function without an answer.
function ngx.exit(status)
    if type(status) ~= "number" then error("status must be a number", 2) end
    if status >= 200 then return kmod.kong.response.exit(status) end
    if kmod.ends_method() then error(kmod.NGX_OK, 0) end
end

-- ---------------------------------------------------------------- ctx, arg, header

-- ngx.ctx is the request's ctx (the same table as kong.ctx.shared).
-- ngx.arg: body_filter's [1] chunk and [2] eof (sluice.kong.plugin sets and reads them).
ngx.arg = kmod.arg

-- ngx.header: the response headers (read and set), as in header_filter. Content-Length and
-- Transfer-Encoding are the gateway's (it frames a body a body_filter changed): writing
-- them is a no-op, as kong.response.clear_header of them is, so the usual
-- `ngx.header["Content-Length"] = nil` before a body_filter works.
local FRAMING = { ["content-length"] = true, ["transfer-encoding"] = true }
ngx.header = setmetatable({}, {
    __index = function(_, k) return response.get_header((gsub(k, "_", "-"))) end,
    __newindex = function(_, k, v)
        k = gsub(k, "_", "-")
        if FRAMING[k:lower()] then return end
        if v == nil then
            response.clear_header(k)
        elseif type(v) == "table" then
            response.clear_header(k)
            for _, x in ipairs(v) do response.add_header(k, x) end
        else
            response.set_header(k, v)
        end
    end,
})

-- ---------------------------------------------------------------- ngx.var

-- The variables sluice can answer; http_NAME, arg_NAME and cookie_NAME for any NAME.
local function cookie(name)
    local h = request.get_header("Cookie")
    if not h then return nil end
    for pair in h:gmatch("[^;]+") do
        local k, v = pair:match("^%s*([^=]+)=(.*)$")
        if k == name then return (v:gsub("%s+$", "")) end
    end
    return nil
end

local VARS = {
    request_method = function() return request.get_method() end,
    uri = function() return request.get_original_path() end, -- Kong's set_path leaves $uri alone
    request_uri = function() return kmod.kong.request.get_path_with_query() end,
    args = function() local q = request.get_query() return q ~= "" and q or nil end,
    query_string = function() local q = request.get_query() return q ~= "" and q or nil end,
    is_args = function() return request.get_query() ~= "" and "?" or "" end,
    host = function() return request.get_host() end,
    scheme = function() return request.get_scheme() end,
    https = function() return request.get_scheme() == "https" and "on" or "" end,
    server_port = function() return tostring(request.get_port()) end,
    remote_addr = function() return request.get_client_ip() end,
    realip_remote_addr = function() return request.get_client_ip() end,
    request_id = function() return request.get_id() end,
    status = function() return tostring(response.get_status()) end,
    content_type = function() return request.get_header("Content-Type") end,
    content_length = function() return request.get_header("Content-Length") end,
    http_host = function() return request.get_header("Host") end,
    hostname = function() return kmod.kong.node.get_hostname() end,
}
_M.VARS = VARS

-- Whether ngx.var.NAME is one sluice answers (the load-time check asks).
function _M.var_supported(name)
    return VARS[name] ~= nil or name:find("^http_") ~= nil or name:find("^arg_") ~= nil
        or name:find("^cookie_") ~= nil
end

ngx.var = setmetatable({}, {
    __index = function(_, k)
        local f = VARS[k]
        if f then return f() end
        if type(k) == "string" then
            local p = k:match("^http_(.+)$")
            if p then return request.get_header((gsub(p, "_", "-"))) end
            p = k:match("^arg_(.+)$")
            if p then
                local v = request.get_query_arg(p)
                if v == true then return "" end
                return v
            end
            p = k:match("^cookie_(.+)$")
            if p then return cookie(p) end
        end
        error(("ngx.var.%s is not supported by sluice's Kong layer"):format(tostring(k)), 2)
    end,
    __newindex = function(_, k)
        error(("ngx.var.%s cannot be set in sluice's Kong layer (ngx.var is read-only)"):format(tostring(k)), 2)
    end,
})

-- ---------------------------------------------------------------- ngx.req

local kreq = kmod.kong.request
ngx.req = strict({
    get_method = function() return request.get_method() end,
    -- ngx's: 100 unless told, 0 for all
    get_headers = function(max) return kmod.headers(max or 100) end,
    get_uri_args = function(max) return kmod.query_args(max or 100) end,
    set_header = function(k, v)
        if v == nil then request.clear_header(k) else request.set_header(k, v) end
    end,
    clear_header = function(k) request.clear_header(k) end,
    read_body = function() request.get_body() end,
    get_body_data = function() return (request.get_body()) end,
    start_time = function() return sluice.time.now() - request.get_stats().duration_ms / 1000 end,
}, "ngx.req")

-- ---------------------------------------------------------------- strictness

setmetatable(ngx, { __index = function(_, k)
    if k == "ctx" then return base.ctx end
    error(("ngx.%s is not supported by sluice's Kong layer (docs/plugins.md, \"Kong plugins\")")
          :format(tostring(k)), 2)
end })

return _M
