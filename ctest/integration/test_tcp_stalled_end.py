"""L4 TCP proxy: a session ended while bytes wait for a side that stopped taking them ends
with a reset toward both peers, never with a FIN (docs/operations.md, "TCP behaviour worth
knowing": a truncated stream is never passed off as a complete one with a FIN).

The upstream here is a socket of this test that accepts and then reads nothing (or writes
until its peer stops reading), so the gateway holds bytes it cannot write. For each
listener (`splice: auto` and `splice: off`):
  1. client -> upstream: the client sends until the gateway stops taking bytes; after
     idle_timeout (500ms) the upstream, reading at last, must meet a reset, not an EOF
     after the bytes that reached it;
  2. upstream -> client: the same the other way round: the client reading at last meets
     a reset;
  3. the control: a session whose bytes were all delivered still ends at idle_timeout
     with a FIN (the upstream reads every byte, then EOF);
  4. a reload with shutdown_timeout 1s (idle_timeout 60s) while the upstream takes
     nothing: the old generation's session cut at shutdown_timeout resets the upstream too;
  5. the same on SIGTERM: the process past its shutdown_timeout (1s) resets the cut
     sessions before it exits, instead of letting the kernel close them with a FIN.
Without the rule the gateway closed such sessions with a FIN after the bytes the
stalled side's socket held: its reader took a few MiB of a longer stream for all of it.
"""

import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("tcp_stalled_end", budget=50)
CHUNK = b"z" * 65536


class Stalled:
    """A listening socket whose accepted connections are kept, unread, until asked."""

    def __init__(self):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.address = "127.0.0.1:%d" % self.ls.getsockname()[1]
        self.conns = []
        self.cv = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            with self.cv:
                self.conns.append(c)
                self.cv.notify_all()

    def next(self, timeout=5.0):
        with self.cv:
            self.cv.wait_for(lambda: self.conns, timeout)
            return self.conns.pop(0) if self.conns else None


def fill(sock, seconds=3.0):
    """Sends until the other side stops taking bytes (a send blocks 0.3 s). Returns the count."""
    sock.settimeout(0.3)
    sent, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            sent += sock.send(CHUNK)
        except socket.timeout:
            break
        except OSError:  # the gateway already gave up on the session (a slow machine)
            break
    return sent


def drain(sock, timeout=5.0):
    """Reads to the end: (bytes read, 'eof' | 'reset' | 'timeout')."""
    sock.settimeout(timeout)
    n = 0
    try:
        while True:
            d = sock.recv(1 << 20)
            if not d:
                return n, "eof"
            n += len(d)
    except ConnectionResetError:
        return n, "reset"
    except socket.timeout:
        return n, "timeout"


def ended(gw, lis, result):
    """sluice_tcp_sessions_total{listener=lis,result=result}."""
    _, m = gw.metrics()
    return sum(h.metric_values(m, "sluice_tcp_sessions_total", listener=lis, result=result))


def wait_ended(gw, lis, result, before, timeout=5.0):
    """Waits until one more session of lis ended with result (the gateway ended it)."""
    deadline = time.monotonic() + timeout
    while ended(gw, lis, result) <= before and time.monotonic() < deadline:
        time.sleep(0.05)


def gateway(up, idle="500ms", name="stalled"):
    return h.start_sluice("""\
workers: 1
shutdown_timeout: 1s
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: sp, listen: 127.0.0.1:0, protocol: tcp, upstream: u, idle_timeout: %s }
  - { name: cp, listen: 127.0.0.1:0, protocol: tcp, upstream: u, idle_timeout: %s, splice: off }
upstreams:
  - { name: u, targets: [ { address: %s } ] }
""" % (idle, idle, up.address), suite=t, name=name)


S = {}


def setup(t):
    S["up"] = Stalled()
    S["gw"] = gateway(S["up"])


def idle_cut(t, inbound):
    """One side sends into a peer that reads nothing until idle_timeout ends the session with
    bytes still in the gateway: the stalled reader must meet a reset, not an EOF."""
    for lis in ("sp", "cp"):
        before = ended(S["gw"], lis, "timeout")
        c = socket.create_connection(("127.0.0.1", S["gw"].port(lis)), timeout=5)
        u = S["up"].next()
        sender, reader = (c, u) if inbound else (u, c)
        sent = fill(sender)
        wait_ended(S["gw"], lis, "timeout", before)  # idle_timeout 500ms after the last byte moved
        got, how = drain(reader)
        t.check("[%s] %s, ended at idle_timeout with %d of %d bytes undelivered: the %s meets a "
                "reset, not an EOF" % (lis, "client -> stalled upstream" if inbound else "upstream -> stalled client",
                                       sent - got, sent, "upstream" if inbound else "client"),
                how == "reset" and got < sent, "reset", (how, got, sent))
        c.close()
        u.close()


def test_idle_in(t):
    idle_cut(t, True)


def test_idle_out(t):
    idle_cut(t, False)


def test_idle_delivered(t):
    for lis in ("sp", "cp"):
        c = socket.create_connection(("127.0.0.1", S["gw"].port(lis)), timeout=5)
        u = S["up"].next()
        c.sendall(b"x" * 300000)
        got, how = drain(u, 5.0)  # all of it, then the idle_timeout's FIN
        t.check("[%s] every byte delivered: idle_timeout still ends the session with a FIN" % lis,
                (got, how) == (300000, "eof"), (300000, "eof"), (got, how))
        c.close()
        u.close()


def test_reload_shutdown_timeout(t):
    gw = gateway(S["up"], idle="60s", name="stalled-reload")  # only shutdown_timeout ends it
    c = socket.create_connection(("127.0.0.1", gw.port("cp")), timeout=5)
    u = S["up"].next()
    sent = fill(c)
    code, _ = gw.reload()
    t.check("the reload was applied", code == 200, 200, code)
    deadline = time.monotonic() + 6  # the old generation closes its sessions at shutdown_timeout (1s)
    while "closing 1 TCP session(s)" not in gw.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)
    got, how = drain(u)
    t.check("a reload, shutdown_timeout 1s, the upstream taking nothing: the old generation's "
            "session cut at shutdown_timeout resets the upstream", how == "reset" and got < sent, "reset",
            (how, got, sent))
    c.close()
    u.close()


def test_sigterm_shutdown_timeout(t):
    gw = gateway(S["up"], idle="60s", name="stalled-sigterm")  # only shutdown_timeout ends it
    pairs = []
    for lis in ("sp", "cp"):
        c = socket.create_connection(("127.0.0.1", gw.port(lis)), timeout=5)
        u = S["up"].next()
        pairs.append((lis, c, u, fill(c)))
    t0 = time.monotonic()
    gw.signal(signal.SIGTERM)
    code = gw.wait(6)
    t.check("SIGTERM with sessions stalled: sluice exits 0 soon after shutdown_timeout (1s)",
            code == 0 and time.monotonic() - t0 < 4, 0, (code, round(time.monotonic() - t0, 2)))
    for lis, c, u, sent in pairs:
        got, how = drain(u)
        t.check("[%s] SIGTERM, shutdown_timeout 1s, the upstream taking nothing: the session cut "
                "at shutdown_timeout resets the upstream (%d of %d bytes undelivered)" % (lis, sent - got, sent),
                how == "reset" and got < sent, "reset", (how, got, sent))
        c.close()
        u.close()


if __name__ == "__main__":
    t.run(setup, test_idle_in, test_idle_out, test_idle_delivered, test_reload_shutdown_timeout,
          test_sigterm_shutdown_timeout)
