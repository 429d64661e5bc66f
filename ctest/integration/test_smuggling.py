"""Acceptance 4: ambiguous or malformed request heads never reach an upstream.

Each case sends one bad request followed, in the same send, by a valid GET.
The gateway must answer the bad one (400; 501 for an unknown coding; 431/414
for the limits), close the connection without answering the pipelined GET,
and the upstream must receive zero bytes and no connection for the case.
Then a byte-a-half-second trickle hits header_timeout (2 s) -> 408 and close, while
an empty line after a request is no request (no 408; the connection stays idle),
and a good request on a fresh connection still works.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("smuggling", budget=58)

GOOD = b"GET /pipelined-after HTTP/1.1\r\nHost: a\r\n\r\n"

# (name, bytes of the bad request, expected status)
CASES = [
    ("CL + TE",
     b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", 400),
    ("TE + CL (TE first)",
     b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
     b"0\r\n\r\n", 400),
    ("two different Content-Lengths",
     b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
    ("Content-Length: +5",
     b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", 400),
    ("Content-Length: 5,5",
     b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5,5\r\n\r\nhello", 400),
    ("duplicate identical Content-Length headers",
     b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400),
    ("Content-Length: -1",
     b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
    ("Content-Length beyond 2^64",
     b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\nhello", 400),
    ("empty Content-Length",
     b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n", 400),
    ("Transfer-Encoding: xchunked (unknown coding)",
     b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 501),
    ("Transfer-Encoding: identity, chunked",
     b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n", 400),
    ("Transfer-Encoding: chunked, chunked",
     b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400),
    ("two Transfer-Encoding: chunked headers",
     b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked"
     b"\r\n\r\n0\r\n\r\n", 400),
    ("Transfer-Encoding on HTTP/1.0",
     b"POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("whitespace before the colon (Transfer-Encoding : chunked)",
     b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding : chunked\r\n\r\n"
     b"0\r\n\r\n", 400),
    ("obs-fold hiding a Content-Length",
     b"POST / HTTP/1.1\r\nHost: a\r\nX-Foo: a\r\n Content-Length: 5\r\n\r\nhello", 400),
    ("obs-fold continuing Transfer-Encoding",
     b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 400),
    ("bare LF everywhere",
     b"GET / HTTP/1.1\nHost: a\n\n", 400),
    ("bare LF after the request line",
     b"GET / HTTP/1.1\nHost: a\r\n\r\n", 400),
    ("bare LF between headers",
     b"GET / HTTP/1.1\r\nHost: a\nX-A: b\r\n\r\n", 400),
    ("bare CR inside a header value",
     b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n", 400),
    ("NUL in a header value",
     b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x00b\r\n\r\n", 400),
    ("CTL (0x01) in a header value",
     b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x01b\r\n\r\n", 400),
    ("empty header name",
     b"GET / HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n", 400),
    ("duplicate Host",
     b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ("no Host on HTTP/1.1",
     b"GET / HTTP/1.1\r\nX-A: b\r\n\r\n", 400),
    ("absolute-form target whose host differs from Host",
     b"GET http://evil.test/ HTTP/1.1\r\nHost: good.test\r\n\r\n", 400),
    ("absolute-form target with a Host that is no host (its authority is the host, and the "
     "Host field is still checked)",
     b"GET http://good.test/ HTTP/1.1\r\nHost: evil.test@good.test\r\n\r\n", 400),
    ("HTTP/2.0 in the request line",
     b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 400),
    ("HTTP/1.2 in the request line",
     b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 400),
    ("chunk size of 17 hex digits",
     b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"10000000000000000\r\nxxxxxxxxxxxxxxxx\r\n0\r\n\r\n", 400),
    ("space inside a header name",
     b"GET / HTTP/1.1\r\nHost: a\r\nX A: b\r\n\r\n", 400),
    ("two spaces in the request line",
     b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    ("TAB inside the request target",
     b"GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    ("target without a leading slash",
     b"GET foo HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    ("header block > 32 KiB (one header)",
     b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * 33000 + b"\r\n\r\n", 431),
    ("header block > 32 KiB (many headers)",
     b"GET / HTTP/1.1\r\nHost: a\r\n"
     + b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 1000) for i in range(40)) + b"\r\n", 431),
    ("request line > 8 KiB",
     b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414),
]

S = {}


def setup(t):
    up = h.MockUpstream(name="up")
    cfg = """\
workers: 1
shutdown_timeout: 5s
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http, header_timeout: 2s, idle_timeout: 60s }
upstreams:
  - name: up
    targets: [ { address: %s } ]
    keepalive: { max_idle: 64, idle_timeout: 60s }
    timeouts: { connect: 2s, read: 5s, write: 30s }
routes:
  - { name: all, match: { paths: [/] }, upstream: up }
""" % up.address
    s = h.start_sluice(cfg, suite=t)
    S.update(up=up, s=s, port=s.port("web"))


def test_cases(t):
    up = S["up"]
    for name, bad, want in CASES:
        before = up.snapshot()
        mark = up.mark()
        c = h.Client(S["port"], timeout=4)
        try:
            c.send(bad + GOOD)
        except OSError as e:
            t.info("%s: send failed early (%r)" % (name, e))
        data, how = c.read_until_close(1.0)
        c.close()
        time.sleep(0.05)
        after = up.snapshot()
        rs, rest, err = h.parse_responses(data)
        status = rs[0].status if rs else None
        t.check("%s -> %d" % (name, want), status == want, want,
                status if rs else (data[:200], how))
        t.check("%s: exactly one response (pipelined GET never answered)" % name,
                len(rs) == 1 and rest == b"", "1 response",
                "%d responses, %d stray bytes: %r" % (len(rs), len(rest), data[:400]))
        t.check("%s: connection closed after the response" % name, how in ("eof", "reset"),
                "eof", how)
        t.check("%s: upstream received 0 bytes" % name, after[1] == before[1], 0,
                "%d bytes: %r" % (after[1] - before[1], up.since(mark)[:400]))
        t.check("%s: upstream saw no connection" % name, after[0] == before[0], 0,
                after[0] - before[0])


def test_bad_after_good(t):
    """A valid GET, then CL+TE, then another GET, in one send: the first is answered, the
    second gets 400 and the connection closes; the upstream sees only the first request."""
    up = S["up"]
    mark = up.mark()
    n0 = len(up.requests)
    c = h.Client(S["port"], timeout=4)
    c.send(b"GET /first-good HTTP/1.1\r\nHost: a\r\n\r\n"
           b"POST /second-bad HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + GOOD)
    data, how = c.read_until_close(3)
    c.close()
    rs, rest, err = h.parse_responses(data)
    t.check("good, bad, good pipelined -> [200, 400] then close",
            [r.status for r in rs] == [200, 400] and rest == b"" and how in ("eof", "reset"),
            ([200, 400], "eof"), ([r.status for r in rs], rest[:100], how))
    paths = [r.path for r in up.requests[n0:]]
    t.check("the upstream saw only /first-good", paths == ["/first-good"], ["/first-good"],
            paths)
    new = up.since(mark)
    t.check("no byte of the bad request reached the upstream", b"second-bad" not in new
            and b"pipelined-after" not in new and new.count(b"HTTP/1.1\r\n") == 1,
            "only GET /first-good", new)


def test_close_then_pipelined(t):
    """Connection: close ends the connection: a request pipelined after it is never served."""
    up = S["up"]
    n0 = len(up.requests)
    c = h.Client(S["port"], timeout=4)
    c.send(b"GET /closing HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n" + GOOD)
    data, how = c.read_until_close(3)
    c.close()
    rs, rest, err = h.parse_responses(data)
    t.check("Connection: close + pipelined GET -> one 200 then close",
            [r.status for r in rs] == [200] and rest == b"" and how in ("eof", "reset"),
            ([200], "eof"), ([r.status for r in rs], rest[:100], how))
    time.sleep(0.1)
    paths = [r.path for r in up.requests[n0:]]
    t.check("the request after Connection: close never reached the upstream",
            paths == ["/closing"], ["/closing"], paths)


def test_trickle_408(t):
    c = h.Client(S["port"], timeout=6)
    head = b"GET /trickle HTTP/1.1\r\nHost: a\r\nX-Slow: " + b"z" * 200
    t0 = time.monotonic()
    got = b""
    how = None
    sent = 0
    for b in head:
        try:
            c.send(bytes([b]))
            sent += 1
        except OSError:
            break
        data, how = c.read_until_close(0.5)
        got += data
        if data or how != "timeout":
            break
        if time.monotonic() - t0 > 6:
            break
    t_resp = time.monotonic() - t0
    if got and how == "timeout":
        more, how = c.read_until_close(2)
        got += more
    t_close = time.monotonic() - t0
    c.close()
    rs, rest, err = h.parse_responses(got)
    t.info("trickle: %d bytes sent, first answer after %.2f s, closed (%s) after %.2f s"
           % (sent, t_resp, how, t_close))
    t.check("trickled head (1 byte / 0.5 s) -> 408", rs and rs[0].status == 408, 408,
            got[:200])
    t.check("408 arrives within 1.8..4 s of the first byte (header_timeout 2s, total deadline)",
            1.8 <= t_resp <= 4.0, "1.8..4 s", "%.2f s" % t_resp)
    t.check("connection closed after the 408", how in ("eof", "reset"), "eof", how)
    t.check("trickle never reached the upstream",
            not any(r.path == "/trickle" for r in S["up"].requests), "no /trickle",
            [r.path for r in S["up"].requests])


def test_empty_lines_are_not_a_request(t):
    """An empty line after a request (some clients send CRLF after a POST body) is ignored
    (RFC 9112 2.2): no request has begun, so header_timeout (2 s) gives no 408; the
    connection stays idle and serves the next request."""
    up = S["up"]
    n0 = len(up.requests)
    c = h.Client(S["port"], timeout=6)
    c.send(b"POST /crlf-after-body HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc\r\n")
    r = c.read_response()
    t.check("POST with a CRLF after its body -> 200", r.status == 200, 200, r.status)
    late, how = c.read_until_close(3.0)
    t.check("the CRLF after the body gets no 408 past header_timeout (the connection is idle)",
            late == b"" and how == "timeout", (b"", "timeout"), (late[:120], how))
    got = None
    if how == "timeout":
        c.send(b"GET /after-crlf HTTP/1.1\r\nHost: a\r\n\r\n")
        got = c.read_response().status
    c.close()
    t.check("the next request on that connection -> 200", got == 200, 200, got)
    t.check("the upstream saw the two requests", [x.path for x in up.requests[n0:]]
            == ["/crlf-after-body", "/after-crlf"], ["/crlf-after-body", "/after-crlf"],
            [x.path for x in up.requests[n0:]])


def test_limits_not_too_tight(t):
    up = S["up"]
    n0 = len(up.requests)
    r = h.request(S["port"], "GET", "/under-limit", headers=[("X-Big", "a" * 30000)])
    t.check("a 30 KiB header block (under 32 KiB) is accepted", r.status == 200, 200, r.status)
    r = h.request(S["port"], "GET", "/" + "l" * 8000)
    t.check("an 8000-byte request line (under 8 KiB) is accepted", r.status == 200, 200,
            r.status)
    t.check("both reached the upstream", [x.path[:12] for x in up.requests[n0:]]
            == ["/under-limit", "/" + "l" * 11], ["/under-limit", "/lll..."],
            [x.path[:12] for x in up.requests[n0:]])


def test_good_after(t):
    up = S["up"]
    n0 = len(up.requests)
    r = h.request(S["port"], "GET", "/after-all", timeout=5)
    t.check("a good request on a fresh connection afterwards -> 200", r.status == 200, 200,
            r.status)
    t.check("the good request reached the upstream", up.wait_requests(n0 + 1, 2)
            and up.requests[-1].path == "/after-all", "/after-all",
            [x.path for x in up.requests[n0:]])
    allowed = {"/after-all", "/first-good", "/closing", "/under-limit", "/crlf-after-body",
               "/after-crlf"}
    others = [x.path[:40] for x in up.requests if x.path not in allowed
              and not x.path.startswith("/llll")]
    t.check("over the whole file the upstream saw only the good requests", others == [], [],
            others)
    # the gateway is still alive and well
    t.check("gateway still running", S["s"].alive(), True, S["s"].alive())
    code = S["s"].stop()
    t.check("gateway exits 0 on SIGTERM", code == 0, 0, code)


t.run(setup, test_cases, test_bad_after_good, test_close_then_pipelined, test_trickle_408,
      test_empty_lines_are_not_a_request, test_limits_not_too_tight, test_good_after)
