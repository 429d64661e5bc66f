"""A reload does not break a keep-alive promise already made (found by scripts/soak).

A keep-alive client is reading a response whose head (no Connection: close) went out
before a reload began; the old worker drains, and the connection is marked closing. The
client, told it may reuse the connection, sends its next request right after the body
ends. That request must be answered (with Connection: close), not met with EOF or a
reset: the same grace an idle keep-alive connection gets at a reload.

A request whose head had only partly arrived when the reload began is answered too (with
Connection: close) once the rest of the head comes: it was dropped with an EOF.

An HTTP/2 connection the old generation accepted before the reload, whose connection
preface came only after it, is drained like one open at the reload: its first requests are
served, then GOAWAY and the close. It went on serving every later request on the old
config, never told to go away, and kept the old generation (its workers and VMs) alive.
"""

import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("reload_keepalive", budget=90)
S = {}


def handler(req):
    if req.path == "/slow":
        # the head goes out at once, the body over ~0.6 s: the reload lands in between
        return h.Response(200, stream=[b"a" * 100] * 6, length=600, chunk_delay=0.1)
    return h.Response(200, b"fast")


def setup(t):
    S["up"] = h.MockUpstream(handler)
    S["conf"] = f"""
workers: 1
watch: false
admin: {{ listen: 127.0.0.1:0 }}
listeners: [ {{ name: web, listen: 127.0.0.1:0, http2: true }} ]
upstreams: [ {{ name: up, targets: [ {{ address: {S["up"].address} }} ] }} ]
routes: [ {{ name: all, match: {{ paths: [/] }}, upstream: up }} ]
"""
    S["sl"] = h.start_sluice(S["conf"], suite=t)


def test_promise_kept_across_reload(t):
    sl = S["sl"]
    ok = 0
    for i in range(5):
        c = h.Client(sl.port(), timeout=10)
        c.send(h.build_request("GET", "/slow"))
        reloaded = threading.Event()

        def reload_soon():
            time.sleep(0.25)
            st, _ = sl.reload()
            reloaded.set()

        th = threading.Thread(target=reload_soon)
        th.start()
        r = c.read_response()
        th.join()
        t.check("round %d: the slow response is whole" % i, r.status == 200 and len(r.body) == 600,
                (200, 600), (r.status, len(r.body)))
        promised = (r.header("Connection") or "").lower() != "close"
        t.check("round %d: its head (sent before the reload) promised keep-alive" % i, promised, True,
                r.header("Connection"))
        try:
            c.send(h.build_request("GET", "/fast"))
            r2 = c.read_response()
            answered = r2.status == 200 and r2.body == b"fast"
            closing = (r2.header("Connection") or "").lower() == "close"
        except Exception as e:  # EOF or reset: the promise was broken
            answered, closing = False, repr(e)
        t.check("round %d: the next request on that connection is answered" % i, answered, True, answered)
        t.check("round %d: ... with Connection: close" % i, closing is True, True, closing)
        ok += answered
        c.close()
    t.check("all five promises kept", ok == 5, 5, ok)


def accepted(sl):
    """The test's connection was accepted (the reload must find it open)."""
    return sum(w["connections_active"] for w in sl.status()["workers"]) >= 1


def test_head_begun_before_reload(t):
    sl = S["sl"]
    c = h.Client(sl.port(), timeout=10)
    c.send(b"GET /fast HTTP/1.1\r\nHost: x\r\n")  # half a head
    h.wait_until(lambda: accepted(sl))
    st, _ = sl.reload()
    t.check("the reload applied", st == 200, 200, st)
    got = h.finish_head(c)
    t.check("a head begun before the reload is answered once it is whole, with Connection: close",
            got == (200, b"fast", "close"), (200, b"fast", "close"), got)
    c.close()


def h2_frame(kind, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload


def h2_frames(sock, until):
    """Reads frames (type, flags, stream, payload) until EOF, a reset or the deadline;
    acknowledges SETTINGS and PING."""
    buf = b""
    while time.monotonic() < until:
        sock.settimeout(max(0.01, until - time.monotonic()))
        try:
            data = sock.recv(65536)
        except socket.timeout:
            return
        except ConnectionResetError:
            yield ("reset", 0, 0, b"")
            return
        if not data:
            yield ("eof", 0, 0, b"")
            return
        buf += data
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            kind, flags, sid, payload = buf[3], buf[4], struct.unpack(">I", buf[5:9])[0], buf[9:9 + n]
            buf = buf[9 + n:]
            if kind in (4, 6) and not flags & 1:
                sock.sendall(h2_frame(kind, 1, 0, payload if kind == 6 else b""))
            yield (kind, flags, sid, payload)


def test_h2_preface_after_reload(t):
    sl = S["sl"]
    sock = socket.create_connection(("127.0.0.1", sl.port()))
    h.wait_until(lambda: accepted(sl))
    st, _ = sl.reload()
    t.check("the reload applied", st == 200, 200, st)
    # the preface, SETTINGS and GET /fast (HPACK static table: :method GET, :scheme http,
    # :path /, then :authority and :path as literals)
    head = b"\x82\x86\x41\x01x\x04\x05/fast"
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0) + h2_frame(1, 5, 1, head))
    answered, goaway, closed = b"", None, None
    for kind, flags, sid, payload in h2_frames(sock, time.monotonic() + 5):
        if kind == 0 and sid == 1:
            answered += payload
        elif kind == 7:
            goaway = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
        elif kind in ("eof", "reset"):
            closed = kind
    left = sl.status_until(lambda s: s["retiring_generations"] == 0)["retiring_generations"]
    sock.close()
    t.check("its first request is served", answered == b"fast", b"fast", answered)
    t.check("then a final GOAWAY names it as the last stream", goaway == 1, 1, goaway)
    t.check("and the connection closes (within 5 s)", closed == "eof", "eof", closed)
    t.check("so the old generation is freed", left == 0, 0, left)


def test_reload_reports_upstream_settings(t):
    """A reload that changes only an upstream's balancing, retries, breaker or health
    reports that upstream as changed (it once compared addresses and timeouts only)."""
    sl = S["sl"]
    for what, extra in (("balancer", "    balancer: least-conn\n"),
                        ("retry", "    balancer: least-conn\n    retry: { attempts: 3 }\n"),
                        ("breaker", "    balancer: least-conn\n    retry: { attempts: 3 }\n    circuit_breaker: {}\n")):
        conf = S["conf"].replace("upstreams: [ {{ name: up, targets: [ {{ address: {0} }} ] }} ]".format(S["up"].address),
                                 "upstreams:\n  - name: up\n%s    targets: [ { address: %s } ]" % (extra, S["up"].address))
        with open(sl.config_path, "w") as f:
            f.write(conf)
        st, body = sl.reload()
        t.check("a reload changing only the %s is accepted" % what, st == 200, 200, (st, body))
        t.check("... and reports upstream:up changed", "upstream:up" in (body or {}).get("changed", []),
                "upstream:up in changed", body)


t.run(setup, test_promise_kept_across_reload, test_head_begun_before_reload, test_h2_preface_after_reload,
      test_reload_reports_upstream_settings)
