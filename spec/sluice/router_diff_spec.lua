-- The C route matcher (core/config/router.c, which routes every request) against the
-- reference precedence in plain Lua (sluice.router.compile/match): random route tables,
-- random requests, and the two must pick the same route and strip the same bytes every
-- time. SLUICE_DIFF_SEED picks another seed; SLUICE_DIFF_REQUESTS another count.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
require("sluice.test") -- loads libsluice.so
local router = require("sluice.router")

local SEED = tonumber(os.getenv("SLUICE_DIFF_SEED") or "") or 20240530
local REQUESTS = tonumber(os.getenv("SLUICE_DIFF_REQUESTS") or "") or 100000
local PER_TABLE = 1000

local random = math.random
local function pick(list) return list[random(#list)] end

-- Hosts share suffixes (a.com, b.a.com, y.a.com) so exact, wildcard and deeper wildcard
-- lists overlap; prefixes share stems ("/a", "/a/", "/ab", "/api", "/api/v1").
local EXACT = { "a.com", "b.a.com", "x.y.a.com", "c.org", "[::1]", "127.0.0.1", "api.example.com" }
local WILD = { "*.a.com", "*.y.a.com", "*.b.a.com", "*.org", "*.example.com" }
local REQ_HOSTS = { "a.com", "b.a.com", "q.b.a.com", "x.y.a.com", "q.y.a.com", "y.a.com", "q.a.com",
    "c.org", "q.c.org", "org", ".org", "[::1]", "127.0.0.1", "", "example.com", "api.example.com",
    "w.api.example.com", "a.com.", "zz.other" }
local STEMS = { "/", "/a", "/a/", "/ab", "/a/b", "/a/b/", "/api", "/api/", "/api/v1", "/api/v1/",
    "/api/v2/users", "/s", "/s/", "/s/t", "/ba", "/b" }
local METHODS = { "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "PURGE" }
local REQ_METHODS = { "GET", "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "PURGE", "get", "HEAD" }
local HEADERS = { { "X-A", "1" }, { "X-A", "2" }, { "X-Env", "canary" }, { "X-Env", "prod" },
    { "X-Empty", "" }, { "x-team", "a b" } }
local CHARS = { "a", "b", "/", "x", "1" }

local function random_prefix()
    if random(4) == 1 then
        local p = "/"
        for _ = 1, random(0, 5) do p = p .. pick(CHARS) end
        return p
    end
    return pick(STEMS)
end

local function some(gen, max)
    local out = {}
    for _ = 1, random(0, max) do out[#out + 1] = gen() end
    return out
end

local function random_route(index, earlier)
    -- a copy of an earlier route's match (a tie that only file order breaks)
    if #earlier > 0 and random(10) == 1 then
        local e = pick(earlier)
        return { index = index, hosts = e.hosts, paths = e.paths, methods = e.methods, headers = e.headers,
                 strip_prefix = random(2) == 1, match_fn = e.match_fn }
    end
    local r = { index = index }
    local hk = random(3)
    r.hosts = hk == 1 and {} or some(function() return random(2) == 1 and pick(EXACT) or pick(WILD) end, 3)
    r.paths = {}
    if random(8) > 1 then
        for _ = 1, random(1, 3) do r.paths[#r.paths + 1] = random_prefix() end
    end
    r.methods = random(3) == 1 and some(function() return pick(METHODS) end, 3) or {}
    r.headers = {}
    if random(4) == 1 then
        local seen = {}
        for _ = 1, random(1, 2) do
            local h = pick(HEADERS)
            if not seen[h[1]:lower()] then
                seen[h[1]:lower()] = true
                r.headers[#r.headers + 1] = h
            end
        end
    end
    r.strip_prefix = #r.paths > 0 and random(3) == 1
    if random(8) == 1 then r.match_fn = function() end end -- asked through q.call
    return r
end

local function random_request()
    local path = random(30) == 1 and "*" or pick(STEMS)
    for _ = 1, random(0, 4) do path = path .. pick(CHARS) end
    local headers = {}
    for _ = 1, random(0, 3) do
        local h = pick(HEADERS)
        local name = random(2) == 1 and h[1]:upper() or h[1]
        headers[#headers + 1] = { name, random(5) == 1 and "other" or h[2] }
    end
    local q = { host = pick(REQ_HOSTS), method = pick(REQ_METHODS), path = path, headers = headers }
    q.header = function(name)
        name = name:lower()
        for _, h in ipairs(headers) do
            if h[1]:lower() == name then return h[2] end
        end
        return nil
    end
    -- a match function's answer: a fixed function of the route and the request
    q.call = function(_, index) return (index * 7 + #path + #q.host) % 3 ~= 0 end
    return q
end

describe("the C router", function()
    it(("agrees with the reference on %d random requests over random route tables"):format(REQUESTS), function()
        math.randomseed(SEED)
        local disagreements, shown, matched, stripped = 0, {}, 0, 0
        local done = 0
        while done < REQUESTS do
            local n = random(1, 120) -- past 32 entries a reference list is indexed by first segment
            local routes = {}
            for i = 0, n - 1 do routes[#routes + 1] = random_route(i, routes) end
            local ref = router.compile(routes)
            local rt = assert(router.c_new(routes))
            for _ = 1, math.min(PER_TABLE, REQUESTS - done) do
                local q = random_request()
                local a, sa = router.match(ref, q)
                local b, sb = router.c_match(rt, q)
                if a ~= b or sa ~= sb then
                    disagreements = disagreements + 1
                    if #shown < 5 then
                        shown[#shown + 1] = ("host=%q method=%s path=%q: reference %d/%d, C %d/%d (%d routes)")
                            :format(q.host, q.method, q.path, a, sa, b, sb, n)
                    end
                end
                if a >= 0 then matched = matched + 1 end
                if sa > 0 then stripped = stripped + 1 end
                done = done + 1
            end
        end
        assert.equal(0, disagreements, table.concat(shown, "\n"))
        -- the tables and requests exercise both outcomes (the inputs prove themselves)
        assert.is_true(matched > REQUESTS / 4 and matched < REQUESTS * 0.98, "matched " .. matched)
        assert.is_true(stripped > REQUESTS / 50, "stripped " .. stripped)
    end)

    it("asks for a match function only when the rest of the route holds, and carries on after a no", function()
        local routes = {
            { index = 0, hosts = {}, paths = { "/x" }, methods = {}, headers = {}, match_fn = function() end },
            { index = 1, hosts = {}, paths = {}, methods = {}, headers = {} },
        }
        local rt = assert(router.c_new(routes))
        local asked = {}
        local function q(path, yes)
            return { host = "h", method = "GET", path = path, headers = {},
                     call = function(_, index) asked[#asked + 1] = index return yes end }
        end
        assert.same({ 0, 0 }, { router.c_match(rt, q("/x/y", true)) })
        assert.same({ 1, 0 }, { router.c_match(rt, q("/x/y", false)) })
        assert.same({ 1, 0 }, { router.c_match(rt, q("/other", true)) })
        assert.same({ 0, 0 }, asked) -- not for /other, whose path the route does not match
    end)
end)
