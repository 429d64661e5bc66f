"""http-logger through the real binary, with a real HTTP collector on loopback.

  * every line arrives: 1,000 requests (900 over HTTP/1.1 from 4 clients, 100 over
    HTTP/2) → the collector's POSTs hold 1,000 JSON lines, one per request id, in
    batches of at most batch_max;
  * a down collector (refused port): the gateway keeps answering every request, lines
    past queue_max are dropped and the failed batches counted;
  * a slow collector (answers after 1 s) does not slow requests: p99 of 1,000 requests
    with it stays under the p99 with a collector answering at once + 50 ms.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("http_logger", budget=150)


def load(port, path, n):
    return h.keepalive_load(port, path, n, clients=4)


def p99(lat):
    return h.percentile(lat, 0.99)


def lines_of(mock):
    out = []
    for r in list(mock.requests):
        if r.body_sha256 is not None:  # recorded at its head: its body may still be on the way
            out.extend(json.loads(r.body))
    return out


def metric(s, result):
    m = h.parse_prometheus(h.request(s.admin_port, "GET", "/metrics").body.decode())
    return sum(h.metric_values(m, "sluice_http_logger_lines_total", result=result))


def test_http_logger(t):
    up = h.MockUpstream(lambda req: h.Response(200, b"ok"), name="up")
    col = h.MockUpstream(lambda req: h.Response(200), name="collector")
    slow = h.MockUpstream(lambda req: h.Response(200, delay=1.0), name="slow")
    refused_sock, refused = h.refused_port()
    conf = """\
workers: 2
shutdown_timeout: 2s
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0, http2: true } ]
upstreams: [ { name: up, targets: [ { address: %s } ] } ]
routes:
  - { name: plain, match: { paths: [ /plain ] }, upstream: up }
  - name: logged
    match: { paths: [ /logged ] }
    upstream: up
    plugins:
      - { name: http-logger, config: { endpoint: "http://%s/ingest", batch_max: 50, flush: 200ms,
                                       headers: { Authorization: "Bearer t" } } }
  - name: down
    match: { paths: [ /down ] }
    upstream: up
    plugins:
      - { name: http-logger, config: { endpoint: "http://127.0.0.1:%d/", batch_max: 20, flush: 50ms,
                                       queue_max: 100, retries: 1, timeout: 500ms } }
  - name: slow
    match: { paths: [ /slow ] }
    upstream: up
    plugins:
      - { name: http-logger, config: { endpoint: "http://%s/", batch_max: 10, flush: 100ms } }
""" % (up.address, col.address, refused, slow.address)
    s = h.start_sluice(conf, suite=t, name="hl")
    try:
        # every line arrives
        _, fails = load(s.port(), "/logged", 900)
        # one curl per request: curl 7.88 sends nothing for a second URL on a reused
        # prior-knowledge connection
        codes = [subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge",
                                 "http://127.0.0.1:%d/logged/h2" % s.port()], capture_output=True,
                                timeout=10).stdout.decode() for _ in range(100)]
        t.check("requests answered (HTTP/1.1)", fails == 0, 0, fails)
        t.check("requests answered (HTTP/2)", codes == ["200"] * 100, "100 x 200", codes[:5])
        deadline = time.time() + 10
        while len(lines_of(col)) < 1000 and time.time() < deadline:
            time.sleep(0.1)
        lines = lines_of(col)
        t.check("the collector got every line", len(lines) == 1000, 1000, len(lines))
        ids = {ln.get("request_id") for ln in lines}
        t.check("one line per request", len(ids) == 1000, 1000, len(ids))
        t.check("lines hold the access-log fields", all(ln.get("route") == "logged" and ln.get("status") == 200
                                                        for ln in lines), "route/status", lines[:1])
        t.check("HTTP/2 requests logged", sum(1 for ln in lines if ln.get("path") == "/logged/h2") == 100, 100,
                sum(1 for ln in lines if ln.get("path") == "/logged/h2"))
        sizes = [len(json.loads(q.body)) for q in col.requests]
        t.check("batches of at most batch_max", max(sizes) <= 50, "<= 50", max(sizes))
        t.check("the configured header reached the collector",
                all(q.header("Authorization") == "Bearer t" for q in col.requests), "Bearer t", None)
        # counted once the collector's answer is read, after the collector has the batch: polled
        sent = h.poll(lambda: metric(s, "sent"), lambda v: v == 1000)
        t.check("sent lines counted", sent == 1000, 1000, sent)

        # a down collector
        _, fails = load(s.port(), "/down", 1000)
        t.check("down collector: every request answered", fails == 0, 0, fails)
        deadline = time.time() + 5
        while metric(s, "dropped") + metric(s, "failed") < 1000 and time.time() < deadline:
            time.sleep(0.1)
        dropped, failed = metric(s, "dropped"), metric(s, "failed")
        t.info("down collector: %d lines dropped (queue full), %d failed (batches given up)" % (dropped, failed))
        t.check("down collector: lines dropped past queue_max", dropped > 0, "> 0", dropped)
        t.check("down collector: every line dropped or failed", dropped + failed == 1000, 1000, dropped + failed)

        # a slow collector does not slow requests
        # the baseline is the same plugin with a collector that answers at once (the log
        # phase's own work is the same); /plain (no plugin at all) is printed for scale
        load(s.port(), "/logged", 200)
        plain, _ = load(s.port(), "/plain", 1000)
        base1, _ = load(s.port(), "/logged", 1000)
        lat, fails = load(s.port(), "/slow", 1000)
        base2, _ = load(s.port(), "/logged", 1000)
        t.info("p99: no plugin %.2f ms; collector answering at once %.2f ms and %.2f ms (before and after); "
               "collector answering after 1 s %.2f ms" % (p99(plain), p99(base1), p99(base2), p99(lat)))
        base = base1 if p99(base1) > p99(base2) else base2
        t.check("slow collector: no request failed", fails == 0, 0, fails)
        t.check("slow collector: p99 < p99 with a fast one + 50 ms", p99(lat) < p99(base) + 50,
                "< %.1f" % (p99(base) + 50), p99(lat))
    finally:
        s.stop()
        for u in (up, col, slow):
            u.stop()
        refused_sock.close()


t.run(test_http_logger)
