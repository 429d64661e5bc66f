"""HTTP/2 on the client side (issue 13, first slice).

An HTTP/2 stream is a second downstream of the request: routing, plugins, gateway answers
and upstreams (HTTP/1.1) serve it unchanged. Checked with real peers:

  1. curl --http2 over TLS (ALPN h2) and curl --http2-prior-knowledge on a plaintext port
     that still answers HTTP/1.1; GET and POST of 10 MiB, checksummed both ways.
  2. The upstream (an HTTP/1.1 mock) sees lower-case header names and :authority as Host;
     the echo route, every built-in plugin (access-log, basic-auth, cors, echo, headers,
     ip-restriction, jwt-auth, key-auth, rate-limit, redirect, request-id, response,
     traceparent), a no-route 404 and an upstream's 502 answer over h2;
     upstream framings (chunked, close-delimited, 204/304, cut off) become DATA and
     END_STREAM or a reset.
  3. 100 concurrent streams on one connection (h2load), and 100 streams of python3-h2 each
     uploading 256 KiB, checksummed by the upstream; 100 streams each 1 MiB up and 1 MiB
     down, checksummed both ways; a client reading at 1 MiB/s holds the worker's RSS and
     the upstreams' progress bounded.
  4. Malformed requests (connection-specific fields, TE other than trailers, upper-case
     names, bad or missing pseudo-headers, content-length against DATA) are stream errors
     (RST_STREAM PROTOCOL_ERROR) and the upstream sees none of them; the connection lives
     on.
  5. Limits and lifecycle: max_concurrent_streams (REFUSED_STREAM), the header list
     (431), max_body (413), a CONTINUATION flood (connection closed), a rapid reset
     (GOAWAY, the upstream sees a bounded number of requests), PING, empty DATA and
     WINDOW_UPDATE floods (connection closed), an HPACK bomb (431), a zero-window client
     (its stream reset at idle_timeout), a client that reads nothing (upstreams and RSS
     bounded), idle timeout (GOAWAY), drain on reload and SIGTERM (a shutdown notice, then
     GOAWAY naming the last stream; the in-flight stream finishes).
  6. `http2: false`: prior knowledge is refused (400/close) and ALPN offers only http/1.1.

python3-h2 imports only under /usr/bin/python3: the raw-frame client below runs there in
a subprocess and reports JSON.
"""

import base64
import hashlib
import hmac
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("http2", budget=240)
JWT_SECRET = "h2-secret-0123456789abcdefghijklmnopqrstuvwxyz"
S = {}
BIG = 10 << 20
PIECE = b"p" * 65536

# A raw HTTP/2 client (python3-h2, outbound validation off): runs the requests of a JSON
# spec on one connection, all streams at once, and prints what each got.
H2_CLIENT = r'''
import json, socket, sys, time, hashlib
import h2.config, h2.connection, h2.events, h2.settings
spec = json.loads(sys.stdin.read())
s = socket.create_connection(("127.0.0.1", spec["port"]), timeout=spec.get("timeout", 5))
cfg = h2.config.H2Configuration(client_side=True, validate_outbound_headers=False,
                                normalize_outbound_headers=False, validate_inbound_headers=False,
                                header_encoding="utf-8")
c = h2.connection.H2Connection(config=cfg)
c.local_settings = h2.settings.Settings(client=True, initial_values={
    h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: spec.get("window", 1 << 24)})
c.initiate_connection()
if spec.get("window", 1) > 0:
    c.increment_flow_control_window(1 << 24)
s.sendall(c.data_to_send())
if spec.get("rapid_reset"):
    # open and cancel streams as fast as the socket takes them (CVE-2023-44487)
    hd = [(":method", "GET"), (":scheme", "http"), (":path", "/up/rr"), (":authority", "x")]
    sent = 0
    try:
        for i in range(spec["rapid_reset"]):
            sid = c.get_next_available_stream_id()
            c.send_headers(sid, hd, end_stream=True)
            c.reset_stream(sid)
            sent += 1
            if i % 100 == 99:
                s.sendall(c.data_to_send())
        s.sendall(c.data_to_send())
    except Exception:
        pass

res, bodies, pending = {}, {}, {}
for req in spec["requests"]:
    sid = c.get_next_available_stream_id()
    body = b""
    if "body" in req:
        body = req["body"].encode("latin-1")
    elif "body_size" in req:
        body = bytes((i * 7 + sid) & 255 for i in range(256)) * (req["body_size"] // 256)
    c.send_headers(sid, [tuple(x) for x in req["headers"]], end_stream=not body and not req.get("open"))
    if req.get("raw_continuations"):
        pass
    res[sid] = {"status": None, "headers": [], "reset": None, "sha256": hashlib.sha256(body).hexdigest()}
    bodies[sid] = bytearray()
    if body:
        pending[sid] = memoryview(body)
def pump():
    for sid in list(pending):
        if res[sid]["reset"] is not None:
            del pending[sid]
            continue
        b = pending[sid]
        while b:
            n = min(len(b), c.local_flow_control_window(sid), c.max_outbound_frame_size)
            if n <= 0:
                break
            c.send_data(sid, b[:n].tobytes())
            b = b[n:]
        pending[sid] = b
        if not b:
            c.end_stream(sid)
            del pending[sid]
    s.sendall(c.data_to_send())
try:
    pump()
except Exception as e:
    pass
if spec.get("raw"):
    try:
        raw = bytes.fromhex(spec["raw"]) * spec.get("raw_times", 1)
        for i in range(0, len(raw), 65536):
            s.sendall(raw[i:i + 65536])
    except OSError:
        pass
open_ = set(res)
goaway, closed = None, False
if spec.get("ready"):
    print("ready", flush=True)
time.sleep(spec.get("stall", 0))
deadline = time.monotonic() + spec.get("timeout", 5)
want_goaway = spec.get("want_goaway")
rate, got_bytes, t_read = spec.get("rate"), 0, time.monotonic()
while (open_ or want_goaway) and time.monotonic() < deadline:
    if rate:
        # read at `rate` bytes/s: what arrived ahead of the schedule waits
        ahead = got_bytes / rate - (time.monotonic() - t_read)
        if ahead > 0:
            time.sleep(min(ahead, max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                break
    try:
        data = s.recv(16384 if rate else 1 << 20)
        got_bytes += len(data)
    except socket.timeout:
        break
    except ConnectionResetError:
        closed = True
        break
    if not data:
        closed = True
        break
    try:
        events = c.receive_data(data)
    except Exception as e:
        closed = True
        break
    for ev in events:
        if isinstance(ev, h2.events.ResponseReceived):
            r = res[ev.stream_id]
            r["headers"] = [list(x) for x in ev.headers]
            r["status"] = int(dict(ev.headers)[":status"])
        elif isinstance(ev, h2.events.DataReceived):
            bodies[ev.stream_id] += ev.data
            c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            open_.discard(ev.stream_id)
        elif isinstance(ev, h2.events.StreamReset):
            if ev.stream_id in res:
                res[ev.stream_id]["reset"] = ev.error_code
            open_.discard(ev.stream_id)
            pending.pop(ev.stream_id, None)
        elif isinstance(ev, h2.events.ConnectionTerminated):
            goaway = [ev.error_code, ev.last_stream_id]
            want_goaway = False
    try:
        pump()
    except Exception:
        pass
for sid, r in res.items():
    b = bytes(bodies[sid])
    r["body"] = b[:2000].decode("latin-1")
    r["body_len"] = len(b)
    r["body_sha256"] = hashlib.sha256(b).hexdigest()
out = {"streams": [res[k] for k in sorted(res)], "goaway": goaway, "closed": closed}
if spec.get("ping_after"):
    try:
        c.ping(b"12345678")
        s.sendall(c.data_to_send())
        s.settimeout(2)
        got = False
        for ev in c.receive_data(s.recv(65536)):
            got = got or isinstance(ev, h2.events.PingAckReceived)
        out["alive"] = got
    except Exception as e:
        out["alive"] = False
print(json.dumps(out), flush=True)
'''


def h2run(port, requests, **kw):
    spec = dict(kw, port=port, requests=requests)
    p = subprocess.run(["/usr/bin/python3", "-c", H2_CLIENT], input=json.dumps(spec), capture_output=True, text=True,
                       timeout=kw.get("timeout", 5) + 20)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if not lines:
        return {"error": p.stderr[-2000:], "streams": []}
    return json.loads(lines[-1])


def req(path, method="GET", extra=(), authority=None, port=None, body=None, **kw):
    hd = [[":method", method], [":scheme", "http"], [":path", path],
          [":authority", authority or "127.0.0.1:%d" % (port or S["plain"])]]
    r = dict(kw, headers=hd + [list(x) for x in extra])
    if body is not None:
        r["body"] = body
    return r


MIRROR = bytes(range(256)) * 4097


def mirror_body(i):
    """The 1 MiB body /up/m<i> answers: a pattern shifted by i."""
    return MIRROR[i % 256:i % 256 + (1 << 20)]


def handler(rq):
    m = re.fullmatch(r"/up/m(\d+)", rq.path)
    if m:
        return h.Response(200, mirror_body(int(m.group(1))))
    if rq.path == "/up/big":
        return h.Response(200, S["big"], [("Content-Type", "application/octet-stream")])
    if rq.path.startswith("/up/huge"):
        def pieces():
            for _ in range(1024):
                S["pulled"] += 65536
                yield PIECE
        return h.Response(200, stream=pieces(), length=64 << 20)
    if rq.path == "/up/chunked":
        return h.Response(200, stream=[b"a" * 1000, b"b" * 2000], chunk_delay=0.05)
    if rq.path == "/up/eof":
        return h.Response(200, b"x" * 5000, framing=False, after="close")
    if rq.path in ("/up/204", "/up/304"):
        return h.Response(int(rq.path[-3:]))
    if rq.path == "/up/trunc":
        return h.Response(200, b"y" * 10000, truncate=100)
    return h.mock_upstream.default_handler(rq)


def setup(t):
    d = h.new_tmpdir("h2")
    S["dir"] = d
    h.make_ca(d)
    crt, key = h.make_leaf(d, "gw", "localhost", "DNS:localhost,IP:127.0.0.1")
    S["ca"] = os.path.join(d, "ca.crt")
    S["big"] = b"".join(h.pattern_blocks(BIG))
    S["big_sha"] = hashlib.sha256(S["big"]).hexdigest()
    S["up"] = h.MockUpstream(handler=handler)
    S["dead_sock"], dead = h.refused_port()
    S["alog"] = os.path.join(d, "access.log")
    S["sl"] = h.start_sluice(f"""
workers: 1
admin: {{ listen: 127.0.0.1:0 }}
watch: false
listeners:
  - name: tls
    listen: 127.0.0.1:0
    tls:
      certificates:
        - {{ cert: {crt}, key: {key} }}
  - {{ name: web, listen: 127.0.0.1:0 }}
  - {{ name: off, listen: 127.0.0.1:0, http2: false }}
  - name: offtls
    listen: 127.0.0.1:0
    http2: {{ enabled: false }}
    tls:
      certificates:
        - {{ cert: {crt}, key: {key} }}
  - name: small
    listen: 127.0.0.1:0
    max_body: 1KiB
    max_header_size: 4KiB
    idle_timeout: 1s
    http2: {{ enabled: true, max_concurrent_streams: 5 }}
upstreams:
  # connect: 30s: the connect timer stays armed after the connect until a write blocks or
  # the request was sent (proxy.c), so an upload slower than it that never blocks gets a
  # 504 (test_both_ways under CPU contention); a known bug outside HTTP/2
  - {{ name: up, targets: [ {{ address: {S["up"].address} }} ], timeouts: {{ connect: 30s }} }}
  - {{ name: dead, targets: [ {{ address: 127.0.0.1:{dead} }} ], retry: {{ attempts: 1 }} }}
routes:
  - {{ name: up, match: {{ paths: [/up] }}, upstream: up }}
  - {{ name: dead, match: {{ paths: [/dead] }}, upstream: dead }}
  - {{ name: echo, match: {{ paths: [/echo] }}, plugins: [ {{ name: echo }} ] }}
  - name: plug
    match: {{ paths: [/plug] }}
    upstream: up
    plugins:
      - {{ name: headers, config: {{ request: {{ set: {{ X-Added: yes }} }}, response: {{ set: {{ X-Resp: r }} }} }} }}
      - {{ name: request-id }}
  - {{ name: ka, match: {{ paths: [/ka] }}, upstream: up, plugins: [ {{ name: key-auth }} ] }}
  - {{ name: rd, match: {{ paths: [/rd] }}, plugins: [ {{ name: redirect, config: {{ to: "https://example.com/new", status: 301 }} }} ] }}
  - {{ name: rl, match: {{ paths: [/rl] }}, upstream: up, plugins: [ {{ name: rate-limit, config: {{ rate: 1, per: 10s }} }} ] }}
  - {{ name: cors, match: {{ paths: [/cors] }}, upstream: up, plugins: [ {{ name: cors, config: {{ origins: ["https://a.example"] }} }} ] }}
  - {{ name: deny, match: {{ paths: [/deny] }}, upstream: up, plugins: [ {{ name: ip-restriction, config: {{ deny: [127.0.0.1] }} }} ] }}
  - {{ name: resp, match: {{ paths: [/resp] }}, plugins: [ {{ name: response, config: {{ status: 201, body: "made it" }} }} ] }}
  - {{ name: tp, match: {{ paths: [/tp] }}, upstream: up, plugins: [ {{ name: traceparent }} ] }}
  - name: al
    match: {{ paths: [/al] }}
    upstream: up
    plugins:
      - {{ name: access-log, config: {{ path: {S["alog"]}, fields: [request_id, method, path, query, status, bytes_out, host, consumer] }} }}
  - {{ name: ba, match: {{ paths: [/ba] }}, upstream: up, plugins: [ {{ name: basic-auth }} ] }}
  - name: jwt
    match: {{ paths: [/jwt] }}
    upstream: up
    plugins: [ {{ name: jwt-auth, config: {{ algorithms: [HS256], secret_env: SLUICE_IT_JWT_SECRET }} }} ]
  - {{ name: rid, match: {{ paths: [/rid] }}, upstream: up, plugins: [ {{ name: request-id }} ] }}
consumers:
  # basic-auth's hash: openssl passwd -6 -salt saltsalt secret
  - name: alice
    credentials:
      key-auth: {{ key: k1 }}
      basic-auth: {{ username: alice, password_hash: "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1" }}
""", suite=t, env=dict(os.environ, SLUICE_IT_JWT_SECRET=JWT_SECRET))
    S["plain"] = S["sl"].port("web")


def curl(*args, timeout=60):
    p = subprocess.run(["curl", "-sS", "--cacert", S["ca"]] + list(args), capture_output=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def test_curl_both_ways(t):
    tls = S["sl"].port("tls")
    for name, base, flag in (("TLS (ALPN h2)", "https://localhost:%d" % tls, "--http2"),
                             ("prior knowledge", "http://127.0.0.1:%d" % S["plain"], "--http2-prior-knowledge")):
        rc, out, err = curl(flag, "-w", "\n%{http_version} %{http_code}", base + "/up/x?q=1")
        tail = out.rsplit(b"\n", 1)[-1].decode()
        t.check("%s: curl GET over HTTP/2 -> 200" % name, tail == "2 200", "2 200", (tail, err[-300:]))
        rq = S["up"].requests[-1]
        t.check("%s: the upstream got HTTP/1.1 with the path and query" % name,
                (rq.version, rq.target) == ("HTTP/1.1", "/up/x?q=1"), ("HTTP/1.1", "/up/x?q=1"),
                (rq.version, rq.target))
        # 10 MiB down
        path = os.path.join(S["dir"], "down.bin")
        rc, out, err = curl(flag, "-o", path, "-w", "%{http_version} %{http_code}", base + "/up/big")
        with open(path, "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        t.check("%s: 10 MiB down, checksummed" % name, (out.decode(), got) == ("2 200", S["big_sha"]),
                ("2 200", S["big_sha"]), (out.decode(), got, err[-300:]))
        # 10 MiB up
        up = os.path.join(S["dir"], "up.bin")
        with open(up, "wb") as f:
            f.write(S["big"])
        rc, out, err = curl(flag, "--data-binary", "@" + up, "-H", "Content-Type: application/octet-stream",
                            base + "/up/post")
        rq = S["up"].requests[-1]
        t.check("%s: 10 MiB up, checksummed by the upstream" % name,
                (rq.method, rq.body_len, rq.body_sha256) == ("POST", BIG, S["big_sha"]),
                ("POST", BIG, S["big_sha"]), (rq.method, rq.body_len, rq.body_sha256, err[-300:]))
    # HTTP/1.1 on the same plaintext port
    r = h.request(S["plain"], "GET", "/up/h1")
    t.check("HTTP/1.1 on the HTTP/2 port still answers", r.status == 200, 200, r.status)
    rc, out, err = curl("--http1.1", "-w", "%{http_version}", "-o", "/dev/null", "https://localhost:%d/up/a" % tls)
    t.check("HTTP/1.1 over TLS (ALPN http/1.1) still answers", out == b"1.1", "1.1", (out, err[-200:]))


def test_semantics(t):
    port = S["plain"]
    n0 = len(S["up"].requests)
    res = h2run(port, [req("/up/hdr", extra=[["x-one", "1"], ["cookie", "a=1"], ["cookie", "b=2"]]),
                       req("/echo/e?k=v"),
                       req("/plug/p"),
                       req("/nothing"),
                       req("/dead/x")])
    st = res["streams"]
    t.check("five streams answered", [s["status"] for s in st] == [200, 200, 200, 404, 502],
            [200, 200, 200, 404, 502], [s["status"] for s in st] or res)
    rq = [r for r in S["up"].requests[n0:] if r.path == "/up/hdr"]
    rq = rq[0] if rq else None
    names = [k for k, _ in rq.headers] if rq else []
    t.check("the upstream saw :authority as Host", rq and rq.header("host") == "127.0.0.1:%d" % port,
            "127.0.0.1:%d" % port, rq and rq.header("host"))
    t.check("client header names reach the upstream lower-case", "x-one" in names and "host" in names, "x-one, host",
            names)
    t.check("cookie crumbs are one Cookie field upstream", rq and rq.header_all("cookie") == ["a=1; b=2"],
            ["a=1; b=2"], rq and rq.header_all("cookie"))
    echo = json.loads(st[1]["body"]) if st[1]["status"] == 200 else {}
    t.check("the echo route answers over HTTP/2", (echo.get("method"), echo.get("path"), echo.get("query")) ==
            ("GET", "/echo/e", "k=v"), ("GET", "/echo/e", "k=v"), echo)
    resp_h = dict((k, v) for k, v in st[2]["headers"])
    prq = [r for r in S["up"].requests[n0:] if r.path == "/plug/p"]
    t.check("the headers plugin runs: the upstream got X-Added",
            prq and prq[0].header("x-added") == "yes", "yes", prq and prq[0].header("x-added"))
    t.check("the headers plugin runs: the client got x-resp", resp_h.get("x-resp") == "r", "r", resp_h)
    t.check("response header names are lower-case, no connection fields",
            all(k == k.lower() for k in resp_h) and "connection" not in resp_h and "transfer-encoding" not in resp_h,
            "lower-case", list(resp_h))


def test_plugins(t):
    # built-in plugins over HTTP/2 streams, all on one connection
    n0 = len(S["up"].requests)
    res = h2run(S["plain"], [req("/ka/x"), req("/ka/y", extra=[["apikey", "k1"]]), req("/rd/z"),
                             req("/rl/1"), req("/rl/2"),
                             req("/cors/p", method="OPTIONS", extra=[["origin", "https://a.example"],
                                                                     ["access-control-request-method", "PUT"]]),
                             req("/deny/d"), req("/resp/r"), req("/tp/t")])
    st = res["streams"]
    hd = [dict((k, v) for k, v in s["headers"]) for s in st]
    got = [s["status"] for s in st]
    t.check("key-auth: 401 without a key, 200 with one", got[:2] == [401, 200], [401, 200], got[:2])
    kq = [r for r in S["up"].requests[n0:] if r.path == "/ka/y"]
    t.check("key-auth: the upstream gets the consumer", kq and kq[0].header("x-consumer") == "alice", "alice",
            kq and kq[0].header("x-consumer"))
    t.check("redirect: 301 with location", (got[2], hd[2].get("location")) == (301, "https://example.com/new"),
            (301, "https://example.com/new"), (got[2], hd[2].get("location")))
    t.check("rate-limit 1 per 10s: one of two streams 200, the other 429", sorted(got[3:5]) == [200, 429],
            [200, 429], got[3:5])
    t.check("cors: the preflight is answered with the allowed origin",
            got[5] in (200, 204) and hd[5].get("access-control-allow-origin") == "https://a.example",
            "2xx, https://a.example", (got[5], hd[5]))
    t.check("ip-restriction: 403", got[6] == 403, 403, got[6])
    t.check("response: 201 'made it'", (got[7], st[7]["body"]) == (201, "made it"), (201, "made it"),
            (got[7], st[7]["body"]))
    tq = [r for r in S["up"].requests[n0:] if r.path == "/tp/t"]
    t.check("traceparent: the upstream gets one", tq and (tq[0].header("traceparent") or "").startswith("00-"),
            "00-...", tq and tq[0].header("traceparent"))


def hs256(claims):
    def b64u(b):
        return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    signing = b64u(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + b64u(json.dumps(claims).encode())
    return signing + "." + b64u(hmac.new(JWT_SECRET.encode(), signing.encode(), hashlib.sha256).digest())


def test_plugins_more(t):
    # the other built-ins over HTTP/2 streams, all on one connection: access-log,
    # basic-auth, jwt-auth and request-id (echo, headers, key-auth, redirect, rate-limit,
    # cors, ip-restriction, response and traceparent are above)
    n0 = len(S["up"].requests)
    basic = "Basic " + base64.b64encode(b"alice:secret").decode()
    wrong = "Basic " + base64.b64encode(b"alice:guess").decode()
    token = hs256({"sub": "alice", "exp": int(time.time()) + 300})
    res = h2run(S["plain"], [req("/al/x?q=1"),
                             req("/ba/a"), req("/ba/b", extra=[["authorization", wrong]]),
                             req("/ba/c", extra=[["authorization", basic], ["x-consumer", "mallory"]]),
                             req("/jwt/a"), req("/jwt/b", extra=[["authorization", "Bearer " + token + "x"]]),
                             req("/jwt/c", extra=[["authorization", "Bearer " + token], ["x-consumer", "mallory"]]),
                             req("/rid/a"), req("/rid/b", extra=[["x-request-id", "client-id-1"]])])
    st = res["streams"]
    got = [s["status"] for s in st]
    hd = [dict((k, v) for k, v in s["headers"]) for s in st]
    seen = dict((r.path, r) for r in S["up"].requests[n0:])

    # access-log: the stream's line says what the same request over HTTP/1.1 says
    h1 = h.request(S["plain"], "GET", "/al/h1?q=1")

    def logged(path):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if os.path.exists(S["alog"]):
                with open(S["alog"]) as f:
                    for x in f:
                        if x.strip() and json.loads(x).get("path") == path:
                            return json.loads(x)
            time.sleep(0.05)
        return {}
    l2, l1 = logged("/al/x"), logged("/al/h1")
    keys = ("method", "query", "status", "host")
    t.check("access-log: one line for the HTTP/2 stream, as over HTTP/1.1 (method, query, status, host)",
            got[0] == 200 and h1.status == 200 and l2 and [l2.get(k) for k in keys] == [l1.get(k) for k in keys] ==
            ["GET", "q=1", 200, "127.0.0.1"], ["GET", "q=1", 200, "127.0.0.1"], (got[0], l2, l1))
    t.check("access-log: the HTTP/2 line has its request id and the bytes sent",
            l2.get("request_id") and l2.get("bytes_out", 0) > 0 and l2.get("request_id") != l1.get("request_id"),
            "request_id, bytes_out > 0", l2)

    # basic-auth
    t.check("basic-auth: 401 with the challenge without credentials, and with a wrong password",
            got[1:3] == [401, 401] and "basic" in hd[1].get("www-authenticate", "").lower(),
            [401, 401, "Basic realm"], (got[1:3], hd[1].get("www-authenticate")))
    t.check("basic-auth: the upstream saw neither refused stream", "/ba/a" not in seen and "/ba/b" not in seen,
            "not forwarded", sorted(seen))
    bq = seen.get("/ba/c")
    t.check("basic-auth: 200 with alice's password; the upstream gets X-Consumer: alice only, no Authorization",
            got[3] == 200 and bq is not None and bq.header_all("x-consumer") == ["alice"] and
            bq.header("authorization") is None,
            (200, ["alice"], None), (got[3], bq and bq.header_all("x-consumer"), bq and bq.header("authorization")))

    # jwt-auth
    t.check("jwt-auth: 401 Bearer without a token and with a bad signature",
            got[4:6] == [401, 401] and "bearer" in hd[4].get("www-authenticate", "").lower(),
            [401, 401, "Bearer"], (got[4:6], hd[4].get("www-authenticate")))
    jq = seen.get("/jwt/c")
    t.check("jwt-auth: 200 with an HS256 token; the upstream gets X-Consumer: alice only",
            got[6] == 200 and jq is not None and jq.header_all("x-consumer") == ["alice"] and
            "/jwt/a" not in seen and "/jwt/b" not in seen,
            (200, ["alice"]), (got[6], jq and jq.header_all("x-consumer"), sorted(seen)))

    # request-id
    ra, rb = seen.get("/rid/a"), seen.get("/rid/b")
    ida = ra.header("x-request-id") if ra else None
    t.check("request-id: the upstream and the client get the same generated id",
            got[7] == 200 and ida and hd[7].get("x-request-id") == ida, ("200", "id", "same id"),
            (got[7], ida, hd[7].get("x-request-id")))
    t.check("request-id: a client's id is kept, upstream and back",
            got[8] == 200 and rb is not None and rb.header("x-request-id") == "client-id-1" and
            hd[8].get("x-request-id") == "client-id-1", "client-id-1",
            (got[8], rb and rb.header("x-request-id"), hd[8].get("x-request-id")))


def test_framing(t):
    # the upstream's framing (chunked, close-delimited, none) becomes DATA frames and
    # END_STREAM; a response cut off mid-body is a stream reset, never a clean end
    res = h2run(S["plain"], [req("/up/chunked"), req("/up/eof"), req("/up/204"), req("/up/304"), req("/up/trunc"),
                             req("/up/head", method="HEAD"),
                             req("/up/cont", method="POST", extra=[["expect", "100-continue"]], body="z" * 100)])
    st = res["streams"]
    got = [(s["status"], s["body_len"], s["reset"]) for s in st]
    t.check("chunked upstream body -> 3000 bytes, END_STREAM", got[0] == (200, 3000, None), (200, 3000, None), got[0])
    t.check("close-delimited upstream body -> 5000 bytes, END_STREAM", got[1] == (200, 5000, None),
            (200, 5000, None), got[1])
    t.check("204 and 304 -> no body", got[2:4] == [(204, 0, None), (304, 0, None)],
            [(204, 0, None), (304, 0, None)], got[2:4])
    t.check("an upstream body cut off -> the stream is reset after its head", got[4][0] == 200 and
            got[4][2] is not None and got[4][1] < 10000, "200 then RST_STREAM", got[4])
    hd = dict((k, v) for k, v in st[5]["headers"])
    t.check("HEAD -> 200 with content-length, no body", (got[5][0], got[5][1]) == (200, 0) and
            "content-length" in hd, "200, content-length, 0 bytes", (got[5], hd))
    t.check("expect: 100-continue -> the POST is answered 200 with its body upstream", got[6][:2][0] == 200 and
            '"body_len": 100' in st[6]["body"], 200, (got[6], st[6]["body"][:200]))


BAD = [
    ("connection", [["connection", "keep-alive"]]),
    ("keep-alive", [["keep-alive", "5"]]),
    ("proxy-connection", [["proxy-connection", "x"]]),
    ("transfer-encoding", [["transfer-encoding", "chunked"]]),
    ("upgrade: h2c", [["upgrade", "h2c"]]),
    ("te: gzip", [["te", "gzip"]]),
    ("an upper-case name", [["X-Upper", "1"]]),
]


def test_malformed(t):
    port = S["plain"]
    n0 = len(S["up"].requests)
    cases = [(name, req("/up/bad", extra=extra)) for name, extra in BAD]
    base = req("/up/bad")
    cases.append(("missing :path", dict(headers=[x for x in base["headers"] if x[0] != ":path"])))
    cases.append(("an unknown pseudo-header", dict(headers=base["headers"] + [[":foo", "x"]])))
    cases.append(("a pseudo-header after a field", dict(headers=base["headers"][:2] + [["x-a", "1"]] +
                                                      base["headers"][2:])))
    cases.append(("content-length above the DATA", req("/up/bad", method="POST", extra=[["content-length", "20"]],
                                                          body="hello")))
    cases.append(("content-length below the DATA", req("/up/bad", method="POST", extra=[["content-length", "3"]],
                                                          body="hello world")))
    for name, c in cases:
        res = h2run(port, [c], ping_after=True)
        s = res["streams"][0] if res["streams"] else {}
        t.check("%s: stream error PROTOCOL_ERROR, no answer, the connection lives" % name,
                (s.get("status"), s.get("reset"), res.get("alive")) == (None, 1, True), (None, 1, True),
                (s.get("status"), s.get("reset"), res.get("alive"), res.get("error", "")[-300:]))
    # an expectation other than 100-continue is 417, as over HTTP/1.1
    res = h2run(port, [req("/up/bad", extra=[["expect", "bogus"]])])
    s = res["streams"][0] if res["streams"] else {}
    t.check("expect: bogus -> 417, never upstream", s.get("status") == 417, 417, (s, res.get("error", "")[-300:]))
    time.sleep(0.2)
    bad = [r.target for r in S["up"].requests[n0:]]
    t.check("the upstream saw none of the malformed requests", bad == [], [], bad)
    # h2c upgrade over HTTP/1.1 is never forwarded either
    r = h.request(port, "GET", "/up/h2c", headers=[("Connection", "Upgrade, HTTP2-Settings"), ("Upgrade", "h2c"),
                                                  ("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")])
    rq = S["up"].requests[-1]
    t.check("Upgrade: h2c over HTTP/1.1 is answered as HTTP/1.1, never forwarded",
            r.status == 200 and rq.header("upgrade") is None and rq.header("http2-settings") is None,
            "200, no upgrade upstream", (r.status, rq.headers))


def test_concurrency(t):
    port = S["plain"]
    p = subprocess.run(["h2load", "-n", "300", "-c", "1", "-m", "100", "http://127.0.0.1:%d/up/load" % port],
                       capture_output=True, text=True, timeout=60)
    ok = "300 succeeded" in p.stdout and "status codes: 300 2xx" in p.stdout
    t.check("h2load: 300 requests, 100 concurrent streams on one connection, all 2xx", ok,
            "300 succeeded, 300 2xx", [x for x in p.stdout.splitlines() if "requests:" in x or "status" in x])
    n0 = len(S["up"].requests)
    reqs = [req("/up/c%d" % i, method="POST", body_size=256 << 10) for i in range(100)]
    res = h2run(port, reqs, timeout=60)
    st = res["streams"]
    ups = {r.path: r for r in S["up"].requests[n0:]}
    good = 0
    for i, s in enumerate(st):
        rq = ups.get("/up/c%d" % i)
        if s["status"] == 200 and rq and rq.body_len == 256 << 10 and rq.body_sha256 == s["sha256"]:
            good += 1
    t.check("100 concurrent streams each uploading 256 KiB: all checksummed upstream", good == 100, 100,
            (good, len(st), res.get("error", "")[-300:]))


def test_both_ways(t):
    # 100 streams on one connection, each 1 MiB up and 1 MiB down, all at once
    port = S["plain"]
    n0 = len(S["up"].requests)
    t0 = time.monotonic()
    res = h2run(port, [req("/up/m%d" % i, method="POST", body_size=1 << 20) for i in range(100)], timeout=120)
    print("      100 x 1 MiB both ways: %.1f s" % (time.monotonic() - t0))
    ups = {r.path: r for r in S["up"].requests[n0:]}
    good, bad = 0, []
    for i, s in enumerate(res["streams"]):
        rq = ups.get("/up/m%d" % i)
        up_ok = rq is not None and rq.body_len == 1 << 20 and rq.body_sha256 == s["sha256"]
        down_ok = (s["status"], s["body_len"], s["reset"]) == (200, 1 << 20, None) and \
            s["body_sha256"] == hashlib.sha256(mirror_body(i)).hexdigest()
        good += up_ok and down_ok
        if not (up_ok and down_ok) and len(bad) < 3:
            bad.append((i, s["status"], s["body_len"], s["reset"], rq and rq.body_len))
    t.check("100 concurrent streams, each 1 MiB up and 1 MiB down: all checksummed both ways", good == 100, 100,
            (good, len(res["streams"]), bad, res.get("error", "")[-300:]))


def test_rate_reader(t):
    # a client reading at 1 MiB/s, 4 streams of 64 MiB: the worker holds no more than the
    # windows, one output block and the upstreams' socket buffers
    S["pulled"] = 0
    spec = {"port": S["plain"], "requests": [req("/up/huge-r%d" % i) for i in range(4)], "rate": 1 << 20,
            "timeout": 5, "window": 65535}
    before = S["sl"].rss_kb()
    p = subprocess.Popen(["/usr/bin/python3", "-c", H2_CLIENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    p.stdin.write(json.dumps(spec))
    p.stdin.close()
    peak = before
    for _ in range(16):
        time.sleep(0.25)
        peak = max(peak, S["sl"].rss_kb())
    pulled = S["pulled"]
    out = p.stdout.read()
    p.wait(timeout=30)
    lines = [x for x in out.splitlines() if x.startswith("{")]
    got = sum(s["body_len"] for s in json.loads(lines[-1])["streams"]) if lines else 0
    print("      1 MiB/s reader: read %.1f MiB, upstreams sent %.1f MiB, RSS %d -> peak %d KiB" %
          (got / 1048576.0, pulled / 1048576.0, before, peak))
    t.check("a client reading at 1 MiB/s gets ~1 MiB/s (3-6.5 MiB in 5 s)", 3 << 20 <= got <= 13 << 19,
            "3-6.5 MiB", "%.1f MiB" % (got / 1048576.0))
    t.check("a client reading at 1 MiB/s: the upstreams sent < what it read + 48 MiB (socket buffers)",
            pulled < got + (48 << 20), "< read + 48 MiB", "%.1f MiB pulled, %.1f read" % (pulled / 1048576.0,
                                                                                           got / 1048576.0))
    t.check("a client reading at 1 MiB/s: the worker's RSS grows < 16 MiB", peak - before < 16 * 1024,
            "< 16384 KiB", (before, peak))


def test_limits(t):
    port = S["sl"].port("small")
    n0 = len(S["up"].requests)
    res = h2run(port, [req("/up/s%d" % i, port=port) for i in range(8)])
    codes = [(s["status"], s["reset"]) for s in res["streams"]]
    refused = sum(1 for s in res["streams"] if s["reset"] == 7)
    answered = sum(1 for s in res["streams"] if s["status"] == 200)
    t.check("max_concurrent_streams 5: 8 streams at once -> 5 answered, 3 REFUSED_STREAM",
            (answered, refused) == (5, 3), (5, 3), codes)
    res = h2run(port, [req("/up/h", port=port, extra=[["x-big", "a" * 6000]])])
    s = res["streams"][0] if res["streams"] else {}
    t.check("a header list over max_header_size -> 431", s.get("status") == 431, 431, (s, res.get("error")))
    res = h2run(port, [req("/up/b", method="POST", port=port, body="x" * 4096),
                       req("/up/b2", method="POST", port=port, extra=[["content-length", "4096"]], body="x" * 4096)])
    st = [(s["status"], s["reset"]) for s in res["streams"]]
    t.check("max_body 1k: 4 KiB bodies (with and without content-length) -> 413",
            all(x[0] == 413 for x in st), [(413, None)] * 2, st)
    time.sleep(0.2)
    t.check("the upstream saw none of the refused requests",
            all(r.path not in ("/up/h", "/up/b", "/up/b2") for r in S["up"].requests[n0:]), "none",
            [r.path for r in S["up"].requests[n0:]])
    # CONTINUATION flood: a HEADERS without END_HEADERS, then endless empty CONTINUATIONs
    frames = bytearray()
    hdr = bytes.fromhex("8286") + b"\x84"  # :method GET, :scheme http, :path /
    frames += len(hdr).to_bytes(3, "big") + b"\x01\x00" + (101).to_bytes(4, "big") + hdr
    for _ in range(200):
        frames += (0).to_bytes(3, "big") + b"\x09\x00" + (101).to_bytes(4, "big")
    res = h2run(S["plain"], [], raw=frames.hex(), want_goaway=True, timeout=3)
    t.check("a CONTINUATION flood closes the connection", res.get("closed") or res.get("goaway") is not None,
            "closed", res)
    # idle: GOAWAY after idle_timeout (1s)
    t0 = time.monotonic()
    res = h2run(port, [req("/up/i", port=port)], want_goaway=True, timeout=4)
    el = time.monotonic() - t0
    t.check("an idle HTTP/2 connection gets GOAWAY NO_ERROR at idle_timeout",
            res.get("goaway") is not None and res["goaway"][0] == 0 and el < 3.5, "goaway 0 within ~1s",
            (res.get("goaway"), res.get("closed"), round(el, 2)))


def test_abuse(t):
    port = S["sl"].port("small")
    n0 = len(S["up"].requests)
    res = h2run(S["plain"], [], rapid_reset=5000, want_goaway=True, timeout=3)
    time.sleep(0.5)
    seen = len(S["up"].requests) - n0
    t.check("rapid reset: 5000 streams opened and cancelled -> GOAWAY (an error, not an idle one)",
            res.get("goaway") is not None and res["goaway"][0] != 0, "goaway, error code != 0", res.get("goaway"))
    t.check("rapid reset: the upstream sees a bounded number of requests (< 50)", seen < 50, "< 50", seen)
    t.check("rapid reset: the GOAWAY says ENHANCE_YOUR_CALM (sluice's bucket, before nghttp2's INTERNAL_ERROR)",
            res.get("goaway") is not None and res["goaway"][0] == 11, 11, res.get("goaway"))
    # floods: the client never reads; PINGs (acks queue up), then empty DATA and
    # WINDOW_UPDATE frames that cost the server without carrying anything
    port = S["plain"]  # idle_timeout 60s: only a defence closes these within 3 s
    ping = (8).to_bytes(3, "big") + b"\x06\x00" + (0).to_bytes(4, "big") + b"12345678"
    res = h2run(port, [], raw=ping.hex(), raw_times=20000, want_goaway=True, timeout=3)
    t.check("a PING flood from a client that does not read closes the connection",
            res.get("closed") or res.get("goaway") is not None, "closed", res)
    hd = req("/up/flood", method="POST", open=True)
    empty = (0).to_bytes(3, "big") + b"\x00\x00" + (1).to_bytes(4, "big")
    res = h2run(port, [hd], raw=empty.hex(), raw_times=5000, want_goaway=True, timeout=3)
    t.check("an empty DATA flood closes the connection", res.get("closed") or res.get("goaway") is not None,
            "closed", (res.get("goaway"), res.get("closed")))
    wu = (4).to_bytes(3, "big") + b"\x08\x00" + (0).to_bytes(4, "big") + (1).to_bytes(4, "big")
    res = h2run(port, [], raw=wu.hex(), raw_times=5000, want_goaway=True, timeout=3)
    t.check("a WINDOW_UPDATE flood closes the connection", res.get("closed") or res.get("goaway") is not None,
            "closed", (res.get("goaway"), res.get("closed")))
    # an HPACK bomb: one 3000-byte field, indexed once and referenced 300 times (a few
    # hundred bytes on the wire, 900 KB decoded) -> 431, and the connection lives
    port = S["sl"].port("small")
    res = h2run(port, [req("/up/bomb", port=port, extra=[["x-bomb", "b" * 3000]] * 300)], ping_after=True)
    s = res["streams"][0] if res["streams"] else {}
    t.check("an HPACK bomb (900 KB decoded header list) -> 431, the connection lives",
            (s.get("status"), res.get("alive")) == (431, True), (431, True),
            (s.get("status"), s.get("reset"), res.get("alive"), res.get("error", "")[-300:]))
    # a client with a zero window never gets its response: the stream is reset at
    # idle_timeout (1s) and its upstream connection closed
    t0 = time.monotonic()
    res = h2run(port, [req("/up/big", port=port)], window=0, timeout=5)
    el = time.monotonic() - t0
    s = res["streams"][0] if res["streams"] else {}
    t.check("a zero-window client's stream is reset at idle_timeout", s.get("reset") is not None and el < 4,
            "reset within ~1s", (s.get("status"), s.get("reset"), round(el, 2), res.get("error", "")[-300:]))


def test_slow_reader(t):
    # 4 streams of 64 MiB each to a client that reads nothing for 2 s: the upstreams are
    # read no further than the socket buffers and one output block allow, and the worker's
    # memory stays bounded
    spec = {"port": S["plain"], "requests": [req("/up/huge%d" % i) for i in range(4)], "ready": True, "stall": 2,
            "timeout": 1}
    S["pulled"] = 0
    before = S["sl"].rss_kb()
    p = subprocess.Popen(["/usr/bin/python3", "-c", H2_CLIENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    p.stdin.write(json.dumps(spec))
    p.stdin.close()
    p.stdout.readline()
    time.sleep(1.5)
    during = S["sl"].rss_kb()
    pulled = S["pulled"]
    p.stdout.read()
    p.wait(timeout=30)
    t.check("a client that reads nothing: the upstreams sent < 48 of 256 MiB (socket buffers)",
            pulled < 48 << 20, "< 48 MiB", "%.1f MiB" % (pulled / 1048576.0))
    t.check("a client that reads nothing: the worker's RSS grows < 16 MiB", during - before < 16 * 1024,
            "< 16384 KiB", (before, during))


def test_long_download(t):
    # a client that sends a WINDOW_UPDATE for every DATA frame it reads is no flood:
    # 64 MiB through a 64 KiB window
    res = h2run(S["plain"], [req("/up/huge9")], window=65535, timeout=60)
    s = res["streams"][0] if res["streams"] else {}
    t.check("64 MiB through a 64 KiB window (thousands of WINDOW_UPDATEs) arrives whole",
            (s.get("status"), s.get("body_len"), s.get("reset")) == (200, 64 << 20, None), (200, 64 << 20, None),
            (s.get("status"), s.get("body_len"), s.get("reset"), res.get("closed"), res.get("error", "")[-300:]))


def test_off(t):
    port = S["sl"].port("off")
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000"))
    data = h.recv_all(s)
    s.close()
    t.check("http2: false: prior knowledge is refused with an HTTP/1.1 error",
            data.startswith(b"HTTP/1.1 4") or data == b"", "HTTP/1.1 4xx", data[:60])
    r = h.request(port, "GET", "/up/off")
    t.check("http2: false: HTTP/1.1 answers", r.status == 200, 200, r.status)
    for name, listener, want in (("default", "tls", "h2"), ("http2: false", "offtls", "http/1.1")):
        ctx = ssl.create_default_context(cafile=S["ca"])
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", S["sl"].port(listener)), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tl:
                got = tl.selected_alpn_protocol()
        t.check("%s: ALPN h2,http/1.1 -> %s" % (name, want), got == want, want, got)


def test_drain(t):
    # a stream in flight when the worker drains (SIGTERM) finishes, and the client gets GOAWAY
    slow = h.MockUpstream(handler=lambda rq: (time.sleep(1.0), h.mock_upstream.default_handler(rq))[1], name="slow")
    sl = h.start_sluice(f"""
workers: 1
admin: {{ listen: 127.0.0.1:0 }}
watch: false
listeners: [ {{ name: web, listen: 127.0.0.1:0 }} ]
upstreams: [ {{ name: up, targets: [ {{ address: {slow.address} }} ] }} ]
routes: [ {{ name: up, match: {{ paths: [/] }}, upstream: up }} ]
""", suite=t)
    # a reload retires the listener's generation: the same two GOAWAYs, the stream finishes
    p = subprocess.Popen(["nghttp", "-nv", "http://127.0.0.1:%d/slow" % sl.port("web")], stdout=subprocess.PIPE,
                         text=True)
    # in flight once the upstream has it (it answers 1 s later), not after a fixed 0.4 s
    # that a slow start of nghttp could take whole
    slow.wait_requests(1)
    code, _ = sl.reload()
    out, _ = p.communicate(timeout=20)
    last = re.findall(r"recv GOAWAY frame[^\n]*\n\s*\(last_stream_id=(\d+), error_code=NO_ERROR", out)
    t.check("reload: the in-flight stream finishes with 200 and the client got both GOAWAYs",
            code == 200 and p.returncode == 0 and ":status: 200" in out and len(last) == 2 and
            last[0] == "2147483647", "200, two GOAWAYs", (code, p.returncode, last))
    p = subprocess.Popen(["nghttp", "-nv", "http://127.0.0.1:%d/slow" % sl.port("web")], stdout=subprocess.PIPE,
                         text=True)
    slow.wait_requests(2)
    sl.signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=20)
    t.check("drain: the in-flight stream finishes with 200", p.returncode == 0 and ":status: 200" in out, "200",
            (p.returncode, [x for x in out.splitlines() if "status" in x or "RST" in x]))
    sent = re.findall(r"send HEADERS frame <[^>]*stream_id=(\d+)>", out)
    last = re.findall(r"recv GOAWAY frame[^\n]*\n\s*\(last_stream_id=(\d+), error_code=NO_ERROR", out)
    t.check("drain: a shutdown notice (GOAWAY 2^31-1), then GOAWAY NO_ERROR naming the request's stream",
            sent and last == ["2147483647"] + sent[:1], ["2147483647"] + sent[:1], last)
    t.check("drain: the gateway exits", sl.wait(10) is not None, "exited", sl.alive())


t.run(setup, test_curl_both_ways, test_semantics, test_plugins, test_plugins_more, test_framing, test_malformed, test_concurrency, test_both_ways, test_rate_reader, test_limits, test_abuse, test_slow_reader, test_long_download, test_off, test_drain)
