"""body_filter: plugins rewrite the response body as it streams.

  1. a 1 MiB upstream body (Content-Length) upper-cased piece by piece arrives intact
     (checksum of the expected output), re-framed as chunked, without Content-Length;
  2. chain order: upper then tag: the tag is appended once, on the last call, after
     the upper-casing of the previous plugin;
  3. chunked and close-delimited upstream bodies, an HTTP/1.0 client (close-delimited);
  4. a filter returning nil passes the body through; HEAD has no body;
  5. a filter error mid-body: the client connection is cut (no chunk terminator), the
     error is logged with route and plugin and counted; the next request is served;
     a filter returning a non-string is the same error;
  6. a plugin's own answer (response plugin) is filtered whole, Content-Length fits;
  7. a route without body_filter keeps the upstream's Content-Length (no re-framing).
"""

import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("body_filter", budget=55)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins_fixture")

CONF = """\
workers: 1
shutdown_timeout: 2s
admin: { listen: 127.0.0.1:0 }
plugin_paths: [%(fx)s]
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http }
upstreams:
  - { name: up, targets: [ { address: %(up)s } ] }
routes:
  - { name: upper, match: { paths: [/upper] }, upstream: up, plugins: [ { name: body-edit } ] }
  - name: chain
    match: { paths: [/chain] }
    upstream: up
    plugins: [ { name: body-edit }, { name: body-edit, config: { mode: tag } } ]
  - { name: keep, match: { paths: [/keep] }, upstream: up, plugins: [ { name: body-edit, config: { mode: keep } } ] }
  - name: fail
    match: { paths: [/fail] }
    upstream: up
    plugins: [ { name: body-edit, config: { mode: fail, fail_after: 100000 } } ]
  - { name: bad, match: { paths: [/bad] }, upstream: up, plugins: [ { name: body-edit, config: { mode: bad } } ] }
  - name: local
    match: { paths: [/local] }
    plugins:
      - { name: body-edit, config: { mode: tag, tag: "+filtered" } }
      - { name: response, config: { status: 200, body: "made here" } }
  - { name: plain, match: { paths: [/plain] }, upstream: up }
"""

BIG = bytes((i * 7) % 256 for i in range(1 << 20))
TEXT = b"hello body filter"


def handler(req):
    p = req.path
    if p.endswith("/big"):
        return h.Response(200, BIG)
    if p.endswith("/chunked"):
        return h.Response(200, stream=[b"abc ", b"def ", b"ghi"], chunk_delay=0.01)
    if p.endswith("/eof"):
        return h.Response(200, b"close delimited", framing=False, after="close")
    return h.Response(200, TEXT)


S = {}


def setup(t):
    S["up"] = h.MockUpstream(handler, name="origin")
    S["gw"] = h.start_sluice(CONF % {"fx": FIXTURES, "up": S["up"].address}, suite=t, name="bodyf")


def test_stream_upper(t):
    p = S["gw"].port()
    r = h.request(p, "GET", "/upper/big", timeout=20)
    want = BIG.upper()
    t.check("1 MiB upper-cased, intact", r.status == 200 and hashlib.sha256(r.body).hexdigest()
            == hashlib.sha256(want).hexdigest() and len(r.body) == len(want),
            len(want), (r.status, len(r.body)))
    t.check("re-framed: chunked, no Content-Length",
            r.header("Transfer-Encoding") == "chunked" and r.header("Content-Length") is None,
            "chunked", (r.header("Transfer-Encoding"), r.header("Content-Length")))
    r = h.request(p, "GET", "/chain/small")
    t.check("chain order: upper, then the tag once at the end",
            r.body == TEXT.upper() + b"[end](eofs=1)", TEXT.upper() + b"[end](eofs=1)", r.body)


def test_framings(t):
    p = S["gw"].port()
    r = h.request(p, "GET", "/upper/chunked")
    t.check("chunked upstream body filtered", r.body == b"ABC DEF GHI", b"ABC DEF GHI", r.body)
    r = h.request(p, "GET", "/chain/eof")
    t.check("close-delimited upstream body filtered, tag at the end",
            r.body == b"CLOSE DELIMITED[end](eofs=1)", b"CLOSE DELIMITED[end](eofs=1)", r.body)
    c = h.Client(p)
    c.send(b"GET /upper/small HTTP/1.0\r\nHost: x\r\n\r\n")
    raw, _ = c.read_until_close(timeout=5)
    c.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    t.check("HTTP/1.0 client: close-delimited, not chunked",
            body == TEXT.upper() and b"chunked" not in head.lower(), TEXT.upper(), (head[:200], body[:60]))
    r = h.request(p, "GET", "/keep/small")
    t.check("a filter returning nil passes the body on", r.body == TEXT, TEXT, r.body)
    r = h.request(p, "HEAD", "/upper/small")
    t.check("HEAD: no body", r.status == 200 and r.body == b"", (200, b""), (r.status, r.body))
    r = h.request(p, "GET", "/plain/small")
    t.check("no body_filter: the upstream's Content-Length is kept",
            r.header("Content-Length") == str(len(TEXT)) and r.body == TEXT, str(len(TEXT)),
            r.header("Content-Length"))


def test_local_answer(t):
    p = S["gw"].port()
    r = h.request(p, "GET", "/local")
    want = b"made here+filtered(eofs=1)"
    t.check("a plugin's answer is filtered whole", r.body == want, want, r.body)
    t.check("... with a Content-Length that fits", r.header("Content-Length") == str(len(want)),
            str(len(want)), r.header("Content-Length"))


def test_errors(t):
    s = S["gw"]
    p = s.port()
    c = h.Client(p, timeout=10)
    c.send(h.build_request("GET", "/fail/big"))
    raw, how = c.read_until_close(timeout=10)
    c.close()
    t.check("... the connection closed by the gateway", how in ("eof", "reset"), "eof or reset", how)
    head, _, body = raw.partition(b"\r\n\r\n")
    t.check("a filter error mid-body: the response began 200", head.startswith(b"HTTP/1.1 200"), "200",
            head[:40])
    t.check("... and was cut off: no chunk terminator, less than the body",
            not body.endswith(b"0\r\n\r\n") and len(body) < len(BIG), "truncated", len(body))
    logged = None
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not logged:
        for ln in s.log().splitlines():
            if "filter gave up" in ln:
                try:
                    logged = json.loads(ln)
                except ValueError:
                    pass
        time.sleep(0.05)
    t.check("logged with route and plugin",
            bool(logged) and logged.get("route") == "fail" and logged.get("plugin") == "body-edit",
            "route fail, plugin body-edit", logged)
    _, samples = s.metrics()
    n = h.metric_values(samples, "sluice_plugin_errors_total", route="fail", plugin="body-edit")
    t.check("counted in sluice_plugin_errors_total", n and float(n[0]) >= 1, ">= 1", n)
    c = h.Client(p, timeout=10)
    c.send(h.build_request("GET", "/bad/small"))
    raw, _ = c.read_until_close(timeout=10)
    c.close()
    t.check("a filter returning a table: the response is cut off too", not raw.endswith(b"0\r\n\r\n"),
            "no terminator", raw[-60:])
    r = h.request(p, "GET", "/upper/small")
    t.check("the next request is served", r.body == TEXT.upper(), TEXT.upper(), r.body)


t.run(setup, test_stream_upper, test_framings, test_local_answer, test_errors)
