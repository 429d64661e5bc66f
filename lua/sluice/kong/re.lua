-- sluice.kong.re: ngx.re (match, find, gmatch, sub, gsub) on PCRE2, for Kong plugins.
--
-- The regex library is Debian's libpcre2-8-0 (grep's, so on every Debian 12 system),
-- reached through FFI: it is not part of the core's ABI. Compiled patterns are kept per
-- (pattern, options) for the VM's life (a config generation), as OpenResty's "o" option
-- does; the cache is emptied when it reaches MAX_CACHED patterns. Options: i (caseless),
-- m (multiline), s (dotall), x (extended), u/U (UTF-8), a (anchored), D (duplicate names),
-- j (PCRE2's JIT; used whenever it compiles), o (compile once: always true here).
-- Offsets follow ngx.re: 1-based, `to` inclusive; ctx.pos is 1-based.
local ffi = require("ffi")
local bit = require("bit")

local ffi_string, ffi_new, ffi_gc = ffi.string, ffi.new, ffi.gc
local type, tostring, error, tonumber = type, tostring, error, tonumber
local sub, concat, pairs = string.sub, table.concat, pairs
local bor = bit.bor

ffi.cdef[[
typedef struct pcre2_real_code_8 pcre2_code_8;
typedef struct pcre2_real_match_data_8 pcre2_match_data_8;
pcre2_code_8 *pcre2_compile_8(const unsigned char *pattern, size_t length, uint32_t options,
                              int *errorcode, size_t *erroroffset, void *ccontext);
void pcre2_code_free_8(pcre2_code_8 *code);
int pcre2_jit_compile_8(pcre2_code_8 *code, uint32_t options);
int pcre2_pattern_info_8(const pcre2_code_8 *code, uint32_t what, void *where);
pcre2_match_data_8 *pcre2_match_data_create_from_pattern_8(const pcre2_code_8 *code, void *gcontext);
void pcre2_match_data_free_8(pcre2_match_data_8 *md);
int pcre2_match_8(const pcre2_code_8 *code, const char *subject, size_t length, size_t startoffset,
                  uint32_t options, pcre2_match_data_8 *md, void *mcontext);
size_t *pcre2_get_ovector_pointer_8(pcre2_match_data_8 *md);
int pcre2_get_error_message_8(int errorcode, unsigned char *buffer, size_t bufflen);
]]

local ok_lib, pcre = pcall(ffi.load, "libpcre2-8.so.0")
if not ok_lib then pcre = nil end

local _M = {}

-- pcre2.h (10.42)
local CASELESS, MULTILINE, DOTALL, EXTENDED, UTF, ANCHORED, DUPNAMES =
    0x8, 0x400, 0x20, 0x80, 0x80000, 0x80000000, 0x40
local INFO_CAPTURECOUNT, INFO_NAMECOUNT, INFO_NAMEENTRYSIZE, INFO_NAMETABLE = 4, 17, 18, 19
local JIT_COMPLETE, ERROR_NOMATCH = 1, -1
local UNSET = ffi.cast("size_t", -1)

local FLAGS = { i = CASELESS, m = MULTILINE, s = DOTALL, x = EXTENDED, u = UTF, U = UTF,
                a = ANCHORED, D = DUPNAMES, j = 0, o = 0, J = 0 }

local errcode, erroff = ffi_new("int[1]"), ffi_new("size_t[1]")
local u32 = ffi_new("uint32_t[1]")
local nametable = ffi_new("unsigned char *[1]")
local msgbuf = ffi_new("unsigned char[256]")

local cache, cached = {}, 0
local MAX_CACHED = 1024

-- { code, md, ncap, names = { [group] = name } } for (regex, options), or nil, err.
local function compile(regex, options)
    if pcre == nil then return nil, "ngx.re needs libpcre2-8.so.0 (Debian: libpcre2-8-0)" end
    if type(regex) ~= "string" then error("regex must be a string", 3) end
    options = options or ""
    local key = options .. "\0" .. regex
    local hit = cache[key]
    if hit then return hit end
    local flags = 0
    for i = 1, #options do
        local f = FLAGS[sub(options, i, i)]
        if not f then return nil, ("unknown ngx.re option '%s'"):format(sub(options, i, i)) end
        flags = bor(flags, f)
    end
    local code = pcre.pcre2_compile_8(regex, #regex, flags, errcode, erroff, nil)
    if code == nil then
        pcre.pcre2_get_error_message_8(errcode[0], msgbuf, 256)
        return nil, ("failed to compile regex \"%s\": %s at offset %d"):format(regex, ffi_string(msgbuf),
                                                                           tonumber(erroff[0]))
    end
    code = ffi_gc(code, pcre.pcre2_code_free_8)
    pcre.pcre2_jit_compile_8(code, JIT_COMPLETE) -- an interpreter fallback when it fails
    pcre.pcre2_pattern_info_8(code, INFO_CAPTURECOUNT, u32)
    local ncap = tonumber(u32[0])
    local names
    pcre.pcre2_pattern_info_8(code, INFO_NAMECOUNT, u32)
    local nnames = tonumber(u32[0])
    if nnames > 0 then
        names = {}
        pcre.pcre2_pattern_info_8(code, INFO_NAMEENTRYSIZE, u32)
        local size = tonumber(u32[0])
        pcre.pcre2_pattern_info_8(code, INFO_NAMETABLE, nametable)
        local t = nametable[0]
        for i = 0, nnames - 1 do
            local e = t + i * size
            names[e[0] * 256 + e[1]] = ffi_string(e + 2)
        end
    end
    local md = ffi_gc(pcre.pcre2_match_data_create_from_pattern_8(code, nil), pcre.pcre2_match_data_free_8)
    local c = { code = code, md = md, ncap = ncap, names = names }
    if cached >= MAX_CACHED then cache, cached = {}, 0 end
    cache[key], cached = c, cached + 1
    return c
end

-- Runs c on subject from 0-based offset start: the ovector, or nil (no match), or nil, err.
local function exec(c, subject, start)
    if start > #subject then return nil end
    local rc = pcre.pcre2_match_8(c.code, subject, #subject, start, 0, c.md, nil)
    if rc == ERROR_NOMATCH then return nil end
    if rc < 0 then
        pcre.pcre2_get_error_message_8(rc, msgbuf, 256)
        return nil, ffi_string(msgbuf)
    end
    return pcre.pcre2_get_ovector_pointer_8(c.md)
end

-- The captures table ngx.re.match returns: [0] the whole match, [n] the groups (false
-- when a group did not take part), named groups by name too.
local function captures(c, subject, ov, res)
    local m = res or {}
    for i = 0, c.ncap do
        local s, e = ov[2 * i], ov[2 * i + 1]
        if s == UNSET then
            m[i] = false
        else
            m[i] = sub(subject, tonumber(s) + 1, tonumber(e))
        end
    end
    if c.names then
        for g, name in pairs(c.names) do m[name] = m[g] end
    end
    return m
end

local function start_of(ctx)
    if ctx and ctx.pos then return ctx.pos - 1 end
    return 0
end

function _M.match(subject, regex, options, ctx, res)
    subject = tostring(subject)
    local c, err = compile(regex, options)
    if not c then return nil, err end
    local ov, merr = exec(c, subject, start_of(ctx))
    if not ov then return nil, merr end
    if ctx then ctx.pos = tonumber(ov[1]) + 1 end
    return captures(c, subject, ov, res)
end

-- from, to (1-based, inclusive) of the whole match, or of capture nth.
function _M.find(subject, regex, options, ctx, nth)
    subject = tostring(subject)
    local c, err = compile(regex, options)
    if not c then return nil, nil, err end
    local ov, merr = exec(c, subject, start_of(ctx))
    if not ov then return nil, nil, merr end
    if ctx then ctx.pos = tonumber(ov[1]) + 1 end
    nth = nth or 0
    if nth > c.ncap or ov[2 * nth] == UNSET then return nil end
    return tonumber(ov[2 * nth]) + 1, tonumber(ov[2 * nth + 1])
end

-- An iterator over every match's captures.
function _M.gmatch(subject, regex, options)
    subject = tostring(subject)
    local c, err = compile(regex, options)
    if not c then return nil, err end
    local pos, done = 0, false
    return function()
        if done then return nil end
        local ov, merr = exec(c, subject, pos)
        if not ov then
            done = true
            return nil, merr
        end
        local s, e = tonumber(ov[0]), tonumber(ov[1])
        pos = e == s and e + 1 or e -- an empty match moves on one byte
        return captures(c, subject, ov)
    end
end

-- $0, $1, ${name}, $$ in a replacement template.
local function expand(tpl, m)
    return (tpl:gsub("%$(%b{})", function(n) return tostring(m[tonumber(n:sub(2, -2)) or n:sub(2, -2)] or "") end)
               :gsub("%$(%d)", function(n) return tostring(m[tonumber(n)] or "") end)
               :gsub("%$%$", "$"))
end

local function replace(subject, regex, repl, options, all)
    subject = tostring(subject)
    local c, err = compile(regex, options)
    if not c then return nil, nil, err end
    local rt = type(repl)
    if rt ~= "string" and rt ~= "function" then error("replace must be a string or a function", 3) end
    local out, n, pos, last = {}, 0, 0, 0
    while pos <= #subject do
        local ov, merr = exec(c, subject, pos)
        if not ov then
            if merr then return nil, nil, merr end
            break
        end
        local s, e = tonumber(ov[0]), tonumber(ov[1])
        local m = captures(c, subject, ov)
        out[#out + 1] = sub(subject, last + 1, s)
        out[#out + 1] = rt == "string" and expand(repl, m) or tostring(repl(m))
        n, last = n + 1, e
        if not all then break end
        if e == s then
            if e < #subject then out[#out + 1] = sub(subject, e + 1, e + 1) end
            last = e + 1
        end
        pos = e == s and e + 1 or e
    end
    out[#out + 1] = sub(subject, last + 1)
    return concat(out), n
end

function _M.sub(subject, regex, repl, options) return replace(subject, regex, repl, options, false) end
function _M.gsub(subject, regex, repl, options) return replace(subject, regex, repl, options, true) end

-- Whether the binding loaded (ngx.re raises a clear error otherwise).
_M.available = pcre ~= nil

return _M
