-- sluice.schema: validates a plugin's config against the plugin's schema and fills defaults.
--
-- A schema is a map of field name -> field spec:
--   { type = "string" | "number" | "integer" | "boolean" | "array" | "map" | "enum" | "record"
--            | "duration" | "size",
--     required = true, default = <value>,
--     one_of = { ... }            -- enum: the allowed values
--     items = <field spec>        -- array: each element
--     values = <field spec>       -- map: each value (keys are strings)
--     fields = <schema>           -- record: a nested schema
--     min = n, max = n }          -- number/integer bounds, string/array length bounds;
--                                 -- duration: seconds, size: bytes
-- duration: "500ms", "1s", "1m", "1h" (an integer and a unit) or a plain number of seconds
-- (`600`, `0.5`); the plugin receives seconds as a number. size: "512", "64KiB", "10MiB",
-- "1GiB" or a plain integer of bytes; the plugin receives bytes as an integer. The units
-- are the core config's (docs/config.md), so a user writes the same everywhere.
-- Unknown keys are errors. Errors are { path = "a.b.2", at = "key" | "value", msg = "..." }:
-- the caller turns a path into FILE:LINE:COL.
local type, pairs, ipairs, tostring, floor, huge = type, pairs, ipairs, tostring, math.floor, math.huge
local sort, concat = table.sort, table.concat

local _M = {}

local function join(path, k)
    if path == "" then return tostring(k) end
    return path .. "." .. tostring(k)
end

local function is_array(t)
    if type(t) ~= "table" then return false end
    local n = 0
    for _ in pairs(t) do n = n + 1 end
    for i = 1, n do if t[i] == nil then return false end end
    return true
end

local function is_mapping(v)
    return type(v) == "table" and (next(v) == nil or not is_array(v))
end

local function copy(v)
    if type(v) ~= "table" then return v end
    local t = {}
    for k, x in pairs(v) do t[k] = copy(x) end
    return t
end

local check_fields

function _M.has(list, k)
    for _, x in ipairs(list) do
        if x == k then return true end
    end
    return false
end

-- The fields a plugin's fixed answer may not carry: framing and connection management are
-- the gateway's (the core refuses such an edit on every request: core/proto/hdr_edit.c).
local OWNED_HEADERS = { ["content-length"] = true, ["transfer-encoding"] = true, connection = true,
                        ["keep-alive"] = true, te = true, trailer = true, upgrade = true }

-- Why a `{ name = value }` map of response headers in a config would fail on every request
-- (a name that is no token or is the gateway's, a value with control characters), as
-- "'NAME' reason"; nil when it is fine. For check() of plugins that answer themselves.
function _M.header_map_error(map)
    for name, value in pairs(map) do
        if not name:match("^[!#$%%&'*+.^_`|~0-9A-Za-z-]+$") then
            return ("'%s' is not a valid header name"):format(name)
        end
        if OWNED_HEADERS[name:lower()] then
            return ("'%s' is a framing or hop-by-hop header the gateway sets itself"):format(name)
        end
        if type(value) == "string" and value:find("[%z\1-\8\10-\31\127]") then
            return ("'%s' has control characters in its value"):format(name)
        end
    end
    return nil
end

local function edit_distance(a, b)
    if #a > 32 or #b > 32 then return math.huge end
    local row = {}
    for j = 0, #b do row[j] = j end
    for i = 1, #a do
        local diag = row[0]
        row[0] = i
        for j = 1, #b do
            local up = row[j]
            local best = diag + (a:byte(i) == b:byte(j) and 0 or 1)
            if up + 1 < best then best = up + 1 end
            if row[j - 1] + 1 < best then best = row[j - 1] + 1 end
            row[j] = best
            diag = up
        end
    end
    return row[#b]
end

-- " (did you mean 'status'?)" when one of names is close to key, else "": the core
-- config's rule (an edit distance of 1 for keys of up to 4 characters, else 2), so
-- plugin names and plugin config keys get the hint core keys get.
function _M.did_you_mean(key, names)
    local best, best_d = nil, #key <= 4 and 1 or 2
    local sorted = {}
    for i, n in ipairs(names) do sorted[i] = n end
    sort(sorted) -- ties go to the first name in order, whatever the table's order
    for _, n in ipairs(sorted) do
        local d = edit_distance(key, n)
        -- d < #key: a one-letter key is not "close" to every other one-letter key
        if d <= best_d and d < #key and (not best or d < best_d) then best, best_d = n, d end
    end
    return best and (" (did you mean '%s'?)"):format(best) or ""
end

local DURATION_UNIT = { ms = 0.001, s = 1, m = 60, h = 3600 }
local SIZE_UNIT = { [""] = 1, KiB = 1024, MiB = 1024 ^ 2, GiB = 1024 ^ 3 }

-- "500ms" -> 0.5, 30 -> 30; nil when malformed (a negative number is left to the bounds).
function _M.parse_duration(v)
    if type(v) == "number" then return v end
    if type(v) ~= "string" then return nil end
    local n, u = v:match("^(%d+)(%a+)$")
    local k = DURATION_UNIT[u]
    return n and k and tonumber(n) * k or nil
end

-- "64KiB" -> 65536, 512 -> 512; nil when malformed.
function _M.parse_size(v)
    if type(v) == "number" then return floor(v) == v and v or nil end
    if type(v) ~= "string" then return nil end
    local n, u = v:match("^(%d+)(%a*)$")
    local k = SIZE_UNIT[u]
    return n and k and tonumber(n) * k or nil
end

-- Records a value error; returns nil so a check can `return add_bad(...)`.
local function add_bad(errs, path, msg)
    errs[#errs + 1] = { path = path, at = "value", msg = msg }
    return nil
end

local function check_value(spec, v, path, errs)
    local t = spec.type
    if t == "string" then
        if type(v) ~= "string" then return add_bad(errs, path, "expected a string") end
        if spec.min and #v < spec.min then return add_bad(errs, path, ("must be at least %d characters"):format(spec.min)) end
        if spec.max and #v > spec.max then return add_bad(errs, path, ("must be at most %d characters"):format(spec.max)) end
        return v
    elseif t == "number" or t == "integer" then
        if type(v) ~= "number" then return add_bad(errs, path, t == "integer" and "expected an integer" or "expected a number") end
        if t == "integer" and floor(v) ~= v then return add_bad(errs, path, "expected an integer") end
        if spec.min and v < spec.min then return add_bad(errs, path, ("must be >= %s"):format(spec.min)) end
        if spec.max and v > spec.max then return add_bad(errs, path, ("must be <= %s"):format(spec.max)) end
        return v
    elseif t == "duration" or t == "size" then
        local n = (t == "duration" and _M.parse_duration or _M.parse_size)(v)
        if not n then
            return add_bad(errs, path, t == "duration"
                and "expected a duration: 500ms, 10s, 5m, 1h, or a number of seconds"
                or "expected a size: 512, 64KiB, 10MiB, 1GiB, or a number of bytes")
        end
        local unit = t == "duration" and "s" or " bytes"
        -- the core's bounds: milliseconds (bytes) that fit in 64 bits; inf and NaN (a
        -- number like 1e400 in YAML, math.huge in a Lua route) are no duration or size
        if n ~= n or n == huge or n == -huge then
            return add_bad(errs, path, "must be a finite number of " .. (t == "duration" and "seconds" or "bytes"))
        end
        if n * (t == "duration" and 1000 or 1) >= 2 ^ 64 then return add_bad(errs, path, t .. " is too large") end
        local lo = spec.min or 0 -- never negative
        if n < lo then return add_bad(errs, path, ("must be >= %s%s"):format(lo, unit)) end
        if spec.max and n > spec.max then return add_bad(errs, path, ("must be <= %s%s"):format(spec.max, unit)) end
        return n
    elseif t == "boolean" then
        if type(v) ~= "boolean" then return add_bad(errs, path, "expected a boolean (true or false)") end
        return v
    elseif t == "enum" then
        for _, ok in ipairs(spec.one_of or {}) do
            if v == ok then return v end
        end
        local names = {}
        for i, ok in ipairs(spec.one_of or {}) do names[i] = tostring(ok) end
        return add_bad(errs, path, ("expected one of: %s"):format(concat(names, ", ")))
    elseif t == "array" then
        if type(v) ~= "table" or not is_array(v) then return add_bad(errs, path, "expected a list") end
        if spec.min and #v < spec.min then return add_bad(errs, path, ("needs at least %d item(s)"):format(spec.min)) end
        if spec.max and #v > spec.max then return add_bad(errs, path, ("takes at most %d item(s)"):format(spec.max)) end
        local out = {}
        for i, x in ipairs(v) do
            out[i] = spec.items and check_value(spec.items, x, join(path, i), errs) or x
        end
        return out
    elseif t == "map" then
        if not is_mapping(v) then return add_bad(errs, path, "expected a mapping") end
        local out = {}
        for k, x in pairs(v) do
            out[k] = spec.values and check_value(spec.values, x, join(path, k), errs) or x
        end
        return out
    elseif t == "record" then
        if not is_mapping(v) then return add_bad(errs, path, "expected a mapping") end
        return check_fields(spec.fields or {}, v, path, errs)
    end
    return add_bad(errs, path, "schema error: unknown type '" .. tostring(t) .. "'")
end

check_fields = function(schema, conf, path, errs)
    local out = {}
    local keys = {}
    for k in pairs(conf) do keys[#keys + 1] = tostring(k) end
    sort(keys)
    local names = {}
    for k in pairs(schema) do names[#names + 1] = k end
    sort(names)
    for _, k in ipairs(keys) do
        if schema[k] == nil then
            -- a nested key says where it stands, as the core's config errors do ("in 'a.b'")
            local within = path == "" and "" or (" in '%s'"):format(path)
            errs[#errs + 1] = { path = join(path, k), at = "key",
                                msg = ("unknown key '%s'%s%s"):format(k, within, _M.did_you_mean(k, names)) }
        end
    end
    for _, k in ipairs(names) do
        local spec = schema[k]
        local v = conf[k]
        if v == nil then
            if spec.default ~= nil then
                -- a default goes through its spec too, so a record's fields get theirs
                out[k] = check_value(spec, copy(spec.default), join(path, k), errs)
            elseif spec.required then
                errs[#errs + 1] = { path = path, at = "value", msg = ("missing required key '%s'"):format(k) }
            end
        else
            out[k] = check_value(spec, v, join(path, k), errs)
        end
    end
    return out
end

-- Returns the config with defaults filled, and the list of errors (empty when valid).
function _M.validate(schema, conf)
    local errs = {}
    if type(conf) ~= "table" then
        return nil, { { path = "", at = "value", msg = "expected a mapping" } }
    end
    local out = check_fields(schema or {}, conf, "", errs)
    return out, errs
end

-- Checks a schema itself (a plugin author's mistake is reported at load, not at the first request).
function _M.check_schema(schema)
    if schema == nil then return true end
    if type(schema) ~= "table" then return nil, "schema must be a table" end
    local valid = { string = 1, number = 1, integer = 1, boolean = 1, array = 1, map = 1, enum = 1, record = 1,
                    duration = 1, size = 1 }
    local walk
    -- one field spec, including what it holds (record fields, array items, map values)
    local function spec_ok(spec, where)
        if type(spec) ~= "table" or not valid[spec.type] then
            return nil, ("field '%s' has no valid type"):format(where)
        end
        if spec.type == "record" then return walk(spec.fields or {}, where .. ".") end
        if spec.type == "array" and spec.items ~= nil then return spec_ok(spec.items, where .. "[]") end
        if spec.type == "map" and spec.values ~= nil then return spec_ok(spec.values, where .. "{}") end
        if spec.type == "enum" and type(spec.one_of) ~= "table" then
            return nil, ("field '%s' is an enum without one_of"):format(where)
        end
        return true
    end
    walk = function(s, prefix)
        for k, spec in pairs(s) do
            local ok, err = spec_ok(spec, prefix .. tostring(k))
            if not ok then return nil, err end
        end
        return true
    end
    return walk(schema, "")
end

return _M
