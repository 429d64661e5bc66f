-- sluice.kong.plugin: loads a Kong-shaped plugin (a folder with handler.lua and
-- schema.lua) as a sluice plugin.
--
--   * schema.lua's `config` record becomes the plugin's schema (sluice.kong.schema): the
--     config is validated with Kong's defaults and required fields at config load;
--   * handler.lua's phase methods (rewrite, access, header_filter, body_filter, log) take
--     (self, conf) and run in sluice's phases of the same name; init_worker runs once per
--     worker VM before the plugin's first phase; PRIORITY and VERSION are read (the chain
--     runs in the order the config lists it, as for every sluice plugin);
--   * the files run with `kong` (sluice.kong) and `ngx` (sluice.kong.ngx) as globals, and
--     `require("kong.plugins.NAME.X")` finds NAME's folder on the plugin paths;
--   * every file loaded is first checked for `kong.X.Y` and `ngx.X` references against
--     the PDK tables: an unsupported one fails the load, naming plugin, file, line and
--     function. (A name reached another way, through a local alias or brackets, still
--     raises the same message at its first call: the PDK tables are strict.)
local kmod = require("sluice.kong")
local kngx = require("sluice.kong.ngx")
local kschema = require("sluice.kong.schema")

local type, pairs, ipairs, pcall, error, tostring, loadstring, setfenv, setmetatable, rawget =
    type, pairs, ipairs, pcall, error, tostring, loadstring, setfenv, setmetatable, rawget
local find, sub, concat = string.find, string.sub, table.concat

local _M = {}

local kong, ngx = kmod.kong, kngx.ngx
local EXIT, NGX_OK, ARG = kmod.EXIT, kmod.NGX_OK, kmod.arg

-- ---------------------------------------------------------------- the source check

-- The source with comments and string literals blanked out (newlines kept, so a position
-- still has its line): what is left are the names the code uses.
local function code_only(src)
    local out, i, n = {}, 1, #src
    local function blank(from, to)
        out[#out + 1] = (sub(src, from, to):gsub("[^\n]", " "))
    end
    while i <= n do
        local s = find(src, "[%-%[\"']", i)
        if not s then
            out[#out + 1] = sub(src, i)
            break
        end
        out[#out + 1] = sub(src, i, s - 1)
        local c = sub(src, s, s)
        local long = sub(src, s, s + 1) == "--" and src:match("^%-%-%[(=*)%[", s)
            or (c == "[" and src:match("^%[(=*)%[", s))
        if sub(src, s, s + 1) == "--" then
            if long then
                local _, e = find(src, "]" .. long .. "]", s, true)
                e = e or n
                blank(s, e)
                i = e + 1
            else
                local e = find(src, "\n", s, true) or n + 1
                blank(s, e - 1)
                i = e
            end
        elseif c == "[" and long then
            local _, e = find(src, "]" .. long .. "]", s, true)
            e = e or n
            blank(s, e)
            i = e + 1
        elseif c == '"' or c == "'" then
            local j = s + 1
            while j <= n do
                local d = sub(src, j, j)
                if d == "\\" then
                    j = j + 2
                elseif d == c or d == "\n" then
                    break
                else
                    j = j + 1
                end
            end
            blank(s, j)
            i = j + 1
        else
            out[#out + 1] = c
            i = s + 1
        end
    end
    return concat(out)
end

-- Names under which anything goes (tables the plugin fills, or any header/variable).
local OPEN = { ["kong.ctx.shared"] = true, ["kong.ctx.plugin"] = true, ["ngx.ctx"] = true,
               ["ngx.header"] = true, ["ngx.arg"] = true }

-- nil when root.parts... is in the PDK, else the unsupported name ("kong.request.foo").
local function unsupported(rootname, root, parts)
    local t, path = root, rootname
    for _, part in ipairs(parts) do
        path = path .. "." .. part
        if OPEN[path] then return nil end
        if path == "ngx.var." .. part then
            return not kngx.var_supported(part) and path or nil
        end
        if type(t) ~= "table" then return nil end
        local v = rawget(t, part)
        if v == nil and path ~= "kong.ctx" and path ~= "ngx.var" then return path end
        t = v
    end
    return nil
end

local ROOTS = { kong = kong, ngx = ngx }

-- Every unsupported `kong.X...`/`ngx.X...` of one file: { "FILE:LINE: NAME ...", ... }.
function _M.check_source(src, file)
    local code = code_only(src)
    local bad, seen = {}, {}
    for rootname, root in pairs(ROOTS) do
        local pos = 1
        while true do
            local s, e = find(code, "%f[%w_]" .. rootname .. "%f[^%w_]", pos)
            if not s then break end
            pos = e + 1
            local before = code:sub(1, s - 1):match("([^%s])%s*$")
            if before ~= "." and before ~= ":" then
                local parts, at = {}, e + 1
                while true do
                    local _, pe, name = find(code, "^%s*[%.:]%s*([%a_][%w_]*)", at)
                    if not pe then break end
                    parts[#parts + 1] = name
                    at = pe + 1
                end
                local name = #parts > 0 and unsupported(rootname, root, parts)
                if name and not seen[name] then
                    seen[name] = true
                    local _, line = code:sub(1, s):gsub("\n", "")
                    bad[#bad + 1] = ("%s:%d: %s is not supported by sluice's Kong layer"):format(file, line + 1, name)
                end
            end
        end
    end
    table.sort(bad)
    return bad
end

-- ---------------------------------------------------------------- loading files

local function read(path)
    local f = io.open(path, "r")
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return s
end

-- The plugin paths the loader searched (set by load): kong.plugins.OTHER.X is looked up there.
local function find_module(paths, modname)
    local pname, rest = modname:match("^kong%.plugins%.([^.]+)%.(.+)$")
    if not pname then return nil end
    for _, dir in ipairs(paths) do
        local f = dir .. "/" .. pname .. "/" .. rest:gsub("%.", "/") .. ".lua"
        if read(f) then return f, pname end
    end
    return nil
end

local BUILTIN = {
    ["kong.db.schema.typedefs"] = kschema.typedefs,
    ["cjson"] = true, ["cjson.safe"] = true, ["table.new"] = true, ["table.clear"] = true,
    ["bit"] = true, ["ffi"] = true, ["string.buffer"] = true,
}

-- Loads one file of a Kong plugin in its environment: checked, then run. Returns what the
-- chunk returned, or raises "FILE:LINE: ..." (the loader reports it with the plugin).
local function run_file(state, file)
    local src = read(file)
    if not src then error(("cannot read %s"):format(file), 0) end
    local bad = _M.check_source(src, file)
    if #bad > 0 then error(concat(bad, "; "), 0) end
    -- ngx.exit(ngx.OK) ends a method without an answer: the plugin's methods then run
    -- under a pcall that catches it (phases below)
    if find(src, "ngx%s*%.%s*exit") then state.catch = true end
    local chunk, err = loadstring(src, "@" .. file)
    if not chunk then error(err, 0) end
    setfenv(chunk, state.env)
    return chunk()
end

local function make_env(state)
    local env = setmetatable({ kong = kong, ngx = ngx }, { __index = _G })
    env._G = env
    env.require = function(modname)
        local hit = state.modules[modname]
        if hit ~= nil then return hit end
        local b = BUILTIN[modname]
        if b == true then return require(modname) end
        if b then return b end
        local file = find_module(state.paths, modname)
        if file then
            local v = run_file(state, file)
            if v == nil then v = true end
            state.modules[modname] = v
            return v
        end
        if find(modname, "^kong[%.]") or find(modname, "^resty[%.]") or modname == "kong" then
            error(("module '%s' is not supported by sluice's Kong layer (docs/plugins.md, \"Kong plugins\")")
                  :format(modname), 2)
        end
        return require(modname)
    end
    state.env = env
    return env
end

-- ---------------------------------------------------------------- phases

local SUPPORTED = { rewrite = true, access = true, header_filter = true, body_filter = true, log = true,
                    init_worker = true }
local KONG_PHASES = { "init_worker", "certificate", "rewrite", "access", "response", "header_filter",
                      "body_filter", "log", "preread", "configure", "balancer", "ws_handshake",
                      "ws_client_frame", "ws_upstream_frame", "ws_close" }

-- rewrite and access: kong.response.exit ends the method by unwinding the request's
-- coroutine (sluice.base.UNWIND: no pcall, so the method's traces compile). A plugin whose
-- source calls ngx.exit runs them under a pcall that catches ngx.exit(ngx.OK), which ends
-- the method and lets the chain go on, and the answer's unwind. state.catch is read at each
-- call: a module required later, from a method, can still set it.
local function protected(state, h, fn)
    return function(conf)
        if not state.catch then return fn(h, conf) end
        local ok, err = pcall(fn, h, conf)
        if not ok and err ~= NGX_OK and err ~= EXIT then error(err, 0) end
    end
end

local function plain(h, fn)
    return function(conf) fn(h, conf) end
end

-- body_filter: the piece is ngx.arg[1] (eof ngx.arg[2]); what the method leaves in
-- ngx.arg[1] replaces it. A method that sets ngx.arg[2] on a piece before the last
-- (kong.response.set_raw_body does) ends the body there, as in nginx: the pieces after it
-- are dropped without calling the method again.
local function body(h, fn, name)
    local ENDED = "kong.body.ended." .. name -- in the request's ctx
    return function(conf, ctx, chunk, eof)
        if ctx[ENDED] then return "" end
        ARG[1], ARG[2] = chunk, eof
        fn(h, conf)
        local out, ended = ARG[1], ARG[2]
        ARG[1], ARG[2] = nil, nil
        if ended and not eof then ctx[ENDED] = true end
        if out == chunk then return nil end
        return out or ""
    end
end

-- The sluice plugin table for the Kong plugin in folder dir (named name), or nil, err.
-- paths: the plugin paths (for require("kong.plugins.OTHER.X")).
function _M.load(paths, dir, name)
    local state = { paths = paths, modules = {} }
    make_env(state)
    local hfile, sfile = dir .. "/handler.lua", dir .. "/schema.lua"
    if not read(sfile) then
        return nil, ("%s: a Kong plugin needs schema.lua next to handler.lua"):format(dir)
    end
    local ok, ks = pcall(run_file, state, sfile)
    if not ok then return nil, tostring(ks) end
    state.modules["kong.plugins." .. name .. ".schema"] = ks
    local conv, cerr = kschema.convert(ks)
    if not conv then return nil, ("%s: %s"):format(sfile, cerr) end
    local handler
    ok, handler = pcall(run_file, state, hfile)
    if not ok then return nil, tostring(handler) end
    if type(handler) ~= "table" then return nil, ("%s must return the handler table"):format(hfile) end
    state.modules["kong.plugins." .. name .. ".handler"] = handler

    local mod = { name = name, version = tostring(handler.VERSION or "0"), priority = handler.PRIORITY,
                  schema = conv.schema, check = conv.check, expand = conv.expand, kong = true }
    for _, ph in ipairs(KONG_PHASES) do
        local fn = handler[ph]
        if fn ~= nil then
            if type(fn) ~= "function" then return nil, ("%s: %s must be a function"):format(hfile, ph) end
            if not SUPPORTED[ph] then
                return nil, ("%s: phase '%s' is not supported by sluice's Kong layer (supported: rewrite, access, "
                             .. "header_filter, body_filter, log, init_worker)"):format(hfile, ph)
            end
        end
    end
    if handler.rewrite then mod.rewrite = protected(state, handler, handler.rewrite) end
    if handler.access then mod.access = protected(state, handler, handler.access) end
    if handler.header_filter then mod.header_filter = plain(handler, handler.header_filter) end
    if handler.body_filter then mod.body_filter = body(handler, handler.body_filter, name) end
    if handler.log then mod.log = plain(handler, handler.log) end
    if handler.init_worker then
        local done = false
        mod.prepare = function()
            if not done then
                done = true
                handler:init_worker()
            end
            return nil
        end
    end
    return mod
end

return _M
