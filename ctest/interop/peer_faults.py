"""Faults: a real origin (nginx) and real clients (curl, and a raw socket client for the one
that stops reading) through sluice while something goes wrong: the origin killed
mid-transfer, the origin restarted, sluice reloaded or drained mid-transfer, a client that
stops reading. L7 (HTTP/1.1 proxy; HTTP/2 to the client too) and L4 (tcp listener).

Transfers are made long enough to be caught in flight with curl's --limit-rate (the client
reads at a bounded average pace, so "mid-transfer" is a position in the body, not a race).
"""

import hashlib
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

h = io.h
MIB = 1 << 20


def origin(t, size):
    """nginx serving /f, `size` random bytes, and /small, 64 KiB; returns (Proc, port,
    sha256 of /f, path of /f). SMALL[0] is /small's sha256."""
    io.need(t, "curl", "nginx")
    root = h.new_tmpdir("www")
    path = os.path.join(root, "f")
    sha = io.random_file(path, size)
    SMALL[0] = io.random_file(os.path.join(root, "small"), 64 << 10)
    proc, (p,) = io.nginx(t, root, ["sendfile on;"])
    return proc, p, sha, path


SMALL = [None]


def l7_conf(p, extra="", upstream_extra=""):
    return """
workers: 2
admin: { listen: 127.0.0.1:0 }
%s
listeners:
  - { name: web, listen: 127.0.0.1:0 }
upstreams:
  - { name: o, targets: [ { address: 127.0.0.1:%d } ]%s }
routes:
  - { name: r, upstream: o }
""" % (extra, p, upstream_extra)


def l4_conf(p, extra="", upstream_extra=""):
    return """
workers: 2
admin: { listen: 127.0.0.1:0 }
%s
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: tcp, upstream: o }
upstreams:
  - { name: o, targets: [ { address: 127.0.0.1:%d } ]%s }
""" % (extra, p, upstream_extra)


class Download:
    """curl fetching `url` into a file in the background (-sS, exit code and -w kept)."""

    def __init__(self, url, *args):
        d = h.new_tmpdir("dl")
        self.out, self.log = os.path.join(d, "body"), os.path.join(d, "curl.log")
        self.proc = io.spawn(["curl", "-sS", "-o", self.out, "-w", "\n%{http_code} %{size_download}\n"]
                             + [str(a) for a in args] + [url], log=self.log)
        self.t0 = time.monotonic()

    def size(self):
        try:
            return os.path.getsize(self.out)
        except OSError:
            return 0

    def wait_bytes(self, n, timeout=20.0):
        """Waits until `n` bytes arrived; False if curl ended or the time ran out first."""
        deadline = time.monotonic() + timeout
        while self.size() < n:
            if not self.proc.alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def wait(self, timeout):
        """curl's exit code (None if still running after `timeout`), and the seconds since
        it started."""
        try:
            self.proc.proc.wait(timeout)
        except Exception:
            return None, time.monotonic() - self.t0
        self.took = time.monotonic() - self.t0
        return self.proc.proc.returncode, self.took

    def status(self):
        with open(self.log, errors="replace") as f:
            return f.read().strip()

    def sha256(self):
        return io.file_sha256(self.out) if os.path.exists(self.out) else None

    def is_prefix_of(self, path):
        """The bytes received are exactly the start of `path` (a cut, never a corruption)."""
        n = self.size()
        with open(self.out, "rb") as a, open(path, "rb") as b:
            while n > 0:
                x, y = a.read(min(n, MIB)), b.read(min(n, MIB))
                if x != y:
                    return False
                n -= len(x)
        return True


def restart_origin(proc):
    """Starts nginx again on the very config (and port) it ran with."""
    again = io.spawn(list(proc.proc.args))
    again.__class__ = io.Nginx
    return again


def metric(s, name, **labels):
    _, samples = s.metrics()
    return sum(h.metric_values(samples, name, **labels))


def settled_metric(s, name, want, timeout=5.0, **labels):
    """The metric's value once it equals `want`, or its last value after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        v = metric(s, name, **labels)
        if v == want or time.monotonic() > deadline:
            return v
        time.sleep(0.05)


def small(s):
    """One fetch of /small through sluice on a fresh connection: (ok: 200 and sha256-exact,
    curl's exit code, the HTTP status, seconds it took)."""
    t0 = time.monotonic()
    r = io.curl("--max-time", 5, "-D", "-", "http://127.0.0.1:%d/small" % s.port(), timeout=5)
    head, _, body = r.stdout.partition(b"\r\n\r\n")
    code = head.split(b" ")[1].decode() if head.startswith(b"HTTP/") else None
    ok = r.returncode == 0 and code == "200" and io.sha256(body) == SMALL[0]
    return ok, r.returncode, code, time.monotonic() - t0


def alive_check(t, s, what):
    ok, rc, code, took = small(s)
    t.check("sluice keeps serving after %s: the next fetch through it is 200, sha256-exact" % what,
            ok, (True, 0, "200"), (ok, rc, code, round(took, 2)))


# ---------------------------------------------------------------- origin killed mid-transfer

def origin_killed(t, mode, h2=False):
    size = 100 * MIB
    proc, p, sha, path = origin(t, size)
    s = io.sluice(t, (l4_conf if mode == "l4" else l7_conf)(p))
    args = ["--max-time", 30, "--limit-rate", "20M"] + (["--http2-prior-knowledge"] if h2 else [])
    dl = Download("http://127.0.0.1:%d/f" % s.port(), *args)
    started = dl.wait_bytes(4 * MIB)
    at = dl.size()
    proc.kill()
    rc, took = dl.wait(15)
    got = dl.size()
    t.info("origin killed at %d bytes received; curl exit %s after %.1f s with %d bytes: %s"
           % (at, rc, took, got, dl.status()))
    # 18: partial file (Content-Length not reached), 56: receive failure (reset),
    # 92: HTTP/2 stream error (RST_STREAM)
    expected = (92, 18, 56) if h2 else (18, 56)
    t.check("the transfer was in flight when the origin died (4 MiB of 100 received)", started,
            True, (started, at))
    t.check("curl got an aborted transfer (exit %s), never a complete-looking truncated body, "
            "within 15 s" % "/".join(map(str, expected)), rc in expected and got < size,
            (expected, "< %d bytes" % size), (rc, got))
    t.check("... and what it got is exactly the file's first %d bytes" % got, dl.is_prefix_of(path),
            True, False)
    if mode == "l7":
        deadline = time.monotonic() + 5
        while "upstream failed mid-response" not in s.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        t.check("sluice logged it: 'upstream failed mid-response: upstream closed mid-body'",
                "upstream failed mid-response: upstream closed mid-body" in s.log(), "in the log",
                s.log()[-600:])
        line = next((ln for ln in s.log().splitlines() if "upstream failed mid-response" in ln), "")
        t.check("... naming the target that failed (an operator's first question)",
                '"target":"127.0.0.1:%d"' % p in line, '"target":"127.0.0.1:%d"' % p, line)
        n = metric(s, "sluice_upstream_requests_total", upstream="o", code="0")
        t.check("sluice counted it: sluice_upstream_requests_total{code=\"0\"} (no whole response) is 1",
                n == 1, 1, n)
    else:
        n = settled_metric(s, "sluice_connections_active", 0, listener="web")
        t.check("the L4 session is gone (sluice_connections_active 0)", n == 0, 0, n)
    restart_origin(proc)
    io.wait_port(p)
    alive_check(t, s, "the origin died mid-transfer (and came back)")


@io.case("l7.origin_killed_mid_body", "nginx SIGKILLed 4 MiB into a 100 MiB download through the "
         "HTTP/1.1 proxy: curl gets an aborted transfer (exit 18/56) holding an exact prefix, never "
         "a complete-looking body; sluice logs and counts it and serves the next request", budget=60)
@io.case("l7.origin_killed_mid_body_h2", "nginx SIGKILLed 4 MiB into a 100 MiB download that curl "
         "fetches over HTTP/2 (h2c): the stream is reset (curl exit 92/18/56) with an exact prefix, "
         "never a clean end; sluice logs and counts it and serves the next request", budget=60)
@io.case("l4.origin_killed_mid_body", "nginx SIGKILLed 4 MiB into a 100 MiB download through a tcp "
         "listener: the client's connection is closed (curl exit 18/56) with an exact prefix, the "
         "session is gone, and the next connection is served", budget=60)
def origin_killed_case(t):
    """Mode and protocol from the case's name: l7.origin_killed_mid_body_h2 is HTTP/2."""
    mode = t.name.split(".")[2]
    origin_killed(t, mode, h2=t.name.endswith("_h2"))


# ---------------------------------------------------------------- origin restarted

HEALTH = {"l7": "{ type: http, path: /small, interval: 200ms, timeout: 200ms, healthy_threshold: 2, "
                "unhealthy_threshold: 2 }",
          "l4": "{ type: tcp, interval: 200ms, timeout: 200ms, healthy_threshold: 2, "
                "unhealthy_threshold: 2 }"}


def origin_restarted(t, mode):
    proc, p, _, _ = origin(t, 64 << 10)
    up = ", timeouts: { connect: 1s%s }, health: { active: %s }" % (", read: 5s" if mode == "l7" else "",
                                                                  HEALTH[mode])
    s = io.sluice(t, (l4_conf if mode == "l4" else l7_conf)(p, upstream_extra=up))
    before = [small(s) for _ in range(3)]
    t.check("before: 3 of 3 fetches through sluice are 200 and sha256-exact", all(x[0] for x in before),
            3, before)
    proc.kill()
    down = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.5:
        down.append(small(s))
    # L7: a gateway error; L4: the connection closed without an answer (52 empty reply, 56 reset)
    failed_fast = all(not ok and took < 3 and (code in ("502", "503") if mode == "l7" else rc in (52, 56))
                      for ok, rc, code, took in down)
    t.check("while the origin is down: every fetch fails fast (< 3 s) with %s, none hangs"
            % ("502/503" if mode == "l7" else "the connection closed (curl 52/56)"),
            failed_fast and down, "all failed fast", sorted({(x[1], x[2]) for x in down}))
    healthy = settled_metric(s, "sluice_target_healthy", 0, timeout=3, upstream="o")
    t.check("the probes took the dead origin out (sluice_target_healthy 0)", healthy == 0, 0, healthy)
    restart_origin(proc)
    io.wait_port(p)
    t_up = time.monotonic()
    after = []
    while time.monotonic() - t_up < 10:
        after.append(small(s))
        if after[-1][0]:
            break
    back = time.monotonic() - t_up
    t.info("after the restart: %d fetches until the first good one, %.2f s" % (len(after), back))
    t.check("after the restart a fetch succeeds within 3 s (2 probes at 200 ms, and margin), "
            "none hangs meanwhile", after[-1][0] and back < 3 and all(x[3] < 3 for x in after),
            "< 3 s", (round(back, 2), [(x[1], x[2], round(x[3], 2)) for x in after[-5:]]))
    then = [small(s) for _ in range(10)]
    t.check("... and the next 10 fetches are all 200 and sha256-exact", all(x[0] for x in then),
            10, sum(x[0] for x in then))


@io.case("l7.origin_restarted", "nginx killed and started again behind the HTTP/1.1 proxy with active "
         "probes: while it is down each request fails fast with 502/503 (none hangs), the probes "
         "mark it out, and within 3 s of its return requests are served sha256-exact", budget=60)
@io.case("l4.origin_restarted", "nginx killed and started again behind a tcp listener with tcp "
         "probes: while it is down each connection is closed fast (none hangs), and within 3 s of "
         "its return connections are served sha256-exact", budget=60)
def origin_restarted_case(t):
    origin_restarted(t, t.name.split(".")[2])


# ---------------------------------------------------------------- reload and drain mid-transfer

def reload_mid(t, mode):
    size = 20 * MIB
    _, p, sha, _ = origin(t, size)
    s = io.sluice(t, (l4_conf if mode == "l4" else l7_conf)(p))
    dl = Download("http://127.0.0.1:%d/f" % s.port(), "--max-time", 30, "--limit-rate", "8M")
    started = dl.wait_bytes(4 * MIB)
    gen0 = s.status()["generation"]
    code, answer = s.reload()
    at = dl.size()
    gen1 = s.status()["generation"]
    rc, took = dl.wait(30)
    t.info("reload at %d bytes: %s %s; curl exit %s after %.1f s: %s"
           % (at, code, answer, rc, took, dl.status()))
    t.check("the reload applied mid-transfer: 200, generation %s -> %s, with 4..20 MiB received"
            % (gen0, gen0 + 1), started and code == 200 and gen1 == gen0 + 1 and at < size,
            (True, 200, gen0 + 1, "< %d" % size), (started, code, gen1, at))
    t.check("the download in flight across the reload completes: curl exit 0, 200, 20 MiB "
            "sha256-exact within 30 s",
            rc == 0 and dl.status().endswith("200 %d" % size) and dl.sha256() == sha,
            (0, "200 %d" % size, sha[:16]), (rc, dl.status()[-40:], (dl.sha256() or "")[:16]))
    alive_check(t, s, "the reload (the new generation serves)")


@io.case("l7.reload_mid_transfer", "a 20 MiB download through the HTTP/1.1 proxy in flight across "
         "POST /reload completes sha256-exact while the new generation takes over", budget=60)
@io.case("l4.reload_mid_transfer", "a 20 MiB download through a tcp listener in flight across "
         "POST /reload completes sha256-exact while the new generation takes over", budget=60)
def reload_mid_case(t):
    reload_mid(t, t.name.split(".")[2])


def drain(t, mode, cut):
    """SIGTERM while a download is in flight: shutdown_timeout 30s lets 20 MiB read at 8 MiB/s
    finish; 1s cuts 100 MiB read at 4 MiB/s. curl's --limit-rate takes a first burst (10 MiB
    and more) and then sleeps until its average is back at the rate, so a cut curl notices
    the close only when it wakes: its exit is awaited that long, not timed."""
    size = 100 * MIB if cut else 20 * MIB
    _, p, sha, path = origin(t, size)
    timeout = 1 if cut else 30
    s = io.sluice(t, (l4_conf if mode == "l4" else l7_conf)(p, extra="shutdown_timeout: %ds" % timeout))
    dl = Download("http://127.0.0.1:%d/f" % s.port(), "--max-time", 40,
                  "--limit-rate", "4M" if cut else "8M")
    started = dl.wait_bytes(2 * MIB)
    at = dl.size()
    t_term = time.monotonic()
    s.signal(signal.SIGTERM)
    refused = None  # curl's exit codes until one is 7 (refused), for at most 2 s
    tries = []
    while time.monotonic() - t_term < 2 and refused is None:
        rc = io.curl("--max-time", 2, "http://127.0.0.1:%d/small" % s.port(), timeout=2).returncode
        tries.append(rc)
        refused = time.monotonic() - t_term if rc == 7 else None
        time.sleep(0.05)
    t.check("the drain began with the download in flight (2 MiB received, not all), and new "
            "connections are refused (curl exit 7) within 2 s",
            started and at < size and refused is not None,
            (True, "< %d" % size, "7 within 2 s"), (started, at, tries))
    if cut:
        code = s.wait(timeout + 5)
        exited = time.monotonic() - t_term
        rc, _ = dl.wait(20)
        t.info("sluice exit %s %.2f s after SIGTERM; curl exit %s with %d bytes: %s"
               % (code, exited, rc, dl.size(), dl.status()))
        t.check("sluice exits 0 within shutdown_timeout (1 s) + 4 s of SIGTERM, long before the "
                "transfer could end (25 s at 4 MiB/s)", code == 0 and exited < 5.0,
                (0, "< 5.0 s"), (code, round(exited, 2)))
        t.check("the transfer was cut: curl exit 18/56 with fewer than 100 MiB, an exact prefix",
                rc in (18, 56) and dl.size() < size and dl.is_prefix_of(path),
                (18, "< %d" % size, "prefix"), (rc, dl.size()))
    else:
        rc, took = dl.wait(30)
        t_done = time.monotonic()
        code = s.wait(10)
        lag = time.monotonic() - t_done
        t.info("curl exit %s after %.1f s; sluice exit %s %.2f s after it" % (rc, took, code, lag))
        t.check("the download in flight across SIGTERM completes: curl exit 0, 200, 20 MiB "
                "sha256-exact", rc == 0 and dl.status().endswith("200 %d" % size) and dl.sha256() == sha,
                (0, "200 %d" % size, sha[:16]), (rc, dl.status()[-40:], (dl.sha256() or "")[:16]))
        t.check("sluice then exits 0, within 5 s of the last transfer's end (not at its 30 s "
                "shutdown_timeout)", code == 0 and lag < 5, (0, "< 5 s"), (code, round(lag, 2)))


@io.case("l7.drain_completes", "SIGTERM during a 20 MiB download through the HTTP/1.1 proxy with "
         "shutdown_timeout 30s: new connections are refused, the download completes sha256-exact and "
         "sluice exits 0 right after it", budget=60)
@io.case("l7.drain_cut", "SIGTERM during a 100 MiB download through the HTTP/1.1 proxy with "
         "shutdown_timeout 1s: sluice exits 0 within 5 s and the client's transfer is cut (curl "
         "exit 18/56, an exact prefix), never completed falsely", budget=60)
@io.case("l4.drain_completes", "SIGTERM during a 20 MiB download through a tcp listener with "
         "shutdown_timeout 30s: new connections are refused, the download completes sha256-exact and "
         "sluice exits 0 right after it", budget=60)
@io.case("l4.drain_cut", "SIGTERM during a 100 MiB download through a tcp listener with "
         "shutdown_timeout 1s: sluice exits 0 within 5 s and the client's connection is closed "
         "(curl exit 18/56, an exact prefix)", budget=60)
def drain_case(t):
    drain(t, t.name.split(".")[2], cut=t.name.endswith("_cut"))


# ---------------------------------------------------------------- a client that stops reading

def stalled_reader(t, mode):
    """A raw client asks for 100 MiB, reads 256 KiB of it, then nothing for 10 s: sluice must
    hold its buffers, not the body (RSS sampled), then deliver the rest exactly."""
    size = 100 * MIB
    _, p, sha, _ = origin(t, size)
    s = io.sluice(t, (l4_conf if mode == "l4" else l7_conf)(p))
    time.sleep(0.2)
    base = s.rss_kb()
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    c.settimeout(30)
    c.connect(("127.0.0.1", s.port()))
    c.sendall(b"GET /f HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf or len(buf) < 256 << 10:
        piece = c.recv(65536)
        if not piece:
            break
        buf += piece
    head, _, body = buf.partition(b"\r\n\r\n")
    digest = hashlib.sha256(body)
    got = len(body)
    peak = base
    out_mid = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        peak = max(peak, s.rss_kb())
        if mode == "l4" and time.monotonic() - t0 > 5 and not out_mid:
            out_mid.append(metric(s, "sluice_tcp_bytes_total", listener="web", direction="out"))
        time.sleep(0.25)
    if mode == "l4":
        out_mid.append(metric(s, "sluice_tcp_bytes_total", listener="web", direction="out"))
    t.info("RSS %d KiB before, peak %d KiB (+%d KiB) during the 10 s pause"
           % (base, peak, peak - base))
    t.check("while the client reads nothing for 10 s, sluice's RSS grows by less than 24 MiB "
            "(its buffers, not the 100 MiB body)", peak - base < 24 * 1024, "< 24576 KiB",
            "%d KiB" % (peak - base))
    if mode == "l4":
        t.check("... and it stopped reading the origin: no byte taken from it in the pause's "
                "second half, and far less than the body in all", out_mid[0] == out_mid[1] and
                out_mid[1] < size / 2, ("equal", "< %d" % (size // 2)), out_mid)
    t1 = time.monotonic()
    while True:
        piece = c.recv(1 << 20)
        if not piece:
            break
        got += len(piece)
        digest.update(piece)
    c.close()
    took = time.monotonic() - t1
    t.check("then the client reads on and gets the whole body: 200, 100 MiB sha256-exact within 30 s",
            head.startswith(b"HTTP/1.1 200") and got == size and digest.hexdigest() == sha and took < 30,
            ("HTTP/1.1 200", size, sha[:16]), (head[:15], got, digest.hexdigest()[:16], round(took, 1)))


@io.case("l7.stalled_reader", "a client that reads nothing of a 100 MiB body from nginx for 10 s "
         "through the HTTP/1.1 proxy: sluice's RSS grows by less than 24 MiB, then the client "
         "resumes and gets the body sha256-exact", budget=60)
@io.case("l4.stalled_reader", "a client that reads nothing of a 100 MiB body from nginx for 10 s "
         "through a tcp listener: sluice's RSS grows by less than 24 MiB and it stops reading the "
         "origin, then the client resumes and gets the body sha256-exact", budget=60)
def stalled_reader_case(t):
    stalled_reader(t, t.name.split(".")[2])


if __name__ == "__main__":
    io.main()
