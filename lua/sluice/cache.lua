-- sluice.cache: the proxy-cache store (core/upstream/cache.c), one for all workers, as the
-- proxy-cache plugin uses it. A lookup that hits answers the request from C (the entry's
-- head and body are never made into Lua strings); one that misses arms the request so
-- that its response is stored when cacheable (decided in C at the upstream's head).
--
--   local cache = require("sluice.cache")
--   local pol = cache.policy{ ttl = 60, stale_if_error = 0, lock_timeout = 5,
--                             max_body = 1048576, cache_set_cookie = false,
--                             statuses = { 200, 301, 404 } }      -- once per config
--   local st = cache.lookup(key, pol)  -- "HIT" | "MISS" | "EXPIRED" | "BYPASS" (a method
--                                      -- not in pol's), waiting meanwhile; key nil: the
--                                      -- default "METHOD host/path?query", built in C
local ffi = require("ffi")
local base = require("sluice.base")

ffi.cdef[[
enum {
    SL_CACHE_MISS = 0,
    SL_CACHE_HIT = 1,
    SL_CACHE_EXPIRED = 2,
    SL_CACHE_BYPASS = 3,
    SL_CACHE_STALE = 4,
    SL_CACHE_WAIT = 5
};
typedef struct {
    double ttl;
    double stale_if_error;
    double lock_timeout;
    uint64_t max_body;
    int cache_set_cookie;
    char methods[64];
    int nstatuses;
    int statuses[16];
} sl_cache_policy_t;
int sl_ffi_cache_lookup(sl_req_t *r, const char *key, size_t len, const sl_cache_policy_t *pol,
                        int may_wait, const char **err);
int sl_ffi_cache_wait(sl_req_t *r, uint64_t ms, const char **err);
]]

local C = ffi.C
local ffi_string, error, type, min = ffi.string, error, type, math.min
local err_p = base.err_p
local HIT, WAIT, ERROR = C.SL_CACHE_HIT, C.SL_CACHE_WAIT, C.SL_ERROR
local NAMES = { [C.SL_CACHE_MISS] = "MISS", [HIT] = "HIT", [C.SL_CACHE_EXPIRED] = "EXPIRED",
                [C.SL_CACHE_BYPASS] = "BYPASS" }
local POLICY = ffi.typeof("sl_cache_policy_t")

local _M = {}

_M.MAX_STATUSES = 16

-- The C policy of a plugin config (once per config generation: keep it).
function _M.policy(t)
    local p = POLICY()
    p.ttl, p.stale_if_error, p.lock_timeout = t.ttl, t.stale_if_error or 0, t.lock_timeout or 5
    p.max_body = t.max_body
    p.cache_set_cookie = t.cache_set_cookie and 1 or 0
    local m = table.concat(t.methods or { "GET", "HEAD" }, " ") .. " "
    if #m >= 64 then error("methods: at most 63 characters in all", 2) end
    ffi.copy(p.methods, m)
    local s = t.statuses or {}
    if #s > _M.MAX_STATUSES then error("at most 16 statuses", 2) end
    p.nstatuses = #s
    for i = 1, #s do p.statuses[i - 1] = s[i] end
    return p
end

local function req()
    local r = base.reqp()
    if r == nil then error("no request is being served here (sluice API used outside a phase)", 3) end
    return r
end

local now -- sluice.time.now, bound on first use

-- The longest a waiter sleeps before it looks again without being rung: a safety net
-- only (a lock that expires instead of being released rings nothing, and a draining
-- worker has no doorbell); the doorbell is what wakes waiters.
local POLL_S = 1

-- Looks key up. "HIT": the request is answered from the store once the plugin returns.
-- "MISS" or "EXPIRED": it goes upstream, and its response is stored when cacheable. While
-- another request (on any worker) fetches the same key, the call waits until that one is
-- done (its worker rings this one's: no polling) up to pol.lock_timeout, then goes
-- upstream itself.
function _M.lookup(key, pol)
    local kl = 0
    if key ~= nil then
        if type(key) ~= "string" then error("key must be a string or nil", 2) end
        kl = #key
    end
    local r = req()
    local rc = C.sl_ffi_cache_lookup(r, key, kl, pol, 1, err_p)
    if rc == WAIT then
        if not now then now = require("sluice").time.now end
        local deadline = now() + pol.lock_timeout
        repeat
            local left = min(deadline - now(), POLL_S)
            if left > 0 then
                if C.sl_ffi_cache_wait(req(), left * 1000, err_p) ~= 0 then error(ffi_string(err_p[0]), 2) end
                base.wait()
            end
            rc = C.sl_ffi_cache_lookup(req(), key, kl, pol, now() < deadline and 1 or 0, err_p)
        until rc ~= WAIT
    end
    if rc == ERROR then error(ffi_string(err_p[0]), 2) end
    if rc == HIT then base.exited = true end
    return NAMES[rc]
end

return _M
