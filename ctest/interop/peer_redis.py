"""Redis as the origin, its own tools (redis-benchmark, redis-cli) as the clients, through
sluice's L4 path (tcp listeners, splice auto and off): deep pipelining from many clients,
a 10 MB value each way, and a SUBSCRIBE connection that outlives a reload."""

import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

BENCH_N = 50000
BENCH_CMDS = ("set", "get", "lpush", "lpop")


def cli(port, *args, stdin=subprocess.DEVNULL, timeout=30):
    """redis-cli against 127.0.0.1:port (its stdin: a file, or commands one a line when
    bytes); CompletedProcess with bytes stdout."""
    argv = ["redis-cli", "-h", "127.0.0.1", "-p", str(port)] + [str(a) for a in args]
    if isinstance(stdin, bytes):
        return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)
    return subprocess.run(argv, stdin=stdin, capture_output=True, timeout=timeout)


def commandstats(port):
    """INFO commandstats, read directly: {command: {"calls": n, "failed_calls": n, ...}}."""
    out = cli(port, "info", "commandstats").stdout.decode()
    return {m.group(1): {k: int(float(v)) for k, v in re.findall(r"(\w+)=([\d.]+)", m.group(2))}
            for m in re.finditer(r"^cmdstat_([\w|]+):(.*)$", out, re.M)}


def benchmark(t, redis_port, port, what):
    """redis-benchmark -n BENCH_N -c 50 -P 16 against port; checks (on the server's own
    counters) that every request of every command arrived and none failed; returns
    {command: ops/s}."""
    cli(redis_port, "config", "resetstat")
    r = io.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-q", "--csv", "-n", str(BENCH_N),
                "-c", "50", "-P", "16", "-t", ",".join(BENCH_CMDS)], timeout=120, text=True)
    rps = {m.group(1).lower(): float(m.group(2)) for m in re.finditer(r'^"(\w+)","([\d.]+)"', r.stdout, re.M)}
    t.check("redis-benchmark %s: exit 0, an ops/s figure for each of %s, no error line" % (what, ",".join(BENCH_CMDS)),
            r.returncode == 0 and sorted(rps) == sorted(BENCH_CMDS) and "rror" not in r.stdout + r.stderr,
            sorted(BENCH_CMDS), (r.returncode, rps, (r.stdout + r.stderr)[-400:]))
    stats = commandstats(redis_port)
    got = {c: (stats.get(c, {}).get("calls"), stats.get(c, {}).get("failed_calls"),
               stats.get(c, {}).get("rejected_calls")) for c in BENCH_CMDS}
    want = {c: (BENCH_N, 0, 0) for c in BENCH_CMDS}
    t.check("redis-benchmark %s: the server counted exactly %d calls of each command, 0 failed, 0 rejected"
            % (what, BENCH_N), got == want, want, got)
    return rps


@io.case("l4.benchmark", "redis-benchmark -n 50000 -c 50 -P 16 (set, get, lpush, lpop) through a tcp "
         "listener: every request reaches redis (its own per-command counters, exact), none fails "
         "(ops/s ratio to direct recorded)", budget=90)
def l4_benchmark(t):
    io.need(t, "redis-benchmark", "redis-cli")
    _, rp = io.redis(t)
    s = io.tcp_gateway(t, rp)
    direct = benchmark(t, rp, rp, "direct")
    through = benchmark(t, rp, s.port("auto"), "through sluice")
    t.info("redis-benchmark -P 16 -c 50 ops/s through sluice / direct: "
           + ", ".join("%s %.0f/%.0f = %.2f" % (c, through.get(c, 0), direct.get(c, 0),
                                                through.get(c, 0) / direct[c] if direct.get(c) else 0)
                       for c in BENCH_CMDS))


@io.case("l4.value_10m", "a 10 MB random value SET and then GET by redis-cli through tcp listeners "
         "with splice auto and off: stored and read back sha256-exact", budget=60)
def l4_value_10m(t):
    io.need(t, "redis-cli")
    _, rp = io.redis(t)
    s = io.tcp_gateway(t, rp, ("auto", "off"))
    path = os.path.join(io.h.new_tmpdir("value"), "v")
    size = 10 << 20
    sha = io.random_file(path, size)
    for mode in ("auto", "off"):
        key = "big_" + mode
        with open(path, "rb") as f:
            r = cli(s.port(mode), "-x", "set", key, stdin=f, timeout=60)
        t.check("SET %s (10 MiB) through sluice (splice %s): OK" % (key, mode), r.stdout == b"OK\n", b"OK\n",
                r.stdout + r.stderr)
        r = cli(rp, "--raw", "get", key, timeout=60)
        t.check("the value redis stored (read directly) is the file's sha256, 10 MiB",
                len(r.stdout) == size + 1 and io.sha256(r.stdout[:-1]) == sha,
                (size, sha), (len(r.stdout) - 1, io.sha256(r.stdout[:-1])))
        r = cli(s.port(mode), "--raw", "get", key, timeout=60)
        t.check("GET %s through sluice (splice %s): the same 10 MiB, sha256-exact" % (key, mode),
                len(r.stdout) == size + 1 and io.sha256(r.stdout[:-1]) == sha and r.stdout[-1:] == b"\n",
                (size, sha), (len(r.stdout) - 1, io.sha256(r.stdout[:-1])))
        moved = io.tcp_bytes(s, mode)
        t.check("listener %s counted the value both ways (>= 10 MiB in, >= 10 MiB out)" % mode,
                moved["in"] >= size and moved["out"] >= size, ">= %d each" % size, moved)


def messages(path):
    """The payloads a `redis-cli subscribe` printed so far (its output file), in order."""
    try:
        lines = open(path, errors="replace").read().split("\n")
    except OSError:
        return []
    return [lines[i + 2] for i in range(len(lines) - 2) if lines[i] == "message" and i + 2 < len(lines) - 1]


def publish(t, rp, payloads, subscribers):
    """PUBLISH each payload directly to redis; checks each reached `subscribers` subscribers."""
    reached = cli(rp, stdin=b"".join(b"publish news %s\n" % p.encode() for p in payloads)).stdout.split()
    t.check("each of %d PUBLISHes (direct) reached %d subscriber(s)" % (len(payloads), subscribers),
            reached == [str(subscribers).encode()] * len(payloads), subscribers, reached)


def wait_messages(path, n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(messages(path)) < n:
        time.sleep(0.05)
    time.sleep(0.2)  # and nothing more after them
    return messages(path)


def subscriber(t, port, d, name):
    """A `redis-cli subscribe news` through sluice, once redis counts it subscribed."""
    path = os.path.join(d, name)
    proc = io.spawn(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "subscribe", "news"], log=path)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "subscribe\nnews\n" not in open(path, errors="replace").read():
        time.sleep(0.05)
    return proc, path


@io.case("l4.subscribe_across_reload", "a redis-cli SUBSCRIBE held open through a tcp listener keeps "
         "receiving every message published (directly) after an explicit reload, exact count and "
         "order, while a subscriber that connects after the reload receives them too", budget=60)
def l4_subscribe_across_reload(t):
    io.need(t, "redis-cli")
    _, rp = io.redis(t)
    s = io.tcp_gateway(t, rp)
    d = io.h.new_tmpdir("sub")
    old, old_log = subscriber(t, s.port("auto"), d, "old")
    before = ["before-%03d" % i for i in range(20)]
    publish(t, rp, before, 1)
    t.check("the subscriber got the 20 messages published before the reload, in order",
            wait_messages(old_log, 20) == before, before, messages(old_log))
    gen0 = s.status().get("generation")
    code, answer = s.reload()
    st = s.status()
    t.check("the reload was applied: a new generation, the old one retiring with the session",
            code == 200 and answer.get("applied") and st.get("generation") != gen0
            and st.get("retiring_generations"), "applied, retiring", (code, answer, st.get("retiring_generations")))
    after = ["after-%03d" % i for i in range(50)]
    publish(t, rp, after, 1)
    t.check("the old subscriber got the 50 messages published after the reload, exactly, in order",
            wait_messages(old_log, 70) == before + after, 70, messages(old_log)[-5:] + ["(%d)" % len(messages(old_log))])
    new, new_log = subscriber(t, s.port("auto"), d, "new")
    both = ["both-%03d" % i for i in range(30)]
    publish(t, rp, both, 2)
    t.check("the subscriber connected after the reload got the 30 messages published since, in order",
            wait_messages(new_log, 30) == both, both, messages(new_log))
    t.check("and the old subscriber got them too: 100 in all, in order",
            wait_messages(old_log, 100) == before + after + both, 100, len(messages(old_log)))
    t.check("both redis-cli subscribers are still running", old.alive() and new.alive(), True,
            (old.alive(), new.alive()))
    old.stop()  # (else the gateway's drain would wait for them at the end)
    new.stop()


if __name__ == "__main__":
    io.main()
