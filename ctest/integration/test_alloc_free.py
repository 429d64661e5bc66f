"""The proxy path allocates nothing per request in steady state (the design, HTTP/1.1 path).

sluice runs with an LD_PRELOAD shim (ctest/alloc_shim.c) that counts every
malloc/calloc/realloc in the process and writes the count to a file on SIGUSR2.
After a warm-up over a few keep-alive connections, N more proxied requests
(small GETs and small sized POSTs, as a keep-alive client sends them) must add
zero allocations. Nothing else talks to the process meanwhile (no admin calls).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("alloc_free", budget=55)
SHIM = os.environ.get("SL_ALLOC_SHIM") or os.path.join(h.SRC, "build", "ctest", "libsl_alloc_shim.so")
N_WARM, N_MEASURE, CONNS = 300, 2000, 4


def drive(clients, n):
    ok = 0
    for i in range(n):
        c = clients[i % len(clients)]
        if i % 2:
            c.send(h.build_request("POST", "/p/%d" % (i % 7), body=b"x" * 100))
        else:
            c.send(h.build_request("GET", "/g/%d?q=%d" % (i % 5, i % 3), headers=[("X-Test", "1")]))
        r = c.read_response()
        ok += r.status == 200
    return ok


def test_steady_state_allocates_nothing(t):
    t.check("shim library built", os.path.exists(SHIM), SHIM, os.path.exists(SHIM))
    up = h.MockUpstream(handler=lambda req: h.Response(200, b"hello"))
    count_file = os.path.join(h.new_tmpdir("alloc"), "count")
    env = dict(os.environ, LD_PRELOAD=SHIM, SL_ALLOC_COUNT_FILE=count_file)
    # watch: false keeps the main thread's file watcher (which hashes files when the ready
    # file appears beside the config) out of the count; it never runs per request.
    s = h.start_sluice(
        "workers: 1\nwatch: false\nadmin: { listen: 127.0.0.1:0 }\n"
        "listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
        "upstreams:\n  - name: up\n    targets: [ { address: %s } ]\n"
        "    keepalive: { max_idle: 64, idle_timeout: 60s }\n"
        "routes:\n  - { name: all, match: { paths: [/] }, upstream: up }\n" % up.address,
        suite=t, env=env)
    clients = [h.Client(s.port()) for _ in range(CONNS)]
    warm = drive(clients, N_WARM)
    t.check("warm-up requests all 200", warm == N_WARM, N_WARM, warm)
    before = h.read_alloc_count(s, count_file)
    got = drive(clients, N_MEASURE)
    after = h.read_alloc_count(s, count_file)
    t.check("measured requests all 200", got == N_MEASURE, N_MEASURE, got)
    t.info("allocations over %d proxied requests: %d (%.3f per request)"
           % (N_MEASURE, after - before, (after - before) / N_MEASURE))
    t.check("no allocation per request in steady state", after - before == 0, 0, after - before)
    t.check("the shim counts (startup allocated)", before > 0, "> 0", before)
    t.check("upstream connections were reused", up.accepted <= CONNS, "<= %d" % CONNS, up.accepted)
    for c in clients:
        c.close()


t.run(test_steady_state_allocates_nothing)
