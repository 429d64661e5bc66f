"""OpenTelemetry traces over OTLP/HTTP JSON (issue 17), against a real collector: an HTTP
server on loopback that parses every export.

1. sample_ratio 1.0: well-formed resourceSpans (service.name, ids of 32 and 16 lower-case
   hex), one SERVER span per request and one CLIENT span per attempt, children of it; a
   request retried after a 502 has two sibling CLIENT spans (first, retry); the upstream
   got each attempt's span as its parent; the client's traceparent is continued (its
   trace id, its span as the SERVER span's parent); semantic-convention attributes.
2. Sampling: 0.0 records nothing started here but a sampled parent is always recorded;
   0.5 over 2,000 requests is within 5 standard deviations of 1,000.
3. The collector stopped, then answering only after 5 s (timeout 2 s): requests are
   answered as fast as without telemetry (figures printed), drops are counted in
   sluice_telemetry_spans_dropped_total, RSS grows by less than 16 MiB over 6,000
   sampled requests (the queue holds 2,048 spans of ~600 bytes).
"""

import json
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("telemetry", budget=240)


class Collector:
    def __init__(self, delay=0.0, ipv6=False):
        self.spans, self.bodies, self.lock, self.delay = [], [], threading.Lock(), delay
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                if outer.delay:
                    time.sleep(outer.delay)
                doc = json.loads(body)
                with outer.lock:
                    outer.bodies.append((self.path, dict(self.headers), doc))
                    for rs in doc["resourceSpans"]:
                        for ss in rs["scopeSpans"]:
                            for sp in ss["spans"]:
                                sp["_resource"] = rs["resource"]
                                outer.spans.append(sp)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        class Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ipv6 else socket.AF_INET

        self.srv = Server(("::1" if ipv6 else "127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()

    def wait(self, pred, timeout=8.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if pred(self.spans):
                    return True
            time.sleep(0.1)
        return False


CONF = """
workers: 2
watch: false
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
telemetry:
  otlp: { endpoint: "http://127.0.0.1:%d/v1/traces", headers: { X-Tenant: t1 }, timeout: 2s }
  service_name: gw-test
  sample_ratio: %s
upstreams:
  - name: api
    targets: [ { address: %s } ]
  - name: flaky
    targets: [ { address: %s }, { address: %s } ]
    balancer: round-robin
    retry: { attempts: 2, on: [502], backoff: 0s }
routes:
  - { name: flaky, match: { paths: [/flaky] }, upstream: flaky }
  - { name: tp, match: { paths: [/tp] }, upstream: api, plugins: [ { name: traceparent } ] }
  - { name: api, match: { paths: [/] }, upstream: api }
"""

HEX32, HEX16 = re.compile(r"^[0-9a-f]{32}$"), re.compile(r"^[0-9a-f]{16}$")


def attrs(sp):
    out = {}
    for a in sp.get("attributes", []):
        v = a["value"]
        out[a["key"]] = v.get("stringValue", v.get("intValue"))
    return out


def start(t, col_port, ratio, name, up_addr, bad_addr, good_addr):
    return h.start_sluice(CONF % (col_port, ratio, up_addr, bad_addr, good_addr), suite=t, name=name)


def test_spans(t):
    col = Collector()
    up = h.MockUpstream(name="api")
    bad = h.MockUpstream(lambda req: h.Response(502, b"bad"), name="bad")
    good = h.MockUpstream(lambda req: h.Response(200, b"good"), name="good")
    s = start(t, col.port, "1.0", "traced", up.address, bad.address, good.address)
    client_trace, client_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    r = h.request(s.port(), "GET", "/a?q=1", headers=[("traceparent", "00-%s-%s-01" % (client_trace, client_span)),
                                                      ("tracestate", "vendor=x"),
                                                      ("Host", "127.0.0.1:%d" % s.port())])
    t.check("continued request answered", r.status == 200, 200, r.status)
    for _ in range(4):
        h.request(s.port(), "GET", "/b")
    for _ in range(2):  # round robin over bad, good: one of the two meets the 502 first
        r = h.request(s.port(), "GET", "/flaky")
        t.check("flaky answered 200 (retried on 502)", r.status == 200, 200, r.status)
    r = h.request(s.port(), "GET", "/tp")
    t.check("traceparent plugin route answered", r.status == 200, 200, r.status)
    ok = col.wait(lambda sp: len([x for x in sp if x["kind"] == 2]) >= 8)
    t.check("8 SERVER spans exported within 2 s flush", ok, True, len(col.spans))
    with col.lock:
        spans = list(col.spans)
        bodies = list(col.bodies)
    t.check("POSTed to the endpoint's path with its headers",
            bodies and bodies[0][0] == "/v1/traces" and bodies[0][1].get("X-Tenant") == "t1" and
            bodies[0][1].get("Content-Type") == "application/json", "/v1/traces, X-Tenant", bodies[0][:2] if bodies else None)
    res = spans[0]["_resource"]["attributes"] if spans else []
    t.check("resource service.name", {"key": "service.name", "value": {"stringValue": "gw-test"}} in res, "gw-test", res)
    bad_ids = [sp for sp in spans if not HEX32.match(sp["traceId"]) or not HEX16.match(sp["spanId"]) or
               ("parentSpanId" in sp and not HEX16.match(sp["parentSpanId"]))]
    t.check("every id is lower-case hex of 32 (trace) or 16 (span) digits", not bad_ids, "none bad", bad_ids[:2])
    server = {sp["spanId"]: sp for sp in spans if sp["kind"] == 2}
    client = [sp for sp in spans if sp["kind"] == 3]
    api_kids = [c for c in client if attrs(c).get("sluice.upstream") == "api"]
    flaky_kids = [c for c in client if attrs(c).get("sluice.upstream") == "flaky"]
    t.check("one CLIENT span per attempt: 6 on api", len(api_kids) == 6, 6, len(api_kids))
    tp_srv = [sp for sp in server.values() if attrs(sp).get("http.route") == "tp"]
    tp_kid = [c for c in client if tp_srv and c["parentSpanId"] == tp_srv[0]["spanId"]]
    got = [req.header("traceparent") for req in up.requests if req.path == "/tp"]
    want = tp_kid and "00-%s-%s-01" % (tp_kid[0]["traceId"], tp_kid[0]["spanId"])
    t.check("the traceparent plugin with telemetry: one implementation, the upstream gets the attempt span",
            got == [want], [want], got)
    t.check("one CLIENT span per attempt: 3 or 4 on flaky (2 requests, 1 or 2 retried)", len(flaky_kids) in (3, 4),
            "3 or 4", len(flaky_kids))
    orphans = [c for c in client if c.get("parentSpanId") not in server or
               server[c["parentSpanId"]]["traceId"] != c["traceId"]]
    t.check("every CLIENT span is a child of its request's SERVER span", not orphans, "none", orphans[:1])
    cont = [sp for sp in server.values() if sp["traceId"] == client_trace]
    t.check("the client's trace id continued", len(cont) == 1, 1, len(cont))
    if cont:
        a = attrs(cont[0])
        t.check("its SERVER span's parent is the client's span", cont[0].get("parentSpanId") == client_span,
                client_span, cont[0].get("parentSpanId"))
        for k, v in (("http.request.method", "GET"), ("url.path", "/a"), ("http.route", "api"),
                     ("http.response.status_code", "200"), ("client.address", "127.0.0.1"),
                     ("url.scheme", "http"), ("server.address", "127.0.0.1"), ("server.port", str(s.port()))):
            t.check("SERVER attribute %s" % k, a.get(k) == v, v, a.get(k))
        t.check("SERVER span named 'GET api'", cont[0]["name"] == "GET api", "GET api", cont[0]["name"])
        kids = [c for c in client if c["parentSpanId"] == cont[0]["spanId"]]
        seen = [req.header("traceparent") for req in up.requests]
        want = "00-%s-%s-01" % (client_trace, kids[0]["spanId"]) if kids else None
        t.check("the upstream got the attempt span as its parent", want in seen, want, seen)
        ts = [req.header("tracestate") for req in up.requests if req.header("traceparent") == want]
        t.check("tracestate passed through", ts == ["vendor=x"], ["vendor=x"], ts)
        ca = attrs(kids[0]) if kids else {}
        for k, v in (("sluice.upstream", "api"), ("sluice.target", up.address), ("sluice.attempt", "1"),
                     ("http.response.status_code", "200"), ("server.address", "127.0.0.1"),
                     ("server.port", str(up.port))):
            t.check("CLIENT attribute %s" % k, ca.get(k) == v, v, ca.get(k))
    flaky = [sp for sp in server.values() if attrs(sp).get("http.route") == "flaky"]
    retried = [f for f in flaky if len([c for c in client if c["parentSpanId"] == f["spanId"]]) == 2]
    t.check("a retried request has two sibling attempt spans", len(retried) >= 1, ">= 1",
            [len([c for c in client if c["parentSpanId"] == f["spanId"]]) for f in flaky])
    if retried:
        kids = sorted((c for c in client if c["parentSpanId"] == retried[0]["spanId"]),
                      key=lambda c: int(attrs(c)["sluice.attempt"]))
        a0, a1 = attrs(kids[0]), attrs(kids[1])
        t.check("attempt 1: the 502 target, reason first, error", a0.get("sluice.target") == bad.address and
                a0.get("http.response.status_code") == "502" and a0.get("sluice.attempt.reason") == "first" and
                a0.get("error.type") == "502", (bad.address, "502", "first"), a0)
        t.check("attempt 2: the good target, reason retry", a1.get("sluice.target") == good.address and
                a1.get("http.response.status_code") == "200" and a1.get("sluice.attempt.reason") == "retry",
                (good.address, "200", "retry"), a1)
        got = {req.header("traceparent") for u in (bad, good) for req in u.requests}
        for k in kids:
            want = "00-%s-%s-01" % (k["traceId"], k["spanId"])
            t.check("upstream of attempt %s got its span as parent" % attrs(k)["sluice.attempt"], want in got, want,
                    sorted(x for x in got if x))
        t.check("span times are ordered", all(int(k["startTimeUnixNano"]) <= int(k["endTimeUnixNano"]) for k in kids)
                and int(retried[0]["startTimeUnixNano"]) <= int(kids[0]["startTimeUnixNano"]), "ordered", kids)
    s.stop()
    col.stop()
    for u in (up, bad, good):
        u.stop()


def server_spans(col):
    with col.lock:
        return [sp for sp in col.spans if sp["kind"] == 2]


def test_sampling(t):
    col = Collector()
    up = h.MockUpstream(name="api")
    s = start(t, col.port, "0.0", "ratio0", up.address, "127.0.0.1:1", "127.0.0.1:2")
    for _ in range(50):
        h.request(s.port(), "GET", "/")
    parent = "00-%s-%s-01" % ("ab" * 16, "cd" * 8)
    h.request(s.port(), "GET", "/sampled", headers=[("traceparent", parent)])
    h.request(s.port(), "GET", "/unsampled", headers=[("traceparent", parent[:-2] + "00")])
    col.wait(lambda sp: len(sp) >= 2, timeout=4)
    time.sleep(2.5)
    sp = server_spans(col)
    t.check("ratio 0.0: only the sampled parent's request recorded",
            [attrs(x).get("url.path") for x in sp] == ["/sampled"], ["/sampled"], [attrs(x).get("url.path") for x in sp])
    ups = [req.header("traceparent") for req in up.requests]
    t.check("unsampled requests still propagate a traceparent (flags 00)",
            all(v and v.endswith("-00") for v in ups if v and "abab" not in v) and len([v for v in ups if v]) == 52,
            "52, flags 00", ups[:3])
    s.stop()

    col2 = Collector()
    s = start(t, col2.port, "0.5", "ratio05", up.address, "127.0.0.1:1", "127.0.0.1:2")
    n = 2000
    c = h.Client(s.port())
    for _ in range(n):
        c.send(h.build_request("GET", "/half"))
        c.read_response()
    c.close()
    col2.wait(lambda sp: False, timeout=3)
    got = len(server_spans(col2))
    sd = (n * 0.25) ** 0.5
    t.info("ratio 0.5: %d of %d requests recorded (expected 1000 +- %.0f per sd)" % (got, n, sd))
    t.check("ratio 0.5 within 5 sd of 1000", abs(got - n / 2) <= 5 * sd, "1000 +- %.0f" % (5 * sd), got)
    s.stop()
    col.stop()
    col2.stop()
    up.stop()


def test_ipv6_endpoint(t):
    """otlp.endpoint http://[::1]:PORT/v1/traces: a URL's IPv6 host was refused ("the port
    must be 1-65535"); it is accepted and spans reach the collector, with Host: [::1]:PORT."""
    col = Collector(ipv6=True)
    up = h.MockUpstream(name="api")
    conf = (CONF % (col.port, "1.0", up.address, "127.0.0.1:1", "127.0.0.1:2")).replace(
        "http://127.0.0.1:%d/v1/traces" % col.port, "http://[::1]:%d/v1/traces" % col.port)
    s = h.start_sluice(conf, suite=t, name="ipv6")
    h.request(s.port(), "GET", "/v6")
    ok = col.wait(lambda sp: any(attrs(x).get("url.path") == "/v6" for x in sp), timeout=6)
    t.check("spans reach a collector named by an IPv6 literal", ok, True, len(col.spans))
    hosts = [hd.get("Host") for _, hd, _ in col.bodies]
    t.check("... with Host: [::1]:PORT", hosts and hosts[0] == "[::1]:%d" % col.port, "[::1]:%d" % col.port, hosts)
    s.stop()
    col.stop()
    up.stop()


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def timed_run(port, n):
    c = h.Client(port)
    lat = []
    for _ in range(n):
        t0 = time.monotonic()
        c.send(h.build_request("GET", "/x"))
        r = c.read_response()
        lat.append(time.monotonic() - t0)
        assert r.status == 200
    c.close()
    lat.sort()
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000


def scrape(s, name):
    text = s.admin_get("/metrics").body.decode()
    m = re.search(r"^%s (\d+)$" % name, text, re.M)
    return int(m.group(1)) if m else None


def test_collector_down_and_slow(t):
    up = h.MockUpstream(name="api")
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    dead = ls.getsockname()[1]
    ls.close()  # nothing listens there: connections are refused
    base = h.start_sluice(CONF.replace("telemetry:", "unused_telemetry:").split("unused_telemetry:")[0] +
                          CONF.split("sample_ratio: %s")[1] % (up.address, "127.0.0.1:1", "127.0.0.1:2"),
                          suite=t, name="notelemetry")
    timed_run(base.port(), 300)
    b50, b99 = timed_run(base.port(), 2000)
    base.stop()
    for label, col in (("stopped", None), ("answering after 5 s", Collector(delay=5.0))):
        port = col.port if col else dead
        s = start(t, port, "1.0", "down" if col is None else "slow", up.address, "127.0.0.1:1", "127.0.0.1:2")
        timed_run(s.port(), 300)
        rss0 = rss_kib(s.proc.pid)
        p50, p99 = timed_run(s.port(), 6000)
        rss1 = rss_kib(s.proc.pid)
        t.info("collector %s: p50 %.3f ms, p99 %.3f ms (without telemetry: p50 %.3f ms, p99 %.3f ms); "
               "RSS %d -> %d KiB" % (label, p50, p99, b50, b99, rss0, rss1))
        t.check("collector %s: p50 within noise of no telemetry (< 2x + 0.5 ms)" % label, p50 < 2 * b50 + 0.5,
                "< %.3f" % (2 * b50 + 0.5), p50)
        t.check("collector %s: RSS grew < 16 MiB" % label, rss1 - rss0 < 16 * 1024, "< 16384 KiB", rss1 - rss0)
        time.sleep(2.5)
        dropped = scrape(s, "sluice_telemetry_spans_dropped_total")
        t.check("collector %s: drops counted (%s)" % (label, dropped), dropped and dropped > 2048, "> 2048", dropped)
        t.check("collector %s: nothing exported" % label, scrape(s, "sluice_telemetry_spans_exported_total") == 0, 0,
                scrape(s, "sluice_telemetry_spans_exported_total"))
        t0 = time.monotonic()
        s.stop()
        took = time.monotonic() - t0
        t.check("collector %s: shutdown bounded by one export's timeout (%.1f s)" % (label, took), took < 5, "< 5 s", took)
        if col:
            col.stop()
    up.stop()


def test_plugin_spans(t):
    col = Collector()
    up = h.MockUpstream(name="api")
    conf = (CONF % (col.port, "1.0", up.address, "127.0.0.1:1", "127.0.0.2:1")).replace(
        "  sample_ratio: 1.0", "  sample_ratio: 1.0\n  plugin_spans: true")
    s = h.start_sluice(conf, suite=t, name="pspans")
    h.request(s.port(), "GET", "/tp")
    ok = col.wait(lambda sp: any(x["kind"] == 2 for x in sp))
    with col.lock:
        spans = list(col.spans)
    server = [x for x in spans if x["kind"] == 2]
    internal = [x for x in spans if x["kind"] == 1]
    t.check("plugin_spans: an INTERNAL span for the traceparent plugin's rewrite, child of the SERVER span",
            ok and server and len(internal) == 1 and internal[0]["parentSpanId"] == server[0]["spanId"] and
            internal[0]["name"] == "traceparent rewrite" and attrs(internal[0]).get("sluice.plugin") == "traceparent"
            and attrs(internal[0]).get("sluice.phase") == "rewrite", "1 child span", internal)
    s.stop()
    col.stop()
    up.stop()


HEDGE_CONF = """
workers: 1
watch: false
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
telemetry:
  otlp: { endpoint: "http://127.0.0.1:%d/v1/traces", timeout: 2s }
  sample_ratio: 1.0
upstreams:
  - name: raced
    targets: [ { address: %s }, { address: %s } ]
    balancer: round-robin
    retry: { hedge_after: 50ms }
routes:
  - { name: raced, match: { paths: [/] }, upstream: raced }
"""


def test_hedge_spans(t):
    """A hedged request: two sibling CLIENT spans with their own ids — the first attempt
    (the slow target, reason first, error.type cancelled) and the hedge (the fast target,
    reason hedge, 200), and the fast upstream got the hedge's span as its parent."""
    col = Collector()
    slow = h.start_fault_upstream(name="slow", delay_ms=500)
    fast = h.MockUpstream(lambda req: h.Response(200, b"fast"), name="fast")
    s = h.start_sluice(HEDGE_CONF % (col.port, slow.address, fast.address), suite=t, name="hedge")
    try:
        for i in range(4):  # round robin starts on the slow target; its hedge takes the fast one
            r = h.request(s.port(), "GET", "/h%d" % i)
            t.check("hedged request %d answered 200" % i, r.status == 200, 200, r.status)
        col.wait(lambda sp: len([x for x in sp if x["kind"] == 2]) >= 4)
        # the cancelled attempt's span is made when its connection is dropped: allow a flush
        col.wait(lambda sp: len([x for x in sp if x["kind"] == 3]) >= 6)
        with col.lock:
            spans = list(col.spans)
        client = [sp for sp in spans if sp["kind"] == 3]
        raced = [srv for srv in spans if srv["kind"] == 2 and
                 len([c for c in client if c["parentSpanId"] == srv["spanId"]]) == 2]
        t.check("requests that raced: two sibling CLIENT spans each", len(raced) >= 2, ">= 2",
                [len([c for c in client if c["parentSpanId"] == srv["spanId"]]) for srv in spans if srv["kind"] == 2])
        got = [req.header("traceparent") for req in fast.requests]
        for srv in raced:
            kids = sorted((c for c in client if c["parentSpanId"] == srv["spanId"]),
                          key=lambda c: int(attrs(c)["sluice.attempt"]))
            a0, a1 = attrs(kids[0]), attrs(kids[1])
            t.check("their span ids differ", kids[0]["spanId"] != kids[1]["spanId"], "two ids",
                    [k["spanId"] for k in kids])
            t.check("attempt 1: the slow target, reason first, cancelled",
                    (a0.get("sluice.target"), a0.get("sluice.attempt.reason"), a0.get("error.type")) ==
                    (slow.address, "first", "cancelled"), (slow.address, "first", "cancelled"), a0)
            t.check("attempt 2: the fast target, reason hedge, 200",
                    (a1.get("sluice.target"), a1.get("sluice.attempt.reason"), a1.get("http.response.status_code"))
                    == (fast.address, "hedge", "200"), (fast.address, "hedge", "200"), a1)
            want = "00-%s-%s-01" % (kids[1]["traceId"], kids[1]["spanId"])
            t.check("the fast upstream got the hedge's span as its parent", want in got, want, got)
    finally:
        s.stop()
        col.stop()
        slow.stop()
        fast.stop()


t.run(test_spans, test_hedge_spans, test_ipv6_endpoint, test_sampling, test_collector_down_and_slow, test_plugin_spans)
