-- sluice.router: compiles the config's routes once per generation and matches requests.
--
-- Precedence (the design): exact host over wildcard host over no host; then the
-- longest path prefix; then the route with more conditions; then file order.
-- Requests are read through FFI accessors; matching a path prefix or a header
-- value compares bytes in place, so a match creates no Lua strings beyond the
-- (interned) host and method.
local ffi = require("ffi")
local base = require("sluice.base")

-- The request accessors and sl_ffi_log are declared by sluice (init.lua), which owns them.
require("sluice")

local C = ffi.C
local str_p, len_p = base.str_p, base.len_p
local ffi_string = ffi.string
local tonumber = tonumber
local sort = table.sort
local sub = string.sub

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

-- The request and its path travel through the matching functions as numbers (addresses)
-- and become pointers only inside the FFI calls: a pointer held in a Lua slot where one trace
-- hands over to another (the list scan is a loop, its own trace) or leaves to the
-- interpreter is boxed, an allocation per request (spec/sluice/alloc_spec.lua saw 48 bytes).
local ffi_cast, CHAR_PTR, UINTPTR = ffi.cast, ffi.typeof("const char *"), ffi.typeof("uintptr_t")
local REQ_PTR = base.REQ_PTR

local function headers_match(req, headers)
    for i = 1, #headers do
        local h = headers[i]
        local name, want = h[1], h[2]
        if C.sl_ffi_req_get_header(ffi_cast(REQ_PTR, req), name, #name, str_p, len_p) ~= C.SL_OK then
            return false
        end
        local n = tonumber(len_p[0])
        if n ~= #want or C.memcmp(str_p[0], want, n) ~= 0 then return false end
    end
    return true
end

-- First entry of `list` whose conditions hold; path is (pointer, length).
local function call_match(e, req)
    -- a Lua match function sees the request through the plugin API
    local api = e.api or require("sluice")
    e.api = api
    base.begin(req, nil, e.index)
    local ok, res = pcall(e.fn, api.request)
    base.req = nil
    if not ok then
        local msg = "lua_routes match function failed (no match): " .. tostring(res)
        C.sl_ffi_log(ffi_cast(REQ_PTR, req), C.SL_LOG_ERR, nil, msg, #msg)
        return false
    end
    return res and true or false
end

local function holds(e, req, path, plen, method)
    return e.plen <= plen and (e.plen == 0 or C.memcmp(ffi_cast(CHAR_PTR, path), e.prefix, e.plen) == 0)
        and (not e.methods or e.methods[method])
        and (#e.headers == 0 or headers_match(req, e.headers))
        and (not e.fn or call_match(e, req))
end

local function scan_all(list, req, path, plen, method)
    for i = 1, #list do
        local e = list[i]
        if holds(e, req, path, plen, method) then return e end
    end
    return nil
end

-- The first entry of `list` (in precedence order) whose conditions hold. A long list is
-- indexed (see index below): only the entries under the path's first segment and those
-- whose prefix is shorter than any segment are tried, merged back into precedence order
-- by their rank.
local SLASH = 47
local function scan(list, req, path, plen, method)
    local buckets = list.buckets
    if not buckets then return scan_all(list, req, path, plen, method) end
    local bucket
    if plen > 1 then
        local p = ffi_cast(CHAR_PTR, path)
        local q = C.memchr(p + 1, SLASH, plen - 1)
        if q ~= nil then bucket = buckets[ffi_string(p, tonumber(ffi_cast(CHAR_PTR, q) - p) + 1)] end
    end
    local short = list.short
    if not bucket then return scan_all(short, req, path, plen, method) end
    local i, j, ni, nj = 1, 1, #bucket, #short
    while i <= ni or j <= nj do
        local e
        if j > nj or (i <= ni and bucket[i].rank < short[j].rank) then
            e, i = bucket[i], i + 1
        else
            e, j = short[j], j + 1
        end
        if holds(e, req, path, plen, method) then return e end
    end
    return nil
end

-- Returns the matching route's 0-based index and the bytes strip_prefix removes, or -1, 0.
-- req: the request's address as a number (what C passes).
function _M.match(t, req)
    C.sl_ffi_req_get_host(ffi_cast(REQ_PTR, req), str_p, len_p)
    local host = ffi_string(str_p[0], len_p[0])
    C.sl_ffi_req_get_method(ffi_cast(REQ_PTR, req), str_p, len_p)
    local method = ffi_string(str_p[0], len_p[0])
    C.sl_ffi_req_get_path(ffi_cast(REQ_PTR, req), str_p, len_p)
    local path, plen = tonumber(ffi_cast(UINTPTR, str_p[0])), tonumber(len_p[0])

    local list = t.exact[host]
    local e = list and scan(list, req, path, plen, method)
    if e then return e.index, e.strip end
    local wild = t.wild
    local hlen = #host
    for i = 1, #wild do
        local w = wild[i]
        if hlen > w.slen and sub(host, hlen - w.slen + 1) == w.suffix then
            e = scan(w.list, req, path, plen, method)
            if e then return e.index, e.strip end
        end
    end
    e = scan(t.none, req, path, plen, method)
    if e then return e.index, e.strip end
    return -1, 0
end

-- The dispatcher C calls once per request (see lua_host.c).
function _M.new(routes)
    local t = _M.compile(routes)
    local match = _M.match
    return function(req)
        -- C passes the request's address as a number, which match casts (a lightuserdata
        -- does not convert in a trace: "NYI: unsupported C type conversion", and the router
        -- stayed in the interpreter)
        local a, b = match(t, req)
        return a, b
    end
end

return _M
