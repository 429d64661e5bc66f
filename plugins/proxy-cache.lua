-- proxy-cache: answers repeated requests from one response store shared by all workers
-- (top-level `cache: { size }`; core/upstream/cache.c). This file is the thin part: the
-- config, the cache key, and the access-phase lookup. What may be stored (status,
-- Cache-Control, Set-Cookie, Vary, max_body), the copy of the body, the HIT answer and
-- stale_if_error are the core's (core/http/cache_req.c), so a HIT never builds a Lua
-- string of the response.
--
-- Keys. The parts of `key` in order: method, host, path, query, consumer, header:NAME;
-- then the `vary` headers (a HEAD's method part is GET's: it is answered from the GET's
-- entry and never fills one). The default key reads "GET example.com/path?query"; a
-- consumer or header part appends "\nconsumer:NAME" or "\nname:value" (the name
-- lower-cased). DELETE /cache?key=... on the admin API takes that text.
local sluice = require("sluice")
local cache = require("sluice.cache")

local request = sluice.request
local lower, concat, ipairs, tostring = string.lower, table.concat, ipairs, tostring

local M = {
    name = "proxy-cache",
    version = "1.0",
    schema = {
        ttl = { type = "duration", default = "60s" },
        methods = { type = "array", items = { type = "string" }, default = { "GET", "HEAD" } },
        statuses = { type = "array", items = { type = "integer", min = 200, max = 599 },
                     default = { 200, 301, 404 } },
        key = { type = "array", items = { type = "string" },
                default = { "method", "host", "path", "query" } },
        vary = { type = "array", items = { type = "string" }, default = {} },
        max_body = { type = "size", default = "1MiB" },
        stale_if_error = { type = "duration", default = "0s" },
        lock_timeout = { type = "duration", default = "5s" },
        cache_set_cookie = { type = "boolean", default = false },
    },
}

local TOKEN = "^[!#$%%&'*+%-.^_`|~%w]+$"
local SIMPLE = { method = true, host = true, path = true, query = true, consumer = true }

-- A `key` entry as { kind, header name }, or nil and why.
local function part(s)
    if SIMPLE[s] then return { s } end
    local h = s:match("^header:(.+)$")
    if h and h:match(TOKEN) then return { "header", lower(h) } end
    return nil, ("key: '%s' is not method, host, path, query, consumer or header:NAME"):format(s)
end

function M.check(conf)
    if #conf.key == 0 then return nil, "key needs at least one part" end
    for _, s in ipairs(conf.key) do
        local ok, err = part(s)
        if not ok then return nil, err end
    end
    for _, h in ipairs(conf.vary) do
        if not h:match(TOKEN) then return nil, ("vary: '%s' is not a header name"):format(h) end
    end
    for _, m in ipairs(conf.methods) do
        if not m:match("^[A-Z]+$") then return nil, ("methods: '%s' is not a method"):format(m) end
    end
    if #conf.statuses > cache.MAX_STATUSES then return nil, "statuses: at most 16" end
    return true
end

-- The key's parts compiled from conf: `key` then `vary` (as header parts).
function M.compile(conf)
    local parts = {}
    for _, s in ipairs(conf.key) do parts[#parts + 1] = assert(part(s)) end
    for _, h in ipairs(conf.vary) do parts[#parts + 1] = { "header", lower(h) } end
    local default = #parts == 4 and parts[1][1] == "method" and parts[2][1] == "host"
        and parts[3][1] == "path" and parts[4][1] == "query"
    return parts, default
end

-- The key of a request: `get` reads it (get.method(), get.host(), get.path(), get.query(),
-- get.header(name), get.consumer(): strings, or nil when absent).
function M.build_key(parts, get, buf)
    buf = buf or {}
    local n = 0
    for i = 1, #parts do
        local k, v = parts[i][1], nil
        if k == "method" then
            v = get.method()
            v = (v == "HEAD" and "GET" or v) .. " " -- a HEAD is answered from the GET's entry
        elseif k == "host" or k == "path" then
            v = get[k]()
        elseif k == "query" then
            local q = get.query()
            v = q ~= "" and "?" .. q or ""
        elseif k == "consumer" then
            v = "\nconsumer:" .. tostring(get.consumer() or "")
        else
            v = "\n" .. parts[i][2] .. ":" .. (get.header(parts[i][2]) or "")
        end
        n = n + 1
        buf[n] = v
    end
    for i = n + 1, #buf do buf[i] = nil end
    return concat(buf, "", 1, n)
end

function M.prepare(conf)
    local parts, default = M.compile(conf)
    return { parts = parts, default = default, buf = {}, policy = cache.policy(conf) }
end

-- The request as build_key reads it (ctx for the consumer, set by an auth plugin before).
-- A header part is every field of that name joined (get_headers), as the upstream's Vary
-- selects: `Accept-Language: de` and `Accept-Language: de` + `Accept-Language: it` are two
-- representations, not one.
local cur_ctx, cur_headers
local getters = {
    method = request.get_method, host = request.get_host, path = request.get_path,
    query = request.get_query,
    header = function(name)
        cur_headers = cur_headers or request.get_headers()
        return cur_headers[name]
    end,
    consumer = function() return cur_ctx and cur_ctx.consumer end,
}

-- A fetch to fill the store asks for the whole representation, as nginx's cache does: the
-- client's validators or range would get a 304 or 206 that cannot be stored (nor answer the
-- next client), and the store would never fill while clients revalidate.
local PARTIAL = { "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "Range", "If-Range" }
local clear_header = request.clear_header

local function fetch_whole(st)
    if st == "MISS" or st == "EXPIRED" then
        for i = 1, #PARTIAL do clear_header(PARTIAL[i]) end
    end
end

-- The method check (pol.methods) and the default key are the core's: the common case is
-- one call.
function M.access(conf, ctx, p)
    if p.default then return fetch_whole(cache.lookup(nil, p.policy)) end
    cur_ctx = ctx
    local key = M.build_key(p.parts, getters, p.buf)
    cur_ctx, cur_headers = nil, nil
    fetch_whole(cache.lookup(key, p.policy))
end

return M
