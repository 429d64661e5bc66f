"""fault_upstream (issue 4): every fault it injects, checked directly on raw sockets.

The resilience tests and the benchmark trust this server to misbehave exactly as told and
to behave exactly otherwise: statuses, delays that hold back only their own connection,
hangs, resets, closes, truncated and malformed framing, request bodies that arrive intact
(Content-Length and chunked, checked by SHA-256), pipelining in order, down/up at runtime,
counters, and a prompt exit 0 on SIGTERM (in the ASan build: no leaks either).
"""

import hashlib
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("fault_upstream", budget=55)
S = {}
EMPTY_SUM = hashlib.sha256(b"").hexdigest()
PATTERN = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_"


def get(path, headers=None, method="GET", body=None, port=None, timeout=5.0):
    return h.request(port or S["a"].port, method, path, headers=headers, body=body,
                     timeout=timeout)


def raw(data, port=None, timeout=3.0):
    """Sends bytes on a fresh connection; returns (everything until close, how it closed)."""
    c = h.Client(port or S["a"].port)
    c.send(data)
    out = c.read_until_close(timeout)
    c.close()
    return out


def setup(t):
    a = h.start_fault_upstream("fu-a")
    S["a"] = a
    t.check("ready file gives the listen and control addresses",
            a.port > 0 and a.control_port > 0 and a.address == "127.0.0.1:%d" % a.port,
            "127.0.0.1:PORT", (a.address, a.control))
    t.check("stdout says 'listening 127.0.0.1:PORT'",
            "listening 127.0.0.1:%d\n" % a.port in a.log(), a.address, a.log())


def test_normal_answer(t):
    r = get("/hello/world?x=1")
    j = r.json()
    t.check("GET /hello/world?x=1 -> 200", r.status == 200, 200, r.status)
    t.check("JSON names the server, method, path, target",
            (j["name"], j["method"], j["path"], j["target"])
            == ("fu-a", "GET", "/hello/world", "/hello/world?x=1"), "fu-a GET ...", j)
    t.check("no body: body_len 0, body_sum of nothing", (j["body_len"], j["body_sum"])
            == (0, EMPTY_SUM), (0, EMPTY_SUM), (j["body_len"], j["body_sum"]))
    t.check("X-Upstream-Name header", r.header("X-Upstream-Name") == "fu-a", "fu-a",
            r.header("X-Upstream-Name"))
    n1 = get("/n").json()["n"]
    n2 = get("/n").json()["n"]
    t.check("n counts requests", n2 == n1 + 1, n1 + 1, n2)
    r = get("/hello", method="HEAD")
    t.check("HEAD: Content-Length, no body", r.status == 200 and r.body == b""
            and int(r.header("Content-Length")) > 0, "200, CL, no body", r)


def test_status(t):
    for path, headers, want in (("/status/503", None, 503),
                                ("/status/502/deeper/path", None, 502),
                                ("/s?status=429", None, 429),
                                ("/s", [("X-Fault-Status", "418")], 418),
                                ("/status/500?status=501", [("X-Fault-Status", "504")], 504)):
        r = get(path, headers)
        j = r.json()
        t.check("%s %s -> %d with JSON {name, status}" % (path, headers or "", want),
                (r.status, j["status"], j["name"]) == (want, want, "fu-a"),
                (want, want, "fu-a"), (r.status, j.get("status"), j.get("name")))
    r = get("/status/204")
    t.check("/status/204: no body, no Content-Length",
            (r.status, r.body, r.header("Content-Length")) == (204, b"", None),
            (204, b"", None), (r.status, r.body, r.header("Content-Length")))
    for bad in ("/status/99", "/x?status=abc", "/x?delay=-1", "/x?fault=melt"):
        r = get(bad)
        t.check("%s: a bad directive is a 400 that says so" % bad,
                r.status == 400 and "directive" in r.json()["error"], 400, (r.status, r.body))


def test_size(t):
    for n in (0, 10, 100000, 3 * 1024 * 1024 + 7):
        r = get("/big?size=%d" % n, timeout=10)
        want = (PATTERN * (n // 64 + 1))[:n]
        t.check("?size=%d: %d bytes of the pattern" % (n, n), r.status == 200 and r.body == want,
                n, (r.status, len(r.body), r.body[:80]))
    r = get("/size/5/x")
    t.check("/size/5/x: 5 bytes", r.body == b"abcde", b"abcde", r.body)


def test_delay(t):
    for label, path, headers in (("?delay=300", "/d?delay=300", None),
                                 ("X-Fault-Delay: 300", "/d", [("X-Fault-Delay", "300")]),
                                 ("/delay/300", "/delay/300/d", None)):
        t0 = time.monotonic()
        r = get(path, headers)
        dt = time.monotonic() - t0
        t.check("%s: answered after about 300 ms" % label, r.status == 200 and 0.28 <= dt < 3,
                "0.28..3 s", dt)
    # a delayed answer holds only its own connection: another one is served meanwhile
    slow = h.Client(S["a"].port)
    slow.send(h.build_request("GET", "/slow?delay=1500"))
    time.sleep(0.1)
    fast = get("/fast")
    t.check("another connection is served while one waits", fast.status == 200, 200,
            fast.status)
    t.check("...and the waiting one has not answered yet", slow.pending(0) == b"", b"",
            "early bytes")
    r = slow.read_response(timeout=5)
    t.check("the waiting one answers after its delay", r.status == 200 and
            r.json()["path"] == "/slow", "/slow", r.json())
    slow.close()


def test_hang(t):
    for label, path, headers in (("/hang", "/hang", None),
                                 ("X-Fault: hang", "/h", [("X-Fault", "hang")]),
                                 ("?fault=hang", "/h?fault=hang", None)):
        c = h.Client(S["a"].port)
        c.send(h.build_request("GET", path, headers))
        data, how = c.read_until_close(0.6)
        t.check("%s: no answer, connection left open" % label, (data, how) == (b"", "timeout"),
                (b"", "timeout"), (data, how))
        c.close()
    open_before = S["a"].stats()["open"]
    c = h.Client(S["a"].port)
    c.send(h.build_request("GET", "/hang"))
    c.pending(0.2)
    during = S["a"].stats()["open"]
    c.close()
    deadline = time.monotonic() + 3
    while S["a"].stats()["open"] > open_before and time.monotonic() < deadline:
        time.sleep(0.02)
    t.check("a hung connection closes when the peer closes",
            during == open_before + 1 and S["a"].stats()["open"] == open_before,
            (open_before + 1, open_before), (during, S["a"].stats()["open"]))


def test_reset_and_close(t):
    data, how = raw(h.build_request("GET", "/r", [("X-Fault", "reset")]))
    t.check("X-Fault: reset -> RST, no bytes", (data, how) == (b"", "reset"), (b"", "reset"),
            (data, how))
    data, how = raw(h.build_request("GET", "/r?fault=reset&delay=100"))
    t.check("?fault=reset&delay=100 -> RST after the delay", (data, how) == (b"", "reset"),
            (b"", "reset"), (data, how))
    data, how = raw(h.build_request("GET", "/c", [("X-Fault", "close")]))
    t.check("X-Fault: close -> FIN, no bytes", (data, how) == (b"", "eof"), (b"", "eof"),
            (data, how))
    # pipelined: the answer before the reset still arrives
    data, how = raw(h.build_request("GET", "/first") + h.build_request("GET", "/fault/reset"))
    rs, _, _ = h.parse_responses(data)
    t.check("an answer pipelined before a reset arrives, then the RST",
            [r.json()["path"] for r in rs] == ["/first"] and how == "reset",
            (["/first"], "reset"), ([r.status for r in rs], how))


def split_head(data):
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode("latin-1").split("\r\n"), body


def test_close_mid_body(t):
    data, how = raw(h.build_request("GET", "/cm", [("X-Fault", "close-mid-body")]))
    lines, body = split_head(data)
    cl = int(h.hget([tuple(x.split(": ", 1)) for x in lines[1:]], "Content-Length"))
    t.check("close-mid-body: Content-Length N, N//2 body bytes, then FIN",
            lines[0] == "HTTP/1.1 200 OK" and len(body) == cl // 2 and cl > 0 and how == "eof",
            ("200", cl // 2, "eof"), (lines[0], len(body), how))
    t.check("close-mid-body: the head says Connection: close", "Connection: close" in lines,
            "Connection: close", lines)
    c = h.Client(S["a"].port)
    c.send(h.build_request("GET", "/cm?fault=close-mid-body&size=1000000"))
    try:
        c.read_response(timeout=5)
        got = "complete"
    except h.Incomplete as e:
        got = str(e)
    t.check("close-mid-body with ?size=1000000: the client sees 500000 bytes missing",
            got == "EOF with 500000 body bytes missing", "500000 missing", got)
    c.close()


def test_bad_framing(t):
    data, how = raw(h.build_request("GET", "/bf", [("X-Fault", "bad-framing")]))
    lines, body = split_head(data)
    cl = [x for x in lines if x.startswith("Content-Length: ")]
    n = int(cl[0].split(": ")[1]) if cl else -1
    t.check("bad-framing: both Content-Length and Transfer-Encoding: chunked",
            len(cl) == 1 and "Transfer-Encoding: chunked" in lines, "CL + TE", lines)
    t.check("bad-framing: the body as one chunk of Content-Length bytes, then FIN",
            body.startswith(b"%x\r\n{" % n) and body.endswith(b"}\r\n0\r\n\r\n")
            and len(body) == len(b"%x\r\n" % n) + n + 7 and how == "eof", "chunked JSON",
            (body, how))
    data, how = raw(h.build_request("GET", "/bc?fault=bad-chunk"))
    lines, body = split_head(data)
    t.check("bad-chunk: Transfer-Encoding: chunked, no Content-Length",
            "Transfer-Encoding: chunked" in lines
            and not any(x.startswith("Content-Length") for x in lines), "TE only", lines)
    t.check("bad-chunk: the chunk size is 'zz', then FIN",
            body.startswith(b"zz\r\n{") and body.endswith(b"\r\n0\r\n\r\n") and how == "eof",
            b"zz\r\n{...}\r\n0\r\n\r\n", (body[:40], how))


def test_body_checksum(t):
    body = b"".join(h.pattern_blocks(1 << 20, block=1 << 16))
    want = hashlib.sha256(body).hexdigest()
    j = get("/up", method="POST", body=body, timeout=10).json()
    t.check("1 MiB POST with Content-Length: body_len and SHA-256",
            (j["body_len"], j["body_sum"]) == (1 << 20, want), (1 << 20, want),
            (j["body_len"], j["body_sum"]))
    c = h.Client(S["a"].port)
    c.send(h.build_request("POST", "/upc", body=body, chunked=True))
    j = c.read_response(timeout=10).json()
    t.check("1 MiB POST chunked (one chunk): body_len and SHA-256",
            (j["body_len"], j["body_sum"]) == (1 << 20, want), (1 << 20, want),
            (j["body_len"], j["body_sum"]))
    # many chunks with extensions, a trailer, and every piece sent on its own
    pieces = [b"POST /many HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"]
    for i in range(0, len(body), 100000):
        part = body[i:i + 100000]
        pieces += [b"%X;ext=%d\r\n" % (len(part), i), part, b"\r\n"]
    pieces.append(b"0\r\nX-Trailer: yes\r\n\r\n")
    for p in pieces:
        for k in range(0, len(p), 40000):
            c.send(p[k:k + 40000])
    j = c.read_response(timeout=10).json()
    t.check("chunked in 11 chunks with extensions and a trailer, sent in pieces: intact",
            (j["body_len"], j["body_sum"]) == (1 << 20, want), (1 << 20, want),
            (j["body_len"], j["body_sum"]))
    c.send(h.build_request("POST", "/exp", [("Expect", "100-continue"), ("Content-Length", "5")]))
    r100 = c.read_response(timeout=3, skip_interim=False)
    c.send(b"hello")
    r = c.read_response(timeout=3)
    t.check("Expect: 100-continue gets 100, then the answer for the body",
            (r100.status, r.status, r.json()["body_len"]) == (100, 200, 5), (100, 200, 5),
            (r100.status, r.status))
    c.close()


def test_pipelining(t):
    reqs, want = [], []
    for i in range(50):
        path = "/p/%d" % i
        if i % 10 == 3:
            reqs.append(h.build_request("GET", path + "?delay=30"))
        elif i % 10 == 7:
            reqs.append(h.build_request("POST", path, body=b"x" * i, chunked=(i % 20 == 7)))
        else:
            reqs.append(h.build_request("GET", path))
        want.append(path)
    c = h.Client(S["a"].port)
    accepted = S["a"].stats()["connections"]
    c.send(b"".join(reqs))
    rs = c.read_responses(50, timeout=10)
    got = [r.json()["path"] for r in rs]
    t.check("50 pipelined requests (some delayed, some with bodies) answered in order",
            got == want, want[:5], got[:5] if got != want else got)
    ns = [r.json()["n"] for r in rs]
    t.check("their n increase one by one", ns == list(range(ns[0], ns[0] + 50)), "n..n+49", ns)
    t.check("nothing more on the connection", c.pending(0.2) == b"", b"", "stray bytes")
    t.check("one connection served them all", S["a"].stats()["connections"] == accepted, accepted,
            S["a"].stats()["connections"])
    # a head sent in 1-byte pieces
    for b in h.build_request("GET", "/trickle"):
        c.send(bytes([b]))
    r = c.read_response(timeout=3)
    t.check("a head in 1-byte pieces", r.json()["path"] == "/trickle", "/trickle", r.json())
    c.send(h.build_request("GET", "/last", [("Connection", "close")]))
    r = c.read_response(timeout=3)
    data, how = c.read_until_close(2)
    t.check("Connection: close -> answered with Connection: close, then FIN",
            (r.header("Connection"), data, how) == ("close", b"", "eof"), ("close", b"", "eof"),
            (r.header("Connection"), data, how))
    c.close()
    data, how = raw(b"GET /ten HTTP/1.0\r\n\r\n")
    t.check("HTTP/1.0 without keep-alive: one answer then FIN",
            data.startswith(b"HTTP/1.1 200 OK\r\n") and how == "eof", "200 then eof",
            (data[:20], how))


def test_bad_requests(t):
    for label, data, status in (
            ("garbage", b"HELLO\r\n\r\n", 400),
            ("CL and TE", b"POST / HTTP/1.1\r\nContent-Length: 3\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
            ("bad chunk size", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
            ("head over 64 KiB", b"GET / HTTP/1.1\r\nX: " + b"a" * 70000, 431)):
        data, how = raw(data)
        rs, _, _ = h.parse_responses(data)
        t.check("%s -> %d, then FIN" % (label, status),
                len(rs) == 1 and rs[0].status == status and how == "eof", (status, "eof"),
                (data[:60], how))


def test_only(t):
    r = get("/o", [("X-Fault-Status", "503"), ("X-Fault-Only", "other, fu-b")])
    t.check("X-Fault-Only naming other servers: directives ignored", r.status == 200, 200,
            r.status)
    r = get("/o", [("X-Fault-Status", "503"), ("X-Fault-Only", "other,fu-a")])
    t.check("X-Fault-Only naming this server: directives applied", r.status == 503, 503,
            r.status)
    r = get("/o?status=502&only=fu-a")
    t.check("?only=fu-a: applied", r.status == 502, 502, r.status)


def test_stats(t):
    b = h.start_fault_upstream("fu-b")
    for p in ("/x", "/x", "/y?q=1"):
        get(p, port=b.port)
    c = h.Client(b.port)
    c.send(h.build_request("GET", "/hang"))
    c.pending(0.2)
    s = b.stats()
    t.check("stats: requests, per-path counts, connections accepted, open",
            (s["requests"], s["paths"], s["connections"], s["open"])
            == (4, {"/x": 2, "/y": 1, "/hang": 1}, 4, 1),
            (4, {"/x": 2, "/y": 1, "/hang": 1}, 4, 1),
            (s["requests"], s["paths"], s["connections"], s["open"]))
    t.check("stats: mode and defaults", (s["mode"], s["defaults"]) ==
            ("up", {"fault": "none", "status": 200, "delay_ms": 0, "size": -1}), "up, defaults", s)
    r = h.request(b.port, "GET", "/_fault/stats")
    t.check("/_fault/stats also answers on the listen port, uncounted",
            r.status == 200 and r.json()["requests"] == 4, 4, r.body)
    s = b.reset_stats()
    t.check("DELETE /_fault/stats zeroes the counters (open stays)",
            (s["requests"], s["paths"], s["connections"], s["open"]) == (0, {}, 0, 1),
            (0, {}, 0, 1), (s["requests"], s["paths"], s["connections"], s["open"]))
    t.check("n starts again from 1", get("/z", port=b.port).json()["n"] == 1, 1, "other")
    c.close()
    r = h.request(b.control_port, "GET", "/_fault/nope")
    t.check("an unknown control path is a 404", r.status == 404, 404, r.status)
    t.check("fu-b: SIGTERM -> exit 0", b.stop() == 0, 0, b.returncode)


def connect_refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def test_mode_down_up(t):
    a = S["a"]
    idle = h.Client(a.port)
    idle.send(h.build_request("GET", "/before"))
    idle.read_response()
    hung = h.Client(a.port)
    hung.send(h.build_request("GET", "/hang"))
    hung.pending(0.1)
    s = a.mode("down")
    t.check("mode down: stats say down", s["mode"] == "down", "down", s["mode"])
    t.check("mode down: connect is refused", connect_refused(a.port), "refused", "accepted")
    data, how = idle.read_until_close(2)
    t.check("mode down: an idle keep-alive connection is closed", (data, how) == (b"", "eof"),
            (b"", "eof"), (data, how))
    data, how = hung.read_until_close(2)
    t.check("mode down: a hung connection is closed", how in ("eof", "reset") and data == b"",
            "closed", (data, how))
    t.check("mode down: open connections 0", a.stats()["open"] == 0, 0, a.stats()["open"])
    a.mode("up")
    r = get("/after")
    t.check("mode up: served again on the same port", r.status == 200, 200, r.status)
    a.mode("down:300")
    t.check("mode down:300: refused at first", connect_refused(a.port), "refused", "accepted")
    t.check("mode down:300: listening again by itself", h.wait_port(a.port, 3), True, False)
    r = h.request(a.port, "POST", "/_fault/mode", body=b"down")
    t.check("mode down sent on the listen port: answered with Connection: close",
            r.status == 200 and r.header("Connection") == "close", "200 close",
            (r.status, r.header("Connection")))
    t.check("...and the port is down", connect_refused(a.port), "refused", "accepted")
    a.mode("normal")
    t.check("mode normal: up again", get("/n").status == 200, 200, "refused")
    idle.close()
    hung.close()


def test_mode_defaults(t):
    a = S["a"]
    s = a.mode("slow:200, status:503")
    t.check("mode slow:200, status:503 -> defaults",
            (s["defaults"]["delay_ms"], s["defaults"]["status"]) == (200, 503), (200, 503),
            s["defaults"])
    t0 = time.monotonic()
    r = get("/m")
    dt = time.monotonic() - t0
    t.check("every request: 503 after ~200 ms", r.status == 503 and dt >= 0.18, (503, ">=0.18"),
            (r.status, dt))
    t.check("a request's own directive still wins", get("/m?status=200&delay=0").status == 200,
            200, "other")
    a.mode("fault:reset")
    t.check("mode fault:reset: every request reset",
            raw(h.build_request("GET", "/m")) == (b"", "reset"), "reset", "other")
    r = h.request(a.control_port, "POST", "/_fault/mode", body=b"fault:melt")
    t.check("an unknown mode word: 400, nothing applied",
            r.status == 400 and a.stats()["defaults"]["fault"] == "reset", 400, (r.status, r.body))
    s = a.mode("normal")
    t.check("mode normal: the command-line defaults again",
            s["defaults"] == {"fault": "none", "status": 200, "delay_ms": 0, "size": -1},
            "none/200/0/-1", s["defaults"])
    c = h.start_fault_upstream("fu-c", status=201, delay_ms=50, size=3)
    r = get("/x", port=c.port)
    t.check("--status 201 --delay-ms 50 --size 3: applied to every request",
            (r.status, r.body) == (201, b"abc"), (201, b"abc"), (r.status, r.body))
    c.stop()


def test_sigterm(t):
    a = S["a"]
    busy = [h.Client(a.port) for _ in range(3)]
    busy[0].send(h.build_request("GET", "/hang"))
    busy[1].send(h.build_request("GET", "/slow?delay=10000"))
    busy[2].send(b"POST /partial HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc")
    time.sleep(0.1)
    t0 = time.monotonic()
    rc = a.stop()
    dt = time.monotonic() - t0
    t.check("SIGTERM with a hung, a delayed and a half-sent request: exit 0 promptly",
            rc == 0 and dt < 2, (0, "<2 s"), (rc, dt))
    for c in busy:
        c.close()


t.run(setup, test_normal_answer, test_status, test_size, test_delay, test_hang,
      test_reset_and_close, test_close_mid_body, test_bad_framing, test_body_checksum,
      test_pipelining, test_bad_requests, test_only, test_stats, test_mode_down_up,
      test_mode_defaults, test_sigterm)
