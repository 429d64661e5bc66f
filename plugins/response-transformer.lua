-- response-transformer: Kong's response-transformer. Edits the response's headers (in
-- header_filter) and the top-level fields of a JSON response body (in body_filter, which
-- holds the body until its end) in the order remove, rename, replace, add, append.
local sluice = require("sluice")
local transform = require("sluice.transform")

local response, log = sluice.response, sluice.log
local tonumber, concat = tonumber, table.concat

local list = { type = "array", items = { type = "string" }, default = {} }
local ops = { type = "record", default = {}, fields = { headers = list, json = list } }

local M = {
    name = "response-transformer",
    version = "1.0",
    schema = {
        remove = ops,
        rename = ops,
        replace = ops,
        add = ops,
        append = ops,
        max_body = { type = "size", default = 1048576 },
    },
}

local WHATS = { "headers", "json" }
local OWNED = { ["content-length"] = true, ["transfer-encoding"] = true, connection = true,
                ["keep-alive"] = true, te = true, trailer = true, upgrade = true }

function M.check(conf)
    return transform.check(conf, WHATS, OWNED)
end

function M.prepare(conf)
    local p = transform.compile(conf, WHATS)
    p.logged = false
    return p
end

local function skip(p, why) transform.skip(p, log, "response body", why) end

function M.header_filter(conf, ctx, p)
    if p.json then
        -- decided on the upstream's head, before the header edits below
        if not transform.is_json(response.get_header("Content-Type")) then
            skip(p, "not JSON")
        elseif (tonumber(response.get_header("Content-Length") or "") or 0) > conf.max_body then
            skip(p, "larger than max_body")
        else
            ctx[p] = { n = 0 } -- this use's body buffer, keyed by its prepared table
        end
    end
    if p.headers then transform.headers(response, p) end
end

-- Pieces are held ("" goes out) until the end; past max_body what was held goes out
-- unchanged and the rest streams.
function M.body_filter(conf, ctx, chunk, eof, p)
    local st = ctx[p]
    if not st then return nil end
    st.n = st.n + #chunk
    st[#st + 1] = chunk
    if st.n > conf.max_body then
        ctx[p] = nil
        skip(p, "larger than max_body")
        return concat(st)
    end
    if not eof then return "" end
    ctx[p] = nil
    local raw = concat(st)
    local doc = transform.members(raw)
    if not doc then
        skip(p, "not a JSON object")
        return raw
    end
    transform.fields(doc, p, "json")
    return transform.object_text(doc)
end

return M
