-- sluice.runtime: one config generation inside a worker VM. Builds the router and
-- every route's chain per phase (global plugins first, then the route's, exactly
-- as written), and returns the phase dispatcher C calls inside each request's
-- coroutine. A phase no plugin of a chain defines is absent from the route's
-- phase bits, so C never crosses into Lua for it. tcp listeners' `plugins:` chains run
-- only preread, through their own dispatcher (synchronous: C calls it with lua_pcall).
local loader = require("sluice.loader")
local router = require("sluice.router")
local base = require("sluice.base")

local bit = require("bit")
local bor, lshift = bit.bor, bit.lshift
local pcall, tostring, ipairs, error = pcall, tostring, ipairs, error

local _M = {}

local ffi = require("ffi")
ffi.cdef[[
enum {
    SL_PHASE_REWRITE = 0,
    SL_PHASE_ACCESS = 1,
    SL_PHASE_HEADER_FILTER = 2,
    SL_PHASE_BODY_FILTER = 3,
    SL_PHASE_LOG = 4,
    SL_PHASE_PREREAD = 5,
    SL_PHASE_BALANCER = 6
};
enum { SL_CHAIN_NEXT = 0, SL_CHAIN_DONE = 1, SL_CHAIN_ERROR = 2 };
int sl_ffi_body_chunk(sl_req_t *r, const char **p, size_t *len, int *eof);
int sl_ffi_body_set(sl_req_t *r, const char *p, size_t len, const char **err);
int sl_ffi_req_set_consumer(sl_req_t *r, const char *name, size_t len, const char **err);
void sl_ffi_plugin_timed(sl_req_t *r, int pos);
]]

local C, ffi_string, ffi_cast, type = ffi.C, ffi.string, ffi.cast, type
local NEXT, DONE, FAIL = C.SL_CHAIN_NEXT, C.SL_CHAIN_DONE, C.SL_CHAIN_ERROR

local PHASES = loader.PHASES -- ids 0.. in this order (sluice.h SL_PHASE_*)
local BODY_FILTER, ACCESS = C.SL_PHASE_BODY_FILTER, C.SL_PHASE_ACCESS
assert(PHASES[BODY_FILTER + 1] == "body_filter" and PHASES[ACCESS + 1] == "access")

local REQ_PTR = ffi.typeof("sl_req_t *")
local SESS_PTR = ffi.typeof("sl_session_t *")
local str_p, len_p, eof_p = base.str_p, base.len_p, ffi.new("int[1]")

local function build(paths, src, first_pos, cache)
    local out = {}
    for i, use in ipairs(src) do
        local conf, errs, mod = loader.prepare(paths, use.name, use.config_json, cache)
        if not conf then
            error(("plugin '%s': %s"):format(use.name, errs[1] and errs[1].msg or "invalid"))
        end
        -- one plugin instance: `ready` until its prepare (if any) has run in this generation
        out[#out + 1] = { mod = mod, conf = conf, name = use.name, pos = first_pos + i - 1,
                          ready = mod.prepare == nil, prepared = nil }
    end
    return out
end

-- A chain entry: { phase function, conf, plugin name, chain position, instance }.
local function entry(fn, p) return { fn, p.conf, p.name, p.pos, p } end

-- Runs the instance's prepare(conf) the first time one of its phases runs in this
-- generation (this VM: per worker); phases then receive its value. A raising prepare is
-- a plugin error (500 where the answer is still to come); the request's later phases skip
-- that plugin (p.ready stays false: the caller skips it) and the next request prepares
-- again. A prepare that waits raises (base.wait refuses), so two requests never prepare
-- one instance at once. Returns nil, or the error text.
local function prepare(p, ctx)
    if p.failed_ctx == ctx then return nil end
    base.preparing = true
    local ok, v = pcall(p.mod.prepare, p.conf)
    base.preparing = false
    if not ok then
        p.failed_ctx = ctx
        return "prepare: " .. tostring(v)
    end
    p.prepared, p.ready, p.failed_ctx = v, true, nil
    return nil
end

function _M.new(gen)
    math.randomseed(tonumber(require("sluice").random_hex(7), 16))
    require("sluice.consumers").load(gen.consumers)
    local cache = {}
    local global = build(gen.plugin_paths, gen.global, 0, cache)
    local chains, masks = {}, {}
    for _, r in ipairs(gen.routes) do
        local list = {}
        for _, p in ipairs(global) do list[#list + 1] = p end
        for _, p in ipairs(build(gen.plugin_paths, r.plugins, #global, cache)) do list[#list + 1] = p end
        local byphase, mask = {}, 0
        for id, ph in ipairs(PHASES) do
            local l = {}
            for _, p in ipairs(list) do
                if p.mod[ph] then l[#l + 1] = entry(p.mod[ph], p) end
            end
            if #l > 0 then
                byphase[id - 1] = l
                mask = bor(mask, lshift(1, id - 1))
            end
        end
        chains[r.index] = byphase
        masks[r.index] = mask
    end

    local route_dispatch = router.new(gen.routes)
    local begin = base.begin
    -- each plugin's end is marked in C (duration metric, request debugging) when timed
    local timed = gen.timed
    local plugin_timed = C.sl_ffi_plugin_timed

    -- body_filter: each plugin gets the piece the previous one returned, and returns a
    -- string to replace it (nil keeps it). The core sends the last output.
    local function body_filter(chain, req, ctx)
        C.sl_ffi_body_chunk(req, str_p, len_p, eof_p)
        local chunk, eof = ffi_string(str_p[0], len_p[0]), eof_p[0] ~= 0
        local changed = false
        for i = 1, #chain do
            local p = chain[i]
            base.plugin = p[3]
            local u = p[5]
            local ok, out = true, nil
            if not u.ready then
                local perr = prepare(u, ctx)
                if perr then return FAIL, p[4], p[3], perr end
            end
            if u.ready then ok, out = pcall(p[1], p[2], ctx, chunk, eof, u.prepared) end
            if timed then plugin_timed(req, p[4]) end
            if not ok then return FAIL, p[4], p[3], tostring(out) end
            if out ~= nil then
                if type(out) ~= "string" then
                    return FAIL, p[4], p[3], "body_filter must return a string or nil, got " .. type(out)
                end
                chunk, changed = out, true
            end
        end
        if changed and C.sl_ffi_body_set(req, chunk, #chunk, base.err_p) ~= C.SL_OK then
            return FAIL, chain[#chain][4], chain[#chain][3], ffi_string(base.err_p[0])
        end
        return NEXT
    end

    -- Runs one phase of a route's chain. Returns NEXT (carry on), DONE (a plugin
    -- answered), or FAIL, chain position, plugin name, error text (sluice.h SL_CHAIN_*).
    local function phase_dispatch(phase, req, route, ctx)
        local chain = chains[route][phase]
        -- C hands the request over as a lightuserdata, which LuaJIT's trace recorder cannot
        -- pass to an FFI pointer argument (NYI: every accessor call would abort its trace);
        -- as a cdata pointer the accessors and the plugins calling them compile.
        req = ffi_cast(REQ_PTR, req)
        begin(req, ctx, route)
        if phase == BODY_FILTER then return body_filter(chain, req, ctx) end
        for i = 1, #chain do
            local p = chain[i]
            base.plugin = p[3]
            local u = p[5]
            if not u.ready then
                local perr = prepare(u, ctx)
                if perr then return FAIL, p[4], p[3], perr end
            end
            if u.ready then
                local ok, err = pcall(p[1], p[2], ctx, u.prepared)
                if timed then plugin_timed(req, p[4]) end
                if not ok then return FAIL, p[4], p[3], tostring(err) end
            end
            if base.exited then return DONE end
        end
        -- ctx.consumer, set by an auth plugin, goes upstream in the consumer header
        local consumer = phase == ACCESS and ctx.consumer
        if consumer then
            consumer = tostring(consumer)
            if C.sl_ffi_req_set_consumer(req, consumer, #consumer, base.err_p) ~= C.SL_OK then
                local last = chain[#chain]
                return FAIL, last[4], last[3], "ctx.consumer: " .. ffi_string(base.err_p[0])
            end
        end
        return NEXT
    end

    -- tcp listeners: their preread functions, in the order written (validated at config
    -- build: every plugin of such a chain defines preread).
    local lchains = {}
    for _, l in ipairs(gen.listeners or {}) do
        local list = {}
        for _, p in ipairs(build(gen.plugin_paths, l.plugins, 0, cache)) do
            if p.mod.preread then list[#list + 1] = entry(p.mod.preread, p) end
        end
        lchains[l.index] = list
    end

    -- Runs a tcp listener's preread chain for one session, to the end: a plugin that
    -- yields raises (preread cannot wait), which is an error like any other. Returns as
    -- phase_dispatch: NEXT, DONE (a plugin closed the session), or FAIL, position, plugin, text.
    local begin_session = base.begin_session
    local function preread_dispatch(sess, listener)
        local chain = lchains[listener]
        local ctx = {}
        begin_session(ffi_cast(SESS_PTR, sess), ctx, listener)
        for i = 1, #chain do
            local p = chain[i]
            base.plugin = p[3]
            local u = p[5]
            local ok, err = true, nil
            if not u.ready then
                err = prepare(u, ctx)
                ok = err == nil
            end
            if ok and u.ready then ok, err = pcall(p[1], p[2], ctx, u.prepared) end
            if not ok then
                base.sess = nil
                return FAIL, p[4], p[3], tostring(err)
            end
            if base.exited then
                base.sess = nil
                return DONE
            end
        end
        base.sess = nil
        return NEXT
    end

    return route_dispatch, phase_dispatch, masks, preread_dispatch
end

return _M
