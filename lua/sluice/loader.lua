-- sluice.loader: finds plugin modules on the plugin paths, loads them and validates
-- their configs. Used by the config build (errors with FILE:LINE:COL) and by every
-- worker VM (the same code fills defaults, so both agree on what a config means).
local cjson = require("cjson.safe")
local schema = require("sluice.schema")
local source_pos = require("sluice.source_pos")
local files = require("sluice.files")

local type, pairs, ipairs, pcall, loadfile, setmetatable = type, pairs, ipairs, pcall, loadfile, setmetatable
local io_open = io.open

local _M = {}

_M.PHASES = { "rewrite", "access", "header_filter", "body_filter", "log", "preread", "balancer" }

local function exists(path)
    local f = io_open(path, "r")
    if f then f:close() return true end
    return false
end

-- The file a plugin name resolves to: the first of DIR/NAME.lua, DIR/NAME/init.lua, and
-- DIR/NAME/handler.lua (a Kong plugin: sluice.kong.plugin loads it).
function _M.find(paths, name)
    for _, dir in ipairs(paths) do
        for _, candidate in ipairs({ dir .. "/" .. name .. ".lua", dir .. "/" .. name .. "/init.lua",
                                     dir .. "/" .. name .. "/handler.lua" }) do
            if exists(candidate) then return candidate end
        end
    end
    return nil
end

-- Loads (once per VM) the module for `name`. Returns the plugin table or nil, err.
-- `known` (optional) lists the plugin names on the paths, for a "did you mean".
function _M.load(paths, name, cache, known)
    local hit = cache[name]
    if hit then return hit end
    local file = _M.find(paths, name)
    if not file then
        return nil, ("unknown plugin '%s'%s (searched %s)"):format(name, schema.did_you_mean(name, known or {}),
                                                                   table.concat(paths, ", "))
    end
    local mod
    if file:sub(-12) == "/handler.lua" then
        local err
        mod, err = require("sluice.kong.plugin").load(paths, file:sub(1, -13), name)
        if not mod then return nil, ("Kong plugin '%s': %s"):format(name, err) end
    else
        local chunk, err = loadfile(file)
        if not chunk then return nil, ("cannot load %s: %s"):format(file, err) end
        local ok
        ok, mod = pcall(chunk, name)
        if not ok then return nil, ("%s raised: %s"):format(file, tostring(mod)) end
    end
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
function _M.prepare(paths, name, config_json, cache, known)
    local mod, err = _M.load(paths, name, cache, known)
    if not mod then return nil, { { path = "@name", at = "value", msg = err } } end
    local raw = cjson.decode(config_json or "{}")
    if type(raw) ~= "table" then raw = {} end
    raw = strip_null(raw)
    if mod.expand then -- a Kong plugin's shorthand fields, put where they belong
        local out, key, xerr = mod.expand(raw)
        if not out then return nil, { { path = key, at = "value", msg = xerr } } end
        raw = out
    end
    local conf, errs = schema.validate(mod.schema, raw)
    if #errs > 0 then return nil, errs end
    files.resolve_conf(conf) -- `*_file` keys: resolved and part of the generation
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

-- A plugin marked `after_auth` (acl) decides from ctx.consumer in access, so every plugin
-- marked `auth` (those that set it) must run before it; one marked `body_last`
-- (compression) encodes the body, so no other body_filter may run after it: the global
-- chain first, then the route's, each in list order. Returns { [use] = message } for the
-- misplaced ones.
local function order_errors(uses, cache)
    local bad, global, chains = {}, {}, {}
    for _, u in ipairs(uses) do
        if u.layer == "http" then
            if u.where == "the global chain" then
                global[#global + 1] = u
            else
                local c = chains[u.where]
                if not c then c = {}; chains[u.where] = c; chains[#chains + 1] = c end
                c[#c + 1] = u
            end
        end
    end
    if #chains == 0 then chains[1] = {} end
    for _, c in ipairs(chains) do
        local seq = {}
        for _, u in ipairs(global) do seq[#seq + 1] = u end
        for _, u in ipairs(c) do seq[#seq + 1] = u end
        for i, u in ipairs(seq) do
            local mod = cache[u.name]
            if mod and mod.after_auth and not bad[u] then
                for j = i + 1, #seq do
                    local later = cache[seq[j].name]
                    if later and later.auth then
                        bad[u] = ("runs in access on the consumer an auth plugin set, so it must come after '%s' (%s)")
                            :format(seq[j].name, seq[j].where)
                        break
                    end
                end
            end
            if mod and mod.body_last and not bad[u] then
                for j = i + 1, #seq do
                    local later = cache[seq[j].name]
                    if later and later.body_filter then
                        bad[u] = ("encodes the response body, so it must come after '%s' (%s), whose body_filter "
                                  .. "would see encoded bytes"):format(seq[j].name, seq[j].where)
                        break
                    end
                end
            end
        end
    end
    return bad
end

function _M.validate_all(paths, uses, known)
    local cache, out = {}, {}
    for _, u in ipairs(uses) do _M.load(paths, u.name, cache, known) end
    local misplaced = order_errors(uses, cache)
    for _, u in ipairs(uses) do
        local _, errs = _M.prepare(paths, u.name, u.config_json, cache, known)
        local mod = not errs and cache[u.name]
        local lerr = mod and (layer_error(mod, u.layer) or misplaced[u])
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
                out[#out + 1] = { file = u.file, line = line, col = col,
                                  msg = ("%s, plugin '%s': %s"):format(u.where, u.name, msg) }
            end
        end
    end
    return out
end

-- lua_routes: each file returns a list of routes with the keys of YAML routes; `match`
-- may be a function(request) -> boolean (request is sluice.request). Returns, for the
-- config build, a flat list of plain descriptions and a list of errors { file, line,
-- col, msg }: every error of every file, each at the Lua line and column of the route,
-- key or value at fault (sluice.source_pos; line 1 when the file builds its list in
-- code), and a route with errors is left out.
local KNOWN_ROUTE_KEYS = { "name", "match", "upstream", "strip_prefix", "upgrade", "plugins" }
local KNOWN_MATCH_KEYS = { "hosts", "paths", "methods", "headers" }

-- The Lua error "FILE:LINE: msg" as its line and message.
local function lua_err_line(file, err)
    err = tostring(err)
    local at = err:find(file, 1, true)
    local line, msg
    if at then
        line, msg = err:sub(at + #file):match("^:(%d+): (.*)$")
    else -- Lua shortens a long chunk name to "...TAIL"
        line, msg = err:match("^%.%.%.[^\n]-:(%d+): (.*)$")
    end
    return tonumber(line) or 1, msg or err
end

local function is_list_of_strings(v)
    if type(v) ~= "table" then return false end
    for _, x in ipairs(v) do
        if type(x) ~= "string" then return false end
    end
    return true
end

-- The checks routes.c makes on a YAML route's names and match conditions, with the same
-- messages, so a Lua route cannot hold what YAML refuses (a name that would break the
-- metrics text, a host with a port or a path without '/' that never matches).
local NAME_MAX = 64 -- MAX_NAME_LEN: names become metric labels and log fields

local function valid_name(s, dot)
    return type(s) == "string" and #s >= 1 and #s <= NAME_MAX and not s:find(dot and "[^%w%-_.]" or "[^%w%-_]")
end

local function name_rule(dot)
    return ("use 1 to %d letters, digits, %s'-' or '_'"):format(NAME_MAX, dot and "'.', " or "")
end

local function is_token(s)
    return s ~= "" and not s:find("[^%w!#$%%&'*+%-.^_`|~]")
end

-- A host (lower-cased already): nil, or why it is refused.
local function host_error(s)
    local name = s:sub(1, 2) == "*." and s:sub(3) or s
    if name:find("*", 1, true) or s == "*." then
        return ("host '%s': '*' is only allowed as a whole first label, as in *.example.com"):format(s)
    end
    if name:sub(1, 1) == "[" then
        local inner = name:match("^%[(.+)%]$")
        if name == s and inner and inner:find(":", 1, true) and require("sluice.cidr").parse_ip(inner) then
            return nil
        end
        return ("host '%s' is not a valid bracketed IPv6 address"):format(s)
    end
    if name:find(":", 1, true) then return ("host '%s': hosts match without the port"):format(s) end
    if name:find("[^%w%-_.]") then return ("host '%s' is not a valid host name"):format(s) end
    if name == "" then return "host must not be empty" end
    return nil
end

local function path_error(s)
    if s:sub(1, 1) ~= "/" then return ("path '%s' must start with '/'"):format(s) end
    if s:find("[%z\1-\32\127?#]") then
        return ("path '%s' must not contain spaces, control characters, '?' or '#'"):format(s)
    end
    return nil
end

local function method_error(s)
    if not is_token(s) then return ("method '%s' is not a valid HTTP method token"):format(s) end
    return nil
end

local MATCH_CHECKS = {
    hosts = { check = host_error, norm = string.lower },
    paths = { check = path_error },
    methods = { check = method_error, norm = string.upper },
}

local function route_errors(fi, i, r, node, add)
    local function pos(field)
        if field then return field.line, field.col end
        if node then return node.line, node.col end
        return 1, 1
    end
    local fields = node and node.fields or {}
    local function at(key, fmt, ...)
        local l, c = pos(fields[key])
        add(l, c, fmt:format(...))
    end
    local bad = false
    local function fail(key, fmt, ...) bad = true at(key, fmt, ...) end
    if type(r) ~= "table" then
        local l, c = pos(nil)
        add(l, c, ("route %d is not a table"):format(i))
        return nil
    end
    local label = valid_name(r.name, true) and ("route '%s'"):format(r.name) or ("route %d"):format(i)
    for k in pairs(r) do
        if type(k) ~= "string" or not schema.has(KNOWN_ROUTE_KEYS, k) then
            bad = true
            local f = fields[k]
            local l, c = f and f.kline or pos(nil), f and f.kcol or select(2, pos(nil))
            add(l, c, ("%s: unknown key '%s'%s"):format(label, tostring(k), schema.did_you_mean(tostring(k), KNOWN_ROUTE_KEYS)))
        end
    end
    if type(r.name) ~= "string" or r.name == "" then
        fail("name", "%s: 'name' must be a string", label)
    elseif not valid_name(r.name, true) then
        fail("name", "%s: invalid route name '%s': %s", label, r.name, name_rule(true))
    elseif r.name == "none" then -- SL_ROUTE_NONE (config/parse.h)
        fail("name", "%s: route name 'none' is reserved: the metrics label requests that matched no route with "
            .. 'route="none"', label)
    end
    if r.strip_prefix ~= nil and type(r.strip_prefix) ~= "boolean" then
        fail("strip_prefix", "%s: strip_prefix must be a boolean (true or false)", label)
    end
    local d = { file = fi - 1, index = i, name = r.name, upstream = r.upstream,
                strip_prefix = r.strip_prefix and true or false,
                hosts = {}, paths = {}, methods = {}, headers = {}, plugins = {}, upgrade = {} }
    d.line, d.col = pos(nil)
    if r.upgrade ~= nil and not is_list_of_strings(r.upgrade) then
        fail("upgrade", "%s: upgrade must be a list of strings", label)
    elseif r.upgrade then
        for j, p in ipairs(r.upgrade) do
            p = p:lower()
            local name = p:match("^([^/]+)") or p
            if name == "h2c" then
                fail("upgrade", "%s: upgrade: h2c is never forwarded (sluice speaks HTTP/1.1 to upstreams)", label)
            elseif p ~= "*" and not p:match("^[%w!#$%%&'*+%-.^_`|~]+$") and
                not p:match("^[%w!#$%%&'*+%-.^_`|~]+/[%w!#$%%&'*+%-.^_`|~]+$") then
                fail("upgrade", "%s: upgrade protocol '%s' is not a token (NAME or NAME/VERSION)", label, p)
            end
            d.upgrade[j] = p
        end
    end
    if r.upstream ~= nil and type(r.upstream) ~= "string" then
        fail("upstream", "%s: 'upstream' must be an upstream's name", label)
    end
    d.upstream_line, d.upstream_col = pos(fields.upstream)
    d.upgrade_line, d.upgrade_col = pos(fields.upgrade)
    local m = r.match
    local mnode = fields.match and fields.match.node
    if type(m) == "function" then
        d.match_fn = true
    elseif type(m) == "table" then
        for k in pairs(m) do
            if not schema.has(KNOWN_MATCH_KEYS, k) then
                local f = mnode and mnode.fields[k]
                local l, c = pos(fields.match)
                if f then l, c = f.kline, f.kcol end
                bad = true
                add(l, c, ("%s: unknown key '%s' in match%s"):format(label, tostring(k),
                    schema.did_you_mean(tostring(k), KNOWN_MATCH_KEYS)))
            end
        end
        for _, k in ipairs({ "hosts", "paths", "methods" }) do
            local f = mnode and mnode.fields[k]
            local l, c = pos(fields.match)
            if f then l, c = f.line, f.col end
            if m[k] ~= nil and not is_list_of_strings(m[k]) then
                bad = true
                add(l, c, ("%s: match.%s must be a list of strings"):format(label, k))
            else
                local mc, list = MATCH_CHECKS[k], {}
                for j, s in ipairs(m[k] or {}) do
                    if mc.norm then s = mc.norm(s) end
                    local err = mc.check(s)
                    if err then
                        local it = f and f.node and f.node.items[j]
                        bad = true
                        add(it and it.line or l, it and it.col or c, ("%s: %s"):format(label, err))
                    end
                    list[j] = s
                end
                d[k] = list
            end
        end
        if m.headers ~= nil and type(m.headers) ~= "table" then
            fail("match", "%s: match.headers must map names to strings", label)
        end
        local hnode = mnode and mnode.fields.headers and mnode.fields.headers.node
        local seen = {}
        for k, v in pairs(type(m.headers) == "table" and m.headers or {}) do
            if type(k) ~= "string" or type(v) ~= "string" then
                fail("match", "%s: match.headers must map names to strings", label)
                break
            end
            local hf = hnode and hnode.fields[k]
            local kl, kc = pos(fields.match)
            local vl, vc = kl, kc
            if hf then kl, kc, vl, vc = hf.kline, hf.kcol, hf.line, hf.col end
            if not is_token(k) then
                bad = true
                add(kl, kc, ("%s: header name '%s' is not a valid token"):format(label, k))
            elseif seen[k:lower()] then
                bad = true
                add(kl, kc, ("%s: header '%s' is matched twice (header names ignore case)"):format(label, k))
            elseif v:find("[%z\1-\8\10-\31\127]") then
                bad = true
                add(vl, vc, ("%s: header value for '%s' contains a control character"):format(label, k))
            end
            seen[k:lower()] = true
            d.headers[#d.headers + 1] = { k, v }
        end
    elseif m ~= nil then
        fail("match", "%s: 'match' must be a table or a function", label)
    end
    local pnode = fields.plugins and fields.plugins.node
    if r.plugins ~= nil and type(r.plugins) ~= "table" then
        fail("plugins", "%s: 'plugins' must be a list", label)
    end
    for j, p in ipairs(type(r.plugins) == "table" and r.plugins or {}) do
        local item = pnode and pnode.items[j]
        local inode = item and item.node
        if type(p) ~= "table" or type(p.name) ~= "string" then
            local l, c = pos(fields.plugins)
            if item then l, c = item.line, item.col end
            bad = true
            add(l, c, ("%s: plugins[%d] needs a name"):format(label, j))
        elseif not valid_name(p.name, false) then
            local l, c = pos(inode and inode.fields.name or item or fields.plugins)
            bad = true
            add(l, c, ("%s: invalid plugin name '%s': %s"):format(label, p.name, name_rule(false)))
        else
            local js = cjson.encode(p.config or {})
            if js == "[]" then js = "{}" end
            local u = { name = p.name, config_json = js }
            local nf = inode and inode.fields.name
            local cf = inode and inode.fields.config
            u.nline, u.ncol = pos(nf or item)
            u.cline, u.ccol = pos(cf or item)
            u.positions_json = cjson.encode(source_pos.positions(cf and cf.node)) or "{}"
            if u.positions_json == "[]" then u.positions_json = "{}" end
            d.plugins[j] = u
        end
    end
    if r.strip_prefix == true and #d.paths == 0 then
        fail("strip_prefix", "%s: strip_prefix needs match.paths to know what to strip", label)
    end
    if r.upstream == nil and (r.plugins == nil or #r.plugins == 0) then
        fail("name", "%s needs an upstream or at least one plugin", label)
    end
    if bad then return nil end
    return d
end

function _M.lua_routes(files)
    local out, errs = {}, {}
    for fi, file in ipairs(files) do
        local function add(line, col, msg)
            errs[#errs + 1] = { file = file, line = line, col = col, msg = msg }
        end
        local chunk, err = loadfile(file)
        if not chunk then
            local line, msg = lua_err_line(file, err)
            if not io_open(file, "r") then line, msg = 1, "cannot read: " .. tostring(err) end
            add(line, 1, msg)
        else
            local ok, list = pcall(chunk)
            if not ok then
                local line, msg = lua_err_line(file, list)
                add(line, 1, "raised: " .. msg)
            elseif type(list) ~= "table" then
                add(1, 1, "must return a list of routes")
            else
                local f = io_open(file, "r")
                local src = f and f:read("*a") or ""
                if f then f:close() end
                local root = source_pos.scan(src)
                -- the scan must agree with what the chunk returned, else positions would lie
                if root and #root.items ~= #list then root = nil end
                for i, r in ipairs(list) do
                    local item = root and root.items[i]
                    local d = route_errors(fi, i, r, item and item.node, add)
                    if d then out[#out + 1] = d end
                end
            end
        end
    end
    return out, errs
end

-- For `sluice explain`: each route's effective chain per phase, as text.
-- global and routes: { {name=, plugins={ {name=...}, ... }, upstream=...}, ... }.
-- Each route also shows its match conditions, its precedence rank (sluice.router's
-- order) and where it was written (the YAML file, or a lua_routes file).
local function match_text(r)
    local parts = {}
    if #r.hosts > 0 then parts[#parts + 1] = "hosts " .. table.concat(r.hosts, ", ") end
    if #r.paths > 0 then parts[#parts + 1] = "paths " .. table.concat(r.paths, ", ") end
    if #r.methods > 0 then parts[#parts + 1] = "methods " .. table.concat(r.methods, ", ") end
    for _, h in ipairs(r.headers) do parts[#parts + 1] = ("header %s: %s"):format(h[1], h[2]) end
    if r.match_fn then parts[#parts + 1] = "a Lua match function" end
    if #parts == 0 then return "any request" end
    return table.concat(parts, "; ")
end

function _M.explain(paths, global, routes, only)
    local cache, out = {}, {}
    local rank, nranked = require("sluice.router").ranks(routes)
    for _, r in ipairs(routes) do
        if not only or only == r.name then
            out[#out + 1] = ("route %s -> %s"):format(r.name, r.upstream or "(no upstream: the chain answers)")
            out[#out + 1] = ("  %-13s %s"):format("match", match_text(r))
            out[#out + 1] = ("  %-13s %d of %d"):format("precedence", rank[r.index] or 0, nranked)
            out[#out + 1] = ("  %-13s %s:%d%s"):format("defined in", r.file, r.line,
                r.lua_routes and " (lua_routes)" or "")
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
    out[#out + 1] = "(precedence 1 is tried first: exact host, then wildcard host, then no host; within "
        .. "each, the longest path prefix, then more conditions, then file order)"
    return table.concat(out, "\n") .. "\n"
end

return _M
