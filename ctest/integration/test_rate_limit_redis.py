"""The redis store of rate-limit is the local store's token bucket (issue 12, item 2).

A real redis-server on a free loopback port, real gateways sharing it:

  1. two gateways, route `rate-limit { rate: 100, per: 1s, store: redis }`, after an
     idle second: 1,000 requests paced evenly over one second across both admit what
     a bucket allows at the times the Redis server ran their calls (MONITOR), +- 5
     (100 +- 5 when nothing stalled), and never more than 1 + 100/s over that span
     (the old sliding-window counter admitted up to 190);
  2. the same paced second started 100 ms before a window boundary of the server's
     clock (where the sliding window let almost twice through): the same count;
  3. cost > 1 (sluice.limit.take through a plugin): a bucket of 10 tokens gives two
     takes of 5, the third is refused with the same retry as the local store;
  4. the rate-limit plugin's answers (status, RateLimit, RateLimit-Policy, Retry-After)
     are the same, request for request, in both stores;
  5. redis-server restarted mid-run: requests pass while it is down (fail open), then
     the count is exact again;
  6. a request a replaced worker serves after a reload (the next one on a keep-alive
     connection) is still limited: the draining worker closed its Redis connection at
     once and refused new ones, so such requests were admitted as failopen (and a plugin
     using sluice.redis got "redis unavailable (draining)").
"""

import json
import os
import shutil
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from ratelimit_load import Redis, bucket_allows, fire, free_port, ok_handler  # noqa: E402

t = h.Suite("rate_limit_redis", budget=150)

# Reads sluice.limit.take's five results for a key, a store and a cost; answers them as JSON.
TAKE_PLUGIN = """\
local sluice = require("sluice")
return {
    name = "take", version = "1.0",
    schema = {
        rate = { type = "number", required = true }, burst = { type = "number", default = 0 },
        cost = { type = "number", default = 1 }, store = { type = "string", default = "local" },
        key = { type = "string", required = true },
    },
    access = function(conf)
        local ok, remaining, reset, retry, failopen =
            sluice.limit.take(conf.key, conf.rate, conf.burst, conf.store, conf.cost)
        return sluice.response.exit(ok and 200 or 429, { ok = ok, remaining = remaining,
            reset = reset, retry = retry, failopen = failopen and true or false })
    end,
}
"""

CONF = """\
workers: 2
admin: { listen: 127.0.0.1:0 }
plugin_paths: [%(fx)s]
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
redis: { address: 127.0.0.1:%(rport)d, timeout: 2s }
upstreams: [ { name: up, targets: [ { address: %(up)s } ] } ]
routes:
  - { name: paced, match: { paths: [/paced] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 100, per: 1s, store: redis, key: route } } ] }
  - { name: straddle, match: { paths: [/straddle] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 100, per: 1s, store: redis, key: route } } ] }
  - { name: restart, match: { paths: [/restart] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 100, per: 1s, store: redis, key: route } } ] }
  - { name: hl, match: { paths: [/h/local] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 1, per: 1m, burst: 2, store: local, key: route } } ] }
  - { name: hr, match: { paths: [/h/redis] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 1, per: 1m, burst: 2, store: redis, key: route } } ] }
  - { name: cl, match: { paths: [/cost/local] }, upstream: up,
      plugins: [ { name: take, config: { rate: 2, burst: 9, cost: 5, store: local, key: cost } } ] }
  - { name: cr, match: { paths: [/cost/redis] }, upstream: up,
      plugins: [ { name: take, config: { rate: 2, burst: 9, cost: 5, store: redis, key: cost } } ] }
"""

env = {}


def redis_time(port):
    """The redis server's clock (TIME), in seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"*1\r\n$4\r\nTIME\r\n")
        data = b""
        while data.count(b"\r\n") < 5:
            data += s.recv(4096)
    parts = data.split(b"\r\n")
    return int(parts[2]) + int(parts[4]) / 1e6


class Monitor:
    """Redis MONITOR on its own connection: the server's time of every command that
    names `needle`, i.e. when each limiter call ran on the server's clock."""

    def __init__(self, port, needle):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
        self.needle, self.calls, self.buf = needle.encode(), [], b""
        self.stop = False
        while not self.buf.startswith(b"+OK\r\n"):
            self.buf += self.sock.recv(4096)
        self.buf = self.buf[5:]
        self.sock.settimeout(0.2)
        self.th = threading.Thread(target=self._run)
        self.th.start()

    def _run(self):
        while not self.stop:
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                break
            self.buf += data
            *lines, self.buf = self.buf.split(b"\r\n")
            for ln in lines:
                # 1700000000.123456 [0 127.0.0.1:5000] "EVALSHA" "<sha>" "1" "<key>" ...
                # (the script's own commands come as [0 lua] "GET" ...: not calls)
                at = ln.find(b"] ")
                if at < 0 or self.needle not in ln:
                    continue
                cmd = ln[at + 2:].split(b" ", 1)[0]
                if cmd in (b'"EVALSHA"', b'"EVAL"'):
                    self.calls.append((ln[ln.index(b"[") + 1:at], cmd, float(ln[:ln.index(b" ")])))

    def limiter_calls(self):
        # Until the first EVAL loads the script, every EVALSHA is answered NOSCRIPT and
        # sent again as EVAL (a worker may have several in flight): those are not calls.
        calls = list(self.calls)
        first = next((i for i, c in enumerate(calls) if c[1] == b'"EVAL"'), 0)
        return [at for i, (_, cmd, at) in enumerate(calls) if i >= first or cmd == b'"EVAL"']

    def close(self, expect):
        # the last commands' lines reach this reader after the gateways had their replies:
        # wait for the calls the answers imply, then 0.3 s for any beyond them
        h.wait_until(lambda: len(self.limiter_calls()) >= expect, 5.0)
        time.sleep(0.3)
        self.stop = True
        self.th.join(5)
        self.sock.close()
        return self.limiter_calls()


def failopens(route):
    """sluice_ratelimit_total{route, result=failopen} over both gateways."""
    return sum(sum(h.metric_values(g.metrics()[1], "sluice_ratelimit_total", route=route, result="failopen"))
               for g in env["g"])


def paced_both(path, n=1000, seconds=1.0):
    """n requests paced evenly over `seconds`, every other one through each gateway.
    Returns the answers, the server's time of every limiter call they made, and how many
    were admitted without the limiter's answer (fail open)."""
    g1, g2 = env["g"]
    f0 = failopens(path.strip("/"))
    res = []
    mon = Monitor(env["rport"], "%s|route" % path.strip("/"))
    start_at = time.monotonic() + 0.05

    def one(g, offset):
        # each gateway's share starts half a slot after the other's: together, one pace
        d = start_at + offset - time.monotonic()
        if d > 0:
            time.sleep(d)
        res.extend(fire(g.port(), n // 2, seconds, path, conns=10))

    ths = [threading.Thread(target=one, args=(g, k * seconds / n)) for k, g in enumerate((g1, g2))]
    for th in ths:
        th.start()
    for th in ths:
        th.join(90)
    return res, mon.close(len(res)), failopens(path.strip("/")) - f0


def check_paced(t, what, res, times, failopen):
    """Admitted: what a bucket of 100/s allows at the times the calls ran on the Redis
    server (MONITOR), +- 5, and never more than 1 + 100/s over their span + 5. A loaded
    machine stalls senders and gateways, and a burst-0 bucket loses the tokens a stall
    brings that it cannot hold: judging by the server's times keeps that from flaking.
    Unstalled, that is 100 +- 5 for a paced second."""
    ok = sum(1 for x in res if x[0] == 200)
    limited = sum(1 for x in res if x[0] == 429)
    span = max(times) - min(times) if times else 0
    allows, most = bucket_allows(times, 100), 1 + 100 * span
    t.info("%s: %d of %d admitted (%d failed open); %d limiter calls over %.3f s of the server's clock "
           "(a bucket allows %d at those times, at most %.1f)"
           % (what, ok, len(res), failopen, len(times), span, allows, most))
    t.check("%s: what the bucket allows at the server's times +- 5 (100 +- 5 unstalled), never over the rate"
            % what, len(times) == len(res) == ok + limited == 1000 and abs(ok - allows) <= 5 and ok <= most + 5,
            "1000 calls, within 5 of %d, <= %.1f" % (allows, most + 5),
            {"calls": len(times), "admitted": ok, "limited": limited, "failed open": failopen})


def setup(t):
    if not shutil.which("redis-server"):
        raise RuntimeError("redis-server is not installed (scripts/install-deps)")
    fx = h.new_tmpdir("fx")
    with open(os.path.join(fx, "take.lua"), "w") as f:
        f.write(TAKE_PLUGIN)
    env["up"] = h.MockUpstream(ok_handler, name="up")
    env["rport"] = free_port()
    env["redis"] = Redis(env["rport"])
    env["redis"].start()
    conf = CONF % {"fx": fx, "rport": env["rport"], "up": env["up"].address}
    env["g"] = (h.start_sluice(conf, suite=t, name="rlr-1"), h.start_sluice(conf, suite=t, name="rlr-2"))


def test_two_gateways_paced(t):
    time.sleep(1.0)  # an idle second: the bucket is full, any old window empty
    check_paced(t, "two gateways, 1,000 paced over 1 s", *paced_both("/paced"))


def test_burst_straddling_a_window_boundary(t):
    # start 100 ms before a whole second of the server's clock: the sliding window's
    # worst case (its previous window full, weighed as if spread evenly)
    now = redis_time(env["rport"])
    wait = (int(now) + 1 - 0.1) - now
    if wait < 0.3:
        wait += 1.0
    time.sleep(wait - 0.05)  # paced_both starts 50 ms after it is called
    check_paced(t, "across a window boundary", *paced_both("/straddle"))


def test_cost(t):
    p = env["g"][0].port()
    for store in ("local", "redis"):
        rs = [h.request(p, "GET", "/cost/" + store) for _ in range(3)]
        got = [(r.status, json.loads(r.body)) for r in rs]
        st = [s for s, _ in got]
        t.check("cost 5 from a bucket of 10 (%s): two admitted, then refused" % store,
                st == [200, 200, 429], [200, 200, 429], got)
        first, last = got[0][1], got[2][1]
        t.check("cost 5 (%s): 5 tokens remain after the first take" % store,
                first["remaining"] == 5 and not first["failopen"], 5, first)
        # the bucket is empty; a take of 5 at 2 tokens a second waits 2.5 s, and it is full
        # again 5 s after it emptied, both less the time since (on a loaded machine that
        # passed 0.2 s between two requests): reset - retry is the 2.5 s of 5 tokens
        t.check("cost 5 (%s): the refused take waits ~2.5 s for 5 tokens, reset ~5 s (2.5 s apart)" % store,
                1.5 <= last["retry"] <= 2.5 and abs(last["reset"] - last["retry"] - 2.5) < 0.002,
                "retry ~2.5, reset = retry + 2.5", last)


def test_headers_agree(t):
    p = env["g"][0].port()
    out = {}
    for store in ("local", "redis"):
        seq = []
        for _ in range(5):
            r = h.request(p, "GET", "/h/" + store)
            seq.append((r.status, r.header("RateLimit"), r.header("RateLimit-Policy"), r.header("Retry-After")))
        out[store] = seq
    t.info("local: %s" % out["local"])
    t.check("rate 1/1m burst 2: 3 admitted then 429, in both stores",
            [x[0] for x in out["redis"]] == [200, 200, 200, 429, 429], [200, 200, 200, 429, 429],
            out["redis"])
    t.check("RateLimit, RateLimit-Policy and Retry-After are the same in both stores",
            out["local"] == out["redis"], out["local"], out["redis"])


def test_reload(t):
    g1 = env["g"][0]
    f0 = failopens("hr")
    c = h.Client(g1.port(), timeout=10)
    c.send(h.build_request("GET", "/h/redis"))
    first = c.read_response().status
    t.check("the /h/redis bucket is empty (after the headers test): 429", first == 429, 429, first)
    st, _ = g1.reload()
    t.check("the reload applied", st == 200, 200, st)
    c.send(h.build_request("GET", "/h/redis"))  # served by the replaced worker, draining
    r = c.read_response()
    c.close()
    t.check("the next request on that connection is still limited (429), with Connection: close",
            (r.status, (r.header("Connection") or "").lower()) == (429, "close"), (429, "close"),
            (r.status, r.header("Connection")))
    t.check("no request failed open", failopens("hr") == f0, f0, failopens("hr"))


def test_redis_restart(t):
    g1 = env["g"][0]
    redis = env["redis"]
    redis.stop()
    res = fire(g1.port(), 200, 0.5, "/restart", conns=5)
    t.check("redis down: every request passes (fail open)", all(x[0] == 200 for x in res), "all 200",
            {x[0] for x in res})
    redis.start()
    # the workers reconnect at most once a second: wait until limiting is back
    deadline = time.monotonic() + 10
    back = False
    while time.monotonic() < deadline and not back:
        time.sleep(1.1)
        back = all(h.request(g.port(), "GET", "/restart").status in (200, 429) for g in env["g"]) and \
            any(h.request(env["g"][0].port(), "GET", "/restart").status == 429 for _ in range(20))
    t.check("redis back: limiting resumes", back, True, back)
    time.sleep(1.2)  # idle: the bucket fills again
    check_paced(t, "after the restart", *paced_both("/restart"))


def teardown(t):
    for g in env.get("g", ()):
        g.stop()
    if "redis" in env:
        env["redis"].stop()
    if "up" in env:
        env["up"].stop()


t.run(setup, test_two_gateways_paced, test_burst_straddling_a_window_boundary, test_cost,
      test_headers_agree, test_reload, test_redis_restart, teardown)
