"""health.active.type: grpc (issue 14): probes call grpc.health.v1.Health/Check over h2c.

A real grpcio server (grpc_health_server.py: the Health service on a generic handler)
flips between SERVING and NOT_SERVING: sluice_target_healthy goes 1 -> 0 -> 1, and the
warning names the status. `service:` is sent in the request (the server saw it); a service
the server does not know (grpc-status NOT_FOUND) and a target that is not a gRPC server (an
HTTP/1.1-only mock) are down. Over TLS (`protocol: h2`, ALPN h2) to a grpcio server with
an openssl-made certificate, the probe passes too. `sluice check` refuses `path:` and `expect_status` on a grpc
probe and `service:` on an http one.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_util as g  # noqa: E402

g.reexec_under_debian_python()

import harness as h  # noqa: E402
from grpc_health_server import NOT_SERVING, SERVING, HealthServer  # noqa: E402

t = h.Suite("grpc_health", budget=90)

CONF = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - { name: whole, targets: [ { address: 127.0.0.1:%(g)d } ],
      health: { active: { type: grpc, interval: 150ms, timeout: 1s, healthy_threshold: 1, unhealthy_threshold: 1 } } }
  - { name: named, targets: [ { address: 127.0.0.1:%(g)d } ],
      health: { active: { type: grpc, service: svc.A, interval: 150ms, healthy_threshold: 1, unhealthy_threshold: 1 } } }
  - { name: unknown, targets: [ { address: 127.0.0.1:%(g)d } ],
      health: { active: { type: grpc, service: nope, interval: 150ms, healthy_threshold: 1, unhealthy_threshold: 1 } } }
  - { name: http1, targets: [ { address: %(h1)s } ],
      health: { active: { type: grpc, interval: 150ms, healthy_threshold: 1, unhealthy_threshold: 1 } } }
routes:
  - { name: r, match: { paths: [/] }, upstream: whole }
"""


def healthy(s):
    _, samples = s.metrics()
    return {lab["upstream"]: float(v) for n, lab, v in samples if n == "sluice_target_healthy"}


def wait_for(s, pred, timeout=6.0):
    end = time.monotonic() + timeout
    st = healthy(s)
    while time.monotonic() < end and not pred(st):
        time.sleep(0.1)
        st = healthy(s)
    return st


def test_probes(t):
    srv = HealthServer({"": SERVING, "svc.A": SERVING})
    h1 = h.MockUpstream(name="h1")
    s = h.start_sluice(CONF % {"g": srv.port, "h1": h1.address}, suite=t, name="grpc-health")
    try:
        st = wait_for(s, lambda st: st.get("unknown") == 0 and st.get("http1") == 0 and len(srv.calls) >= 6)
        t.check("SERVING: the target stays up", st.get("whole") == 1 and st.get("named") == 1, (1, 1), st)
        t.check("a service the server does not know (NOT_FOUND) is down", st.get("unknown") == 0, 0, st)
        t.check("a target that is not a gRPC server (HTTP/1.1 only) is down", st.get("http1") == 0, 0, st)
        t.check("the probes carried their service (\"\", svc.A, nope)",
                {"", "svc.A", "nope"} <= set(srv.calls), ["", "svc.A", "nope"], sorted(set(srv.calls)))

        srv.set("", NOT_SERVING)
        st = wait_for(s, lambda st: st.get("whole") == 0)
        t.check("NOT_SERVING: the target goes down", st.get("whole") == 0, 0, st)
        t.check("svc.A, still SERVING, stays up", st.get("named") == 1, 1, st)
        # the prober marks the target down, then logs why: polled
        h.wait_until(lambda: "NOT_SERVING (2)" in s.log())
        log = s.log()
        t.check("the warning names the status", "NOT_SERVING (2)" in log, "NOT_SERVING (2)",
                [ln for ln in log.splitlines() if "unhealthy" in ln][-2:])

        srv.set("", SERVING)
        st = wait_for(s, lambda st: st.get("whole") == 1)
        t.check("SERVING again: the target comes back up", st.get("whole") == 1, 1, st)

        srv.stop()
        st = wait_for(s, lambda st: st.get("whole") == 0 and st.get("named") == 0)
        t.check("the server gone: both go down", st.get("whole") == 0 and st.get("named") == 0, (0, 0), st)
    finally:
        s.stop()
        h1.stop()
        srv.stop()


def test_tls(t):
    d = h.new_tmpdir("grpc-health-tls")
    _, ca = h.make_ca(d)
    crt, key = h.make_leaf(d, "leaf", "localhost", "DNS:localhost,IP:127.0.0.1")
    import grpc
    from concurrent import futures
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    calls = []

    def check(req, ctx):
        calls.append(req)
        return b"\x08\x01"
    ident = lambda b: b  # noqa: E731
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
        "Check": grpc.unary_unary_rpc_method_handler(check, ident, ident)}),))
    creds = grpc.ssl_server_credentials([(open(key, "rb").read(), open(crt, "rb").read())])
    port = srv.add_secure_port("127.0.0.1:0", creds)
    srv.start()
    conf = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - { name: tls, protocol: h2, targets: [ { address: 127.0.0.1:%d, tls: { ca: %s } } ],
      health: { active: { type: grpc, interval: 150ms, healthy_threshold: 1, unhealthy_threshold: 1 } } }
routes:
  - { name: r, match: { paths: [/] }, upstream: tls }
""" % (port, ca)
    s = h.start_sluice(conf, suite=t, name="grpc-health-tls")
    try:
        end = time.monotonic() + 5
        while time.monotonic() < end and len(calls) < 2:
            time.sleep(0.1)
        st = healthy(s)
        t.check("over TLS (ALPN h2): the probes reach the server and the target is up",
                len(calls) >= 2 and st.get("tls") == 1, (">= 2 calls", 1), (len(calls), st))
        srv.stop(0).wait(5)
        st = wait_for(s, lambda st: st.get("tls") == 0)
        t.check("over TLS: the server gone, the target goes down", st.get("tls") == 0, 0, st)
    finally:
        s.stop()
        srv.stop(0)


def test_check(t):
    bad = [
        ("path on a grpc probe", "{ type: grpc, path: /x }", "grpc probe has no path"),
        ("expect_status on a grpc probe", "{ type: grpc, expect_status: 200 }", "expect_status is for an http probe"),
        ("service on an http probe", "{ type: http, service: a }", "service is for a grpc probe"),
        ("a grpc probe of a TLS target without protocol h2", "{ type: grpc }",
         "a grpc probe of a TLS target needs protocol: h2"),
    ]
    for name, active, words in bad:
        target = "{ address: 127.0.0.1:1%s }" % (", tls: { verify: false }" if "TLS" in name else "")
        conf = ("listeners: [ { name: web, listen: 127.0.0.1:0 } ]\n"
                "upstreams: [ { name: u, targets: [ %s ], health: { active: %s } } ]\n"
                "routes: [ { name: r, match: { paths: [/] }, upstream: u } ]\n" % (target, active))
        d = h.new_tmpdir("grpc-health-check")
        path = os.path.join(d, "c.yaml")
        with open(path, "w") as f:
            f.write(conf)
        cp = h.run_cli(["check", "-c", path])
        out = (cp.stdout or "") + (cp.stderr or "")
        t.check("sluice check refuses %s" % name, cp.returncode == 1 and words in out, words, (cp.returncode, out[-300:]))


t.run(test_probes, test_tls, test_check)
