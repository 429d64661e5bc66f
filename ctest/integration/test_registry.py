"""The TTL service registry: backends register themselves on the admin API.

- an upstream with `registry: { enabled: true }` and `targets: []` answers 503 until a
  backend registers;
- two backends register (PUT /upstreams/NAME/targets) and traffic spreads over both;
- one stops heartbeating: it leaves the pool within its ttl, with no failed request
  (requests run all along);
- a reload keeps the registered targets;
- malformed registrations get 400 with a reason and change nothing;
- DELETE removes a target; GET lists static and registered ones with their expiry;
- the admin token protects the endpoints when one is set;
- active health probes follow registered targets (an unhealthy one shows in /status and
  gets no traffic);
- a reload drops the registrations its generation cannot hold, and their renewals then
  say so: an address the reload made a static target (not listed twice), and those
  beyond a lowered registry.max_targets (not "registered" while getting no traffic).
"""

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("registry", budget=90)
TOKEN = "registry-test-token"
AUTH = [("Host", "127.0.0.1"), ("Authorization", "Bearer " + TOKEN)]


def admin(s, method, path, body=None, auth=True):
    data = json.dumps(body).encode() if isinstance(body, dict) else (body.encode() if body else None)
    hdrs = list(AUTH if auth else [("Host", "127.0.0.1")])
    if data is not None:
        hdrs.append(("Content-Type", "application/json"))
    r = h.request(s.admin_port, method, path, headers=hdrs, body=data, timeout=5)
    try:
        return r.status, json.loads(r.body)
    except ValueError:
        return r.status, r.body


def register(s, backend, ttl="2s", weight=1):
    return admin(s, "PUT", "/upstreams/svc/targets", {"address": backend.address, "weight": weight, "ttl": ttl})


def get(s):
    try:
        r = h.request(s.port(), "GET", "/", timeout=5)
        return r.status
    except Exception:  # noqa: BLE001
        return 0


CFG = ("admin: { listen: 127.0.0.1:0, token_env: SLUICE_TEST_TOKEN }\n"
       "listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
       "upstreams:\n"
       "  - name: svc\n    registry: { enabled: true, max_ttl: 10s }\n    targets: []\n"
       "  - name: probed\n    registry: { enabled: true }\n    targets: []\n"
       "    health: { active: { interval: 200ms, timeout: 200ms, unhealthy_threshold: 1, path: /health } }\n"
       "routes:\n  - { name: all, match: { paths: [/] }, upstream: svc }\n"
       "  - { name: probed, match: { paths: [/probed] }, upstream: probed }\n")


def test_registry(t):
    a, b = h.MockUpstream(name="a"), h.MockUpstream(name="b")
    env = dict(os.environ, SLUICE_TEST_TOKEN=TOKEN)
    s = h.start_sluice(CFG, workers=2, suite=t, env=env)
    t.check("no backend registered: 503", get(s) == 503, 503, get(s))
    st, _ = admin(s, "PUT", "/upstreams/svc/targets", {"address": a.address, "ttl": "2s"}, auth=False)
    t.check("the admin token applies to registrations", st == 401, 401, st)

    st1, r1 = register(s, a)
    st2, r2 = register(s, b)
    t.check("two backends register", st1 == 200 and st2 == 200 and r1.get("registered") is True,
            200, (st1, r1, st2, r2))
    st, lst = admin(s, "GET", "/upstreams/svc/targets")
    addrs = sorted(x["address"] for x in lst.get("targets", []))
    t.check("GET lists both, with their expiry",
            st == 200 and addrs == sorted([a.address, b.address])
            and all(0 < x["expires_in_ms"] <= 2000 and x["source"] == "registry" for x in lst["targets"]),
            "both, expires_in_ms <= 2000", lst)

    # heartbeats: every 0.5 s, for both until b stops
    beating = {"a": True, "b": True}
    renewed = {}  # when each backend's last registration was answered
    stop = threading.Event()

    def heartbeat():
        while not stop.is_set():
            for name, backend in (("a", a), ("b", b)):
                if beating[name]:
                    register(s, backend)
                    renewed[name] = time.monotonic()
            stop.wait(0.5)

    hb = threading.Thread(target=heartbeat)
    hb.start()
    ma, mb = a.mark(), b.mark()
    codes = [get(s) for _ in range(40)]
    na, nb = len(a.since(ma)), len(b.since(mb))
    t.check("traffic spreads over both registered backends", all(c == 200 for c in codes) and na >= 10 and nb >= 10,
            ">= 10 each, all 200", (na, nb, codes.count(200)))

    # b stops heartbeating: it leaves within its ttl (2 s), no request fails
    results, load_stop = [], threading.Event()

    def load():
        while not load_stop.is_set():
            results.append(get(s))

    lt = threading.Thread(target=load)
    lt.start()
    def listed():
        return [x["address"] for x in admin(s, "GET", "/upstreams/svc/targets")[1].get("targets", [])]

    beating["b"] = False
    stopped_at = time.monotonic()
    # b's last renewal may be one the heartbeat had begun before it stopped (its time is
    # known once it was answered, well within this second): b leaves a ttl (2 s) after that
    # renewal, on the 200 ms sweep. Polled, not a fixed 2.5 s from stopped_at.
    time.sleep(1.0)
    gone = h.wait_until(lambda: b.address not in listed(), renewed.get("b", stopped_at) + 4.0 - time.monotonic())
    left = time.monotonic() - renewed.get("b", stopped_at)
    t.check("b is gone from the list within its ttl (2 s) + 2 s of its last renewal", gone, "gone", listed())
    time.sleep(0.3)  # a pick made just before it left reaches b
    mb = b.mark()
    time.sleep(1.0)
    late_b = len(b.since(mb))
    load_stop.set()
    lt.join()
    t.check("a backend that stops heartbeating gets no request after its ttl", late_b == 0, 0, late_b)
    t.check("no failed request while it left", results and all(c == 200 for c in results), "all 200",
            (len(results), [c for c in results if c != 200][:5]))
    st, lst = admin(s, "GET", "/upstreams/svc/targets")
    t.check("GET no longer lists it", [x["address"] for x in lst["targets"]] == [a.address], [a.address], lst)
    r = h.request(s.admin_port, "GET", "/metrics", headers=AUTH, timeout=5)
    m = h.parse_prometheus(r.body.decode())
    exp = h.metric_values(m, "sluice_registry_expired_total")
    t.check("sluice_registry_expired_total counts it", exp and exp[0] >= 1, ">= 1", exp)
    t.info("b left %.1f s after its last renewal" % left)

    # a reload keeps the registered target
    st, res = admin(s, "POST", "/reload", "")
    t.check("reload applied", st == 200, 200, (st, res))
    st, lst = admin(s, "GET", "/upstreams/svc/targets")
    t.check("a reload keeps the registered target", [x["address"] for x in lst["targets"]] == [a.address],
            [a.address], lst)
    t.check("and it still serves after the reload", get(s) == 200, 200, get(s))

    # malformed registrations: 400 with a reason, nothing changes
    bad = [
        ("not JSON", "address=1"),
        ("no ttl", {"address": b.address}),
        ("ttl above max_ttl", {"address": b.address, "ttl": "11s"}),
        ("a name, not an IP", {"address": "backend.example:80", "ttl": "2s"}),
        ("no port", {"address": "127.0.0.1", "ttl": "2s"}),
        ("weight 0", {"address": b.address, "ttl": "2s", "weight": 0}),
        ("a weight with round-robin", {"address": b.address, "ttl": "2s", "weight": 5}),
        ("an unknown key", {"address": b.address, "ttl": "2s", "color": "red"}),
        ("a bad duration", {"address": b.address, "ttl": "soon"}),
        # JSON, not YAML's flow style: these registered b (the first object, the rest ignored)
        ("text after the object", '{"address": "%s", "ttl": "2s"} x' % b.address),
        ("a second object",
         '{"address": "%s", "ttl": "2s"}{"address": "%s"}' % (b.address, a.address)),
        ("a second YAML document", '{"address": "%s", "ttl": "2s"}\n---\n{}' % b.address),
        ("single quotes", "{'address': '%s', 'ttl': '2s'}" % b.address),
        ("a bare word", '{"address": "%s", "ttl": 2s}' % b.address),
    ]
    for what, body in bad:
        st, res = admin(s, "PUT", "/upstreams/svc/targets", body)
        t.check("malformed (%s): 400 with a reason" % what,
                st == 400 and isinstance(res, dict) and len(res.get("error", "")) > 5, 400, (st, res))
    st, lst = admin(s, "GET", "/upstreams/svc/targets")
    t.check("malformed registrations changed nothing", [x["address"] for x in lst["targets"]] == [a.address],
            [a.address], lst)
    st, res = admin(s, "PUT", "/upstreams/nope/targets", {"address": b.address, "ttl": "2s"})
    t.check("an unknown upstream: 404", st == 404, 404, (st, res))

    # DELETE: gone at once
    stop.set()
    hb.join()
    st, _ = admin(s, "DELETE", "/upstreams/svc/targets/" + a.address)
    t.check("DELETE removes a registered target", st == 200, 200, st)
    t.check("and the upstream answers 503 again", get(s) == 503, 503, get(s))
    st, _ = admin(s, "DELETE", "/upstreams/svc/targets/" + a.address)
    t.check("DELETE of an unknown target: 404", st == 404, 404, st)
    # an address percent-encoded in the path, as a conforming client sends "[::1]:PORT"
    # ('[' and ']' may not stand in a path): it was looked up undecoded, a 404
    for addr, path in (("[::1]:9", "%5B::1%5D:9"), ("127.0.0.1:9", "127.0.0.1%3A9")):
        st, res = admin(s, "PUT", "/upstreams/svc/targets", {"address": addr, "ttl": "10s"})
        t.check("register %s" % addr, st == 200, 200, (st, res))
        st, res = admin(s, "DELETE", "/upstreams/svc/targets/" + path)
        t.check("DELETE .../targets/%s removes %s" % (path, addr), st == 200, 200, (st, res))
    st, _ = admin(s, "DELETE", "/upstreams/svc/targets/127.0.0.1:9%00x")
    t.check("an encoded NUL in the address: 404, nothing removed", st == 404, 404, st)

    # active probes follow a registered target: /health answers 503 on `sick`
    sick = h.MockUpstream(name="sick", handler=lambda req: h.Response(503 if req.path == "/health" else 200, b"x"))
    well = h.MockUpstream(name="well", handler=lambda req: h.Response(200, b"well"))
    for m_ in (sick, well):
        st, res = admin(s, "PUT", "/upstreams/probed/targets", {"address": m_.address, "ttl": "10s"})
        t.check("register %s on the probed upstream" % m_.name, st == 200, 200, (st, res))
    deadline, health = time.monotonic() + 3, {}
    while time.monotonic() < deadline:
        st, status = admin(s, "GET", "/status")
        ups = [u for u in status["upstreams"] if u["name"] == "probed"][0]
        health = {x["address"]: x["health"] for x in ups["targets"]}
        if health.get(sick.address) == "unhealthy":
            break
        time.sleep(0.1)
    t.check("active probes mark a registered target unhealthy",
            health.get(sick.address) == "unhealthy" and health.get(well.address) == "healthy",
            "sick unhealthy, well healthy", health)
    codes = [h.request(s.port(), "GET", "/probed", timeout=5).status for _ in range(10)]
    to_sick = [r for r in list(sick.requests) if r.path == "/probed"]
    t.check("and it gets no traffic", codes == [200] * 10 and not to_sick, "10 x 200, 0 to sick",
            (codes, len(to_sick)))

    t.check("exit 0 on SIGTERM", s.stop() == 0, 0, None)
    for m_ in (a, b, sick, well):
        m_.stop()


RELOAD_CFG = ("workers: 1\nwatch: false\nadmin: { listen: 127.0.0.1:0 }\n"
              "listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
              "upstreams:\n  - name: svc\n    registry: { enabled: true, max_ttl: 30s, max_targets: %d }\n"
              "    targets: [%s]\n"
              "routes:\n  - { name: all, match: { paths: [/] }, upstream: svc }\n")


def test_reload_drops_what_it_cannot_hold(t):
    ms = [h.MockUpstream(name="m%d" % i) for i in range(3)]
    s = h.start_sluice(RELOAD_CFG % (3, ""), suite=t)

    def put(m):
        r = h.request(s.admin_port, "PUT", "/upstreams/svc/targets", headers=[("Host", "127.0.0.1")],
                      body=json.dumps({"address": m.address, "ttl": "30s"}).encode(), timeout=5)
        return r.status

    def listed():
        st = s.status()
        up = [u for u in st["upstreams"] if u["name"] == "svc"][0]
        served = sorted(x["address"] for x in up["targets"])
        r = s.admin_get("/upstreams/svc/targets")
        return served, sorted(x["address"] for x in json.loads(r.body)["targets"])

    t.check("three register", [put(m) for m in ms] == [200] * 3, [200] * 3, None)
    # m0 becomes a static target: it is listed once, and its renewal is refused
    with open(s.config_path, "w") as f:
        f.write(RELOAD_CFG % (3, "{ address: %s }" % ms[0].address))
    st, res = s.reload(new_content=False)
    t.check("reload applied", st == 200, 200, (st, res))
    served, got = listed()
    want = sorted(m.address for m in ms)
    t.check("an address made static by a reload is one target, not two", served == want and got == want,
            want, (served, got))
    t.check("its renewal is refused (400: a configured target)", put(ms[0]) == 400, 400, None)

    # max_targets lowered from 3 to 1 (m0 static again removed): one registration is kept
    for m in ms:
        put(m)
    with open(s.config_path, "w") as f:
        f.write(RELOAD_CFG % (1, ""))
    st, res = s.reload(new_content=False)
    t.check("reload applied", st == 200, 200, (st, res))
    served, got = listed()
    t.check("one registration kept with max_targets 1, listed as served", len(served) == 1 and got == served,
            "1, the same", (served, got))
    codes = [put(m) for m in ms]
    t.check("the others' renewals get 503 (full), not 200", sorted(codes) == [200, 503, 503],
            [200, 503, 503], codes)
    t.check("exit 0 on SIGTERM", s.stop() == 0, 0, None)
    for m in ms:
        m.stop()


t.run(test_registry, test_reload_drops_what_it_cannot_hold)
