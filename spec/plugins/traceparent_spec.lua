-- traceparent: W3C Trace Context propagated or started, as the upstream sees it.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local function absolute(dir)
    if dir:sub(1, 1) == "/" then return dir end
    local cwd = os.getenv("PWD") or assert(io.popen("pwd")):read("*l")
    return (cwd .. "/" .. dir):gsub("/%./", "/"):gsub("/%.$", "")
end
local FIXTURES = absolute(test.SOURCE_DIR) .. "/spec/fixtures/plugins"

local TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
local PARENT = "00f067aa0ba902b7"
local STATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"

local function parse(tp)
    return tp:match("^(00)%-(%x+)%-(%x+)%-(%x%x)$")
end

describe("traceparent", function()
    local up, gw
    setup(function()
        up = test.upstream()
        local function route(name, config)
            return { name = name, match = { paths = { "/" .. name } }, upstream = "u",
                     plugins = { { name = "traceparent", config = config },
                                 { name = "ctx-show", config = { keys = { "trace_id", "span_id" } } } } }
        end
        gw = assert(test.start({
            plugin_paths = { FIXTURES },
            upstreams = { { name = "u", targets = { { address = up:address() } } } },
            routes = { route("t", nil), route("never", { sample_ratio = 0 }) },
        }))
    end)
    teardown(function()
        gw:stop()
        up:stop()
    end)

    local function send(path, headers)
        local res = assert(gw:request({ path = path, headers = headers }))
        assert.equal(200, res.status)
        local seen = res.json().headers
        return seen, res
    end

    it("starts a sampled trace when the client sent none", function()
        local seen, res = send("/t")
        local v, trace, span, flags = parse(assert(seen.traceparent))
        assert.equal("00", v)
        assert.equal(32, #trace)
        assert.equal(16, #span)
        assert.equal("01", flags)
        assert.is_nil(trace:find("%u"))
        assert.are_not.equal(("0"):rep(32), trace)
        assert.equal(trace, res.headers["x-ctx-trace_id"])
        assert.equal(span, res.headers["x-ctx-span_id"])
        -- each request is a new trace
        local seen2 = send("/t")
        assert.are_not.equal(trace, select(2, parse(seen2.traceparent)))
    end)

    it("keeps a valid traceparent's trace id and flags, with this hop's span as the parent", function()
        for _, flags in ipairs({ "01", "00" }) do
            local seen, res = send("/t", { traceparent = ("00-%s-%s-%s"):format(TRACE, PARENT, flags), tracestate = STATE })
            local _, trace, span, f = parse(seen.traceparent)
            assert.equal(TRACE, trace)
            assert.equal(flags, f)
            assert.equal(16, #span)
            assert.are_not.equal(PARENT, span)
            assert.equal(STATE, seen.tracestate)
            assert.equal(TRACE, res.headers["x-ctx-trace_id"])
            assert.equal(span, res.headers["x-ctx-span_id"])
        end
    end)

    it("accepts a future version and sends it on as version 00", function()
        local seen = send("/t", { traceparent = ("01-%s-%s-01"):format(TRACE, PARENT) })
        local v, trace, span, flags = parse(seen.traceparent)
        assert.same({ "00", TRACE, "01" }, { v, trace, flags })
        assert.are_not.equal(PARENT, span)
    end)

    it("starts a new trace and drops tracestate for an invalid traceparent", function()
        local bad = {
            ("00-%s-%s-01"):format(TRACE:upper(), PARENT),          -- upper-case hex
            ("00-%s-%s-01"):format(TRACE, PARENT:upper()),
            ("00-%s-%s-01"):format(("0"):rep(32), PARENT),         -- all-zero trace id
            ("00-%s-%s-01"):format(TRACE, ("0"):rep(16)),          -- all-zero parent id
            ("ff-%s-%s-01"):format(TRACE, PARENT),                 -- version ff
            ("00-%s-%s-01"):format(TRACE:sub(2), PARENT),          -- short trace id
            ("00-%s-%s-01"):format(TRACE, PARENT .. "0"),          -- long parent id
            ("00-%s-%s-1"):format(TRACE, PARENT),                  -- one-digit flags
            ("00-%s-%s-01-extra"):format(TRACE, PARENT),
            ("00-%s-%s-0g"):format(TRACE, PARENT),
            "garbage",
        }
        for _, tp in ipairs(bad) do
            local seen, res = send("/t", { traceparent = tp, tracestate = STATE })
            local v, trace, span, flags = parse(seen.traceparent)
            assert.equal("00", v, tp)
            assert.are_not.equal(TRACE, trace, tp)
            assert.are_not.equal(TRACE:upper(), trace, tp)
            assert.equal(32, #trace, tp)
            assert.equal(16, #span, tp)
            assert.equal("01", flags, tp)
            assert.is_nil(seen.tracestate, tp)
            assert.equal(trace, res.headers["x-ctx-trace_id"], tp)
        end
    end)

    it("drops a tracestate that comes without a traceparent", function()
        local seen = send("/t", { tracestate = STATE })
        assert.is_nil(seen.tracestate)
        assert.is_truthy(parse(seen.traceparent))
    end)

    it("marks traces it starts unsampled with sample_ratio 0, but keeps an incoming sampled flag", function()
        for _ = 1, 10 do
            local _, _, _, flags = parse(send("/never").traceparent)
            assert.equal("00", flags)
        end
        local _, trace, _, flags = parse(send("/never", { traceparent = ("00-%s-%s-01"):format(TRACE, PARENT) }).traceparent)
        assert.same({ TRACE, "01" }, { trace, flags })
    end)

    it("rejects a sample_ratio outside 0-1", function()
        local g, err = test.start({ routes = { { name = "r", plugins = { { name = "traceparent", config = { sample_ratio = 1.5 } } } } } })
        assert.is_nil(g)
        assert.matches("route 'r', plugin 'traceparent': sample_ratio: must be <= 1", err, 1, true)
    end)
end)
