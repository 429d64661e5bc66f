-- request-transformer: Kong's request-transformer. Edits the request's headers, query
-- arguments and top-level JSON body fields in the order remove, rename, replace, add,
-- append; `replace.uri` or `regex_uri` rewrite the path. Runs in access.
local sluice = require("sluice")

local request, log, json = sluice.request, sluice.log, sluice.json
local ipairs, type, tostring, tonumber, next = ipairs, type, tostring, tonumber, next
local concat, char, byte, format = table.concat, string.char, string.byte, string.format

local list = { type = "array", items = { type = "string" }, default = {} }
local function ops(with_uri)
    local fields = { headers = list, querystring = list, body = list }
    if with_uri then fields.uri = { type = "string" } end
    return { type = "record", default = {}, fields = fields }
end

local M = {
    name = "request-transformer",
    version = "1.0",
    schema = {
        remove = ops(),
        rename = ops(),
        replace = ops(true),
        add = ops(),
        append = ops(),
        regex_uri = { type = "array", items = { type = "string" }, min = 2, max = 2 },
        max_body = { type = "size", default = 1048576 },
    },
}

local SECTIONS = { "remove", "rename", "replace", "add", "append" }
local OWNED = { ["content-length"] = true, ["transfer-encoding"] = true, connection = true,
                ["keep-alive"] = true, te = true, trailer = true, upgrade = true, host = true }

-- "name:value" -> name, value (the value may hold ':'); for remove, the name alone.
local function split(entry, with_value)
    if not with_value then return entry end
    local k, v = entry:match("^([^:]+):(.*)$")
    return k, v
end

function M.check(conf)
    for _, sec in ipairs(SECTIONS) do
        for _, what in ipairs({ "headers", "querystring", "body" }) do
            for i, e in ipairs(conf[sec][what]) do
                local k, v = split(e, sec ~= "remove")
                if not k or k == "" or (sec ~= "remove" and not v) then
                    return nil, ("%s.%s.%d: '%s' is not %s"):format(sec, what, i, e,
                        sec == "remove" and "a name" or "name:value")
                end
                if what == "headers" then
                    local names = { k }
                    if sec == "rename" then names[2] = v end
                    for _, n in ipairs(names) do
                        if not n:match("^[!#$%%&'*+.^_`|~0-9A-Za-z-]+$") then
                            return nil, ("%s.headers.%d: '%s' is not a header name"):format(sec, i, n)
                        end
                        if OWNED[n:lower()] then
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
    local uri = conf.replace.uri
    if uri and not uri:match("^/[^%s?#]*$") then
        return nil, "replace.uri: must start with '/' and hold no spaces, '?' or '#'"
    end
    if uri and conf.regex_uri then return nil, "replace.uri and regex_uri cannot both be set" end
    if conf.regex_uri then
        local ok, err = pcall(string.find, "", conf.regex_uri[1])
        if not ok then return nil, "regex_uri: bad pattern: " .. tostring(err) end
    end
    return true
end

-- Each section's lists split once: { {k, v}, ... }.
local function pairs_of(entries, with_value)
    local out = {}
    for i, e in ipairs(entries) do
        local k, v = split(e, with_value)
        out[i] = { k, v }
    end
    return out
end

local function hex_byte(h) return char(tonumber(h, 16)) end
local function unescape(s)
    if not s:find("[%%+]", 1) then return s end
    return (s:gsub("%+", " "):gsub("%%(%x%x)", hex_byte))
end
local function escape_byte(c) return format("%%%02X", byte(c)) end
local function escape(s) return (s:gsub("[^%w%-%._~]", escape_byte)) end

function M.prepare(conf)
    local p = { logged = false, query = false, body = false, headers = false }
    for _, sec in ipairs(SECTIONS) do
        local o = conf[sec]
        local with_value = sec ~= "remove"
        p[sec] = { headers = pairs_of(o.headers, with_value), querystring = pairs_of(o.querystring, with_value),
                   body = pairs_of(o.body, with_value) }
        if #o.headers > 0 then p.headers = true end
        if #o.querystring > 0 then p.query = true end
        if #o.body > 0 then p.body = true end
        -- the query is compared decoded and written encoded
        for _, kv in ipairs(p[sec].querystring) do
            kv[3] = escape(kv[1])
            if kv[2] then kv[4] = escape(kv[2]) end
        end
    end
    if conf.regex_uri then
        -- $1..$9 in the template are the pattern's captures; a literal % is escaped for gsub
        p.regex = conf.regex_uri[1]
        p.template = conf.regex_uri[2]:gsub("%%", "%%%%"):gsub("%$(%d)", "%%%1")
    end
    return p
end

-- ---------------------------------------------------------------- headers

local function headers(p)
    local get, set, add, clear = request.get_header, request.set_header, request.add_header, request.clear_header
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
    for _, kv in ipairs(p.append.headers) do add(kv[1], kv[2]) end
end

-- ---------------------------------------------------------------- query

-- The query as a list of { decoded name, raw "name=value" }.
local function parse_query(q)
    local args = {}
    for pair in q:gmatch("[^&]+") do
        args[#args + 1] = { unescape(pair:match("^([^=]*)")), pair }
    end
    return args
end

local function find_arg(args, name)
    for i, a in ipairs(args) do
        if a[1] == name then return i end
    end
end

local function drop_all(args, name)
    local j = 0
    for i = 1, #args do
        local a = args[i]
        args[i] = nil
        if a[1] ~= name then j = j + 1; args[j] = a end
    end
end

local function query(p)
    local args = parse_query(request.get_query())
    for _, kv in ipairs(p.remove.querystring) do drop_all(args, kv[1]) end
    for _, kv in ipairs(p.rename.querystring) do
        for _, a in ipairs(args) do
            if a[1] == kv[1] then
                a[1] = kv[2]
                a[2] = escape(kv[2]) .. (a[2]:match("^[^=]*(=.*)$") or "")
            end
        end
    end
    for _, kv in ipairs(p.replace.querystring) do
        if find_arg(args, kv[1]) then
            drop_all(args, kv[1])
            args[#args + 1] = { kv[1], kv[3] .. "=" .. kv[4] }
        end
    end
    for _, kv in ipairs(p.add.querystring) do
        if not find_arg(args, kv[1]) then args[#args + 1] = { kv[1], kv[3] .. "=" .. kv[4] } end
    end
    for _, kv in ipairs(p.append.querystring) do args[#args + 1] = { kv[1], kv[3] .. "=" .. kv[4] } end
    local parts = {}
    for i, a in ipairs(args) do parts[i] = a[2] end
    request.set_query(concat(parts, "&"))
end

-- ---------------------------------------------------------------- body

local function is_json(ct)
    if not ct then return false end
    ct = ct:lower()
    return ct:find("^application/json") ~= nil or ct:find("^application/[%w.%-]+%+json") ~= nil
end

local function skip(p, why)
    if not p.logged then
        p.logged = true
        log.info("request body left as it is:", why, "(said once per worker)")
    end
end

local function body(conf, p)
    if not is_json(request.get_header("Content-Type")) then return skip(p, "not JSON") end
    local cl = tonumber(request.get_header("Content-Length") or "")
    if not cl then return skip(p, "no Content-Length (its size is not known before it is read)") end
    if cl > conf.max_body then return skip(p, "larger than max_body") end
    if cl == 0 then return end
    local raw, err = request.get_body()
    if not raw then return skip(p, err or "empty") end
    local doc = json.decode(raw)
    if type(doc) ~= "table" or doc[1] ~= nil then return skip(p, "not a JSON object") end
    for _, kv in ipairs(p.remove.body) do doc[kv[1]] = nil end
    for _, kv in ipairs(p.rename.body) do
        local v = doc[kv[1]]
        if v ~= nil then
            doc[kv[1]] = nil
            doc[kv[2]] = v
        end
    end
    for _, kv in ipairs(p.replace.body) do
        if doc[kv[1]] ~= nil then doc[kv[1]] = kv[2] end
    end
    for _, kv in ipairs(p.add.body) do
        if doc[kv[1]] == nil then doc[kv[1]] = kv[2] end
    end
    for _, kv in ipairs(p.append.body) do
        local v = doc[kv[1]]
        if v == nil then
            doc[kv[1]] = kv[2]
        elseif type(v) == "table" and (v[1] ~= nil or next(v) == nil) then
            v[#v + 1] = kv[2]
        else
            doc[kv[1]] = { v, kv[2] }
        end
    end
    request.set_body(json.encode(doc))
end

-- ---------------------------------------------------------------- access

function M.access(conf, _, p)
    if p.headers then headers(p) end
    if p.query then query(p) end
    if p.body then body(conf, p) end
    local uri = conf.replace.uri
    if uri then
        request.set_path(uri)
    elseif p.regex then
        local path = request.get_path()
        local new, n = path:gsub(p.regex, p.template, 1)
        if n > 0 and new ~= path then request.set_path(new) end
    end
end

return M
