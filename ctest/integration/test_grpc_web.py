"""The grpc-web plugin on the wire (issue 14): a test client speaking gRPC-Web framing over
HTTP/1.1 (raw sockets) and HTTP/2 (python3-h2), through sluice to a real grpcio server
(grpc_inproc.py) over h2c.

  1. Unary, application/grpc-web+proto: 200 in the client's content type, the message
     frame, then the trailer frame (0x80) with grpc-status:0 and the custom trailer.
  2. Unary, application/grpc-web-text: the request base64, the response base64 that
     decodes to the same frames.
  3. An RPC that fails before any message (trailers-only): grpc-status 5 in the head.
  4. Server streaming streams: the first message reaches the HTTP/1.1 client while the
     server still holds the second; then the second and the trailer frame. The same in
     -text: the first message's base64 is whole (padded) before the second exists.
  5. Over HTTP/2: the trailer frame is in the body and no HTTP trailers follow it.
  6. CORS: the cors plugin answers the browser's preflight for the route.
  7. sluice_grpc_responses_total counts the statuses of the trailers that went into bodies.
"""

import base64
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_util as g  # noqa: E402

g.reexec_under_debian_python()

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402

import harness as h  # noqa: E402
from grpc_inproc import Service  # noqa: E402

t = h.Suite("grpc_web", budget=90)

CONF = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - { name: svc, protocol: h2c, targets: [ { address: 127.0.0.1:%(port)d } ] }
routes:
  - name: web
    match: { paths: [/w.S/] }
    upstream: svc
    plugins:
      - { name: cors, config: { origins: [https://app.example], expose_headers: [grpc-status, grpc-message] } }
      - { name: grpc-web }
"""


class H1Stream:
    """One HTTP/1.1 request whose chunked response body is read as it arrives."""

    def __init__(self, port, path, body, ctype):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        head = ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nX-Grpc-Web: 1\r\nContent-Length: %d\r\n\r\n"
                % (path, ctype, len(body))).encode()
        self.sock.sendall(head + body)
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._more()
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for ln in lines[1:]:
            k, v = ln.split(":", 1)
            self.headers[k.strip().lower()] = v.strip()
        self.body = b""
        self.done = False

    def _more(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError("closed")
        self.buf += d

    def read_some(self):
        """Reads at least one more chunk (or the end) of the body."""
        if "content-length" in self.headers:
            n = int(self.headers["content-length"])
            while len(self.buf) < n:
                self._more()
            self.body, self.done = self.buf[:n], True
            return
        while True:
            if b"\r\n" in self.buf:
                size_line, rest = self.buf.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                if len(rest) >= size + 2:
                    self.buf = rest[size + 2:]
                    if size == 0:
                        self.done = True
                    self.body += rest[:size]
                    return
            self._more()

    def read_all(self):
        while not self.done:
            self.read_some()
        self.sock.close()
        return self.body


def b64_segments(text):
    """Decodes a -text body: base64 groups of 4, padded segments one after another (each piece
    the gateway flushed is padded on its own, as PROTOCOL-WEB allows)."""
    return b"".join(base64.b64decode(text[i:i + 4]) for i in range(0, len(text) - len(text) % 4, 4))


def split_frames(data):
    return [(f, m) for f, m in g.unframe(data)]


def trailers_of(frames):
    tr = [m for f, m in frames if f & 0x80]
    if not tr:
        return None
    out = {}
    for ln in tr[-1].decode().split("\r\n"):
        if ln:
            k, v = ln.split(":", 1)
            out[k] = v.strip()
    return out


def test_grpc_web(t):
    svc = Service()
    s = h.start_sluice(CONF % {"port": svc.port}, suite=t, name="grpc-web")
    try:
        p = s.port()
        # 1. unary, binary
        c = H1Stream(p, "/w.S/Unary", g.frame(b"hello"), "application/grpc-web+proto")
        frames = split_frames(c.read_all())
        t.check("unary grpc-web: 200 in the client's content type", c.status == 200 and
                c.headers.get("content-type") == "application/grpc-web+proto", 200, (c.status, c.headers))
        t.check("unary grpc-web: the message frame, then the trailer frame (0x80)",
                len(frames) == 2 and frames[0] == (0, b"hello") and frames[1][0] == 0x80, "[hello, trailers]", frames)
        tr = trailers_of(frames) or {}
        t.check("the trailer frame carries grpc-status:0 and the custom trailer",
                tr.get("grpc-status") == "0" and tr.get("x-custom") == "unary", {"grpc-status": "0", "x-custom": "unary"}, tr)
        t.check("the upstream got application/grpc (the grpcio server answered at all) and the metadata",
                svc.metadata.get("x-grpc-web") == "1", "x-grpc-web: 1", svc.metadata)

        # 2. unary, text
        c = H1Stream(p, "/w.S/Unary", base64.b64encode(g.frame(b"texty")), "application/grpc-web-text")
        body = c.read_all()
        frames = split_frames(b64_segments(body)) if body else []
        t.check("grpc-web-text: content type back, the body base64 of [message, trailers]",
                c.headers.get("content-type") == "application/grpc-web-text" and len(frames) == 2 and
                frames[0] == (0, b"texty") and (trailers_of(frames) or {}).get("grpc-status") == "0",
                "texty + grpc-status:0", (c.headers.get("content-type"), body[:80], frames))

        # 3. trailers-only failure
        c = H1Stream(p, "/w.S/Fail", g.frame(b"x"), "application/grpc-web+proto")
        body = c.read_all()
        t.check("an RPC failing before any message: grpc-status 5 and its message in the head, no frame",
                c.headers.get("grpc-status") == "5" and c.headers.get("grpc-message") == "nope" and body == b"",
                ("5", "nope", b""), (c.headers.get("grpc-status"), c.headers.get("grpc-message"), body[:40]))

        # 4. server streaming streams
        c = H1Stream(p, "/w.S/Tick", g.frame(b""), "application/grpc-web+proto")
        t0 = time.monotonic()
        while not c.done and len(split_frames(c.body)) < 1:
            c.read_some()
        first = split_frames(c.body)
        t.check("server streaming: the first message arrives while the server holds the second",
                first == [(0, b"tick-1")] and not svc.gate.is_set(), [(0, b"tick-1")], (first, time.monotonic() - t0))
        svc.release()
        frames = split_frames(c.read_all())
        t.check("then the second message and the trailer frame",
                [m for f, m in frames if not f & 0x80] == [b"tick-1", b"tick-2"] and
                (trailers_of(frames) or {}).get("x-custom") == "tick", "tick-1, tick-2, trailers", frames)

        # 4b. the same as -text: each message decodes whole as soon as it arrived (base64 is
        # flushed with the message, never holding back its last one or two bytes)
        svc.gate.clear()
        c = H1Stream(p, "/w.S/Tick", base64.b64encode(g.frame(b"")), "application/grpc-web-text")
        end = time.monotonic() + 3
        while not c.done and len(split_frames(b64_segments(c.body))) < 1 and time.monotonic() < end:
            c.sock.settimeout(max(0.05, end - time.monotonic()))
            try:
                c.read_some()
            except socket.timeout:
                break
        first = split_frames(b64_segments(c.body))
        t.check("server streaming, -text: the first message decodes whole while the server holds the second",
                first == [(0, b"tick-1")] and not svc.gate.is_set(), [(0, b"tick-1")], (c.body, first))
        svc.release()
        c.sock.settimeout(5)
        frames = split_frames(b64_segments(c.read_all()))
        t.check("-text: then the second message and the trailer frame",
                [m for f, m in frames if not f & 0x80] == [b"tick-1", b"tick-2"] and
                (trailers_of(frames) or {}).get("x-custom") == "tick", "tick-1, tick-2, trailers", frames)

        # 5. over HTTP/2
        sock = socket.create_connection(("127.0.0.1", p), timeout=5)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
                                (":path", "/w.S/Unary"), ("content-type", "application/grpc-web")])
        conn.send_data(sid, g.frame(b"over-h2"), end_stream=True)
        sock.sendall(conn.data_to_send())
        data, head, trailers, done = b"", None, None, False
        while not done:
            d = sock.recv(65536)
            if not d:
                break
            for ev in conn.receive_data(d):
                if isinstance(ev, h2.events.ResponseReceived):
                    head = dict((k.decode(), v.decode()) for k, v in ev.headers)
                elif isinstance(ev, h2.events.DataReceived):
                    data += ev.data
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.TrailersReceived):
                    trailers = ev.headers
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                    done = True
            sock.sendall(conn.data_to_send())
        sock.close()
        frames = split_frames(data)
        t.check("over HTTP/2: grpc-web content type, message and trailer frame in DATA, no HTTP trailers",
                (head or {}).get("content-type") == "application/grpc-web" and len(frames) == 2 and
                frames[0] == (0, b"over-h2") and (trailers_of(frames) or {}).get("grpc-status") == "0" and
                trailers is None, "that", (head, frames, trailers))

        # 6. CORS preflight
        r = h.request(p, "OPTIONS", "/w.S/Unary", headers=[
            ("Origin", "https://app.example"), ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "content-type,x-grpc-web,x-user-agent")])
        t.check("the cors plugin answers the preflight (204, allow origin and headers)",
                r.status == 204 and r.header("access-control-allow-origin") == "https://app.example" and
                r.header("access-control-allow-headers") == "content-type,x-grpc-web,x-user-agent", 204,
                (r.status, r.header("access-control-allow-origin"), r.header("access-control-allow-headers")))

        def by_status(samples):
            return {lab.get("grpc_status"): float(v) for n, lab, v in samples
                    if n == "sluice_grpc_responses_total" and lab.get("route") == "web"}
        # a response is counted after its last byte is written: polled
        got = by_status(s.metrics_until(lambda m: by_status(m).get("0") == 5 and by_status(m).get("5") == 1))
        t.check("sluice_grpc_responses_total{route=web}: 0 x5 (statuses taken into bodies), 5 x1 (trailers-only head)",
                got.get("0") == 5 and got.get("5") == 1, {"0": 5, "5": 1}, got)
    finally:
        s.stop()
        svc.stop()


t.run(test_grpc_web)
