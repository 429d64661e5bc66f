-- sluice.loader: finds plugin modules on the plugin paths, loads them and validates
-- their configs. Used by the config build (errors with FILE:LINE:COL) and by every
-- worker VM (the same code fills defaults, so both agree on what a config means).
local cjson = require("cjson.safe")
local schema = require("sluice.schema")

local type, pairs, ipairs, pcall, loadfile, setmetatable = type, pairs, ipairs, pcall, loadfile, setmetatable
local io_open = io.open

local _M = {}

_M.PHASES = { "rewrite", "access", "header_filter", "body_filter", "log", "preread", "balancer" }

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
    if mod.prepare ~= nil and type(mod.prepare) ~= "function" then
        return nil, ("%s: prepare must be a function"):format(file)
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
-- Where a plugin's phases run: a tcp listener's chain runs only preread, a route's (and
-- the global chain) every phase but preread. A plugin with nothing to do where it is
-- used is a config error, not a silent no-op.
local HTTP_PHASES = { "rewrite", "access", "header_filter", "body_filter", "log", "balancer" }

local function layer_error(mod, layer)
    if layer == "tcp" then
        if not mod.preread then
            return "defines no preread function: a tcp listener's plugins run only in the preread phase"
        end
        return nil
    end
    if mod.preread then
        for _, ph in ipairs(HTTP_PHASES) do
            if mod[ph] then return nil end
        end
        return "defines only preread, which runs on tcp listeners: list it under a protocol: tcp listener's plugins"
    end
    return nil
end

function _M.validate_all(paths, uses)
    local cache, out = {}, {}
    for _, u in ipairs(uses) do
        local _, errs = _M.prepare(paths, u.name, u.config_json, cache)
        local mod = not errs and cache[u.name]
        local lerr = mod and layer_error(mod, u.layer)
        if lerr then errs = { { path = "@name", at = "value", msg = lerr } } end
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

-- lua_routes: each file returns a list of routes with the keys of YAML routes; `match`
-- may be a function(request) -> boolean (request is sluice.request). Returns, for the
-- config build, a flat list of plain descriptions, or nil and an error message.
local function str_list(v, what, where)
    if v == nil then return {} end
    if type(v) ~= "table" then error(("%s: %s must be a list of strings"):format(where, what), 0) end
    for _, x in ipairs(v) do
        if type(x) ~= "string" then error(("%s: %s must be a list of strings"):format(where, what), 0) end
    end
    return v
end

function _M.lua_routes(files)
    local out = {}
    for fi, file in ipairs(files) do
        local chunk, err = loadfile(file)
        if not chunk then return nil, ("cannot load %s: %s"):format(file, err) end
        local ok, list = pcall(chunk)
        if not ok then return nil, ("%s raised: %s"):format(file, tostring(list)) end
        if type(list) ~= "table" then return nil, ("%s must return a list of routes"):format(file) end
        local ok2, err2 = pcall(function()
            for i, r in ipairs(list) do
                local where = ("%s: route %d"):format(file, i)
                if type(r) ~= "table" then error(where .. " is not a table", 0) end
                local known = { name = 1, match = 1, upstream = 1, strip_prefix = 1, upgrade = 1, plugins = 1 }
                for k in pairs(r) do
                    if not known[k] then error(("%s: unknown key '%s'"):format(where, tostring(k)), 0) end
                end
                if type(r.name) ~= "string" or r.name == "" then error(where .. ": 'name' must be a string", 0) end
                where = ("%s: route '%s'"):format(file, r.name)
                local d = { file = fi - 1, index = i, name = r.name, upstream = r.upstream,
                            strip_prefix = r.strip_prefix and true or false,
                            hosts = {}, paths = {}, methods = {}, headers = {}, plugins = {}, upgrade = {} }
                for j, p in ipairs(str_list(r.upgrade, "upgrade", where)) do
                    p = p:lower()
                    local name = p:match("^([^/]+)") or p
                    if name == "h2c" then
                        error(where .. ": upgrade: h2c is never forwarded (sluice speaks HTTP/1.1 to upstreams)", 0)
                    end
                    if p ~= "*" and not p:match("^[%w!#$%%&'*+%-.^_`|~]+$") and
                        not p:match("^[%w!#$%%&'*+%-.^_`|~]+/[%w!#$%%&'*+%-.^_`|~]+$") then
                        error(("%s: upgrade protocol '%s' is not a token (NAME or NAME/VERSION)"):format(where, p), 0)
                    end
                    d.upgrade[j] = p
                end
                if r.upstream ~= nil and type(r.upstream) ~= "string" then
                    error(where .. ": 'upstream' must be an upstream's name", 0)
                end
                local m = r.match
                if type(m) == "function" then
                    d.match_fn = true
                elseif type(m) == "table" then
                    for k in pairs(m) do
                        if k ~= "hosts" and k ~= "paths" and k ~= "methods" and k ~= "headers" then
                            error(("%s: unknown key '%s' in match"):format(where, tostring(k)), 0)
                        end
                    end
                    d.hosts = str_list(m.hosts, "match.hosts", where)
                    d.paths = str_list(m.paths, "match.paths", where)
                    d.methods = str_list(m.methods, "match.methods", where)
                    for k, v in pairs(m.headers or {}) do
                        if type(k) ~= "string" or type(v) ~= "string" then
                            error(where .. ": match.headers must map names to strings", 0)
                        end
                        d.headers[#d.headers + 1] = { k, v }
                    end
                elseif m ~= nil then
                    error(where .. ": 'match' must be a table or a function", 0)
                end
                for j, p in ipairs(r.plugins or {}) do
                    if type(p) ~= "table" or type(p.name) ~= "string" then
                        error(("%s: plugins[%d] needs a name"):format(where, j), 0)
                    end
                    local js = cjson.encode(p.config or {})
                    if js == "[]" then js = "{}" end
                    d.plugins[j] = { name = p.name, config_json = js }
                end
                if not d.upstream and #d.plugins == 0 then
                    error(where .. " needs an upstream or at least one plugin", 0)
                end
                out[#out + 1] = d
            end
        end)
        if not ok2 then return nil, err2 end
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
