"""Acceptance 6: two workers share the listener; SIGTERM drains gracefully.

With workers: 2 (SO_REUSEPORT), 40 concurrent client connections land on both
workers, as /status shows. Then SIGTERM during a slow in-flight request (the
upstream answers after 1.5 s): the request completes with 200, a connection
attempted 0.3 s after the signal is refused (or never served), /ready answers
503 while draining if the admin is still up, an idle keep-alive connection
does not hold the exit up, and the process exits 0. A request whose head had partly
arrived at the SIGTERM is served (with Connection: close) once the rest comes: it was
closed with an EOF, as if it had never been sent.
"""

import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("workers_drain", budget=55)


def handler(req):
    if req.path.startswith("/slow"):
        return h.Response(200, b"slow done " + req.target.encode(), delay=1.5)
    return h.Response(200, b"fast " + req.target.encode())


S = {}


def setup(t):
    up = h.MockUpstream(handler, "up")
    cfg = """\
workers: 2
shutdown_timeout: 8s
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http, header_timeout: 5s, idle_timeout: 60s }
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
    t.check("ready file pid is the process", s.ready.get("pid") == s.pid, s.pid,
            s.ready.get("pid"))
    r = s.admin_get("/ready")
    t.check("/ready -> 200 once serving", r.status == 200, 200, r.status)
    r = s.admin_get("/health")
    t.check("/health -> 200", r.status == 200, 200, r.status)


def test_two_workers(t):
    s = S["s"]
    clients = []
    ok = 0
    for i in range(40):
        c = h.Client(S["port"])
        c.send(h.build_request("GET", "/fast/%d" % i))
        r = c.read_response()
        ok += (r.status, r.body) == (200, b"fast /fast/%d" % i)
        clients.append(c)
    t.check("40 concurrent connections each answered", ok == 40, 40, ok)
    # a request is counted once its response is written, which the client can read first
    st = s.status_until(lambda st: sum(w.get("requests", 0) for w in st.get("workers", [])) >= 40)
    for k in ("generation", "listeners", "routes", "upstreams", "workers"):
        t.check("/status has %r" % k, k in st, k, sorted(st))
    t.check("/status generation is 1", st.get("generation") == 1, 1, st.get("generation"))
    ws = st.get("workers", [])
    t.check("/status lists 2 workers with ids 0 and 1",
            sorted(w.get("id") for w in ws) == [0, 1], [0, 1], ws)
    conns = [w.get("connections", 0) for w in ws]
    reqs = [w.get("requests", 0) for w in ws]
    t.check("both workers accepted connections (SO_REUSEPORT spreads them)",
            len(conns) == 2 and all(x > 0 for x in conns), "both > 0", ws)
    t.check("workers' accepted connections add up to >= 40", sum(conns) >= 40, ">= 40",
            sum(conns))
    t.check("workers' requests add up to >= 40", sum(reqs) >= 40, ">= 40", sum(reqs))
    _, samples = s.metrics()
    v = h.metric_values(samples, "sluice_connections_active", listener="web")
    t.check('sluice_connections_active{listener="web"} == 40 with 40 open', v == [40.0], [40.0],
            v)
    for c in clients:
        c.close()
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        _, samples = s.metrics()
        v = h.metric_values(samples, "sluice_connections_active", listener="web")
        if v == [0.0]:
            break
        time.sleep(0.1)
    t.check('sluice_connections_active{listener="web"} back to 0 after the clients close',
            v == [0.0], [0.0], v)


def test_drain(t):
    s, up = S["s"], S["up"]
    idle = h.Client(S["port"])
    idle.send(h.build_request("GET", "/idle"))
    r = idle.read_response()
    t.check("idle keep-alive connection set up", r.status == 200, 200, r.status)

    res = {}

    def slow():
        try:
            c = h.Client(S["port"], timeout=10)
            c.send(h.build_request("GET", "/slow/inflight"))
            r = c.read_response(timeout=10)
            res["r"] = r
            res["after"], res["how"] = c.read_until_close(3)
            c.close()
        except Exception as e:
            res["err"] = repr(e)
    th = threading.Thread(target=slow, daemon=True)
    nreq = len(up.requests)
    th.start()
    got = up.wait_requests(nreq + 1, 3)
    t.check("the slow request reached the upstream", got, True, got)
    half = h.Client(S["port"], timeout=10)
    half.send(b"GET /half HTTP/1.1\r\nHost: a\r\n")  # half a head
    h.wait_until(lambda: sum(w["connections_active"] for w in s.status()["workers"]) >= 3)
    t_sig = time.monotonic()
    s.signal(15)

    time.sleep(0.3)
    new_conn = None
    try:
        c = socket.create_connection(("127.0.0.1", S["port"]), timeout=1)
        c.settimeout(1.0)
        try:
            c.sendall(b"GET /after-term HTTP/1.1\r\nHost: a\r\n\r\n")
            d = c.recv(1024)
            new_conn = "served: %r" % d[:80] if d else "accepted, then closed without service"
        except socket.timeout:
            new_conn = "accepted, no service within 1 s"
        except OSError as e:
            new_conn = "accepted, then %s" % type(e).__name__
        c.close()
    except ConnectionRefusedError:
        new_conn = "refused"
    except OSError as e:
        new_conn = "connect failed: %r" % e
    t.check("a new connection 0.3 s after SIGTERM is refused or never served",
            not new_conn.startswith("served"), "refused", new_conn)
    t.check("the request sent after SIGTERM never reached the upstream",
            not any(r.path == "/after-term" for r in up.requests), "absent",
            [r.path for r in up.requests][-3:])
    got = h.finish_head(half)
    t.check("a head begun before SIGTERM is answered once whole, with Connection: close",
            got == (200, b"fast /half", "close"), (200, b"fast /half", "close"), got)
    half.close()

    try:
        rr = s.admin_get("/ready", timeout=1)
        ready = rr.status
    except Exception as e:
        ready = "unreachable (%s)" % type(e).__name__
    if isinstance(ready, int):
        t.check("/ready -> 503 while draining", ready == 503, 503, ready)
    else:
        t.info("/ready while draining: %s (admin already closed; not an error)" % ready)

    th.join(8)
    r = res.get("r")
    t.check("the in-flight slow request completes with 200 and its body",
            r is not None and (r.status, r.body) == (200, b"slow done /slow/inflight"),
            (200, b"slow done /slow/inflight"), (r.status, r.body) if r else res.get("err"))
    if r is not None:
        t.info("in-flight response Connection header: %r; then %s"
               % (r.header("Connection"), res.get("how")))
        t.check("nothing after the in-flight response but a close", res.get("after") == b"",
                b"", res.get("after"))
    code = s.wait(10)
    dt = time.monotonic() - t_sig
    t.check("process exits 0 after SIGTERM", code == 0, 0, code)
    t.check("exit waits for the in-flight request (>= 1.0 s after SIGTERM)", dt >= 1.0,
            ">= 1.0 s", "%.2f s" % dt)
    t.check("an idle keep-alive connection does not hold the exit until shutdown_timeout "
            "(< 4 s after SIGTERM, timeout is 8 s)", dt < 4.0, "< 4 s", "%.2f s" % dt)
    data, how = idle.read_until_close(1)
    t.check("the idle keep-alive connection is closed without a response", data == b""
            and how in ("eof", "reset"), (b"", "eof"), (data[:100], how))
    idle.close()
    if code is None:
        s.kill()


t.run(setup, test_two_workers, test_drain)
