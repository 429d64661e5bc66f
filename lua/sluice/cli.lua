-- sluice.cli: the subcommands the sluice binary runs in Lua (core/server/cli_lua.c):
--   sluice test SPEC.yaml... [--junit FILE] [-v]   declarative smoke specs (sluice.smoke)
--   sluice spec [DIR] [BUSTED ARGS...]             a user's busted specs, paths set up
--   sluice new plugin NAME [--dir D]               a plugin, its busted spec, its smoke spec
local _M = {}

local libpath = require("sluice.libpath")

local fmt = string.format

local function sh_quote(s) return "'" .. tostring(s):gsub("'", [['"'"']]) .. "'" end

local function exists(path)
    local f = io.open(path, "rb")
    if f then f:close() return true end
    return false
end

local function is_dir(path) return os.execute("test -d " .. sh_quote(path)) == 0 end

local function exit_status(rc)
    -- LuaJIT's os.execute returns system()'s wait status
    if type(rc) ~= "number" then return rc and 0 or 1 end
    return rc > 255 and math.floor(rc / 256) or rc
end

-- libsluice.so for busted: $SLUICE_LIB, else beside the binary (a build tree), else the
-- lib folders of an installed prefix.
local function find_lib(exe)
    local env = os.getenv("SLUICE_LIB")
    if env and env ~= "" then return env end
    return libpath.find(libpath.dir(exe), "libsluice.so")
end

-- A sanitizer build of sluice: the runtimes it was linked with, which must come first in
-- the busted process too (LD_PRELOAD), or nil.
local function sanitizer_runtimes()
    local f = io.open("/proc/self/maps", "r")
    if not f then return nil end
    local found = {}
    for line in f:lines() do
        for i, name in ipairs({ "libasan", "libubsan" }) do   -- asan first: it must lead
            found[i] = found[i] or line:match("(/%S+/" .. name .. "%.so[%.%d]*)$")
        end
    end
    f:close()
    local libs = {}
    for i = 1, 2 do libs[#libs + 1] = found[i] end
    return #libs > 0 and table.concat(libs, " ") or nil
end

local function abspath(p)
    if p:sub(1, 1) == "/" then return p end
    local pwd = os.getenv("PWD") or io.popen("pwd"):read("*l")
    p = p:gsub("^%./", "")
    return p == "." and pwd or (pwd .. "/" .. p)
end

-- sluice spec [DIR] [busted args]: busted under LuaJIT with package.path holding sluice's
-- Lua modules and DIR, SLUICE_LIB naming the core, and the output busted prints.
function _M.spec(args, info)
    local dir, rest = nil, {}
    for _, a in ipairs(args) do
        if a == "-h" or a == "--help" then
            print("usage: sluice spec [DIR|FILE] [BUSTED ARGS...]\n" ..
                  "Runs the *_spec.lua files under DIR (default: ./spec, else .), or FILE, with busted, under\n" ..
                  "LuaJIT, with sluice's Lua modules and libsluice.so found for them.")
            return 0
        end
        if not dir and a:sub(1, 1) ~= "-" and (is_dir(a) or exists(a)) then dir = a else rest[#rest + 1] = a end
    end
    dir = dir or (is_dir("spec") and "spec" or ".")
    -- a spec file: its folder goes on the path
    local lib = find_lib(info.exe)
    if not lib then
        io.stderr:write("sluice spec: libsluice.so not found beside " .. info.exe ..
                        " nor in its prefix's lib folders; set SLUICE_LIB\n")
        return 2
    end
    if exit_status(os.execute("command -v busted >/dev/null 2>&1")) ~= 0 then
        io.stderr:write("sluice spec: busted not found (apt install lua-busted, or luarocks install busted)\n")
        return 2
    end
    local adir = abspath(is_dir(dir) and dir or (dir:match("^(.*)/[^/]*$") or "."))
    local luadir = info.lua_dir
    local lua_path = table.concat({ luadir .. "/?.lua", luadir .. "/?/init.lua", adir .. "/?.lua",
                                    adir .. "/?/init.lua" }, ";") .. ";" .. (os.getenv("LUA_PATH") or ";")
    local env = {
        "LUA_PATH=" .. sh_quote(lua_path),
        "SLUICE_LIB=" .. sh_quote(lib),
        "SLUICE_LUA_DIR=" .. sh_quote(luadir),
        "SLUICE_PLUGIN_DIR=" .. sh_quote(info.plugin_dir),
    }
    local san = sanitizer_runtimes()
    if san then
        -- LuaJIT and busted are not built for leak checking: leaks stay the C tests' to find
        env[#env + 1] = "LD_PRELOAD=" .. sh_quote(san)
        env[#env + 1] = "ASAN_OPTIONS=" .. sh_quote("detect_leaks=0")
    end
    local argv = { "busted", "--lua=luajit" }
    for _, a in ipairs(rest) do argv[#argv + 1] = sh_quote(a) end
    argv[#argv + 1] = sh_quote(dir)
    local cmd = "env " .. table.concat(env, " ") .. " " .. table.concat(argv, " ")
    if os.getenv("SLUICE_SPEC_SHOW") then io.stderr:write(cmd .. "\n") end
    return exit_status(os.execute(cmd))
end

-- ---------------------------------------------------------------------------------------
-- sluice new plugin NAME [--dir D]

local TEMPLATES = {}

TEMPLATES["%s.lua"] = [=[
-- %NAME%: adds a response header saying the request went through the gateway.
-- Replace the phases with your own; `sluice spec %DIR%` and `sluice test %DIR%/smoke.yaml`
-- keep telling you whether it works.
local sluice = require("sluice")

local M = {
    name = "%NAME%",
    version = "0.1",
    schema = {
        header = { type = "string", default = "X-%NAME%" },
        value = { type = "string", required = true },
    },
}

function M.check(conf)
    if conf.header:lower() == "content-length" then
        return nil, "the gateway owns Content-Length"
    end
    return true
end

function M.header_filter(conf, ctx)
    sluice.response.set_header(conf.header, conf.value)
end

return M
]=]

TEMPLATES["%s_spec.lua"] = [=[
-- Run with: sluice spec %DIR%
local test = require("sluice.test")

describe("%NAME%", function()
    local gw

    local function start(config)
        return test.start({
            plugin_paths = { "." },   -- relative to this file's folder: the plugin is beside it
            routes = { { name = "r", match = { paths = { "/" } },
                         plugins = { { name = "%NAME%", config = config }, { name = "echo" } } } },
        })
    end

    after_each(function()
        if gw then gw:stop() end
        gw = nil
    end)

    it("sets its header on the answer", function()
        gw = assert(start({ value = "yes" }))
        local res = assert(gw:request({ path = "/hello" }))
        assert.equal(200, res.status)
        assert.equal("yes", res.headers["x-%NAME%"])
    end)

    it("rejects a config without a value, naming the key", function()
        local ok, err = start({})
        assert.is_nil(ok)
        assert.matches("missing required key 'value'", err, 1, true)
    end)
end)
]=]

TEMPLATES["gw.yaml"] = [=[
# A gateway using the %NAME% plugin: sluice run -c %DIR%/gw.yaml
# (`sluice test` runs it with every listen port set to 0.)
plugin_paths: [.]
listeners:
  - { name: web, listen: "127.0.0.1:8080" }
upstreams:
  - name: backend
    targets: [{ address: "127.0.0.1:9000" }]
routes:
  - name: hello
    match: { paths: [/hello] }
    plugins:
      - { name: %NAME%, config: { value: "yes" } }
      - { name: echo }
  - name: api
    match: { paths: [/api] }
    upstream: backend
    plugins:
      - { name: %NAME%, config: { value: "api" } }
]=]

TEMPLATES["smoke.yaml"] = [=[
# Run with: sluice test %DIR%/smoke.yaml
name: %NAME%
config: gw.yaml
mocks:
  backend: { status: 200, json: { ok: true } }
cases:
  - name: the plugin's header is on the answer
    request: { path: /hello }
    expect:
      status: 200
      headers: { x-%NAME%: "yes" }
      body: { json: { path: /hello } }
  - name: proxied requests get it too
    request: { path: /api/items, query: { page: 2 } }
    expect:
      status: 200
      headers: { x-%NAME%: api }
      body: { json: { ok: true } }
      upstream: { mock: backend, path: /api/items, query: page=2, count: 1 }
]=]

TEMPLATES["README.md"] = [=[
# %NAME%

A sluice plugin made by `sluice new plugin %NAME%`.

| file | what |
|---|---|
| `%NAME%.lua` | the plugin: its schema and phases |
| `%NAME%_spec.lua` | busted spec against an in-process gateway: `sluice spec %DIR%` |
| `gw.yaml` | a config using it: `sluice run -c %DIR%/gw.yaml` |
| `smoke.yaml` | a smoke spec of that config: `sluice test %DIR%/smoke.yaml` |

See docs/testing.md of sluice for the spec format.
]=]

local function valid_name(n) return n:match("^[%a][%w_%-]*$") ~= nil end

function _M.new(args)
    local kind, name, dir = args[1], nil, nil
    local i = 2
    while i <= #args do
        if args[i] == "--dir" then
            dir = args[i + 1]
            i = i + 1
        elseif not name then
            name = args[i]
        else
            io.stderr:write("sluice new: unexpected argument '" .. args[i] .. "'\n")
            return 2
        end
        i = i + 1
    end
    if kind ~= "plugin" or not name or not dir and args[#args] == "--dir" then
        io.stderr:write("usage: sluice new plugin NAME [--dir D]\n")
        return 2
    end
    if not valid_name(name) then
        io.stderr:write("sluice new: a plugin name is a letter then letters, digits, '-' or '_'\n")
        return 2
    end
    if name == "echo" then -- gw.yaml answers with the built-in echo, which the plugin would shadow
        io.stderr:write("sluice new: 'echo' would shadow the built-in echo plugin that the generated gw.yaml "
            .. "answers with: choose another name\n")
        return 2
    end
    dir = (dir or name):gsub("/+$", "")
    if dir == "" then dir = "." end
    if exit_status(os.execute("mkdir -p " .. sh_quote(dir))) ~= 0 then
        io.stderr:write("sluice new: cannot create " .. dir .. "\n")
        return 1
    end
    local written = {}
    for pattern, body in pairs(TEMPLATES) do
        local file = dir .. "/" .. pattern:gsub("%%s", name)
        if exists(file) then
            io.stderr:write("sluice new: " .. file .. " exists; nothing written\n")
            return 1
        end
        written[#written + 1] = { file, (body:gsub("%%NAME%%", name):gsub("%%DIR%%", dir)) }
    end
    table.sort(written, function(a, b) return a[1] < b[1] end)
    for _, w in ipairs(written) do
        local f = assert(io.open(w[1], "wb"))
        f:write(w[2])
        f:close()
        print("wrote " .. w[1])
    end
    print(fmt("\nnext:\n  sluice spec %s\n  sluice test %s/smoke.yaml\n  sluice run -c %s/gw.yaml", dir, dir, dir))
    return 0
end

function _M.main(cmd, args, info)
    if cmd == "test" then return require("sluice.smoke").main(args) end
    if cmd == "spec" then return _M.spec(args, info) end
    if cmd == "new" then return _M.new(args) end
    io.stderr:write("sluice: unknown command '" .. cmd .. "'\n")
    return 2
end

return _M
