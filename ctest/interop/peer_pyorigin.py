"""A Python origin that misbehaves: a real socket server on loopback (a thread per
connection) behind sluice's L7 (HTTP/1.1 proxy route) and L4 (tcp listener) paths. It
trickles bodies in small writes, resets connections in the middle of a body, answers
until close without a length, closes a kept-alive connection when the next request
comes, and answers a half-closed L4 client only after reading its EOF."""

import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

KIB = 1 << 10
TRICKLE = 64 * KIB          # trickled in 100 writes
PARTIAL = 256 * KIB         # what a resetting origin sends of its announced 1 MiB
CLOSE_BODY = 1 << 20        # a close-delimited body


def rst(conn):
    """Closes with a TCP RST (SO_LINGER 0), not a FIN."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


class Origin(io.h.TCPServer):
    """The misbehaving HTTP/1.1 origin. Paths:
      /ok/N            200, Content-Length N, N bytes of DATA (keep-alive)
      /trickle/cl      200, Content-Length 64 KiB, in 100 writes 10 ms apart
      /trickle/chunked 200, chunked, 64 KiB in 100 chunks 10 ms apart
      /reset/cl        200, Content-Length 1 MiB; 256 KiB, then RST
      /reset/chunked   200, chunked; 256 KiB of chunks, then RST (no last chunk)
      /reset/close     200, Connection: close, no length; 256 KiB, then RST
      /close           200, Connection: close, no length; 1 MiB in pieces, then FIN
      /stale/fin|rst/N the first request of a connection gets /ok/N's answer; the next one
                       on the same connection is read and the connection closed (FIN or
                       RST) without a byte of answer: an idle close racing a reuse
    .requests counts requests per path kind; .conns counts connections."""

    def __init__(self, data):
        self.data = data
        self.requests = {}
        self.lock = threading.Lock()
        super().__init__(threaded=True)

    def count(self, kind):
        with self.lock:
            self.requests[kind] = self.requests.get(kind, 0) + 1

    def handle(self, conn):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(30)
        buf = b""
        served = 0
        while True:
            while b"\r\n\r\n" not in buf:
                d = conn.recv(65536)
                if not d:
                    return
                buf += d
            head, buf = buf.split(b"\r\n\r\n", 1)
            method, path = head.split(b"\r\n", 1)[0].split(b" ")[:2]
            path = path.decode()
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    n = int(v)
                    while len(buf) < n:
                        d = conn.recv(65536)
                        if not d:
                            return
                        buf += d
                    buf = buf[n:]
            kind = "/".join(path.split("/")[:3])
            self.count(kind)
            served += 1
            if not self.answer(conn, method, path, served):
                return

    def answer(self, conn, method, path, served):
        """Writes one answer; False when the connection is to end."""
        d = self.data
        if path.startswith("/stale/"):
            _, _, how, n = path.split("/")
            if served > 1:
                (rst if how == "rst" else socket.socket.close)(conn)
                return False
            path = "/ok/" + n
        if path.startswith("/ok/"):
            n = int(path[4:])
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n
                         + (d[:n] if method != b"HEAD" else b""))
            return True
        if path == "/trickle/cl":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % TRICKLE)
            for i in range(100):
                conn.sendall(d[i * TRICKLE // 100:(i + 1) * TRICKLE // 100])
                time.sleep(0.01)
            return True
        if path == "/trickle/chunked":
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(100):
                piece = d[i * TRICKLE // 100:(i + 1) * TRICKLE // 100]
                conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                time.sleep(0.01)
            conn.sendall(b"0\r\n\r\n")
            return True
        if path.startswith("/reset/"):
            framing = path[7:]
            head = {"cl": b"Content-Length: %d\r\n" % (1 << 20),
                    "chunked": b"Transfer-Encoding: chunked\r\n",
                    "close": b"Connection: close\r\n"}[framing]
            conn.sendall(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n")
            for i in range(16):
                piece = d[i * PARTIAL // 16:(i + 1) * PARTIAL // 16]
                conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if framing == "chunked" else piece)
            time.sleep(0.3)  # the partial body reaches the gateway before the reset
            rst(conn)
            return False
        if path == "/close":
            conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/octet-stream\r\n\r\n")
            for i in range(64):
                conn.sendall(d[i * CLOSE_BODY // 64:(i + 1) * CLOSE_BODY // 64])
                if i % 8 == 0:
                    time.sleep(0.005)
            conn.shutdown(socket.SHUT_WR)
            return False
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        return True


class HalfCloseOrigin(io.h.TCPServer):
    """An L4 origin: reads until the client's EOF, then answers the sha256 (hex) of what it
    read, a newline, and the bytes themselves, and closes."""

    def handle(self, conn):
        conn.settimeout(30)
        got = bytearray()
        while True:
            d = conn.recv(262144)
            if not d:
                break
            got += d
        conn.sendall(io.sha256(bytes(got)).encode() + b"\n" + bytes(got))
        conn.shutdown(socket.SHUT_WR)


def setup(t, splice="auto", pools=()):
    """(origin, sluice, DATA): the origin behind an http listener `web` (route to it) and
    a tcp listener `l4`; DATA is the 1 MiB the origin's bodies are cut from. pools: path
    prefixes that go to the origin through an upstream of their own (its own pool)."""
    io.need(t, "curl")
    data = os.urandom(1 << 20)
    o = Origin(data)
    ups = "".join("  - { name: p%d, targets: [ { address: 127.0.0.1:%d } ] }\n" % (i, o.port)
                  for i, _ in enumerate(pools))
    routes = "".join("  - { name: p%d, match: { paths: [%s] }, upstream: p%d }\n" % (i, pre, i)
                     for i, pre in enumerate(pools))
    s = io.sluice(t, """
workers: 2
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0 }
  - { name: l4, listen: 127.0.0.1:0, protocol: tcp, upstream: o, splice: %s }
upstreams:
  - { name: o, targets: [ { address: 127.0.0.1:%d } ], timeouts: { read: 20s } }
%sroutes:
%s  - { name: all, upstream: o }
""" % (splice, o.port, ups, routes))
    return o, s, data


@io.case("l7.trickle", "64 KiB an origin writes in 100 small pieces 10 ms apart reaches HTTP/1.1 "
         "clients sha256-exact through the proxy route, Content-Length and chunked alike, on "
         "fresh curl connections and one kept-alive raw connection", budget=90)
def l7_trickle(t):
    o, s, data = setup(t)
    want = io.sha256(data[:TRICKLE])
    for framing in ("cl", "chunked"):
        rc, body, hdrs = io.fetch("http://127.0.0.1:%d/trickle/%s" % (s.port("web"), framing))
        t.check("curl /trickle/%s: exit 0, 64 KiB sha256-exact" % framing,
                rc == 0 and io.sha256(body) == want, (0, TRICKLE, want), (rc, len(body), io.sha256(body)))
        framed = ("content-length: %d" % TRICKLE) if framing == "cl" else "transfer-encoding: chunked"
        t.check("curl /trickle/%s: the client saw %s" % (framing, framed), framed in hdrs, framed, hdrs)
    c = io.h.Client(s.port("web"), timeout=20)
    seen = []
    try:
        for path in ("/trickle/cl", "/trickle/chunked", "/trickle/cl", "/ok/1"):
            c.send(io.h.build_request("GET", path))
            r = c.read_response()
            seen.append((r.status, r.framing, r.body_len, r.sha256 == io.sha256(data[:r.body_len])))
    except Exception as e:
        seen.append(repr(e))
    t.check("one kept-alive connection: trickled CL, chunked, CL, then 1 B, each 200 and exact",
            seen == [(200, "length", TRICKLE, True), (200, "chunked", TRICKLE, True),
                     (200, "length", TRICKLE, True), (200, "length", 1, True)],
            "200 length/chunked/length 65536 B, then 1 B, all exact", seen)
    t.check("the origin got each trickle request once (3 /trickle/cl, 2 /trickle/chunked)",
            o.requests.get("/trickle/cl") == 3 and o.requests.get("/trickle/chunked") == 2,
            {"/trickle/cl": 3, "/trickle/chunked": 2}, o.requests)


@io.case("l7.reset_mid_body", "an origin that resets (RST) after 256 KiB of a 1 MiB Content-Length, "
         "a chunked or a close-delimited body gives the HTTP/1.1, HTTP/2 and HTTP/1.0 client an "
         "error (curl 18/56/92, short body, a reset where only the close delimits), never a "
         "complete-looking body; sluice logs and counts each failure and serves the next request", budget=90)
def l7_reset_mid_body(t):
    o, s, data = setup(t)
    web = "http://127.0.0.1:%d" % s.port("web")
    for framing in ("cl", "chunked", "close"):
        rc, body, _ = io.fetch(web + "/reset/" + framing)
        t.check("HTTP/1.1 curl /reset/%s: exit 18 or 56 (transfer cut), at most 256 KiB received"
                % framing, rc in (18, 56) and len(body) <= PARTIAL,
                "exit 18|56, <= %d B" % PARTIAL, "exit %d, %d B" % (rc, len(body)))
        rc, body, _ = io.fetch(web + "/reset/" + framing, "--http2-prior-knowledge")
        t.check("HTTP/2 curl /reset/%s: exit 92 or 18 or 56 (stream reset / cut), at most 256 KiB"
                % framing, rc in (92, 18, 56) and len(body) <= PARTIAL,
                "exit 92|18|56, <= %d B" % PARTIAL, "exit %d, %d B" % (rc, len(body)))
        # the raw client: the response must not end cleanly (a terminating chunk, or the
        # connection kept open as if the message were complete)
        c = io.h.Client(s.port("web"), timeout=20)
        try:
            c.send(io.h.build_request("GET", "/reset/" + framing))
            try:
                resp = c.read_response()
                how = "complete %s body of %d B" % (resp.framing, resp.body_len)
            except io.h.Incomplete:
                how = "incomplete"
            except io.h.ReadTimeout:
                how = "stalled"
        finally:
            c.close()
        t.check("raw HTTP/1.1 /reset/%s: the message ends incomplete (connection closed mid-body)"
                % framing, how == "incomplete", "incomplete", how)
    # HTTP/1.0: no chunked coding, the body ends at the close, so only a reset tells the
    # client it was cut: a FIN would make the 256 KiB look like the whole body
    rc, body, _ = io.fetch(web + "/reset/close", "--http1.0")
    t.check("HTTP/1.0 curl /reset/close: exit 56 (connection reset), at most 256 KiB received",
            rc == 56 and len(body) <= PARTIAL, "exit 56, <= %d B" % PARTIAL, "exit %d, %d B" % (rc, len(body)))
    c = io.h.Client(s.port("web"), timeout=20)
    try:
        c.send(b"GET /reset/close HTTP/1.0\r\nHost: o\r\n\r\n")
        raw, how = c.read_until_close(20)
    finally:
        c.close()
    t.check("raw HTTP/1.0 /reset/close: the connection ends with a reset, not a FIN", how == "reset",
            "reset", "%s after %d B" % (how, len(raw)))
    rc, body, _ = io.fetch(web + "/ok/65536")
    t.check("the next request is served: 200, 64 KiB exact",
            rc == 0 and body == data[:65536], (0, 65536), (rc, len(body)))
    failed = s.log().count("upstream failed mid-response: upstream reset mid-body")
    t.check("sluice logged each of the 11 cut responses ('upstream failed mid-response: upstream reset mid-body')",
            failed == 11, 11, failed)
    _, m = s.metrics()
    codes = {c: sum(io.h.metric_values(m, "sluice_upstream_requests_total", code=c)) for c in ("0", "200")}
    t.check("sluice_upstream_requests_total counts the 11 cut exchanges as code 0 and the next as 200",
            codes == {"0": 11, "200": 1}, {"0": 11, "200": 1}, codes)
    t.check("the origin saw 3 requests for /reset/cl and /reset/chunked, 5 for /reset/close",
            [o.requests.get("/reset/" + f) for f in ("cl", "chunked", "close")] == [3, 3, 5],
            [3, 3, 5], o.requests)


@io.case("l7.close_delimited", "a Connection: close response without a length (body until the "
         "origin's FIN) reaches the client sha256-exact; an HTTP/1.1 client gets it re-chunked "
         "and keeps its connection for the next request", budget=60)
def l7_close_delimited(t):
    o, s, data = setup(t)
    want = io.sha256(data[:CLOSE_BODY])
    rc, body, _ = io.fetch("http://127.0.0.1:%d/close" % s.port("web"))
    t.check("curl /close: exit 0, 1 MiB sha256-exact", rc == 0 and io.sha256(body) == want,
            (0, CLOSE_BODY, want), (rc, len(body), io.sha256(body)))
    c = io.h.Client(s.port("web"), timeout=20)
    seen = []
    try:
        for path in ("/close", "/ok/1000", "/close"):
            c.send(io.h.build_request("GET", path))
            r = c.read_response()
            seen.append((r.status, r.framing, r.body_len, r.sha256 == io.sha256(data[:r.body_len])))
    except Exception as e:
        seen.append(repr(e))
    t.check("one kept-alive connection: /close re-chunked exact, /ok/1000, /close again",
            seen == [(200, "chunked", CLOSE_BODY, True), (200, "length", 1000, True),
                     (200, "chunked", CLOSE_BODY, True)],
            "[200 chunked 1 MiB exact, 200 length 1000, 200 chunked 1 MiB exact]", seen)
    # HTTP/1.0 client: no chunked coding there, so the body goes until close
    c = io.h.Client(s.port("web"), timeout=20)
    try:
        c.send(b"GET /close HTTP/1.0\r\nHost: o\r\n\r\n")
        raw, how = c.read_until_close(20)
    finally:
        c.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    t.check("HTTP/1.0 client: 200, body until an orderly close (FIN), 1 MiB sha256-exact",
            head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0] and io.sha256(body) == want
            and how == "eof",
            (200, want), (head.split(b"\r\n")[0], len(body), io.sha256(body), how))


@io.case("l7.stale_keepalive", "an origin that closes (FIN, or RST) a kept-alive connection when "
         "the next request arrives on it never costs a client request: 15 GETs per way, all 200 "
         "and exact, each reuse found closed sent again on a fresh connection", budget=60)
def l7_stale_keepalive(t):
    # one upstream per way of closing: each has its own pool, so neither reuses the other's
    o, s, data = setup(t, pools=("/stale/fin/", "/stale/rst/"))
    for how in ("fin", "rst"):
        bad = []
        conns0 = o.accepted
        c = io.Kept(s.port("web"))
        for i in range(15):
            r, err = c.get("/stale/%s/%d" % (how, 1000 + i))
            if err or (r.status, r.body) != (200, data[:1000 + i]):
                bad.append((i, err or (r.status, r.body_len)))
        c.close()
        t.check("%s: 15 of 15 GETs on one client connection answered 200 and exact" % how,
                not bad, [], bad)
        # every GET after the first found its pooled connection closed by the origin and
        # went again on a new one: 15 connections answered, 14 of them closed at their reuse
        t.check("%s: the origin saw 15 connections and 29 requests (14 closed unanswered)" % how,
                (o.accepted - conns0, o.requests.get("/stale/" + how)) == (15, 29),
                (15, 29), (o.accepted - conns0, o.requests.get("/stale/" + how)))


@io.case("l4.misbehaving", "through a tcp listener (splice auto and off) a trickled 64 KiB body "
         "arrives exact, and an origin's reset after 256 KiB of a 1 MiB body reaches curl as an "
         "error (18/56, short body), never as a complete transfer", budget=60)
def l4_misbehaving(t):
    for splice in ("auto", "off"):
        o, s, data = setup(t, splice)
        l4 = "http://127.0.0.1:%d" % s.port("l4")
        for framing in ("cl", "chunked"):
            rc, body, _ = io.fetch(l4 + "/trickle/" + framing)
            t.check("splice %s: curl /trickle/%s: exit 0, 64 KiB sha256-exact" % (splice, framing),
                    rc == 0 and body == data[:TRICKLE], (0, TRICKLE), (rc, len(body)))
        for framing in ("cl", "chunked", "close"):
            rc, body, _ = io.fetch(l4 + "/reset/" + framing)
            t.check("splice %s: curl /reset/%s: exit 18 or 56, at most 256 KiB of body"
                    % (splice, framing), rc in (18, 56) and len(body) <= PARTIAL,
                    "exit 18|56, <= %d B" % PARTIAL, "exit %d, %d B" % (rc, len(body)))
        rc, body, _ = io.fetch(l4 + "/ok/100000")
        t.check("splice %s: the next session is served: 100000 B exact" % splice,
                rc == 0 and body == data[:100000], (0, 100000), (rc, len(body)))
        s.stop()
        o.stop()


@io.case("l4.halfclose", "a client that sends 1 MiB and half-closes through a tcp listener "
         "(splice auto and off) gets the origin's answer, written only after the origin read "
         "EOF, exact (sha256 line and echo), 5 sequential and 4 parallel sessions", budget=60)
def l4_halfclose(t):
    o = HalfCloseOrigin()
    s = io.origin_l4(t, o.port)

    def exchange(port, size, out):
        payload = os.urandom(size)
        want = io.sha256(payload).encode() + b"\n" + payload
        try:
            c = io.h.Client(port, timeout=20)
            c.send(payload)
            c.shutdown_write()
            got, how = c.read_until_close(20)
            c.close()
        except OSError as e:
            out.append("%s: %s" % (type(e).__name__, e))
            return
        if got != want:
            out.append("%d B answer of %d expected (%s)" % (len(got), len(want), how))

    for listener in ("auto", "off"):
        bad = []
        for size in (0, 1, 64 * KIB, 1 << 20, 1 << 20):
            exchange(s.port(listener), size, bad)
        t.check("splice %s: 5 sequential half-closed sessions (0 B, 1 B, 64 KiB, 1 MiB x2) answered exact"
                % listener, not bad, [], bad)
        bad = []
        io.at_once([(exchange, s.port(listener), 1 << 20, bad)] * 4)
        t.check("splice %s: 4 parallel half-closed 1 MiB sessions answered exact" % listener,
                not bad, [], bad)
    t.check("the origin saw 18 sessions", o.accepted == 18, 18, o.accepted)


if __name__ == "__main__":
    io.main()
