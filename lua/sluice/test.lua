-- sluice.test: in-process gateways for busted specs (and for `sluice test`).
--
--   local test = require("sluice.test")
--   local up = test.upstream()                       -- an echo server: answers with what it got
--   local gw = test.start({ upstreams = { { name = "u", targets = { { address = up:address() } } } },
--                           routes = { { name = "r", match = { paths = { "/" } }, upstream = "u",
--                                        plugins = { { name = "request-id" } } } } })
--   local res = gw:request({ path = "/x", headers = { ["X-A"] = "1" } })
--   assert.equal(200, res.status); local seen = res:json()   -- what the upstream received
--   gw:stop(); up:stop()
--
--   local gw = assert(test.start("gw.yaml"))         -- or the user's own config file: its
--                                                    -- plugin_paths are relative to it
--
-- The gateway runs on threads of the busted process through libsluice.so (loaded
-- once, globally, so worker VMs find the FFI ABI) and the harness in libsluice_test.so:
-- no external process, ready in milliseconds. Inside the sluice binary (`sluice test`)
-- the core's symbols come from the binary itself, the harness's from libsluice_test.so. Config tables are sent as JSON (a subset of YAML); defaults:
-- workers 1, one listener "web" on 127.0.0.1:0, admin on 127.0.0.1:0.
--
-- Log lines are kept in memory (test.logs()) instead of on stderr, unless
-- SLUICE_TEST_VERBOSE=1.
local ffi = require("ffi")
local cjson = require("cjson.safe")
local libpath = require("sluice.libpath")

local _M = {}

ffi.cdef[[
void *sl_test_start(const char *text, size_t len, const char *path, char *err, size_t errlen);
int sl_test_addr(void *g, const char *name, char *out, size_t cap);
void sl_test_stop(void *g);
void sl_log_capture(int on);
size_t sl_log_captured(char *out, size_t cap);
uint64_t sl_now_ns(void);
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
long readlink(const char *path, char *buf, size_t n);
int poll(void *fds, unsigned long n, int timeout);
char *sl_ffi_yaml_decode(const char *path, const char *text, size_t len, char **pos, char *err,
                         size_t errlen);
void free(void *p);
void *malloc(size_t n);
typedef struct sl_mock sl_mock_t;
sl_mock_t *sl_mock_start(void);
int sl_mock_port(sl_mock_t *m);
int sl_mock_add_port(sl_mock_t *m);
void sl_mock_set(sl_mock_t *m, int mode, int status, int delay_ms, const char *head, size_t headlen,
                 const char *body, size_t bodylen);
void sl_mock_times(sl_mock_t *m, int n, int after_mode);
uint64_t sl_mock_count(sl_mock_t *m);
size_t sl_mock_last(sl_mock_t *m, char *out, size_t cap);
void sl_mock_stop(sl_mock_t *m);
int sl_test_connect(const char *host, int port);
int sl_test_send(int fd, const char *buf, size_t len);
long sl_test_recv(int fd, char *out, size_t cap, size_t want, const char *until, int timeout_ms,
                  int *closed);
void sl_test_close(int fd);
]]

local function source_dir()
    local here = debug.getinfo(1, "S").source:sub(2)
    return (here:match("^(.*)/lua/sluice/test%.lua$")) or "."
end

_M.SOURCE_DIR = source_dir()

-- SOURCE_DIR/rel as an absolute path (SOURCE_DIR is "." when busted runs from the checkout;
-- a gateway's plugin_paths must not depend on its working directory).
function _M.source_path(rel)
    local dir = _M.SOURCE_DIR
    if dir:sub(1, 1) ~= "/" then
        local cwd = os.getenv("PWD") or assert(io.popen("pwd")):read("*l")
        dir = (cwd .. "/" .. dir):gsub("/%./", "/"):gsub("/%.$", "")
    end
    return dir .. "/" .. rel
end
-- The core's symbols: the sluice binary's own (it exports them), else libsluice.so's. The
-- harness's own (sl_test_*, sl_mock_*) are in libsluice_test.so, which neither ships inside:
-- $SLUICE_TEST_LIB, else beside the core (the binary, or libsluice.so), else in the lib
-- folders of its prefix. Both are loaded globally, so ffi.C and the worker VMs see them
-- all, and the test library's own calls into the core resolve against the one core there.
-- Their namespaces are kept (in _M.loaded): a collected one would unload its library.
_M.loaded = {}
local function has(sym) return (pcall(function() return ffi.C[sym] end)) end

local core_dir
if has("sl_log_capture") then
    local exe = ffi.new("char[4096]")
    local n = ffi.C.readlink("/proc/self/exe", exe, 4095)
    core_dir = libpath.dir(n > 0 and ffi.string(exe, n) or ".")
else
    local core = os.getenv("SLUICE_LIB")
    if not core or core == "" then core = _M.SOURCE_DIR .. "/build/libsluice.so" end
    _M.loaded.core = ffi.load(core, true)
    core_dir = libpath.dir(core)
end
if not has("sl_test_start") then
    local path = os.getenv("SLUICE_TEST_LIB")
    if not path or path == "" then path = libpath.find(core_dir, "libsluice_test.so") end
    if not path then error("sluice.test: libsluice_test.so not found beside " .. core_dir ..
                           " nor in its prefix's lib folders; set SLUICE_TEST_LIB", 2) end
    _M.loaded.test = ffi.load(path, true)
end
local lib = ffi.C
_M.lib = lib

local quiet = os.getenv("SLUICE_TEST_VERBOSE") ~= "1"
if quiet then
    ffi.C.setenv("SLUICE_TEST_QUIET", "1", 1)
    lib.sl_log_capture(1)
end

local errbuf = ffi.new("char[16384]")
local addrbuf = ffi.new("char[128]")
local RESP_MAX = 16 * 1024 * 1024
local respbuf

local function copy(t)
    if type(t) ~= "table" then return t end
    local o = {}
    for k, v in pairs(t) do o[k] = copy(v) end
    return o
end

local GW = {}
GW.__index = GW

local function read_file(path)
    local f, err = io.open(path, "rb")
    if not f then return nil, err end
    local text = f:read("*a")
    f:close()
    return text
end
_M.read_file = read_file

-- The folder of the spec file calling start: a table config's relative plugin_paths are
-- relative to it.
local function caller_dir()
    local src = debug.getinfo(3, "S").source
    local dir = src:sub(1, 1) == "@" and (src:sub(2):match("^(.*)/[^/]*$") or ".") or "."
    if dir:sub(1, 1) ~= "/" then
        dir = (os.getenv("PWD") or ".") .. (dir == "." and "" or ("/" .. dir:gsub("^%./", "")))
    end
    return dir
end

-- Starts a gateway from a config table or from a YAML file's path. opts.path names the
-- config in errors and anchors relative plugin_paths (a file's own path by default; for
-- a table, the calling spec file's folder); opts.text is YAML text to use instead.
-- A file is used as written: its listeners and admin, so write port 0 for a test.
-- Returns the gateway and its start time in ms, or nil and the config errors
-- ("FILE:LINE:COL: message" lines).
function _M.start(conf, opts)
    opts = opts or {}
    local text, path
    if type(conf) == "string" or opts.text then
        path = opts.path or conf
        text = opts.text
        if not text then
            local err
            text, err = read_file(conf)
            if not text then return nil, conf .. ":1:1: cannot read the config: " .. tostring(err) end
        end
    else
        conf = copy(conf or {})
        conf.workers = conf.workers or 1
        conf.admin = conf.admin or { listen = "127.0.0.1:0" }
        conf.listeners = conf.listeners or { { name = "web", listen = "127.0.0.1:0" } }
        text = assert(cjson.encode(conf))
        path = opts.path or (caller_dir() .. "/<sluice.test>.yaml")
    end
    local t0 = lib.sl_now_ns()
    local g = lib.sl_test_start(text, #text, path, errbuf, ffi.sizeof(errbuf))
    local ms = tonumber(lib.sl_now_ns() - t0) / 1e6
    if g == nil then return nil, ffi.string(errbuf) end
    return setmetatable({ g = g, conf = conf }, GW), ms
end

-- The real "127.0.0.1:PORT" of a listener (default "web"), or of "admin".
function GW:address(name)
    assert(lib.sl_test_addr(self.g, name or "web", addrbuf, 128) == 0, "no listener " .. tostring(name))
    return ffi.string(addrbuf)
end

local function parse_response(raw)
    local head_end = raw:find("\r\n\r\n", 1, true)
    if not head_end then return nil, "no complete response head in " .. #raw .. " bytes" end
    local head = raw:sub(1, head_end - 1)
    local status = tonumber(head:match("^HTTP/[%d%.]+ (%d%d%d)"))
    if not status then return nil, "bad status line: " .. head:sub(1, 80) end
    local headers, list = {}, {}
    for line in head:gmatch("\r\n([^\r\n]*)") do
        local k, v = line:match("^([^:]+):%s*(.-)%s*$")
        if k then
            k = k:lower()
            list[#list + 1] = { k, v }
            headers[k] = headers[k] and (headers[k] .. ", " .. v) or v
        end
    end
    local rest = raw:sub(head_end + 4)
    local body
    if headers["transfer-encoding"] == "chunked" then
        local parts, pos = {}, 1
        while true do
            local size_line_end = rest:find("\r\n", pos, true)
            if not size_line_end then return nil, "truncated chunked body" end
            local size = tonumber(rest:sub(pos, size_line_end - 1):match("^%x+"), 16)
            if not size then return nil, "bad chunk size" end
            if size == 0 then break end
            parts[#parts + 1] = rest:sub(size_line_end + 2, size_line_end + 1 + size)
            pos = size_line_end + 2 + size + 2
        end
        body = table.concat(parts)
    elseif headers["content-length"] then
        body = rest:sub(1, tonumber(headers["content-length"]))
    else
        body = rest
    end
    local res = { status = status, headers = headers, header_list = list, body = body, raw = raw }
    function res.json() return cjson.decode(body) end
    return res
end
_M.parse_response = parse_response

-- Reads one response from fd into respbuf: the head, then as much body as it announces
-- (Content-Length, the end of chunked framing, else until the peer closes), so a
-- keep-alive connection does not wait for the timeout. The bytes read.
local closed = ffi.new("int[1]")
local function read_response(fd, head_only, timeout_ms)
    local deadline = tonumber(lib.sl_now_ns()) / 1e6 + timeout_ms
    local function left() return math.max(0, math.floor(deadline - tonumber(lib.sl_now_ns()) / 1e6)) end
    local n = tonumber(lib.sl_test_recv(fd, respbuf, RESP_MAX, 0, "\r\n\r\n", timeout_ms, closed))
    while true do
        local got = ffi.string(respbuf, n)
        local eoh = got:find("\r\n\r\n", 1, true)
        if not eoh or closed[0] == 1 then return n end
        local head = got:sub(1, eoh):lower()
        local status = tonumber(head:match("^http/[%d%.]+ (%d+)"))
        if status and status >= 100 and status < 200 and status ~= 101 then
            -- an interim answer: the final one follows
            if not got:find("\r\n\r\n", eoh + 4, true) then
                n = n + tonumber(lib.sl_test_recv(fd, respbuf + n, RESP_MAX - n, 0, "\r\n\r\n", left(), closed))
            else
                return n
            end
        else
            if head_only or status == 204 or status == 304 or status == 101 then return n end
            local cl = tonumber(head:match("\ncontent%-length:%s*(%d+)"))
            if cl then
                local want = eoh + 3 + cl
                if n < want then
                    n = n + tonumber(lib.sl_test_recv(fd, respbuf + n, RESP_MAX - n, want - n, nil, left(), closed))
                end
                return n
            elseif head:find("\ntransfer%-encoding:[^\n]*chunked") then
                if got:find("\r\n0\r\n\r\n", eoh, true) then return n end
                n = n + tonumber(lib.sl_test_recv(fd, respbuf + n, RESP_MAX - n, 0, "\r\n0\r\n\r\n", left(), closed))
                return n
            else
                return n + tonumber(lib.sl_test_recv(fd, respbuf + n, RESP_MAX - n, 0, nil, left(), closed))
            end
        end
    end
end

-- Sends one request and returns { status, headers (lower-case names), body, raw, json() }.
-- req: { method = "GET", path = "/", headers = { name = value }, body = "...", host = ...,
--        listener = "web", timeout = 5 (s), raw = "exact bytes to send instead" }.
function GW:request(req)
    req = req or {}
    local hostport = self:address(req.listener)
    local host, port = hostport:match("^(.*):(%d+)$")
    local raw = req.raw
    if not raw then
        local lines = { ("%s %s HTTP/1.1"):format(req.method or "GET", req.path or "/") }
        local h = req.headers or {}
        local has = {}
        for k in pairs(h) do has[k:lower()] = true end
        if not has.host then lines[#lines + 1] = "Host: " .. (req.host or "localhost") end
        for k, v in pairs(h) do
            -- a list is one field per element; numbers and booleans as text
            for _, x in ipairs(type(v) == "table" and v or { v }) do lines[#lines + 1] = k .. ": " .. tostring(x) end
        end
        if req.body and not has["content-length"] and not has["transfer-encoding"] then
            lines[#lines + 1] = "Content-Length: " .. #req.body
        end
        if not has.connection then lines[#lines + 1] = "Connection: close" end
        raw = table.concat(lines, "\r\n") .. "\r\n\r\n" .. (req.body or "")
    end
    -- malloc, not ffi.new: 16 MiB zero-filled took 10 ms of the first request
    respbuf = respbuf or ffi.gc(ffi.cast("char *", ffi.C.malloc(RESP_MAX)), ffi.C.free)
    local fd = lib.sl_test_connect(host, tonumber(port))
    if fd < 0 then return nil, "cannot connect to " .. hostport end
    if lib.sl_test_send(fd, raw, #raw) ~= 0 then
        lib.sl_test_close(fd)
        return nil, "cannot send to " .. hostport
    end
    local n = read_response(fd, req.method == "HEAD", math.floor((req.timeout or 5) * 1000))
    lib.sl_test_close(fd)
    return parse_response(ffi.string(respbuf, n))
end

-- Sends the raw request `raw` n times on one keep-alive connection, reading each answer's
-- head (up to the blank line: for answers without a body, as benchmarks and allocation
-- counts want). Raises unless every answer is a 200.
local drive_buf, drive_closed
function GW:keepalive(n, raw, listener)
    drive_buf = drive_buf or ffi.new("char[65536]")
    drive_closed = drive_closed or ffi.new("int[1]")
    local host, port = self:address(listener):match("^(.*):(%d+)$")
    local fd = lib.sl_test_connect(host, tonumber(port))
    if fd < 0 then error("cannot connect to " .. host .. ":" .. port, 2) end
    for i = 1, n do
        local ok = lib.sl_test_send(fd, raw, #raw) == 0
        local got = ok and tonumber(lib.sl_test_recv(fd, drive_buf, 65536, 0, "\r\n\r\n", 5000, drive_closed)) or 0
        local head = ffi.string(drive_buf, got)
        if not head:find("^HTTP/1.1 200") then
            lib.sl_test_close(fd)
            error(("request %d: %q"):format(i, head), 2)
        end
    end
    lib.sl_test_close(fd)
end

function GW:stop()
    if self.g ~= nil then
        lib.sl_test_stop(self.g)
        self.g = nil
    end
end

-- An upstream for specs: a gateway whose every request is answered by the echo plugin,
-- so a response body tells what the upstream received (method, path, query, headers, body).
function _M.upstream()
    return assert(_M.start({
        admin = { listen = "off" },
        routes = { { name = "echo", match = { paths = { "/" } }, plugins = { { name = "echo" } } } },
    }))
end

-- Log capture: lines every gateway of this process writes, decoded from JSON. Turning it
-- on empties the buffer; turning it off shows lines on stderr again, unless quiet.
function _M.capture_logs(on)
    lib.sl_log_capture((on == false and not quiet) and 0 or 1)
end

function _M.logs()
    local buf = ffi.new("char[?]", 1048576)
    local n = lib.sl_log_captured(buf, 1048576)
    local out = {}
    for line in ffi.string(buf, n):gmatch("[^\n]+") do
        out[#out + 1] = cjson.decode(line) or { raw = line }
    end
    return out
end

return _M
