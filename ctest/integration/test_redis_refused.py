"""A Redis that refuses connections is noticed at once, and found again when it is back.

The rate-limit route uses `store: redis` with a 2 s `redis.timeout` against a port where
no Redis listens. The first request must fail open well before that timeout: a refused
connect is reported to the client library as it happens (it used to be dropped by the
event adapter, so every limited request waited the whole timeout and the worker never
reconnected). Then redis-server starts on that port, and within a few seconds the
gateway's requests are counted there (its keys appear), without a reload. A reload after
all that ends the old worker cleanly: its loop had a Redis poll it could not close.
"""

import os
import subprocess
import sys
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


t.run(setup, test_fails_open_at_once, test_reconnects_when_back, test_reload_ends_old_worker)
