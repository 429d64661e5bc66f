-- sluice.loader: finds plugin modules on the plugin paths, loads them and validates
-- their configs. Used by the config build (errors with FILE:LINE:COL) and by every
-- worker VM (the same code fills defaults, so both agree on what a config means).
local cjson = require("cjson.safe")
local schema = require("sluice.schema")

local type, pairs, ipairs, pcall, loadfile, setmetatable = type, pairs, ipairs, pcall, loadfile, setmetatable
local io_open = io.open

local _M = {}

_M.PHASES = { "rewrite", "access", "header_filter", "body_filter", "log", "preread" }

local function exists(path)
    local f = io_open(path, "r")
    if f then f:close() return true end
    return false
end

-- The file a plugin name resolves to: the first of DIR/NAME.lua, DIR/NAME/init.lua.
function _M.find(paths, name)
    for _, dir in ipairs(paths) do
        for _, candidate in ipairs({ dir .. "/" .. name .. ".lua", dir .. "/" .. name .. "/init.lua" }) do
            if exists(candidate) then return candidate end
        end
    end
    return nil
end

-- Loads (once per VM) the module for `name`. Returns the plugin table or nil, err.
function _M.load(paths, name, cache)
    local hit = cache[name]
    if hit then return hit end
    local file = _M.find(paths, name)
    if not file then
        return nil, ("unknown plugin '%s' (searched %s)"):format(name, table.concat(paths, ", "))
    end
    local chunk, err = loadfile(file)
    if not chunk then return nil, ("cannot load %s: %s"):format(file, err) end
    local ok, mod = pcall(chunk, name)
    if not ok then return nil, ("%s raised: %s"):format(file, tostring(mod)) end
    if type(mod) ~= "table" then
        return nil, ("%s must return a table"):format(file)
    end
    local sok, serr = schema.check_schema(mod.schema)
    if not sok then return nil, ("%s: %s"):format(file, serr) end
    for _, ph in ipairs(_M.PHASES) do
        if mod[ph] ~= nil and type(mod[ph]) ~= "function" then
            return nil, ("%s: %s must be a function"):format(file, ph)
        end
    end
    if mod.check ~= nil and type(mod.check) ~= "function" then
        return nil, ("%s: check must be a function"):format(file)
    end
    mod.__file = file
    cache[name] = mod
    return mod
end

-- JSON null becomes "absent", as a YAML `key:` means "use the default".
local function strip_null(v)
    if type(v) ~= "table" then
        if v == cjson.null then return nil end
        return v
    end
    for k, x in pairs(v) do v[k] = strip_null(x) end
    return v
end

-- Validates one plugin use. Returns conf (defaults filled) or nil and a list of
-- { path, at, msg } errors (path "" = the config mapping itself).
function _M.prepare(paths, name, config_json, cache)
    local mod, err = _M.load(paths, name, cache)
    if not mod then return nil, { { path = "@name", at = "value", msg = err } } end
    local raw = cjson.decode(config_json or "{}")
    if type(raw) ~= "table" then raw = {} end
    local conf, errs = schema.validate(mod.schema, strip_null(raw))
    if #errs > 0 then return nil, errs end
    if mod.check then
        local ok, res, msg = pcall(mod.check, conf)
        if not ok then return nil, { { path = "", at = "value", msg = "check failed: " .. tostring(res) } } end
        if not res then return nil, { { path = "", at = "value", msg = tostring(msg or "check failed") } } end
    end
    return conf, nil, mod
end

-- For the config build: uses = { {name, config_json, positions_json, line, col, cline, ccol, where}, ... }.
-- Returns a list of { line, col, msg } for every error found.
function _M.validate_all(paths, uses)
    local cache, out = {}, {}
    for _, u in ipairs(uses) do
        local _, errs = _M.prepare(paths, u.name, u.config_json, cache)
        if errs then
            local pos = cjson.decode(u.positions_json or "{}") or {}
            for _, e in ipairs(errs) do
                local line, col = u.cline, u.ccol
                if e.path == "@name" then
                    line, col = u.nline, u.ncol
                elseif e.path ~= "" and pos[e.path] then
                    local p = pos[e.path]
                    if e.at == "key" then line, col = p[1], p[2] else line, col = p[3], p[4] end
                end
                local msg = e.msg
                if e.path ~= "" and e.path ~= "@name" and e.at == "value" then
                    msg = ("%s: %s"):format(e.path, msg)
                end
                out[#out + 1] = { line = line, col = col,
                                  msg = ("%s, plugin '%s': %s"):format(u.where, u.name, msg) }
            end
        end
    end
    return out
end

-- For `sluice explain`: each route's effective chain per phase, as text.
-- global and routes: { {name=, plugins={ {name=...}, ... }, upstream=...}, ... }.
function _M.explain(paths, global, routes, only)
    local cache, out = {}, {}
    for _, r in ipairs(routes) do
        if not only or only == r.name then
            out[#out + 1] = ("route %s -> %s"):format(r.name, r.upstream or "(no upstream: the chain answers)")
            local chain = {}
            for _, p in ipairs(global) do chain[#chain + 1] = { name = p.name, global = true } end
            for _, p in ipairs(r.plugins) do chain[#chain + 1] = { name = p.name } end
            for _, ph in ipairs(_M.PHASES) do
                local names = {}
                for _, p in ipairs(chain) do
                    local mod = _M.load(paths, p.name, cache)
                    if mod and mod[ph] then names[#names + 1] = p.name .. (p.global and " (global)" or "") end
                end
                if #names > 0 then out[#out + 1] = ("  %-13s %s"):format(ph, table.concat(names, " -> ")) end
            end
            if #chain == 0 then out[#out + 1] = "  (no plugins)" end
        end
    end
    if only and #out == 0 then return nil, ("no route named '%s'"):format(only) end
    return table.concat(out, "\n") .. "\n"
end

return _M
