-- sluice.smoke: `sluice test SPEC.yaml...`, declarative smoke specs run in-process.
--
-- A spec names a config (a file or an inline mapping), mock upstreams the config reaches
-- as "mock:NAME", services it starts (a redis-server), and cases: a request and what to
-- expect of the response and of what a mock received. The format is in docs/testing.md.
-- Each spec gets its own gateway (sluice.test: listeners on port 0, threads of this
-- process), its mocks and services, all stopped after its last case.
local ffi = require("ffi")
local cjson = require("cjson.safe")
local test = require("sluice.test")

local _M = {}


local lib = test.lib
local C = ffi.C
local null = cjson.null
local fmt = string.format

local errbuf = ffi.new("char[16384]")
local posp = ffi.new("char *[1]")
local LAST_MAX = 1024 * 1024
local lastbuf = ffi.new("char[?]", LAST_MAX)
local RECV_MAX = 4 * 1024 * 1024
local recvbuf
local closedp = ffi.new("int[1]")

-- ---------------------------------------------------------------------------------------
-- Reading a spec: YAML through the config's own parser, positions kept for errors.

local function decode_yaml(path, text)
    local j = lib.sl_ffi_yaml_decode(path, text, #text, posp, errbuf, ffi.sizeof(errbuf))
    if j == nil then return nil, (ffi.string(errbuf):gsub("\n$", "")) end
    local json = ffi.string(j)
    C.free(j)
    local pos = ffi.string(posp[0])
    C.free(posp[0])
    local doc = cjson.decode(json)
    return doc, cjson.decode(pos) or {}
end
_M.decode_yaml = decode_yaml

local SpecError = {}

-- Raises "FILE:LINE:COL: msg" for key path `kpath` ("cases.2.expect"); at the value when
-- at_value, else at the key.
local function spec_error(spec, kpath, at_value, msg, ...)
    local p = spec.pos[kpath]
    local line, col = 1, 1
    if p then
        line, col = p[at_value and 3 or 1], p[at_value and 4 or 2]
    end
    error(setmetatable({ text = fmt("%s:%d:%d: %s", spec.path, line, col, fmt(msg, ...)) }, SpecError), 0)
end

local function check_keys(spec, kpath, t, allowed, what)
    if type(t) ~= "table" or (t[1] ~= nil) then
        spec_error(spec, kpath, true, "%s must be a mapping", what)
    end
    for k in pairs(t) do
        if not allowed[k] then
            local names = {}
            for n in pairs(allowed) do names[#names + 1] = n end
            table.sort(names)
            spec_error(spec, kpath .. "." .. k, false, "unknown key '%s' in %s (expected one of: %s)",
                       k, what, table.concat(names, ", "))
        end
    end
end

local function set(list)
    local s = {}
    for _, k in ipairs(list) do s[k] = true end
    return s
end

local SPEC_KEYS = set { "name", "config", "env", "mocks", "services", "cases" }
local MOCK_KEYS = set { "status", "headers", "body", "json", "echo", "delay", "fault", "times",
                        "websocket", "tcp" }
local CASE_KEYS = set { "name", "request", "tcp", "repeat", "expect", "mocks", "wait", "skip" }
local REQ_KEYS = set { "method", "path", "query", "headers", "body", "json", "listener", "host",
                       "http2", "send", "timeout" }
local TCP_KEYS = set { "listener", "send", "timeout" }
local EXPECT_KEYS = set { "status", "headers", "body", "upstream", "received", "closed" }
local UP_KEYS = set { "mock", "method", "path", "query", "headers", "body", "count" }
local SERVICE_KEYS = set { "command", "at" }
local FAULTS = set { "reset", "hang", "close", "close-mid-body" }

-- "500ms", "1s", "2m" or a number of seconds, as ms.
local function duration_ms(spec, kpath, v)
    if type(v) == "number" then return math.floor(v * 1000) end
    if type(v) == "string" then
        local n, unit = v:match("^(%d+%.?%d*)(%a+)$")
        local mult = ({ ms = 1, s = 1000, m = 60000 })[unit or ""]
        if n and mult then return math.floor(tonumber(n) * mult) end
    end
    spec_error(spec, kpath, true, "expected a duration such as 500ms or 2s, got %s", tostring(v))
end

local function validate(spec)
    local d = spec.doc
    check_keys(spec, "", d, SPEC_KEYS, "the spec")
    if d.config == nil then spec_error(spec, "", true, "'config' is required (a file or a mapping)") end
    if type(d.config) ~= "string" and type(d.config) ~= "table" then
        spec_error(spec, "config", true, "'config' must be a file name or a mapping")
    end
    for name, m in pairs(d.mocks or {}) do
        local kp = "mocks." .. name
        check_keys(spec, kp, m, MOCK_KEYS, "mock '" .. name .. "'")
        if m.fault and not FAULTS[m.fault] then
            spec_error(spec, kp .. ".fault", true, "fault must be one of reset, hang, close, close-mid-body")
        end
        if m.delay then m.delay_ms = duration_ms(spec, kp .. ".delay", m.delay) end
    end
    for name, s in pairs(d.services or {}) do
        check_keys(spec, "services." .. name, s, SERVICE_KEYS, "service '" .. name .. "'")
        if type(s.command) ~= "string" then
            spec_error(spec, "services." .. name, true, "service '%s' needs a command", name)
        end
    end
    if type(d.cases) ~= "table" or d.cases[1] == nil then
        spec_error(spec, d.cases == nil and "" or "cases", true, "'cases' must be a non-empty list")
    end
    for i, c in ipairs(d.cases) do
        local kp = "cases." .. i
        check_keys(spec, kp, c, CASE_KEYS, "case " .. i)
        if c.request == nil and c.tcp == nil then
            spec_error(spec, kp, true, "case %d needs a 'request' or a 'tcp' exchange", i)
        end
        if c.request ~= nil then check_keys(spec, kp .. ".request", c.request, REQ_KEYS, "request") end
        if c.tcp ~= nil then check_keys(spec, kp .. ".tcp", c.tcp, TCP_KEYS, "tcp") end
        if c.wait ~= nil then c.wait_ms = duration_ms(spec, kp .. ".wait", c.wait) end
        if c["repeat"] ~= nil and (type(c["repeat"]) ~= "number" or c["repeat"] < 1) then
            spec_error(spec, kp .. ".repeat", true, "repeat must be a positive integer")
        end
        check_keys(spec, kp .. ".expect", c.expect or {}, EXPECT_KEYS, "expect")
        -- a status is a number ("201" quoted too), or a list of them for repeat
        local st = c.expect and c.expect.status
        if st ~= nil then
            local list = type(st) == "table" and st or { st }
            for j, v in ipairs(list) do
                local n = tonumber(v)
                if not n or n % 1 ~= 0 then
                    spec_error(spec, kp .. ".expect.status", true,
                               "expect.status must be a number such as 200 (or a list of them with repeat), got %s",
                               tostring(v))
                end
                list[j] = n
            end
            if type(st) ~= "table" then c.expect.status = list[1] end
        end
        local up = c.expect and c.expect.upstream
        if up ~= nil then
            check_keys(spec, kp .. ".expect.upstream", up, UP_KEYS, "expect.upstream")
            if not (d.mocks or {})[up.mock or ""] then
                spec_error(spec, kp .. ".expect.upstream", true, "expect.upstream.mock must name a mock of this spec")
            end
            if up.count ~= nil then
                local n = tonumber(up.count)
                if not n or n % 1 ~= 0 or n < 0 then
                    spec_error(spec, kp .. ".expect.upstream.count", true,
                               "expect.upstream.count must be a number of requests, got %s", tostring(up.count))
                end
                up.count = n
            end
        end
        for name, m in pairs(c.mocks or {}) do
            if not (d.mocks or {})[name] then
                spec_error(spec, kp .. ".mocks." .. name, false, "no mock '%s' in this spec's mocks", name)
            end
            check_keys(spec, kp .. ".mocks." .. name, m, MOCK_KEYS, "mock '" .. name .. "'")
            if m.delay then m.delay_ms = duration_ms(spec, kp .. ".mocks." .. name .. ".delay", m.delay) end
        end
    end
end

-- ---------------------------------------------------------------------------------------
-- Mocks and services

local MODE = { respond = 0, echo = 1, reset = 2, hang = 3, close = 4, ["close-mid-body"] = 5,
               websocket = 6, raw = 7 }

local function mock_apply(h, m)
    local mode = m.tcp and "raw" or m.websocket and "websocket" or m.fault or (m.echo and "echo")
        or "respond"
    local head = {}
    local body = m.body
    if m.json ~= nil then
        body = cjson.encode(m.json)
        head[#head + 1] = "Content-Type: application/json\r\n"
    end
    if m.tcp then body = m.tcp end
    for k, v in pairs(m.headers or {}) do head[#head + 1] = k .. ": " .. tostring(v) .. "\r\n" end
    table.sort(head)
    head = table.concat(head)
    body = body == nil and "" or tostring(body)
    lib.sl_mock_set(h, MODE[mode], m.status or 200, m.delay_ms or 0, head, #head, body, #body)
    -- times: N -> the fault (or status) for the next N requests, then the plain answer
    if m.times then lib.sl_mock_times(h, m.times, m.echo and MODE.echo or MODE.respond) end
end

local function free_port()
    -- a mock bound to port 0 tells a free port; closed at once, the port is free again
    local m = lib.sl_mock_start()
    local port = lib.sl_mock_port(m)
    lib.sl_mock_stop(m)
    return port
end

local function now_ms() return tonumber(lib.sl_now_ns()) / 1e6 end

local function wait_port(port, ms)
    local deadline = tonumber(lib.sl_now_ns()) / 1e6 + ms
    repeat
        local fd = lib.sl_test_connect("127.0.0.1", port)
        if fd >= 0 then
            lib.sl_test_close(fd)
            return true
        end
        ffi.C.poll(nil, 0, 20)
    until tonumber(lib.sl_now_ns()) / 1e6 > deadline
    return false
end

local function sh_quote(s) return "'" .. tostring(s):gsub("'", [['"'"']]) .. "'" end
_M.sh_quote = sh_quote

-- Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
local function exited(pid)
    local f = io.open("/proc/" .. pid .. "/stat", "r")
    if not f then return true end
    local stat = f:read("*l") or ""
    f:close()
    return stat:match("^%d+ %b() (%a)") == "Z"
end

-- The last `n` lines of file `path` (a service's stderr), indented, or "" when it is empty.
local function tail_lines(path, n)
    local f = io.open(path, "r")
    if not f then return "" end
    local lines = {}
    for l in f:lines() do
        lines[#lines + 1] = l
        if #lines > n then table.remove(lines, 1) end
    end
    f:close()
    if #lines == 0 then return "" end
    return "; its last stderr lines:\n    " .. table.concat(lines, "\n    ")
end

-- Starts `command` with {port} replaced by a free port, in the spec's folder; its pid.
-- A service that exits before it listens fails the spec at once, with its stderr's end.
local function start_service(spec, name, s)
    local port = free_port()
    local cmd = s.command:gsub("{port}", tostring(port))
    local dir = spec.dir
    local errpath = os.tmpname()
    -- exec: the pid is the service's own, so stopping it stops the service
    local p = io.popen(fmt("(cd %s && exec %s) >/dev/null 2>%s & echo $!", sh_quote(dir), cmd, sh_quote(errpath)))
    local pid = tonumber(p:read("*l"))
    p:close()
    local deadline = now_ms() + 5000
    local why
    while pid and not why do
        if wait_port(port, 20) then
            os.remove(errpath)
            return { pid = pid, port = port }
        end
        if exited(pid) then
            why = fmt("service '%s' (%s) exited before it listened on port %d%s", name, cmd, port,
                      tail_lines(errpath, 10))
        elseif now_ms() > deadline then
            why = fmt("service '%s' (%s) did not listen on port %d within 5s%s", name, cmd, port,
                      tail_lines(errpath, 10))
        end
    end
    if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
    os.remove(errpath)
    return nil, why or fmt("service '%s' (%s) could not be started", name, cmd)
end

-- ---------------------------------------------------------------------------------------
-- The config: its text, with mock:NAME and service:NAME replaced, listen ports set to 0

local function listen_to_port0(text)
    -- every `listen: HOST:PORT` of the config gets port 0: a spec never collides with
    -- a running instance or another spec; "off" stays off
    return (text:gsub("(listen:%s*[\"']?)([%w%.%-%*]+):(%d+)", "%1%2:0")
                :gsub("(listen:%s*[\"']?)%[([%x:]+)%]:(%d+)", "%1[%2]:0"))
end

local function substitute(spec, text)
    local missing
    text = text:gsub("(%a+):([%w_%-]+)", function(kind, name)
        if kind == "mock" then
            local m = spec.mock_h[name]
            if not m then missing = missing or ("mock:" .. name); return nil end
            return "127.0.0.1:" .. lib.sl_mock_port(m)
        elseif kind == "service" then
            local s = spec.svc[name]
            if not s then missing = missing or ("service:" .. name); return nil end
            return "127.0.0.1:" .. s.port
        end
    end)
    return text, missing
end

-- The inline config's own lines of the spec file, blank lines above so that the
-- config's errors name the spec's real lines and columns.
local function inline_text(spec)
    local p = spec.pos.config
    local vline, vcol = p[3], p[4]
    local lines = {}
    for l in (spec.text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
    local out = {}
    for i = 1, vline - 1 do out[i] = "" end
    out[vline] = string.rep(" ", vcol - 1) .. lines[vline]:sub(vcol)
    for i = vline + 1, #lines do
        local l = lines[i]
        if l:match("^%S") and not l:match("^#") then break end
        out[i] = l
    end
    return table.concat(out, "\n") .. "\n", vcol
end

-- Replaces the scalar at line:col of text (quoted or plain) with `with`.
local function replace_scalar(lines, line, col, with)
    local l = lines[line]
    local q = l:sub(col, col)
    local stop
    if q == '"' or q == "'" then
        stop = l:find(q, col + 1, true) or #l
    else
        stop = (l:find("[,%]}#]", col) or (#l + 1)) - 1
        while stop > col and l:sub(stop, stop):match("%s") do stop = stop - 1 end
    end
    lines[line] = l:sub(1, col - 1) .. with .. l:sub(stop + 1)
end

-- Points every target of an upstream named like a mock at that mock (a port of the mock
-- per target: an address may not repeat in one upstream), and the config keys a
-- service names in `at` at that service.
local function point_at_mocks(spec, path, text)
    local cdoc, pos = decode_yaml(path, text)
    if not cdoc then return text end
    local edits = {}
    for name, s in pairs(spec.doc.services or {}) do
        if s.at then
            local p = pos[s.at]
            if not p then
                spec_error(spec, "services." .. name .. ".at", true, "the config has no key %s", s.at)
            end
            edits[#edits + 1] = { p[3], p[4], '"127.0.0.1:' .. spec.svc[name].port .. '"' }
        end
    end
    for ui, u in ipairs(type(cdoc.upstreams) == "table" and cdoc.upstreams or {}) do
        local h = type(u) == "table" and spec.mock_h[u.name or ""]
        if h and type(u.targets) == "table" then
            for ti in ipairs(u.targets) do
                local p = pos[fmt("upstreams.%d.targets.%d.address", ui, ti)]
                if p then
                    local port = ti == 1 and lib.sl_mock_port(h) or lib.sl_mock_add_port(h)
                    edits[#edits + 1] = { p[3], p[4], '"127.0.0.1:' .. port .. '"' }
                end
            end
        end
    end
    if #edits == 0 then return text end
    table.sort(edits, function(a, b) return a[1] > b[1] or (a[1] == b[1] and a[2] > b[2]) end)
    local lines = {}
    for l in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
    for _, e in ipairs(edits) do replace_scalar(lines, e[1], e[2], e[3]) end
    return table.concat(lines, "\n")
end

local function load_config(spec)
    local c = spec.doc.config
    local path, text, indent
    if type(c) == "string" then
        path = (c:sub(1, 1) == "/" or spec.dir == ".") and c or (spec.dir .. "/" .. c)
        local err
        text, err = test.read_file(path)
        if not text then
            spec_error(spec, "config", true, "cannot read the config %s: %s", path, tostring(err))
        end
        if text:sub(-1) ~= "\n" then text = text .. "\n" end
        indent = 1
        c = decode_yaml(path, text) -- a bad file: the gateway reports it, with its positions
    else
        path = spec.path
        text, indent = inline_text(spec)
    end
    -- keys the config leaves out get test defaults, as lines after its own (its positions
    -- stay): an inline config without listeners gets "web" on port 0, and any config
    -- without admin gets it on port 0, not on the default 127.0.0.1:9090
    if type(c) == "table" and c[1] == nil and not text:match("^%s*{") then
        local pad = string.rep(" ", indent - 1)
        if c.listeners == nil and type(spec.doc.config) == "table" then
            text = text .. pad .. 'listeners: [{ name: web, listen: "127.0.0.1:0" }]\n'
        end
        if c.admin == nil then text = text .. pad .. 'admin: { listen: "127.0.0.1:0" }\n' end
    end
    local missing
    text, missing = substitute(spec, listen_to_port0(text))
    if missing then spec_error(spec, "config", true, "the config names %s, which this spec does not declare", missing) end
    text = point_at_mocks(spec, path, text)
    local doc = decode_yaml(path, text) or {}
    return path, text, doc
end

-- ---------------------------------------------------------------------------------------
-- Requests

local function urlencode(s)
    return (tostring(s):gsub("[^%w%-%._~]", function(ch) return fmt("%%%02X", ch:byte()) end))
end

local function build_query(q)
    if type(q) == "string" then return q end
    local keys = {}
    for k in pairs(q) do keys[#keys + 1] = k end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do
        -- a list repeats the name: { t: [x, y] } is t=x&t=y
        local v = q[k]
        for _, x in ipairs(type(v) == "table" and v or { v }) do
            parts[#parts + 1] = urlencode(k) .. "=" .. urlencode(x)
        end
    end
    return table.concat(parts, "&")
end

local function split_hostport(hp) return hp:match("^(.*):(%d+)$") end

local function h2_request(spec, gw, r, hostport)
    local args = { "curl", "-sS", "-i", "--http2-prior-knowledge", "-X", r.method or "GET",
                   "--max-time", tostring(r.timeout or 5) }
    for k, v in pairs(r.headers or {}) do
        for _, x in ipairs(type(v) == "table" and v or { v }) do
            args[#args + 1] = "-H"; args[#args + 1] = k .. ": " .. tostring(x)
        end
    end
    local bodyfile
    if r.body then
        bodyfile = os.tmpname()
        local f = io.open(bodyfile, "wb"); f:write(r.body); f:close()
        args[#args + 1] = "--data-binary"; args[#args + 1] = "@" .. bodyfile
    end
    args[#args + 1] = "http://" .. hostport .. r.target
    for i, a in ipairs(args) do args[i] = sh_quote(a) end
    local p = io.popen(table.concat(args, " ") .. " 2>&1")
    local raw = p:read("*a")
    p:close()
    if bodyfile then os.remove(bodyfile) end
    return test.parse_response(raw)
end

-- Sends one request of a case; the response table, or nil and why.
local function do_request(spec, gw, req)
    local r = {}
    for k, v in pairs(req) do r[k] = v end
    local body = r.body
    if r.json ~= nil then
        body = cjson.encode(r.json)
        r.headers = r.headers or {}
        r.headers["Content-Type"] = r.headers["Content-Type"] or "application/json"
    end
    r.body = body ~= nil and tostring(body) or nil
    r.target = (r.path or "/") .. (r.query and ("?" .. build_query(r.query)) or "")
    local hostport = gw:address(r.listener or spec.listener)
    if r.http2 then return h2_request(spec, gw, r, hostport) end
    if r.send then
        -- an upgrade (websocket): the head, the 101, then `send` and its echo
        local host, port = split_hostport(hostport)
        local fd = lib.sl_test_connect(host, tonumber(port))
        if fd < 0 then return nil, "cannot connect to " .. hostport end
        local lines = { fmt("%s %s HTTP/1.1", r.method or "GET", r.target), "Host: " .. (r.host or "localhost") }
        for k, v in pairs(r.headers or {}) do
            for _, x in ipairs(type(v) == "table" and v or { v }) do lines[#lines + 1] = k .. ": " .. tostring(x) end
        end
        local head = table.concat(lines, "\r\n") .. "\r\n\r\n"
        recvbuf = recvbuf or ffi.gc(ffi.cast("char *", C.malloc(RECV_MAX)), C.free)
        lib.sl_test_send(fd, head, #head)
        local n = lib.sl_test_recv(fd, recvbuf, RECV_MAX, 0, "\r\n\r\n", (r.timeout or 5) * 1000, closedp)
        local res, err = test.parse_response(ffi.string(recvbuf, n))
        if res and res.status == 101 then
            lib.sl_test_send(fd, r.send, #r.send)
            n = lib.sl_test_recv(fd, recvbuf, RECV_MAX, #r.send, nil, (r.timeout or 5) * 1000, closedp)
            res.received = ffi.string(recvbuf, n)
        end
        lib.sl_test_close(fd)
        return res, err
    end
    return gw:request({ method = r.method, path = r.target, headers = r.headers, body = r.body,
                        host = r.host, listener = r.listener or spec.listener, timeout = r.timeout })
end

-- A tcp case: connect to a listener, send bytes, read until as many bytes as expected
-- came (or the peer closed, or the timeout).
local function do_tcp(spec, gw, t, want)
    local host, port = split_hostport(gw:address(t.listener))
    local fd = lib.sl_test_connect(host, tonumber(port))
    if fd < 0 then return nil, "cannot connect to listener " .. tostring(t.listener) end
    recvbuf = recvbuf or ffi.gc(ffi.cast("char *", C.malloc(RECV_MAX)), C.free)
    local send = t.send and tostring(t.send) or ""
    if #send > 0 then lib.sl_test_send(fd, send, #send) end
    local n = lib.sl_test_recv(fd, recvbuf, RECV_MAX, want or 0, nil,
                               math.floor((t.timeout or (want and 5 or 2)) * 1000), closedp)
    local res = { received = ffi.string(recvbuf, n), closed = closedp[0] == 1 }
    lib.sl_test_close(fd)
    return res
end

-- ---------------------------------------------------------------------------------------
-- Expectations: each check appends "what: expected X, got Y" lines to `fails`.

local SHOW_MAX = 400

local function show(v)
    if v == nil or v == null then return "(absent)" end
    if type(v) == "string" then
        -- a long value is cut: the diff stays readable, the length tells the rest
        local cut = #v > SHOW_MAX and v:sub(1, SHOW_MAX) or v
        local q = (fmt("%q", cut):gsub("\\\n", "\\n"))
        return #v > SHOW_MAX and (q .. fmt("... (%d bytes)", #v)) or q
    end
    if type(v) == "table" then return cjson.encode(v) end
    return tostring(v)
end

local function text_diff(fails, what, want, got)
    if want:find("\n") or (got or ""):find("\n") then
        local wl, gl = {}, {}
        for l in (want .. "\n"):gmatch("([^\n]*)\n") do wl[#wl + 1] = l end
        for l in ((got or "") .. "\n"):gmatch("([^\n]*)\n") do gl[#gl + 1] = l end
        fails[#fails + 1] = what .. " differs (- expected, + got):"
        for i = 1, math.max(#wl, #gl) do
            if wl[i] == gl[i] then
                fails[#fails + 1] = "      " .. wl[i]
            else
                if wl[i] then fails[#fails + 1] = "    - " .. wl[i] end
                if gl[i] then fails[#fails + 1] = "    + " .. gl[i] end
            end
        end
    else
        fails[#fails + 1] = fmt("%s: expected %s, got %s", what, show(want), show(got))
    end
end

-- Whether `got` contains everything of `want` (tables: every key of want, recursively; lists
-- item by item); the first difference's path in the message.
local function json_subset(want, got, path)
    if type(want) == "table" and want ~= null then
        if type(got) ~= "table" then return false, fmt("%s: expected %s, got %s", path, show(want), show(got)) end
        for k, v in pairs(want) do
            local ok, why = json_subset(v, got[k], path .. (type(k) == "number" and ("[" .. k .. "]") or ("." .. k)))
            if not ok then return false, why end
        end
        return true
    end
    if want == got or (want == null and got == nil) then return true end
    return false, fmt("%s: expected %s, got %s", path, show(want), show(got))
end

-- A value matcher: a scalar is equality; a mapping has one of equal, contains, matches,
-- json, absent.
local function match_value(fails, what, want, got, is_body)
    if want == null or (type(want) == "table" and want.absent == true) then
        if got ~= nil then fails[#fails + 1] = fmt("%s: expected absent, got %s", what, show(got)) end
        return
    end
    if type(want) ~= "table" then
        want = tostring(want)
        if got ~= want then text_diff(fails, what, want, got) end
        return
    end
    if got == nil then
        fails[#fails + 1] = fmt("%s: expected %s, got (absent)", what, show(want))
        return
    end
    if want.equal ~= nil and got ~= tostring(want.equal) then text_diff(fails, what, tostring(want.equal), got) end
    if want.contains ~= nil then
        local list = type(want.contains) == "table" and want.contains or { want.contains }
        for _, s in ipairs(list) do
            if not got:find(tostring(s), 1, true) then
                fails[#fails + 1] = fmt("%s: expected to contain %s, got %s", what, show(tostring(s)), show(got))
            end
        end
    end
    if want.matches ~= nil then
        local ok, m = pcall(string.find, got, tostring(want.matches))
        if not ok then
            fails[#fails + 1] = fmt("%s: bad pattern %s: %s", what, show(want.matches), tostring(m))
        elseif not m then
            fails[#fails + 1] = fmt("%s: expected to match %s, got %s", what, show(want.matches), show(got))
        end
    end
    if want.json ~= nil then
        local doc = cjson.decode(got)
        if doc == nil then
            fails[#fails + 1] = fmt("%s: expected JSON, got %s", what, show(got))
        else
            local ok, why = json_subset(want.json, doc, what)
            if not ok then fails[#fails + 1] = why end
        end
    end
end

local function check_headers(fails, prefix, want, got, suffix)
    for name, w in pairs(want) do
        match_value(fails, prefix .. name:lower() .. (suffix or ""), w, got[name:lower()])
    end
end

local function parse_request(raw)
    local eoh = raw:find("\r\n\r\n", 1, true)
    if not eoh then return nil end
    local head = raw:sub(1, eoh - 1)
    local method, target = head:match("^(%S+) (%S+)")
    local headers = {}
    for line in head:gmatch("\r\n([^\r\n]*)") do
        local k, v = line:match("^([^:]+):%s*(.-)%s*$")
        if k then
            k = k:lower()
            headers[k] = headers[k] and (headers[k] .. ", " .. v) or v
        end
    end
    local path, query = target:match("^([^?]*)%??(.*)$")
    return { method = method, path = path, query = query, headers = headers, body = raw:sub(eoh + 4) }
end

local function check_upstream(spec, fails, want, count_before)
    local h = spec.mock_h[want.mock]
    local count = tonumber(lib.sl_mock_count(h)) - count_before
    if want.count ~= nil and count ~= want.count then
        fails[#fails + 1] = fmt("upstream %s: expected %d requests, got %d", want.mock, want.count, count)
    end
    if want.method == nil and want.path == nil and want.query == nil and want.headers == nil
        and want.body == nil then
        return
    end
    if count == 0 then
        fails[#fails + 1] = fmt("upstream %s: received no request in this case", want.mock)
        return
    end
    local n = tonumber(lib.sl_mock_last(h, lastbuf, LAST_MAX))
    local seen = parse_request(ffi.string(lastbuf, math.min(n, LAST_MAX)))
    if not seen then
        fails[#fails + 1] = fmt("upstream %s: the last request is not HTTP", want.mock)
        return
    end
    local p = "upstream " .. want.mock .. " "
    if want.method ~= nil then match_value(fails, p .. "method", want.method, seen.method) end
    if want.path ~= nil then match_value(fails, p .. "path", want.path, seen.path) end
    if want.query ~= nil then match_value(fails, p .. "query", want.query, seen.query) end
    if want.headers ~= nil then check_headers(fails, p .. "header ", want.headers, seen.headers) end
    if want.body ~= nil then match_value(fails, p .. "body", want.body, seen.body) end
end

-- Checks one response against expect (sequence values taken at index i of n).
-- Checks response i of a case against expect (a list in `status` is taken item by item).
local function check_response(fails, expect, res, i)
    local st = expect.status
    if type(st) == "table" and st ~= null then st = st[i] end
    if st ~= nil and res.status ~= st then
        fails[#fails + 1] = fmt("status: expected %s, got %s", tostring(st), tostring(res.status))
    end
    if expect.headers then check_headers(fails, "header ", expect.headers, res.headers) end
    if expect.body ~= nil then match_value(fails, "body", expect.body, res.body, true) end
    if expect.received ~= nil then match_value(fails, "received", expect.received, res.received) end
    if expect.closed ~= nil and res.closed ~= expect.closed then
        fails[#fails + 1] = fmt("closed: expected %s, got %s", tostring(expect.closed), tostring(res.closed))
    end
end

-- The failures of a repeated request, each said once with the requests it happened to:
-- "status (requests 4, 5 of 5): expected 429, got 200". per[k] holds request k's lines; a
-- line indented by 4 spaces belongs to the one above (a diff).
local function merge_repeats(fails, per, n)
    local order, where = {}, {}
    for k = 1, n do
        local blocks = {}
        for _, l in ipairs(per[k] or {}) do
            if l:sub(1, 4) == "    " and #blocks > 0 then
                blocks[#blocks] = blocks[#blocks] .. "\n" .. l
            else
                blocks[#blocks + 1] = l
            end
        end
        for _, b in ipairs(blocks) do
            if not where[b] then
                where[b] = {}
                order[#order + 1] = b
            end
            table.insert(where[b], k)
        end
    end
    for _, b in ipairs(order) do
        local ks = where[b]
        local tag = n == 1 and "" or #ks == n and fmt(" (all %d requests)", n)
            or fmt(" (request%s %s of %d)", #ks > 1 and "s" or "", table.concat(ks, ", "), n)
        local first, rest = b:match("^([^\n]*)(.*)$")
        local label, after = first:match("^(.-)(:.*)$")
        if not label then label, after = first, "" end
        -- "body differs (...):" keeps its words together: the tag goes before " differs"
        local l2, a2 = label:match("^(.-)( differs.*)$")
        if l2 then label, after = l2, a2 .. after end
        for line in (label .. tag .. after .. rest):gmatch("[^\n]+") do fails[#fails + 1] = line end
    end
end

local function run_case(spec, gw, c, i)
    local fails = {}
    local expect = c.expect or {}
    -- per-case mock settings, restored afterwards
    for name, m in pairs(c.mocks or {}) do
        local merged = {}
        for k, v in pairs(spec.doc.mocks[name]) do merged[k] = v end
        for k, v in pairs(m) do merged[k] = v end
        mock_apply(spec.mock_h[name], merged)
    end
    local up = expect.upstream
    local before = up and tonumber(lib.sl_mock_count(spec.mock_h[up.mock])) or 0
    if c.wait_ms then C.poll(nil, 0, c.wait_ms) end
    local n = c["repeat"] or 1
    local statuses, per = {}, {}
    for k = 1, n do
        local res, err
        if c.tcp then
            local want
            -- read as many bytes as expected, or (closed: true) until the peer closes
            if type(expect.received) == "string" and expect.closed ~= true then want = #expect.received end
            res, err = do_tcp(spec, gw, c.tcp, want)
        else
            res, err = do_request(spec, gw, c.request)
        end
        per[k] = {}
        if not res then
            per[k][1] = "no response: " .. tostring(err)
        else
            statuses[k] = res.status
            check_response(per[k], expect, res, k)
        end
    end
    merge_repeats(fails, per, n)
    if n > 1 and type(expect.status) == "table" and #fails > 0 then
        fails[#fails + 1] = fmt("status sequence: expected %s, got %s", cjson.encode(expect.status),
                                cjson.encode(statuses))
    end
    if up then check_upstream(spec, fails, up, before) end
    for name in pairs(c.mocks or {}) do mock_apply(spec.mock_h[name], spec.doc.mocks[name]) end
    return fails
end

-- ---------------------------------------------------------------------------------------
-- A spec file


local function stop_all(spec, gw)
    if gw then gw:stop() end
    for _, h in pairs(spec.mock_h or {}) do lib.sl_mock_stop(h) end
    for _, s in pairs(spec.svc or {}) do os.execute("kill " .. s.pid .. " 2>/dev/null") end
    -- the spec's env ends with it: the next spec sees the variables as they were
    for k, v in pairs(spec.env_before or {}) do
        if v == false then C.unsetenv(k) else C.setenv(k, v, 1) end
    end
end

-- Runs one spec file; returns { path, name, cases = { {name, ok, fails, ms} }, error, ms }.
function _M.run_file(path, out)
    local t0 = now_ms()
    local result = { path = path, name = path, cases = {} }
    local text, err = test.read_file(path)
    if not text then
        result.error = path .. ":1:1: cannot read: " .. tostring(err)
        return result
    end
    local doc, pos = decode_yaml(path, text)
    if not doc then
        result.error = pos
        return result
    end
    local spec = { path = path, dir = path:match("^(.*)/[^/]*$") or ".", text = text, doc = doc,
                   pos = pos, mock_h = {}, svc = {} }
    local gw
    local ok, e = pcall(function()
        validate(spec)
        result.name = doc.name or path
        spec.env_before = {}
        for k, v in pairs(doc.env or {}) do
            if spec.env_before[k] == nil then spec.env_before[k] = os.getenv(k) or false end
            C.setenv(k, tostring(v), 1)
        end
        for name, m in pairs(doc.mocks or {}) do
            local h = lib.sl_mock_start()
            if h == nil then spec_error(spec, "mocks." .. name, false, "cannot start mock '%s'", name) end
            spec.mock_h[name] = h
            mock_apply(h, m)
        end
        for name, s in pairs(doc.services or {}) do
            local svc, serr = start_service(spec, name, s)
            if not svc then spec_error(spec, "services." .. name, false, "%s", serr) end
            spec.svc[name] = svc
        end
        local cpath, ctext, cdoc = load_config(spec)
        local serr
        gw, serr = test.start(cpath, { text = ctext })
        if not gw then
            error(setmetatable({ text = (tostring(serr):gsub("\n$", "")) }, SpecError), 0)
        end
        spec.listener = (cdoc.listeners and cdoc.listeners[1] and cdoc.listeners[1].name) or "web"
    end)
    if not ok then
        stop_all(spec, gw)
        result.error = getmetatable(e) == SpecError and e.text or (path .. ":1:1: " .. tostring(e))
        result.ms = now_ms() - t0
        return result
    end
    for i, c in ipairs(doc.cases) do
        local name = c.name or ("case " .. i)
        local c0 = now_ms()
        local cr = { name = name }
        if c.skip then
            cr.skipped = true
        else
            local okc, fails = pcall(run_case, spec, gw, c, i)
            if not okc then fails = { "error: " .. tostring(fails) } end
            cr.ok, cr.fails = #fails == 0, fails
        end
        cr.ms = now_ms() - c0
        result.cases[#result.cases + 1] = cr
        if out then out(result, cr) end
    end
    stop_all(spec, gw)
    result.ms = now_ms() - t0
    return result
end

-- ---------------------------------------------------------------------------------------
-- JUnit XML

local function xml(s)
    return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" })
        :gsub("[%z\1-\8\11\12\14-\31]", "?"))
end

function _M.junit(results)
    local o = { '<?xml version="1.0" encoding="UTF-8"?>' }
    local tests, failures, errors = 0, 0, 0
    local suites = {}
    for _, r in ipairs(results) do
        local f, e, sk = 0, r.error and 1 or 0, 0
        local cases = {}
        for _, c in ipairs(r.cases) do
            if c.skipped then
                sk = sk + 1
                cases[#cases + 1] = fmt('    <testcase classname="%s" name="%s" time="%.3f"><skipped/></testcase>',
                                        xml(r.name), xml(c.name), c.ms / 1000)
            elseif c.ok then
                cases[#cases + 1] = fmt('    <testcase classname="%s" name="%s" time="%.3f"/>', xml(r.name),
                                        xml(c.name), c.ms / 1000)
            else
                f = f + 1
                cases[#cases + 1] = fmt('    <testcase classname="%s" name="%s" time="%.3f">\n' ..
                                        '      <failure message="%s">%s</failure>\n    </testcase>',
                                        xml(r.name), xml(c.name), c.ms / 1000, xml(c.fails[1]),
                                        xml(table.concat(c.fails, "\n")))
            end
        end
        if r.error then
            cases[#cases + 1] = fmt('    <testcase classname="%s" name="spec" time="0">\n' ..
                                    '      <error message="%s">%s</error>\n    </testcase>',
                                    xml(r.name), xml(r.error:match("[^\n]*")), xml(r.error))
        end
        tests, failures, errors = tests + #cases, failures + f, errors + e
        suites[#suites + 1] = fmt('  <testsuite name="%s" tests="%d" failures="%d" errors="%d" skipped="%d" time="%.3f">',
                                  xml(r.name), #cases, f, e, sk, (r.ms or 0) / 1000)
        for _, c in ipairs(cases) do suites[#suites + 1] = c end
        suites[#suites + 1] = "  </testsuite>"
    end
    o[#o + 1] = fmt('<testsuites name="sluice test" tests="%d" failures="%d" errors="%d">', tests, failures, errors)
    for _, s in ipairs(suites) do o[#o + 1] = s end
    o[#o + 1] = "</testsuites>"
    return table.concat(o, "\n") .. "\n"
end

-- ---------------------------------------------------------------------------------------
-- sluice test SPEC.yaml... [--junit FILE]

local function usage()
    io.stderr:write("usage: sluice test SPEC.yaml|DIR... [--junit FILE] [-v]\n" ..
                    "  DIR: every smoke.yaml and *.smoke.yaml under it\n")
    return 2
end

function _M.main(args)
    local files, junit, verbose = {}, nil, false
    local i = 1
    while i <= #args do
        local a = args[i]
        if a == "--junit" then
            junit = args[i + 1]
            if not junit then return usage() end
            i = i + 1
        elseif a == "-v" or a == "--verbose" then
            verbose = true
        elseif a == "-h" or a == "--help" then
            usage()
            return 0
        elseif a:sub(1, 1) == "-" then
            io.stderr:write("sluice test: unknown option '" .. a .. "'\n")
            return usage()
        elseif os.execute("test -d " .. sh_quote(a)) == 0 then
            -- a folder: its smoke.yaml and *.smoke.yaml files, at any depth, sorted
            local p = io.popen("find " .. sh_quote(a) .. " -type f \\( -name smoke.yaml -o -name '*.smoke.yaml' \\) | sort")
            local n = #files
            for f in p:lines() do files[#files + 1] = f end
            p:close()
            if #files == n then
                io.stderr:write("sluice test: no smoke.yaml or *.smoke.yaml under " .. a .. "\n")
                return 2
            end
        else
            files[#files + 1] = a
        end
        i = i + 1
    end
    if #files == 0 then return usage() end
    local t0 = now_ms()
    local passed, failed, skipped, results = 0, 0, 0, {}
    local function out(r, c)
        local prefix = #files > 1 and (r.path .. ": ") or ""
        if c.skipped then
            skipped = skipped + 1
            io.stdout:write(fmt("SKIP %s%s\n", prefix, c.name))
        elseif c.ok then
            passed = passed + 1
            io.stdout:write(fmt("PASS %s%s (%.1f ms)\n", prefix, c.name, c.ms))
        else
            failed = failed + 1
            io.stdout:write(fmt("FAIL %s%s (%.1f ms)\n", prefix, c.name, c.ms))
            for _, l in ipairs(c.fails) do io.stdout:write("    " .. l .. "\n") end
            if verbose then
                for _, l in ipairs(test.logs()) do io.stdout:write("    log: " .. cjson.encode(l) .. "\n") end
            end
        end
        io.stdout:flush()
        test.capture_logs(true)
    end
    for _, f in ipairs(files) do
        local r = _M.run_file(f, out)
        if r.error then
            failed = failed + 1
            local text = r.error
            -- with several specs, an error in another file (the config) says which spec
            if #files > 1 and text:sub(1, #r.path + 1) ~= r.path .. ":" then
                local first, rest = text:match("^([^\n]*)(.*)$")
                text = first .. " (spec " .. r.path .. ")" .. rest
            end
            io.stdout:write(fmt("ERROR %s\n", (text:gsub("\n", "\n    "))))
        end
        results[#results + 1] = r
    end
    io.stdout:write(fmt("%d passed, %d failed%s (%.0f ms)\n", passed, failed,
                        skipped > 0 and fmt(", %d skipped", skipped) or "", now_ms() - t0))
    if junit then
        local fh, err = io.open(junit, "wb")
        if not fh then
            io.stderr:write("sluice test: cannot write " .. junit .. ": " .. tostring(err) .. "\n")
            return 1
        end
        fh:write(_M.junit(results))
        fh:close()
    end
    return failed > 0 and 1 or 0
end

return _M
