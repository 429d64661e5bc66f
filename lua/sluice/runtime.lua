-- sluice.runtime: one config generation inside a worker VM. Loads lua_routes' match
-- functions and builds every route's chain per phase (global plugins first, then the route's, exactly
-- as written), and returns the phase dispatcher C calls inside each request's
-- coroutine. A phase no plugin of a chain defines is absent from the route's
-- phase bits, so C never crosses into Lua for it. tcp listeners' `plugins:` chains run
-- only preread, through their own dispatcher (synchronous: C calls it with lua_pcall).
local loader = require("sluice.loader")
local router = require("sluice.router")
local base = require("sluice.base")

local bit = require("bit")
local bor, lshift = bit.bor, bit.lshift
local pcall, tostring, ipairs, pairs, error = pcall, tostring, ipairs, pairs, error

local _M = {}

local ffi = require("ffi")
ffi.cdef[[
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

-- chain: "global", "route" or "listener": where the instances run, prepare's second argument.
local function build(paths, src, first_pos, cache, chain)
    local out = {}
    for i, use in ipairs(src) do
        local conf, errs, mod = loader.prepare(paths, use.name, use.config_json, cache)
        if not conf then
            error(("plugin '%s': %s"):format(use.name, errs[1] and errs[1].msg or "invalid"))
        end
        -- one plugin instance: `ready` until its prepare (if any) has run in this generation
        out[#out + 1] = { mod = mod, conf = conf, name = use.name, pos = first_pos + i - 1,
                          ready = mod.prepare == nil, prepared = nil, chain = chain }
    end
    return out
end

-- A chain entry: { phase function, conf, plugin name, chain position, instance }.
local function entry(fn, p) return { fn, p.conf, p.name, p.pos, p } end

-- Runs the instance's prepare(conf) the first time one of its phases runs in this
-- generation (this VM: per worker); phases then receive its value. A raising prepare is
-- a plugin error (500 where the answer is still to come); the request's later phases skip
-- that plugin (p.ready stays false: the caller skips it) and the next request prepares
-- again. `serial` tells requests apart (their ctx tables are reused: lua_host.c's pool).
-- A prepare that waits raises (base.wait refuses), so two requests never prepare one
-- instance at once. Returns nil, or the error text.
local function prepare(p, serial)
    if p.failed_serial == serial then return nil end
    base.preparing = true
    local ok, v = pcall(p.mod.prepare, p.conf, p.chain)
    base.preparing = false
    if not ok then
        p.failed_serial = serial
        return "prepare: " .. tostring(v)
    end
    p.prepared, p.ready, p.failed_serial = v, true, nil
    return nil
end

function _M.new(gen)
    math.randomseed(tonumber(require("sluice").random_hex(7), 16))
    require("sluice.files").set_config_path(gen.config_path)
    require("sluice.files").set_texts(gen.files)
    require("sluice.consumers").load(gen.consumers)
    local cache = {}
    local global = build(gen.plugin_paths, gen.global, 0, cache, "global")
    local chains, masks = {}, {}
    for _, r in ipairs(gen.routes) do
        local list = {}
        for _, p in ipairs(global) do list[#list + 1] = p end
        for _, p in ipairs(build(gen.plugin_paths, r.plugins, #global, cache, "route")) do list[#list + 1] = p end
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

    -- lua_routes' match functions: the C router (core/config/router.c) matches everything
    -- else and asks this dispatcher only about a candidate route whose match is a function.
    local match_fns, call_match = router.functions(gen.routes), router.call
    local function route_dispatch(req, route)
        local yes = call_match(match_fns[route], req, route)
        return yes
    end
    local begin = base.begin
    -- each plugin's end is marked in C (duration metric, request debugging) when timed
    local timed = gen.timed
    local plugin_timed = C.sl_ffi_plugin_timed

    -- A plugin's phase function is called without a pcall of its own: its error unwinds
    -- the request's coroutine, and lua_host.c reports it against base.plugin/base.pos
    -- (set before each call, put back by base.wait after a yield). A pcall per call cost
    -- the chain its traces: a trace started in a plugin function ends returning into a
    -- pcall frame, which LuaJIT does not compile ("NYI: return to lower frame").

    -- body_filter: each plugin gets the piece the previous one returned, and returns a
    -- string to replace it (nil keeps it). The core sends the last output.
    local function body_filter(chain, req, ctx, serial)
        req = ffi_cast(REQ_PTR, req)
        C.sl_ffi_body_chunk(req, str_p, len_p, eof_p)
        local chunk, eof = ffi_string(str_p[0], len_p[0]), eof_p[0] ~= 0
        local changed = false
        for i = 1, #chain do
            local p = chain[i]
            base.plugin, base.pos = p[3], p[4]
            local u = p[5]
            local out = nil
            if not u.ready then
                local perr = prepare(u, serial)
                if perr then
                    base.pos = -1
                    return FAIL, p[4], p[3], perr
                end
            end
            if u.ready then
                local fn = p[1] -- named for lua_host.c's blame_plugin (a tail call's error)
                out = fn(p[2], ctx, chunk, eof, u.prepared)
                if timed then plugin_timed(req, p[4]) end
            end
            if out ~= nil then
                if type(out) ~= "string" then
                    base.pos = -1
                    return FAIL, p[4], p[3], "body_filter must return a string or nil, got " .. type(out)
                end
                chunk, changed = out, true
            end
        end
        base.pos = -1
        if changed and C.sl_ffi_body_set(req, chunk, #chunk, base.err_p) ~= C.SL_OK then
            return FAIL, chain[#chain][4], chain[#chain][3], ffi_string(base.err_p[0])
        end
        return NEXT
    end

    -- A phase's chain as a chain of closures, one per plugin, each calling the next: no
    -- loop in the per-request path. A loop over 1 to 3 plugins started traces of its own
    -- that LuaJIT abandons each time it leaves the loop ("leaving loop in root trace"),
    -- and while those took the turns the dispatcher ran in the interpreter (where casting
    -- the request to a pointer allocates); closures give function traces from the phase's
    -- entry to its return. Each returns as the dispatcher does: NEXT, DONE, or FAIL,
    -- position, plugin name, error text.
    local function finish_access(last)
        -- ctx.consumer, set by an auth plugin, goes upstream in the consumer header
        return function(req, ctx)
            base.pos = -1
            local consumer = ctx.consumer
            if consumer then
                consumer = tostring(consumer)
                if C.sl_ffi_req_set_consumer(ffi_cast(REQ_PTR, req), consumer, #consumer, base.err_p) ~= C.SL_OK then
                    return FAIL, last[4], last[3], "ctx.consumer: " .. ffi_string(base.err_p[0])
                end
            end
            return NEXT
        end
    end
    local function finish() base.pos = -1 return NEXT end

    local function link(e, nxt)
        local fn, conf, name, pos, u = e[1], e[2], e[3], e[4], e[5]
        return function(req, ctx, serial)
            base.plugin, base.pos = name, pos
            if not u.ready then
                local perr = prepare(u, serial)
                if perr then
                    base.pos = -1
                    return FAIL, pos, name, perr
                end
            end
            if u.ready then
                fn(conf, ctx, u.prepared)
                if timed then plugin_timed(nil, pos) end -- nil: the running request (lua_host.c)
            end
            if base.exited then
                base.pos = -1
                return DONE
            end
            return nxt(req, ctx, serial)
        end
    end

    -- { [route] = { [phase] = first link } } for every phase but body_filter
    local runners = {}
    for route, byphase in pairs(chains) do
        local rs = {}
        for phase, list in pairs(byphase) do
            if phase ~= BODY_FILTER then
                local f = phase == ACCESS and finish_access(list[#list]) or finish
                for i = #list, 1, -1 do f = link(list[i], f) end
                rs[phase] = f
            end
        end
        runners[route] = rs
    end

    -- Runs one phase of a route's chain. Returns NEXT (carry on), DONE (a plugin
    -- answered), or FAIL, chain position, plugin name, error text (sluice.h SL_CHAIN_*).
    -- req: the request's address as a number (base.req), cast where a call takes it (a
    -- pointer held in a local would be boxed whenever the trace leaves to the interpreter);
    -- serial: the request's number in this worker (for prepare).
    local function dispatch(phase, req, route, ctx, serial)
        begin(req, ctx, route, phase, serial)
        if phase == BODY_FILTER then return body_filter(chains[route][phase], req, ctx, serial) end
        return runners[route][phase](req, ctx, serial)
    end

    -- What C resumes: dispatch called from a Lua frame, not a tail call, so dispatch's
    -- traces end returning into this frame (a trace returning into the C frame below is
    -- not compiled). This function itself stays in the interpreter (spec/sluice/jit_spec.lua
    -- allows its one abort).
    local function phase_dispatch(phase, req, route, ctx, serial)
        local code, pos, name, msg = dispatch(phase, req, route, ctx, serial)
        return code, pos, name, msg
    end

    -- tcp listeners: their preread functions, in the order written (validated at config
    -- build: every plugin of such a chain defines preread).
    local lchains = {}
    for _, l in ipairs(gen.listeners or {}) do
        local list = {}
        for _, p in ipairs(build(gen.plugin_paths, l.plugins, 0, cache, "listener")) do
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
