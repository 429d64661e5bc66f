"""A client that leaves before its answer is logged and counted as 499, as nginx logs it
("client closed request").

A real client (a socket) sends a request to a slow upstream and closes (or half-closes)
before the upstream answers: the gateway drops the upstream exchange at once (the upstream
sees its connection close before it answers), access-log's line says status 499 and
sluice_requests_total counts it under code="499". A client that closes after the
response head reached it keeps the upstream's status, as nginx keeps it once the head was
sent.
"""

import json
import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("client_abort", budget=40)
S = {}
SLOW = 3.0  # the upstream's delay before its head: far longer than the test waits on anything


def slow(req):
    if req.path.startswith("/body"):  # the head at once, the body's pieces slowly
        return h.Response(200, stream=[b"a" * 10, b"b" * 10, b"c" * 10], chunk_delay=SLOW)
    return h.Response(200, b"late", delay=SLOW)


def setup(t):
    S["up"] = h.MockUpstream(slow)
    S["log"] = os.path.join(h.new_tmpdir("abort"), "access.log")
    S["sl"] = h.start_sluice(f"""
workers: 1
watch: false
admin: {{ listen: 127.0.0.1:0 }}
listeners: [ {{ name: web, listen: 127.0.0.1:0 }} ]
upstreams: [ {{ name: up, targets: [ {{ address: {S["up"].address} }} ] }} ]
routes:
  - name: r
    upstream: up
    plugins: [ {{ name: access-log, config: {{ path: {S["log"]}, fields: [path, status] }} }} ]
""", suite=t)


def logged(path):
    """access-log's status for path, once its line is written (None until then)."""
    try:
        with open(S["log"]) as f:
            for line in f:
                d = json.loads(line)
                if d.get("path") == path:
                    return d.get("status")
    except OSError:
        pass
    return None


def requests_total(code):
    r = h.request(S["sl"].admin_port, "GET", "/metrics")
    return sum(h.metric_values(h.parse_prometheus(r.body.decode()), "sluice_requests_total", route="r", code=code))


def upstream_conn(path):
    """The upstream connection that received path's request, once it has."""
    for c in list(S["up"].conns):
        if any(r.path == path for r in list(c.requests)):
            return c
    return None


def gateway_closed(conn):
    """Whether the gateway closed the upstream connection (EOF waiting to be read): the
    mock's handler sleeps through its delay without reading, so this peeks."""
    readable, _, _ = select.select([conn.sock], [], [], 0)
    if not readable:
        return False
    try:
        return conn.sock.recv(1, socket.MSG_PEEK) == b""
    except ConnectionError:
        return True


def leave_early(t, path, how):
    s = socket.create_connection(("127.0.0.1", S["sl"].port("web")), timeout=10)
    s.sendall(("GET %s HTTP/1.1\r\nHost: a\r\n\r\n" % path).encode())
    conn = h.wait_until(lambda: upstream_conn(path), timeout=5)
    t.check("%s: the upstream has the request" % path, conn is not None, True, None)
    if how == "close":
        s.close()
    else:
        s.shutdown(socket.SHUT_WR)
    # the gateway gives the exchange up at once: the upstream sees its connection close
    # long before it would answer (SLOW)
    closed = conn is not None and h.wait_until(lambda: gateway_closed(conn), timeout=SLOW - 0.5)
    t.check("%s (%s): the gateway closes the upstream connection before the answer" % (path, how),
            closed, True, closed)
    status = h.wait_until(lambda: logged(path), timeout=SLOW + 2)
    t.check("%s (%s): access-log's status is 499" % (path, how), status == 499, 499, status)
    if how != "close":
        s.close()


def test_close_before_answer(t):
    before = requests_total("499")
    leave_early(t, "/close", "close")
    leave_early(t, "/half", "half-close")
    n = h.wait_until(lambda: requests_total("499") - before >= 2 and requests_total("499") - before, timeout=5)
    t.check("sluice_requests_total{code=\"499\"} counts both", n == 2, 2, n)
    t.check("... and no 200 for them", requests_total("200") == 0, 0, requests_total("200"))


def test_close_after_head(t):
    s = socket.create_connection(("127.0.0.1", S["sl"].port("web")), timeout=10)
    s.sendall(b"GET /body HTTP/1.1\r\nHost: a\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        more = s.recv(4096)
        if not more:
            break
        head += more
    t.check("/body: the head arrives at once", head.startswith(b"HTTP/1.1 200"), "HTTP/1.1 200", head[:40])
    s.close()
    status = h.wait_until(lambda: logged("/body"), timeout=3 * SLOW + 2)
    t.check("/body: a client that had the status line is logged with it (200), as nginx does",
            status == 200, 200, status)


t.run(setup, test_close_before_answer, test_close_after_head)
