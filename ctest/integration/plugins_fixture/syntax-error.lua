-- syntax-error: a plugin file that does not compile (used by test_plugin_check.py).
local M = { name = "syntax-error", version = "1.0", schema = {} }

function M.access(conf
    return nil
end

return M
