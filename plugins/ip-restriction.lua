-- ip-restriction: allow or deny clients by CIDR. Deny wins; with an allow list, only
-- listed clients pass. The client address is the socket's peer.
local sluice = require("sluice")
local ffi = require("ffi")

ffi.cdef[[
int inet_pton(int af, const char *src, void *dst);
]]

local request, response = sluice.request, sluice.response
local C = ffi.C
local bit = require("bit")
local band, lshift = bit.band, bit.lshift
local buf = ffi.new("uint8_t[16]")

local M = {
    name = "ip-restriction",
    version = "1.0",
    schema = {
        allow = { type = "array", items = { type = "string" }, default = {} },
        deny = { type = "array", items = { type = "string" }, default = {} },
        status = { type = "integer", default = 403, min = 400, max = 599 },
    },
}

-- An address as a 16-byte string (IPv4 mapped into ::ffff:0:0/96), or nil.
local function parse_ip(s)
    if s:find(":", 1, true) then
        if C.inet_pton(10, s, buf) ~= 1 then return nil end
        return ffi.string(buf, 16)
    end
    if C.inet_pton(2, s, buf + 12) ~= 1 then return nil end
    ffi.fill(buf, 10, 0)
    buf[10], buf[11] = 0xff, 0xff
    return ffi.string(buf, 16)
end

local function parse_cidr(s)
    local addr, bits = s:match("^([^/]+)/(%d+)$")
    addr = addr or s
    local ip = parse_ip(addr)
    if not ip then return nil end
    local v4 = not addr:find(":", 1, true)
    local n = tonumber(bits) or (v4 and 32 or 128)
    if (v4 and n > 32) or n > 128 then return nil end
    return { ip = ip, bits = v4 and n + 96 or n }
end

local function matches(ip, c)
    local full = math.floor(c.bits / 8)
    if ip:sub(1, full) ~= c.ip:sub(1, full) then return false end
    local rest = c.bits % 8
    if rest == 0 then return true end
    local mask = band(lshift(0xff, 8 - rest), 0xff)
    return band(ip:byte(full + 1), mask) == band(c.ip:byte(full + 1), mask)
end

local function compile(list)
    local out = {}
    for i, s in ipairs(list) do out[i] = parse_cidr(s) end
    return out
end

function M.check(conf)
    for _, key in ipairs({ "allow", "deny" }) do
        for _, s in ipairs(conf[key]) do
            if not parse_cidr(s) then return nil, ("%s: '%s' is not an address or CIDR"):format(key, s) end
        end
    end
    return true
end

-- Compiled once per config generation (conf tables live as long as their generation).
local cache = setmetatable({}, { __mode = "k" })

function M.access(conf)
    local c = cache[conf]
    if not c then
        c = { allow = compile(conf.allow), deny = compile(conf.deny) }
        cache[conf] = c
    end
    local ip = parse_ip(request.get_client_ip())
    if not ip then return response.exit(conf.status, { error = "forbidden" }) end
    for _, cidr in ipairs(c.deny) do
        if matches(ip, cidr) then return response.exit(conf.status, { error = "forbidden" }) end
    end
    if #c.allow > 0 then
        for _, cidr in ipairs(c.allow) do
            if matches(ip, cidr) then return end
        end
        return response.exit(conf.status, { error = "forbidden" })
    end
end

return M
