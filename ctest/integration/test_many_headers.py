"""Heads with more header fields than a head holds inline, and a connection whose read
block is given back while its request waits (issue 12, memory per in-flight request).

A parsed head holds its first 16 fields in itself and moves them all to the request's
arena at the 17th (core/proto/http1.h); the limit stays 100 fields (one more: 431). A
body-less request waiting on its upstream holds no read block: its head is copied into its
arena and the block goes back to the worker (core/http/conn.c, conn_park_buffer).

  1. HTTP/1.1: 17 fields and exactly 100 (Host and 99 more) reach the upstream in order,
     with their values, and a plugin sees every one of them (a field repeated at the 1st,
     50th and 99th place reads "1, 2, 3"); 101 fields are a 431. An upstream's response
     with 40 fields reaches the client in order.
  2. HTTP/2 (curl --http2-prior-knowledge): the same at 17 and at 100 fields (:authority
     becomes Host), and 431 past the limit.
  3. One keep-alive connection after its block was given back: the next request sent while
     the first waits on its upstream, a head split over two writes, a POST with a body, a
     pipelined pair; every answer in order, and the upstream sees every head intact.
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("many_headers", budget=90)
S = {}
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins_fixture")
RESP_FIELDS = [("X-R%02d" % i, "r%d" % i) for i in range(40)]


def handler(req):
    if req.path.startswith("/slow"):
        time.sleep(0.3)
    if req.path.startswith("/many-resp"):
        return h.Response(200, body=b"ok", headers=list(RESP_FIELDS))
    return h.json_response({"path": req.path, "body_len": req.body_len})


def setup(t):
    up = h.MockUpstream(handler)
    S["up"] = up
    S["sl"] = h.start_sluice(f"""
workers: 1
admin: {{ listen: 127.0.0.1:0 }}
watch: false
plugin_paths: [{FIXTURES}]
listeners:
  - {{ name: web, listen: 127.0.0.1:0, http2: true }}
upstreams: [ {{ name: up, targets: [ {{ address: {up.address} }} ] }} ]
routes:
  - {{ name: probe, match: {{ paths: [/probe] }}, plugins: [ {{ name: probe }} ] }}
  - {{ name: all, match: {{ paths: [/] }}, upstream: up }}
""", suite=t)


def fields(n):
    """n fields after Host: X-F001.. with X-Rep at the 1st, 50th and 99th place (of 99)."""
    out = []
    for i in range(1, n + 1):
        if i in (1, 50, 99):
            out.append(("X-Rep", str((1, 50, 99).index(i) + 1)))
        else:
            out.append(("X-F%03d" % i, "v%d" % i))
    return out


def sent_fields(req):
    return [(k, v) for k, v in req.headers
            if (k.lower().startswith("x-f") and k[3:].isdigit()) or k.lower() == "x-rep"]


def check_upstream(t, label, want):
    got = sent_fields(S["up"].requests[-1])
    t.check("%s: the upstream got all %d fields in order" % (label, len(want)),
            [(k.lower(), v) for k, v in got] == [(k.lower(), v) for k, v in want],
            want[:3] + ["..."], got[:3] + ["..."] if got else got)


def check_plugin(t, label, r, want):
    t.check("%s: the plugin answered 200" % label, r.status == 200, 200, (r.status, r.body[:200]))
    if r.status != 200:
        return
    seen = r.json()["headers"]
    missing = [k for k, v in want if k != "X-Rep" and seen.get(k.lower()) != v]
    rep = seen.get("x-rep")
    want_rep = ", ".join(v for k, v in want if k == "X-Rep")
    t.check("%s: the plugin sees every field with its value" % label, not missing, [], missing[:5])
    t.check("%s: the plugin sees the repeated field's values in order" % label, rep == want_rep, want_rep, rep)


def test_http1(t):
    p = S["sl"].port()
    for n in (16, 99):  # with Host: 17 and 100 fields
        want = fields(n)
        label = "HTTP/1.1, %d fields" % (n + 1)
        r = h.request(p, "GET", "/h1/%d" % n, headers=want)
        t.check("%s: 200" % label, r.status == 200, 200, r.status)
        check_upstream(t, label, want)
        check_plugin(t, label, h.request(p, "GET", "/probe", headers=want), want)
    r = h.request(p, "GET", "/h1/over", headers=fields(100))
    t.check("HTTP/1.1, 101 fields: 431", r.status == 431, 431, r.status)
    r = h.request(p, "GET", "/many-resp")
    got = [(k, v) for k, v in r.headers if k.upper().startswith("X-R")]
    t.check("an upstream response with 40 fields reaches the client in order",
            [(k.lower(), v) for k, v in got] == [(k.lower(), v) for k, v in RESP_FIELDS],
            RESP_FIELDS[:2], got[:2])


def curl_h2(path, hdrs):
    args = ["curl", "-sS", "--http2-prior-knowledge", "-o", "-", "-w", "\n%{http_version} %{http_code}",
            "-H", "User-Agent:", "-H", "Accept:"]
    for k, v in hdrs:
        args += ["-H", "%s: %s" % (k, v)]
    p = subprocess.run(args + ["http://127.0.0.1:%d%s" % (S["sl"].port(), path)],
                       capture_output=True, timeout=20)
    body, _, tail = p.stdout.rpartition(b"\n")
    return tail.decode(), body, p.stderr.decode()


class _Resp:
    def __init__(self, status, body):
        self.status, self.body = status, body

    def json(self):
        import json
        return json.loads(self.body)


def test_http2(t):
    for n in (16, 99):  # with :authority as Host: 17 and 100 fields
        want = fields(n)
        label = "HTTP/2, %d fields" % (n + 1)
        tail, body, err = curl_h2("/h2/%d" % n, want)
        t.check("%s: 200 over HTTP/2" % label, tail == "2 200", "2 200", (tail, err[-200:]))
        check_upstream(t, label, want)
        tail, body, err = curl_h2("/probe", want)
        check_plugin(t, label, _Resp(int(tail.split()[-1]) if tail else 0, body), want)
    tail, _, err = curl_h2("/h2/over", fields(100))
    t.check("HTTP/2, 101 fields: 431", tail == "2 431", "2 431", (tail, err[-200:]))


def test_keepalive_after_parking(t):
    p = S["sl"].port()
    c = h.Client(p, timeout=10)
    try:
        # The first waits 300 ms on its upstream with its block given back; the second is
        # sent meanwhile, into a block taken again, and is answered after it.
        c.send(h.build_request("GET", "/slow/1", headers=fields(20)))
        time.sleep(0.1)
        c.send(h.build_request("GET", "/k/2"))
        r1, r2 = c.read_response(timeout=10), c.read_response(timeout=10)
        t.check("a request sent while the previous waits: both answered in order",
                (r1.status, r1.json()["path"], r2.status, r2.json()["path"]) == (200, "/slow/1", 200, "/k/2"),
                (200, "/slow/1", 200, "/k/2"), (r1.status, r1.body[:80], r2.status, r2.body[:80]))
        slow = [q for q in S["up"].requests if q.path == "/slow/1"][-1]
        t.check("the waiting request's head reached the upstream intact (20 more fields, in order)",
                [(k.lower(), v) for k, v in sent_fields(slow)] == [(k.lower(), v) for k, v in fields(20)],
                fields(20)[:2], sent_fields(slow)[:2])
        # A head in two writes, then a POST with a body, then a pipelined pair.
        raw = h.build_request("GET", "/k/3", headers=[("X-Split", "yes")])
        c.send(raw[:20])
        time.sleep(0.1)
        c.send(raw[20:])
        r3 = c.read_response(timeout=10)
        t.check("a head split over two writes after a parked request: 200 /k/3",
                (r3.status, r3.json()["path"]) == (200, "/k/3"), (200, "/k/3"), (r3.status, r3.body[:80]))
        c.send(h.build_request("POST", "/k/4", body=b"b" * 5000))
        r4 = c.read_response("POST", timeout=10)
        t.check("a POST with 5,000 body bytes on the same connection",
                (r4.status, r4.json()["body_len"]) == (200, 5000), (200, 5000), (r4.status, r4.body[:80]))
        c.send(h.build_request("GET", "/k/5") + h.build_request("GET", "/k/6"))
        r5, r6 = c.read_response(timeout=10), c.read_response(timeout=10)
        t.check("a pipelined pair after them: both answered in order",
                (r5.json()["path"], r6.json()["path"]) == ("/k/5", "/k/6"), ("/k/5", "/k/6"),
                (r5.body[:80], r6.body[:80]))
    finally:
        c.close()


t.run(setup, test_http1, test_http2, test_keepalive_after_parking)
