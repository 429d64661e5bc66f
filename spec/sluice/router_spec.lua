-- sluice.router through the real core: every route answers its own name with the
-- `response` plugin, so the answer tells which route matched.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local function route(name, match, extra)
    local r = { name = name, match = match,
                plugins = { { name = "response", config = { body = name } } } }
    for k, v in pairs(extra or {}) do r[k] = v end
    return r
end

-- Twice: as written, and with filler routes that make every list of the router (no host,
-- the exact host api.example.com, the wildcard *.example.com) long enough to be indexed by
-- first path segment (router.lua's INDEX_MIN): the answers must not change.
local function fillers(n)
    local out = {}
    for i = 1, n do
        out[#out + 1] = route("fill" .. i, { paths = { "/fill" .. i .. "/" } })
        out[#out + 1] = route("hfill" .. i, { hosts = { "api.example.com" }, paths = { "/hfill" .. i .. "/x" } })
        out[#out + 1] = route("wfill" .. i, { hosts = { "*.example.com" }, paths = { "/wfill" .. i .. "/" } })
    end
    return out
end

for _, pad in ipairs({ 0, 40 }) do
    describe(pad == 0 and "router" or "router, lists indexed (" .. pad * 3 .. " filler routes)", function()
        local gw, up, strip
        setup(function()
            local routes = {
                    -- hosts
                    route("no-host", { paths = { "/" } }),
                    route("wild", { hosts = { "*.example.com" }, paths = { "/" } }),
                    route("wild-deep", { hosts = { "*.api.example.com" }, paths = { "/deep" } }),
                    route("exact", { hosts = { "api.example.com" }, paths = { "/" } }),
                    route("exact-other", { hosts = { "Other.Example.org", "127.0.0.1" }, paths = { "/only" } }),
                    route("no-host-long", { paths = { "/long/path" } }),
                    -- longest prefix
                    route("api", { paths = { "/api" } }),
                    route("api-v2", { paths = { "/api/v2" } }),
                    route("api-v2-users", { paths = { "/api/v2/users/" } }),
                    route("multi", { paths = { "/m1", "/m2/deeper" } }),
                    -- more conditions, then file order
                    route("c-plain", { paths = { "/c" } }),
                    route("c-get", { paths = { "/c" }, methods = { "GET" } }),
                    route("c-get-hdr", { paths = { "/c" }, methods = { "GET" }, headers = { ["X-Canary"] = "1" } }),
                    route("first", { paths = { "/same" } }),
                    route("second", { paths = { "/same" } }),
                    route("short-more", { paths = { "/p" }, methods = { "GET" }, headers = { ["X-A"] = "1" } }),
                    route("long-less", { paths = { "/p/q" } }),
                    -- methods and headers
                    route("writes", { paths = { "/m" }, methods = { "post", "PUT" } }),
                    route("hdr", { paths = { "/h" }, headers = { ["X-Env"] = "canary", ["X-Team"] = "a" } }),
                    route("hdr-empty", { paths = { "/e" }, headers = { ["X-Empty"] = "" } }),
                    route("everything", { hosts = { "all.test" } }),
            }
            for _, r in ipairs(fillers(pad)) do routes[#routes + 1] = r end
            gw = assert(test.start({ routes = routes }))
            up = test.upstream()
            strip = assert(test.start({
                upstreams = { { name = "u", targets = { { address = up:address() } } } },
                routes = {
                    { name = "svc", match = { paths = { "/svc" } }, upstream = "u", strip_prefix = true },
                    { name = "v1", match = { paths = { "/v1/" } }, upstream = "u", strip_prefix = true },
                    { name = "keep", match = { paths = { "/keep" } }, upstream = "u" },
                },
            }))
        end)
        teardown(function()
            gw:stop()
            strip:stop()
            up:stop()
        end)

        local function which(path, opts)
            opts = opts or {}
            local res = assert(gw:request({ method = opts.method, path = path, host = opts.host, headers = opts.headers }))
            if res.status == 404 then return 404 end
            assert.equal(200, res.status)
            return res.body
        end

        if pad > 0 then
            it("finds the filler routes in their buckets", function()
                assert.equal("fill7", which("/fill7/x"))
                assert.equal("no-host", which("/fill7")) -- shorter than the filler's prefix
                assert.equal("hfill3", which("/hfill3/x/y", { host = "api.example.com" }))
                assert.equal("wfill9", which("/wfill9/", { host = "a.example.com" }))
            end)
        end

        it("prefers an exact host over a wildcard host over no host", function()
            assert.equal("exact", which("/x", { host = "api.example.com" }))
            assert.equal("wild", which("/x", { host = "www.example.com" }))
            assert.equal("no-host", which("/x", { host = "example.org" }))
        end)

        it("matches hosts case-insensitively and without the port", function()
            assert.equal("exact", which("/x", { host = "API.Example.COM:8080" }))
            assert.equal("exact-other", which("/only", { host = "other.example.org" }))
            assert.equal("exact-other", which("/only", { host = "127.0.0.1:80" }))
            -- a fully qualified name: one trailing dot, with or without the port
            assert.equal("exact", which("/x", { host = "api.example.com." }))
            assert.equal("exact", which("/x", { host = "API.example.com.:8080" }))
            assert.equal("wild", which("/x", { host = "www.example.com." }))
            assert.equal("no-host", which("/x", { host = "api.example.com.." }))
        end)

        it("lets the host decide before the path length", function()
            -- no-host-long has the longer prefix, but the exact host wins
            assert.equal("exact", which("/long/path/x", { host = "api.example.com" }))
            assert.equal("no-host-long", which("/long/path/x", { host = "elsewhere.test" }))
        end)

        it("falls back to the next host class when a host's routes do not match", function()
            assert.equal("no-host", which("/elsewhere", { host = "other.example.org" }))
            -- *.api.example.com only has /deep: other paths go on to *.example.com
            assert.equal("wild-deep", which("/deep/x", { host = "a.api.example.com" }))
            assert.equal("wild", which("/shallow", { host = "a.api.example.com" }))
        end)

        it("matches a wildcard against any depth of subdomain but not the bare domain", function()
            assert.equal("wild", which("/x", { host = "a.b.example.com" }))
            assert.equal("no-host", which("/x", { host = "example.com" }))
            assert.equal("no-host", which("/x", { host = "badexample.com" }))
        end)

        it("picks the longest path prefix", function()
            assert.equal("api", which("/api"))
            assert.equal("api", which("/api/v1/x"))
            assert.equal("api-v2", which("/api/v2"))
            assert.equal("api-v2", which("/api/v2/users")) -- "/api/v2/users/" is longer than the path
            assert.equal("api-v2-users", which("/api/v2/users/7"))
            assert.equal("api", which("/apixyz")) -- prefixes are bytes, not segments
            assert.equal("multi", which("/m1/x"))
            assert.equal("multi", which("/m2/deeper/x"))
            assert.equal("no-host", which("/m2/x"))
        end)

        it("matches the path without the query", function()
            assert.equal("api-v2", which("/api/v2?x=/api/v2/users/1"))
        end)

        it("prefers the route with more conditions, then the first in the file", function()
            assert.equal("c-get-hdr", which("/c", { headers = { ["X-Canary"] = "1" } }))
            assert.equal("c-get", which("/c", { headers = { ["X-Canary"] = "2" } }))
            assert.equal("c-get", which("/c"))
            assert.equal("c-plain", which("/c", { method = "POST", headers = { ["X-Canary"] = "1" } }))
            assert.equal("first", which("/same"))
            -- the path length comes before the number of conditions
            assert.equal("long-less", which("/p/q", { headers = { ["X-A"] = "1" } }))
            assert.equal("short-more", which("/p/r", { headers = { ["X-A"] = "1" } }))
        end)

        it("matches methods, upper-cased at load", function()
            assert.equal("writes", which("/m", { method = "POST" }))
            assert.equal("writes", which("/m", { method = "PUT" }))
            assert.equal("no-host", which("/m", { method = "GET" }))
            assert.equal("no-host", which("/m", { method = "DELETE" }))
        end)

        it("needs every header to match exactly, names case-insensitive, values not", function()
            assert.equal("hdr", which("/h", { headers = { ["x-env"] = "canary", ["X-TEAM"] = "a" } }))
            assert.equal("no-host", which("/h", { headers = { ["X-Env"] = "canary" } }))
            assert.equal("no-host", which("/h", { headers = { ["X-Env"] = "Canary", ["X-Team"] = "a" } }))
            assert.equal("no-host", which("/h", { headers = { ["X-Env"] = "canary2", ["X-Team"] = "a" } }))
            assert.equal("hdr-empty", which("/e", { headers = { ["X-Empty"] = "" } }))
            assert.equal("no-host", which("/e"))
        end)

        it("matches every path of a route without paths", function()
            assert.equal("everything", which("/anything/at/all", { host = "all.test" }))
            assert.equal("everything", which("/", { host = "all.test" }))
        end)

        it("answers 404 JSON when nothing matches", function()
            local only = assert(test.start({ routes = { route("only", { paths = { "/only" } }),
                                                       route("h", { hosts = { "h.test" } }) } }))
            local res = assert(only:request({ path = "/other" }))
            local res2 = assert(only:request({ path = "/only", method = "POST", host = "x.test" }))
            only:stop()
            assert.equal(404, res.status)
            assert.equal("application/json", res.headers["content-type"])
            assert.same({ error = "no route" }, res.json())
            assert.equal("only", res2.body)
        end)

        it("answers 404 with no routes at all", function()
            local none = assert(test.start({}))
            local res = assert(none:request({ path = "/" }))
            none:stop()
            assert.equal(404, res.status)
            assert.same({ error = "no route" }, res.json())
        end)

        describe("strip_prefix", function()
            local function seen(path)
                local res = assert(strip:request({ path = path }))
                assert.equal(200, res.status)
                local j = res.json()
                return j.path, j.query
            end

            it("removes the matched prefix before proxying, keeping the query", function()
                assert.same({ "/a/b", "x=1" }, { seen("/svc/a/b?x=1") })
                assert.same({ "/users/7", "" }, { seen("/v1/users/7") })
            end)

            it("sends / when the prefix was the whole path", function()
                assert.same({ "/", "" }, { seen("/svc") })
                assert.same({ "/", "q=1" }, { seen("/svc?q=1") })
                assert.same({ "/", "" }, { seen("/v1/") })
            end)

            it("is off by default", function()
                assert.same({ "/keep/a", "" }, { seen("/keep/a") })
            end)
        end)
    end)
end
