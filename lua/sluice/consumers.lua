-- sluice.consumers: the config's `consumers:` for auth plugins (docs/plugins.md).
--
--   local name = sluice.consumers.find("key-auth", "key", presented_key)
--   local cred = sluice.consumers.credential(name, "basic-auth")  -- { username, password_hash }
--
-- A worker VM serves one config generation: runtime.lua loads its consumers here once.
-- Lookups by (kind, field, value) are hash lookups built at load, not scans.
local cjson = require("cjson.safe")

local _M = {}

local by_name, index, groups = {}, {}, {}

-- gen_consumers: { { name = ..., credentials_json = ..., groups = {...} }, ... } from the core.
function _M.load(gen_consumers)
    by_name, index, groups = {}, {}, {}
    for _, c in ipairs(gen_consumers or {}) do
        local creds = cjson.decode(c.credentials_json or "{}") or {}
        by_name[c.name] = creds
        groups[c.name] = c.groups or {}
        for kind, fields in pairs(creds) do
            if type(fields) == "table" then
                for field, value in pairs(fields) do
                    if type(value) == "string" or type(value) == "number" then
                        local k = kind .. "\0" .. field .. "\0" .. tostring(value)
                        index[k] = c.name
                    end
                end
            end
        end
    end
end

-- The consumer whose credentials[kind][field] == value, or nil.
function _M.find(kind, field, value)
    if type(value) ~= "string" then return nil end
    return index[kind .. "\0" .. field .. "\0" .. value]
end

-- The consumer's credentials of `kind` (a table), or nil.
function _M.credential(name, kind)
    local c = by_name[name]
    return c and c[kind] or nil
end

-- The consumer's `groups:` as a list (empty when none or unknown); shared: read-only.
local NONE = {}
function _M.groups(name)
    return groups[name] or NONE
end

-- true when the config lists a consumer of that name.
function _M.exists(name)
    return by_name[name] ~= nil
end

return _M
