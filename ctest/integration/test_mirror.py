"""mirror through the real binary: the mirror receives the copies (count and body
checksum), and a hanging, a refusing and a slow mirror leave the main requests' p99
unchanged within noise.

Load: 2,000 GETs per route from 8 keep-alive HTTP/1.1 clients, first to a route without
mirror, then to routes mirroring to a mirror that never answers, to a refused port and
to one answering after 200 ms. Each route's p99 must stay under the baseline's + 50 ms,
and no main request may fail. The figures are printed (docs/DECISIONS.md, "Measurements
outside scripts/bench").
"""

import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("mirror", budget=200)

N, CLIENTS = 2000, 8


def load(port, path):
    return h.keepalive_load(port, path, N, CLIENTS)


def p(lat, q):
    return h.percentile(lat, q)


def test_mirror(t):
    main = h.MockUpstream(lambda req: h.Response(200, b"main"), name="main")
    hang = h.MockUpstream(lambda req: h.HANG, name="hang")
    slow = h.MockUpstream(lambda req: h.Response(200, b"slow", delay=0.2), name="slow")
    rec = h.MockUpstream(lambda req: h.Response(204), name="rec")
    refused_sock, refused = h.refused_port()
    conf = """\
workers: 1
shutdown_timeout: 1s
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0, http2: true } ]
upstreams:
  - { name: main, targets: [ { address: %s } ] }
  - { name: rec, targets: [ { address: %s } ] }
routes:
  - { name: base, match: { paths: [ /base ] }, upstream: main }
  - name: hang
    match: { paths: [ /hang ] }
    upstream: main
    plugins: [ { name: mirror, config: { address: "%s", timeout: 2s } } ]
  - name: refuse
    match: { paths: [ /refuse ] }
    upstream: main
    plugins: [ { name: mirror, config: { address: "127.0.0.1:%d" } } ]
  - name: slow
    match: { paths: [ /slow ] }
    upstream: main
    plugins: [ { name: mirror, config: { address: "%s" } } ]
  - name: rec
    match: { paths: [ /rec ] }
    upstream: main
    plugins: [ { name: mirror, config: { upstream: rec, max_body: 4KiB, max_in_flight: 1000 } } ]
""" % (main.address, rec.address, hang.address, refused, slow.address)
    s = h.start_sluice(conf, suite=t, name="mirror")
    try:
        # the copies arrive: 200 POSTs with bodies of different sizes, over HTTP/1.1
        sent = []
        for i in range(200):
            body = (b"%d-" % i) * (1 + i * 7 % 500)
            if len(body) > 4096:
                body = body[:4096]
            sent.append(body)
            r = h.request(s.port(), "POST", "/rec?i=%d" % i, headers=[("Content-Type", "text/plain")], body=body)
            if r.status != 200:
                t.check("main answered", False, 200, r.status)
        rec.wait_requests(200, timeout=10)
        # the mock records a request at its head, then reads its body: wait for the bodies
        h.wait_until(lambda: all(r.body_sha256 for r in list(rec.requests)))
        bodies = sorted(r.body for r in rec.requests)
        # (max_in_flight 1000 on this route: a mock slow to accept under load must not make
        # the gateway drop copies, which is what the cap is for elsewhere)
        t.check("the mirror received every copy", len(rec.requests) == 200, 200, len(rec.requests))
        digest = lambda bs: hashlib.sha256(b"".join(sorted(bs))).hexdigest()  # noqa: E731
        t.check("the copies' bodies are the requests' bodies (sha256 of all)", digest(bodies) == digest(sent),
                digest(sent), digest(bodies))
        paths = {r.path for r in rec.requests}
        t.check("the copies' paths", "/rec" in paths, "/rec", paths)
        over = h.request(s.port(), "POST", "/rec", body=b"x" * 5000)
        t.check("a body over max_body still reaches the main upstream", over.status == 200, 200, over.status)
        # over HTTP/2
        import subprocess
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge",
                            "http://127.0.0.1:%d/rec?h2=1" % s.port()], capture_output=True, timeout=10)
        t.check("HTTP/2 request answered", r.stdout == b"200", "200", r.stdout)
        deadline = time.time() + 5
        while len(rec.requests) < 201 and time.time() < deadline:
            time.sleep(0.05)
        t.check("HTTP/2 request copied", len(rec.requests) >= 201, ">= 201", len(rec.requests))

        # p99 with and without each mirror
        load(s.port(), "/base")  # warm up
        figures = {}
        for path in ("/base", "/hang", "/refuse", "/slow", "/base"):
            lat, fails = load(s.port(), path)
            figures.setdefault(path, []).append((p(lat, 0.5), p(lat, 0.99), fails))
            t.info("%-8s p50 %.2f ms  p99 %.2f ms  failed %d" % (path, p(lat, 0.5), p(lat, 0.99), fails))
            if path == "/hang":
                time.sleep(2.3)  # the hung copies time out: the next mirror starts with an empty cap
        base99 = max(f[1] for f in figures["/base"])
        for path in ("/hang", "/refuse", "/slow"):
            p99, fails = figures[path][0][1], figures[path][0][2]
            if p99 >= base99 + 50 and path != "/hang":
                # one run's p99 is its 5 slowest requests: a scheduling stall of the 2-core
                # machine lands there (101.8 ms once on a quiet CI run). A mirror that slows
                # the main requests does so in every run, so a second run decides.
                lat, again = load(s.port(), path)
                fails += again
                t.info("%-8s again: p99 %.2f ms" % (path, p(lat, 0.99)))
                p99 = min(p99, p(lat, 0.99))
            t.check("%s: no main request failed" % path, fails == 0, 0, fails)
            t.check("%s: p99 %.1f ms < baseline p99 %.1f ms + 50 ms" % (path, p99, base99), p99 < base99 + 50,
                    "< %.1f" % (base99 + 50), p99)
        m = h.parse_prometheus(h.request(s.admin_port, "GET", "/metrics").body.decode())
        res = {k: sum(h.metric_values(m, "sluice_mirror_requests_total", result=k))
               for k in ("sent", "failed", "dropped", "too_large")}
        t.info("mirror outcomes: %s" % res)
        t.check("hanging mirror: copies dropped past max_in_flight", res["dropped"] > 0, "> 0", res)
        t.check("refused copies counted as failed", res["failed"] >= N // 2, ">= %d" % (N // 2), res)
        t.check("the too-large body counted", res["too_large"] == 1, 1, res)
    finally:
        s.stop()
        for u in (main, hang, slow, rec):
            u.stop()
        refused_sock.close()


t.run(test_mirror)
