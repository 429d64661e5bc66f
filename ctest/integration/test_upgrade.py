"""HTTP/1.1 Upgrade (WebSocket and others) on the HTTP path.

A route forwards an upgrade only when its `upgrade:` list names the client's
protocol; only a 101 to such a request turns the two connections into a
byte-for-byte tunnel. Any other answer leaves the connection HTTP: bytes the
client pipelined behind the upgrade request are parsed as requests, never
tunnelled. h2c (and HTTP2-Settings) is never forwarded. Then a real WebSocket
echo server (Node's `ws`) against a standard-library WebSocket client: 1,000
messages from 1 B to 1 MiB, byte for byte, and a clean close — over ws:// and over
wss:// (a TLS listener, and TLS again to a Node wss:// upstream, certificates made by
the openssl CLI); half-close in the
tunnel; the idle timeout; and the 101 in /metrics (a tunnel holds no request
duration).
"""

import base64
import hashlib
import os
import random
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("upgrade", budget=240)
S = {}

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


# ---------------------------------------------------------------- peers

class RawUpstream(h.MockUpstream):
    """MockUpstream's server with each accepted connection handed to fn(sock, rec) instead
    of its HTTP loop. rec is the connection's ConnRecord; fn adds what the test reads
    afterwards (rec.data: bytes seen, rec.head, rec.events), and rec.done is set at its end."""

    def __init__(self, fn, name="raw"):
        self.fn = fn
        super().__init__(None, name)

    def _serve(self, c):
        c.events, c.head, c.done = [], b"", threading.Event()
        try:
            self.fn(c.sock, c)
        except Exception as e:  # recorded; the test checks what it needs
            c.events.append("error: %r" % e)
        finally:
            try:
                c.sock.close()
            except OSError:
                pass
            c.done.set()

    def wait_conns(self, n, timeout=5.0):
        """The n-th connection's record (1-based), once it was accepted; None on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.conns) >= n:
                    return self.conns[n - 1]
            time.sleep(0.01)
        return None


def read_head(s, rec, timeout=5.0):
    """Reads up to the end of a request head; returns (head, bytes after it)."""
    s.settimeout(timeout)
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise EOFError("closed before a head")
        buf += d
    i = buf.index(b"\r\n\r\n") + 4
    rec.head = bytes(buf[:i])
    return bytes(buf[:i]), bytes(buf[i:])


def read_to_eof(s, rec, already=b"", timeout=10.0):
    rec.data += already
    s.settimeout(timeout)
    while True:
        try:
            d = s.recv(262144)
        except socket.timeout:
            rec.events.append("timeout")
            return False
        except ConnectionResetError:
            rec.events.append("reset")
            return False
        if not d:
            rec.events.append("eof")
            return True
        rec.data += d


SWITCH = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          b"X-Up: switched\r\n\r\n")


def switch_then_echo_early(s, rec):
    """101 with early bytes in the same write, then records the tunnel until EOF and
    answers once it saw the pipelined request's bytes."""
    _, rest = read_head(s, rec)
    s.sendall(SWITCH + b"early-bytes;")
    rec.data += rest
    s.settimeout(5)
    while b"Host: second\r\n\r\n" not in rec.data:
        d = s.recv(65536)
        if not d:
            break
        rec.data += d
    s.sendall(b"upstream-saw-%d-bytes" % len(rec.data))
    read_to_eof(s, rec)


def switch_then_halfclose(s, rec):
    """101, read the tunnel to EOF, then answer (after the client's half-close)."""
    _, rest = read_head(s, rec)
    s.sendall(SWITCH)
    read_to_eof(s, rec, rest)
    digest = hashlib.sha256(bytes(rec.data)).hexdigest().encode()
    answer = b"len=%d sha=%s;" % (len(rec.data), digest) + bytes(range(256)) * 1024
    rec.answer = answer
    s.sendall(answer)
    s.shutdown(socket.SHUT_WR)
    read_to_eof(s, rec)


def switch_then_idle(s, rec):
    _, rest = read_head(s, rec)
    s.sendall(SWITCH)
    rec.switched_at = time.monotonic()
    s.settimeout(20)
    rec.data += rest
    while True:
        try:
            d = s.recv(65536)
        except (ConnectionResetError, socket.timeout) as e:
            rec.events.append(repr(e))
            break
        if not d:
            rec.events.append("eof")
            break
        rec.data += d
        if d.endswith(b"ping"):
            s.sendall(b"pong")
    rec.closed_at = time.monotonic()


def switch_unasked(s, rec):
    read_head(s, rec)
    s.sendall(SWITCH + b"not-for-you")
    read_to_eof(s, rec, timeout=5)


def start_node_ws(cert=None, key=None):
    """A WebSocket echo server with Node's ws package (over TLS with cert/key); returns (proc, port)."""
    node = shutil.which("nodejs") or shutil.which("node")
    if cert:
        listen = r"""
const fs = require('fs');
const srv = require('https').createServer({ cert: fs.readFileSync(%r), key: fs.readFileSync(%r) });
const wss = new ws.WebSocketServer({ server: srv, maxPayload: 4 * 1024 * 1024 });
srv.listen(0, '127.0.0.1', () => { process.stdout.write(srv.address().port + '\n'); });""" % (cert, key)
    else:
        listen = r"""
const wss = new ws.WebSocketServer({ host: '127.0.0.1', port: 0, maxPayload: 4 * 1024 * 1024 });
wss.on('listening', () => { process.stdout.write(wss.address().port + '\n'); });"""
    script = r"""
let ws;
try { ws = require('ws'); } catch (e) { ws = require('/usr/share/nodejs/ws'); }""" + listen + r"""
wss.on('connection', (sock, req) => {
  sock.on('message', (data, isBinary) => sock.send(data, { binary: isBinary }));
});
"""
    d = h.new_tmpdir("node")
    p = os.path.join(d, "echo.js")
    with open(p, "w") as f:
        f.write(script)
    proc = subprocess.Popen([node, p], stdout=subprocess.PIPE, stderr=open(os.path.join(d, "err"), "wb"),
                            stdin=subprocess.DEVNULL, preexec_fn=h._die_with_parent)
    line = proc.stdout.readline().decode().strip()
    return proc, int(line)


class Proc:
    def __init__(self, proc):
        self.proc = proc
        h._register(self)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        h._unregister(self)


# ---------------------------------------------------------------- a standard-library WebSocket client

def mask_bytes(data, key):
    n = len(data)
    if n == 0:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")


class WSClient:
    def __init__(self, port, path, host="ws.test", tls=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:  # wss: an ssl.SSLContext that trusts the test CA
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.buf = bytearray()
        key = base64.b64encode(os.urandom(16))
        req = (b"GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
               % (path.encode(), host.encode(), key))
        self.sock.sendall(req)
        while b"\r\n\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise EOFError("closed during the handshake: %r" % bytes(self.buf))
            self.buf += d
        i = self.buf.index(b"\r\n\r\n") + 4
        head = bytes(self.buf[:i]).decode("latin-1")
        del self.buf[:i]
        lines = head.split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for ln in lines[1:]:
            if ":" in ln:
                k, v = ln.split(":", 1)
                self.headers[k.strip().lower()] = v.strip()
        want = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode()
        self.accept_ok = self.headers.get("sec-websocket-accept") == want

    def _need(self, n):
        while len(self.buf) < n:
            d = self.sock.recv(1 << 20)
            if not d:
                raise EOFError("closed mid-frame")
            self.buf += d

    def send_frame(self, opcode, payload):
        n = len(payload)
        b0 = 0x80 | opcode
        if n < 126:
            hdr = struct.pack("!BB", b0, 0x80 | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", b0, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", b0, 0x80 | 127, n)
        key = os.urandom(4)
        self.sock.sendall(hdr + key + mask_bytes(payload, key))

    def recv_frame(self):
        """One whole message (fragments joined): (opcode, payload)."""
        opcode, out = None, bytearray()
        while True:
            self._need(2)
            b0, b1 = self.buf[0], self.buf[1]
            n = b1 & 0x7F
            off = 2
            if n == 126:
                self._need(4)
                n = struct.unpack("!H", self.buf[2:4])[0]
                off = 4
            elif n == 127:
                self._need(10)
                n = struct.unpack("!Q", self.buf[2:10])[0]
                off = 10
            if b1 & 0x80:
                raise ValueError("a server frame must not be masked")
            self._need(off + n)
            payload = bytes(self.buf[off:off + n])
            del self.buf[:off + n]
            if opcode is None:
                opcode = b0 & 0x0F
            out += payload
            if b0 & 0x80:
                return opcode, bytes(out)

    def close_handshake(self):
        """Sends close 1000; returns (server's close code, saw TCP EOF)."""
        self.send_frame(0x8, struct.pack("!H", 1000) + b"bye")
        op, payload = self.recv_frame()
        code = struct.unpack("!H", payload[:2])[0] if op == 0x8 and len(payload) >= 2 else None
        self.sock.settimeout(5)
        eof = False
        try:
            eof = self.sock.recv(1) == b"" and not self.buf
        except OSError:
            eof = False
        self.sock.close()
        return code, eof


# ---------------------------------------------------------------- setup

def mock_handler(req):
    if req.path == "/ws/forbid":
        return h.Response(403, b"no upgrade for you", [("Content-Type", "text/plain")])
    if req.path == "/ws/ok":
        return h.Response(200, b"plain answer", [("Content-Type", "text/plain")])
    return h.json_response(req.summary())


def make_certs():
    """A test CA and a certificate for ws.test and 127.0.0.1, made by the openssl CLI."""
    d = h.new_tmpdir("certs")
    h.make_ca(d, "ca")
    h.make_leaf(d, "ws", "ws.test", "DNS:ws.test,IP:127.0.0.1")
    return {k: os.path.join(d, k) for k in ("ca.crt", "ws.crt", "ws.key")}


def setup(t):
    S["certs"] = certs = make_certs()
    S["mock"] = mock = h.MockUpstream(mock_handler, "mock")
    S["early"] = early = RawUpstream(switch_then_echo_early, "early")
    S["half"] = half = RawUpstream(switch_then_halfclose, "half")
    S["idle"] = idle = RawUpstream(switch_then_idle, "idle")
    S["unasked"] = unasked = RawUpstream(switch_unasked, "unasked")
    proc, node_port = start_node_ws()
    S["node"] = Proc(proc)
    proc, node_tls_port = start_node_ws(certs["ws.crt"], certs["ws.key"])
    S["node_tls"] = Proc(proc)
    cfg = """\
workers: 1
shutdown_timeout: 5s
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http, idle_timeout: 60s }
  - { name: short, listen: 127.0.0.1:0, protocol: http, idle_timeout: 1s }
  - name: secure
    listen: 127.0.0.1:0
    protocol: http
    tls: { certificates: [ { cert: %s, key: %s } ] }
upstreams:
  - { name: mock, targets: [ { address: %s } ] }
  - { name: early, targets: [ { address: %s } ] }
  - { name: half, targets: [ { address: %s } ] }
  - { name: idle, targets: [ { address: %s } ] }
  - { name: unasked, targets: [ { address: %s } ] }
  - { name: node, targets: [ { address: 127.0.0.1:%d } ] }
  - { name: node-tls, targets: [ { address: 127.0.0.1:%d, tls: { ca: %s, sni: ws.test } } ] }
routes:
  - { name: echo-tls, match: { paths: [/echotls] }, upstream: node-tls, upgrade: [websocket] }
  - { name: ws-mock, match: { paths: [/ws/] }, upstream: mock, upgrade: [WebSocket] }
  - { name: any, match: { paths: [/any/] }, upstream: mock, upgrade: ["*"] }
  - { name: plain, match: { paths: [/plain/] }, upstream: mock }
  - { name: early, match: { paths: [/early/] }, upstream: early, upgrade: [websocket] }
  - { name: half, match: { paths: [/half/] }, upstream: half, upgrade: [websocket] }
  - { name: idle, match: { paths: [/idle/] }, upstream: idle, upgrade: [websocket] }
  - { name: unasked, match: { paths: [/unasked/] }, upstream: unasked }
  - { name: echo, match: { paths: [/echo] }, upstream: node, upgrade: [websocket] }
  - { name: echo-plain, match: { paths: [/nows] }, upstream: node }
lua_routes: [%s]
"""
    lua = os.path.join(h.new_tmpdir("lua"), "routes.lua")
    with open(lua, "w") as f:
        f.write('return { { name = "lua-ws", match = { paths = { "/luaws" } }, upstream = "node",'
                ' upgrade = { "WebSocket" } } }\n')
    cfg %= (certs["ws.crt"], certs["ws.key"], mock.address, early.address, half.address, idle.address,
            unasked.address, node_port, node_tls_port, certs["ca.crt"], lua)
    S["sl"] = h.start_sluice(cfg, suite=t)


def upgrade_req(path, extra=b"", host=b"127.0.0.1"):
    return (b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            % (path.encode(), host)) + extra


SECOND = b"GET /ws/second HTTP/1.1\r\nHost: second\r\n\r\n"


# ---------------------------------------------------------------- tests

def test_refused_upgrade_stays_http(t):
    sl, mock = S["sl"], S["mock"]
    for path, status in (("/ws/forbid", 403), ("/ws/ok", 200)):
        n0 = len(mock.requests)
        c = h.Client(sl.port())
        c.send(upgrade_req(path, SECOND))  # one write: the second request right behind
        r1 = c.read_response()
        t.check("%s: the upgrade request gets the upstream's %d" % (path, status), r1.status == status,
                status, r1.status)
        try:
            r2 = c.read_response()
            second = r2.status, r2.json().get("path") if r2.status == 200 else None
        except (h.Incomplete, h.ReadTimeout, h.ParseError):
            second = ("closed", c.closed_how)
        c.close()
        ok = second == (200, "/ws/second") or second[0] == "closed"
        t.check("%s: the pipelined request is answered as its own request (or the connection closed)"
                % path, ok, "(200, '/ws/second') or closed", second)
        mock.wait_requests(n0 + 2, timeout=2)
        reqs = mock.requests[n0:]
        up = [r for r in reqs if r.path == path]
        t.check("%s: the upstream got the upgrade as an upgrade (route allows websocket)" % path,
                len(up) == 1 and up[0].header("Upgrade") == "websocket"
                and "upgrade" in (up[0].header("Connection") or "").lower(),
                "Upgrade: websocket, Connection: upgrade",
                up[0].headers if up else None)
        sec = [r for r in reqs if r.path == "/ws/second"]
        t.check("%s: the upstream saw the pipelined bytes as a separate, rebuilt request or not at all"
                % path, (len(sec) == 1 and sec[0].header("X-Request-ID") and sec[0].header("X-Forwarded-For"))
                or (not sec and second[0] == "closed"),
                "one parsed request with X-Request-ID, or none", [r.summary() for r in reqs])
        if up:
            raw = bytes(up[0].conn.data)
            t.check("%s: no raw client bytes on the upstream connection" % path,
                    b"Host: second\r\n\r\n" not in raw, "absent", raw[-200:])


def test_101_tunnels_pipelined_bytes(t):
    sl, early = S["sl"], S["early"]
    c = h.Client(sl.port())
    c.send(upgrade_req("/early/x", SECOND))
    r = c.read_response(skip_interim=False)
    t.check("101 reaches the client", r.status == 101, 101, r.status)
    t.check("the 101 carries Upgrade and Connection: upgrade and the upstream's other headers",
            (r.header("Upgrade") or "").lower() == "websocket"
            and "upgrade" in (r.header("Connection") or "").lower() and r.header("X-Up") == "switched",
            "Upgrade: websocket, Connection: upgrade, X-Up", r.headers)
    rec = early.wait_conns(1)
    want = b"early-bytes;upstream-saw-%d-bytes" % len(SECOND)
    got = bytearray(c.reader.buf)
    c.reader.buf.clear()
    deadline = time.monotonic() + 5
    c.sock.settimeout(0.2)
    while len(got) < len(want) and time.monotonic() < deadline:
        try:
            d = c.sock.recv(65536)
        except socket.timeout:
            continue
        if not d:
            break
        got += d
    t.check("the upstream's bytes after the 101 head come first, then the tunnel's",
            bytes(got) == want, want, bytes(got))
    t.check("the pipelined request's bytes reached the upstream raw, after the upgrade head",
            rec is not None and bytes(rec.data) == SECOND, SECOND, rec and bytes(rec.data))
    t.check("the upstream head carried the upgrade",
            rec is not None and b"Upgrade: websocket\r\n" in rec.head
            and b"Connection: upgrade\r\n" in rec.head and b"X-Forwarded-For:" in rec.head,
            "Upgrade + Connection: upgrade + X-Forwarded-For", rec and rec.head)
    c.close()
    rec.done.wait(5)
    t.check("closing the client closes the tunnel's upstream side", "eof" in rec.events, "eof",
            rec.events)


def test_101_unasked_is_502(t):
    sl = S["sl"]
    c = h.Client(sl.port())
    c.send(upgrade_req("/unasked/x"))
    r = c.read_response(skip_interim=False)
    t.check("a 101 to a request not forwarded as an upgrade is a 502", r.status == 502, 502, r.status)
    rec = S["unasked"].wait_conns(1)
    t.check("... and that request went up without Upgrade",
            rec is not None and b"upgrade" not in rec.head.lower(), "no upgrade",
            rec and rec.head)
    c.close()


def test_h2c_never_forwarded(t):
    sl, mock = S["sl"], S["mock"]
    for path in ("/any/curl-http2", "/plain/curl-http2"):
        n0 = len(mock.requests)
        p = subprocess.run(["curl", "-sS", "--http2", "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
                            "http://127.0.0.1:%d%s" % (sl.port(), path)],
                           capture_output=True, text=True, timeout=20)
        t.check("curl --http2 %s: answered over HTTP/1.1" % path, p.stdout.strip() == "200 1.1",
                "200 1.1", (p.stdout, p.stderr))
        mock.wait_requests(n0 + 1, timeout=2)
        reqs = mock.requests[n0:]
        raw = b"".join(bytes(r.conn.data) for r in reqs)
        t.check("curl --http2 %s: the upstream saw no Upgrade: h2c, no HTTP2-Settings" % path,
                len(reqs) == 1 and not reqs[0].header("Upgrade") and not reqs[0].header("HTTP2-Settings")
                and b"h2c" not in raw.lower() and b"http2-settings" not in raw.lower(),
                "neither", [r.headers for r in reqs])
    # h2c with HTTP2-Settings not listed in Connection, on the route that forwards anything
    n0 = len(mock.requests)
    r = h.request(sl.port(), "GET", "/any/raw-two",
                  headers=[("Connection", "Upgrade"), ("Upgrade", "h2c"), ("HTTP2-Settings", "AAMAAABkAAQAoAAAAAIAAAAA")])
    mock.wait_requests(n0 + 1, timeout=2)
    reqs = mock.requests[n0:]
    t.check("Upgrade: h2c + unlisted HTTP2-Settings on upgrade: [\"*\"]: an ordinary request upstream",
            r.status == 200 and len(reqs) == 1 and not reqs[0].header("Upgrade")
            and not reqs[0].header("HTTP2-Settings") and "upgrade" not in (reqs[0].header("Connection") or "").lower(),
            "no Upgrade/HTTP2-Settings/Connection: upgrade", [x.headers for x in reqs])
    # the same route does forward another protocol: "*" is live, h2c alone is refused
    n0 = len(mock.requests)
    r = h.request(sl.port(), "GET", "/any/foo", headers=[("Connection", "Upgrade"), ("Upgrade", "foo/2")])
    mock.wait_requests(n0 + 1, timeout=2)
    reqs = mock.requests[n0:]
    t.check("upgrade: [\"*\"] forwards Upgrade: foo/2", len(reqs) == 1 and reqs[0].header("Upgrade") == "foo/2",
            "foo/2", [x.headers for x in reqs])


def test_upgrade_stripped_without_route_optin(t):
    sl, mock = S["sl"], S["mock"]
    n0 = len(mock.requests)
    c = h.Client(sl.port())
    c.send(upgrade_req("/plain/ws"))
    r = c.read_response()
    c.close()
    mock.wait_requests(n0 + 1, timeout=2)
    reqs = mock.requests[n0:]
    t.check("Upgrade: websocket on a route without upgrade: an ordinary 200", r.status == 200, 200, r.status)
    t.check("... and the upstream saw no Upgrade and no Connection: upgrade",
            len(reqs) == 1 and not reqs[0].header("Upgrade")
            and "upgrade" not in (reqs[0].header("Connection") or "").lower()
            and reqs[0].header("Sec-WebSocket-Key") == "dGhlIHNhbXBsZSBub25jZQ==",
            "stripped (end-to-end headers kept)", [x.headers for x in reqs])
    ws = WSClient(sl.port(), "/nows")
    t.check("a real WebSocket server behind a route without upgrade: answers as plain HTTP (426)",
            ws.status == 426, 426, ws.status)
    ws.sock.close()


def test_websocket_echo(t):
    sl = S["sl"]
    exchange(t, WSClient(sl.port(), "/echo"), "ws://")


def test_websocket_wss(t):
    """wss:// — TLS from the client to sluice, and TLS from sluice to a Node wss server."""
    sl = S["sl"]
    ctx = ssl.create_default_context(cafile=S["certs"]["ca.crt"])
    ws = WSClient(sl.port("secure"), "/echotls", tls=ctx)
    t.check("wss:// to sluice, TLS to the upstream too: the client saw sluice's certificate",
            ws.sock.getpeercert()["subject"][0][0][1] == "ws.test", "ws.test", ws.sock.getpeercert()["subject"])
    exchange(t, ws, "wss:// (TLS both sides)")
    ws = WSClient(sl.port("secure"), "/echo", tls=ctx)
    exchange(t, ws, "wss:// to a plain ws upstream", count=200)


def exchange(t, ws, label, count=1000):
    t.check(label + ": WebSocket handshake through sluice: 101", ws.status == 101, 101, ws.status)
    t.check(label + ": Sec-WebSocket-Accept matches the key", ws.accept_ok, True, ws.headers)
    rnd = random.Random(6)
    sizes = [1, 2, 125, 126, 127, 65535, 65536, 65537, 1 << 20]
    while len(sizes) < count:
        sizes.append(max(1, int(2 ** rnd.uniform(0, 20))))
    rnd.shuffle(sizes)
    sizes[0], sizes[-1] = 125, 1 << 20
    blob = os.urandom((1 << 20) + 4096)
    bad = []
    t0 = time.monotonic()
    for i, n in enumerate(sizes):
        off = rnd.randrange(0, 4096)
        payload = blob[off:off + n]
        ws.send_frame(0x2, payload)
        op, back = ws.recv_frame()
        if op != 0x2 or back != payload:
            bad.append((i, n, op, len(back)))
            if len(bad) > 5:
                break
    t.info("%s: %d messages, %.1f MiB each way, in %.1f s" % (label, count, sum(sizes) / 1048576,
                                                              time.monotonic() - t0))
    t.check(label + ": %d binary messages (1 B .. 1 MiB, 125/126/65535/65536 included) echoed byte for byte"
            % count,
            not bad and {125, 126, 65535, 65536, 1 << 20} <= set(sizes), "none wrong", bad)
    ws.send_frame(0x1, "text ✓".encode())
    op, back = ws.recv_frame()
    t.check(label + ": a text message too", op == 0x1 and back == "text ✓".encode(), "text ✓", (op, back))
    code, eof = ws.close_handshake()
    t.check(label + ": clean close: the server's close frame (1000) and then TCP EOF", code == 1000 and eof,
            (1000, True), (code, eof))


def test_lua_route(t):
    ws = WSClient(S["sl"].port(), "/luaws")
    t.check("a lua_routes route with upgrade = { \"WebSocket\" } tunnels too", ws.status == 101 and ws.accept_ok,
            101, (ws.status, ws.headers))
    if ws.status == 101:
        ws.send_frame(0x2, b"x" * 70000)
        op, back = ws.recv_frame()
        t.check("... and echoes", back == b"x" * 70000, 70000, len(back))
    ws.sock.close()


def test_half_close(t):
    sl, half = S["sl"], S["half"]
    c = h.Client(sl.port(), timeout=10)
    c.send(upgrade_req("/half/x"))
    r = c.read_response(skip_interim=False)
    t.check("half-close: 101", r.status == 101, 101, r.status)
    payload = os.urandom(300000)
    c.send(payload)
    c.shutdown_write()
    data, how = c.read_until_close(timeout=10)
    rec = half.wait_conns(1)
    rec.done.wait(5)
    t.check("the upstream read the client's bytes to EOF", bytes(rec.data) == payload,
            len(payload), len(rec.data))
    t.check("after its half-close the client still gets the upstream's whole answer, then EOF",
            data == getattr(rec, "answer", None) and how == "eof", (len(getattr(rec, "answer", None) or b""), "eof"),
            (len(data), how))
    t.check("the upstream got EOF once the client's side ended too", rec.events[-1:] == ["eof"], "eof",
            rec.events)


def test_idle_timeout_and_metrics(t):
    sl, idle = S["sl"], S["idle"]
    c = h.Client(sl.port("short"), timeout=10)
    c.send(upgrade_req("/idle/x"))
    r = c.read_response(skip_interim=False)
    t.check("idle: 101", r.status == 101, 101, r.status)
    # traffic every 0.5 s for 2.5 s keeps a 1 s idle timeout away
    alive = True
    for _ in range(5):
        time.sleep(0.5)
        try:
            c.send(b"ping")
            got = c.sock.recv(16)
        except OSError:
            got = b""
        alive = alive and got == b"pong"
    t.check("a tunnel with traffic outlives the idle timeout", alive, True, alive)
    t0 = time.monotonic()
    data, how = c.read_until_close(timeout=5)
    waited = time.monotonic() - t0
    t.check("an idle tunnel is closed after the listener's idle_timeout (1s)",
            how in ("eof", "reset") and 0.7 < waited < 3.0, "closed after ~1s", (how, round(waited, 2)))
    rec = idle.wait_conns(1)
    rec.done.wait(5)
    t.check("... and its upstream connection too", rec.events[-1:] == ["eof"], "eof", rec.events)
    _, m = sl.metrics()
    n101 = h.metric_values(m, "sluice_requests_total", route="idle", code="101")
    t.check("the upgrade is counted as sluice_requests_total{route=idle,code=101}", n101 == [1.0], [1.0], n101)
    dsum = h.metric_values(m, "sluice_request_duration_seconds_sum", route="idle")
    t.check("its duration is observed at the 101, not over the tunnel's ~3.5 s",
            len(dsum) == 1 and dsum[0] < 1.0, "< 1 s", dsum)
    e101 = h.metric_values(m, "sluice_requests_total", route="echo", code="101")
    t.check("the WebSocket route counts its 101 too", e101 == [2.0], [2.0], e101)  # ws:// and wss:// to /echo


def test_drain_closes_tunnels(t):
    up = RawUpstream(switch_then_idle, "drain")
    sl = h.start_sluice("""\
workers: 1
shutdown_timeout: 1500ms
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0, protocol: http, idle_timeout: 60s } ]
upstreams: [ { name: u, targets: [ { address: %s } ] } ]
routes: [ { name: r, upstream: u, upgrade: [websocket] } ]
""" % up.address, name="drain", suite=t)
    c = h.Client(sl.port(), timeout=10)
    c.send(upgrade_req("/d"))
    r = c.read_response(skip_interim=False)
    t.check("drain: 101", r.status == 101, 101, r.status)
    sl.signal(15)
    t0 = time.monotonic()
    time.sleep(0.5)
    c.send(b"ping")
    got = c.sock.recv(16)
    t.check("a tunnel keeps moving bytes while the gateway drains", got == b"pong", b"pong", got)
    data, how = c.read_until_close(timeout=5)
    waited = time.monotonic() - t0
    t.check("... and is closed at shutdown_timeout (1.5s), the process exiting 0",
            how in ("eof", "reset") and 1.2 < waited < 3.5 and sl.wait(5) == 0, ("closed at ~1.5s", 0),
            (how, round(waited, 2), sl.returncode))
    c.close()


t.run(setup, test_refused_upgrade_stays_http, test_101_tunnels_pipelined_bytes, test_101_unasked_is_502,
      test_h2c_never_forwarded, test_upgrade_stripped_without_route_optin, test_websocket_echo, test_websocket_wss,
      test_lua_route, test_half_close, test_idle_timeout_and_metrics, test_drain_closes_tunnels)
