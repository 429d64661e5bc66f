-- sluice.router: the route precedence, in Lua, and the C route matcher through FFI.
--
-- Requests are routed in C (core/config/router.c: compiled once per config build, exact
-- hosts in a hash, wildcard hosts by suffix, path prefixes in a radix tree). This module
-- keeps three things:
--   * the functions of lua_routes routes whose `match` is a Lua function: the C router
--     hands such a route over as a candidate and the worker asks `functions`/`call` here;
--   * `ranks`, for `sluice explain`;
--   * `compile`/`match`, the reference implementation of the precedence in plain Lua,
--     against which spec/sluice/router_diff_spec.lua checks the C router, and `c_new`/
--     `c_match` to ask the C router from Lua.
--
-- Precedence (the design): exact host over wildcard host over no host; then the
-- longest path prefix; then the route with more conditions; then file order.
local ffi = require("ffi")
local base = require("sluice.base")

-- sl_ffi_log is declared by sluice (init.lua), which owns it.
require("sluice")

ffi.cdef[[
typedef struct sl_router_s sl_router_t;
typedef struct {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} sl_route_header_t;
typedef struct {
    const char *host;
    size_t host_len;
    const char *method;
    size_t method_len;
    const char *path;
    size_t path_len;
    const sl_route_header_t *headers;
    uint32_t nheaders;
    uint32_t header_stride;
} sl_route_query_t;
typedef struct {
    int32_t tier, dot;
    uint32_t node, k, method;
    uint32_t strip;
    uint32_t lua;
} sl_route_cursor_t;
int sl_ffi_router_next(const sl_router_t *rt, const sl_route_query_t *q, sl_route_cursor_t *c);
typedef struct {
    const char *const *hosts;
    uint32_t nhosts;
    const char *const *paths;
    uint32_t npaths;
    const char *const *methods;
    uint32_t nmethods;
    const char *const *headers;
    uint32_t nheaders;
    uint8_t strip_prefix;
    uint8_t match_fn;
} sl_route_def_t;
sl_router_t *sl_ffi_router_new(const sl_route_def_t *routes, uint32_t n, const char **err);
void sl_ffi_router_free(sl_router_t *rt);
const sl_router_t *sl_ffi_req_router(sl_req_t *r);
]]

local C = ffi.C
local ffi_string, ffi_new, ffi_gc = ffi.string, ffi.new, ffi.gc
local tostring, tonumber, pcall, ipairs = tostring, tonumber, pcall, ipairs
local sort = table.sort
local sub, find = string.sub, string.find

local _M = {}

local function conditions(r)
    -- a match function is one condition, on top of the "/" it implies without paths
    local n = r.match_fn and (#r.paths > 0 and 1 or 2) or 0
    if #r.hosts > 0 then n = n + 1 end
    if #r.paths > 0 then n = n + 1 end
    if #r.methods > 0 then n = n + 1 end
    return n + #r.headers
end

-- One entry per (route, path prefix); host lists hold entries in precedence order.
local function entries_for(r)
    local methods
    if #r.methods > 0 then
        methods = {}
        for _, m in ipairs(r.methods) do methods[m] = true end
    end
    -- A route without paths matches every path. One whose match is a Lua function ranks
    -- like a "/" route with one more condition: above a plain catch-all, below any
    -- longer prefix.
    local paths = #r.paths > 0 and r.paths or { r.match_fn and "/" or "" }
    local out = {}
    for _, p in ipairs(paths) do
        out[#out + 1] = {
            fn = r.match_fn,
            index = r.index,
            prefix = p,
            plen = #p,
            strip = r.strip_prefix and #p or 0,
            methods = methods,
            headers = r.headers,
            nconds = conditions(r),
        }
    end
    return out
end

local function by_precedence(a, b)
    if a.plen ~= b.plen then return a.plen > b.plen end
    if a.nconds ~= b.nconds then return a.nconds > b.nconds end
    return a.index < b.index
end

local function append(list, items)
    for _, e in ipairs(items) do list[#list + 1] = e end
end

-- A lua_routes route whose match is a function: load its file once per generation.
local function match_function(r, files)
    local list = files[r.lua_file]
    if not list then
        list = assert(dofile(r.lua_file))
        files[r.lua_file] = list
    end
    local fn = list[r.lua_index] and list[r.lua_index].match
    if type(fn) ~= "function" then
        error(("%s: route %d has no match function"):format(r.lua_file, r.lua_index))
    end
    return fn
end

-- Lists this long get an index: a linear scan tried every entry in turn, 139 µs of CPU per
-- request at 10,000 path routes (scripts/bench-config-scale) against 15 at 10.
local INDEX_MIN = 32

-- Indexes a sorted list by the first path segment of its prefixes: an entry whose prefix
-- has a second "/" ("/api/", "/api/v1") can only match a path that starts with the same
-- "/segment/", so it goes in buckets["/api/"]; the others ("/", "/api", "") can match paths
-- of any first segment and go in `short`. Both keep the list's order; rank is the position
-- in it, by which scan merges them.
local function index(list)
    for i, e in ipairs(list) do e.rank = i end
    if #list < INDEX_MIN then return end
    local buckets, short = {}, {}
    for _, e in ipairs(list) do
        local k = e.prefix:find("/", 2, true)
        if e.prefix:sub(1, 1) == "/" and k then
            local key = e.prefix:sub(1, k)
            buckets[key] = buckets[key] or {}
            append(buckets[key], { e })
        else
            short[#short + 1] = e
        end
    end
    list.buckets, list.short = buckets, short
end

function _M.compile(routes)
    local exact, wild, none = {}, {}, {}
    local wild_by_suffix = {}
    local files = {}
    for _, r in ipairs(routes) do
        if r.lua_file then r.match_fn = match_function(r, files) end
        local items = entries_for(r)
        if #r.hosts == 0 then
            append(none, items)
        else
            for _, h in ipairs(r.hosts) do
                if sub(h, 1, 2) == "*." then
                    local suffix = sub(h, 2) -- ".example.com"
                    local w = wild_by_suffix[suffix]
                    if not w then
                        w = { suffix = suffix, slen = #suffix, list = {} }
                        wild_by_suffix[suffix] = w
                        wild[#wild + 1] = w
                    end
                    append(w.list, items)
                else
                    exact[h] = exact[h] or {}
                    append(exact[h], items)
                end
            end
        end
    end
    for _, l in pairs(exact) do
        sort(l, by_precedence)
        index(l)
    end
    for _, w in ipairs(wild) do
        sort(w.list, by_precedence)
        index(w.list)
    end
    sort(wild, function(a, b) return a.slen > b.slen end)
    sort(none, by_precedence)
    index(none)
    return { exact = exact, wild = wild, none = none }
end

-- For `sluice explain`: each route's precedence rank, 1 = tried first. The order is the
-- router's own (compile's sort): routes with an exact host, then wildcard hosts (longest
-- suffix first), then routes without a host; within each, by_precedence (longest path
-- prefix, more conditions, file order). A route ranks at its best entry. Returns
-- { [route index] = rank } and the number of routes ranked. Pure: reads no request.
function _M.ranks(routes)
    local all = {}
    for _, r in ipairs(routes) do
        for _, e in ipairs(entries_for(r)) do
            if #r.hosts == 0 then
                all[#all + 1] = { e = e, class = 3, slen = 0 }
            else
                for _, h in ipairs(r.hosts) do
                    local wild = sub(h, 1, 2) == "*."
                    all[#all + 1] = { e = e, class = wild and 2 or 1, slen = wild and #h - 1 or 0 }
                end
            end
        end
    end
    sort(all, function(a, b)
        if a.class ~= b.class then return a.class < b.class end
        if a.slen ~= b.slen then return a.slen > b.slen end
        if a.e.index ~= b.e.index or a.e.plen ~= b.e.plen then return by_precedence(a.e, b.e) end
        return false
    end)
    local rank, n = {}, 0
    for _, x in ipairs(all) do
        if not rank[x.e.index] then
            n = n + 1
            rank[x.e.index] = n
        end
    end
    return rank, n
end

-- ---- the reference matcher ----
-- q: { host = normalized host, method = string, path = string (without the query),
--      header = function(name) -> the first value of that header or nil,
--      call = function(fn, index) -> whether route `index`'s match function (fn; nil when
--      the C router asks) says yes }

local function headers_match(q, headers)
    for i = 1, #headers do
        local h = headers[i]
        if q.header(h[1]) ~= h[2] then return false end
    end
    return true
end

local function holds(e, q)
    local path = q.path
    return e.plen <= #path and (e.plen == 0 or sub(path, 1, e.plen) == e.prefix)
        and (not e.methods or e.methods[q.method])
        and (#e.headers == 0 or headers_match(q, e.headers))
        and (not e.fn or q.call(e.fn, e.index))
end

local function scan_all(list, q)
    for i = 1, #list do
        local e = list[i]
        if holds(e, q) then return e end
    end
    return nil
end

-- The first entry of `list` (in precedence order) whose conditions hold. A long list is
-- indexed (see index above): only the entries under the path's first segment and those
-- whose prefix is shorter than any segment are tried, merged back into precedence order
-- by their rank.
local function scan(list, q)
    local buckets = list.buckets
    if not buckets then return scan_all(list, q) end
    local k = #q.path > 1 and find(q.path, "/", 2, true)
    local bucket = k and buckets[sub(q.path, 1, k)]
    local short = list.short
    if not bucket then return scan_all(short, q) end
    local i, j, ni, nj = 1, 1, #bucket, #short
    while i <= ni or j <= nj do
        local e
        if j > nj or (i <= ni and bucket[i].rank < short[j].rank) then
            e, i = bucket[i], i + 1
        else
            e, j = short[j], j + 1
        end
        if holds(e, q) then return e end
    end
    return nil
end

-- Returns the matching route's 0-based index and the bytes strip_prefix removes, or -1, 0.
function _M.match(t, q)
    local host = q.host
    local list = t.exact[host]
    local e = list and scan(list, q)
    if e then return e.index, e.strip end
    local wild = t.wild
    local hlen = #host
    for i = 1, #wild do
        local w = wild[i]
        if hlen > w.slen and sub(host, hlen - w.slen + 1) == w.suffix then
            e = scan(w.list, q)
            if e then return e.index, e.strip end
        end
    end
    e = scan(t.none, q)
    if e then return e.index, e.strip end
    return -1, 0
end

-- ---- the C router ----

-- Compiles routes (as compile takes them: hosts, paths, methods, headers = { {name,
-- value}, ... }, strip_prefix, match_fn) into a C router, freed when collected.
function _M.c_new(routes)
    local n = #routes
    local defs = ffi_new("sl_route_def_t[?]", n + 1)
    local keep = {} -- the strings and arrays the definitions point to, alive until built
    local function strings(list)
        local a = ffi_new("const char *[?]", #list + 1)
        for i, s in ipairs(list) do a[i - 1] = s end
        keep[#keep + 1] = a
        return a, #list
    end
    for i, r in ipairs(routes) do
        local d = defs[i - 1]
        d.hosts, d.nhosts = strings(r.hosts or {})
        d.paths, d.npaths = strings(r.paths or {})
        d.methods, d.nmethods = strings(r.methods or {})
        local flat = {}
        for _, h in ipairs(r.headers or {}) do
            flat[#flat + 1] = h[1]
            flat[#flat + 1] = h[2]
        end
        d.headers = strings(flat)
        d.nheaders = #(r.headers or {})
        d.strip_prefix = r.strip_prefix and 1 or 0
        d.match_fn = (r.match_fn or r.lua_file) and 1 or 0
    end
    local rt = C.sl_ffi_router_new(defs, n, base.err_p)
    if rt == nil then return nil, ffi_string(base.err_p[0]) end
    return ffi_gc(rt, C.sl_ffi_router_free)
end

local query = ffi_new("sl_route_query_t")
local cursor = ffi_new("sl_route_cursor_t")
local HEADER_SIZE = ffi.sizeof("sl_route_header_t")

-- Matches q (as match takes it, plus q.headers = { {name, value}, ... } in request order:
-- the C router reads the request's header list) with a C router: the route's 0-based index
-- and the bytes strip_prefix removes, or -1, 0. Match functions are asked through q.call.
function _M.c_match(rt, q)
    local hs = q.headers or {}
    local arr = ffi_new("sl_route_header_t[?]", #hs + 1)
    for i, h in ipairs(hs) do
        arr[i - 1].name, arr[i - 1].name_len = h[1], #h[1]
        arr[i - 1].value, arr[i - 1].value_len = h[2], #h[2]
    end
    query.host, query.host_len = q.host, #q.host
    query.method, query.method_len = q.method, #q.method
    query.path, query.path_len = q.path, #q.path
    query.headers, query.nheaders, query.header_stride = arr, #hs, HEADER_SIZE
    ffi.fill(cursor, ffi.sizeof(cursor))
    while true do
        local idx = C.sl_ffi_router_next(rt, query, cursor)
        if idx < 0 then return -1, 0 end
        if cursor.lua == 0 or q.call(nil, idx) then return idx, tonumber(cursor.strip) end
    end
end

-- The router of the running request's generation (during a phase).
function _M.current()
    return C.sl_ffi_req_router(base.reqp())
end

-- ---- lua_routes match functions, in the worker ----

-- { [route index] = match function } of a generation's routes (each file loaded once).
function _M.functions(routes)
    local fns, files = {}, {}
    for _, r in ipairs(routes) do
        if r.lua_file then fns[r.index] = match_function(r, files) end
    end
    return fns
end

-- Asks route `index`'s match function about the request (its address as a number, as C
-- passes it): the function sees it through the plugin API. An error is logged: no.
local api
function _M.call(fn, req, index)
    api = api or require("sluice")
    base.begin(req, nil, index)
    local ok, res = pcall(fn, api.request)
    base.req = nil
    if not ok then
        local msg = "lua_routes match function failed (no match): " .. tostring(res)
        C.sl_ffi_log(ffi.cast(base.REQ_PTR, req), C.SL_LOG_ERR, nil, msg, #msg)
        return false
    end
    return res and true or false
end

return _M
