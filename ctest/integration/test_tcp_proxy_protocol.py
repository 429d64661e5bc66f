"""L4 TCP proxy (issue 7), acceptance 4: the PROXY protocol against real peers.

  1. proxy_protocol.send v1 and v2: the exact header bytes (a raw listener records them),
     then nginx with `listen ... proxy_protocol` behind sluice answers with
     $proxy_protocol_addr and $proxy_protocol_port: the client's address and port;
  2. haproxy with `send-proxy-v2` in front of a listener with accept_proxy_protocol (from
     127.0.0.1) that sends v2 on to nginx: nginx sees the address and port haproxy's
     client had, not haproxy's;
  3. a client in `from` sending its own v1 header: its source goes on to the upstream;
     a trusted peer without a header, or with a malformed one, is closed and reaches no
     upstream;
  4. a PROXY header (v1 or v2) from an address not in `from` closes the connection, and no
     upstream connection is made; the same client without a header is served;
  5. http listeners: a trusted peer's header is taken off before the first request and its
     source is the client for X-Forwarded-For and ip-restriction, on every request of the
     connection (haproxy's send-proxy-v2 from a client bound to 127.0.0.5 included); no
     header from a trusted peer, or a header from an untrusted one, closes the connection
     and no request reaches the upstream; an unfinished header is closed at header_timeout
     without an answer (a 408 would be HTTP to a peer speaking the PROXY protocol).
"""

import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import test_tcp_proxy as tp  # noqa: E402

V2SIG = b"\r\n\r\n\x00\r\nQUIT\n"
S = {}


class RawListener(h.TCPServer):
    """Accepts connections and keeps the first bytes of each (what a PROXY sender wrote)."""

    def __init__(self):
        self.got = []
        super().__init__(threaded=False, backlog=16)

    def handle(self, c):
        c.settimeout(2)
        data = b""
        try:
            while len(data) < 200:
                d = c.recv(200)
                if not d:
                    break
                data += d
        except OSError:
            pass
        self.got.append(data)


def start_tool(name, conf_for, argv_for):
    """Runs nginx or haproxy on a free port: conf_for(dir, port) is its config text,
    argv_for(dir, conf_path) its command line. Returns (Popen, port)."""
    d = h.new_tmpdir(name)
    sk, port = h.refused_port()
    sk.close()
    conf = os.path.join(d, name + ".conf")
    with open(conf, "w") as f:
        f.write(conf_for(d, port))
    proc = subprocess.Popen(argv_for(d, conf), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=h._die_with_parent)
    return proc, port


def start_nginx():
    return start_tool("nginx", lambda d, port: (
        "worker_processes 1;\nmaster_process off;\ndaemon off;\npid %s/nginx.pid;\nerror_log %s/nginx.err warn;\n"
        "events { worker_connections 256; }\n"
        "http {\n    access_log off;\n    default_type text/plain;\n"
        "    server {\n        listen 127.0.0.1:%d proxy_protocol;\n"
        "        location / { return 200 \"$proxy_protocol_addr $proxy_protocol_port\\n\"; }\n"
        "    }\n}\n" % (d, d, port)),
        lambda d, conf: ["nginx", "-p", d, "-c", conf, "-e", os.path.join(d, "nginx.err")])


def start_haproxy(backend_port):
    return start_tool("haproxy", lambda d, port: (
        "global\n    nbthread 1\n    maxconn 256\n"
        "defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n"
        "frontend f\n    bind 127.0.0.1:%d\n    default_backend b\n"
        "backend b\n    server s1 127.0.0.1:%d send-proxy-v2\n" % (port, backend_port)),
        lambda d, conf: ["haproxy", "-db", "-f", conf])


class Proc:
    """A peer process (nginx, haproxy) the harness stops at exit."""

    def __init__(self, proc):
        self.proc = proc
        h._register(self)

    def stop(self):
        tp.stop_process(self)

    kill = stop


def get(port, preface=b"", source="127.0.0.1"):
    """An HTTP GET after `preface` bytes; returns (body or None, the client's own port)."""
    c = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    me = c.getsockname()[1]
    c.sendall(preface + b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    data = b""
    try:
        while True:
            d = c.recv(4096)
            if not d:
                break
            data += d
    except OSError:
        pass
    c.close()
    if b"\r\n\r\n" not in data:
        return None, me
    return data.split(b"\r\n\r\n", 1)[1], me


def setup(t):
    for tool in ("nginx", "haproxy"):
        if not shutil.which(tool):
            t.check("%s is installed (scripts/install-deps)" % tool, False, tool, None)
    S["raw"] = RawListener()
    S["peer"] = tp.Peer()
    S["mock"] = h.MockUpstream(lambda req: h.Response(200, (req.header("X-Forwarded-For") or "").encode()),
                               "mock")
    if shutil.which("nginx"):
        p, S["nginx"] = start_nginx()
        Proc(p)
        t.check("nginx started", h.wait_port(S["nginx"], 10), True, False)
    cfg = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: raw1, listen: 127.0.0.1:0, protocol: tcp, upstream: raw, proxy_protocol: { send: v1 } }
  - { name: raw2, listen: 127.0.0.1:0, protocol: tcp, upstream: raw, proxy_protocol: { send: v2 } }
  - { name: v1, listen: 127.0.0.1:0, protocol: tcp, upstream: nginx, proxy_protocol: { send: v1 } }
  - { name: v2, listen: 127.0.0.1:0, protocol: tcp, upstream: nginx, proxy_protocol: { send: v2 } }
  - { name: acc, listen: 127.0.0.1:0, protocol: tcp, upstream: nginx, proxy_protocol: { send: v2 },
      accept_proxy_protocol: { from: [127.0.0.1] } }
  - { name: trusted, listen: 127.0.0.1:0, protocol: tcp, upstream: peer,
      accept_proxy_protocol: { from: ["127.0.0.0/8", "::1"] }, header_timeout: 1s }
  - { name: strict, listen: 127.0.0.1:0, protocol: tcp, upstream: peer,
      accept_proxy_protocol: { from: [10.0.0.0/8] } }
  - { name: web, listen: 127.0.0.1:0, accept_proxy_protocol: { from: [127.0.0.1] }, header_timeout: 1s }
  - { name: webstrict, listen: 127.0.0.1:0, accept_proxy_protocol: { from: [10.0.0.0/8] } }
upstreams:
  - { name: raw, targets: [ { address: 127.0.0.1:%d } ] }
  - { name: nginx, targets: [ { address: 127.0.0.1:%d } ] }
  - { name: peer, targets: [ { address: %s } ] }
  - { name: mock, targets: [ { address: %s } ] }
routes:
  - { name: denied, match: { paths: [/denied] }, upstream: mock,
      plugins: [ { name: ip-restriction, config: { deny: [203.0.113.0/24] } } ] }
  - { name: all, match: { paths: [/] }, upstream: mock }
""" % (S["raw"].port, S.get("nginx", 1), S["peer"].address, S["mock"].address)
    S["gw"] = h.start_sluice(cfg, suite=t)


def test_send_bytes(t):
    gw, raw = S["gw"], S["raw"]
    for name in ("raw1", "raw2"):
        n = len(raw.got)
        c = socket.create_connection(("127.0.0.1", gw.port(name)), timeout=5)
        me = c.getsockname()[1]
        c.sendall(b"hello")
        c.shutdown(socket.SHUT_WR)
        c.recv(10)
        c.close()
        deadline = time.monotonic() + 3
        while len(raw.got) == n and time.monotonic() < deadline:
            time.sleep(0.02)
        got = raw.got[n] if len(raw.got) > n else b""
        lport = gw.port(name)
        if name == "raw1":
            want = b"PROXY TCP4 127.0.0.1 127.0.0.1 %d %d\r\nhello" % (me, lport)
        else:
            want = (V2SIG + b"\x21\x11\x00\x0c" + socket.inet_aton("127.0.0.1") * 2
                    + struct.pack(">HH", me, lport) + b"hello")
        t.check("[%s] the upstream gets the PROXY header, then the client's bytes" % name, got == want,
                want, got)


def test_nginx(t):
    if "nginx" not in S:
        return
    for name in ("v1", "v2"):
        body, me = get(S["gw"].port(name))
        t.check("[%s] nginx (listen proxy_protocol) sees the client's address and port" % name,
                body == b"127.0.0.1 %d\n" % me, b"127.0.0.1 %d\n" % me, body)


def test_haproxy_in_front(t):
    if "nginx" not in S or not shutil.which("haproxy"):
        return
    p, hport = start_haproxy(S["gw"].port("acc"))
    Proc(p)
    t.check("haproxy started", h.wait_port(hport, 10), True, False)
    time.sleep(0.2)
    for i in range(3):
        body, me = get(hport, source="127.0.0.5")
        t.check("haproxy send-proxy-v2 -> sluice -> v2 -> nginx: the upstream sees haproxy's client "
                "(127.0.0.5:%d), not haproxy" % me, body == b"127.0.0.5 %d\n" % me,
                b"127.0.0.5 %d\n" % me, body)
    p, hport = start_haproxy(S["gw"].port("web"))
    Proc(p)
    t.check("haproxy in front of the http listener started", h.wait_port(hport, 10), True, False)
    time.sleep(0.2)
    body, me = get(hport, source="127.0.0.5")
    t.check("haproxy send-proxy-v2 -> http listener: X-Forwarded-For is haproxy's client 127.0.0.5",
            body == b"127.0.0.5", b"127.0.0.5", body)


def test_trusted_client_header(t):
    if "nginx" in S:
        body, _ = get(S["gw"].port("acc"), b"PROXY TCP4 203.0.113.7 198.51.100.1 4242 80\r\n")
        t.check("a trusted client's v1 source goes on to the upstream", body == b"203.0.113.7 4242\n",
                b"203.0.113.7 4242\n", body)
        v2 = (V2SIG + b"\x21\x21\x00\x24" + socket.inet_pton(socket.AF_INET6, "2001:db8::9")
              + socket.inet_pton(socket.AF_INET6, "2001:db8::1") + struct.pack(">HH", 5353, 443))
        body, _ = get(S["gw"].port("acc"), v2)
        t.check("a trusted client's v2 IPv6 source goes on to the upstream", body == b"2001:db8::9 5353\n",
                b"2001:db8::9 5353\n", body)
    peer = S["peer"]
    for what, preface in (("no header", b"ECHO\n"), ("a malformed header", b"PROXY TCP4 1.2.3 4.5.6.7 1 2\r\n"),
                          ("a v2 header with an unknown command",
                           V2SIG + b"\x2f\x11\x00\x0c" + b"\x00" * 12)):
        before = peer.stats()["conns"]
        c = h.Client(S["gw"].port("trusted"))
        c.send(preface + b"ECHO\n")
        data, how = c.read_until_close(3)
        after = peer.stats()["conns"]
        t.check("a trusted peer with %s is closed" % what, how in ("eof", "reset") and data == b"",
                "closed, nothing", (how, data))
        t.check("... and reaches no upstream (%s)" % what, after == before + 1, before + 1, after)
    c = h.Client(S["gw"].port("trusted"))
    c.send(b"PROXY TCP4 1.2.3.4")  # never finished
    t0 = time.monotonic()
    data, how = c.read_until_close(4)
    took = time.monotonic() - t0
    t.check("a trusted peer's unfinished header is closed at header_timeout (1 s)",
            how in ("eof", "reset") and 0.7 < took < 2.5, "closed after ~1 s", (how, round(took, 2)))
    t.check("... and logged as a missing header", h.wait_until(
        lambda: "listener trusted: closing the connection from 127.0.0.1:%d: no complete PROXY protocol header"
        % c.sock.getsockname()[1] in S["gw"].log(), 2), "logged", S["gw"].log()[-600:])
    t.check("the refusals are logged", "closing the connection from 127.0.0.1" in S["gw"].log(), "logged",
            S["gw"].log()[-600:])


def test_untrusted(t):
    peer, gw = S["peer"], S["gw"]
    for what, preface in (("v1", b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"),
                          ("v2", V2SIG + b"\x21\x11\x00\x0c" + b"\x01" * 12),
                          ("v1 in pieces", b"PROX")):
        before = peer.stats()["conns"]
        c = h.Client(gw.port("strict"))
        c.send(preface)
        try:
            if what == "v1 in pieces":
                time.sleep(0.2)
                c.send(b"Y TCP4 1.2.3.4 5.6.7.8 1 2\r\n")
            c.send(b"ECHO\nhello")
        except OSError:
            pass  # already reset: what is checked next
        data, how = c.read_until_close(3)
        after = peer.stats()["conns"]
        t.check("a %s PROXY header from a peer outside `from` closes the connection" % what,
                how in ("eof", "reset") and data == b"", "closed", (how, data))
        t.check("... and reaches no upstream (%s)" % what, after == before + 1, before + 1, after)
    c = h.Client(gw.port("strict"))
    c.send(b"ECHO\nhello")
    c.shutdown_write()
    data, how = c.read_until_close(3)
    t.check("the same peer without a header is served", data == b"hello" and how == "eof", b"hello",
            (data, how))
    t.check("the untrusted header is logged", "not in accept_proxy_protocol.from" in gw.log(), "logged",
            gw.log()[-600:])


def test_http_listener(t):
    gw, mock = S["gw"], S["mock"]
    hdr = b"PROXY TCP4 203.0.113.7 198.51.100.1 4242 80\r\n"
    c = h.Client(gw.port("web"))
    c.send(hdr[:9])
    time.sleep(0.1)
    c.send(hdr[9:] + h.build_request("GET", "/a"))
    r1 = c.read_response()
    c.send(h.build_request("GET", "/b") + h.build_request("GET", "/denied"))
    r2, r3 = c.read_response(), c.read_response()
    c.close()
    t.check("http: a trusted peer's header (in two pieces) is taken off; X-Forwarded-For is its source",
            (r1.status, r1.body) == (200, b"203.0.113.7"), (200, b"203.0.113.7"), (r1.status, r1.body))
    t.check("http: and so for the next request on the connection", (r2.status, r2.body) == (200, b"203.0.113.7"),
            (200, b"203.0.113.7"), (r2.status, r2.body))
    t.check("http: ip-restriction judges the PROXY source (deny 203.0.113.0/24 -> 403)", r3.status == 403,
            403, r3.status)
    v2 = (V2SIG + b"\x21\x21\x00\x24" + socket.inet_pton(socket.AF_INET6, "2001:db8::9")
          + socket.inet_pton(socket.AF_INET6, "2001:db8::1") + struct.pack(">HH", 5353, 443))
    c = h.Client(gw.port("web"))
    c.send(v2 + h.build_request("GET", "/v2"))
    r = c.read_response()
    c.close()
    t.check("http: a v2 header's IPv6 source", (r.status, r.body) == (200, b"2001:db8::9"), (200, b"2001:db8::9"),
            (r.status, r.body))
    for name, preface, what in (("web", b"", "a trusted peer without a header"),
                                ("web", b"PROXY TCP4 1.2.3.4\r\n", "a trusted peer's malformed header"),
                                ("webstrict", hdr, "a header from a peer outside `from`")):
        n = len(mock.requests)
        c = h.Client(gw.port(name))
        try:
            c.send(preface + h.build_request("GET", "/x"))
        except OSError:
            pass
        data, how = c.read_until_close(3)
        t.check("http: %s: closed without an answer" % what, how in ("eof", "reset") and data == b"",
                "closed", (how, data[:100]))
        t.check("http: %s: no request reached the upstream" % what, len(mock.requests) == n, n,
                len(mock.requests))
    for preface, what in ((b"PROXY TCP4 1.2.3.4", "an unfinished v1 header"),
                          (V2SIG + b"\x21\x11\x00\x0c\x01", "an unfinished v2 header")):
        c = h.Client(gw.port("web"))
        c.send(preface)
        t0 = time.monotonic()
        data, how = c.read_until_close(4)
        took = time.monotonic() - t0
        t.check("http: a trusted peer's %s is closed at header_timeout (1 s) without an answer (no 408: "
                "it speaks the PROXY protocol, not HTTP)" % what,
                how in ("eof", "reset") and data == b"" and 0.7 < took < 2.5, "closed, nothing, after ~1 s",
                (how, data[:60], round(took, 2)))
    t.check("http: the unfinished header is logged", "no complete PROXY protocol header within header_timeout"
            in gw.log(), "logged", gw.log()[-600:])
    r = h.request(gw.port("webstrict"), "GET", "/plain")
    t.check("http: an untrusted peer without a header is served", (r.status, r.body) == (200, b"127.0.0.1"),
            (200, b"127.0.0.1"), (r.status, r.body))


if __name__ == "__main__":
    t = h.Suite("tcp_proxy_protocol", budget=58)
    t.run(setup, test_send_bytes, test_nginx, test_haproxy_in_front, test_trusted_client_header,
          test_untrusted, test_http_listener)
