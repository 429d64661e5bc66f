-- compression: gzip or brotli on the way out, chosen by the client's Accept-Encoding
-- (sluice.compress.choose), for responses of the listed types. The encoder streams in the
-- core (core/proto/compress.c, one per response, freed with the request): the body is never
-- held whole. header_filter decides and edits the head; body_filter feeds the encoder.
local sluice = require("sluice")
local compress = require("sluice.compress")

local request, response, log = sluice.request, sluice.response, sluice.log
local pcall, lower, find, sub = pcall, string.lower, string.find, string.sub

local M = {
    name = "compression",
    version = "1.0",
    body_last = true, -- encodes the body: a config with a body_filter after it is refused
    schema = {
        types = { type = "array", items = { type = "string" },
                  default = { "text/*", "application/json", "application/javascript", "image/svg+xml" } },
        min_length = { type = "size", default = 860 },
        level = { type = "record", default = {}, fields = {
            gzip = { type = "integer", default = 5, min = 1, max = 9 },
            brotli = { type = "integer", default = 4, min = 0, max = 11 },
        } },
        -- the codings offered, most preferred first (it breaks ties between equal q-values)
        encodings = { type = "array", min = 1, items = { type = "enum", one_of = { "br", "gzip" } },
                      default = { "br", "gzip" } },
    },
}

function M.check(conf)
    local seen = {}
    for _, e in ipairs(conf.encodings) do
        if seen[e] then return nil, "encodings lists " .. e .. " twice" end
        seen[e] = true
    end
    for _, t in ipairs(conf.types) do
        if not find(t, "/", 1, true) and t ~= "*" then
            return nil, "types: '" .. t .. "' is not a media type (type/subtype, type/* or */*)"
        end
    end
    return true
end

function M.prepare(conf)
    return { match = compress.types(conf.types), prefer = conf.encodings,
             level = { gzip = conf.level.gzip, br = conf.level.brotli } }
end

-- Adds Accept-Encoding to the response's Vary (kept as is when it already names it or *).
local function vary()
    local v = response.get_header("Vary")
    if v == nil then
        response.set_header("Vary", "Accept-Encoding")
        return
    end
    v = response.get_headers().vary or v -- every Vary field, joined
    local lv = lower(v)
    if find(lv, "accept-encoding", 1, true) or find(lv, "*", 1, true) then return end
    response.set_header("Vary", v .. ", Accept-Encoding")
end

-- Every field `name` of one side (request or response) as one value: a list header may come
-- in several fields (RFC 9110 5.3), and get_header gives the first. nil when absent.
local function joined(api, name, lname)
    local v = api.get_header(name)
    if v == nil then return nil end
    return api.get_headers()[lname] or v
end

-- Why a response is left as it is (nil: it may be compressed).
local function ineligible(conf, p)
    if request.get_method() == "HEAD" then return "HEAD" end
    local status = response.get_status()
    if status < 200 or status == 204 or status == 304 or status == 206 then return "status" end
    if response.get_header("Content-Range") then return "a range" end
    local ct = response.get_header("Content-Type")
    if not p.match(ct) then return "type" end
    -- a stream of events must reach the client as each is sent: never held by an encoder
    if find(lower(ct), "text/event-stream", 1, true) then return "event stream" end
    local cl = compress.body_length()
    if cl and cl < conf.min_length then return "short" end
    local ce = joined(response, "Content-Encoding", "content-encoding")
    if ce and lower(ce) ~= "identity" then return "already encoded" end
    local cc = joined(response, "Cache-Control", "cache-control")
    if cc and find(lower(cc), "no-transform", 1, true) then return "no-transform" end
    return nil
end

function M.header_filter(conf, ctx, p)
    local why = ineligible(conf, p)
    if why then return end
    -- From here the response depends on Accept-Encoding, compressed or not: caches must key on it.
    vary()
    local coding = compress.choose(joined(request, "Accept-Encoding", "accept-encoding"), p.prefer)
    if not coding then return end
    local ok, err = compress.begin(coding, p.level[coding])
    if not ok then
        log.warn("not compressed:", err)
        return
    end
    local st = { first = true, etag = response.get_header("ETag"), ranges = response.get_header("Accept-Ranges") }
    response.set_header("Content-Encoding", coding)
    -- the encoded bytes are another representation: a strong validator would promise the
    -- same bytes as the identity one's (nginx weakens it too), and ranges of it are not served
    if st.etag and sub(st.etag, 1, 2) ~= "W/" then response.set_header("ETag", "W/" .. st.etag) end
    if st.ranges then response.clear_header("Accept-Ranges") end
    ctx[p] = st
end

function M.body_filter(conf, ctx, chunk, eof, p)
    local st = ctx[p]
    if not st then return nil end
    if st.first then
        st.first = false
        -- A plugin's or the gateway's answer comes whole, before its head is sent: one shorter
        -- than min_length goes out as it is (its head can still be put back). A streamed
        -- body's head is gone by now: clear_header raises and the body is encoded.
        if eof and #chunk < conf.min_length and pcall(response.clear_header, "Content-Encoding") then
            ctx[p] = nil
            if st.etag then response.set_header("ETag", st.etag) end
            if st.ranges then response.set_header("Accept-Ranges", st.ranges) end
            return nil
        end
    end
    return compress.piece(chunk, eof)
end

return M
