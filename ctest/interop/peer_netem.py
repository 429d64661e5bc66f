"""Impaired links: real peers talk through sluice across a link that delays, drops, reorders
and rate-limits packets (ctest/interop/impair.py: two network namespaces joined by
netem_tun, a TUN relay, since the kernel has no netem). Clients and origins are in EDGE,
sluice in CORE: client -> sluice and sluice -> origin both cross the link.

Impairments, each direction on its own (netem's words):
  delay     delay 20ms (RTT 40 ms)
  loss      loss 1%
  reorder   delay 5ms, 10% of packets held 10 ms more (later ones overtake them)
  rate      rate 10mbit, 100 ms of queue then tail drop
  combined  all four: delay 20ms, loss 1%, 5% held 10 ms more, rate 10mbit

Each case checks the bytes (sha256, exact values), a time bound computed from the size and
the rate with a generous factor, that the impairment really happened (the relay's counters:
packets dropped, reordered, the measured RTT, the rate's floor on the transfer time), and that
nothing is left stuck in the gateway (no connection open once the clients are done).
"""

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402
import impair  # noqa: E402

h = io.h
MIB = 1 << 20
IMPAIR = {
    "delay": dict(delay_ms=20),
    "loss": dict(loss=1),
    "reorder": dict(delay_ms=5, reorder=10, reorder_extra_ms=10),
    "rate": dict(rate_kbit=10000),
    "combined": dict(delay_ms=20, loss=1, reorder=5, reorder_extra_ms=10, rate_kbit=10000),
}


def bound_s(size, how):
    """Seconds a transfer of `size` bytes may take on link `how`: three times what it
    needs at the link's rate (an unrated link: at 20 Mbit/s, a floor for a software link
    and an ASan gateway on a busy 2-core machine), plus 10 s for handshakes and loss
    recovery."""
    bps = IMPAIR[how].get("rate_kbit", 20000) * 1000.0
    return 10.0 + 3.0 * size * 8 / bps


def admin_metrics(link, s):
    """The gateway's /metrics, fetched inside CORE (its admin listens on CORE's loopback)."""
    r = impair.core(link, ["curl", "-sS", "--max-time", "5", "http://127.0.0.1:%d/metrics" % s.admin_port])
    return h.parse_prometheus(r.stdout.decode("utf-8", "replace"))


def no_connection_left(t, link, s, what):
    """Checks that the gateway holds no client connection once the clients are done."""
    deadline = time.monotonic() + 5
    while True:
        active = sum(h.metric_values(admin_metrics(link, s), "sluice_connections_active"))
        if active == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    t.check("nothing stuck: sluice_connections_active is 0 after %s" % what, active == 0, 0, active)


def check_impairment(t, link, how, port, elapsed=None, size=None):
    """Checks the relay did to the traffic what `how` says (port: sluice's, in CORE)."""
    spec = IMPAIR[how]
    if spec.get("delay_ms"):
        rtt = link.connect_ms(port)
        t.check("the link's delay is real: a TCP connect from EDGE to sluice (1 RTT) takes "
                ">= %d ms" % (2 * spec["delay_ms"]), rtt >= 2 * spec["delay_ms"],
                ">= %d ms" % (2 * spec["delay_ms"]), "%.1f ms" % rtt)
    st = link.stats()
    tot = st["total"]
    t.info("netem_tun counters (seed %s): %s" % (st["seed"], tot))
    accounted = tot["forwarded"] + tot["dropped_loss"] + tot["dropped_queue"] + tot["dropped_limit"] + \
        tot["write_failed"] + tot["held"]
    t.check("the link lost only what it meant to: every packet forwarded, dropped by the "
            "impairment or still held; none refused by a device",
            accounted == tot["in"] and tot["write_failed"] == 0, (tot["in"], 0),
            (accounted, tot["write_failed"]))
    if spec.get("loss"):
        ratio = tot["dropped_loss"] / max(1, tot["in"])
        t.check("the link dropped ~%s%% of %d packets (0.3%%..3%%, counted by netem_tun)"
                % (spec["loss"], tot["in"]), 0.003 <= ratio <= 0.03 and tot["in"] >= 500,
                "0.003..0.03 of >= 500", "%d of %d (%.4f)" % (tot["dropped_loss"], tot["in"], ratio))
    if spec.get("reorder"):
        t.check("the link reordered packets (>= 0.5%% of those forwarded arrived after later ones)",
                tot["reordered"] >= 0.005 * tot["forwarded"], ">= %d" % (0.005 * tot["forwarded"]),
                tot["reordered"])
    if spec.get("rate_kbit") and elapsed is not None:
        floor = size * 8 / (spec["rate_kbit"] * 1000.0)
        t.check("the rate limit held: %d bytes took >= %.2f s at %d kbit/s"
                % (size, 0.95 * floor, spec["rate_kbit"]), elapsed >= 0.95 * floor,
                ">= %.2f s" % (0.95 * floor), "%.2f s" % elapsed)
    return st


def l4_conf(target, splice="auto"):
    return """
workers: 2
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: %s:0, protocol: tcp, upstream: o, splice: %s }
upstreams:
  - { name: o, targets: [ { address: %s } ], timeouts: { connect: 5s } }
""" % (impair.CORE_IP, splice, target)


def l7_conf(target):
    return """
workers: 2
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: %s:0 }
upstreams:
  - { name: o, targets: [ { address: %s } ], timeouts: { connect: 5s, read: 30s } }
routes:
  - { name: r, upstream: o }
""" % (impair.CORE_IP, target)


def gateway(t, link, conf):
    return io.sluice(t, conf, prefix=["ip", "netns", "exec", link.core])


def bulk(t, mode, size, how, splice="auto"):
    """nginx in EDGE serves a random file of `size`; curl in EDGE fetches it through sluice
    (L4 tcp listener with `splice`, or L7) in CORE across the link impaired by `how`."""
    io.need(t, "curl", "nginx")
    link = impair.Link(t, **IMPAIR[how])
    root = h.new_tmpdir("www")
    sha = io.random_file(os.path.join(root, "f"), size)
    _, (p,) = io.nginx(t, root, ["sendfile on;"], netns=link.edge)
    target = "%s:%d" % (impair.EDGE_IP, p)
    s = gateway(t, link, l4_conf(target, splice) if mode == "l4" else l7_conf(target))
    out = os.path.join(h.new_tmpdir("out"), "f")
    limit = bound_s(size, how)
    path = "L4 (tcp listener, splice %s)" % splice if mode == "l4" else "L7 (HTTP/1.1 proxy)"
    r = io.curl("--max-time", "%.0f" % limit, "-o", out,
                "-w", "%{http_code} %{time_connect} %{time_starttransfer} %{time_total}",
                "http://%s:%d/f" % (impair.CORE_IP, s.port()), netns=link.edge, timeout=limit)
    got = io.file_sha256(out) if os.path.exists(out) else None
    w = r.stdout.decode().split()
    code, t_conn, t_first, t_total = (w[0], float(w[1]), float(w[2]), float(w[3])) if len(w) == 4 \
        else ("?", 0.0, 0.0, 0.0)
    t.info("curl: exit %d, %s, connect %.3f s, first byte %.3f s, total %.2f s (%.2f Mbit/s)%s"
           % (r.returncode, code, t_conn, t_first, t_total, size * 8 / max(t_total, 1e-6) / 1e6,
              r.stderr.decode(errors="replace").strip()))
    t.check("%d bytes through %s under %s: curl exit 0, 200, sha256-exact, within %.0f s"
            % (size, path, how, limit),
            r.returncode == 0 and code == "200" and got == sha and t_total <= limit,
            (0, "200", sha[:16], "<= %.0f" % limit),
            (r.returncode, code, got and got[:16], t_total))
    delay = IMPAIR[how].get("delay_ms", 0) / 1000.0
    if delay:
        t.check("curl saw the delay: its connect (1 RTT) >= %.0f ms and the first byte (>= 6 "
                "crossings: handshake, request and answer on both legs) >= %.0f ms"
                % (2000 * delay, 6000 * delay), t_conn >= 2 * delay and t_first >= 6 * delay,
                (">= %.3f" % (2 * delay), ">= %.3f" % (6 * delay)), (t_conn, t_first))
    st = check_impairment(t, link, how, s.port(), t_total, size)
    t.check("the link carried the body on both legs (origin->sluice and sluice->client: "
            ">= 2 x %d bytes forwarded)" % size, st["total"]["bytes"] >= 2 * size,
            ">= %d" % (2 * size), st["total"]["bytes"])
    no_connection_left(t, link, s, "the download")
    t.check("sluice is still running", s.alive(), "alive", "exited %s" % s.proc.poll())


@io.case("l4.bulk_1m_delay",
         "a 1 MiB file from nginx through a tcp listener (splice auto) arrives sha256-exact "
         "within its bound across a link delaying every packet 20 ms each way (RTT >= 40 ms "
         "measured); no connection left",
         budget=bound_s(MIB, "delay") + 30)
@io.case("l7.bulk_1m_delay",
         "a 1 MiB file from nginx through the HTTP/1.1 proxy arrives sha256-exact within its "
         "bound across a link delaying every packet 20 ms each way (RTT >= 40 ms measured); no "
         "connection left",
         budget=bound_s(MIB, "delay") + 30)
@io.case("l4.bulk_20m_delay_nosplice",
         "a 20 MiB file from nginx through a tcp listener (splice off) arrives sha256-exact "
         "within its bound across a link delaying every packet 20 ms each way (RTT >= 40 ms "
         "measured); no connection left",
         budget=bound_s(20 * MIB, "delay") + 30)
@io.case("l4.bulk_20m_loss",
         "a 20 MiB file from nginx through a tcp listener (splice auto) arrives sha256-exact "
         "within its bound across a link dropping 1% of packets each way (the drops counted); "
         "no connection left",
         budget=bound_s(20 * MIB, "loss") + 30)
@io.case("l4.bulk_20m_loss_nosplice",
         "a 20 MiB file from nginx through a tcp listener (splice off) arrives sha256-exact "
         "within its bound across a link dropping 1% of packets each way (the drops counted); "
         "no connection left",
         budget=bound_s(20 * MIB, "loss") + 30)
@io.case("l7.bulk_20m_loss",
         "a 20 MiB file from nginx through the HTTP/1.1 proxy arrives sha256-exact within its "
         "bound across a link dropping 1% of packets each way (the drops counted); no "
         "connection left",
         budget=bound_s(20 * MIB, "loss") + 30)
@io.case("l4.bulk_20m_reorder",
         "a 20 MiB file from nginx through a tcp listener (splice auto) arrives sha256-exact "
         "within its bound across a link holding 10% of packets 10 ms past later ones (the "
         "reorders counted); no connection left",
         budget=bound_s(20 * MIB, "reorder") + 30)
@io.case("l7.bulk_20m_reorder",
         "a 20 MiB file from nginx through the HTTP/1.1 proxy arrives sha256-exact within its "
         "bound across a link holding 10% of packets 10 ms past later ones (the reorders "
         "counted); no connection left",
         budget=bound_s(20 * MIB, "reorder") + 30)
@io.case("l4.bulk_1m_rate",
         "a 1 MiB file from nginx through a tcp listener (splice auto) arrives sha256-exact "
         "within its bound across a 10 Mbit/s link with a 100 ms tail-drop queue (the rate's "
         "floor on the time checked); no connection left",
         budget=bound_s(MIB, "rate") + 30)
@io.case("l7.bulk_1m_rate",
         "a 1 MiB file from nginx through the HTTP/1.1 proxy arrives sha256-exact within its "
         "bound across a 10 Mbit/s link with a 100 ms tail-drop queue (the rate's floor on the "
         "time checked); no connection left",
         budget=bound_s(MIB, "rate") + 30)
@io.case("l4.bulk_20m_combined",
         "a 20 MiB file from nginx through a tcp listener (splice auto) arrives sha256-exact "
         "within its bound across a link with delay 20 ms, loss 1%, reorder and 10 Mbit/s at "
         "once (each measured); no connection left",
         budget=bound_s(20 * MIB, "combined") + 30)
@io.case("l7.bulk_20m_combined",
         "a 20 MiB file from nginx through the HTTP/1.1 proxy arrives sha256-exact within its "
         "bound across a link with delay 20 ms, loss 1%, reorder and 10 Mbit/s at once (each "
         "measured); no connection left",
         budget=bound_s(20 * MIB, "combined") + 30)
@io.case("l4.bulk_1m_combined_nosplice",
         "a 1 MiB file from nginx through a tcp listener (splice off) arrives sha256-exact "
         "within its bound across a link with delay 20 ms, loss 1%, reorder and 10 Mbit/s at "
         "once (each measured); no connection left",
         budget=bound_s(MIB, "combined") + 30)
def bulk_case(t):
    """Every bulk case: mode, size, impairment and splice are read from the case's name."""
    _, _, mode, what = t.name.split(".")
    size, how, nosplice = re.match(r"bulk_(\d+)m_([a-z]+)(_nosplice)?$", what).groups()
    bulk(t, mode, int(size) * MIB, how, "off" if nosplice else "auto")


# ---------------------------------------------------------------- databases

def pg_allow_link(env, netns):
    """The cluster initdb made trusts loopback only: sluice connects from CORE_IP."""
    r = io.run(["psql", "-qAtc", "show hba_file"], env=env, netns=netns)
    hba = r.stdout.decode().strip()
    with open(hba, "a") as f:
        f.write("host all all %s/32 trust\n" % impair.CORE_IP)
    io.run(["psql", "-qAtc", "select pg_reload_conf()"], env=env, netns=netns)


def pgbench(t, how):
    io.need(t, "pgbench", "psql")
    link = impair.Link(t, **IMPAIR[how])
    _, pgport, env = io.postgres(t, netns=link.edge)
    pg_allow_link(env, link.edge)
    s = gateway(t, link, l4_conf("%s:%d" % (impair.EDGE_IP, pgport)))
    via = dict(env, PGHOST=impair.CORE_IP, PGPORT=str(s.port()), PGCONNECT_TIMEOUT="10")
    t0 = time.monotonic()
    r = impair.edge(link, ["pgbench", "-i", "-s", "1", "-q"], env=via, timeout=90)
    t.info("pgbench -i -s 1: %.1f s, exit %d: %s" % (time.monotonic() - t0, r.returncode,
                                                   r.stderr.decode(errors="replace")[-300:]))
    t.check("pgbench -i -s 1 through L4 under %s: exit 0 within 90 s" % how, r.returncode == 0,
            0, r.returncode)
    r = impair.edge(link, ["psql", "-qAtc", "select count(*), sum(abalance) from pgbench_accounts"],
                    env=via)
    t.check("... the origin holds the 100000 accounts it loaded (read back through sluice)",
            r.stdout.decode().strip() == "100000|0", "100000|0", r.stdout.decode().strip())
    t0 = time.monotonic()
    r = impair.edge(link, ["pgbench", "-c", "4", "-j", "2", "-T", "5", "-n"], env=via, timeout=60)
    out = r.stdout.decode(errors="replace")
    done = re.search(r"number of transactions actually processed: (\d+)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    t.info("pgbench -c 4 -T 5: %.1f s, exit %d\n%s%s" % (time.monotonic() - t0, r.returncode, out[-600:],
                                                       r.stderr.decode(errors="replace")[-300:]))
    t.check("pgbench -c 4 -T 5 through L4 under %s: exit 0, transactions processed, 0 failed" % how,
            r.returncode == 0 and done and int(done.group(1)) > 0 and failed and int(failed.group(1)) == 0,
            "exit 0, > 0 done, 0 failed",
            (r.returncode, done and done.group(1), failed and failed.group(1)))
    # every committed transaction is in the history: the client's count is the origin's
    r = impair.edge(link, ["psql", "-qAtc", "select count(*) from pgbench_history"], env=via)
    t.check("... pgbench_history holds exactly the transactions pgbench counted",
            done is not None and r.stdout.decode().strip() == done.group(1),
            done and done.group(1), r.stdout.decode().strip())
    check_impairment(t, link, how, s.port())
    no_connection_left(t, link, s, "pgbench")


@io.case("l4.pgbench_combined",
         "pgbench -i -s 1 and pgbench -c 4 -T 5 reach PostgreSQL through a "
         "tcp listener across a link with delay, loss, reorder and rate at once: 0 failed "
         "transactions, every one counted in the origin's history", budget=120)
def pgbench_combined(t):
    pgbench(t, "combined")


def redis(t, how):
    io.need(t, "redis-cli", "redis-benchmark")
    link = impair.Link(t, **IMPAIR[how])
    _, rport = io.redis(t, netns=link.edge)
    s = gateway(t, link, l4_conf("%s:%d" % (impair.EDGE_IP, rport)))
    value_path = os.path.join(h.new_tmpdir("val"), "v")
    sha = io.random_file(value_path, 10 * 1000 * 1000)
    cli = ["redis-cli", "-h", impair.CORE_IP, "-p", str(s.port())]
    t0 = time.monotonic()
    r = impair.edge(link, cli + ["-x", "SET", "big"], stdin=open(value_path, "rb"), timeout=60)
    r2 = impair.edge(link, cli + ["--no-raw", "STRLEN", "big"], timeout=30)
    g = impair.edge(link, cli + ["--raw", "GET", "big"], timeout=60)
    took = time.monotonic() - t0
    body = g.stdout[:-1] if g.stdout.endswith(b"\n") else g.stdout  # --raw adds one newline
    t.check("a 10 MB value SET then GET through L4 under %s: OK, STRLEN 10000000, sha256-exact, "
            "within 60 s" % how,
            r.stdout.strip() == b"OK" and r2.stdout.strip() == b"(integer) 10000000" and
            io.sha256(body) == sha and took < 60,
            ("OK", "(integer) 10000000", sha[:16], "< 60 s"),
            (r.stdout.strip()[:40], r2.stdout.strip()[:40], io.sha256(body)[:16], round(took, 1)))
    r = impair.edge(link, ["redis-benchmark", "-h", impair.CORE_IP, "-p", str(s.port()), "-c", "50",
                           "-P", "4", "-n", "1000", "-t", "set,get,incr,lpush,lpop", "-q"], timeout=60)
    out = (r.stdout + r.stderr).decode(errors="replace")
    rows = re.findall(r"^(\w+): ([\d.]+) requests per second", out.replace("\r", "\n"), re.M)
    t.info("redis-benchmark: exit %d, requests per second: %s" % (r.returncode, rows))
    t.check("redis-benchmark (50 clients pipelining 4, 1000 each of SET GET INCR LPUSH LPOP) "
            "under %s: exit 0, all 5 tests finish, no error" % how,
            r.returncode == 0 and len({k for k, _ in rows}) == 5 and "error" not in out.lower(),
            "exit 0, 5 rows, no error", (r.returncode, rows, "error" in out.lower()))
    # INCR ran 1000 times on one key: the origin's count is exact
    r = impair.edge(link, cli + ["GET", "counter:__rand_int__"])
    t.check("... the origin counted every INCR exactly once (1000)", r.stdout.strip() == b"1000",
            "1000", r.stdout.strip())
    check_impairment(t, link, how, s.port())
    no_connection_left(t, link, s, "redis-cli and redis-benchmark")


@io.case("l4.redis_loss",
         "a 10 MB value SET and GET sha256-exact and a redis-benchmark run of 5 "
         "commands through a tcp listener across a link losing 1% of packets: no error, every "
         "INCR counted once", budget=90)
@io.case("l4.redis_delay",
         "a 10 MB value SET and GET sha256-exact and a redis-benchmark run of 5 "
         "commands through a tcp listener across a link with a 40 ms RTT: no error, every INCR "
         "counted once", budget=90)
def redis_case(t):
    redis(t, t.name.rsplit("_", 1)[1])


if __name__ == "__main__":
    io.main()
