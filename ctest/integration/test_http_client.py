"""sluice.http.request: a plugin's own HTTP calls, against real loopback servers that
misbehave on demand.

  1. what goes out: method, target, Host, User-Agent, Connection: close, a body
     (1 MiB, checksummed at the server), a plugin-chosen header; what comes back:
     status, headers (lower-case, repeated ones joined), body;
  2. response framing: Content-Length, chunked, close-delimited, HEAD, 204, an
     interim 100 before the final answer;
  3. failures come back as (nil, err) and the plugin decides: refused, timeout,
     reset, truncated body, malformed head, body over max_body, unknown host;
  4. misuse raises (500, counted): a header value with CRLF never reaches the
     server; a call from header_filter;
  5. non-blocking: 100 concurrent calls to a server answering in 0.3 s finish
     together on one worker (sequential would take 30 s), and the worker serves
     other requests meanwhile;
  6. a client that leaves while its call waits costs nothing: the worker serves on;
  7. https: a TLS server started here with certificates the openssl CLI made: verified
     against a `ca` file (by IP address and by name), refused with the system's trust
     store or a name the certificate does not carry, accepted with ssl_verify = false;
     1 MiB comes back intact over TLS.
"""

import hashlib
import http.server
import ssl
import subprocess
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("http_client", budget=55)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins_fixture")

CONF = """\
workers: 1
shutdown_timeout: 2s
admin: { listen: 127.0.0.1:0 }
plugin_paths: [%(fx)s]
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http }
routes:
  - { name: call, match: { paths: [/call] }, plugins: [ { name: http-call } ] }
  - { name: call-rw, match: { paths: [/callrw] }, plugins: [ { name: http-call, config: { phase: rewrite } } ] }
  - name: call-hf
    match: { paths: [/callhf] }
    plugins:
      - { name: http-call, config: { phase: header_filter } }
      - { name: response, config: { status: 200, body: plain } }
  - { name: plain, match: { paths: [/plain] }, plugins: [ { name: response, config: { body: ok } } ] }
"""

S = {}


def handler(req):
    p = req.path
    if p == "/json":
        d = req.summary()
        return h.Response(200, json.dumps(d).encode(),
                          [("Content-Type", "application/json"), ("X-Multi", "a"), ("X-Multi", "b")])
    if p == "/big":
        return h.Response(200, bytes(range(256)) * 4096)  # 1 MiB
    if p == "/chunked":
        return h.Response(200, stream=[b"hello ", b"chunked ", b"world"], chunk_delay=0.01)
    if p == "/eof":
        return b"HTTP/1.1 200 OK\r\nX-Framing: eof\r\n\r\nuntil the close"
    if p == "/interim":
        return [b"HTTP/1.1 100 Continue\r\n\r\n", 0.02,
                b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone"]
    if p == "/nocontent":
        return h.Response(204, b"", [("X-Empty", "yes")])
    if p == "/head":
        return h.Response(200, b"x" * 100)
    if p == "/slow":
        return h.Response(200, b"slow", delay=0.3)
    if p == "/hang":
        return h.HANG
    if p == "/reset":
        return h.RESET
    if p == "/truncated":
        return h.Response(200, b"y" * 1000, truncate=10)
    if p == "/garbage":
        return b"HTTP/1.1 200 OK\r\nBad Header Line\r\n\r\n"
    return h.Response(404, b"no such path")


def call(port, url, path="/call", timeout=10.0, **kw):
    hdrs = [("X-Call-Url", url)]
    for k, v in kw.items():
        hdrs.append(("X-Call-" + k.replace("_", "-").title(), str(v)))
    r = h.request(port, "GET", path, headers=hdrs, timeout=timeout)
    return r


def outcome(r):
    try:
        return json.loads(r.body)
    except ValueError:
        return {"raw": r.body[:200], "status_seen": r.status}


def setup(t):
    S["mock"] = h.MockUpstream(handler, name="callee")
    S["gw"] = h.start_sluice(CONF % {"fx": FIXTURES}, suite=t, name="http-client")


def test_request_and_response(t):
    p, m = S["gw"].port(), S["mock"]
    url = "http://%s/json?q=1&r=two" % m.address
    d = outcome(call(p, url, Header="sent by plugin"))
    t.check("GET: status 200 from the server", d.get("status") == 200, 200, d)
    seen = json.loads(d.get("body") or "{}")
    hdrs = [tuple(x) for x in seen.get("headers", [])]
    t.check("the server saw GET /json?q=1&r=two", (seen.get("method"), seen.get("target")) == ("GET", "/json?q=1&r=two"),
            "GET /json?q=1&r=two", (seen.get("method"), seen.get("target")))
    t.check("Host is the url's authority", h.hget(hdrs, "Host") == m.address, m.address, h.hget(hdrs, "Host"))
    t.check("User-Agent: sluice", h.hget(hdrs, "User-Agent") == "sluice", "sluice", h.hget(hdrs, "User-Agent"))
    t.check("Connection: close", h.hget(hdrs, "Connection") == "close", "close", h.hget(hdrs, "Connection"))
    t.check("the plugin's header arrives", h.hget(hdrs, "X-Sent") == "sent by plugin", "sent by plugin",
            h.hget(hdrs, "X-Sent"))
    rh = d.get("headers", {})
    t.check("response headers: lower-case names", rh.get("content-type") == "application/json",
            "application/json", rh)
    t.check("repeated response headers joined with ', '", rh.get("x-multi") == "a, b", "a, b", rh.get("x-multi"))

    # a 1 MiB body both ways, checksummed on each side
    size = 1 << 20
    sent = (b"0123456789abcdef" * (size // 16))
    before = len(m.requests)
    d = outcome(call(p, "http://%s/json" % m.address, Method="PUT", Body_Size=size))
    with m.lock:
        got = m.requests[before:]
    up = got[-1] if got else None
    t.check("PUT with 1 MiB: the server got it intact",
            up is not None and up.method == "PUT" and up.body_len == size
            and up.body_sha256 == hashlib.sha256(sent).hexdigest(),
            "PUT %d bytes, sha256 match" % size, up and (up.method, up.body_len))
    d = outcome(call(p, "http://%s/big" % m.address, Max_Body=2 << 20))
    want = hashlib.sha256(bytes(range(256)) * 4096).hexdigest()
    t.check("1 MiB response body arrives intact", d.get("body_len") == size and d.get("sha256") == want,
            (size, want[:12]), (d.get("body_len"), (d.get("sha256") or "")[:12], d.get("err")))
    d = outcome(call(p, "http://localhost:%d/json" % m.port))
    t.check("a host name (localhost) is resolved", d.get("status") == 200, 200, d.get("err") or d.get("status"))
    d = outcome(call(p, "http://%s/json" % m.address, path="/callrw"))
    t.check("works from rewrite too", d.get("status") == 200, 200, d)


def test_framing(t):
    p, m = S["gw"].port(), S["mock"]
    base = "http://%s" % m.address
    d = outcome(call(p, base + "/chunked"))
    t.check("chunked response decoded", d.get("body") == "hello chunked world", "hello chunked world", d)
    d = outcome(call(p, base + "/eof"))
    t.check("close-delimited response read to the close",
            d.get("body") == "until the close" and d.get("headers", {}).get("x-framing") == "eof",
            "until the close", d)
    d = outcome(call(p, base + "/interim"))
    t.check("an interim 100 is skipped, the final 201 returned", (d.get("status"), d.get("body")) == (201, "done"),
            (201, "done"), d)
    d = outcome(call(p, base + "/nocontent"))
    t.check("204: no body, headers kept", (d.get("status"), d.get("body_len"), d.get("headers", {}).get("x-empty"))
            == (204, 0, "yes"), (204, 0, "yes"), d)
    d = outcome(call(p, base + "/head", Method="HEAD"))
    t.check("HEAD: Content-Length 100 but no body read", (d.get("status"), d.get("body_len"),
            d.get("headers", {}).get("content-length")) == (200, 0, "100"), (200, 0, "100"), d)


def test_failures(t):
    p, m = S["gw"].port(), S["mock"]
    base = "http://%s" % m.address
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    cases = [
        ("connection refused", "http://127.0.0.1:%d/" % dead_port, {}, "connect: connection refused"),
        ("timeout", base + "/hang", {"Timeout": 0.3}, "timeout"),
        ("reset", base + "/reset", {}, None),
        ("truncated body", base + "/truncated", {}, "connection closed before the response body ended"),
        ("malformed head", base + "/garbage", {}, "malformed response head"),
        ("body over max_body", base + "/big", {"Max_Body": 1000}, "response body larger than max_body"),
        ("unknown host", "http://no-such-host.invalid/", {"Timeout": 3}, None),
    ]
    for name, url, kw, want in cases:
        t0 = time.monotonic()
        r = call(p, url, **kw)
        took = time.monotonic() - t0
        d = outcome(r)
        err = d.get("err")
        ok = r.status == 200 and isinstance(err, str) and (err == want if want else len(err) > 0)
        t.check("%s: the plugin gets (nil, err)" % name, ok, want or "an error text", (r.status, err))
        if name == "timeout":
            t.check("timeout 0.3 s: answered in 0.25..2 s", 0.25 <= took < 2.0, "0.25..2", round(took, 3))
    d = outcome(call(p, base + "/json"))
    t.check("the worker serves calls after every failure", d.get("status") == 200, 200, d)


def test_misuse(t):
    p, m = S["gw"].port(), S["mock"]
    conns = m.accepted
    r = call(p, "http://%s/json" % m.address, Inject=1)
    time.sleep(0.1)
    t.check("a header value with CRLF: a plugin error, 500", r.status == 500, 500, r.status)
    t.check("... and the server saw no connection", m.accepted == conns, conns, m.accepted)
    r = h.request(p, "GET", "/callhf", headers=[("X-Call-Url", "http://%s/json" % m.address)])
    t.check("http.request in header_filter: a plugin error, 500", r.status == 500, 500, r.status)
    r = h.request(p, "GET", "/call", headers=[("X-Call-Url", "ftp://%s/json" % m.address)])
    t.check("a non-http url: a plugin error, 500", r.status == 500, 500, r.status)
    r = h.request(p, "GET", "/plain")
    t.check("the worker serves on", r.status == 200, 200, r.status)


def test_non_blocking(t):
    p, m = S["gw"].port(), S["mock"]
    url = "http://%s/slow" % m.address
    n = 100
    results = [None] * n
    gate = threading.Barrier(n + 1)

    def one(i):
        gate.wait()
        try:
            r = call(p, url, timeout=20)
            results[i] = outcome(r).get("status")
        except Exception as e:
            results[i] = repr(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    gate.wait()
    t0 = time.monotonic()
    time.sleep(0.1)
    t1 = time.monotonic()
    r = h.request(p, "GET", "/plain", timeout=5)
    plain_took = time.monotonic() - t1
    for th in threads:
        th.join(30)
    took = time.monotonic() - t0
    ok = sum(1 for x in results if x == 200)
    t.info("100 calls of 0.3 s each on one worker: %.2f s (sequential: 30 s)" % took)
    t.check("100 concurrent calls all got 200", ok == n, n, ok)
    t.check("... within 3 s", took < 3.0, "< 3 s", round(took, 2))
    t.check("a plain request is served while the calls wait (< 0.25 s)", r.status == 200 and plain_took < 0.25,
            "200 in < 0.25 s", (r.status, round(plain_took, 3)))


def test_client_leaves(t):
    p, m = S["gw"].port(), S["mock"]
    for _ in range(20):
        c = h.Client(p)
        c.send(h.build_request("GET", "/call", headers=[("X-Call-Url", "http://%s/hang" % m.address),
                                                          ("X-Call-Timeout", "5")]))
        time.sleep(0.01)
        c.close()
    time.sleep(0.2)
    r = h.request(p, "GET", "/plain")
    t.check("after 20 clients left mid-call the worker serves", r.status == 200, 200, r.status)
    t.check("the gateway is alive", S["gw"].alive(), "alive", "exited")


def make_certs(d):
    """A test CA and a server certificate for tls.test, localhost and 127.0.0.1."""
    h.make_ca(d, "ca")
    h.make_leaf(d, "srv", "tls.test", "DNS:tls.test,DNS:localhost,IP:127.0.0.1")
    return os.path.join(d, "ca.crt")


class _TLSHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = bytes(range(256)) * 4096 if self.path == "/big" else ("tls ok %s" % self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Tls", self.connection.version())
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_https(t):
    d = os.path.join(h.tmp_root(), "https")
    os.makedirs(d, exist_ok=True)
    ca = make_certs(d)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(d, "srv.crt"), os.path.join(d, "srv.key"))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TLSHandler)
    srv.daemon_threads = True
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        port, p = srv.server_address[1], S["gw"].port()
        d1 = outcome(call(p, "https://127.0.0.1:%d/x" % port, Ca=ca))
        t.check("https with the test CA: 200 over TLS", d1.get("status") == 200 and
                (d1.get("headers") or {}).get("x-tls", "").startswith("TLSv1"), 200, d1)
        d2 = outcome(call(p, "https://localhost:%d/x" % port, Ca=ca))
        t.check("https to a name the certificate carries (localhost): 200", d2.get("status") == 200, 200, d2)
        d3 = outcome(call(p, "https://127.0.0.1:%d/x" % port))
        t.check("the system trust store refuses the test CA: certificate verify failed",
                "certificate verify failed" in (d3.get("err") or ""), "certificate verify failed", d3)
        d4 = outcome(call(p, "https://127.0.0.1:%d/x" % port, Verify="off"))
        t.check("ssl_verify = false accepts it", d4.get("status") == 200, 200, d4)
        d5 = outcome(call(p, "https://%s:%d/x" % ("127.0.0.2", port), Ca=ca))
        t.check("an address the certificate does not name is refused", d5.get("status") is None and
                "verify" in (d5.get("err") or "") or "connect" in (d5.get("err") or ""), "refused", d5)
        d6 = outcome(call(p, "https://127.0.0.1:%d/big" % port, Ca=ca, Max_Body=2 << 20))
        want = hashlib.sha256(bytes(range(256)) * 4096).hexdigest()
        t.check("1 MiB over https arrives intact", d6.get("sha256") == want and d6.get("body_len") == 1 << 20,
                want[:12], (d6.get("body_len"), (d6.get("sha256") or "")[:12], d6.get("err")))
    finally:
        srv.shutdown()
        srv.server_close()


t.run(setup, test_request_and_response, test_framing, test_failures, test_misuse, test_non_blocking, test_https,
      test_client_leaves)
