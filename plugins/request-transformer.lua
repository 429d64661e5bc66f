-- request-transformer: Kong's request-transformer. Edits the request's headers, query
-- arguments and top-level JSON body fields in the order remove, rename, replace, add,
-- append; `replace.uri` or `regex_uri` rewrite the path. Runs in access.
local sluice = require("sluice")
local transform = require("sluice.transform")

local request, log = sluice.request, sluice.log
local ipairs, tostring, tonumber = ipairs, tostring, tonumber
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

local WHATS = { "headers", "querystring", "body" }
local OWNED = { ["content-length"] = true, ["transfer-encoding"] = true, connection = true,
                ["keep-alive"] = true, te = true, trailer = true, upgrade = true, host = true }

function M.check(conf)
    local ok, err = transform.check(conf, WHATS, OWNED)
    if not ok then return nil, err end
    local uri = conf.replace.uri
    if uri and not uri:match("^/[^%s?#]*$") then
        return nil, "replace.uri: must start with '/' and hold no spaces, '?' or '#'"
    end
    if uri and conf.regex_uri then return nil, "replace.uri and regex_uri cannot both be set" end
    if conf.regex_uri then
        local pok, perr = pcall(string.find, "", conf.regex_uri[1])
        if not pok then return nil, "regex_uri: bad pattern: " .. tostring(perr) end
    end
    return true
end

local function hex_byte(h) return char(tonumber(h, 16)) end
local function unescape(s)
    if not s:find("[%%+]", 1) then return s end
    return (s:gsub("%+", " "):gsub("%%(%x%x)", hex_byte))
end
local function escape_byte(c) return format("%%%02X", byte(c)) end
local function escape(s) return (s:gsub("[^%w%-%._~]", escape_byte)) end

function M.prepare(conf)
    local p = transform.compile(conf, WHATS)
    p.logged = false
    -- the query is compared decoded and written encoded
    for _, sec in ipairs(transform.SECTIONS) do
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

local function skip(p, why) transform.skip(p, log, "request body", why) end

local function body(conf, p)
    if not transform.is_json(request.get_header("Content-Type")) then return skip(p, "not JSON") end
    local cl = tonumber(request.get_header("Content-Length") or "")
    if not cl then return skip(p, "no Content-Length (its size is not known before it is read)") end
    if cl > conf.max_body then return skip(p, "larger than max_body") end
    if cl == 0 then return end
    local raw, err = request.get_body()
    if not raw then return skip(p, err or "empty") end
    local doc = transform.members(raw)
    if not doc then return skip(p, "not a JSON object") end
    transform.fields(doc, p, "body")
    request.set_body(transform.object_text(doc))
end

-- ---------------------------------------------------------------- access

function M.access(conf, _, p)
    if p.headers then transform.headers(request, p) end
    if p.querystring then query(p) end
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
