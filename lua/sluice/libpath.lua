-- sluice.libpath: where sluice's shared libraries are, for the Lua that loads them:
-- libsluice.so (the core, for busted: sluice.cli) and libsluice_test.so (the test harness:
-- sluice.test, under busted or inside `sluice test`).
local _M = {}

local function exists(path)
    local f = io.open(path, "rb")
    if f then f:close() return true end
    return false
end

-- The folder of a file's path ("." for a bare name).
function _M.dir(path) return path:match("^(.*)/[^/]*$") or "." end

-- NAME beside `dir` (a build tree, or the folder of a library already found), else in the
-- lib folders of the prefix `dir`'s bin folder belongs to (an install); nil when in none.
function _M.find(dir, name)
    local prefix = dir:match("^(.*)/bin$") or dir .. "/.."
    for _, p in ipairs({ dir .. "/" .. name, prefix .. "/lib/" .. name,
                         prefix .. "/lib/x86_64-linux-gnu/" .. name,
                         prefix .. "/lib/aarch64-linux-gnu/" .. name, prefix .. "/lib64/" .. name,
                         prefix .. "/lib/sluice/" .. name }) do
        if exists(p) then return p end
    end
end

return _M
