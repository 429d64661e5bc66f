"""A request body that trickles in slower than the upstream's timeouts is not an upstream
timeout (found with the HTTP/2 load tests).

A POST sends 10 bytes every 0.3 s for about 3 s through an upstream whose connect
timeout is 1 s and write timeout 1 s. The upstream connection is up and every write goes
through at once: the gateway is waiting on the client, whose own idle timeout (60 s)
governs. It used to answer `504 upstream timed out` 1 s after the connect, the connect
timer still armed.
"""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("slow_upload", budget=60)
S = {}


def echo_len(req):
    return h.Response(200, b"got %d" % len(req.body or b""))


def setup(t):
    S["up"] = h.MockUpstream(echo_len)
    S["sl"] = h.start_sluice(f"""
workers: 1
watch: false
admin: {{ listen: 127.0.0.1:0 }}
listeners: [ {{ name: web, listen: 127.0.0.1:0 }} ]
upstreams:
  - name: up
    targets: [ {{ address: {S["up"].address} }} ]
    timeouts: {{ connect: 1s, write: 1s, read: 5s }}
routes: [ {{ name: all, match: {{ paths: [/] }}, upstream: up }} ]
""", suite=t)


def slow_post(t, chunked):
    s = socket.create_connection(("127.0.0.1", S["sl"].port()), timeout=10)
    pieces = [b"0123456789"] * 10
    if chunked:
        s.sendall(b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    else:
        s.sendall(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\nConnection: close\r\n\r\n")
    t0 = time.monotonic()
    for p in pieces:
        time.sleep(0.3)
        s.sendall(b"a\r\n" + p + b"\r\n" if chunked else p)
    if chunked:
        s.sendall(b"0\r\n\r\n")
    resp = h.recv_all(s)
    s.close()
    return resp, time.monotonic() - t0


def test_slow_body(t):
    resp, took = slow_post(t, False)
    t.check("a 100-byte body over %.1f s answered 200" % took, resp.startswith(b"HTTP/1.1 200"), "200", resp[:60])
    t.check("... and the upstream got all of it", resp.endswith(b"got 100"), "got 100", resp[-20:])


def test_slow_chunked_body(t):
    resp, took = slow_post(t, True)
    t.check("a chunked body over %.1f s answered 200" % took, resp.startswith(b"HTTP/1.1 200"), "200", resp[:60])
    t.check("... and the upstream got all of it", resp.endswith(b"got 100"), "got 100", resp[-20:])


t.run(setup, test_slow_body, test_slow_chunked_body)
