"""A Redis that refuses connections is noticed at once, and found again when it is back.

The rate-limit route uses `store: redis` with a 2 s `redis.timeout` against a port where
no Redis listens. The first request must fail open well before that timeout: a refused
connect is reported to the client library as it happens (it used to be dropped by the
event adapter, so every limited request waited the whole timeout and the worker never
reconnected). Then redis-server starts on that port, and within a few seconds the
gateway's requests are counted there (its keys appear), without a reload. A reload after
all that ends the old worker cleanly: its loop had a Redis poll it could not close.

A Redis that stalls (SIGSTOP: connected, never answering) is down too once 1,024 commands of
a worker wait for a reply: later commands answer "redis unavailable" at once instead of
each waiting redis.timeout and adding its buffers to an unbounded queue (it grew ~3 KiB a
command, without end, while Redis stalled).
"""

import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import ratelimit_load as rl  # noqa: E402

t = h.Suite("redis_refused", budget=90)
S = {}


def setup(t):
    S["up"] = h.MockUpstream(rl.ok_handler)
    S["rport"] = rl.free_port()
    S["conf"] = f"""
workers: 1
watch: false
admin: {{ listen: 127.0.0.1:0 }}
redis: {{ address: 127.0.0.1:{S["rport"]}, timeout: 2s }}
listeners: [ {{ name: web, listen: 127.0.0.1:0 }} ]
upstreams: [ {{ name: up, targets: [ {{ address: {S["up"].address} }} ] }} ]
routes:
  - name: limited
    match: {{ paths: [/] }}
    upstream: up
    plugins: [ {{ name: rate-limit, config: {{ rate: 1000, per: 1s, burst: 1000, store: redis }} }} ]
"""
    S["sl"] = h.start_sluice(S["conf"], suite=t)


def get(port):
    t0 = time.monotonic()
    r = h.request(port, "GET", "/", timeout=10)
    return r.status, time.monotonic() - t0


def test_fails_open_at_once(t):
    port = S["sl"].port()
    st, took = get(port)
    t.check("a request with Redis refusing is admitted (fail open)", st == 200, 200, st)
    t.check("... well before redis.timeout (2 s)", took < 1.0, "< 1.0 s", "%.3f s" % took)
    st, took = get(port)
    t.check("the next one too, without waiting", st == 200 and took < 1.0, (200, "< 1.0 s"), (st, "%.3f s" % took))


def test_reconnects_when_back(t):
    redis = rl.Redis(S["rport"])
    redis.start()
    S["redis"] = redis
    port = S["sl"].port()
    found = False
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not found:
        get(port)
        out = subprocess.run(["redis-cli", "-p", str(S["rport"]), "--scan", "--pattern", "*"],
                             capture_output=True, text=True, timeout=5).stdout
        found = bool(out.strip())
        if not found:
            time.sleep(0.2)
    t.check("requests are counted in Redis once it is back (no reload needed)", found, True, found)


def test_reload_ends_old_worker(t):
    st, body = S["sl"].reload()
    t.check("a reload is accepted", st == 200, 200, (st, body))
    time.sleep(1.0)
    log = S["sl"].log()
    t.check("the retired worker's loop closed everything", "still had handles" not in log, "no such line",
            [l for l in log.splitlines() if "still had handles" in l][:2])
    S["redis"].stop()


def test_stalled_redis_bounded(t):
    rport = rl.free_port()
    red = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           preexec_fn=h.lifecycle._die_with_parent)
    try:
        d = h.new_tmpdir("stall")
        os.makedirs(os.path.join(d, "plugins"))
        with open(os.path.join(d, "plugins", "rcmd.lua"), "w") as f:
            f.write('local sluice = require("sluice")\n'
                    'return { name = "rcmd", version = "1", schema = {}, access = function()\n'
                    '  local n, err = sluice.redis.command("INCR", "k")\n'
                    '  return sluice.response.exit(n and 200 or 503, tostring(n or err)) end }\n')
        s = h.start_sluice(f"""
workers: 1
watch: false
admin: {{ listen: 127.0.0.1:0 }}
plugin_paths: [plugins]
redis: {{ address: 127.0.0.1:{rport}, timeout: 50ms }}
listeners: [ {{ name: web, listen: 127.0.0.1:0 }} ]
routes: [ {{ name: r, match: {{ paths: [/] }}, plugins: [ {{ name: rcmd }} ] }} ]
""", config_dir=d, suite=t)
        ok = h.wait_until(lambda: h.request(s.port(), "GET", "/").status == 200, timeout=5)
        t.check("redis answers before the stall", ok, True, ok)
        os.kill(red.pid, signal.SIGSTOP)
        bodies = []

        def client():
            for _ in range(90):
                bodies.append(h.request(s.port(), "GET", "/", timeout=10).body)

        ths = [threading.Thread(target=client) for _ in range(16)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        timeouts = bodies.count(b"redis timeout")
        unavailable = bodies.count(b"redis unavailable")
        t.check("stalled: at most 1,024 commands wait for their timeout", 0 < timeouts <= 1024,
                "1..1024", timeouts)
        t.check("stalled: past 1,024 unanswered commands the rest fail at once",
                unavailable == len(bodies) - timeouts and unavailable >= 1440 - 1024,
                ">= %d" % (1440 - 1024), unavailable)
        os.kill(red.pid, signal.SIGCONT)
        ok = h.wait_until(lambda: h.request(s.port(), "GET", "/").status == 200, timeout=5)
        t.check("redis answers again once it resumes", ok, True, ok)
        t.check("exit 0 on SIGTERM", s.stop() == 0, 0, None)
    finally:
        try:
            os.kill(red.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        red.kill()
        red.wait()


t.run(setup, test_fails_open_at_once, test_reconnects_when_back, test_reload_ends_old_worker,
      test_stalled_redis_bounded)
