-- real-ip: the client address behind trusted proxies, for everything after it. From a
-- peer in `trusted`, the address comes from a header (X-Forwarded-For, X-Real-IP, ...):
-- with `recursive`, the rightmost entry that is not itself trusted (nginx's
-- real_ip_recursive on), else the rightmost entry. It is then what request.get_client_ip,
-- sluice.client.get_ip, ip-restriction, rate-limit `key: ip`, access-log and
-- consistent-hash by ip see. Runs in rewrite, so access-phase plugins see it.
local sluice = require("sluice")
local cidr = require("sluice.cidr")

local request = sluice.request
local parse_ip, any = cidr.parse_ip, cidr.any
local find, sub = string.find, string.sub

local M = {
    name = "real-ip",
    version = "1.0",
    schema = {
        from = { type = "string", default = "header:X-Forwarded-For" },
        trusted = { type = "array", items = { type = "string" }, required = true, min = 1 },
        recursive = { type = "boolean", default = true },
    },
}

function M.check(conf)
    if conf.from ~= "proxy_protocol" and not conf.from:match("^header:[!#$%%&'*+.^_`|~0-9A-Za-z-]+$") then
        return nil, ("from: '%s' is not header:NAME or proxy_protocol"):format(conf.from)
    end
    for i, s in ipairs(conf.trusted) do
        if not cidr.parse(s) then return nil, ("trusted.%d: '%s' is not an address or CIDR"):format(i, s) end
    end
    return true
end

function M.prepare(conf)
    local header = conf.from:match("^header:(.+)$")
    return { trusted = cidr.compile(conf.trusted), header = header and header:lower() }
end

-- An entry as an address: "1.2.3.4", "1.2.3.4:80", "::1", "[::1]:80"; spaces trimmed.
-- Returns the address text, or nil.
local function entry_ip(e)
    e = e:match("^%s*(.-)%s*$")
    local v6 = e:match("^%[(.-)%]") or e
    if parse_ip(v6) then return v6 end
    local v4 = e:match("^(%d+%.%d+%.%d+%.%d+):%d+$")
    if v4 and parse_ip(v4) then return v4 end
    return nil
end

-- The address the header names, walking its comma-separated entries from the right. An
-- empty entry ("a, ", "a,,b") is skipped, as nginx's realip module skips it.
local function from_header(value, c, recursive)
    local best
    local stop = #value
    while stop > 0 do
        local start = stop
        while start > 0 and sub(value, start, start) ~= "," do start = start - 1 end
        local e = sub(value, start + 1, stop)
        if find(e, "%S") then
            local ip = entry_ip(e)
            if not ip then return best end -- a malformed entry: nothing left of it is believed
            best = ip
            if not recursive or not any(parse_ip(ip), c.trusted) then return best end
        end
        stop = start - 1
    end
    return best
end

function M.rewrite(conf, _, c)
    -- with from: proxy_protocol the listener already put the PROXY header's source in
    -- place (accepted only from its own trusted peers): nothing is left to do
    if not c.header then return end
    local peer = parse_ip(request.get_client_ip())
    if not peer or not any(peer, c.trusted) then return end
    -- every field of that name, joined in order: a proxy that adds its own field after a
    -- client's must be read from the last one, not the first
    local value = request.get_headers()[c.header]
    if not value or not find(value, "%S") then return end
    local ip = from_header(value, c, conf.recursive)
    if ip then request.set_client_ip(ip) end
end

return M
