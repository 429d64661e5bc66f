-- The Lua side of the ABI agrees with core/sluice.h.
--
-- Every module of lua/sluice/ declares (ffi.cdef) the C functions and constants it calls,
-- copied from core/sluice.h. LuaJIT does not compare a declaration with the library: a
-- wrong one compiles and corrupts arguments at run time, and of two differing declarations
-- of one function it silently keeps the first. So this spec parses both sides and fails on:
--   * a function declared in Lua that sluice.h lacks, or declares differently;
--   * a constant (enum) declared in Lua with another value than sluice.h's (enum or #define);
--   * a struct declared in Lua with other fields than sluice.h's;
--   * a function or constant declared by two modules (each is declared once);
--   * a plugin in plugins/ that declares cdefs or reaches into sluice.base.
--
-- How declarations are compared: comments dropped, whitespace collapsed, no space around
-- punctuation, and parameter names removed (a parameter's last identifier, unless it is a
-- C type word or ends in _t: sluice.h names every parameter). What remains — return type,
-- name, parameter types in order — must be identical. Struct fields keep their names
-- (`int a, b;` reads as `int a; int b;`). Functions outside the ABI that Lua declares
-- for itself (libc's memcmp, memchr, inet_pton) are listed in FOREIGN; lua/sluice/test.lua
-- declares the in-process test harness (core/lua/testapi.c), not the ABI, and is skipped.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local test = require("sluice.test")

local ROOT = test.SOURCE_DIR
local FOREIGN = { memcmp = true, memchr = true, inet_pton = true }
local TYPE_WORDS = {
    void = true, char = true, short = true, int = true, long = true, float = true, double = true,
    signed = true, unsigned = true, const = true, volatile = true, struct = true, enum = true,
}

local function read(path)
    local f = assert(io.open(path, "r"))
    local s = f:read("*a")
    f:close()
    return s
end

local function squeeze(s)
    s = s:gsub("%s+", " ")
    s = s:gsub(" ?([%*%(%),%[%]{};=]) ?", "%1")
    return (s:gsub("^ ", ""):gsub(" $", ""))
end

-- "const char **err" -> "const char**"; "int" -> "int"; "sl_req_t *r" -> "sl_req_t*"
local function param_type(p)
    p = squeeze(p)
    local before, last = p:match("^(.-)([%a_][%w_]*)$")
    if last and before ~= "" and not TYPE_WORDS[last] and not last:match("_t$") then p = before end
    return squeeze(p)
end

local function eval(expr)
    return tonumber((squeeze(expr):gsub("[()]", "")))
end

-- Parses C declarations: returns { fn = { name = normalised }, const = { name = value },
-- struct = { name = normalised fields }, order = { names in the order found } }.
local function parse(text)
    local out = { fn = {}, const = {}, struct = {} }
    text = text:gsub("/%*.-%*/", " "):gsub("//[^\n]*", " ")
    for name, value in text:gmatch("\n%s*#%s*define%s+([%w_]+)%s+([^\n]+)") do
        local v = eval(value)
        if v then out.const[name] = v end
    end
    text = text:gsub("\n%s*#[^\n]*", "\n"):gsub('extern "C" {', ""):gsub("^%s*}", "")
    for stmt in text:gmatch("([^;{}]*%b{}[^;]*);") do
        local body, tail = stmt:match("^%s*enum%s*(%b{})%s*(.-)%s*$")
        if body then
            local n = -1
            for item in body:sub(2, -2):gmatch("[^,]+") do
                local k, v = item:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
                if k then n = assert(eval(v), "cannot read " .. item) else k = item:match("^%s*([%w_]+)%s*$"); n = n + 1 end
                if k then out.const[k] = n end
            end
        else
            local fields, tname = stmt:match("^%s*typedef%s+struct%s*(%b{})%s*([%w_]+)%s*$")
            if fields then
                local list = {}
                for f in fields:sub(2, -2):gmatch("[^;]+") do
                    f = squeeze(f)
                    if f ~= "" then
                        local ty, decls = f:match("^([%w_ ]-[%w_]+) ?(%**[%w_].*)$")
                        for d in decls:gmatch("[^,]+") do list[#list + 1] = ty .. " " .. d end
                    end
                end
                out.struct[tname] = table.concat(list, ";")
            end
        end
    end
    text = text:gsub("[^;{}]*%b{}[^;]*;", ";")
    for stmt in text:gmatch("[^;]+") do
        local ret, name, params = stmt:match("^%s*([%w_][%w_%s%*]-)%s*%**%s*([%w_]+)%s*(%b())%s*$")
        if name then
            ret = squeeze(stmt:match("^%s*(.-)" .. name .. "%s*%("))
            local ps = {}
            for p in params:sub(2, -2):gmatch("[^,]+") do ps[#ps + 1] = param_type(p) end
            out.fn[name] = ret .. " " .. name .. "(" .. table.concat(ps, ",") .. ")"
        end
    end
    return out
end

local function cdef_blocks(lua_text)
    local out = {} -- ffi.cdef[[...]], ffi.cdef([==[...]==]) and pcall(ffi.cdef, "...")
    for _, text in lua_text:gmatch("ffi%.cdef%s*%(?%s*%[(=*)%[(.-)%]%1%]") do out[#out + 1] = text end
    for text in lua_text:gmatch('ffi%.cdef%s*,%s*"(.-)"') do out[#out + 1] = text end
    return out
end

-- Checks Lua sources ({ {name, text}, ... }) against the header's text. Returns a list of
-- problems (empty when they agree).
local function check(sources, header_text)
    local h = parse(header_text)
    local problems, seen = {}, {}
    local function once(kind, name, where)
        local key = kind .. " " .. name
        if seen[key] and seen[key] ~= where then
            problems[#problems + 1] = ("%s: %s is also declared by %s (declare it once)"):format(where, key, seen[key])
        end
        seen[key] = where
    end
    for _, src in ipairs(sources) do
        for _, block in ipairs(cdef_blocks(src[2])) do
            local l = parse("\n" .. block)
            for name, decl in pairs(l.fn) do
                once("function", name, src[1])
                if not FOREIGN[name] then
                    if not h.fn[name] then
                        problems[#problems + 1] = ("%s: %s is not in sluice.h"):format(src[1], name)
                    elseif h.fn[name] ~= decl then
                        problems[#problems + 1] = ("%s: %s differs from sluice.h:\n  lua:       %s\n  sluice.h:  %s")
                            :format(src[1], name, decl, h.fn[name])
                    end
                end
            end
            for name, v in pairs(l.const) do
                once("constant", name, src[1])
                if h.const[name] ~= v then
                    problems[#problems + 1] = ("%s: %s = %s, sluice.h has %s"):format(src[1], name, v, tostring(h.const[name]))
                end
            end
            for name, fields in pairs(l.struct) do
                once("struct", name, src[1])
                if h.struct[name] ~= fields then
                    problems[#problems + 1] = ("%s: struct %s differs from sluice.h:\n  lua:       %s\n  sluice.h:  %s")
                        :format(src[1], name, fields, tostring(h.struct[name]))
                end
            end
        end
    end
    table.sort(problems)
    return problems, h
end

local function lua_sources()
    local out = {}
    local p = assert(io.popen("ls " .. ROOT .. "/lua/sluice/*.lua"))
    for path in p:lines() do
        local name = path:match("[^/]+$")
        if name ~= "test.lua" then out[#out + 1] = { "lua/sluice/" .. name, read(path) } end
    end
    p:close()
    return out
end

describe("the ABI", function()
    local header = read(ROOT .. "/core/sluice.h")

    it("is declared in lua/sluice exactly as core/sluice.h declares it", function()
        local sources = lua_sources()
        assert.is_true(#sources >= 10)
        local problems, h = check(sources, header)
        assert.same({}, problems)
        -- the parser read the header (not an empty table that agrees with everything)
        assert.is_truthy(h.fn.sl_ffi_req_get_header)
        assert.equal(-5, h.const.SL_DECLINED)
        assert.is_true(h.const.SL_ABI_VERSION >= 1) -- read as a number (bumped with the ABI)
        assert.equal(2, h.const.SL_BREAKER_HALF_OPEN)
        -- every function the Lua side declares is checked: count them
        local n = 0
        for _, src in ipairs(sources) do
            for _, b in ipairs(cdef_blocks(src[2])) do
                for _ in pairs(parse("\n" .. b).fn) do n = n + 1 end
            end
        end
        assert.is_true(n >= 70, "only " .. n .. " declarations found")
    end)

    it("catches a declaration that differs, a missing function, a wrong constant and a double one", function()
        local problems = check({
            { "bad.lua", [=[ffi.cdef[[
int sl_ffi_req_get_header(sl_req_t *r, const char *name, int name_len, const char **p, size_t *len);
int sl_ffi_req_get_nothing(sl_req_t *r);
double sl_ffi_now(void);
enum { SL_DECLINED = -4 };
typedef struct { const char *address; int weight; } sl_target_info_t;
]]]=] },
            { "twice.lua", [=[ffi.cdef[[ double sl_ffi_now(void); ]]]=] },
        }, header)
        assert.equal(5, #problems, table.concat(problems, "\n"))
        local all = table.concat(problems, "\n")
        assert.matches("bad.lua: sl_ffi_req_get_header differs from sluice.h", all, 1, true)
        assert.matches("bad.lua: sl_ffi_req_get_nothing is not in sluice.h", all, 1, true)
        assert.matches("bad.lua: SL_DECLINED = -4, sluice.h has -5", all, 1, true)
        assert.matches("bad.lua: struct sl_target_info_t differs", all, 1, true)
        assert.matches("twice.lua: function sl_ffi_now is also declared by bad.lua", all, 1, true)
        -- parameter names may differ; whitespace and line breaks do not matter
        assert.same({}, check({ { "ok.lua", [=[ffi.cdef[[
int  sl_ffi_req_get_header( sl_req_t* req, const char *n,
    size_t nl, const char ** out, size_t *outlen );
]]]=] } }, header))
    end)

    it("lists the phases in sluice.h's order", function()
        local h = parse(header)
        for i, name in ipairs(require("sluice.loader").PHASES) do
            assert.equal(i - 1, h.const["SL_PHASE_" .. name:upper()], name)
        end
    end)

    it("is reached by plugins only through the public sluice API", function()
        local p = assert(io.popen("ls " .. ROOT .. "/plugins/*.lua"))
        for path in p:lines() do
            local s = read(path)
            assert.is_nil(s:find("ffi.cdef", 1, true), path .. " declares C functions")
            assert.is_nil(s:find("sluice.base", 1, true), path .. " reaches into sluice.base")
            assert.is_nil(s:find("%f[%w_]C%.sl_"), path .. " calls the ABI directly")
        end
        p:close()
    end)
end)
