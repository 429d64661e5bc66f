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
  6. sluice.limit.window with store redis counts a fractional cost as the local store
     does (it used INCRBY, which Redis refuses for 0.5: every such call failed open);
     a window filled by its own calls gives the same retry as the local store (it
     said "when this window ends", when the full previous window still refuses); a
     window under a millisecond works as locally (it was 0 ms: a division by zero);
  7. Redis answering an error (a read-only replica: READONLY): requests pass (fail
     open) and the log says why (it said nothing: only the failopen counter moved);
  8. a Redis with a password (redis.password_env) and a database (redis.database):
     counted there; a wrong password fails open and is logged;
  9. sluice.redis.command sends a number argument exactly (a 15-digit integer went as
     "1.2345678901235e+14");
 10. Redis hung (SIGSTOP): a timeout closes the connection, so only the first request
     waits redis.timeout and the next ones fail open at once (each used to wait); a
     reload then retires the old worker (it waited for Redis' reply for good).
11. a request a replaced worker serves after a reload (the next one on a keep-alive
     connection) is still limited: the draining worker closed its Redis connection at
     once and refused new ones, so such requests were admitted as failopen (and a plugin
     using sluice.redis got "redis unavailable (draining)").
"""

import json
import os
import shutil
import signal
import socket
import subprocess
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

# The same for sluice.limit.window: limit, window (seconds), cost, store, key.
WINDOW_PLUGIN = """\
local sluice = require("sluice")
return {
    name = "window", version = "1.0",
    schema = {
        limit = { type = "number", required = true }, window = { type = "number", required = true },
        cost = { type = "number", default = 1 }, store = { type = "string", default = "local" },
        key = { type = "string", required = true },
    },
    access = function(conf)
        local ok, remaining, reset, retry, failopen =
            sluice.limit.window(conf.key, conf.limit, conf.window, conf.store, conf.cost)
        return sluice.response.exit(ok and 200 or 429, { ok = ok, remaining = remaining,
            reset = reset, retry = retry, failopen = failopen or false })
    end,
}
"""

# sluice.redis.command with number arguments: SETs a 15-digit integer and a fraction, adds
# to the integer with INCRBY, and answers what Redis holds.
NUMBERS_PLUGIN = """\
local sluice = require("sluice")
local redis = sluice.redis
return {
    name = "numbers", version = "1.0",
    access = function()
        local out = {}
        out[1] = { redis.command("SET", "num:int", 123456789012345) }
        local n, err = redis.command("INCRBY", "num:int", 1000000000000001)
        out[2] = { n and string.format("%d", n) or err } -- (sluice.json writes 14 digits)
        out[3] = { redis.command("SET", "num:frac", 0.1) }
        out[4] = { redis.command("GET", "num:frac") }
        out[5] = { redis.command("SET", "num:us", 1796143295123456) }
        out[6] = { redis.command("GET", "num:us") }
        return sluice.response.exit(200, out)
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
  - { name: wfl, match: { paths: [/wfrac/local] }, upstream: up,
      plugins: [ { name: window, config: { limit: 2, window: 60, cost: 0.5, store: local, key: wfrac } } ] }
  - { name: wfr, match: { paths: [/wfrac/redis] }, upstream: up,
      plugins: [ { name: window, config: { limit: 2, window: 60, cost: 0.5, store: redis, key: wfrac } } ] }
  - { name: wol, match: { paths: [/wover/local] }, upstream: up,
      plugins: [ { name: window, config: { limit: 3, window: 3600, store: local, key: wover } } ] }
  - { name: wor, match: { paths: [/wover/redis] }, upstream: up,
      plugins: [ { name: window, config: { limit: 3, window: 3600, store: redis, key: wover } } ] }
  - { name: wtl, match: { paths: [/wtiny/local] }, upstream: up,
      plugins: [ { name: window, config: { limit: 1, window: 0.0004, store: local, key: wtiny } } ] }
  - { name: wtr, match: { paths: [/wtiny/redis] }, upstream: up,
      plugins: [ { name: window, config: { limit: 1, window: 0.0004, store: redis, key: wtiny } } ] }
  - { name: numbers, match: { paths: [/numbers] }, plugins: [ { name: numbers } ] }
  - { name: ro, match: { paths: [/ro] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 1, per: 1m, store: redis, key: route } } ] }
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


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port)] + list(args), capture_output=True, text=True,
                          timeout=10).stdout.strip()


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
    with open(os.path.join(fx, "window.lua"), "w") as f:
        f.write(WINDOW_PLUGIN)
    with open(os.path.join(fx, "numbers.lua"), "w") as f:
        f.write(NUMBERS_PLUGIN)
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


def test_window_fractional_cost(t):
    # limit 2 a minute, cost 0.5: four calls fit, the fifth does not (across a window
    # boundary too: the previous window then still weighs almost fully)
    p = env["g"][0].port()
    for store in ("local", "redis"):
        got = [json.loads(h.request(p, "GET", "/wfrac/" + store).body) for _ in range(5)]
        t.check("window limit 2, cost 0.5 (%s): four admitted, the fifth refused, none failed open" % store,
                [x["ok"] for x in got] == [True] * 4 + [False] and not any(x["failopen"] for x in got),
                "4 admitted, no failopen", got)


def test_window_retry(t):
    # limit 3 an hour, three calls: the window itself is full, so a fourth must wait past
    # its end, until the three, weighed as the previous window, fall to 2: a third of the
    # next window later (not when this one ends: the full previous window refuses then)
    p = env["g"][0].port()
    for store in ("local", "redis"):
        got = [json.loads(h.request(p, "GET", "/wover/" + store).body) for _ in range(4)]
        last = got[3]
        t.check("window limit 3/h (%s): three admitted, the fourth refused" % store,
                [x["ok"] for x in got] == [True] * 3 + [False] and not last["failopen"], "3 admitted", got)
        t.check("window limit 3/h (%s): retry is 1,200 s past the window's end (reset)" % store,
                abs(last["retry"] - last["reset"] - 1200) < 0.01, "retry = reset + 1200", last)


def test_window_under_a_millisecond(t):
    # a window of 0.4 ms (the local store keeps nanoseconds): calls a millisecond apart
    # each find a new window; reset is within the window, never negative
    p = env["g"][0].port()
    for store in ("local", "redis"):
        got = [json.loads(h.request(p, "GET", "/wtiny/" + store).body) for _ in range(3)]
        t.check("window of 0.4 ms (%s): counted (no failopen), reset within the window" % store,
                all(not x["failopen"] and 0 <= x["reset"] <= 0.0004 for x in got), "0 <= reset <= 0.0004", got)


def test_number_arguments(t):
    # a number argument reaches Redis as its exact decimal form, not LuaJIT's %.14g
    # ("1.2345678901235e+14", which INCRBY refuses and SET stores rounded)
    got = json.loads(h.request(env["g"][0].port(), "GET", "/numbers").body)
    want = [["OK"], ["1123456789012346"], ["OK"], ["0.1"], ["OK"], ["1796143295123456"]]
    t.check("sluice.redis.command: 15- and 16-digit integers and 0.1 reach Redis exactly", got == want,
            want, got)


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


def test_readonly_replica(t):
    # Redis answers, but with an error: a replica refuses the script's write (READONLY);
    # a Redis that wants a password answers NOAUTH. The request is admitted (fail open),
    # and the operator is told why in the log, not only by a counter.
    g1 = env["g"][0]
    port = env["rport"]
    f0 = failopens("ro")
    t.check("redis becomes a read-only replica (of a master that is not there)",
            redis_cli(port, "REPLICAOF", "127.0.0.1", "1") == "OK", "OK", None)
    try:
        st = [h.request(g1.port(), "GET", "/ro").status for _ in range(3)]
        t.check("read-only redis: requests are admitted (fail open)", st == [200] * 3, [200] * 3, st)
        t.check("counted as failopen", h.wait_until(lambda: failopens("ro") - f0 >= 3), ">= 3", failopens("ro") - f0)
        t.check("the gateway logs the error Redis answered (READONLY)",
                h.wait_until(lambda: "READONLY" in g1.log()), "a log line with READONLY",
                [ln for ln in g1.log().splitlines() if "redis" in ln.lower()][-3:])
    finally:
        redis_cli(port, "REPLICAOF", "NO", "ONE")
    st = [h.request(g1.port(), "GET", "/ro").status for _ in range(2)]
    t.check("a primary again: limiting resumes (rate 1/min: 200 then 429)", st == [200, 429], [200, 429], st)


AUTH_CONF = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
redis: { address: 127.0.0.1:%(port)d, timeout: 2s, password_env: SLUICE_IT_REDIS_PW, database: 3 }
upstreams: [ { name: up, targets: [ { address: %(up)s } ] } ]
routes:
  - { name: auth, match: { paths: [/auth] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 1, per: 1m, store: redis, key: route } } ] }
"""


def test_password_and_database(t):
    # A Redis that wants a password (requirepass; the password has a space) and a
    # database other than 0, as Kong's redis_password / redis_database
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--requirepass", "s3cret word"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gws = []
    try:
        h.wait_port(port, timeout=10)
        conf = AUTH_CONF % {"port": port, "up": env["up"].address}
        for pw in ("s3cret word", "wrong"):
            gws.append(h.start_sluice(conf, suite=t, name="rlr-auth",
                                      env=dict(os.environ, SLUICE_IT_REDIS_PW=pw)))
        good, bad = gws
        st = [h.request(good.port(), "GET", "/auth").status for _ in range(3)]
        t.check("password_env: the limit is counted in Redis (rate 1/min: 200, 429, 429)", st == [200, 429, 429],
                [200, 429, 429], (st, good.log()[-400:]))
        keys = redis_cli(port, "--no-auth-warning", "-a", "s3cret word", "-n", "3", "--scan")
        keys0 = redis_cli(port, "--no-auth-warning", "-a", "s3cret word", "-n", "0", "--scan")
        t.check("database: 3: the key is in database 3, not 0", keys == "sluice:tb:auth|route" and not keys0,
                ("sluice:tb:auth|route", ""), (keys, keys0))
        st = [h.request(bad.port(), "GET", "/auth").status for _ in range(3)]
        t.check("a wrong password: requests pass (fail open)", st == [200] * 3, [200] * 3, st)
        t.check("... and the log says Redis refused the password",
                h.wait_until(lambda: "WRONGPASS" in bad.log()), "WRONGPASS in the log",
                [ln for ln in bad.log().splitlines() if "redis" in ln.lower()][-3:])
    finally:
        for g in gws:
            g.stop()
        proc.terminate()
        proc.wait(10)


HUNG_CONF = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
redis: { address: 127.0.0.1:%(port)d, timeout: 500ms }
upstreams: [ { name: up, targets: [ { address: %(up)s } ] } ]
routes:
  - { name: hung, match: { paths: [/hung] }, upstream: up,
      plugins: [ { name: rate-limit, config: { rate: 1000, per: 1s, store: redis, key: route } } ] }
"""


def test_redis_hangs(t):
    # Redis stops answering (SIGSTOP) with its connection open. A command slower than
    # redis.timeout fails open; the connection it waited on is closed then, and the
    # worker's next calls fail open at once until its reconnect a second later. It used
    # to keep the connection: every request waited the whole timeout, and each left its
    # command queued (about a kilobyte each) until Redis answered, if ever.
    g = h.start_sluice(HUNG_CONF % {"port": env["rport"], "up": env["up"].address}, suite=t, name="rlr-hung")
    redis = env["redis"]
    try:
        t.check("a request while Redis answers", h.request(g.port(), "GET", "/hung").status == 200, 200, None)
        os.kill(redis.proc.pid, signal.SIGSTOP)
        took, retiring = [], None
        try:
            for _ in range(10):
                t0 = time.monotonic()
                st = h.request(g.port(), "GET", "/hung", timeout=10).status
                took.append((st, round(time.monotonic() - t0, 3)))
            # a reload while a request waits on the hung Redis: the retired worker ends
            # once that command times out (its connection was closing, waiting for a
            # reply that never came: the old generation stayed for good)
            time.sleep(1.1)  # past the reconnect pause: the next request waits on Redis
            waiter = threading.Thread(target=lambda: h.request(g.port(), "GET", "/hung", timeout=10))
            waiter.start()
            time.sleep(0.2)
            g.reload()
            waiter.join(10)
            retiring = h.poll(lambda: g.status().get("retiring_generations"), lambda v: v == 0, timeout=5)
        finally:
            os.kill(redis.proc.pid, signal.SIGCONT)
        t.check("Redis hung: every request is admitted (fail open)", all(x[0] == 200 for x in took), "all 200", took)
        slow = sum(1 for x in took if x[1] >= 0.5)
        t.check("Redis hung: the first request waits redis.timeout (500 ms), the next ones fail open at once "
                "(at most 2 of 10 wait)", 1 <= slow <= 2, "1..2 of 10 >= 0.5 s", took)
        t.check("a reload with a command waiting on the hung Redis: the old generation ends (redis.timeout)",
                retiring == 0, 0, retiring)
    finally:
        g.stop()


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
      test_window_fractional_cost, test_window_retry, test_window_under_a_millisecond,
      test_number_arguments, test_headers_agree, test_reload, test_readonly_replica, test_password_and_database,
      test_redis_hangs, test_redis_restart, teardown)
