-- sluice.cidr: IP addresses and CIDR blocks, for plugins that decide by client address
-- (ip-restriction, rate-limit's trusted_proxies). Addresses are compared as 16-byte
-- strings, IPv4 mapped into ::ffff:0:0/96, so one list may mix both families.
local ffi = require("ffi")
local bit = require("bit")

pcall(ffi.cdef, "int inet_pton(int af, const char *src, void *dst);")
require("sluice.base") -- declares memcmp

local C = ffi.C
local band, lshift = bit.band, bit.lshift
local floor, tonumber, ipairs = math.floor, tonumber, ipairs
local buf = ffi.new("uint8_t[16]")

local _M = {}

-- An address as a 16-byte string, or nil.
function _M.parse_ip(s)
    if type(s) ~= "string" then return nil end
    if s:find(":", 1, true) then
        if C.inet_pton(10, s, buf) ~= 1 then return nil end
        return ffi.string(buf, 16)
    end
    if C.inet_pton(2, s, buf + 12) ~= 1 then return nil end
    ffi.fill(buf, 10, 0)
    buf[10], buf[11] = 0xff, 0xff
    return ffi.string(buf, 16)
end

-- "10.0.0.0/8", "::1", "2001:db8::/32" -> { ip, bits } (bits over the 128-bit form), or nil.
function _M.parse(s)
    local addr, bits = s:match("^([^/]+)/(%d+)$")
    addr = addr or s
    local ip = _M.parse_ip(addr)
    if not ip then return nil end
    local v4 = not addr:find(":", 1, true)
    local n = tonumber(bits) or (v4 and 32 or 128)
    if (v4 and n > 32) or n > 128 then return nil end
    return { ip = ip, bits = v4 and n + 96 or n }
end

-- Parses a list; returns the compiled list, or nil and the first bad entry.
function _M.compile(list)
    local out = {}
    for i, s in ipairs(list) do
        out[i] = _M.parse(s)
        if not out[i] then return nil, s end
    end
    return out
end

-- Does 16-byte address ip lie in block c?
function _M.matches(ip, c)
    local full = floor(c.bits / 8)
    if ip:sub(1, full) ~= c.ip:sub(1, full) then return false end
    local rest = c.bits % 8
    if rest == 0 then return true end
    local mask = band(lshift(0xff, 8 - rest), 0xff)
    return band(ip:byte(full + 1), mask) == band(c.ip:byte(full + 1), mask)
end

-- The per-request form (ip-restriction): an address parsed into a scratch buffer instead
-- of a 16-byte string, and lists compiled into byte arrays compared with memcmp. parse_ip's
-- ffi.string and matches' substrings hashed and interned three strings per block per
-- request.
local buf4 = ffi.new("uint8_t[16]") -- ::ffff:0:0/96 + the IPv4 address
local buf6 = ffi.new("uint8_t[16]")
buf4[10], buf4[11] = 0xff, 0xff

-- Parses address string s into a scratch buffer (valid until the next call): the buffer, or
-- nil when s is not an address.
function _M.parse_ip_buf(s)
    if type(s) ~= "string" then return nil end
    if s:find(":", 1, true) then
        if C.inet_pton(10, s, buf6) ~= 1 then return nil end
        return buf6
    end
    if C.inet_pton(2, s, buf4 + 12) ~= 1 then return nil end
    return buf4
end

-- A compiled list (compile's) as a function of a parse_ip_buf buffer: true when the address
-- lies in one of its blocks.
function _M.matcher(list)
    local n = #list
    if n == 0 then return function() return false end end
    local nets = ffi.new("uint8_t[?]", n * 16)
    local full, mask = {}, {}
    for i, c in ipairs(list) do
        ffi.copy(nets + (i - 1) * 16, c.ip, 16)
        full[i] = floor(c.bits / 8)
        local rest = c.bits % 8
        mask[i] = rest == 0 and 0 or band(lshift(0xff, 8 - rest), 0xff)
    end
    return function(ip)
        for i = 1, n do
            local net, k, m = nets + (i - 1) * 16, full[i], mask[i]
            if (k == 0 or C.memcmp(ip, net, k) == 0) and (m == 0 or band(ip[k], m) == band(net[k], m)) then
                return true
            end
        end
        return false
    end
end

-- Does ip lie in any block of the compiled list?
function _M.any(ip, list)
    for i = 1, #list do
        if _M.matches(ip, list[i]) then return true end
    end
    return false
end

return _M
