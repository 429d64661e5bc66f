"""L4 TCP proxy (issue 7): a real redis-server behind `protocol: tcp` listeners, on the
splice path and on the copy path, and the basics of a session.

  1. redis-cli and redis-benchmark -n 20000 (keep-alive and pipelined; and -n 5000 with one
     connection per request) through sluice with zero errors: exit 0, no error line, and redis counts
     every command with no failed call; once with `splice: auto` (the pipe pool shows
     that splice ran: the gateway holds pipes it did not hold before) and once with
     `splice: off` (it never opens a pipe);
  2. 64 MiB each way through an echoing upstream, byte for byte, on both paths;
  3. half-close: the client sends a request and FIN, the upstream reads to EOF and only
     then answers 1 MiB, the client gets all of it; and the other way round: the
     upstream answers and half-closes first while the client is still sending;
  4. sluice_connections_active and sluice_tcp_bytes_total move while a session runs;
  5. a refused target: the session's connect goes to the other target;
  6. idle_timeout closes a silent session; an upstream's reset reaches the client;
  7. the TCP-layer breaker: after a refused target's breaker opens, sessions stop trying
     it (the refused connects stop at the trip), and the HTTP-layer breaker of the same
     target stays closed (/status);
  8. idle sessions: 2,000 open sessions cost under 2 KiB of RSS each, and sessions that
     spliced hold no pipe once idle (the gateway's pipes stay at its pool's few).

The upstream peer (this file run with --peer: its own process, so SIGSTOP stops only it) and
the helpers here are shared by the other test_tcp_*.py files, which import this one.
"""

import asyncio
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

# The upstream peer: one asyncio process (this file run with --peer) serving every
# connection by its first line.
#   "A <n>\n" + body + FIN  -> reads to EOF, answers sha256(body) hex + "\n" + pattern(n), closes
#   "E <n> <len> <sha>\n"   -> answers pattern(n) and half-closes at once, then reads the body
#                              to EOF and counts it ok when its length and sha256 match
#   "ECHO\n"                -> echoes every byte; FIN after the client's FIN
#   "SINK\n"                -> counts bytes to EOF, answers the count, closes
#   "RST\n"                 -> answers "bye" and resets the connection
#   "STATS\n"               -> {"ok": .., "bad": .., "conns": ..}

BLOCK = bytes(((i * 131) ^ (i >> 8)) & 0xFF for i in range(1 << 20))


def pattern(n):
    """What the peer answers for "A n" / "E n" (after the digest line for "A")."""
    if n <= len(BLOCK):
        return BLOCK[:n]
    out = bytearray()
    while len(out) < n:
        out += BLOCK[:n - len(out)]
    return bytes(out)


async def _read_all(r, piece=262144):
    """Reads to EOF; returns (sha256 hex, length)."""
    sha, n = hashlib.sha256(), 0
    while True:
        d = await r.read(piece)
        if not d:
            return sha.hexdigest(), n
        sha.update(d)
        n += len(d)


async def _peer_handle(r, w, stats):
    stats["conns"] += 1
    try:
        line = (await r.readline()).decode().split()
        if not line:
            return
        if line[0] == "A":
            digest, _ = await _read_all(r)
            w.write(digest.encode() + b"\n")
            w.write(pattern(int(line[1])))
        elif line[0] == "E":
            w.write(pattern(int(line[1])))
            await w.drain()
            w.write_eof()
            digest, n = await _read_all(r)
            stats["ok" if (n, digest) == (int(line[2]), line[3]) else "bad"] += 1
        elif line[0] == "ECHO":
            while True:
                d = await r.read(262144)
                if not d:
                    break
                w.write(d)
                await w.drain()
            w.write_eof()
        elif line[0] == "SINK":
            _, n = await _read_all(r, 1 << 20)
            w.write(b"%d\n" % n)
        elif line[0] == "RST":
            w.write(b"bye")
            await w.drain()
            await asyncio.sleep(0.05)
            w.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif line[0] == "STATS":
            w.write(json.dumps(stats).encode())
        await w.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        w.close()


def peer_main(ready):
    stats = {"ok": 0, "bad": 0, "conns": 0}

    async def main():
        srv = await asyncio.start_server(lambda r, w: _peer_handle(r, w, stats), "127.0.0.1", 0,
                                         backlog=4096, limit=1 << 20)
        with open(ready + ".tmp", "w") as f:
            f.write(str(srv.sockets[0].getsockname()[1]))
        os.rename(ready + ".tmp", ready)
        async with srv:
            await srv.serve_forever()
    asyncio.run(main())


def stop_process(obj, timeout=5.0):
    """SIGTERM to obj.proc (SIGKILL after `timeout`), and the harness forgets it."""
    if obj.proc.poll() is None:
        obj.proc.terminate()
        try:
            obj.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            obj.proc.kill()
            obj.proc.wait(5)
    h._unregister(obj)


class Peer:
    """The upstream peer above, as its own process (SIGSTOP stops it and nothing else)."""

    def __init__(self, name="peer"):
        d = h.new_tmpdir(name)
        ready = os.path.join(d, "port")
        self.log_path = os.path.join(d, "log")
        with open(self.log_path, "wb") as logf:
            self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--peer", ready],
                                         stdout=logf,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=h._die_with_parent)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 10
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("peer did not start: %s" % open(self.log_path).read()[-2000:])
            time.sleep(0.02)
        self.port = int(open(ready).read())
        self.address = "127.0.0.1:%d" % self.port
        h._register(self)

    def stats(self):
        c = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        c.sendall(b"STATS\n")
        data = b""
        while True:
            d = c.recv(4096)
            if not d:
                break
            data += d
        c.close()
        return json.loads(data)

    def signal(self, sig):
        if self.proc.poll() is None:
            os.kill(self.pid, sig)

    def stop(self):
        self.signal(signal.SIGCONT)
        stop_process(self)

    kill = stop


def gateway(t, targets, splice="auto", workers=1, listener="", upstream="", top="", name="sluice"):
    """A gateway with one tcp listener `t` to an upstream `u` of the given addresses."""
    cfg = """\
workers: %d
shutdown_timeout: 5s
admin: { listen: 127.0.0.1:0 }
%s
listeners:
  - { name: t, listen: 127.0.0.1:0, protocol: tcp, upstream: u, splice: %s%s }
upstreams:
  - { name: u, targets: [ %s ]%s }
""" % (workers, top, splice, (", " + listener) if listener else "",
       ", ".join("{ address: %s }" % a for a in targets), (", " + upstream) if upstream else "")
    return h.start_sluice(cfg, suite=t, name=name)


def pipes(pid):
    """How many pipes the process holds open (the worker's pool shows up here)."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("pipe:")
        except OSError:
            pass
    return n


def exchange(port, payload, answer_size, timeout=20, pieces=1):
    """An "A" exchange: request, FIN, then the whole answer. Returns (ok, detail)."""
    c = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    c.sendall(b"A %d\n" % answer_size)
    step = max(1, len(payload) // pieces)
    for i in range(0, len(payload), step):
        c.sendall(payload[i:i + step])
    c.shutdown(socket.SHUT_WR)
    got = bytearray()
    how = "eof"
    try:
        while True:
            d = c.recv(1 << 20)
            if not d:
                break
            got += d
    except ConnectionResetError:
        how = "reset"
    except socket.timeout:
        how = "timeout"
    c.close()
    want = hashlib.sha256(payload).hexdigest().encode() + b"\n" + pattern(answer_size)
    return bytes(got) == want, "%s after %d of %d bytes" % (how, len(got), len(want))


class RedisServer:
    def __init__(self):
        sk, self.port = h.refused_port()  # a free port, once its socket is closed
        sk.close()
        d = h.new_tmpdir("redis")
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--daemonize", "no",
                                      "--dir", d, "--maxclients", "1000"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=h._die_with_parent)
        self.pid = self.proc.pid
        h._register(self)
        if not h.wait_port(self.port, timeout=10):
            raise RuntimeError("redis-server did not start")

    def cli(self, *args, port=None):
        return subprocess.run(["redis-cli", "-p", str(port or self.port)] + list(args),
                              capture_output=True, text=True, timeout=20)

    def commandstats(self):
        """{command: (calls, failed_calls + rejected_calls)} from INFO commandstats."""
        out = {}
        for line in self.cli("INFO", "commandstats").stdout.splitlines():
            if not line.startswith("cmdstat_"):
                continue
            name, rest = line[8:].split(":", 1)
            kv = dict(x.split("=") for x in rest.strip().split(","))
            out[name] = (int(kv["calls"]), int(kv.get("failed_calls", 0)) + int(kv.get("rejected_calls", 0)))
        return out

    def stop(self):
        stop_process(self)

    kill = stop


# ---------------------------------------------------------------- the tests

S = {}


def setup(t):
    S["peer"] = Peer()
    if shutil.which("redis-server"):
        S["redis"] = RedisServer()
    else:
        t.check("redis-server is installed (scripts/install-deps)", False, "redis-server", None)
    for path in ("auto", "off"):
        targets = [S["peer"].address]
        S["gw_" + path] = gateway(t, targets, splice=path, workers=2, name="peer-" + path)
        if "redis" in S:
            S["rgw_" + path] = gateway(t, ["127.0.0.1:%d" % S["redis"].port], splice=path, workers=2,
                                       name="redis-" + path)


def redis_run(t, path):
    redis, gw = S["redis"], S["rgw_" + path]
    port = gw.port("t")
    pipes0 = pipes(gw.pid)
    r = redis.cli("PING", port=port)
    t.check("[%s] redis-cli PING through sluice -> PONG" % path, r.stdout.strip() == "PONG", "PONG",
            (r.returncode, r.stdout, r.stderr))
    r = redis.cli("SET", "k-" + path, "v" * 100000, port=port)
    g = redis.cli("GET", "k-" + path, port=port)
    t.check("[%s] redis-cli SET then GET of a 100 kB value" % path,
            r.stdout.strip() == "OK" and g.stdout.strip() == "v" * 100000, "OK, the value",
            (r.stdout[:50], len(g.stdout)))
    before = redis.commandstats()
    runs = [["-n", "20000", "-c", "50", "-t", "set,get,lpush"],
            ["-n", "20000", "-c", "20", "-P", "32", "-d", "4096", "-t", "set,get"],
            ["-n", "5000", "-c", "50", "-k", "0", "-t", "incr"]]  # a new session per request
    expect = {}
    for args in runs:
        b = subprocess.run(["redis-benchmark", "-p", str(port), "-q", "--csv"] + args,
                           capture_output=True, text=True, timeout=60)
        out = b.stdout + b.stderr
        tests = args[args.index("-t") + 1].split(",")
        lines = [ln for ln in b.stdout.splitlines() if ln.startswith('"') and not ln.startswith('"test"')]
        bad = [ln for ln in out.splitlines() if "rror" in ln or "eset" in ln]
        t.check("[%s] redis-benchmark %s: exit 0, one result per test, no error line"
                % (path, " ".join(args)),
                b.returncode == 0 and len(lines) == len(tests) and not bad,
                "exit 0, %d results" % len(tests), (b.returncode, lines, bad[:3], out[-300:]))
        for tn in tests:
            expect[tn] = expect.get(tn, 0) + int(args[1])
    after = redis.commandstats()
    for tn, n in sorted(expect.items()):
        calls = after.get(tn, (0, 0))[0] - before.get(tn, (0, 0))[0]
        failed = after.get(tn, (0, 0))[1] - before.get(tn, (0, 0))[1]
        t.check("[%s] redis ran every %s of the benchmarks (>= %d), none failed" % (path, tn, n),
                calls >= n and failed == 0, ">= %d, 0 failed" % n, (calls, failed))
    return pipes(gw.pid) - pipes0


def test_redis(t):
    if "redis" not in S:
        return
    grew = redis_run(t, "auto")
    t.check("[auto] the pipelined benchmark spliced: the gateway pooled pipes", grew > 0, "> 0", grew)
    grew = redis_run(t, "off")
    t.check("[off] splice: off never opens a pipe", grew == 0, 0, grew)


def bulk(t, path):
    gw = S["gw_" + path]
    total = 64 << 20
    pipes0 = pipes(gw.pid)
    c = socket.create_connection(("127.0.0.1", gw.port("t")), timeout=20)
    c.sendall(b"ECHO\n")
    hs, hr = hashlib.sha256(), hashlib.sha256()
    got = [0]

    def reader():
        while True:
            d = c.recv(1 << 20)
            if not d:
                return
            hr.update(d)
            got[0] += len(d)
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    for piece in h.pattern_blocks(total, seed=7):
        hs.update(piece)
        c.sendall(piece)
    c.shutdown(socket.SHUT_WR)
    th.join(30)
    c.close()
    t.check("[%s] 64 MiB echoed back byte for byte" % path,
            got[0] == total and hr.hexdigest() == hs.hexdigest(), total, got[0])
    return pipes(gw.pid) - pipes0


def test_bulk(t):
    t.check("[auto] a 64 MiB stream splices (pipes pooled)", bulk(t, "auto") > 0, "> 0", "see above")
    t.check("[off] and never with splice: off", bulk(t, "off") == 0, 0, "see above")


def test_half_close(t):
    for path in ("auto", "off"):
        port = S["gw_" + path].port("t")
        for size, answer, pieces in ((0, 10, 1), (100, 1 << 20, 1), (3 << 20, 1 << 20, 7), (70000, 0, 3)):
            ok, detail = exchange(port, os.urandom(size), answer, pieces=pieces)
            t.check("[%s] request of %d bytes then FIN; the upstream answers %d bytes after EOF: "
                    "all of it arrives" % (path, size, answer), ok, "whole answer", detail)
        # the upstream answers and half-closes first; the client goes on sending, then FIN
        body = os.urandom(2 << 20)
        c = socket.create_connection(("127.0.0.1", port), timeout=20)
        c.sendall(b"E %d %d %s\n" % (300000, len(body), hashlib.sha256(body).hexdigest().encode()))
        got = bytearray()
        while len(got) < 300000:
            d = c.recv(1 << 20)
            if not d:
                break
            got += d
        eof = c.recv(10) == b""
        c.sendall(body)  # after the upstream's FIN: this direction still flows
        c.shutdown(socket.SHUT_WR)
        rest = c.recv(10)
        c.close()
        t.check("[%s] the upstream's answer and FIN arrive while the client still sends" % path,
                bytes(got) == pattern(300000) and eof and rest == b"", "answer, EOF",
                (len(got), eof, rest))
    deadline = time.monotonic() + 5
    st = S["peer"].stats()
    while st["ok"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        st = S["peer"].stats()
    t.check("the upstream got the whole body sent after its own FIN, on both paths",
            st["ok"] == 2 and st["bad"] == 0, {"ok": 2, "bad": 0}, st)


def test_metrics(t):
    gw = S["gw_auto"]
    c = socket.create_connection(("127.0.0.1", gw.port("t")), timeout=10)
    c.sendall(b"SINK\n")
    c.sendall(b"x" * 1000000)
    # the gateway accepts and reads on its own time (sendall returns once the kernel has
    # the bytes): polled, not read once after a fixed sleep
    m = gw.metrics_until(lambda m: sum(h.metric_values(m, "sluice_connections_active", listener="t")) == 1 and
                         sum(h.metric_values(m, "sluice_tcp_bytes_total", listener="t", direction="in")) >= 1000005)
    active = sum(h.metric_values(m, "sluice_connections_active", listener="t"))
    inb = sum(h.metric_values(m, "sluice_tcp_bytes_total", listener="t", direction="in"))
    t.check("sluice_connections_active counts the open session", active == 1, 1, active)
    t.check("sluice_tcp_bytes_total{direction=in} counts bytes while the session runs",
            inb >= 1000005, ">= 1000005", inb)
    c.shutdown(socket.SHUT_WR)
    answer = c.recv(100)
    c.close()
    t.check("the sink counted the bytes", answer == b"1000000\n", b"1000000\n", answer)
    # the session ends after the client has its answer: polled
    m = gw.metrics_until(lambda m: sum(h.metric_values(m, "sluice_connections_active", listener="t")) == 0 and
                         sum(h.metric_values(m, "sluice_tcp_bytes_total", listener="t", direction="out")) >= 8)
    active = sum(h.metric_values(m, "sluice_connections_active", listener="t"))
    out = sum(h.metric_values(m, "sluice_tcp_bytes_total", listener="t", direction="out"))
    t.check("sluice_connections_active back to 0 after the session", active == 0, 0, active)
    t.check("sluice_tcp_bytes_total{direction=out} counts the answers", out >= 8, ">= 8", out)


def test_failover_idle_reset(t):
    refused, rport = h.refused_port()
    gw = gateway(t, ["127.0.0.1:%d" % rport, S["peer"].address], listener="idle_timeout: 500ms",
                 upstream="balancer: round-robin", name="failover")
    port = gw.port("t")
    oks = sum(exchange(port, b"q%d" % i, 100)[0] for i in range(20))
    t.check("every session reaches the live target when the other refuses", oks == 20, 20, oks)
    log = gw.log()
    t.check("the refused connects are logged", "connect to 127.0.0.1:%d" % rport in log, "logged",
            log[-500:])
    c = h.Client(port)
    c.send(b"SINK\n")
    t0 = time.monotonic()
    data, how = c.read_until_close(5)
    took = time.monotonic() - t0
    t.check("idle_timeout 500ms closes a silent session", how in ("eof", "reset") and 0.3 < took < 2.5,
            "closed after ~0.5 s", (how, round(took, 2)))
    c = h.Client(port)
    c.send(b"RST\n")
    data, how = c.read_until_close(5)
    t.check("an upstream's reset reaches the client as a reset (after the bytes before it)",
            how == "reset" and data in (b"", b"bye"), "reset", (how, data))
    refused.close()


def test_tcp_breaker(t):
    refused, rport = h.refused_port()
    bad = "127.0.0.1:%d" % rport
    gw = gateway(t, [bad, S["peer"].address], upstream="balancer: round-robin, circuit_breaker: "
                 "{ min_requests: 4, failure_ratio: 0.5, open_timeout: 30s }", name="breaker")
    oks = sum(exchange(gw.port("t"), b"b%d" % i, 10)[0] for i in range(40))
    tries = gw.log().count("connect to %s" % bad)
    t.check("40 sessions through a refused and a live target all succeed", oks == 40, 40, oks)
    t.check("the refused target's TCP breaker opened: it was tried only until the trip (4..8), not "
            "every other session (20)", 4 <= tries <= 8, "4..8", tries)
    st = gw.status()
    ups = {tg["address"]: tg for u in st["upstreams"] for tg in u["targets"]}
    t.check("the same target's HTTP-layer breaker is its own (still closed)",
            ups.get(bad, {}).get("breaker") == "closed", "closed", ups.get(bad))
    t.check("/status shows the TCP-layer breaker open", ups.get(bad, {}).get("breaker_tcp") == "open", "open",
            ups.get(bad))
    _, samples = gw.metrics()
    g = {lab.get("layer"): v for n, lab, v in samples
         if n == "sluice_circuit_breaker_state" and lab.get("target") == bad}
    t.check("sluice_circuit_breaker_state: layer tcp 1 (open), layer http 0", g == {"tcp": 1.0, "http": 0.0},
            {"tcp": 1.0, "http": 0.0}, g)
    refused.close()


def test_idle_sessions(t):
    gw = S["gw_auto"]
    # sessions that splice, then go idle one after the other: the same pooled pipe serves
    pipes0 = pipes(gw.pid)
    held = []
    for i in range(12):
        c = socket.create_connection(("127.0.0.1", gw.port("t")), timeout=10)
        c.sendall(b"SINK\n")
        for piece in h.pattern_blocks(4 << 20, seed=i):
            c.sendall(piece)
        held.append(c)
        time.sleep(0.05)
    grew = pipes(gw.pid) - pipes0
    t.check("12 idle sessions that spliced 4 MiB each hold no pipe (pool only: <= 2 new)", grew <= 2,
            "<= 2", grew)
    for c in held:
        c.close()
    n = 2000
    time.sleep(0.2)
    base = gw.rss_kb()
    held = []
    for i in range(n):
        c = socket.create_connection(("127.0.0.1", gw.port("t")), timeout=10)
        c.sendall(b"SINK\nx")
        held.append(c)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        _, m = gw.metrics()
        if sum(h.metric_values(m, "sluice_connections_active", listener="t")) >= n:
            break
        time.sleep(0.1)
    time.sleep(0.3)
    per = (gw.rss_kb() - base) * 1024 / n
    t.info("%d idle sessions: %.0f bytes of RSS each" % (n, per))
    t.check("an idle session costs under 2 KiB of the gateway's memory", per < 2048, "< 2048", per)
    for c in held:
        c.close()


if __name__ == "__main__" and sys.argv[1:2] == ["--peer"]:
    peer_main(sys.argv[2])
elif __name__ == "__main__":
    t = h.Suite("tcp_proxy", budget=58)
    t.run(setup, test_redis, test_bulk, test_half_close, test_metrics, test_failover_idle_reset,
          test_tcp_breaker, test_idle_sessions)
