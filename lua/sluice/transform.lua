-- sluice.transform: what request-transformer and response-transformer share (Kong's
-- shape): "name:value" entries checked at load and split once, and the five sections
-- applied in Kong's order (remove, rename, replace, add, append) to headers or to the
-- top-level fields of a JSON object.
local cjson = require("cjson.safe")

local ipairs, type = ipairs, type
local find, sub, byte, concat, remove = string.find, string.sub, string.byte, table.concat, table.remove
local encode = cjson.encode

local _M = {}

_M.SECTIONS = { "remove", "rename", "replace", "add", "append" }

local TOKEN = "^[!#$%%&'*+.^_`|~0-9A-Za-z-]+$"

-- "name:value" -> name, value (the value may hold ':'); under remove, the name alone.
local function split(entry, with_value)
    if not with_value then return entry end
    return entry:match("^([^:]+):(.*)$")
end

-- Checks every entry of conf[section][what] for each of `whats`; header names must be
-- tokens and not in `owned` (lower-case names the gateway sets). true or nil, msg.
function _M.check(conf, whats, owned)
    for _, sec in ipairs(_M.SECTIONS) do
        for _, what in ipairs(whats) do
            for i, e in ipairs(conf[sec][what]) do
                local k, v = split(e, sec ~= "remove")
                if not k or k == "" or (sec ~= "remove" and not v) then
                    return nil, ("%s.%s.%d: '%s' is not %s"):format(sec, what, i, e,
                        sec == "remove" and "a name" or "name:value")
                end
                if what == "headers" then
                    for _, n in ipairs(sec == "rename" and { k, v } or { k }) do
                        if not n:match(TOKEN) then
                            return nil, ("%s.headers.%d: '%s' is not a header name"):format(sec, i, n)
                        end
                        if owned[n:lower()] then
                            return nil, ("%s.headers.%d: '%s' is set by the gateway"):format(sec, i, n)
                        end
                    end
                    if sec ~= "rename" and v and v:find("[%z\1-\8\10-\31\127]") then
                        return nil, ("%s.headers.%d: the value has control characters"):format(sec, i)
                    end
                end
            end
        end
    end
    return true
end

-- { remove = { what = { {k}, ... } }, rename = { what = { {k, v}, ... } }, ...,
--   [what] = true when any section lists one }: built once in prepare.
function _M.compile(conf, whats)
    local p = {}
    for _, sec in ipairs(_M.SECTIONS) do
        local s = {}
        for _, what in ipairs(whats) do
            local l = {}
            for i, e in ipairs(conf[sec][what]) do
                local k, v = split(e, sec ~= "remove")
                l[i] = { k, v }
                p[what] = true
            end
            s[what] = l
        end
        p[sec] = s
    end
    return p
end

-- Applies the header sections of p (compiled) through a side of the API (request or
-- response): remove, rename when present, replace when present, add when absent, append.
function _M.headers(api, p)
    local get, set, clear = api.get_header, api.set_header, api.clear_header
    for _, kv in ipairs(p.remove.headers) do clear(kv[1]) end
    for _, kv in ipairs(p.rename.headers) do
        local v = get(kv[1])
        if v then
            clear(kv[1])
            set(kv[2], v)
        end
    end
    for _, kv in ipairs(p.replace.headers) do
        if get(kv[1]) then set(kv[1], kv[2]) end
    end
    for _, kv in ipairs(p.add.headers) do
        if not get(kv[1]) then set(kv[1], kv[2]) end
    end
    for _, kv in ipairs(p.append.headers) do api.add_header(kv[1], kv[2]) end
end

-- ---------------------------------------------------------------- JSON bodies
-- A body's top-level members are edited as text: a value no section names goes on byte for
-- byte as it came. Decoding the whole document and encoding it again changed what the
-- other side got: lua-cjson writes numbers with 14 significant digits (an id
-- 1234567890123456 became 1.2345678901235e+15) and reads [] and {} alike ([] became {}).

local strict = cjson.new()
strict.decode_invalid_numbers(false) -- NaN, Infinity, 0x10: not JSON

-- The index of the closing quote of the JSON string opening at i.
local function string_end(s, i)
    local j = i + 1
    while true do
        local k = find(s, '["\\]', j)
        if byte(s, k) == 92 then j = k + 2 else return k end
    end
end

-- The index of the last byte of the JSON value starting at i (s is valid JSON).
local function value_end(s, i)
    local c = byte(s, i)
    if c == 34 then return string_end(s, i) end
    if c == 123 or c == 91 then
        local depth, j = 0, i
        while true do
            local k = find(s, '["{}%[%]]', j)
            local b = byte(s, k)
            if b == 34 then
                j = string_end(s, k) + 1
            else
                depth = (b == 123 or b == 91) and depth + 1 or depth - 1
                if depth == 0 then return k end
                j = k + 1
            end
        end
    end
    return (find(s, "[%s,}%]]", i) or #s + 1) - 1
end

-- The members of a JSON object's text, in order: { { name, name as written, value as
-- written }, ... }; nil for anything else (an array, a scalar, not JSON).
function _M.members(raw)
    local i = find(raw, "[^ \t\r\n]")
    if not i or byte(raw, i) ~= 123 or type(strict.decode(raw)) ~= "table" then return nil end
    local list = {}
    i = find(raw, "[^ \t\r\n]", i + 1)
    while byte(raw, i) ~= 125 do
        local e = string_end(raw, i)
        local written = sub(raw, i, e)
        local name = find(written, "\\", 1, true) and strict.decode(written) or sub(written, 2, -2)
        local vs = find(raw, "[^ \t\r\n]", find(raw, ":", e + 1, true) + 1)
        local ve = value_end(raw, vs)
        list[#list + 1] = { name, written, sub(raw, vs, ve) }
        i = find(raw, "[^ \t\r\n]", ve + 1)
        if byte(raw, i) == 44 then i = find(raw, "[^ \t\r\n]", i + 1) end
    end
    return list
end

-- Keeps the last member `name` (a later one wins, as when decoding) and drops the others;
-- its index, or nil.
local function last(list, name)
    local at
    for i = #list, 1, -1 do
        if list[i][1] == name then
            if at then
                remove(list, i)
                at = at - 1
            else
                at = i
            end
        end
    end
    return at
end

-- Applies p's sections under `what` to a JSON object's members (edited in place; values
-- set are strings). append makes a field an array, or adds to one.
function _M.fields(list, p, what)
    for _, kv in ipairs(p.remove[what]) do
        local at = last(list, kv[1])
        if at then remove(list, at) end
    end
    for _, kv in ipairs(p.rename[what]) do
        local at = last(list, kv[1])
        if at and kv[1] ~= kv[2] then
            local m = list[at]
            m[1], m[2] = kv[2], encode(kv[2])
            for i = #list, 1, -1 do -- the renamed one replaces any of its new name
                if i ~= at and list[i][1] == kv[2] then
                    remove(list, i)
                    if i < at then at = at - 1 end
                end
            end
        end
    end
    for _, kv in ipairs(p.replace[what]) do
        local at = last(list, kv[1])
        if at then list[at][3] = encode(kv[2]) end
    end
    for _, kv in ipairs(p.add[what]) do
        if not last(list, kv[1]) then list[#list + 1] = { kv[1], encode(kv[1]), encode(kv[2]) } end
    end
    for _, kv in ipairs(p.append[what]) do
        local at, v = last(list, kv[1]), encode(kv[2])
        if not at then
            list[#list + 1] = { kv[1], encode(kv[1]), v }
        else
            local old = list[at][3]
            if byte(old, 1) ~= 91 then
                list[at][3] = "[" .. old .. "," .. v .. "]"
            elseif find(old, "^%[[ \t\r\n]*%]$") then
                list[at][3] = "[" .. v .. "]"
            else
                list[at][3] = sub(old, 1, -2) .. "," .. v .. "]"
            end
        end
    end
end

-- The members as a JSON object's text.
function _M.object_text(list)
    local parts = {}
    for i, m in ipairs(list) do parts[i] = m[2] .. ":" .. m[3] end
    return "{" .. concat(parts, ",") .. "}"
end

-- true for application/json and application/*+json (any parameters).
function _M.is_json(ct)
    if not ct then return false end
    ct = ct:lower()
    return ct:find("^application/json") ~= nil or ct:find("^application/[%w.%-]+%+json") ~= nil
end

-- Logs at info, once per prepared table p (a worker's plugin use), why `what` was left
-- as it is: a busy route says it once, not per request.
function _M.skip(p, log, what, why)
    if not p.logged then
        p.logged = true
        log.info(what .. " left as it is:", why, "(said once per worker)")
    end
end

return _M
