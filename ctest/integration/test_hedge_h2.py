"""Hedging on an HTTP/2 (h2c) upstream: the hedge is a second stream, to another target.

Two python3-h2 origins (grpc_fixture/h2_upstream.py --mode slow): one answers each request
after 1 s, the other at once. retry.hedge_after 50ms, round-robin, one worker.

  1. Every request answers from the fast origin, well before the slow one would (a
     request whose first attempt went to the fast one needs no hedge; one that went to
     the slow one is hedged to the fast one at 50 ms).
  2. The loser's stream is reset, not its connection: the slow origin saw one RST_STREAM
     per request it lost, and one connection that carried all of them and is still open.
  3. The same config without hedge_after waits for the slow origin (the test's control).
  4. Both streams answered at the same instant (grpc_fixture/h2_pair.py), 40 times: every
     answer is one origin's head with that origin's body.
  5. One stream's head split over HEADERS and CONTINUATION, the other stream's whole 503 in
     between (h2_pair.py --mode split): the client gets the first origin's 200 with its own
     fields only, not the 503's status or fields mixed into it.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("hedge_h2", budget=120)
PY = "/usr/bin/python3"
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grpc_fixture")
D = h.new_tmpdir("hedge_h2")


def spawn(*args):
    """An h2c origin; returns (Popen, port) once it printed READY."""
    err = open(os.path.join(D, "origin-%s.log" % args[-1]), "wb")
    p = subprocess.Popen([PY, os.path.join(FIX, "h2_upstream.py")] + [str(x) for x in args],
                         stdout=subprocess.PIPE, stdin=subprocess.PIPE, stderr=err, text=True,
                         preexec_fn=h._die_with_parent)
    line = p.stdout.readline()
    if not line.startswith("READY"):
        raise RuntimeError("h2_upstream.py did not start: %r" % line)
    return p, int(line.split()[1])


def stats(p):
    """The origin's counts (it exits once its stdin closes)."""
    out, _ = p.communicate("", timeout=10)
    for line in out.splitlines():
        if line.startswith("STATS "):
            import json
            return json.loads(line[6:])
    return {}


CONF = """
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - name: h2
    protocol: h2c
    balancer: round-robin
    targets: [ { address: 127.0.0.1:%(slow)d }, { address: 127.0.0.1:%(fast)d } ]
    timeouts: { read: 5s }
    %(retry)s
routes: [ { name: r, match: { paths: [/] }, upstream: h2 } ]
"""


def run(retry, n):
    slow, slow_port = spawn("--mode", "slow", "--delay", "1.0", "--name", "slow")
    fast, fast_port = spawn("--mode", "slow", "--delay", "0", "--name", "fast")
    s = h.start_sluice(CONF % {"slow": slow_port, "fast": fast_port, "retry": retry}, suite=t)
    answers = []
    try:
        c = h.Client(s.port(), timeout=5)
        for i in range(n):
            t0 = time.monotonic()
            c.send(h.build_request("GET", "/h/%d" % i))
            r = c.read_response()
            answers.append((r.status, r.body, time.monotonic() - t0))
        time.sleep(0.3)  # the resets reach the origin
        st_slow, st_fast = stats(slow), stats(fast)
    finally:
        s.stop()
        for p in (slow, fast):
            if p.poll() is None:
                p.kill()
                p.wait(5)
    return answers, st_slow, st_fast


def test_hedged(t):
    answers, st_slow, st_fast = run("retry: { hedge_after: 50ms }", 6)
    t.info("answers %s; slow origin %s; fast origin %s" % ([(a[0], a[1], round(a[2], 3)) for a in answers],
                                                          st_slow, st_fast))
    t.check("hedge_after 50ms on h2c: every request answers 200 from the fast origin",
            all(a[0] == 200 and a[1].startswith(b"fast:") for a in answers), "6 x 200 fast:N",
            [(a[0], a[1]) for a in answers])
    t.check("every request answers well before the slow origin's 1 s",
            all(a[2] < 0.8 for a in answers), "< 0.8 s each", [round(a[2], 3) for a in answers])
    lost = st_slow.get("resets", -1)
    t.check("the slow origin got requests (round-robin sent first attempts there) and answered none",
            lost >= 2 and st_slow.get("answered") == 0, ">= 2 requests, 0 answered", st_slow)
    t.check("the loser's stream is reset: one RST_STREAM per request the slow origin lost",
            lost >= 2, ">= 2 resets", st_slow)
    t.check("not its connection: one connection to the slow origin carried every stream and stayed open",
            st_slow.get("conns") == 1 and st_slow.get("closed") == 0, "conns 1, closed 0", st_slow)


def test_unhedged(t):
    answers, st_slow, _ = run("", 2)
    t.check("without hedge_after one of two requests waits for the slow origin (>= 1 s)",
            any(a[2] >= 1.0 and a[1].startswith(b"slow:") for a in answers), "one slow answer",
            [(a[1], round(a[2], 3)) for a in answers])


def pair_run(mode, retry, drive):
    """h2_pair.py's two origins (--mode MODE) behind one sluice with `retry`: drive(sluice)'s
    result and the origins' STATS."""
    p = subprocess.Popen([PY, os.path.join(FIX, "h2_pair.py"), "--mode", mode], stdout=subprocess.PIPE,
                         stdin=subprocess.PIPE, stderr=open(os.path.join(D, "pair-%s.log" % mode), "wb"), text=True,
                         preexec_fn=h._die_with_parent)
    ports = [int(x) for x in p.stdout.readline().split()[1:3]]
    s = h.start_sluice(CONF % {"slow": ports[0], "fast": ports[1], "retry": retry}, suite=t, name=mode)
    try:
        got = drive(s)
        out, _ = p.communicate("", timeout=10)
    finally:
        s.stop()
        if p.poll() is None:
            p.kill()
            p.wait(5)
    return got, json.loads([l for l in out.splitlines() if l.startswith("STATS ")][0][6:])


def test_heads_at_once(t):
    """Both streams of a hedged request answer at the same instant (h2_pair.py: a 200 with
    100 bytes of A from one origin, a 201 with "BB" from the other, each held until the
    other's request arrived): the client gets one origin's head with that origin's body,
    never one's head with the other's body (the two heads arrive in one loop turn and go
    to the one response head a request has)."""
    n = 40

    def drive(s):
        bad = []
        c = h.Client(s.port(), timeout=5)
        for i in range(n):
            c.send(h.build_request("GET", "/p/%d" % i))
            try:
                r = c.read_response()
            except Exception as e:  # noqa: BLE001 - a broken framing is a failure here
                bad.append((i, type(e).__name__))
                c = h.Client(s.port(), timeout=5)
                continue
            if (r.status, r.body) not in ((200, b"A" * 100), (201, b"BB")):
                bad.append((i, r.status, r.body[:12]))
        return bad
    bad, st = pair_run("together", "retry: { hedge_after: 20ms }", drive)
    t.check("the origins answered both streams together for most requests", st["together"] >= n, ">= %d" % n, st)
    t.check("%d hedged requests whose two heads came at once: each answer is one origin's head and body" % n,
            not bad, [], bad[:6])


def test_head_split_by_other_answer(t):
    """The first attempt's head comes in two frames, and the hedge's whole 503 (a status
    retry.on names, so the first attempt goes on) comes between them. Each stream's fields
    are its own until its head ends."""
    n = 4

    def drive(s):
        got = []
        for i in range(n):
            c = h.Client(s.port(), timeout=5)
            c.send(h.build_request("GET", "/s/%d" % i))
            try:
                r = c.read_response()
                got.append((r.status, h.hall(r.headers, "x-from"), r.body))
            except Exception as e:  # noqa: BLE001 - a broken answer is a failure here
                got.append((type(e).__name__,))
            c.close()
        return got
    got, st = pair_run("split", "retry: { attempts: 2, hedge_after: 20ms, on: [503] }", drive)
    t.check("the origins played the split for every request", st["split"] == n, n, st)
    t.check("each answer is the first origin's 200, its own x-from only, its body",
            all(g == (200, ["first"], b"F" * 50) for g in got), "%d x (200, ['first'], F*50)" % n, got)


t.run(test_hedged, test_unhedged, test_heads_at_once, test_head_split_by_other_answer)
