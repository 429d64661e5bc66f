"""rate-limit, against the real binary and a real redis-server started here.

  1. store local, 2 workers: 1,000 requests at rate 100 per 1s, burst 0, spread over
     ~1 s, admit 100 +- 2; the rest get 429 with Retry-After and the IETF RateLimit /
     RateLimit-Policy fields; admitted answers carry RateLimit too; the key: a header
     key counts apart per value, trusted_proxies take the client from X-Forwarded-For;
  2. store redis: two gateway processes sharing one redis-server admit a combined total
     within +-5% of the limit (a bucket of 100 that refills at 100 a minute); redis-server stopped mid-run: requests pass (fail open)
     and sluice_ratelimit_total{result="failopen"} counts them; started again: limiting
     resumes without a restart.
"""

import os
import re
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from ratelimit_load import Redis, bucket_allows, fire, free_port, ok_handler  # noqa: E402

t = h.Suite("rate_limit", budget=90)


def gateway(up, workers):
    """The config's start: workers, admin, one listener and the upstream `up`."""
    return ("workers: %d\nadmin: { listen: 127.0.0.1:0 }\nlisteners: [ { name: web, listen: 127.0.0.1:0 } ]\n"
            "upstreams: [ { name: up, targets: [ { address: %s } ] } ]\n" % (workers, up.address))


def test_local(t):
    up = h.MockUpstream(ok_handler, name="up")
    conf = gateway(up, 2) + """\
routes:
  - { name: strict, match: { paths: [/strict] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 100, per: 1s, burst: 0 } } ] }
  - { name: byheader, match: { paths: [/byheader] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 2, per: 1m, burst: 0, key: "header:X-Api-User" } } ] }
  - { name: proxied, match: { paths: [/proxied] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 1, per: 1m, trusted_proxies: [127.0.0.0/8] } } ] }
  - { name: half, match: { paths: [/half] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 0.5, per: 1s } } ] }
  - { name: fast, match: { paths: [/fast] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 10, per: 500ms, burst: 2 } } ] }
  - { name: two, match: { paths: [/two] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 100, per: 1s, burst: 4, policy: per-second } },
                 { name: rate-limit, config: { rate: 2, per: 1m, burst: 1, policy: per-minute } } ] }
"""
    s = h.start_sluice(conf, suite=t, name="rl-local")
    try:
        p = s.port()
        span, sends = [], []
        res = fire(p, 1000, 1.0, "/strict", span=span, times=sends)
        ok = [x for x in res if x[0] == 200]
        limited = [x for x in res if x[0] == 429]
        # The bucket starts with one token and gains 100 a second over the time the
        # requests actually took: at most 1 + 100 * span. A loaded machine stalls the
        # senders, and a burst-0 bucket loses the tokens a stall brings that it cannot
        # hold: what a bucket allows at the sends' times is the lower mark. Unstalled both
        # are ~101; an unlimited route admits all 1,000, a bucket per worker ~200.
        most, allows = 1 + 100 * span[0], bucket_allows(sends, 100)
        t.info("local, 2 workers: %d of %d admitted at 100/s over %.3f s (a bucket allows %d at the "
               "sends' times, at most %.1f)" % (len(ok), len(res), span[0], allows, most))
        t.check("1,000 requests over ~1 s at 100/s, burst 0: what a bucket allows at the sends' times "
                "- 5 .. 1 + 100/s over their span + 4 (100 +- 4 unstalled)",
                allows - 5 <= len(ok) <= most + 4 and len(ok) + len(limited) == 1000,
                "%d .. %.1f" % (allows - 5, most + 4), (len(ok), len(limited)))
        bad_ra = [x for x in limited if not (x[1] and x[1].isdigit() and int(x[1]) >= 1)]
        t.check("every 429 has Retry-After (whole seconds >= 1)", not bad_ra and limited, "Retry-After: N",
                bad_ra[:3])
        pol = {x[3] for x in limited}
        t.check("429s carry RateLimit-Policy \"default\";q=100;w=1", pol == {'"default";q=100;w=1'},
                {'"default";q=100;w=1'}, pol)
        rl = [x[2] for x in limited]
        t.check("429s carry RateLimit \"default\";r=0;t=N", all(re.fullmatch(r'"default";r=0;t=\d+', v or "") for v in rl),
                '"default";r=0;t=N', rl[:3])
        t.check("admitted answers carry RateLimit too", all(re.fullmatch(r'"default";r=\d+;t=\d+', x[2] or "") for x in ok),
                '"default";r=N;t=N', [x[2] for x in ok[:3]])
        _, samples = s.metrics()
        got = {lab["result"]: float(v) for n, lab, v in samples
               if n == "sluice_ratelimit_total" and lab.get("route") == "strict"}
        t.check("sluice_ratelimit_total counts allowed and limited",
                got.get("allowed") == len(ok) and got.get("limited") == len(limited), (len(ok), len(limited)), got)

        a = [h.request(p, "GET", "/byheader", headers=[("X-Api-User", "alice")]).status for _ in range(3)]
        b = [h.request(p, "GET", "/byheader", headers=[("X-Api-User", "bob")]).status for _ in range(3)]
        t.check("key header:X-Api-User: each value has its own bucket (burst 0 -> 1 at once)",
                (a, b) == ([200, 429, 429], [200, 429, 429]), ([200, 429, 429], [200, 429, 429]), (a, b))
        x1 = h.request(p, "GET", "/proxied", headers=[("X-Forwarded-For", "203.0.113.7")]).status
        x2 = h.request(p, "GET", "/proxied", headers=[("X-Forwarded-For", "203.0.113.8")]).status
        x3 = h.request(p, "GET", "/proxied", headers=[("X-Forwarded-For", "198.51.100.1, 203.0.113.7")]).status
        t.check("trusted_proxies: the client is the X-Forwarded-For hop before the proxy (per-client buckets)",
                (x1, x2, x3) == (200, 200, 429), (200, 200, 429), (x1, x2, x3))
        # A proxy that adds its own X-Forwarded-For field after the client's (HAProxy's
        # `option forwardfor`) sends two fields: the client's claim first, the address the
        # proxy saw last. The key is read over both, so a new claim each time is no new bucket.
        x4 = [h.request(p, "GET", "/proxied", headers=[("X-Forwarded-For", "10.9.9.%d" % i),
                                                       ("X-Forwarded-For", "198.51.100.2")]).status
              for i in range(3)]
        t.check("trusted_proxies: X-Forwarded-For over every field (a proxy's own field last), "
                "a client's forged first field changes nothing", x4 == [200, 429, 429], [200, 429, 429], x4)
        # Two limits on one route (Kong's `second` and `minute`), each with its own policy
        # name, count apart: they shared one bucket, and the per-minute take emptied the
        # per-second limit for 30 s (the second request was refused by "per-second")
        two = [h.request(p, "GET", "/two") for _ in range(3)]
        t.check("two rate-limits on one route, distinct policies: separate buckets (the per-minute one refuses "
                "the third)", [r.status for r in two] == [200, 200, 429], [200, 200, 429], [r.status for r in two])
        # The headers name both policies (a list, as the draft's fields are); the 429 of the
        # per-minute limit keeps its own: the other plugin's header_filter wrote over it
        pol = [r.header("RateLimit-Policy") for r in two]
        want = ['"per-second";q=104;w=1, "per-minute";q=3;w=60'] * 3
        t.check("RateLimit-Policy lists both policies, on admitted answers and on the 429", pol == want, want, pol)
        rl = [r.header("RateLimit") or "" for r in two]
        t.check("RateLimit lists both too, the per-minute one at r=0 on the 429",
                re.fullmatch(r'"per-second";r=\d+;t=\d+, "per-minute";r=0;t=\d+', rl[2]) is not None
                and all(x.count(", ") == 1 for x in rl), '"per-second";r=N;t=N, "per-minute";r=0;t=N', rl)
        # A reload keeps the counts: the key's state lives in the core, not in a generation
        st, body = s.reload()
        again = h.request(p, "GET", "/byheader", headers=[("X-Api-User", "alice")]).status
        t.check("after a reload, a drained key is still limited (the counts are kept)",
                st == 200 and again == 429, (200, 429), (st, again, body))
        # The policy's window is whole seconds: a rate under one a window, or a `per` under
        # a second, is said as the quota of a whole-second window that holds at least one
        pol = {path: h.request(p, "GET", path).header("RateLimit-Policy") for path in ("/half", "/fast")}
        want = {"/half": '"default";q=1;w=2', "/fast": '"default";q=22;w=1'}
        t.check("RateLimit-Policy of 0.5 a second: 1 per 2 s; of 10 per 500 ms, burst 2: 22 per 1 s",
                pol == want, want, pol)
    finally:
        s.stop()
        up.stop()


def test_redis(t):
    if not shutil.which("redis-server"):
        t.check("redis-server is installed (scripts/install-deps)", False, "redis-server", None)
        return
    up = h.MockUpstream(ok_handler, name="up")
    rport = free_port()
    redis = Redis(rport)
    redis.start()
    conf = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
redis: { address: 127.0.0.1:%(rport)d, timeout: 100ms }
upstreams: [ { name: up, targets: [ { address: %(up)s } ] } ]
routes:
  - { name: shared, match: { paths: [/shared] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 100, per: 1m, burst: 99, store: redis, key: route } } ] }
""" % {"rport": rport, "up": up.address}
    g1 = h.start_sluice(conf, suite=t, name="rl-redis-1")
    g2 = h.start_sluice(conf, suite=t, name="rl-redis-2")
    try:
        both = []
        ths = [threading.Thread(target=lambda g=g: both.extend(fire(g.port(), 200, 1.0, "/shared", conns=5)))
               for g in (g1, g2)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(60)
        admitted = sum(1 for x in both if x[0] == 200)
        t.info("redis, two gateways: %d of %d admitted, limit 100 per minute" % (admitted, len(both)))
        t.check("two gateways sharing redis admit 100 +- 5% combined", 95 <= admitted <= 105, "95..105", admitted)
        limited = [x for x in both if x[0] == 429]
        t.check("redis store: 429s carry Retry-After and RateLimit",
                limited and all(x[1] and x[2] and x[2].startswith('"default";r=0;t=') for x in limited),
                "Retry-After + RateLimit", limited[:2])

        redis.stop()
        res = fire(g1.port(), 50, 0.5, "/shared", conns=5)
        t.check("redis down: requests pass (fail open)", all(x[0] == 200 for x in res), "all 200",
                {x[0] for x in res})
        _, samples = g1.metrics()
        fo = [float(v) for n, lab, v in samples
              if n == "sluice_ratelimit_total" and lab.get("result") == "failopen" and lab.get("route") == "shared"]
        t.check("sluice_ratelimit_total{result=failopen} counts them", fo and fo[0] >= 50, ">= 50", fo)
        t.check("the gateway logged that redis is unavailable", "redis unavailable" in g1.log(), "a log line",
                g1.log()[-300:])

        redis.start()
        deadline = time.monotonic() + 5
        statuses = []
        while time.monotonic() < deadline:
            statuses = [h.request(g1.port(), "GET", "/shared").status for _ in range(120)]
            if 429 in statuses:
                break
            time.sleep(0.3)
        t.check("redis back: limiting resumes without a restart (429s again)", 429 in statuses,
                "some 429", {x: statuses.count(x) for x in set(statuses)})
        t.check("both gateways still running", g1.alive() and g2.alive(), True, (g1.alive(), g2.alive()))
    finally:
        g1.stop()
        g2.stop()
        redis.stop()
        up.stop()


def test_global_and_route(t):
    """A global rate-limit and a route's own, both with the default policy: each counts in
    its own bucket, so the stricter one decides (they shared the route's bucket, and the
    route's 2 a minute refused even the first request after the global take)."""
    up = h.MockUpstream(ok_handler, name="up")
    conf = gateway(up, 1) + """\
plugins: [ { name: rate-limit, config: { rate: 100, per: 1m, burst: 99 } } ]
routes:
  - { name: strict, match: { paths: [/strict] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 2, per: 1m, burst: 1 } } ] }
  - { name: free, match: { paths: [/free] }, upstream: up }
"""
    s = h.start_sluice(conf, suite=t, name="rl-global")
    try:
        codes = [h.request(s.port(), "GET", "/strict").status for _ in range(4)]
        t.check("global 100/min (burst 99) + route 2/min (burst 1): the route's 2 pass, then 429", codes == [200, 200, 429, 429],
                [200, 200, 429, 429], codes)
        codes = [h.request(s.port(), "GET", "/free").status for _ in range(5)]
        t.check("a route with only the global limit is under it", codes == [200] * 5, [200] * 5, codes)
        r = h.request(s.port(), "GET", "/free")
        t.check("the global policy is in the headers", r.header("RateLimit-Policy") == '"default";q=199;w=60',
                '"default";q=199;w=60', r.header("RateLimit-Policy"))
    finally:
        s.stop()
        up.stop()


t.run(test_local, test_redis, test_global_and_route)
