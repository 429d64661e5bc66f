-- The sluice API's arguments (docs/plugins.md): what each function takes, and that a
-- programmer's mistake raises (the request answers 500, logged with file:line) instead
-- of doing something else. Through the api-call fixture in spec/fixtures/plugins.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local FIXTURES = test.source_path("spec/fixtures/plugins")

local CASES = { "exit_list", "resp_set_list", "req_set_list", "req_set_nil", "resp_set_nil", "req_add_fn",
                "exit_header_table_of_tables", "exit_bad_header_list", "sleep_nan", "sleep_inf", "sleep_neg",
                "shared_neg_ttl", "shared_nan_ttl", "shared_str_ttl", "incr_neg_ttl", "incr_str_init",
                "incr_nan_delta", "incr_inf_delta", "incr_nan_init", "shared_ok_ttl",
                "exit_fraction", "http_bad_scheme", "http_bad_port",
                "req_add_host", "req_clear_host", "exit_tail_bad_status", "raise_table", "raise_nil",
                "limit_redis_unconfigured", "redis_unconfigured", "req_cookies", "read_body_nan" }

describe("sluice API arguments", function()
    local up, gw
    setup(function()
        up = test.upstream()
        local routes = {}
        for _, c in ipairs(CASES) do
            routes[#routes + 1] = { name = c, match = { paths = { "/" .. c } }, upstream = "echo",
                                    plugins = { { name = "api-call", config = { case = c } } } }
        end
        for _, ph in ipairs({ "header_filter", "body_filter", "log" }) do
            routes[#routes + 1] = { name = "upstream_set_" .. ph, match = { paths = { "/upstream_set_" .. ph } },
                                    upstream = "echo",
                                    plugins = { { name = "api-call", config = { case = "upstream_set", phase = ph } } } }
        end
        routes[#routes + 1] = { name = "tail_in_body_filter", match = { paths = { "/tail_in_body_filter" } },
                                upstream = "echo", plugins = { { name = "api-call",
                                    config = { case = "upstream_set_tail", phase = "body_filter" } } } }
        routes[#routes + 1] = { name = "exit_tail_in_log", match = { paths = { "/exit_tail_in_log" } }, upstream = "echo",
                                plugins = { { name = "api-call", config = { case = "exit_tail_in_log", phase = "log" } } } }
        gw = assert(test.start({
            plugin_paths = { FIXTURES },
            upstreams = { { name = "echo", targets = { { address = up:address() } } } },
            routes = routes,
        }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
        test.capture_logs(false)
    end)

    local function fields(res, name)
        local out = {}
        for _, kv in ipairs(res.header_list) do
            if kv[1] == name then out[#out + 1] = kv[2] end
        end
        return out
    end

    -- Requests /case; its response and the error lines logged for the route (the log
    -- phase's come after the answer: polled for up to a second). With cut, the response may
    -- end early (an error in body_filter closes the connection after the head).
    local function request_logged(case, cut)
        test.capture_logs(true)
        local res, err = gw:request({ path = "/" .. case, timeout = 2 })
        if not cut then assert(res, err) end
        local lines = {}
        for _ = 1, 100 do
            for _, l in ipairs(test.logs()) do
                if l.route == case and l.level == "error" then lines[#lines + 1] = l end
            end
            if #lines > 0 then break end
            os.execute("sleep 0.01")
        end
        test.capture_logs(false)
        return res, lines
    end

    -- The case answers 500 and its log line names the fixture's file and line.
    local function raises(case, pattern)
        local res, lines = request_logged(case)
        assert.equal(500, res.status)
        assert.equal(1, #lines)
        assert.matches("^plugin error: .*api%-call%.lua:%d+: " .. pattern, lines[1].msg)
    end

    describe("header values", function()
        it("a list in exit's headers is one field per value (several Set-Cookie)", function()
            local res = assert(gw:request({ path = "/exit_list" }))
            assert.equal(200, res.status)
            assert.same({ "a=1", "b=2" }, fields(res, "set-cookie"))
            assert.same({ "1" }, fields(res, "x-one"))
        end)

        it("response.set_header with a list replaces the field with those values; add_header adds each; {} clears",
            function()
            local res = assert(gw:request({ path = "/resp_set_list" }))
            assert.equal(200, res.status)
            assert.same({ "1", "2" }, fields(res, "x-l"))
            assert.same({ "3", "true" }, fields(res, "x-a"))
            assert.same({}, fields(res, "x-e"))
        end)

        it("request.set_header / add_header take lists too", function()
            local res = assert(gw:request({ path = "/req_set_list" }))
            assert.equal(200, res.status)
            assert.equal("1, 2, 3", res.json().l)
        end)

        it("nil raises instead of sending the text \"nil\"", function()
            raises("req_set_nil", "header value must be a string, a number or a boolean.*got nil")
            raises("resp_set_nil", "header value must be a string.*got nil")
        end)

        it("a function, or a list holding a table, raises instead of sending \"function: 0x...\"", function()
            raises("req_add_fn", "header value must be .*got function")
            raises("exit_header_table_of_tables", "header value must be .*got table")
        end)

        it("each value of a list is checked like a single one (no CR/LF)", function()
            raises("exit_bad_header_list", ".")
        end)
    end)

    describe("response.exit", function()
        it("a status with a fraction raises instead of going out truncated", function()
            raises("exit_fraction", "status must be a whole number 200%.%.599")
        end)
    end)

    describe("request.get_headers", function()
        it("joins repeated Cookie fields with \"; \" (a cookie-string, as over HTTP/2), others with \", \"", function()
            local raw = "GET /req_cookies HTTP/1.1\r\nHost: h\r\nCookie: a=1\r\nX-Two: 1\r\ncookie: b=2\r\n"
                        .. "X-Two: 2\r\nConnection: close\r\n\r\n"
            local res = assert(gw:request({ raw = raw }))
            assert.equal(200, res.status)
            assert.same({ cookie = "a=1; b=2", other = "1, 2" }, res.json())
        end)
    end)

    describe("the request's Host", function()
        it("add_header(\"Host\") replaces it: the upstream gets one Host, not two (its 400)", function()
            local res = assert(gw:request({ path = "/req_add_host" }))
            assert.equal(200, res.status)
            assert.equal("other.example", res.json().headers.host)
        end)

        it("clear_header(\"Host\") raises: an HTTP/1.1 request without Host is the upstream's 400", function()
            raises("req_clear_host", "Host is required upstream")
        end)
    end)

    describe("sluice.limit with store redis, and sluice.redis", function()
        it("without redis: in the config raise at the plugin's line, not inside sluice/redis_limit.lua", function()
            raises("limit_redis_unconfigured", "no redis in the config")
            raises("redis_unconfigured", "no redis in the config")
        end)
    end)

    describe("http.request", function()
        it("a bad url raises at the plugin's line, not inside sluice/http.lua", function()
            raises("http_bad_scheme", "url scheme must be http or https, got ftp")
            raises("http_bad_port", "url has a bad port")
        end)
    end)

    describe("an error raised by an API function the plugin tail-called", function()
        -- `return sluice.response.exit(...)` is the documented idiom; the tail call leaves no
        -- frame of the plugin, and error(msg, 2) named sluice/runtime.lua's dispatcher line
        it("names the plugin's file and its phase function's line, not sluice/runtime.lua", function()
            raises("exit_tail_bad_status", "status must be 200%.%.599 .*%(a tail call in the function defined at this line%)$")
        end)

        it("does so in body_filter too", function()
            local _, lines = request_logged("tail_in_body_filter", true)
            local line = assert(lines[1])
            assert.matches("^plugin error: .*api%-call%.lua:%d+: upstream%.set works in rewrite and access only", line.msg)
            assert.not_matches("runtime%.lua", line.msg)
        end)

        it("does so in the log phase too", function()
            local res, lines = request_logged("exit_tail_in_log")
            assert.equal(200, res.status)
            local line = lines[1]
            assert.matches("^plugin error: .*api%-call%.lua:%d+: response%.exit works in rewrite and access only",
                           assert(line).msg)
            assert.not_matches("runtime%.lua", line.msg)
        end)
    end)

    describe("upstream.set", function()
        it("raises after the upstream was chosen, naming the phase, as the other rewrite/access calls do", function()
            for _, ph in ipairs({ "header_filter", "body_filter", "log" }) do
                local _, lines = request_logged("upstream_set_" .. ph, true)
                assert.matches("^plugin error: .*api%-call%.lua:%d+: upstream%.set works in rewrite and access only %(called in "
                               .. ph .. "%)", assert(lines[1], ph).msg)
            end
        end)
    end)

    describe("an error object that is not a string", function()
        it("is logged as what it is, not as '?'", function()
            for case, what in pairs({ raise_table = "table", raise_nil = "nil" }) do
                local res, lines = request_logged(case)
                assert.equal(500, res.status)
                assert.equal("plugin error: (error object is a " .. what .. " value)", assert(lines[1]).msg)
            end
        end)
    end)

    describe("request.read_body", function()
        it("raises for a NaN max instead of reading without a limit", function()
            raises("read_body_nan", "max must be a number of bytes >= 0")
        end)
    end)

    describe("sleep", function()
        it("raises for NaN, infinity and negative seconds instead of suspending the request for good", function()
            raises("sleep_nan", "sleep needs a finite number of seconds >= 0")
            raises("sleep_inf", "sleep needs a finite number of seconds >= 0")
            raises("sleep_neg", "sleep needs a finite number of seconds >= 0")
        end)
    end)

    describe("shared", function()
        it("a negative or NaN ttl raises instead of storing the key for good", function()
            raises("shared_neg_ttl", "ttl must be a number of seconds >= 0")
            raises("shared_nan_ttl", "ttl must be a number of seconds >= 0")
            raises("incr_neg_ttl", "ttl must be a number of seconds >= 0")
            local shared = require("sluice").shared  -- the same process-wide key space
            assert.is_nil(shared.get("api-call:neg"))
            assert.is_nil(shared.get("api-call:nan"))
            assert.is_nil(shared.get("api-call:incr"))
        end)

        it("a ttl or init that is not a number raises with the argument's name", function()
            raises("shared_str_ttl", "ttl must be a number of seconds >= 0")
            raises("incr_str_init", "init must be a finite number")
        end)

        it("a NaN or infinite delta or init raises instead of storing a value no incr can undo", function()
            raises("incr_nan_delta", "delta must be a finite number")
            raises("incr_inf_delta", "delta must be a finite number")
            raises("incr_nan_init", "init must be a finite number")
            local shared = require("sluice").shared
            assert.is_nil(shared.get("api-call:incr-nan"))
            assert.is_nil(shared.get("api-call:incr-inf"))
            assert.is_nil(shared.get("api-call:incr-nan-init"))
        end)

        it("0 and positive ttls still work", function()
            local res = assert(gw:request({ path = "/shared_ok_ttl" }))
            assert.equal(200, res.status)
            assert.same({ a = true, b = true, c = 3 }, res.json())
        end)
    end)
end)
