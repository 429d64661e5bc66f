-- sluice.files: the files a plugin reads because its config names them (a JWKS, a key
-- list, a CA bundle). Reading them through here does two things io.open does not:
--   * a relative path resolves against the config file's folder, as certificates and
--     plugin_paths do, so a config runs the same whatever the working directory (under
--     systemd it is /);
--   * the path joins the config generation's files: the core hashes their content into the
--     generation, reports a changed one as "file:PATH" in a reload's `changed`, and the file
--     watch (watch: true) reloads when one changes;
--   * what read() returns is the generation's: the text the config's check read, handed to
--     every worker VM of that generation, so a plugin that prepares later (at its first
--     request) sees the same key set as the others, not a file rotated since. A rotation
--     takes effect with the generation it builds (a reload, or the watch), on every
--     worker at once.
-- Every plugin config key whose name ends in `_file` is such a path: the loader resolves
-- and notes it before the plugin's check and prepare see the config.
local _M = {}

local io_open = io.open

-- The config file's folder ("" for the working directory), set by the core before
-- plugins are checked or loaded.
local dir = ""
-- The paths noted since the last reset, in first-use order, each once; the texts read, by
-- resolved path (a worker VM: its generation's, given by the core).
local noted, seen, texts = {}, {}, {}

local function exists(path)
    local f = io_open(path, "rb")
    if f then f:close() end
    return f ~= nil
end

-- Called by the core (script/plugin.c, script/lua_host.c) with the config file's path.
function _M.set_config_path(path)
    dir = type(path) == "string" and path:sub(1, 1) ~= "<" and path:match("^(.*)/[^/]*$") or ""
    noted, seen, texts = {}, {}, {}
end

-- Called by the core in a worker VM: { [resolved path] = text } the generation's check read.
function _M.set_texts(t) texts = t or {} end

-- The path a config value names: absolute as written, else under the config's folder.
-- Like the core's certificate paths, a relative path that exists only under the working
-- directory is taken from there (configs that predate the rule keep working).
function _M.resolve(path)
    if type(path) ~= "string" or path == "" then error("a file path must be a non-empty string", 2) end
    if path:sub(1, 1) == "/" or dir == "" then return path end
    local p = dir .. "/" .. path
    if not exists(p) and exists(path) then return path end
    return p
end

-- Resolves path and adds it to the generation's files. Returns the resolved path.
function _M.path(path)
    local p = _M.resolve(path)
    if not seen[p] then
        seen[p] = true
        noted[#noted + 1] = p
    end
    return p
end

-- Reads a whole config file (resolved and noted as by path()): its text, or nil and an
-- error naming the file.
function _M.read(path)
    local p = _M.path(path)
    if texts[p] then return texts[p] end
    local f, err = io_open(p, "rb")
    if not f then return nil, err end
    local text = f:read("*a")
    f:close()
    if not text then return nil, p .. ": not a readable file" end
    texts[p] = text
    return text
end

-- The paths noted since set_config_path, for the core (a list of strings), and the text
-- read from each (nil for a path only resolved).
function _M.noted() return noted, texts end

-- Resolves and notes every string under a key ending in `_file` of a validated plugin
-- config (top level, and lists of such paths), in place, in key order (the noted list,
-- and so a reload's `changed`, comes out the same every time).
function _M.resolve_conf(conf)
    local keys = {}
    for k in pairs(conf) do
        if type(k) == "string" and k:sub(-5) == "_file" then keys[#keys + 1] = k end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
        local v = conf[k]
        if type(v) == "string" and v ~= "" then
            conf[k] = _M.path(v)
        elseif type(v) == "table" then
            for i, x in ipairs(v) do
                if type(x) == "string" and x ~= "" then v[i] = _M.path(x) end
            end
        end
    end
    return conf
end

return _M
