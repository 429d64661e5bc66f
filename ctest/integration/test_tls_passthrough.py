"""TLS passthrough routed by SNI on protocol: tcp listeners (issue 6 item 5).

A test CA (openssl CLI) signs a.test, b.test and default.test; three Python TLS servers
each hold one of those certificates, answer with their own name and record the server
names they were asked for and the connections they accepted. sluice never holds a key:

  1. curl --resolve a.test / b.test with --cacert: each name reaches its own backend and
     the certificate the client verified is that backend's (subject and SHA-256
     fingerprint); a wildcard entry routes too; a 3 MiB answer streams back intact (the
     splice path with `splice: auto`, the copy path with `splice: off`);
  2. a name no entry lists, and a ClientHello without SNI, go to the default upstream;
  3. on a listener without a default, those are closed and reach no backend, and so are
     bytes that are not TLS (plain HTTP), each counted in sluice_tcp_sni_total;
  4. a ClientHello trickled one byte at a time, and one re-cut into 40-byte TLS records,
     still route and complete their handshakes; a stalled ClientHello is closed after
     header_timeout;
  5. proxy_protocol.send still puts its header before the client's ClientHello;
  6. /status shows each listener's sni_routes.
Every check runs on both `splice: auto` and `splice: off` listeners where it applies.
"""

import hashlib
import os
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from test_tcp_proxy_protocol import RawListener  # noqa: E402 (keeps each connection's first bytes)

t = h.Suite("tls_passthrough", budget=90)
S = {}
BIG = 3 * 1024 * 1024
BIG_BODY = b"".join(h.pattern_blocks(BIG))


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True, timeout=30)


def make_pki(d):
    """A CA and one certificate per name, signed by it. Returns {name: (cert, key)}."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=sluice test CA", cwd=d)
    out = {}
    for name, sans in (("a.test", "DNS:a.test,DNS:*.a.test"), ("b.test", "DNS:b.test"),
                       ("default.test", "DNS:default.test")):
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name, cwd=d)
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write("subjectAltName=%s\n" % sans)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-out", name + ".pem", "-extfile", name + ".ext", cwd=d)
        out[name] = (os.path.join(d, name + ".pem"), os.path.join(d, name + ".key"))
    return out


def der_sha256(pem_path):
    with open(pem_path) as f:
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(f.read())).hexdigest()


class TLSBackend(h.TCPServer):
    """A TLS server with one certificate: answers `GET /` with its name and `GET /big` with
    BIG patterned bytes; records every accepted connection and every SNI it was sent."""

    def __init__(self, name, cert, key):
        self.name = name
        self.snis = []
        self.lock = threading.Lock()
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.ctx.sni_callback = self._on_sni
        super().__init__()

    def _on_sni(self, sslobj, server_name, ctx):
        with self.lock:
            self.snis.append(server_name)

    def handle(self, c):
        c.settimeout(10)
        try:
            s = self.ctx.wrap_socket(c, server_side=True)
        except ssl.SSLError:
            return
        req = b""
        while b"\r\n\r\n" not in req:
            d = s.recv(4096)
            if not d:
                return
            req += d
        path = req.split(b" ", 2)[1]
        body = BIG_BODY if path == b"/big" else self.name.encode()
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        s.close()

    def counts(self):
        with self.lock:
            return self.accepted, list(self.snis)


def client_ctx(verify=True):
    ctx = ssl.create_default_context(cafile=S["ca"])
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def tls_get(port, sni, path="/", verify=True, timeout=10):
    """GET over TLS through sluice with `sni` (None: no SNI). Returns (peer cert DER, body)."""
    ctx = client_ctx(verify and sni is not None)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname=sni) as s:
            der = s.getpeercert(binary_form=True)
            s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            data = h.recv_all(s)
    head, _, body = data.partition(b"\r\n\r\n")
    return der, body


def refused(port, sni, timeout=5):
    """True when a TLS handshake with `sni` through sluice fails (the session was closed)."""
    try:
        tls_get(port, sni, verify=False, timeout=timeout)
        return False
    except (OSError, ssl.SSLError):
        return True


def client_hello(sni):
    """The bytes of a real ClientHello for `sni`, and the SSLObject to finish it with."""
    return h.tls_client_hello(sni, client_ctx())


def finish_over(sock, obj, inc, out):
    """Completes the handshake of obj over sock, sends GET /, returns (cert DER, body)."""
    sock.settimeout(10)
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            pending = out.read()
            if pending:
                sock.sendall(pending)
            d = sock.recv(65536)
            if not d:
                raise OSError("closed during the handshake")
            inc.write(d)
    pending = out.read()
    if pending:
        sock.sendall(pending)
    obj.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.sendall(out.read())
    data = b""
    while True:
        try:
            data += obj.read(65536)
        except ssl.SSLWantReadError:
            d = sock.recv(65536)
            if not d:
                break
            inc.write(d)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            break
    return obj.getpeercert(binary_form=True), data.partition(b"\r\n\r\n")[2]


def as_records(hello, size):
    """The ClientHello's handshake message re-cut into TLS records of `size` bytes."""
    assert hello[0] == 22
    msg = hello[5:5 + int.from_bytes(hello[3:5], "big")]
    out = b""
    for i in range(0, len(msg), size):
        frag = msg[i:i + size]
        out += b"\x16\x03\x01" + len(frag).to_bytes(2, "big") + frag
    return out + hello[5 + len(msg):]


def closed_by_peer(sock, timeout):
    """Waits for EOF or a reset; returns the seconds it took, or None on timeout."""
    t0 = time.monotonic()
    sock.settimeout(timeout)
    try:
        while True:
            d = sock.recv(4096)
            if not d:
                return time.monotonic() - t0
    except ConnectionResetError:
        return time.monotonic() - t0
    except socket.timeout:
        return None


def backend_counts():
    return {n: b.counts() for n, b in S["be"].items()}


def setup(t):
    d = h.new_tmpdir("pki")
    certs = make_pki(d)
    S["ca"] = os.path.join(d, "ca.pem")
    S["fp"] = {n: der_sha256(c) for n, (c, _) in certs.items()}
    S["be"] = {n: TLSBackend(n, c, k) for n, (c, k) in certs.items()}
    S["raw"] = RawListener()
    up = lambda name, port: "  - { name: %s, targets: [ { address: 127.0.0.1:%d } ] }\n" % (name, port)  # noqa: E731
    routes = ("    sni_routes:\n"
              "      - { sni: [a.test, \"*.a.test\"], upstream: up_a }\n"
              "      - { sni: [B.Test], upstream: up_b }\n")
    cfg = ("workers: 2\n"
           "admin: { listen: 127.0.0.1:0 }\n"
           "listeners:\n"
           "  - name: auto\n    listen: 127.0.0.1:0\n    protocol: tcp\n    upstream: up_d\n"
           "    header_timeout: 1s\n" + routes +
           "  - name: copy\n    listen: 127.0.0.1:0\n    protocol: tcp\n    upstream: up_d\n"
           "    splice: off\n    header_timeout: 1s\n" + routes +
           "  - name: nodefault\n    listen: 127.0.0.1:0\n    protocol: tcp\n    header_timeout: 1s\n" + routes +
           "  - name: pp\n    listen: 127.0.0.1:0\n    protocol: tcp\n    proxy_protocol: { send: v1 }\n"
           "    sni_routes: [ { sni: [raw.test], upstream: up_raw } ]\n"
           "upstreams:\n" + up("up_a", S["be"]["a.test"].port) + up("up_b", S["be"]["b.test"].port) +
           up("up_d", S["be"]["default.test"].port) + up("up_raw", S["raw"].port))
    S["gw"] = h.start_sluice(cfg, suite=t)


def test_routes_by_name(t):
    for lst in ("auto", "copy"):
        port = S["gw"].port(lst)
        for name, host in (("a.test", "a.test"), ("b.test", "b.test"), ("a.test", "www.a.test")):
            r = subprocess.run(["curl", "-sS", "--max-time", "10", "--cacert", S["ca"],
                                "--resolve", "%s:%d:127.0.0.1" % (host, port),
                                "https://%s:%d/" % (host, port)], capture_output=True, timeout=20)
            t.check("%s: curl https://%s/ verifies and reaches backend %s" % (lst, host, name),
                    r.returncode == 0 and r.stdout == name.encode(), name, (r.returncode, r.stdout, r.stderr[-300:]))
            der, body = tls_get(port, host)
            t.check("%s: %s is served %s's own certificate" % (lst, host, name),
                    hashlib.sha256(der).hexdigest() == S["fp"][name] and body == name.encode(),
                    (S["fp"][name], name), (hashlib.sha256(der).hexdigest(), body))
        der, body = tls_get(port, "b.test", path="/big")
        t.check("%s: a 3 MiB answer streams back intact" % lst, body == BIG_BODY, BIG, len(body))


def test_each_backend_sees_only_its_names(t):
    counts = backend_counts()
    a_n, a_sni = counts["a.test"]
    b_n, b_sni = counts["b.test"]
    t.check("backend a.test was asked only for a.test names",
            a_sni and set(a_sni) <= {"a.test", "www.a.test"}, "{a.test, www.a.test}", set(a_sni))
    t.check("backend b.test was asked only for b.test", b_sni and set(b_sni) == {"b.test"}, {"b.test"}, set(b_sni))
    # two listeners x (curl + python) x 2 names on a, x (curl + python + big) on b
    t.check("backend a.test: 8 connections", a_n == 8, 8, a_n)
    t.check("backend b.test: 6 connections", b_n == 6, 6, b_n)


def test_default_upstream(t):
    for lst in ("auto", "copy"):
        port = S["gw"].port(lst)
        der, body = tls_get(port, "c.test", verify=False)
        t.check("%s: an unlisted name goes to the default upstream" % lst,
                body == b"default.test" and hashlib.sha256(der).hexdigest() == S["fp"]["default.test"],
                b"default.test", body)
        der, body = tls_get(port, None)
        t.check("%s: a ClientHello without SNI goes to the default upstream" % lst, body == b"default.test",
                b"default.test", body)
    n, snis = S["be"]["default.test"].counts()
    t.check("the default backend got 4 connections, 2 of them with SNI c.test",
            n == 4 and snis.count("c.test") == 2, (4, 2), (n, snis))


def test_no_default_closes(t):
    port = S["gw"].port("nodefault")
    before = backend_counts()
    t.check("nodefault: a listed name routes", tls_get(port, "b.test")[1] == b"b.test")
    t.check("nodefault: an unlisted name is closed", refused(port, "c.test"))
    t.check("nodefault: a ClientHello without SNI is closed", refused(port, None))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        took = closed_by_peer(s, 5)
    t.check("nodefault: plain HTTP bytes are closed at once", took is not None and took < 1.0, "< 1 s", took)
    with socket.create_connection(("127.0.0.1", S["gw"].port("auto")), timeout=5) as s:
        s.sendall(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00")  # a ServerHello from a client
        took = closed_by_peer(s, 5)
    t.check("auto: bytes that are not a ClientHello are closed even with a default upstream",
            took is not None and took < 1.0, "< 1 s", took)
    after = backend_counts()
    t.check("only the listed name reached a backend",
            after["b.test"][0] == before["b.test"][0] + 1 and after["a.test"][0] == before["a.test"][0]
            and after["default.test"][0] == before["default.test"][0], "b.test +1 only", (before, after))


def test_trickle_and_records(t):
    for lst in ("auto", "copy"):
        port = S["gw"].port(lst)
        obj, inc, out, hello = client_hello("b.test")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(len(hello)):
                s.sendall(hello[i:i + 1])
                if i % 8 == 0:
                    time.sleep(0.001)
            der, body = finish_over(s, obj, inc, out)
        t.check("%s: a ClientHello sent one byte at a time (%d bytes) routes and completes" % (lst, len(hello)),
                body == b"b.test" and hashlib.sha256(der).hexdigest() == S["fp"]["b.test"], b"b.test", body)
        obj, inc, out, hello = client_hello("a.test")
        recs = as_records(hello, 40)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(recs[:100])
            time.sleep(0.05)
            s.sendall(recs[100:])
            der, body = finish_over(s, obj, inc, out)
        t.check("%s: a ClientHello cut into %d TLS records routes and completes" % (lst, (len(recs) + 44) // 45),
                body == b"a.test", b"a.test", body)


def test_stalled_peek(t):
    for lst in ("auto", "nodefault"):
        before = backend_counts()
        with socket.create_connection(("127.0.0.1", S["gw"].port(lst)), timeout=5) as s:
            s.sendall(b"\x16\x03\x01\x02")
            took = closed_by_peer(s, 5)
        t.check("%s: a stalled ClientHello is closed after header_timeout (1 s)" % lst,
                took is not None and 0.8 <= took < 3.0, "1-3 s", took)
        t.check("%s: ... and reached no backend" % lst, backend_counts() == before, before, backend_counts())


def test_proxy_protocol_send(t):
    obj, inc, out, hello = client_hello("raw.test")
    with socket.create_connection(("127.0.0.1", S["gw"].port("pp")), timeout=5) as s:
        me = s.getsockname()
        s.sendall(hello)
        deadline = time.monotonic() + 5
        while not S["raw"].got and time.monotonic() < deadline:
            time.sleep(0.02)
    got = S["raw"].got[0] if S["raw"].got else b""
    line = b"PROXY TCP4 127.0.0.1 127.0.0.1 %d %d\r\n" % (me[1], S["gw"].port("pp"))
    t.check("proxy_protocol send: the PROXY header, then the client's ClientHello", got.startswith(line + hello[:100]),
            line + hello[:20], got[:80])


def test_metrics_and_status(t):
    _, samples = S["gw"].metrics()
    v = lambda lst, res: sum(h.metric_values(samples, "sluice_tcp_sni_total", listener=lst, result=res))  # noqa: E731
    t.check("sluice_tcp_sni_total: routed sessions counted", v("auto", "route") >= 7, ">= 7", v("auto", "route"))
    t.check("sluice_tcp_sni_total: default", v("auto", "default") == 2 and v("copy", "default") == 2, 2,
            (v("auto", "default"), v("copy", "default")))
    t.check("sluice_tcp_sni_total: no_route", v("nodefault", "no_route") == 2, 2, v("nodefault", "no_route"))
    t.check("sluice_tcp_sni_total: not_tls", v("nodefault", "not_tls") == 1 and v("auto", "not_tls") == 1, 1,
            (v("nodefault", "not_tls"), v("auto", "not_tls")))
    t.check("sluice_tcp_sni_total: timeout", v("nodefault", "timeout") == 1 and v("auto", "timeout") == 1, 1,
            (v("nodefault", "timeout"), v("auto", "timeout")))
    st = S["gw"].status()
    ls = {x["name"]: x for x in st["listeners"]}
    t.check("/status lists the sni_routes of a listener",
            ls["auto"].get("protocol") == "tcp" and ls["auto"].get("upstream") == "up_d" and
            ls["auto"].get("sni_routes") == [{"sni": ["a.test", "*.a.test"], "upstream": "up_a"},
                                             {"sni": ["b.test"], "upstream": "up_b"}],
            "sni_routes", ls["auto"])
    t.check("/status: a listener without a default shows upstream null", ls["nodefault"].get("upstream", 0) is None,
            None, ls["nodefault"])
    t.check("the gateway is still up", S["gw"].alive())


t.run(setup, test_routes_by_name, test_each_backend_sees_only_its_names, test_default_upstream,
      test_no_default_closes, test_trickle_and_records, test_stalled_peek, test_proxy_protocol_send,
      test_metrics_and_status)
