-- request-validation: checks the JSON body, the query arguments and the headers against a
-- JSON Schema subset (type, properties, required, enum, minimum, maximum, minLength,
-- maxLength, pattern, items, additionalProperties) and answers 400 naming the first
-- failing path. Schemas are compiled once per worker in prepare. Runs in access.
local sluice = require("sluice")

local request, response, json = sluice.request, sluice.response, sluice.json
local type, ipairs, pairs, next, tonumber, tostring, floor = type, ipairs, pairs, next, tonumber, tostring, math.floor
local sort, find, byte = table.sort, string.find, string.byte
local null = json.null
-- lua-cjson reads NaN, Infinity and hex numbers (0x10) by default: none is JSON, and an
-- upstream's parser would refuse them or read them otherwise
local strict = require("cjson.safe").new()
strict.decode_invalid_numbers(false)

local any_map = { type = "map" }

local M = {
    name = "request-validation",
    version = "1.0",
    schema = {
        body_schema = any_map,
        query_schema = any_map,
        header_schema = any_map,
        max_body = { type = "size", default = 1048576 },
        rejected_code = { type = "integer", default = 400, min = 400, max = 599 },
    },
}

local TYPES = { object = true, array = true, string = true, number = true, integer = true,
                boolean = true, null = true }
local KEYWORDS = { type = true, properties = true, required = true, enum = true, minimum = true,
                   maximum = true, minLength = true, maxLength = true, pattern = true, items = true,
                   additionalProperties = true, description = true, title = true, default = true }

local function is_list(t)
    return type(t) == "table" and (t[1] ~= nil or next(t) == nil)
end

-- Compiles (and checks) one schema: nil, msg for a schema it cannot run.
local function compile(s, at)
    if type(s) ~= "table" or (s[1] ~= nil) then return nil, at .. ": a schema must be a mapping" end
    local c = {}
    for k in pairs(s) do
        if not KEYWORDS[k] then return nil, ("%s: '%s' is not a supported keyword"):format(at, tostring(k)) end
    end
    local t = s.type
    if t ~= nil then
        local list = type(t) == "table" and t or { t }
        c.types = {}
        for _, x in ipairs(list) do
            if not TYPES[x] then return nil, ("%s.type: '%s' is not a JSON Schema type"):format(at, tostring(x)) end
            c.types[x] = true
        end
        c.type_name = type(t) == "table" and table.concat(t, " or ") or t
    end
    if s.enum ~= nil then
        if not is_list(s.enum) then return nil, at .. ".enum: must be a list" end
        c.enum = s.enum
    end
    for _, k in ipairs({ "minimum", "maximum", "minLength", "maxLength" }) do
        if s[k] ~= nil and type(s[k]) ~= "number" then return nil, ("%s.%s: must be a number"):format(at, k) end
        c[k] = s[k]
    end
    if s.pattern ~= nil then
        if type(s.pattern) ~= "string" or not pcall(find, "", s.pattern) then
            return nil, at .. ".pattern: must be a valid Lua pattern"
        end
        c.pattern = s.pattern
    end
    if s.required ~= nil then
        if not is_list(s.required) then return nil, at .. ".required: must be a list of names" end
        c.required = s.required
    end
    if s.properties ~= nil then
        if type(s.properties) ~= "table" then return nil, at .. ".properties: must be a mapping" end
        local names = {}
        for k in pairs(s.properties) do names[#names + 1] = k end
        sort(names) -- the first failing path is the same on every request
        c.props, c.by_name = {}, {}
        for i, k in ipairs(names) do
            local sub, err = compile(s.properties[k], at .. ".properties." .. k)
            if not sub then return nil, err end
            c.props[i] = { k, sub }
            c.by_name[k] = sub
        end
    end
    local ap = s.additionalProperties
    if ap ~= nil then
        if ap == false then
            c.closed = true
        elseif type(ap) == "table" then
            local sub, err = compile(ap, at .. ".additionalProperties")
            if not sub then return nil, err end
            c.additional = sub
        elseif ap ~= true then
            return nil, at .. ".additionalProperties: must be a boolean or a schema"
        end
    end
    if s.items ~= nil then
        local sub, err = compile(s.items, at .. ".items")
        if not sub then return nil, err end
        c.items = sub
    end
    return c
end

function M.check(conf)
    if not conf.body_schema and not conf.query_schema and not conf.header_schema then
        return nil, "needs body_schema, query_schema or header_schema"
    end
    for _, k in ipairs({ "body_schema", "query_schema", "header_schema" }) do
        if conf[k] then
            local ok, err = compile(conf[k], k)
            if not ok then return nil, err end
        end
    end
    return true
end

function M.prepare(conf)
    local p = {}
    for _, k in ipairs({ "body_schema", "query_schema", "header_schema" }) do
        if conf[k] then p[k] = assert(compile(conf[k], k)) end
    end
    if p.header_schema and p.header_schema.props then
        -- header names arrive lower-case
        for _, kv in ipairs(p.header_schema.props) do kv[1] = kv[1]:lower() end
        if p.header_schema.required then
            local req = {}
            for i, n in ipairs(p.header_schema.required) do req[i] = n:lower() end
            p.header_schema.required = req
        end
        local by = {}
        for _, kv in ipairs(p.header_schema.props) do by[kv[1]] = kv[2] end
        p.header_schema.by_name = by
    end
    return p
end

-- ---------------------------------------------------------------- validation

local function json_type(v)
    local t = type(v)
    if t == "string" then return "string" end
    if t == "boolean" then return "boolean" end
    if t == "number" then return floor(v) == v and "integer" or "number" end
    if v == null then return "null" end
    if t == "table" then
        if v[1] ~= nil then return "array" end
        if next(v) == nil then return "empty" end -- {} and [] decode alike
        return "object"
    end
    return "unknown"
end

local function type_ok(types, jt)
    if types[jt] then return true end
    if jt == "integer" and types.number then return true end
    if jt == "empty" and (types.object or types.array) then return true end
    return false
end

-- Characters, not bytes: UTF-8 continuation bytes are not counted.
local function ulen(s)
    local n = 0
    for i = 1, #s do
        local b = byte(s, i)
        if b < 0x80 or b >= 0xC0 then n = n + 1 end
    end
    return n
end

local function child(path, k)
    if type(k) == "number" then return path .. "[" .. (k - 1) .. "]" end
    return path .. "." .. k
end

-- nil when v satisfies c, else the failing path and why.
local function validate(c, v, path)
    local jt = json_type(v)
    if c.types and not type_ok(c.types, jt) then return path, "expected " .. c.type_name end
    if c.enum then
        local hit = false
        for _, e in ipairs(c.enum) do
            if e == v then hit = true break end
        end
        if not hit then return path, "not one of the allowed values" end
    end
    if jt == "number" or jt == "integer" then
        if c.minimum and v < c.minimum then return path, "must be >= " .. c.minimum end
        if c.maximum and v > c.maximum then return path, "must be <= " .. c.maximum end
    elseif jt == "string" then
        if c.minLength or c.maxLength then
            local n = ulen(v)
            if c.minLength and n < c.minLength then return path, "shorter than " .. c.minLength end
            if c.maxLength and n > c.maxLength then return path, "longer than " .. c.maxLength end
        end
        if c.pattern and not find(v, c.pattern) then return path, "does not match the pattern" end
    elseif jt == "object" or jt == "empty" then
        if c.required then
            for _, k in ipairs(c.required) do
                if v[k] == nil then return child(path, k), "is required" end
            end
        end
        if c.props then
            for _, kv in ipairs(c.props) do
                local x = v[kv[1]]
                if x ~= nil then
                    local fp, why = validate(kv[2], x, child(path, kv[1]))
                    if fp then return fp, why end
                end
            end
        end
        if c.closed or c.additional then
            local extra = {}
            for k in pairs(v) do
                if not (c.by_name and c.by_name[k]) then extra[#extra + 1] = tostring(k) end
            end
            sort(extra)
            for _, k in ipairs(extra) do
                if c.closed then return child(path, k), "is not allowed" end
                local fp, why = validate(c.additional, v[k], child(path, k))
                if fp then return fp, why end
            end
        end
    elseif jt == "array" and c.items then
        for i, x in ipairs(v) do
            local fp, why = validate(c.items, x, child(path, i))
            if fp then return fp, why end
        end
    end
    return nil
end

-- v as a number when it is written as JSON writes one (tonumber also takes " 1", "0x10",
-- "inf" and "nan", which an upstream would refuse or read otherwise); else nil.
local function json_number(v)
    local rest = v:match("^%-?%d+(.*)$")
    if not rest then return nil end
    rest = rest:match("^%.%d+(.*)$") or rest
    rest = rest:match("^[eE][+-]?%d+(.*)$") or rest
    if rest ~= "" then return nil end
    return tonumber(v)
end

-- Query arguments and headers are strings: one declared number, integer or boolean is
-- read as one first (so `?page=2` meets `type: integer`).
local function coerce(c, v)
    if type(v) ~= "string" or not c or not c.types or c.types.string then return v end
    if c.types.integer or c.types.number then return json_number(v) or v end
    if c.types.boolean then
        if v == "true" then return true elseif v == "false" then return false end
    end
    return v
end

local function coerce_all(c, t)
    if not c.props then return t end
    for _, kv in ipairs(c.props) do -- the declared names only: no walk over every header
        local k, sub = kv[1], kv[2]
        local v = t[k]
        if type(v) == "table" then
            for i, x in ipairs(v) do v[i] = coerce(sub.items, x) end
        elseif v ~= nil then
            t[k] = coerce(sub, v)
        end
    end
    return t
end

local function reject(conf, path, why)
    return response.exit(conf.rejected_code, { error = "request validation failed", path = path, reason = why })
end

function M.access(conf, _, p)
    local c = p.header_schema
    if c then
        local fp, why = validate(c, coerce_all(c, request.get_headers()), "headers")
        if fp then return reject(conf, fp, why) end
    end
    c = p.query_schema
    if c then
        local fp, why = validate(c, coerce_all(c, request.get_query_args()), "query")
        if fp then return reject(conf, fp, why) end
    end
    c = p.body_schema
    if c then
        local n, err = request.read_body(conf.max_body)
        if not n then
            return response.exit(err == "request body too large" and 413 or 400, { error = err })
        end
        local raw = n > 0 and request.get_body() or ""
        local doc = strict.decode(raw)
        if doc == nil then return reject(conf, "body", "not valid JSON") end
        local fp, why = validate(c, doc, "body")
        if fp then return reject(conf, fp, why) end
    end
end

return M
