"""L4 TCP proxy (issue 7), acceptance 2: 10,000 sessions that half-close at random moments,
and not one truncated answer or request. This file runs them with `splice: auto` (small
exchanges copy, large ones splice); test_tcp_halfclose_copy.py runs the same with
`splice: off`.

Each session is one of two kinds, chosen at random, with random sizes (mostly small, some
large enough to splice), sent in random pieces with random pauses:
  "A": the client sends its request and FIN at a random moment; the upstream reads to EOF
       and only then answers (the digest of what it got, then the answer bytes);
  "E": the upstream answers and half-closes at once; the client reads the answer and the
       upstream's FIN while it is still sending, and sends its FIN at a random moment
       after; the upstream checks length and digest of everything that came after its FIN.
Counted: answers that are not exactly what the upstream sent (client side), requests that
are not exactly what the client sent (upstream side), and sessions that failed otherwise.
All must be zero. 400 sessions run at once.
"""

import asyncio
import hashlib
import os
import random
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import test_tcp_proxy as tp  # noqa: E402

SESSIONS = 10000
CONCURRENCY = 400
BODY = os.urandom(1 << 20)


def size(rnd):
    r = rnd.random()
    if r < 0.80:
        return rnd.randrange(0, 2048)
    if r < 0.97:
        return rnd.randrange(2048, 65536)
    return rnd.randrange(65536, 400000)  # fills the 64 KiB block: the direction splices


async def session(port, rnd, res):
    kind = "A" if rnd.random() < 0.5 else "E"
    nreq, nans = size(rnd), size(rnd)
    off = rnd.randrange(0, len(BODY) - nreq + 1)
    body = BODY[off:off + nreq]
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    except OSError as e:
        res["connect"].append(repr(e))
        return
    try:
        if kind == "A":
            w.write(b"A %d\n" % nans)
        else:
            w.write(b"E %d %d %s\n" % (nans, nreq, hashlib.sha256(body).hexdigest().encode()))

        async def send():
            i = 0
            while i < nreq:
                n = rnd.randrange(1, 65536)
                w.write(body[i:i + n])
                i += n
                if rnd.random() < 0.3:
                    await w.drain()
                if rnd.random() < 0.2:
                    await asyncio.sleep(rnd.random() * 0.004)
            await w.drain()
            if rnd.random() < 0.5:
                await asyncio.sleep(rnd.random() * 0.01)  # the FIN comes at a random moment
            w.write_eof()

        async def recv():
            return await r.read()  # to EOF

        if kind == "A":
            await send()
            got = await recv()
            want = hashlib.sha256(body).hexdigest().encode() + b"\n" + tp.pattern(nans)
        else:
            got, _ = await asyncio.gather(recv(), send())
            want = tp.pattern(nans)
        if got != want:
            res["truncated"].append("%s req %d ans %d: got %d of %d bytes" % (kind, nreq, nans, len(got), len(want)))
        else:
            res["ok"] += 1
    except (ConnectionError, OSError) as e:
        res["errors"].append("%s req %d ans %d: %r" % (kind, nreq, nans, e))
    finally:
        w.close()


async def run(port, n, seed):
    res = {"ok": 0, "truncated": [], "errors": [], "connect": []}
    sem = asyncio.Semaphore(CONCURRENCY)
    rnd = random.Random(seed)

    async def one(i):
        async with sem:
            await session(port, random.Random(rnd.random()), res)
    await asyncio.gather(*(one(i) for i in range(n)))
    return res


def soak(t, path):
    peer = tp.Peer("peer-" + path)
    gw = tp.gateway(t, [peer.address], splice=path, workers=2, name="gw-" + path)
    t0 = time.monotonic()
    res = asyncio.run(run(gw.port("t"), SESSIONS, seed=42 if path == "auto" else 43))
    took = time.monotonic() - t0
    t.info("[%s] %d sessions in %.1f s" % (path, SESSIONS, took))
    t.check("[%s] %d half-closing sessions: every answer whole" % (path, SESSIONS),
            res["ok"] == SESSIONS and not res["truncated"], SESSIONS,
            (res["ok"], res["truncated"][:5], res["errors"][:5], res["connect"][:5]))
    t.check("[%s] no session failed with an error" % path, not res["errors"] and not res["connect"], [],
            (len(res["errors"]), res["errors"][:5], res["connect"][:5]))
    st = peer.stats()
    nE = st["ok"] + st["bad"]
    t.check("[%s] every request sent after the upstream's FIN arrived whole" % path,
            st["bad"] == 0 and nE > SESSIONS // 3, "bad 0", st)
    deadline = time.monotonic() + 5
    while True:
        _, m = gw.metrics()
        active = sum(h.metric_values(m, "sluice_connections_active", listener="t"))
        if active == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    t.check("[%s] no session left open" % path, active == 0, 0, active)
    gw.stop()
    peer.stop()


def main(path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    t = h.Suite("tcp_halfclose_" + path, budget=58)

    def test_soak(t):
        soak(t, path)
    t.run(test_soak)


if __name__ == "__main__":
    main("auto")
