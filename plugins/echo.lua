-- echo: answers 200 with the request as JSON:
-- {"method","path","query","headers":{lower-case name: value},"body"}.
-- For smoke tests, demos and as the default config's answer. Bytes that are not UTF-8 (a
-- binary body, a Latin-1 header) become U+FFFD: the answer is always valid JSON.
local sluice = require("sluice")

local request, response, json = sluice.request, sluice.response, sluice.json

local M = {
    name = "echo",
    version = "1.0",
    schema = {},
}

local byte, sub, find, concat, pairs = string.byte, string.sub, string.find, table.concat, pairs
local REPLACEMENT = "\239\191\189" -- U+FFFD

-- s with every byte that does not start a well-formed UTF-8 sequence (RFC 3629: no
-- overlong forms, no surrogates, nothing past U+10FFFF) replaced by U+FFFD, so that the
-- answer is JSON a strict decoder reads. ASCII (the common case) is returned as it is.
local function utf8_clean(s)
    if not find(s, "[\128-\255]") then return s end
    local out, n, i, len, from = {}, 0, 1, #s, 1
    while i <= len do
        local c, need, lo, hi = byte(s, i), 0, 0x80, 0xBF
        if c < 0x80 then need = 0
        elseif c >= 0xC2 and c <= 0xDF then need = 1
        elseif c >= 0xE0 and c <= 0xEF then
            need = 2
            if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
        elseif c >= 0xF0 and c <= 0xF4 then
            need = 3
            if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
        else need = -1 end
        local ok = need >= 0
        for k = 1, need do
            local d = byte(s, i + k)
            if not d or d < (k == 1 and lo or 0x80) or d > (k == 1 and hi or 0xBF) then ok = false break end
        end
        if ok then
            i = i + need + 1
        else
            n = n + 1; out[n] = sub(s, from, i - 1)
            n = n + 1; out[n] = REPLACEMENT
            i = i + 1
            from = i
        end
    end
    n = n + 1; out[n] = sub(s, from)
    return concat(out, "", 1, n)
end

function M.access(conf, ctx)
    local body, err = request.get_body()
    if err then
        return response.exit(413, { error = err })
    end
    local headers = request.get_headers()
    for k, v in pairs(headers) do headers[k] = utf8_clean(v) end
    local out = json.encode({
        method = request.get_method(),
        path = utf8_clean(request.get_path()),
        query = utf8_clean(request.get_query()),
        headers = headers,
        body = utf8_clean(body or ""),
    })
    return response.exit(200, out .. "\n", { ["Content-Type"] = "application/json" })
end

return M
