"""impair — the impaired link of the interop matrix's netem cases (peer_netem.py).

Two network namespaces made by the case, EDGE (clients and origins) and CORE (sluice),
joined by one point-to-point link that ctest/interop/netem_tun.c carries: a TUN device in
each namespace and a relay between them that delays, drops, reorders and rate-limits IP
packets, per direction, and counts what it did. The kernel here has no netem
(CONFIG_NET_SCH_NETEM unset, no modules): docs/DECISIONS.md, docs/testing.md.

Client -> sluice and sluice -> origin both cross the link: EDGE_IP is the origins' and
clients' address, CORE_IP sluice's. The namespaces are named slnetem-<pid>-<n>{e,c}; they
and the relay are removed by the harness's cleanup (end of case, watchdog, SIGTERM), and a
later case removes those of a test process that is gone (one killed by SIGKILL).
"""

import json
import os
import re
import signal
import subprocess
import time

import interop as io

h = io.h
BIN = (os.environ.get("SLUICE_NETEM_TUN")
       or os.path.join(os.path.dirname(h.BIN), "ctest", "netem_tun"))
EDGE_IP, CORE_IP = "10.203.0.1", "10.203.0.2"
PREFIX = "slnetem"
_count = [0]


def _ip(*args, check=True):
    r = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=20)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


def reap_stale():
    """Removes the namespaces of test processes that are gone (killed before cleanup ran)."""
    for name in _ip("netns", "list", check=False).stdout.split():
        m = re.match(r"%s-(\d+)-\d+[ec]$" % PREFIX, name)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            _ip("netns", "del", name, check=False)


class _Namespaces:
    """The case's two namespaces, deleted by the harness's cleanup (after every process in
    them was stopped: it was registered first, and cleanup goes in reverse)."""

    def __init__(self, names):
        self.names = names

    def stop(self, timeout=None):
        for n in self.names:
            _ip("netns", "del", n, check=False)
        h._unregister(self)

    kill = stop


class Link:
    """EDGE and CORE joined by netem_tun with these impairments (each direction on its own):
    delay_ms, loss (percent), reorder (percent held reorder_extra_ms more), rate_kbit
    (0: none; queue_ms of backlog before tail drop). The random draws come from `seed`:
    SLUICE_NETEM_SEED, else 27, so a case sees the same drop and reorder pattern run after
    run (SLUICE_NETEM_SEED=random: a new one each run, printed with the counters)."""

    def __init__(self, t, delay_ms=0, loss=0, reorder=0, reorder_extra_ms=10, rate_kbit=0,
                 queue_ms=100, seed=None):
        if seed is None:
            seed = os.environ.get("SLUICE_NETEM_SEED", "27")
        io.need(t, BIN, "ip")
        reap_stale()
        _count[0] += 1
        base = "%s-%d-%d" % (PREFIX, os.getpid(), _count[0])
        self.edge, self.core = base + "e", base + "c"
        self.spec = dict(delay_ms=delay_ms, loss=loss, reorder=reorder, rate_kbit=rate_kbit)
        ns = _Namespaces([self.edge, self.core])
        h._register(ns)
        for n in (self.edge, self.core):
            _ip("netns", "add", n)
            _ip("-n", n, "link", "set", "lo", "up")
        d = h.new_tmpdir("netem")
        self.stats_path = os.path.join(d, "stats.json")
        ready = os.path.join(d, "ready")
        argv = [BIN, "--ns-a", "/var/run/netns/" + self.edge, "--dev-a", "nte",
                "--ns-b", "/var/run/netns/" + self.core, "--dev-b", "ntc",
                "--delay-ms", delay_ms, "--loss", loss, "--reorder", reorder,
                "--reorder-extra-ms", reorder_extra_ms, "--rate-kbit", rate_kbit,
                "--queue-ms", queue_ms, "--stats", self.stats_path, "--ready-file", ready]
        if seed != "random":
            argv += ["--seed", seed]
        self.log_path = os.path.join(d, "netem_tun.log")
        self.proc = io.spawn([str(a) for a in argv], log=self.log_path)
        deadline = time.monotonic() + 10
        while not os.path.exists(ready):
            if not self.proc.alive() or time.monotonic() > deadline:
                with open(self.log_path, errors="replace") as f:
                    raise RuntimeError("netem_tun did not start: %s" % f.read()[-2000:])
            time.sleep(0.01)
        for n, dev, mine, peer in ((self.edge, "nte", EDGE_IP, CORE_IP),
                                   (self.core, "ntc", CORE_IP, EDGE_IP)):
            _ip("-n", n, "addr", "add", mine, "peer", peer, "dev", dev)
            # no IPv6 link-local address: the link carries the case's IPv4 traffic only
            _ip("-n", n, "link", "set", dev, "addrgenmode", "none")
            _ip("-n", n, "link", "set", dev, "txqueuelen", "10000", "up")
        t.info("link %s <-> %s through netem_tun: %s" % (self.edge, self.core, self.spec))

    def stats(self):
        """The relay's counters now (SIGUSR1 makes it write them): a dict with a_to_b (EDGE
        to CORE), b_to_a and total, each in/forwarded/bytes/dropped_loss/dropped_queue/
        dropped_limit/reordered/delayed_max_us, and the seed."""
        if os.path.exists(self.stats_path):
            os.unlink(self.stats_path)
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                with open(self.stats_path) as f:
                    return json.load(f)
            except (OSError, ValueError):
                time.sleep(0.01)
        raise RuntimeError("netem_tun wrote no counters")

    def connect_ms(self, port, tries=3):
        """The shortest of `tries` TCP connects from EDGE to CORE_IP:port, in ms (one RTT)."""
        code = ("import socket, time\nbest = 1e9\nfor _ in range(%d):\n"
                "    t0 = time.monotonic(); s = socket.create_connection(('%s', %d), timeout=10)\n"
                "    best = min(best, time.monotonic() - t0); s.close()\nprint(best * 1000)\n"
                % (tries, CORE_IP, port))
        r = edge(self, ["/usr/bin/python3", "-c", code], timeout=60)
        if r.returncode != 0:
            raise RuntimeError("connect from EDGE: %s" % r.stderr.decode(errors="replace"))
        return float(r.stdout)


def edge(link, argv, timeout=120, stdin=None, env=None):
    """Runs argv in EDGE (a client) with stdin (a file, default none); output captured."""
    return subprocess.run(["ip", "netns", "exec", link.edge] + list(argv), capture_output=True,
                          timeout=timeout, stdin=stdin or subprocess.DEVNULL, env=env)


def core(link, argv, timeout=30):
    """Runs argv in CORE (where sluice is), output captured."""
    return io.run(argv, netns=link.core, timeout=timeout)
