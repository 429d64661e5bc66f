"""A reload does not break a keep-alive promise already made (found by scripts/soak).

A keep-alive client is reading a response whose head (no Connection: close) went out
before a reload began; the old worker drains, and the connection is marked closing. The
client, told it may reuse the connection, sends its next request right after the body
ends. That request must be answered (with Connection: close), not met with EOF or a
reset: the same grace an idle keep-alive connection gets at a reload.

A request whose head had only partly arrived when the reload began is answered too (with
Connection: close) once the rest of the head comes: it was dropped with an EOF.
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("reload_keepalive", budget=90)
S = {}


def handler(req):
    if req.path == "/slow":
        # the head goes out at once, the body over ~0.6 s: the reload lands in between
        return h.Response(200, stream=[b"a" * 100] * 6, length=600, chunk_delay=0.1)
    return h.Response(200, b"fast")


def setup(t):
    S["up"] = h.MockUpstream(handler)
    S["conf"] = f"""
workers: 1
watch: false
admin: {{ listen: 127.0.0.1:0 }}
listeners: [ {{ name: web, listen: 127.0.0.1:0 }} ]
upstreams: [ {{ name: up, targets: [ {{ address: {S["up"].address} }} ] }} ]
routes: [ {{ name: all, match: {{ paths: [/] }}, upstream: up }} ]
"""
    S["sl"] = h.start_sluice(S["conf"], suite=t)


def test_promise_kept_across_reload(t):
    sl = S["sl"]
    ok = 0
    for i in range(5):
        c = h.Client(sl.port(), timeout=10)
        c.send(h.build_request("GET", "/slow"))
        reloaded = threading.Event()

        def reload_soon():
            time.sleep(0.25)
            st, _ = sl.reload()
            reloaded.set()

        th = threading.Thread(target=reload_soon)
        th.start()
        r = c.read_response()
        th.join()
        t.check("round %d: the slow response is whole" % i, r.status == 200 and len(r.body) == 600,
                (200, 600), (r.status, len(r.body)))
        promised = (r.header("Connection") or "").lower() != "close"
        t.check("round %d: its head (sent before the reload) promised keep-alive" % i, promised, True,
                r.header("Connection"))
        try:
            c.send(h.build_request("GET", "/fast"))
            r2 = c.read_response()
            answered = r2.status == 200 and r2.body == b"fast"
            closing = (r2.header("Connection") or "").lower() == "close"
        except Exception as e:  # EOF or reset: the promise was broken
            answered, closing = False, repr(e)
        t.check("round %d: the next request on that connection is answered" % i, answered, True, answered)
        t.check("round %d: ... with Connection: close" % i, closing is True, True, closing)
        ok += answered
        c.close()
    t.check("all five promises kept", ok == 5, 5, ok)


def accepted(sl):
    """The test's connection was accepted (the reload must find it open)."""
    return sum(w["connections_active"] for w in sl.status()["workers"]) >= 1


def test_head_begun_before_reload(t):
    sl = S["sl"]
    c = h.Client(sl.port(), timeout=10)
    c.send(b"GET /fast HTTP/1.1\r\nHost: x\r\n")  # half a head
    h.wait_until(lambda: accepted(sl))
    st, _ = sl.reload()
    t.check("the reload applied", st == 200, 200, st)
    try:
        c.send(b"X-Rest: of the head\r\n\r\n")
        r = c.read_response()
        got = (r.status, r.body, (r.header("Connection") or "").lower())
    except Exception as e:  # EOF or reset: the request was dropped
        got = repr(e)
    t.check("a head begun before the reload is answered once it is whole, with Connection: close",
            got == (200, b"fast", "close"), (200, b"fast", "close"), got)
    c.close()


def test_reload_reports_upstream_settings(t):
    """A reload that changes only an upstream's balancing, retries, breaker or health
    reports that upstream as changed (it once compared addresses and timeouts only)."""
    sl = S["sl"]
    for what, extra in (("balancer", "    balancer: least-conn\n"),
                        ("retry", "    balancer: least-conn\n    retry: { attempts: 3 }\n"),
                        ("breaker", "    balancer: least-conn\n    retry: { attempts: 3 }\n    circuit_breaker: {}\n")):
        conf = S["conf"].replace("upstreams: [ {{ name: up, targets: [ {{ address: {0} }} ] }} ]".format(S["up"].address),
                                 "upstreams:\n  - name: up\n%s    targets: [ { address: %s } ]" % (extra, S["up"].address))
        with open(sl.config_path, "w") as f:
            f.write(conf)
        st, body = sl.reload()
        t.check("a reload changing only the %s is accepted" % what, st == 200, 200, (st, body))
        t.check("... and reports upstream:up changed", "upstream:up" in (body or {}).get("changed", []),
                "upstream:up in changed", body)


t.run(setup, test_promise_kept_across_reload, test_head_begun_before_reload,
      test_reload_reports_upstream_settings)
