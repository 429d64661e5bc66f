"""Acceptance 3: the HTTP/1.1 proxy path end to end.

100 MiB bodies stream both ways (Content-Length and chunked, checksummed end to
end, with pauses that force backpressure) while the gateway's VmHWM grows by
less than 16 MiB; upstream keep-alive reuse; 50 pipelined requests in order;
hop-by-hop removal and X-Forwarded-*; 502 on refused connect; 504 on a silent
upstream; a truncated upstream body ends the client connection without a
second response; 100-continue; strip_prefix; the no-route 404; /metrics.
"""

import re
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("proxy_stream", budget=58)
BIG = 100 << 20


def main_handler(req):
    p = req.path
    if p.startswith("/u/big-download-cl"):
        return h.Response(200, stream=h.pattern_blocks(BIG, seed=2), length=BIG,
                          headers=[("Content-Type", "application/octet-stream")])
    if p.startswith("/u/big-download-chunked"):
        return h.Response(200, stream=h.pattern_blocks(BIG, block=100000, seed=3), chunked=True)
    if p.startswith("/pipe/"):
        return h.Response(200, ("path=" + req.target).encode(), [("Content-Type", "text/plain")])
    if p == "/u/drip":
        return h.Response(200, stream=[b"first-piece;", b"second-piece"], length=24,
                          chunk_delay=1.0)
    if p == "/u/trunc":
        return h.Response(200, b"A" * 1000, truncate=300)
    if p == "/u/trunc-chunked":
        return h.Response(200, stream=[b"B" * 100] * 10, chunked=True, truncate=300)
    if p == "/u/hop":
        return h.Response(
            200, json.dumps(req.summary()).encode(),
            [("Content-Type", "application/json"), ("Connection", "X-Resp-Hop"),
             ("X-Resp-Hop", "1"), ("Keep-Alive", "timeout=99, max=7"),
             ("Proxy-Authenticate", "Basic realm=x"), ("Trailer", "X-Foo"),
             ("Upgrade", "foo/1"), ("X-End", "ok")])
    return h.json_response(req.summary())


def slow_reader(req):
    # the upstream stops reading for a second: the gateway must stop reading the client
    if "slowread" in req.target:
        time.sleep(1.0)


S = {}


def setup(t):
    main = h.MockUpstream(main_handler, "main", pre_body=slow_reader)
    ka = h.MockUpstream(lambda r: h.Response(200, ("ka %s %d" % (r.path, r.conn.id)).encode()),
                        "ka")
    silent = h.MockUpstream(lambda r: h.HANG, "silent")
    dead_sock, dead_port = h.refused_port()
    cfg = """\
workers: 1
shutdown_timeout: 5s
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http, header_timeout: 5s, idle_timeout: 60s, max_body: 0 }
  - { name: small, listen: 127.0.0.1:0, protocol: http, max_body: 1KiB }
upstreams:
  - name: main
    targets: [ { address: %s } ]
    keepalive: { max_idle: 64, idle_timeout: 60s }
    timeouts: { connect: 2s, read: 10s, write: 30s }
  - name: ka
    targets: [ { address: %s } ]
    keepalive: { max_idle: 64, idle_timeout: 60s }
    timeouts: { connect: 2s, read: 5s, write: 30s }
  - name: dead
    targets: [ { address: 127.0.0.1:%d } ]
    timeouts: { connect: 2s, read: 5s, write: 30s }
  - name: silent
    targets: [ { address: %s } ]
    timeouts: { connect: 2s, read: 1s, write: 30s }
routes:
  - { name: main, match: { paths: [/u/] }, upstream: main }
  - { name: ka, match: { paths: [/ka/] }, upstream: ka }
  - { name: pipe, match: { paths: [/pipe/] }, upstream: main }
  - { name: dead, match: { paths: [/dead] }, upstream: dead }
  - { name: silent, match: { paths: [/silent] }, upstream: silent }
  - { name: strip, match: { paths: [/strip] }, upstream: main, strip_prefix: true }
  - { name: echo, match: { paths: [/echo] }, plugins: [ { name: echo } ] }
""" % (main.address, ka.address, dead_port, silent.address)
    s = h.start_sluice(cfg, suite=t)
    S.update(main=main, ka=ka, silent=silent, dead_sock=dead_sock, s=s, port=s.port("web"))
    # warm up every kind of path once, then take the memory baseline
    r = h.request(S["port"], "GET", "/echo/warm")
    t.check("warm-up: echo route answers 200", r.status == 200, 200, r.status)
    r = h.request(S["port"], "POST", "/u/warm", body=b"x" * 100000)
    t.check("warm-up: proxied POST answers 200", r.status == 200, 200, r.status)
    S["hwm0"] = s.hwm_kb()
    t.info("baseline VmHWM %d kB, VmRSS %d kB" % (S["hwm0"], s.rss_kb()))


def upload(t, chunked, label):
    c = h.Client(S["port"], timeout=30)
    path = "/u/big-upload-%s-slowread" % label
    hdrs = "Transfer-Encoding: chunked" if chunked else "Content-Length: %d" % BIG
    c.send("POST %s HTTP/1.1\r\nHost: big.test\r\n%s\r\n\r\n" % (path, hdrs))
    t0 = time.monotonic()
    for piece in h.pattern_blocks(BIG, seed=5):
        if chunked:
            c.send(b"%x\r\n" % len(piece) + piece + b"\r\n")
        else:
            c.send(piece)
    if chunked:
        c.send(b"0\r\n\r\n")
    r = c.read_response(timeout=30)
    dt = time.monotonic() - t0
    c.close()
    t.info("%s upload: %.2f s" % (label, dt))
    t.check("100 MiB %s upload -> 200" % label, r.status == 200, 200, (r.status, r.body[:200]))
    info = r.json() if r.status == 200 else {}
    t.check("100 MiB %s upload: upstream got every byte" % label, info.get("body_len") == BIG, BIG,
            info.get("body_len"))
    t.check("100 MiB %s upload: sha256 matches end to end" % label,
            info.get("sha256") == h.pattern_sha256(BIG, seed=5), h.pattern_sha256(BIG, seed=5),
            info.get("sha256"))
    hdrs = dict((k.lower(), v) for k, v in info.get("headers", []))
    t.check("%s upload: upstream head has exactly one framing header" % label,
            ("content-length" in hdrs) != ("transfer-encoding" in hdrs), "CL xor TE",
            {k: hdrs.get(k) for k in ("content-length", "transfer-encoding")})


def test_upload_cl(t):
    upload(t, False, "content-length")


def test_upload_chunked(t):
    upload(t, True, "chunked")


def download(t, path, seed, block, label):
    c = h.Client(S["port"], timeout=30)
    c.send(h.build_request("GET", path, host="big.test"))
    n = [0]
    paused = [False]

    def sink(piece):
        n[0] += len(piece)
        if not paused[0] and n[0] > (1 << 20):
            paused[0] = True
            time.sleep(1.0)  # the client stops reading: the gateway must stop reading upstream
    t0 = time.monotonic()
    r = c.read_response(timeout=40, sink=sink)
    dt = time.monotonic() - t0
    c.close()
    t.info("%s download: %.2f s, framing %s, %d chunks" % (label, dt, r.framing,
                                                            len(r.chunk_sizes)))
    t.check("100 MiB %s download -> 200" % label, r.status == 200, 200, r.status)
    t.check("100 MiB %s download: every byte arrived" % label, r.body_len == BIG, BIG, r.body_len)
    want = h.pattern_sha256(BIG, block=block, seed=seed)
    t.check("100 MiB %s download: sha256 matches end to end" % label, r.sha256 == want, want,
            r.sha256)
    return r


def test_download_cl(t):
    r = download(t, "/u/big-download-cl", 2, 1 << 20, "content-length")
    t.check("content-length download keeps Content-Length: %d" % BIG,
            r.header("Content-Length") == str(BIG), str(BIG), r.headers)


def test_download_chunked(t):
    download(t, "/u/big-download-chunked", 3, 100000, "chunked")


def test_memory_after_streams(t):
    s = S["s"]
    hwm = s.hwm_kb()
    t.info("VmHWM after 400 MiB: %d kB (growth %d kB)" % (hwm, hwm - S["hwm0"]))
    t.check("VmHWM grew < 16 MiB over 400 MiB of streaming (baseline %d kB)" % S["hwm0"],
            hwm - S["hwm0"] < 16384, "< 16384 kB growth", "%d kB growth (VmHWM %d kB)"
            % (hwm - S["hwm0"], hwm))


def test_keepalive_reuse(t):
    ka = S["ka"]
    c = h.Client(S["port"])
    ok = 0
    for i in range(20):
        c.send(h.build_request("GET", "/ka/%d" % i))
        r = c.read_response()
        ok += r.status == 200 and r.body == b"ka /ka/%d 0" % i
    t.check("20 sequential keep-alive requests on one client connection answered in full",
            ok == 20, 20, ok)
    t.check("client connection still open after 20 requests", c.pending(0.1) == b""
            and c.closed_how is None, "open", c.closed_how)
    c.close()
    ok = 0
    for j in range(4):
        c = h.Client(S["port"])
        for i in range(3):
            c.send(h.build_request("GET", "/ka/c%d-%d" % (j, i)))
            r = c.read_response()
            ok += r.status == 200
        c.close()
        time.sleep(0.05)
    t.check("12 more requests over 4 further client connections -> 200", ok == 12, 12, ok)
    t.check("upstream accepted exactly 1 connection for 32 requests (pooled, workers: 1)",
            ka.accepted == 1, 1, ka.accepted)
    t.check("upstream saw all 32 requests", len(ka.requests) == 32, 32, len(ka.requests))


def test_pipelining(t):
    c = h.Client(S["port"], timeout=10)
    c.send(b"".join(h.build_request("GET", "/pipe/%d" % i) for i in range(50)))
    got = []
    try:
        for i in range(50):
            got.append(c.read_response(timeout=10))
    except Exception as e:
        t.info("pipelining stopped after %d responses: %r" % (len(got), e))
    t.check("50 pipelined GETs -> 50 responses", len(got) == 50, 50, len(got))
    bad = [(i, r.status, r.body) for i, r in enumerate(got)
           if r.status != 200 or r.body != b"path=/pipe/%d" % i]
    t.check("50 pipelined responses are in request order with the right bodies", not bad, [],
            bad[:5])
    # a mixed pipeline: GET, POST with a body, HEAD, GET
    reqs = [h.build_request("GET", "/u/m1"), h.build_request("POST", "/u/m2", body=b"z" * 777),
            h.build_request("HEAD", "/u/m3"), h.build_request("GET", "/u/m4")]
    c.send(b"".join(reqs))
    try:
        rs = [c.read_response(m, timeout=10) for m in ("GET", "POST", "HEAD", "GET")]
    except Exception as e:
        rs = []
        t.info("mixed pipeline failed: %r" % e)
    t.check("mixed pipeline (GET, POST body, HEAD, GET) -> 4 responses", len(rs) == 4, 4, len(rs))
    if len(rs) == 4:
        j1, j2, j4 = rs[0].json(), rs[1].json(), rs[3].json()
        t.check("mixed pipeline: paths in order", (j1["path"], j2["path"], j4["path"])
                == ("/u/m1", "/u/m2", "/u/m4"), ("/u/m1", "/u/m2", "/u/m4"),
                (j1["path"], j2["path"], j4["path"]))
        t.check("mixed pipeline: POST body of 777 bytes arrived", j2["body_len"] == 777, 777,
                j2["body_len"])
        t.check("mixed pipeline: HEAD answer has no body but a Content-Length",
                rs[2].status == 200 and rs[2].body == b"" and rs[2].header("Content-Length"),
                "200, CL, no body", (rs[2].status, rs[2].headers))
        t.check("nothing extra after the mixed pipeline", c.pending(0.2) == b"", b"",
                "see actual")
    c.close()


def test_hop_by_hop(t):
    c = h.Client(S["port"])
    c.send("GET /u/hop HTTP/1.1\r\nHost: example.test\r\n"
           "Connection: keep-alive, X-Custom-Hop\r\nX-Custom-Hop: secret\r\n"
           "Keep-Alive: timeout=5, max=7\r\nTE: trailers\r\nTrailer: X-Trail\r\n"
           "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n"
           "Proxy-Authorization: Basic Zm9vOmJhcg==\r\nProxy-Connection: keep-alive\r\n"
           "X-Keep: yes\r\n\r\n")
    r = c.read_response()
    t.check("hop-by-hop request -> 200", r.status == 200, 200, (r.status, r.body[:300]))
    if r.status != 200:
        return
    up = r.json()
    uh = up["headers"]
    names = [n.lower() for n, _ in uh]
    for hop in ("x-custom-hop", "keep-alive", "te", "trailer", "upgrade", "http2-settings",
                "proxy-authorization", "proxy-connection", "transfer-encoding"):
        t.check("request header %s does not reach the upstream" % hop, hop not in names,
                "absent", h.hall(uh, hop))
    conn_tokens = set(x.strip().lower() for v in h.hall(uh, "connection") for x in v.split(","))
    t.check("upstream Connection header lists nothing but keep-alive/close",
            conn_tokens <= {"keep-alive", "close", ""}, "{keep-alive}", conn_tokens)
    t.check("end-to-end X-Keep reaches the upstream", h.hall(uh, "x-keep") == ["yes"], ["yes"],
            h.hall(uh, "x-keep"))
    t.check("X-Forwarded-For: 127.0.0.1", h.hall(uh, "x-forwarded-for") == ["127.0.0.1"],
            ["127.0.0.1"], h.hall(uh, "x-forwarded-for"))
    t.check("X-Forwarded-Proto: http", h.hall(uh, "x-forwarded-proto") == ["http"], ["http"],
            h.hall(uh, "x-forwarded-proto"))
    t.check("X-Forwarded-Host: example.test",
            h.hall(uh, "x-forwarded-host") == ["example.test"], ["example.test"],
            h.hall(uh, "x-forwarded-host"))
    rid = h.hall(uh, "x-request-id")
    t.check("X-Request-ID set (one non-empty value)", len(rid) == 1 and rid[0].strip() != "",
            "one id", rid)
    t.check("exactly one Host header upstream", len(h.hall(uh, "host")) == 1, 1,
            h.hall(uh, "host"))
    # response side
    rn = [n.lower() for n, _ in r.headers]
    for hop in ("x-resp-hop", "proxy-authenticate", "trailer", "upgrade"):
        t.check("response header %s does not reach the client" % hop, hop not in rn, "absent",
                r.header_all(hop))
    t.check("upstream's Keep-Alive: timeout=99 does not reach the client",
            "timeout=99, max=7" not in r.header_all("keep-alive"), "absent",
            r.header_all("keep-alive"))
    t.check("client Connection header does not list X-Resp-Hop",
            all("x-resp-hop" not in v.lower() for v in r.header_all("connection")), "absent",
            r.header_all("connection"))
    t.check("end-to-end X-End reaches the client", r.header("X-End") == "ok", "ok",
            r.header("X-End"))

    # an empty Host (a target with no authority, RFC 9112 3.2) is copied, never doubled
    c.send(b"GET /u/empty-host HTTP/1.1\r\nHost: \r\n\r\n")
    r = c.read_response()
    hosts = h.hall(r.json()["headers"], "host") if r.status == 200 else None
    t.check("an empty client Host reaches the upstream as exactly one (empty) Host", hosts == [""],
            [""], hosts)

    # the upstream gets one X-Request-ID, the request's own id: the client's first when it
    # can be an id (1..32 visible ASCII characters), else the gateway's 32 hex digits
    for sent, want in ((["abc"], "abc"), (["abc", "def"], "abc"), (["x" * 40], None), ([""], None)):
        c.send(h.build_request("GET", "/u/rid", [("X-Request-ID", v) for v in sent]))
        r = c.read_response()
        rid = h.hall(r.json()["headers"], "x-request-id") if r.status == 200 else None
        ok = rid is not None and len(rid) == 1 and (
            rid[0] == want if want else re.fullmatch(r"[0-9a-f]{32}", rid[0]) is not None)
        t.check("client X-Request-ID %r: the upstream gets exactly one, %s" % (sent, want or "the gateway's"),
                ok, [want or "32 hex digits"], rid)

    # a client X-Forwarded-For is extended (or replaced) with the real peer, never trusted alone
    c.send(h.build_request("GET", "/u/xff", [("X-Forwarded-For", "10.1.2.3")]))
    r = c.read_response()
    xff = h.hall(r.json()["headers"], "x-forwarded-for") if r.status == 200 else None
    t.check("client X-Forwarded-For: one header ending in 127.0.0.1",
            xff is not None and len(xff) == 1 and xff[0].split(",")[-1].strip() == "127.0.0.1",
            ["10.1.2.3, 127.0.0.1"], xff)

    # a chunked request body is re-framed, never forwarded with two framings
    c.send("POST /u/chunky HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
           "3\r\nhel\r\n3;ext=1\r\nlo \r\n5\r\nworld\r\n0\r\n\r\n")
    r = c.read_response()
    up = r.json() if r.status == 200 else {"headers": []}
    t.check("chunked request body arrives as 'hello world'", up.get("body") == "hello world",
            "hello world", up.get("body"))
    te = h.hall(up["headers"], "transfer-encoding")
    cl = h.hall(up["headers"], "content-length")
    t.check("re-framed body: CL 11 or a single 'chunked', not both",
            (cl == ["11"] and te == []) or (te == ["chunked"] and cl == []),
            "CL 11 xor TE chunked", {"cl": cl, "te": te})
    c.close()


def test_response_streams(t):
    """The first body piece reaches the client while the upstream is still sending."""
    c = h.Client(S["port"])
    t0 = time.monotonic()
    c.send(h.build_request("GET", "/u/drip"))
    first = b""
    while b"first-piece;" not in first and time.monotonic() - t0 < 3:
        d, how = c.read_until_close(0.1)
        first += d
        if how != "timeout":
            break
    dt = time.monotonic() - t0
    t.check("first body piece arrives before the upstream finishes (< 0.8 s; rest after 1 s)",
            b"first-piece;" in first and dt < 0.8, "< 0.8 s", "%.2f s, %r" % (dt, first[-40:]))
    rest, _ = c.read_until_close(2)
    t.check("the rest follows", (first + rest).endswith(b"first-piece;second-piece"),
            b"...first-piece;second-piece", (first + rest)[-40:])
    c.close()


def test_client_close_semantics(t):
    c = h.Client(S["port"])
    c.send(h.build_request("GET", "/u/cc", [("Connection", "close")]))
    r = c.read_response()
    data, how = c.read_until_close(2)
    c.close()
    t.check("Connection: close request -> 200 then the gateway closes", r.status == 200
            and data == b"" and how in ("eof", "reset"), (200, b"", "eof"),
            (r.status, data[:80], how))
    t.check("Connection: close request -> response says Connection: close",
            "close" in (r.header("Connection") or "").lower(), "close", r.header("Connection"))
    c = h.Client(S["port"])
    c.send(b"GET /u/ten HTTP/1.0\r\nHost: a\r\n\r\n")
    data, how = c.read_until_close(2)
    c.close()
    rs, rest, err = h.parse_responses(data)
    t.check("HTTP/1.0 request without keep-alive -> one response then close",
            len(rs) == 1 and rs[0].status == 200 and how in ("eof", "reset"), (1, 200, "eof"),
            (len(rs), rs[0].status if rs else None, how))
    if rs:
        t.check("HTTP/1.0 response body is the upstream's answer",
                rs[0].json().get("path") == "/u/ten", "/u/ten", rs[0].body[:100])


def test_max_body(t):
    main = S["main"]
    port = S["s"].port("small")
    r = h.request(port, "POST", "/u/max-ok", body=b"m" * 1024)
    t.check("max_body 1KiB: a 1024-byte body passes", r.status == 200, 200, r.status)
    c = h.Client(port)
    c.send(h.build_request("POST", "/u/max-big", body=b"m" * 2000))
    try:
        st = c.read_response(timeout=4).status
    except Exception as e:
        st = repr(e)
    c.close()
    t.check("max_body 1KiB: a 2000-byte Content-Length body -> 413", st == 413, 413, st)
    t.check("max_body: the oversized request never reaches the upstream",
            not any(x.path == "/u/max-big" for x in main.requests), "absent",
            [x.path for x in main.requests][-3:])


def test_refused(t):
    t0 = time.monotonic()
    r = h.request(S["port"], "GET", "/dead/x", timeout=5)
    dt = time.monotonic() - t0
    t.check("connect refused -> 502", r.status == 502, 502, r.status)
    t.check("502 arrives quickly (< 3 s)", dt < 3, "< 3 s", "%.2f s" % dt)


def test_silent(t):
    silent = S["silent"]
    c = h.Client(S["port"], timeout=8)
    t0 = time.monotonic()
    c.send(h.build_request("GET", "/silent/x"))
    try:
        r = c.read_response(timeout=8)
        status = r.status
    except Exception as e:
        status = repr(e)
    dt = time.monotonic() - t0
    c.close()
    t.check("silent upstream -> 504", status == 504, 504, status)
    t.check("504 after timeouts.read (1 s): elapsed in [0.9, 5] s", 0.9 <= dt <= 5.0,
            "0.9..5 s", "%.2f s" % dt)
    t.check("the silent upstream did receive the request", len(silent.requests) == 1, 1,
            len(silent.requests))
    closed = silent.conns[0].eof_event.wait(3) if silent.conns else False
    t.check("the gateway closed the timed-out upstream connection", closed, "EOF at upstream",
            "still open")


def test_truncated(t):
    c = h.Client(S["port"])
    c.send(h.build_request("GET", "/u/trunc"))
    data, how = c.read_until_close(5)
    c.close()
    t.check("truncated CL body: client connection closed", how in ("eof", "reset"),
            "eof", how)
    t.check("truncated CL body: exactly one status line", data.count(b"HTTP/1.") == 1, 1,
            data[:300])
    head, _, body = data.partition(b"\r\n\r\n")
    t.check("truncated CL body: status 200 forwarded", head.startswith(b"HTTP/1.1 200"),
            "HTTP/1.1 200", head[:100])
    if b"content-length: 1000" in head.lower():
        t.check("truncated CL body: the client got the 300 bytes sent, not 1000",
                body == b"A" * 300, "300 x 'A'", "%d bytes %r" % (len(body), body[:40]))
    else:
        # re-framed as chunked: the terminating chunk must never be sent
        t.check("truncated body re-framed as chunked has no terminating 0-chunk",
                b"transfer-encoding: chunked" in head.lower() and not body.endswith(b"0\r\n\r\n"),
                "chunked, no 0\\r\\n\\r\\n", data[-60:])

    c = h.Client(S["port"])
    c.send(h.build_request("GET", "/u/trunc-chunked"))
    data, how = c.read_until_close(5)
    c.close()
    t.check("truncated chunked body: client connection closed", how in ("eof", "reset"), "eof",
            how)
    t.check("truncated chunked body: exactly one status line", data.count(b"HTTP/1.") == 1, 1,
            data[:300])
    t.check("truncated chunked body: no terminating 0-chunk reaches the client",
            not data.endswith(b"0\r\n\r\n"), "no 0\\r\\n\\r\\n at the end", data[-60:])
    head, _, body = data.partition(b"\r\n\r\n")
    t.check("truncated chunked body: the 300 data bytes arrived", body.count(b"B") == 300, 300,
            body.count(b"B"))


def test_continue(t):
    c = h.Client(S["port"])
    c.send("POST /u/continue HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
           "Content-Length: 11\r\n\r\n")
    t0 = time.monotonic()
    try:
        r1 = c.read_response(timeout=2, skip_interim=False)
        first = (r1.version, r1.status, r1.reason)
    except Exception as e:
        first = repr(e)
    dt = time.monotonic() - t0
    t.check("Expect: 100-continue -> 'HTTP/1.1 100 Continue' before the body is sent",
            first == ("HTTP/1.1", 100, "Continue"), ("HTTP/1.1", 100, "Continue"), first)
    t.check("100 Continue arrives promptly (< 1 s)", dt < 1.0, "< 1 s", "%.2f s" % dt)
    c.send(b"hello world")
    try:
        r = c.read_response(timeout=5)
        final = (r.status, r.json().get("body"))
    except Exception as e:
        final = repr(e)
    t.check("after 100 Continue the final response is 200 with the body upstream",
            final == (200, "hello world"), (200, "hello world"), final)
    c.close()


def test_strip_prefix(t):
    cases = [("/strip/a/b?q=1", "/a/b?q=1"), ("/strip", "/"), ("/strip/", "/")]
    for sent, want in cases:
        r = h.request(S["port"], "GET", sent)
        got = r.json().get("target") if r.status == 200 else (r.status, r.body[:100])
        t.check("strip_prefix: %s reaches the upstream as %s" % (sent, want), got == want, want,
                got)


def test_no_route(t):
    main = S["main"]
    before = main.snapshot()
    r = h.request(S["port"], "GET", "/nothing/here")
    t.check("no route -> 404", r.status == 404, 404, r.status)
    try:
        body = r.json()
    except ValueError:
        body = r.body
    t.check("no route body is JSON {\"error\":\"no route\"}", body == {"error": "no route"},
            {"error": "no route"}, body)
    ct = (r.header("Content-Type") or "").lower()
    t.check("no route Content-Type application/json", ct.startswith("application/json"),
            "application/json", ct)
    t.check("no route never reaches an upstream", main.snapshot() == before, before,
            main.snapshot())


def test_metrics(t):
    s = S["s"]
    held = h.Client(S["port"])  # one open connection on the listener during the scrape
    held.send(h.build_request("GET", "/echo/held"))
    held.read_response()
    time.sleep(0.2)
    r, samples = None, None
    try:
        r, samples = s.metrics()
    except Exception as e:
        t.check("/metrics parses as Prometheus text", False, "valid exposition", repr(e))
        held.close()
        return
    held.close()
    t.check("/metrics -> 200", r.status == 200, 200, r.status)
    t.check("/metrics Content-Type text/plain",
            (r.header("Content-Type") or "").startswith("text/plain"), "text/plain",
            r.header("Content-Type"))
    names = set(n for n, _, _ in samples)
    for n in ("sluice_requests_total", "sluice_request_duration_seconds_bucket",
              "sluice_request_duration_seconds_sum", "sluice_request_duration_seconds_count",
              "sluice_upstream_requests_total", "sluice_connections_active"):
        t.check("/metrics has %s" % n, n in names, n, sorted(names)[:40])
    v = h.metric_values(samples, "sluice_requests_total", route="pipe", code="200")
    t.check('sluice_requests_total{route="pipe",code="200"} == 50', v == [50.0], [50.0], v)
    v = h.metric_values(samples, "sluice_requests_total", route="dead", code="502")
    t.check('sluice_requests_total{route="dead",code="502"} == 1', v == [1.0], [1.0], v)
    v = h.metric_values(samples, "sluice_requests_total", route="silent", code="504")
    t.check('sluice_requests_total{route="silent",code="504"} == 1', v == [1.0], [1.0], v)
    inf = h.metric_values(samples, "sluice_request_duration_seconds_bucket", route="pipe",
                          le="+Inf")
    cnt = h.metric_values(samples, "sluice_request_duration_seconds_count", route="pipe")
    t.check('duration histogram for route="pipe": +Inf bucket == count == 50',
            inf == [50.0] and cnt == [50.0], ([50.0], [50.0]), (inf, cnt))
    buckets = [(l.get("le"), v) for n, l, v in samples
               if n == "sluice_request_duration_seconds_bucket" and l.get("route") == "pipe"]
    mono = all(buckets[i][1] <= buckets[i + 1][1] for i in range(len(buckets) - 1))
    t.check("duration buckets are cumulative (non-decreasing)", len(buckets) > 1 and mono,
            "non-decreasing", buckets)
    ka = S["ka"]
    v = h.metric_values(samples, "sluice_upstream_requests_total", upstream="ka",
                        target=ka.address, code="200")
    t.check('sluice_upstream_requests_total{upstream="ka",target="%s",code="200"} == 32'
            % ka.address, v == [32.0], [32.0], v)
    v = h.metric_values(samples, "sluice_connections_active", listener="web")
    t.check('sluice_connections_active{listener="web"} >= 1 while a connection is open',
            len(v) == 1 and v[0] >= 1, ">= 1", v)
    leaked = [l for n, l, _ in samples if "/nothing" in json.dumps(l) or "/u/" in json.dumps(l)]
    t.check("no metric label carries request data (paths)", not leaked, [], leaked[:3])


def test_memory_end(t):
    s = S["s"]
    hwm = s.hwm_kb()
    t.check("VmHWM grew < 16 MiB over the whole test", hwm - S["hwm0"] < 16384,
            "< 16384 kB", "%d kB" % (hwm - S["hwm0"]))
    code = s.stop()
    t.check("gateway exits 0 on SIGTERM", code == 0, 0, code)
    S["dead_sock"].close()


t.run(setup, test_upload_cl, test_upload_chunked, test_download_cl, test_download_chunked,
      test_memory_after_streams, test_keepalive_reuse, test_pipelining, test_hop_by_hop,
      test_response_streams, test_client_close_semantics, test_max_body,
      test_refused, test_silent, test_truncated, test_continue, test_strip_prefix, test_no_route,
      test_metrics, test_memory_end)
