"""HTTP/2 conformance: RFC 9113's error cases, driven with hand-built frames (issue 13).

Each case opens a connection with prior knowledge, sends the preface, an empty SETTINGS and
the frames under test (built here with struct; HPACK as literal fields without Huffman
coding), and reads until the server's answer: a GOAWAY with an error code (a connection
error), a RST_STREAM with one (a stream error), or the response. The answers are the ones
RFC 9113 names:

  - frame sizes (4.2, 6.x): SETTINGS not a multiple of 6, a SETTINGS ACK with a payload,
    PING not 8, WINDOW_UPDATE not 4, a frame over SETTINGS_MAX_FRAME_SIZE ->
    GOAWAY FRAME_SIZE_ERROR;
  - settings (6.5.2): ENABLE_PUSH 2, MAX_FRAME_SIZE below 2^14 or above 2^24-1 ->
    GOAWAY PROTOCOL_ERROR; INITIAL_WINDOW_SIZE above 2^31-1 -> GOAWAY FLOW_CONTROL_ERROR;
  - flow control (6.9): a WINDOW_UPDATE of 0 -> PROTOCOL_ERROR (on a stream nghttp2 makes
    it a connection error too), one that overflows the connection's window ->
    FLOW_CONTROL_ERROR;
  - stream states (5.1, 5.1.1): DATA on an idle stream, HEADERS on stream 0 or an even
    stream, CONTINUATION without HEADERS, PING on a stream, RST_STREAM on an idle stream ->
    GOAWAY PROTOCOL_ERROR; HEADERS on a stream id lower than one already used is ignored
    (nghttp2's choice, docs/DECISIONS.md: never answered, never upstream); DATA or HEADERS on a half-closed (remote) stream
    and DATA on a closed one -> STREAM_CLOSED (nghttp2 answers these three with a
    connection error, which 5.4.1 allows: docs/DECISIONS.md);
  - floods (sluice's bounds, issue 13's defences): SETTINGS from a client that reads
    every ACK and from one that reads nothing, a rapid reset past its bucket, WINDOW_UPDATEs
    with nothing sent -> GOAWAY ENHANCE_YOUR_CALM (or the close);
  - metrics: sluice_http2_goaway_total counts every GOAWAY above by reason, plus idle and
    drain; sluice_http2_streams_active; HTTP/2 requests in sluice_requests_total;
  - pseudo-headers (8.3): missing :method, :scheme or :path, a pseudo-header after a
    regular field, a duplicate, an empty :path, an unknown pseudo-header, a response
    pseudo-header in a request -> RST_STREAM PROTOCOL_ERROR; the connection lives on
    (PING answered) and the upstream (an HTTP/1.1 mock) sees none of them;
  - the HTTP/1.1 path's strictness (the downgrade): a :path with a fragment, a bad
    pct-encoding or a byte above 0x7e, an :authority or host with userinfo or a comma ->
    RST_STREAM PROTOCOL_ERROR, never upstream; Trailer, HTTP2-Settings and Proxy-* fields
    are dropped before the upstream, as over HTTP/1.1.
"""

import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

S = {}

DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WU, CONT = range(10)
END_STREAM, ACK, END_HEADERS = 1, 1, 4
ERR = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR", 3: "FLOW_CONTROL_ERROR", 4: "SETTINGS_TIMEOUT",
       5: "STREAM_CLOSED", 6: "FRAME_SIZE_ERROR", 7: "REFUSED_STREAM", 8: "CANCEL", 9: "COMPRESSION_ERROR",
       11: "ENHANCE_YOUR_CALM"}


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def hpint(v, prefix, first=0):
    lim = (1 << prefix) - 1
    if v < lim:
        return bytes([first | v])
    out = bytearray([first | lim])
    v -= lim
    while v >= 128:
        out.append((v & 127) | 128)
        v >>= 7
    out.append(v)
    return bytes(out)


def hpack(fields):
    """Literal header fields without indexing, new names, no Huffman (RFC 7541 6.2.2)."""
    out = bytearray()
    for n, v in fields:
        n, v = n.encode(), v.encode()
        out += b"\x00" + hpint(len(n), 7) + n + hpint(len(v), 7) + v
    return bytes(out)


def settings(*pairs):
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def head(path="/up/x", method="GET", extra=(), drop=()):
    f = [(":method", method), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1")]
    return [x for x in f if x[0] not in drop] + list(extra)


def headers(sid, fields, end_stream=True):
    return frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), sid, hpack(fields))


def converse(*steps, timeout=3.0):
    """Sends the preface and an empty SETTINGS, then each step (bytes to send, or a float:
    seconds to read before going on). Reads until a GOAWAY, the close or the timeout; returns
    the frames received as (type, flags, stream, payload) and whether the server closed."""
    s = socket.create_connection(("127.0.0.1", S["port"]), timeout=timeout)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings())
    buf, got, closed = b"", [], False

    def read(until):
        nonlocal buf, closed
        while time.monotonic() < until and not closed:
            s.settimeout(max(0.01, until - time.monotonic()))
            try:
                d = s.recv(65536)
            except socket.timeout:
                return
            except ConnectionResetError:
                closed = True
                return
            if not d:
                closed = True
                return
            buf += d
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                f = (buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n])
                buf = buf[9 + n:]
                got.append(f)
                if f[0] == SETTINGS and not f[1] & ACK:
                    s.sendall(frame(SETTINGS, ACK, 0))
                if f[0] == GOAWAY:
                    return

    for st in steps:
        if isinstance(st, float):
            read(time.monotonic() + st)
        else:
            try:
                s.sendall(st)
            except OSError:
                closed = True
    if not any(f[0] == GOAWAY for f in got):
        read(time.monotonic() + timeout)
    s.close()
    return got, closed


def goaway_of(got):
    for f in got:
        if f[0] == GOAWAY:
            return ERR.get(int.from_bytes(f[3][4:8], "big"), "?")
    return None


def rst_of(got, sid):
    for f in got:
        if f[0] == RST and f[2] == sid:
            return ERR.get(int.from_bytes(f[3][:4], "big"), "?")
    return None


def setup(t):
    S["up"] = h.MockUpstream(handler=lambda rq: (time.sleep(1.0) if rq.path.startswith("/up/slow") else None,
                                                 h.mock_upstream.default_handler(rq))[1])
    S["sl"] = h.start_sluice(f"""
workers: 1
admin: {{ listen: 127.0.0.1:0 }}
watch: false
listeners:
  - {{ name: web, listen: 127.0.0.1:0 }}
  - {{ name: short, listen: 127.0.0.1:0, idle_timeout: 1s }}
upstreams: [ {{ name: up, targets: [ {{ address: {S["up"].address} }} ] }} ]
routes: [ {{ name: up, match: {{ paths: [/up] }}, upstream: up }} ]
""", suite=t)
    S["port"] = S["sl"].port("web")
    S["goaways"] = {}


def check_goaway(t, name, want, *steps):
    got, closed = converse(*steps)
    g = goaway_of(got)
    S["goaways"][g] = S["goaways"].get(g, 0) + 1
    t.check("%s -> GOAWAY %s" % (name, want), g == want, want, (g, closed, [f[:3] for f in got][-4:]))


def test_frame_sizes(t):
    check_goaway(t, "SETTINGS with a length of 5", "FRAME_SIZE_ERROR", frame(SETTINGS, 0, 0, b"\x00" * 5))
    check_goaway(t, "SETTINGS ACK with a payload", "FRAME_SIZE_ERROR", frame(SETTINGS, ACK, 0, b"\x00" * 6))
    check_goaway(t, "PING with a length of 7", "FRAME_SIZE_ERROR", frame(PING, 0, 0, b"\x00" * 7))
    check_goaway(t, "WINDOW_UPDATE with a length of 3", "FRAME_SIZE_ERROR", frame(WU, 0, 0, b"\x00\x00\x01"))
    check_goaway(t, "a DATA frame of 16385 bytes (over SETTINGS_MAX_FRAME_SIZE)", "FRAME_SIZE_ERROR",
                 headers(1, head(method="POST"), end_stream=False), frame(DATA, 0, 1, b"x" * 16385))
    check_goaway(t, "a PING of 16385 bytes", "FRAME_SIZE_ERROR", frame(PING, 0, 0, b"x" * 16385))


def test_settings(t):
    check_goaway(t, "SETTINGS_ENABLE_PUSH = 2", "PROTOCOL_ERROR", settings((2, 2)))
    check_goaway(t, "SETTINGS_INITIAL_WINDOW_SIZE = 2^31", "FLOW_CONTROL_ERROR", settings((4, 1 << 31)))
    check_goaway(t, "SETTINGS_MAX_FRAME_SIZE = 16383", "PROTOCOL_ERROR", settings((5, 16383)))
    check_goaway(t, "SETTINGS_MAX_FRAME_SIZE = 2^24", "PROTOCOL_ERROR", settings((5, 1 << 24)))
    check_goaway(t, "SETTINGS on stream 1", "PROTOCOL_ERROR", frame(SETTINGS, 0, 1))
    got, closed = converse(settings((1, 4096), (3, 10), (4, 65535), (5, 16384), (6, 8192), (0x99, 1)),
                           frame(PING, 0, 0, b"pingpong"), 0.5)
    acks = [f for f in got if f[0] == SETTINGS and f[1] & ACK]
    pong = [f for f in got if f[0] == PING and f[1] & ACK]
    t.check("valid SETTINGS (and an unknown one, ignored) are acknowledged; the connection lives",
            bool(acks) and bool(pong) and goaway_of(got) is None, "ACK, PING ACK, no GOAWAY",
            (len(acks), len(pong), goaway_of(got)))


def test_flow_control(t):
    check_goaway(t, "WINDOW_UPDATE of 0 on the connection", "PROTOCOL_ERROR", frame(WU, 0, 0, struct.pack(">I", 0)))
    check_goaway(t, "WINDOW_UPDATEs that overflow the connection's window", "FLOW_CONTROL_ERROR",
                 frame(WU, 0, 0, struct.pack(">I", 0x7FFFFFFF)))
    # RFC 9113 6.9 names a stream error; nghttp2 makes it a connection error (5.4.1 allows
    # it; docs/DECISIONS.md)
    check_goaway(t, "WINDOW_UPDATE of 0 on a stream (nghttp2: a connection error)", "PROTOCOL_ERROR",
                 headers(1, head(path="/up/slow-wu", method="POST"), end_stream=False),
                 frame(WU, 0, 1, struct.pack(">I", 0)))


def test_stream_states(t):
    check_goaway(t, "DATA on an idle stream", "PROTOCOL_ERROR", frame(DATA, END_STREAM, 1, b"x"))
    check_goaway(t, "HEADERS on stream 0", "PROTOCOL_ERROR", headers(0, head()))
    check_goaway(t, "HEADERS on an even (server-initiated) stream", "PROTOCOL_ERROR", headers(2, head()))
    # RFC 9113 5.1.1 names a connection error PROTOCOL_ERROR; nghttp2 ignores HEADERS on a
    # stream id at or below the last one it saw, since it cannot tell them from a late
    # trailer on a stream it reset (docs/DECISIONS.md): the stream is never answered and
    # never reaches an upstream
    n0 = len(S["up"].requests)
    got, closed = converse(headers(5, head(path="/up/slow-a")), headers(3, head(path="/up/slow-b")), 1.5)
    seen = [r.path for r in S["up"].requests[n0:] if r.path in ("/up/slow-a", "/up/slow-b")]
    t.check("a stream id lower than one already opened is ignored (nghttp2): stream 5 answered, 3 not, "
            "the upstream never sees 3", [f[2] for f in got if f[0] == HEADERS] == [5] and seen == ["/up/slow-a"],
            ([5], ["/up/slow-a"]), ([f[:3] for f in got], seen))
    check_goaway(t, "CONTINUATION without HEADERS", "PROTOCOL_ERROR",
                 frame(CONT, END_HEADERS, 1, hpack(head())))
    check_goaway(t, "PING on stream 1", "PROTOCOL_ERROR", frame(PING, 0, 1, b"pingpong"))
    check_goaway(t, "RST_STREAM on an idle stream", "PROTOCOL_ERROR", frame(RST, 0, 1, struct.pack(">I", 8)))
    # half-closed (remote): the request ended, the response (1 s upstream) has not
    check_goaway(t, "DATA on a half-closed (remote) stream", "STREAM_CLOSED",
                 headers(1, head(path="/up/slow-c")), 0.2, frame(DATA, 0, 1, b"x"))
    check_goaway(t, "HEADERS on a half-closed (remote) stream", "STREAM_CLOSED",
                 headers(1, head(path="/up/slow-d")), 0.2, headers(1, head(path="/up/slow-d")))
    # closed: the response ended (END_STREAM both ways), then DATA on it
    got, closed = converse(headers(1, head(path="/up/done")), 1.0, frame(DATA, 0, 1, b"x"))
    ended = any(f[0] in (DATA, HEADERS) and f[2] == 1 and f[1] & END_STREAM for f in got)
    S["goaways"][goaway_of(got)] = S["goaways"].get(goaway_of(got), 0) + 1
    t.check("DATA on a closed stream -> GOAWAY STREAM_CLOSED", ended and goaway_of(got) == "STREAM_CLOSED",
            (True, "STREAM_CLOSED"), (ended, goaway_of(got), rst_of(got, 1)))


def test_pseudo_headers(t):
    n0 = len(S["up"].requests)
    cases = [
        ("missing :method", head(path="/up/p1", drop=(":method",))),
        ("missing :scheme", head(path="/up/p2", drop=(":scheme",))),
        ("missing :path", head(drop=(":path",))),
        ("a pseudo-header after a regular field", head(path="/up/p4", drop=(":authority",)) +
         [("x-a", "1"), (":authority", "127.0.0.1")]),
        ("a duplicate :path", head(path="/up/p5") + [(":path", "/up/p5b")]),
        ("a duplicate :method", head(path="/up/p6") + [(":method", "GET")]),
        ("an empty :path", head(path="")),
        ("an unknown pseudo-header", head(path="/up/p8") + [(":foo", "bar")]),
        ("a response pseudo-header (:status) in a request", head(path="/up/p9") + [(":status", "200")]),
    ]
    steps, sid = [], 1
    for _, fields in cases:
        steps.append(headers(sid, fields))
        sid += 2
    steps += [frame(PING, 0, 0, b"stillok!"), 1.0]
    got, closed = converse(*steps)
    for i, (name, _) in enumerate(cases):
        r = rst_of(got, 1 + 2 * i)
        t.check("%s -> RST_STREAM PROTOCOL_ERROR" % name, r == "PROTOCOL_ERROR", "PROTOCOL_ERROR", r)
    pong = any(f[0] == PING and f[1] & ACK and f[3] == b"stillok!" for f in got)
    t.check("after the stream errors the connection lives (PING answered, no GOAWAY)",
            pong and goaway_of(got) is None, (True, None), (pong, goaway_of(got), closed))
    time.sleep(0.3)
    seen = [r.path for r in S["up"].requests[n0:]]
    t.check("the upstream saw none of the malformed requests", seen == [], [], seen)


def test_downgrade(t):
    # the HTTP/1.1 path's strictness (DESIGN: an HTTP/2 request is held to it before it is
    # rewritten as HTTP/1.1): a :path with a fragment, a bad pct-encoding or a byte above
    # 0x7e, an authority or host with characters a host never has -> RST_STREAM
    # PROTOCOL_ERROR, never upstream (each is 400 over HTTP/1.1); hop-by-hop fields nghttp2
    # lets through (Trailer, HTTP2-Settings, Proxy-*) are dropped as over HTTP/1.1
    def auth(path, a, name=":authority"):
        return [(":method", "GET"), (":scheme", "http"), (":path", path), (name, a)]

    n0 = len(S["up"].requests)
    mark = S["up"].mark()
    bad = [
        ("a fragment in :path", head(path="/up/d1#frag")),
        ("a fragment after the query", head(path="/up/d2?x=1#frag")),
        ("a '%' not starting a pct-encoded octet", head(path="/up/d3%zz")),
        ("a '%' at the end of :path", head(path="/up/d4%")),
        ("a byte above 0x7e in :path", head(path="/up/d5\xe9")),
        ("userinfo in :authority", auth("/up/d6", "evil@127.0.0.1")),
        ("a comma in :authority", auth("/up/d7", "127.0.0.1,evil.test")),
        ("userinfo in host (no :authority)", auth("/up/d8", "evil@127.0.0.1", "host")),
    ]
    hop = [("trailer", "x-t"), ("http2-settings", "AAMAAABk"), ("proxy-authorization", "Basic eA=="),
           ("proxy-x", "1")]
    steps, sid = [], 1
    for _, fields in bad:
        steps.append(headers(sid, fields))
        sid += 2
    steps += [headers(sid, head(path="/up/d-hop", extra=hop + [("x-kept", "1")])), 1.5]
    got, closed = converse(*steps)
    for i, (name, _) in enumerate(bad):
        r = rst_of(got, 1 + 2 * i)
        t.check("%s -> RST_STREAM PROTOCOL_ERROR" % name, r == "PROTOCOL_ERROR", "PROTOCOL_ERROR", r)
    answered = any(f[0] == HEADERS and f[2] == sid for f in got)
    t.check("the connection lives on: the next stream is answered, no GOAWAY",
            answered and goaway_of(got) is None and not closed, (True, None, False),
            (answered, goaway_of(got), closed))
    time.sleep(0.3)
    seen = [r for r in S["up"].requests[n0:]]
    raw = S["up"].since(mark)
    t.check("the upstream saw none of the malformed requests", [r.target for r in seen] == ["/up/d-hop"],
            ["/up/d-hop"], [r.target for r in seen])
    t.check("none of their targets or authorities reached the upstream's bytes",
            not any(x in raw for x in (b"/up/d1", b"/up/d3", b"/up/d5", b"/up/d6", b"evil")), "none", raw[:300])
    fwd = seen[0].headers if seen else []
    names = sorted(k.lower() for k, _ in fwd if k.lower() in {n for n, _ in hop} | {"x-kept"})
    t.check("Trailer, HTTP2-Settings and Proxy-* are dropped, other fields kept", names == ["x-kept"], ["x-kept"],
            fwd)


def test_floods(t):
    # SETTINGS flood, from a client that reads every ACK: past 100 SETTINGS (+1 per stream
    # opened) GOAWAY ENHANCE_YOUR_CALM, and no more ACKs than the bound
    got, closed = converse(settings((3, 100)) * 1500, 2.0)
    acks = sum(1 for f in got if f[0] == SETTINGS and f[1] & ACK)
    g = goaway_of(got)
    S["goaways"][g] = S["goaways"].get(g, 0) + 1
    t.check("a SETTINGS flood (1500, ACKs read) -> GOAWAY ENHANCE_YOUR_CALM after at most 102 ACKs",
            g == "ENHANCE_YOUR_CALM" and acks <= 102, ("ENHANCE_YOUR_CALM", "<= 102"), (g, acks, closed))
    # ... and from a client that reads nothing: past the bound the GOAWAY is queued, the
    # connection lingers (its bytes read and dropped) and is closed 2 s later; the flood
    # meets a reset, whatever it sent meanwhile
    s = socket.create_connection(("127.0.0.1", S["port"]), timeout=3)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sent, flood, reset = 0, settings((3, 100)) * 1000, None
    t0 = time.monotonic()
    try:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        while time.monotonic() - t0 < 8:
            s.sendall(flood)
            sent += 1000
    except OSError as e:
        reset = e.errno
    el = time.monotonic() - t0
    s.close()
    # its GOAWAY was taken into the output (what the metric counts), though never read
    S["goaways"]["ENHANCE_YOUR_CALM"] = S["goaways"].get("ENHANCE_YOUR_CALM", 0) + 1
    t.check("a SETTINGS flood from a client that reads nothing: the connection is reset within 4 s",
            reset is not None and el < 4, "reset, < 4 s", (reset, round(el, 2), sent))
    # rapid reset (CVE-2023-44487): 1100 streams opened and cancelled at once; past the
    # bucket's burst of 1000 -> GOAWAY ENHANCE_YOUR_CALM naming a stream at most 2001, and
    # the upstream sees a bounded number of requests
    n0 = len(S["up"].requests)
    pairs = b"".join(headers(sid, head(path="/up/rr")) + frame(RST, 0, sid, struct.pack(">I", 8))
                     for sid in range(1, 2201, 2))
    got, closed = converse(pairs, 2.0)
    g = goaway_of(got)
    S["goaways"][g] = S["goaways"].get(g, 0) + 1
    last = [int.from_bytes(f[3][:4], "big") for f in got if f[0] == GOAWAY]
    time.sleep(0.3)
    seen = len(S["up"].requests) - n0
    t.check("rapid reset: 1100 streams opened and cancelled -> GOAWAY ENHANCE_YOUR_CALM at stream <= 2001, "
            "the upstream sees < 50", g == "ENHANCE_YOUR_CALM" and last and last[0] <= 2001 and seen < 50,
            ("ENHANCE_YOUR_CALM", "<= 2001", "< 50"), (g, last, seen))
    # WINDOW_UPDATE flood from a reading client: ENHANCE_YOUR_CALM (the bound was a bare
    # close before; now the GOAWAY says why)
    got, closed = converse(frame(WU, 0, 0, struct.pack(">I", 1)) * 1200, 2.0)
    g = goaway_of(got)
    S["goaways"][g] = S["goaways"].get(g, 0) + 1
    t.check("a WINDOW_UPDATE flood (1200, nothing sent to acknowledge) -> GOAWAY ENHANCE_YOUR_CALM",
            g == "ENHANCE_YOUR_CALM", "ENHANCE_YOUR_CALM", (g, closed))


def metric(name, **labels):
    _, samples = S["sl"].metrics()
    v = h.metrics.metric_values(samples, name, **labels)
    return v[0] if v else None


def test_metrics(t):
    want = {k.lower(): v for k, v in S["goaways"].items() if k}
    got = {r: metric("sluice_http2_goaway_total", listener="web", reason=r) for r in want}
    t.check("sluice_http2_goaway_total{listener,reason} counts every GOAWAY the cases above got, by error code",
            got == {k: float(v) for k, v in want.items()}, want, got)
    # streams: 3 requests held 1 s by the upstream on one connection -> 3 active, then 0
    r0 = metric("sluice_requests_total", route="up", code="200") or 0
    hist0 = metric("sluice_request_duration_seconds_count", route="up") or 0
    s = socket.create_connection(("127.0.0.1", S["port"]), timeout=5)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings() + b"".join(
        headers(sid, head(path="/up/slow-m%d" % sid)) for sid in (1, 3, 5)))
    # polled, not read after fixed sleeps: the streams open as the gateway reads them, and
    # a request is counted once its response is written, which the client can read first
    during = h.poll(lambda: metric("sluice_http2_streams_active", listener="web"), lambda v: v == 3)
    after = h.poll(lambda: metric("sluice_http2_streams_active", listener="web"), lambda v: v == 0)
    s.close()
    t.check("sluice_http2_streams_active: 3 streams in flight, then 0", (during, after) == (3, 0), (3, 0),
            (during, after))
    counted = h.poll(lambda: ((metric("sluice_requests_total", route="up", code="200") or 0) - r0,
                              (metric("sluice_request_duration_seconds_count", route="up") or 0) - hist0),
                     lambda v: v == (3, 3))
    t.check("sluice_requests_total and the duration histogram count the 3 HTTP/2 requests",
            counted == (3, 3), (3, 3), counted)
    # idle and drain: a 1 s idle_timeout listener, and a reload retiring a connection
    port = S["sl"].port("short")
    S["port"], keep = port, S["port"]
    got, closed = converse(timeout=2.5)
    S["port"] = keep
    idle = metric("sluice_http2_goaway_total", listener="short", reason="idle")
    t.check("an idle connection's GOAWAY -> reason idle", goaway_of(got) == "NO_ERROR" and idle == 1, 1,
            (goaway_of(got), idle))
    s = socket.create_connection(("127.0.0.1", S["port"]), timeout=5)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings())
    time.sleep(0.2)
    d0 = metric("sluice_http2_goaway_total", listener="web", reason="drain")
    code, _ = S["sl"].reload()
    buf, t0 = b"", time.monotonic()
    while buf.count(bytes([GOAWAY])) < 2 and time.monotonic() - t0 < 4:
        try:
            d = s.recv(65536)
        except OSError:
            break
        if not d:
            break
        buf += d
    s.close()
    drain = None
    for _ in range(30):
        time.sleep(0.2)
        drain = metric("sluice_http2_goaway_total", listener="web", reason="drain")
        if drain == (d0 or 0) + 2:
            break
    t.check("a reload drains the connection: its shutdown notice and final GOAWAY -> reason drain (2)",
            code == 200 and drain == (d0 or 0) + 2, (d0 or 0) + 2, (code, d0, drain))


if __name__ == "__main__":
    # test_http2_load imports the frame helpers above
    t = h.Suite("http2_conformance", budget=120)
    t.run(setup, test_frame_sizes, test_settings, test_flow_control, test_stream_states, test_pseudo_headers,
          test_downgrade, test_floods, test_metrics)
