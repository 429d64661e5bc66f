"""An upstream with more than 64 targets: a retry goes to a target this request has not
tried, and only tried targets count as tried (issue 11, item 9).

The request remembers the targets it tried in a mask. When that mask indexed targets by
`t & 63`, targets 64 apart aliased: trying target 36 (config order, from 1) made target
100 look tried, so a retry could never land on it.

100 MockUpstreams are the targets: 99 answer 503 (retried: `retry.on: [503]`), the 100th
answers 200. A `balancer` plugin written by this test (retry-order) names each attempt's
target from the request's X-Order header (indices in config order, from 1; the last
one repeats), and reports per attempt the `tried` flag `sluice.balancer.targets()` gave
for the target it named, in an X-Tried response header. The order makes the outcome
deterministic, whatever the round-robin position:

  1. X-Order: 36,100 — attempt 1 on target 36 (503), the retry names target 100, which
     this request has not tried: it must go there (200 after exactly 2 attempts), and
     targets() must not call target 100 tried. With the aliasing the retry falls back to
     the balancer, never reaches target 100, and the client gets 503 after 10 attempts;
  2. X-Order: 36 — the retries name target 36 again: each goes to a target the balancer
     picks among those not tried before (no target twice; 503 after 10 attempts, or 200
     if the balancer chose target 100);
  3. the same with X-Order: 100,36 — target 100 answers on the first attempt.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("many_targets", budget=90)
N = 100
HEALTHY = 100  # config order, from 1

PLUGIN = r'''
local sluice = require("sluice")

return {
    name = "retry-order",
    version = "1.0",
    balancer = function(conf, ctx)
        local order = {}
        for n in (sluice.request.get_header("X-Order") or ""):gmatch("%d+") do
            order[#order + 1] = tonumber(n)
        end
        ctx.calls = (ctx.calls or 0) + 1
        local i = order[math.min(ctx.calls, #order)]
        local targets = sluice.balancer.targets()
        ctx.tried = (ctx.tried and ctx.tried .. "," or "") .. i .. "=" .. tostring(targets[i].tried)
        sluice.balancer.set_target(targets[i].address)
    end,
    header_filter = function(conf, ctx)
        sluice.response.set_header("X-Calls", tostring(ctx.calls))
        sluice.response.set_header("X-Tried", tostring(ctx.tried))
    end,
}
'''

MOCKS = []
S = None


def handler_for(index):
    def handler(req):
        if index == HEALTHY:
            return h.Response(200, b"healthy\n")
        return h.Response(503, b"busy %d\n" % index)
    return handler


def setup(t):
    global S
    for i in range(1, N + 1):
        MOCKS.append(h.MockUpstream(handler_for(i), name="m%d" % i))
    d = h.new_tmpdir("plugins")
    with open(os.path.join(d, "retry-order.lua"), "w") as f:
        f.write(PLUGIN)
    cfg = ("workers: 1\nadmin: { listen: 127.0.0.1:0 }\nplugin_paths: [%s]\n"
           "listeners: [ { name: web, listen: 127.0.0.1:0 } ]\n"
           "upstreams:\n  - name: many\n    targets: [ %s ]\n"
           "    retry: { attempts: 10, on: [503], backoff: 0ms, max_backoff: 0ms }\n"
           "routes: [ { name: r, upstream: many, plugins: [ { name: retry-order } ] } ]\n"
           % (d, ", ".join("{ address: %s }" % m.address for m in MOCKS)))
    S = h.start_sluice(cfg, suite=t, name="many")


def hits():
    """Requests each target received, by config index (from 1), and the total."""
    got = {i + 1: len(m.requests) for i, m in enumerate(MOCKS) if m.requests}
    return got, sum(got.values())


def reset():
    for m in MOCKS:
        with m.lock:
            m.requests.clear()


def ask(order):
    reset()
    r = h.request(S.port(), "GET", "/", headers=[("X-Order", order)], timeout=10)
    return r, hits()


def test_retry_reaches_target_64_apart(t):
    r, (got, total) = ask("36,%d" % HEALTHY)
    t.check("X-Order 36,100: the retry goes to target 100 and it answers 200",
            r.status == 200 and r.body == b"healthy\n", 200, (r.status, r.body, got))
    t.check("X-Order 36,100: two attempts, on targets 36 and 100",
            got == {36: 1, HEALTHY: 1} and r.header("X-Calls") == "2",
            {"hits": {36: 1, HEALTHY: 1}, "X-Calls": "2"}, {"hits": got, "X-Calls": r.header("X-Calls")})
    t.check("X-Order 36,100: targets() calls 36 untried before attempt 1 and 100 untried "
            "after target 36 was tried", r.header("X-Tried") == "36=false,100=false",
            "36=false,100=false", r.header("X-Tried"))


def test_retries_go_to_untried_targets(t):
    r, (got, total) = ask("36")
    calls = int(r.header("X-Calls") or 0)
    # the balancer picks the retries: it may happen on target 100 (200) before the 10th
    t.check("X-Order 36: 503 after 10 attempts, or 200 once the balancer chose target 100",
            (r.status == 503 and r.body.startswith(b"busy ") and total == 10)
            or (r.status == 200 and got.get(HEALTHY) == 1), "503 after 10, or 200 from 100",
            (r.status, r.body, total))
    t.check("X-Order 36: every attempt on a target not tried before, 36 first",
            total == calls and len(got) == total and got.get(36) == 1,
            "%d distinct targets" % calls, got)
    seen = (r.header("X-Tried") or "").split(",")
    t.check("X-Order 36: targets() calls 36 tried from the first retry on",
            seen == ["36=false"] + ["36=true"] * (calls - 1),
            ["36=false"] + ["36=true"] * (calls - 1), seen)


def test_first_attempt_on_target_100(t):
    r, (got, total) = ask("%d,36" % HEALTHY)
    t.check("X-Order 100,36: target 100 answers the first attempt",
            r.status == 200 and got == {HEALTHY: 1} and r.header("X-Calls") == "1",
            {"status": 200, "hits": {HEALTHY: 1}}, (r.status, got, r.header("X-Calls")))


t.run(setup, test_retry_reaches_target_64_apart, test_retries_go_to_untried_targets,
      test_first_attempt_on_target_100)
