"""Acceptance 5: upstream responses are framed by the rules, not by their headers.

A 204/304 or a reply to HEAD has no body whatever its Content-Length says:
the extra bytes an upstream sends after such a head must never become (part
of) the answer to the next request on that pooled connection. Either the
gateway discards the connection or it stays in sync; in both cases the next
client response must be exactly the upstream's answer to that request.
Malformed upstream replies (CL+TE, differing CLs, a bad CL, a bad status line)
are a 502, and the gateway closes that upstream connection (the upstream sees
EOF) and never reuses it.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("upstream_framing", budget=55)

FAKE = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nX-Smuggled: yes\r\n\r\nLEAKED"

RAW = {
    "/204": b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nXXXXX",
    "/204-smuggle": b"HTTP/1.1 204 No Content\r\nContent-Length: %d\r\n\r\n" % len(FAKE) + FAKE,
    "/204-late": [b"HTTP/1.1 204 No Content\r\nContent-Length: %d\r\n\r\n" % len(FAKE), 0.3, FAKE],
    "/304": b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nETag: \"x\"\r\n\r\nXXXXX",
    "/head": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nXXXXX",
    "/head-smuggle": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(FAKE) + FAKE,
    "/head-late": [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(FAKE), 0.3, FAKE],
    "/clte": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
             b"5\r\nhello\r\n0\r\n\r\n",
    "/tecl": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
             b"5\r\nhello\r\n0\r\n\r\n",
    "/twocl": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "/badcl": b"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\nhello",
    "/badstatus": b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok",
    "/badchunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    "/hugechunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"10000000000000000\r\nhello\r\n0\r\n\r\n",
    "/fold": b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
    "/barelf": b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
    "/nul": b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nok",
    "/spacename": b"HTTP/1.1 200 OK\r\nX A: b\r\nContent-Length: 2\r\n\r\nok",
    "/cl55": b"HTTP/1.1 200 OK\r\nContent-Length: 2,2\r\n\r\nok",
}


def answer(target):
    return ("answer to %s" % target).encode()


def handler(req):
    if req.path in RAW:
        return RAW[req.path]
    if req.path == "/close-delimited":
        # no Content-Length, no Transfer-Encoding: the body ends when the upstream closes
        return h.Response(200, b"body ended by close", framing=False, after="close")
    if req.path == "/conn-close":
        # announces the close, then closes right after the response
        return h.Response(200, answer(req.target), [("Connection", "close")], after="close")
    return h.Response(200, answer(req.target), [("Content-Type", "text/plain")])


S = {}


def setup(t):
    up = h.MockUpstream(handler, "up")
    cfg = """\
workers: 1
shutdown_timeout: 5s
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http, header_timeout: 5s, idle_timeout: 60s }
upstreams:
  - name: up
    targets: [ { address: %s } ]
    keepalive: { max_idle: 64, idle_timeout: 60s }
    timeouts: { connect: 2s, read: 2s, write: 30s }
routes:
  - { name: all, match: { paths: [/] }, upstream: up }
""" % up.address
    s = h.start_sluice(cfg, suite=t)
    S.update(up=up, s=s, port=s.port("web"))
    r = h.request(S["port"], "GET", "/warm")
    t.check("warm-up request -> 200 'answer to /warm'", (r.status, r.body)
            == (200, answer("/warm")), (200, answer("/warm")), (r.status, r.body))


def find_req(up, target):
    return [r for r in up.requests if r.target == target]


def bodiless_case(t, path, method, status, wait_before_next=0.0, n=[0]):
    """`method path` gets a bodiless reply with extra bytes; the next request must be clean."""
    up = S["up"]
    n[0] += 1
    nxt = "/next-%d" % n[0]
    c = h.Client(S["port"])
    c.send(h.build_request(method, path))
    try:
        r = c.read_response(method)
        got = (r.status, r.body)
    except Exception as e:
        r, got = None, repr(e)
    t.check("%s %s -> %d with no body" % (method, path, status), got == (status, b""),
            (status, b""), got)
    if method == "HEAD" and r is not None:
        want_cl = "5" if path == "/head" else str(len(FAKE))
        t.check("HEAD %s: the upstream's Content-Length: %s reaches the client" % (path, want_cl),
                r.header("Content-Length") == want_cl, want_cl, r.header("Content-Length"))
    stray = c.pending(0.3 + wait_before_next)
    t.check("%s %s: no stray bytes after the bodiless response" % (method, path), stray == b"",
            b"", stray)
    first = find_req(up, path)
    c.send(h.build_request("GET", nxt))
    try:
        r2 = c.read_response("GET", timeout=4)
        got2 = (r2.status, r2.body, r2.header("X-Smuggled"))
    except Exception as e:
        got2 = repr(e)
    t.check("%s %s: the next response is exactly the upstream's answer to %s"
            % (method, path, nxt), got2 == (200, answer(nxt), None), (200, answer(nxt), None),
            got2)
    t.check("%s %s: nothing after the next response" % (method, path), c.pending(0.2) == b"",
            b"", "stray bytes")
    c.close()
    second = find_req(up, nxt)
    t.check("%s %s: upstream got %s exactly once" % (method, path, nxt), len(second) == 1, 1,
            len(second))
    if first and second:
        same = first[0].conn.id == second[0].conn.id
        t.info("%s %s: next request went to %s upstream connection"
               % (method, path, "the same (kept in sync)" if same else "a new (discarded)"))


def test_204(t):
    bodiless_case(t, "/204", "GET", 204)


def test_204_smuggled_response(t):
    bodiless_case(t, "/204-smuggle", "GET", 204)


def test_204_late_bytes(t):
    bodiless_case(t, "/204-late", "GET", 204, wait_before_next=0.3)


def test_304(t):
    bodiless_case(t, "/304", "GET", 304)


def test_head(t):
    bodiless_case(t, "/head", "HEAD", 200)


def test_head_smuggled_response(t):
    bodiless_case(t, "/head-smuggle", "HEAD", 200)


def test_head_late_bytes(t):
    bodiless_case(t, "/head-late", "HEAD", 200, wait_before_next=0.3)


def malformed_case(t, path, n=[0], body_error=False):
    up = S["up"]
    n[0] += 1
    nxt = "/after-bad-%d" % n[0]
    c = h.Client(S["port"])
    c.send(h.build_request("GET", path))
    if not body_error:
        try:
            got = c.read_response("GET", timeout=5).status
        except Exception as e:
            got = repr(e)
        c.close()
        t.check("malformed upstream reply %s -> 502" % path, got == 502, 502, got)
    else:
        data, how = c.read_until_close(1.5)  # a 502 may keep the connection open
        c.close()
        rs, rest, err = h.parse_responses(data, methods=["GET"])
        # the head was valid, so it may already be on its way: then the client
        # connection must end without a complete response (never a second one)
        ok = (len(rs) == 1 and rs[0].status == 502) or (
            not rs and data.startswith(b"HTTP/1.1 200") and how in ("eof", "reset")
            and data.count(b"HTTP/1.") == 1 and not data.endswith(b"0\r\n\r\n"))
        t.check("bad chunk from upstream %s -> 502, or a 200 head cut off by a close" % path,
                ok, "502 or incomplete 200 + close", (data[:300], how))
    reqs = find_req(up, path)
    t.check("%s reached the upstream once" % path, len(reqs) == 1, 1, len(reqs))
    if not reqs:
        return
    conn = reqs[0].conn
    closed = conn.eof_event.wait(2.0)
    t.check("%s: the gateway closed that upstream connection (upstream sees EOF)" % path,
            closed, "EOF within 2 s", "still open" if not conn.closed_by_mock else "mock closed")
    r2 = h.request(S["port"], "GET", nxt)
    t.check("%s: next request answered exactly" % path, (r2.status, r2.body)
            == (200, answer(nxt)), (200, answer(nxt)), (r2.status, r2.body))
    nreq = find_req(up, nxt)
    t.check("%s: next request arrives on a new upstream connection" % path,
            len(nreq) == 1 and nreq[0].conn.id != conn.id, "conn != %d" % conn.id,
            [x.conn.id for x in nreq])
    later = conn.requests[reqs[0].index + 1:]
    t.check("%s: no request after it on the bad connection" % path, later == [], [],
            [x.target for x in later])


def test_malformed(t):
    for p in ("/clte", "/tecl", "/twocl", "/badcl", "/badstatus", "/fold", "/barelf", "/nul",
              "/spacename", "/cl55"):
        malformed_case(t, p)
    malformed_case(t, "/badchunk", body_error=True)
    malformed_case(t, "/hugechunk", body_error=True)


def test_close_delimited(t):
    """A body delimited by the upstream's close is complete when it closes: the client gets a
    properly ended response (re-framed) and its connection stays usable."""
    c = h.Client(S["port"])
    c.send(h.build_request("GET", "/close-delimited"))
    try:
        r = c.read_response(timeout=4)
        got = (r.status, r.body, r.framing)
    except Exception as e:
        got = repr(e)
    t.check("close-delimited upstream body -> complete response", got[:2] == (200, b"body ended "
            b"by close") if isinstance(got, tuple) else False, (200, b"body ended by close"), got)
    t.check("close-delimited body re-framed (chunked) for the client",
            isinstance(got, tuple) and got[2] in ("chunked", "length"), "chunked", got)
    c.send(h.build_request("GET", "/after-cd"))
    try:
        r2 = c.read_response(timeout=4)
        got2 = (r2.status, r2.body)
    except Exception as e:
        got2 = repr(e)
    t.check("the client connection serves the next request", got2 == (200, answer("/after-cd")),
            (200, answer("/after-cd")), got2)
    c.close()


def test_upstream_connection_close(t):
    """An upstream reply with Connection: close must not leave that connection in the pool."""
    up = S["up"]
    c = h.Client(S["port"])
    results = []
    for i in range(5):
        c.send(h.build_request("GET", "/conn-close?%d" % i))
        r = c.read_response(timeout=4)
        results.append((r.status, r.body))
        time.sleep(0.05)
    want = [(200, answer("/conn-close?%d" % i)) for i in range(5)]
    t.check("5 sequential replies carrying Connection: close are each answered exactly",
            results == want, want, results)
    reqs = [r for r in up.requests if r.path == "/conn-close"]
    t.check("each went to a different upstream connection (closed ones never reused)",
            len(reqs) == 5 and len(set(r.conn.id for r in reqs)) == 5
            and all(len(r.conn.requests) == r.index + 1 for r in reqs),
            "5 distinct connections, each ending with its /conn-close",
            [(r.conn.id, r.index, len(r.conn.requests)) for r in reqs])
    t.check("the upstream's Connection: close is not passed to the client as a close",
            c.pending(0.1) == b"" and c.closed_how is None, "client connection open",
            c.closed_how)
    c.close()


def test_upstream_idle_close_race(t):
    """An upstream that closes idle keep-alive connections after 0.2 s (shorter than the
    gateway's pool idle_timeout): requests spaced 0.4 s apart must all succeed, each on a
    new connection, and never be sent twice."""
    up2 = h.MockUpstream(lambda r: h.Response(200, answer(r.target)), "idle", idle_close=0.2)
    cfg = """\
workers: 1
shutdown_timeout: 5s
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http }
upstreams:
  - name: up
    targets: [ { address: %s } ]
    keepalive: { max_idle: 64, idle_timeout: 60s }
    timeouts: { connect: 2s, read: 2s, write: 30s }
routes:
  - { name: all, match: { paths: [/] }, upstream: up }
""" % up2.address
    s2 = h.start_sluice(cfg, name="idle", suite=t)
    c = h.Client(s2.port("web"))
    res = []
    for i in range(6):
        c.send(h.build_request("GET", "/idle/%d" % i))
        try:
            r = c.read_response(timeout=4)
            res.append((r.status, r.body))
        except Exception as e:
            res.append(repr(e))
        time.sleep(0.4)
    want = [(200, answer("/idle/%d" % i)) for i in range(6)]
    t.check("requests after the upstream closed its idle connection all succeed", res == want,
            want, res)
    # now aim at the race itself: send just as the upstream gives up on the idle connection
    # (a reused connection that dies before any response byte is retried on a new one)
    res = []
    for i in range(18):
        time.sleep((0.17, 0.19, 0.2, 0.21, 0.23)[i % 5])
        c.send(h.build_request("GET", "/race/%d" % i))
        try:
            r = c.read_response(timeout=4)
            res.append((r.status, r.body))
        except Exception as e:
            res.append(repr(e))
    c.close()
    want = [(200, answer("/race/%d" % i)) for i in range(18)]
    bad = [(i, x) for i, x in enumerate(res) if x != want[i]]
    t.check("requests sent as the upstream closes its idle connection all succeed", not bad, [],
            bad)
    t.info("race phase: %d upstream connections for 24 requests" % up2.accepted)
    counts = {}
    for r in up2.requests:
        counts[r.path] = counts.get(r.path, 0) + 1
    t.check("no request was sent upstream twice", all(v == 1 for v in counts.values())
            and len(counts) == 24, "24 paths, each once",
            {k: v for k, v in counts.items() if v != 1} or len(counts))
    t.check("gateway (idle-close upstream) exits 0", s2.stop() == 0, 0, s2.returncode)
    up2.stop()


def test_finish(t):
    up = S["up"]
    t.check("mock upstream saw no unparsable bytes", all(c.error is None or "parse" not in c.error
                                                          for c in up.conns),
            None, [c.error for c in up.conns if c.error])
    code = S["s"].stop()
    t.check("gateway exits 0 on SIGTERM", code == 0, 0, code)


t.run(setup, test_204, test_204_smuggled_response, test_204_late_bytes, test_304, test_head,
      test_head_smuggled_response, test_head_late_bytes, test_malformed, test_close_delimited,
      test_upstream_connection_close, test_upstream_idle_close_race, test_finish)
