-- sluice.kong.schema: a Kong plugin's schema.lua as a sluice schema.
--
-- Kong's schema is { name, fields = { { consumer = ... }, { protocols = ... },
-- { config = { type = "record", fields = { { NAME = FIELD }, ... } } } } }. The `config`
-- record becomes the plugin's sluice schema (types, required, default, bounds, one_of: what
-- sluice.schema checks and fills); what sluice.schema has no word for (match, gt,
-- custom_validator, entity_checks, ...) is checked by check(conf), which the loader runs
-- after the defaults are filled. A field attribute or entity check not listed here is an
-- error at load, naming it: a constraint silently dropped would let a bad config through.
-- The top-level fields other than config (consumer, route, service, protocols) say where
-- Kong may apply the plugin; sluice's routes say that, so they are read and ignored.
local type, pairs, ipairs, tostring, error, next = type, pairs, ipairs, tostring, error, next
local find, concat = string.find, table.concat

local _M = {}

-- ---------------------------------------------------------------- typedefs

-- require("kong.db.schema.typedefs"): the common ones. An unknown name raises at load.
local function strict(t, what)
    return setmetatable(t, { __index = function(_, k)
        error(("%s.%s is not supported by sluice's Kong layer (docs/plugins.md, \"Kong plugins\")")
              :format(what, tostring(k)), 2)
    end })
end

local function http_method_ok(v)
    if find(v, "^%u+$") then return true end
    return nil, "invalid HTTP method"
end

local function header_name_ok(v)
    if find(v, "^[%w!#$%%&'*+.^_`|~-]+$") then return true end
    return nil, "bad header name '" .. v .. "', allowed characters are A-Z, a-z, 0-9, '_', and '-'"
end

local cidr = require("sluice.cidr")

local function ip_or_cidr_ok(v)
    if cidr.parse(v) then return true end
    return nil, "invalid ip or cidr range: '" .. v .. "'"
end

local function cidr_v4_ok(v)
    local c = v:find("/", 1, true) and not v:find(":", 1, true) and cidr.parse(v)
    if c then return true end
    return nil, "invalid cidr range: '" .. v .. "'"
end

-- A host name or address, optionally with :port (1..65535).
local function host_port_ok(v)
    local host, port = v:match("^%[([%x:]+)%]:?(%d*)$")
    if not host then host, port = v:match("^([^:]+):?(%d*)$") end
    if not host and cidr.parse_ip(v) then return true end -- a bare IPv6 address
    if not host or not (host:find("^[%w%.%-_]+$") or cidr.parse_ip(host)) then
        return nil, "invalid hostname: " .. v
    end
    if port ~= "" and not (tonumber(port) >= 1 and tonumber(port) <= 65535) then
        return nil, "invalid port number"
    end
    return true
end

-- "*.example.com" or "example.*": one wildcard, at either end.
local function wildcard_host_ok(v)
    if v:find("^%*%.[%w%.%-_]+$") or v:find("^[%w%.%-_]+%.%*$") then return true end
    return nil, "invalid wildcard: must have at least one wildcard at the start or end of the host"
end

local PROTOCOLS = { "grpc", "grpcs", "http", "https", "tcp", "tls", "tls_passthrough", "udp", "ws", "wss" }
local function protocols(default)
    return { type = "set", required = true, default = default,
             elements = { type = "string", one_of = PROTOCOLS } }
end

local rawtypedefs = {
    no_consumer = { type = "foreign", reference = "consumers" },
    no_consumer_group = { type = "foreign", reference = "consumer_groups" },
    consumer_group = { type = "foreign", reference = "consumer_groups" },
    no_route = { type = "foreign", reference = "routes" },
    no_service = { type = "foreign", reference = "services" },
    consumer = { type = "foreign", reference = "consumers" },
    route = { type = "foreign", reference = "routes" },
    service = { type = "foreign", reference = "services" },
    protocols = protocols({ "grpc", "grpcs", "http", "https" }),
    protocols_http = protocols({ "grpc", "grpcs", "http", "https" }),
    header_name = { type = "string", custom_validator = header_name_ok },
    http_method = { type = "string", custom_validator = http_method_ok },
    port = { type = "integer", between = { 0, 65535 } },
    timeout = { type = "integer", between = { 0, 2 ^ 31 - 2 } },
    path = { type = "string", starts_with = "/" },
    host = { type = "string", match = "^[%w%.%-_]+$" },
    ip = { type = "string", match = "^[%x%.:]+$" },
    cidr = { type = "string", match = "^[%x%.:]+/%d+$" },
    url = { type = "string", match = "^%a[%w+.-]*://" },
    name = { type = "string", match = "^[%w%.%-_~]+$" },
    ip_or_cidr = { type = "string", custom_validator = ip_or_cidr_ok },
    cidr_v4 = { type = "string", custom_validator = cidr_v4_ok },
    host_with_optional_port = { type = "string", custom_validator = host_port_ok },
    wildcard_host = { type = "string", custom_validator = wildcard_host_ok },
    cookie_name = { type = "string", match = "^[%w!#$%%&'*+.^_`|~-]+$" },
    semantic_version = { type = "string", match = "^%d+[%.%d]*$" },
    tag = { type = "string", match = "^[%w%.%-_~]+$" },
    tags = { type = "set", elements = { type = "string" } },
    uuid = { type = "string", match = "^%x+%-%x+%-%x+%-%x+%-%x+$" },
    lua_code = { type = "map", keys = { type = "string" }, values = { type = "string" } },
}

-- Kong's typedefs are callable: typedefs.header_name { default = "X-Id" } is the typedef
-- with those attributes added.
local function callable(def)
    return setmetatable(def, { __call = function(self, over)
        local t = {}
        for k, v in pairs(self) do t[k] = v end
        for k, v in pairs(over or {}) do t[k] = v end
        return t
    end })
end
for _, def in pairs(rawtypedefs) do callable(def) end
_M.typedefs = strict(rawtypedefs, "typedefs")

-- ---------------------------------------------------------------- conversion

-- Attributes sluice.schema handles, or that only describe (kept out of the check).
local HANDLED = {
    type = true, required = true, default = true, elements = true, keys = true, values = true,
    fields = true, between = true, len_min = true, len_max = true, one_of = true,
    description = true, referenceable = true, encrypted = true, auto = true, unique = true,
    indexed = true, examples = true, err = true, legacy = true, deprecation = true,
    immutable = true, reference = true, eq = true, on_delete = true, nullable = true,
    -- checked by check_extra below
    match = true, not_match = true, match_any = true, match_none = true, gt = true, len_eq = true,
    starts_with = true, custom_validator = true, not_one_of = true, is_regex = true,
}

local ENTITY_CHECKS = { at_least_one_of = true, only_one_of = true, mutually_exclusive = true,
                        conditional = true }

local convert

-- The single (name, field) of a Kong `fields` entry.
local function entry(item, where)
    if type(item) ~= "table" then return nil, nil, where .. ": a fields entry must be { NAME = FIELD }" end
    local name, field = next(item)
    if type(name) ~= "string" or next(item, name) ~= nil or type(field) ~= "table" then
        return nil, nil, where .. ": a fields entry must be { NAME = FIELD }"
    end
    return name, field
end

local function convert_fields(fields, where)
    local out = {}
    for i, item in ipairs(fields or {}) do
        local name, field, err = entry(item, ("%s.fields[%d]"):format(where, i))
        if not name then return nil, err end
        local spec, cerr = convert(field, where == "config" and name or (where .. "." .. name))
        if not spec then return nil, cerr end
        -- Kong makes a plugin's records required unless they say `required = false`
        -- (Entity.new_subschema's make_records_required) and fills an absent required
        -- record with its fields' defaults, nested records too
        if field.type == "record" and field.required ~= false and spec.default == nil then
            spec.default = {}
        end
        out[name] = spec
    end
    return out
end

-- One Kong field as a sluice field spec, or nil, err naming the field.
convert = function(f, where)
    for k in pairs(f) do
        if not HANDLED[k] then
            return nil, ("field '%s': attribute '%s' is not supported by sluice's Kong layer"):format(where, tostring(k))
        end
    end
    local t = f.type
    local spec = { required = f.required, default = f.default }
    if t == "string" then
        if f.one_of then
            spec.type, spec.one_of = "enum", f.one_of
        else
            -- Kong takes no empty string unless the field says len_min = 0 (validate_field)
            spec.type, spec.min, spec.max = "string", f.len_min or 1, f.len_max
        end
    elseif t == "number" or t == "integer" then
        spec.type = t
        if f.one_of then spec.type, spec.one_of = "enum", f.one_of end
        if f.between then spec.min, spec.max = f.between[1], f.between[2] end
    elseif t == "boolean" then
        spec.type = "boolean"
    elseif t == "array" or t == "set" then
        spec.type, spec.min, spec.max = "array", f.len_min, f.len_max
        if f.elements then
            local items, err = convert(f.elements, where .. "[]")
            if not items then return nil, err end
            spec.items = items
        end
    elseif t == "map" then
        spec.type = "map"
        if f.values then
            local values, err = convert(f.values, where .. "{}")
            if not values then return nil, err end
            spec.values = values
        end
    elseif t == "record" then
        local fields, err = convert_fields(f.fields, where)
        if not fields then return nil, err end
        spec.type, spec.fields = "record", fields
    else
        return nil, ("field '%s': type '%s' is not supported by sluice's Kong layer"):format(where, tostring(t))
    end
    return spec
end

-- ---------------------------------------------------------------- extra checks

local check_value

local function fail(where, msg) return nil, ("%s: %s"):format(where, msg) end

check_value = function(f, v, where)
    if v == nil then return true end
    if type(v) == "string" then
        if f.match and not find(v, f.match) then return fail(where, "invalid value: " .. v) end
        if f.not_match and find(v, f.not_match) then return fail(where, "invalid value: " .. v) end
        if f.starts_with and v:sub(1, #f.starts_with) ~= f.starts_with then
            return fail(where, ("should start with: %s"):format(f.starts_with))
        end
        if f.len_eq and #v ~= f.len_eq then return fail(where, ("length must be %d"):format(f.len_eq)) end
        if f.match_any then
            local hit = false
            for _, p in ipairs(f.match_any.patterns or {}) do
                if find(v, p) then hit = true end
            end
            if not hit then return fail(where, f.match_any.err or "invalid value: " .. v) end
        end
        if f.match_none then
            for _, m in ipairs(f.match_none) do
                if find(v, m.pattern) then return fail(where, m.err or "invalid value: " .. v) end
            end
        end
        if f.is_regex then
            local _, _, err = require("sluice.kong.re").find("", v)
            if err then return fail(where, "not a valid regex: " .. v) end
        end
    end
    if type(v) == "number" and f.gt and not (v > f.gt) then
        return fail(where, ("value must be greater than %s"):format(f.gt))
    end
    if f.not_one_of then
        for _, x in ipairs(f.not_one_of) do
            if v == x then return fail(where, "must not be one of: " .. concat(f.not_one_of, ", ")) end
        end
    end
    if f.custom_validator then
        local ok, err = f.custom_validator(v)
        if not ok then return fail(where, tostring(err or "invalid value")) end
    end
    if type(v) == "table" then
        if f.elements then
            for i, x in ipairs(v) do
                local ok, err = check_value(f.elements, x, ("%s[%d]"):format(where, i))
                if not ok then return nil, err end
            end
        end
        if f.values then
            for k, x in pairs(v) do
                local ok, err = check_value(f.values, x, ("%s.%s"):format(where, tostring(k)))
                if not ok then return nil, err end
            end
        end
        if f.keys then
            for k in pairs(v) do
                local ok, err = check_value(f.keys, k, ("%s (key %s)"):format(where, tostring(k)))
                if not ok then return nil, err end
            end
        end
        if f.fields then
            for _, item in ipairs(f.fields) do
                local name, sub = next(item)
                local ok, err = check_value(sub, v[name], where == "" and name or (where .. "." .. name))
                if not ok then return nil, err end
            end
        end
    end
    return true
end

-- Whether a field counts as given in an entity check: Kong's is_nonempty (an empty string
-- or table is not).
local function set(v)
    if v == nil or v == "" then return false end
    return type(v) ~= "table" or next(v) ~= nil
end

-- The value of field `name` of conf: "a.b" is conf.a.b, as Kong's get_field reads it. In
-- the schema's top-level checks names start with "config." (the plugin entity's field).
local function field_of(conf, name, top)
    local v = conf
    for part in name:gmatch("[^.]+") do
        if top then
            top = false -- "config"
        else
            if type(v) ~= "table" then return nil end
            v = v[part]
        end
    end
    return v
end

-- A conditional's if_match or then_match: Kong runs the field validators it names on the
-- value (validate_field); nil stands for Kong's null, which passes all but required and eq.
local RULES = { required = true, eq = true, ne = true, one_of = true, not_one_of = true, gt = true,
                between = true, len_eq = true, len_min = true, len_max = true, match = true,
                not_match = true, starts_with = true, contains = true, custom_validator = true }

local function rule_ok(m, v)
    if v == nil then
        if m.required then return nil, "required field missing" end
        if m.eq ~= nil then return nil, ("value must be %s"):format(tostring(m.eq)) end
        return true
    end
    if m.eq ~= nil and v ~= m.eq then return nil, ("value must be %s"):format(tostring(m.eq)) end
    if m.ne ~= nil and v == m.ne then return nil, ("value must not be %s"):format(tostring(m.ne)) end
    local function listed(list)
        for _, x in ipairs(list) do if x == v then return true end end
        return false
    end
    if m.one_of and not listed(m.one_of) then return nil, "expected one of: " .. concat(m.one_of, ", ") end
    if m.not_one_of and listed(m.not_one_of) then
        return nil, "must not be one of: " .. concat(m.not_one_of, ", ")
    end
    if type(v) == "number" then
        if m.gt and not (v > m.gt) then return nil, ("value must be greater than %s"):format(m.gt) end
        if m.between and (v < m.between[1] or v > m.between[2]) then
            return nil, ("value should be between %s and %s"):format(m.between[1], m.between[2])
        end
    end
    if type(v) == "string" or type(v) == "table" then
        local n = #v
        if m.len_eq and n ~= m.len_eq then return nil, ("length must be %d"):format(m.len_eq) end
        if m.len_min and n < m.len_min then return nil, ("length must be at least %d"):format(m.len_min) end
        if m.len_max and n > m.len_max then return nil, ("length must be at most %d"):format(m.len_max) end
    end
    if type(v) == "string" then
        if m.match and not find(v, m.match) then return nil, "invalid value: " .. v end
        if m.not_match and find(v, m.not_match) then return nil, "invalid value: " .. v end
        if m.starts_with and v:sub(1, #m.starts_with) ~= m.starts_with then
            return nil, "should start with: " .. m.starts_with
        end
    end
    if m.contains ~= nil and type(v) == "table" then
        local found = false
        for _, x in ipairs(v) do if x == m.contains then found = true end end
        if not found then return nil, "expected to contain: " .. tostring(m.contains) end
    end
    if m.custom_validator then
        local ok, err = m.custom_validator(v)
        if not ok then return nil, tostring(err or "invalid value") end
    end
    return true
end

-- A conditional's if_match/then_match naming a validator rule_ok does not know: an error
-- at load (a constraint silently dropped would let a bad config through).
local function check_rules(c)
    local kind, arg = next(c)
    if kind ~= "conditional" then return true end
    for _, side in ipairs({ "if_match", "then_match" }) do
        for k in pairs(arg[side] or {}) do
            if not RULES[k] then
                return nil, ("conditional %s '%s' is not supported by sluice's Kong layer"):format(side, tostring(k))
            end
        end
    end
    return true
end

local function entity_check(c, conf, top)
    local kind, arg = next(c)
    local function get(name) return field_of(conf, name, top) end
    if kind == "at_least_one_of" then
        for _, k in ipairs(arg) do
            if set(get(k)) then return true end
        end
        return nil, "at least one of these fields must be non-empty: " .. concat(arg, ", ")
    elseif kind == "only_one_of" then
        local n = 0
        for _, k in ipairs(arg) do
            if set(get(k)) then n = n + 1 end
        end
        if n == 1 then return true end
        return nil, "exactly one of these fields must be non-empty: " .. concat(arg, ", ")
    elseif kind == "mutually_exclusive" then
        local n = 0
        for _, k in ipairs(arg) do
            if set(get(k)) then n = n + 1 end
        end
        if n <= 1 then return true end
        return nil, "only one or none of these fields must be set: " .. concat(arg, ", ")
    elseif kind == "conditional" then
        if not rule_ok(arg.if_match or {}, get(arg.if_field)) then return true end
        local ok, err = rule_ok(arg.then_match or {}, get(arg.then_field))
        if not ok then return nil, ("%s: %s"):format(arg.then_field, err) end
        return true
    end
    return true
end

-- Converts a Kong schema table. Returns { schema = sluice schema, check = function(conf) },
-- or nil, err.
function _M.convert(kschema)
    if type(kschema) ~= "table" or type(kschema.fields) ~= "table" then
        return nil, "must return a table with `fields` (Kong's plugin schema)"
    end
    local config
    for i, item in ipairs(kschema.fields) do
        local name, field, err = entry(item, ("fields[%d]"):format(i))
        if not name then return nil, err end
        if name == "config" then config = field end
    end
    if config == nil then return { schema = {}, check = nil } end
    if config.type ~= "record" then return nil, "fields.config must be a record" end
    for _, c in ipairs(config.entity_checks or {}) do
        local kind = type(c) == "table" and next(c)
        if not ENTITY_CHECKS[kind] then
            return nil, ("entity check '%s' is not supported by sluice's Kong layer"):format(tostring(kind))
        end
        local ok, err = check_rules(c)
        if not ok then return nil, err end
    end
    -- The schema's own entity_checks (beside `fields`) name the plugin entity's fields:
    -- "config.X" are the config's and are run on it; a check naming another field
    -- (consumer, route, protocols, ...) is about where Kong applies the plugin, which
    -- sluice's routes say: it is read and ignored, as those fields are.
    local top_checks = {}
    for _, c in ipairs(kschema.entity_checks or {}) do
        local kind, arg = nil, nil
        if type(c) == "table" then kind, arg = next(c) end
        if not ENTITY_CHECKS[kind] or type(arg) ~= "table" then
            return nil, ("entity check '%s' is not supported by sluice's Kong layer"):format(tostring(kind))
        end
        local ok, err = check_rules(c)
        if not ok then return nil, err end
        local names = kind == "conditional" and { arg.if_field, arg.then_field } or arg
        local all_config = #names > 0
        for i = 1, #names do
            if type(names[i]) ~= "string" or names[i]:sub(1, 7) ~= "config." then all_config = false end
        end
        if all_config then top_checks[#top_checks + 1] = c end
    end
    -- shorthand_fields (Kong 3) and shorthands (Kong 2): older names a config may still use;
    -- each value goes where its func says, before the config is checked (expand below)
    local shorthands = {}
    for i, item in ipairs(config.shorthand_fields or {}) do
        local name, field, err = entry(item, ("shorthand_fields[%d]"):format(i))
        if not name then return nil, err end
        if type(field.func) ~= "function" then
            return nil, ("shorthand field '%s' needs a func"):format(name)
        end
        shorthands[#shorthands + 1] = { name = name, type = field.type, func = field.func }
    end
    for _, item in ipairs(config.shorthands or {}) do
        local name, fn = next(item)
        if type(name) ~= "string" or type(fn) ~= "function" then
            return nil, "shorthands entries must be { NAME = function }"
        end
        shorthands[#shorthands + 1] = { name = name, func = fn }
    end
    local saved_checks = config.entity_checks
    local copy = {}
    for k, v in pairs(config) do
        if k ~= "entity_checks" and k ~= "shorthand_fields" and k ~= "shorthands" then copy[k] = v end
    end
    local fields, err = convert_fields(copy.fields, "config")
    if not fields then return nil, err end
    for k in pairs(copy) do
        if not HANDLED[k] then
            return nil, ("config: attribute '%s' is not supported by sluice's Kong layer"):format(tostring(k))
        end
    end
    local function check(conf)
        local ok, cerr = check_value({ fields = config.fields }, conf, "")
        if not ok then return nil, cerr end
        for _, c in ipairs(saved_checks or {}) do
            ok, cerr = entity_check(c, conf)
            if not ok then return nil, cerr end
        end
        for _, c in ipairs(top_checks) do
            ok, cerr = entity_check(c, conf, true)
            if not ok then return nil, cerr end
        end
        return true
    end
    local LUA_TYPE = { string = "string", number = "number", integer = "number", boolean = "boolean",
                       array = "table", set = "table", map = "table", record = "table" }
    local function merge(into, from)
        for k, v in pairs(from) do
            if type(v) == "table" and type(into[k]) == "table" and v[1] == nil then
                merge(into[k], v)
            else
                into[k] = v
            end
        end
    end
    -- The config with every shorthand given replaced by what its func returns (merged into
    -- the config, the shorthand's values winning, as Kong does); or nil, the shorthand, err.
    local function expand(raw)
        for _, sh in ipairs(shorthands) do
            local v = raw[sh.name]
            if v ~= nil then
                local want = sh.type and LUA_TYPE[sh.type]
                if want and type(v) ~= want then
                    return nil, sh.name, ("expected a %s"):format(sh.type)
                end
                raw[sh.name] = nil
                local ok, new = pcall(sh.func, v)
                if not ok then return nil, sh.name, tostring(new) end
                if type(new) == "table" then merge(raw, new) end
            end
        end
        return raw
    end
    return { schema = fields, check = check, expand = #shorthands > 0 and expand or nil }
end

return _M
