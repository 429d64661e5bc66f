-- sluice.transform: what request-transformer and response-transformer share (Kong's
-- shape): "name:value" entries checked at load and split once, and the five sections
-- applied in Kong's order (remove, rename, replace, add, append) to headers or to the
-- top-level fields of a JSON object.
local ipairs, type, next = ipairs, type, next

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

-- Applies p's sections under `what` to doc, a decoded JSON object (edited in place).
-- append makes a field an array, or adds to one.
function _M.fields(doc, p, what)
    for _, kv in ipairs(p.remove[what]) do doc[kv[1]] = nil end
    for _, kv in ipairs(p.rename[what]) do
        local v = doc[kv[1]]
        if v ~= nil then
            doc[kv[1]] = nil
            doc[kv[2]] = v
        end
    end
    for _, kv in ipairs(p.replace[what]) do
        if doc[kv[1]] ~= nil then doc[kv[1]] = kv[2] end
    end
    for _, kv in ipairs(p.add[what]) do
        if doc[kv[1]] == nil then doc[kv[1]] = kv[2] end
    end
    for _, kv in ipairs(p.append[what]) do
        local v = doc[kv[1]]
        if v == nil then
            doc[kv[1]] = kv[2]
        elseif type(v) == "table" and (v[1] ~= nil or next(v) == nil) then
            v[#v + 1] = kv[2]
        else
            doc[kv[1]] = { v, kv[2] }
        end
    end
end

-- true for application/json and application/*+json (any parameters).
function _M.is_json(ct)
    if not ct then return false end
    ct = ct:lower()
    return ct:find("^application/json") ~= nil or ct:find("^application/[%w.%-]+%+json") ~= nil
end

-- A decoded JSON object, or nil for anything else (an array, a scalar, bad JSON).
function _M.object(decode, raw)
    local doc = decode(raw)
    if type(doc) ~= "table" or doc[1] ~= nil then return nil end
    return doc
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
