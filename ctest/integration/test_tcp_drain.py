"""L4 TCP proxy (issue 7), acceptance 5: drain.

  1. SIGTERM with an open session: a new connection 0.3 s later is refused, the open
     session goes on moving bytes both ways and finishes, and the process exits 0 as
     soon as it has (well before shutdown_timeout);
  2. a session that never ends is closed at shutdown_timeout, and the process exits 0;
     a second SIGTERM during the drain closes it at once (and exits 0);
  3. a reload (SIGHUP) keeps a session open on the old generation while new connections
     are served by the new one; the old one closes it at shutdown_timeout. Meanwhile
     /metrics shows the old generation's counts (bytes, open sessions) with the new one's:
     no counter drops at the reload, none is counted twice once the old workers stop.
  4. SIGTERM after a reload that shortened shutdown_timeout: the old generation's session
     (its own deadline, from the old config, still far) is cut by its worker at the new
     shutdown_timeout like the new generation's. It was not: the process waited its 1 s
     grace, logged "a worker did not cut its TCP sessions", and exited, leaving the kernel to
     close the session with a FIN whatever bytes still waited.
"""

import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import test_tcp_proxy as tp  # noqa: E402

S = {}


def setup(t):
    S["peer"] = tp.Peer()


def refused(port):
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=1)
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        return "connect failed: %r" % e
    try:
        c.sendall(b"SINK\n")
        c.shutdown(socket.SHUT_WR)
        d = c.recv(100)
        return "served: %r" % d if d else "accepted, then closed"
    except OSError as e:
        return "accepted, then %s" % type(e).__name__
    finally:
        c.close()


def tcp_counts(gw):
    """(sluice_tcp_bytes_total{listener=t,direction=in}, sluice_connections_active{listener=t})."""
    _, m = gw.metrics()
    return (sum(h.metric_values(m, "sluice_tcp_bytes_total", listener="t", direction="in")),
            sum(h.metric_values(m, "sluice_connections_active", listener="t")))


def test_sigterm_finishes_session(t):
    gw = tp.gateway(t, [S["peer"].address], workers=2, top="", name="term")
    gw_cfg = open(gw.config_path).read().replace("shutdown_timeout: 5s", "shutdown_timeout: 8s")
    gw.stop()
    gw = h.start_sluice(gw_cfg, suite=t, name="term8")
    port = gw.port("t")
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(b"SINK\n" + b"a" * 100000)
    # the session is the gateway's (accepted, its bytes read) before the SIGTERM: polled
    h.poll(lambda: tcp_counts(gw), lambda v: v == (100005, 1))
    gw.signal(signal.SIGTERM)
    # the listeners close as the drain starts; a connection made before that is served
    how = h.poll(lambda: refused(port), lambda how: not how.startswith("served"))
    t.check("a new connection after SIGTERM is refused or never served", not how.startswith("served"),
            "refused", how)
    c.sendall(b"b" * 200000)  # the open session still moves bytes
    c.shutdown(socket.SHUT_WR)
    t0 = time.monotonic()
    answer = c.recv(100)
    c.close()
    t.check("the open session finished after SIGTERM, with all its bytes", answer == b"300000\n",
            b"300000\n", answer)
    rc = gw.wait(5)
    took = time.monotonic() - t0
    t.check("the process exited 0 right after the last session ended (not at shutdown_timeout)",
            rc == 0 and took < 3, "0 within 3 s", (rc, round(took, 2)))


def held_session(t, name, timeout, workers=1):
    """A gateway with shutdown_timeout `timeout` holding one session that never ends."""
    gw = tp.gateway(t, [S["peer"].address], workers=workers, top="", name=name)
    cfg = open(gw.config_path).read().replace("shutdown_timeout: 5s", "shutdown_timeout: " + timeout)
    gw.stop()
    gw = h.start_sluice(cfg, suite=t, name=name + "-" + timeout)
    c = h.Client(gw.port("t"), timeout=10)
    c.send(b"SINK\n")
    h.poll(lambda: tcp_counts(gw), lambda v: v == (5, 1))  # the gateway holds the session
    return gw, c


def test_sigterm_deadline(t):
    gw, c = held_session(t, "deadline", "1500ms")
    t0 = time.monotonic()
    gw.signal(signal.SIGTERM)
    data, how = c.read_until_close(6)
    took = time.monotonic() - t0
    t.check("a session that never ends is closed at shutdown_timeout (1.5 s)",
            how in ("eof", "reset") and 1.2 < took < 3.5, "closed after ~1.5 s", (how, round(took, 2)))
    rc = gw.wait(5)
    t.check("and the process exits 0", rc == 0, 0, rc)


def test_second_sigterm(t):
    gw, c = held_session(t, "twice", "60s", workers=2)
    gw.signal(signal.SIGTERM)
    time.sleep(0.5)
    t.check("after one SIGTERM the drain waits for the open session", gw.alive(), "running", gw.alive())
    t0 = time.monotonic()
    gw.signal(signal.SIGTERM)
    data, how = c.read_until_close(10)
    took = time.monotonic() - t0
    rc = gw.wait(5)
    t.check("a second SIGTERM closes what is left at once (not at shutdown_timeout, 60 s) and exits 0",
            how in ("eof", "reset") and took < 3 and rc == 0, "closed within 3 s, exit 0", (how, round(took, 2), rc))
    t.check("and says so in the log", "during the drain: closing what is left now" in gw.log(),
            "the log line", gw.log()[-300:])


def test_reload(t):
    gw = tp.gateway(t, [S["peer"].address], top="", name="reload")
    cfg = open(gw.config_path).read().replace("shutdown_timeout: 5s", "shutdown_timeout: 1500ms")
    gw.stop()
    gw = h.start_sluice(cfg, suite=t, name="reload15")
    port = gw.port("t")
    old = h.Client(port, timeout=10)
    old.send(b"SINK\n" + b"x" * 1000)
    done = h.Client(port, timeout=10)
    done.send(b"SINK\n" + b"x" * 1000)
    # both sessions accepted and their bytes read (polled: the gateway does it on its own time)
    before = h.poll(lambda: tcp_counts(gw), lambda v: v == (2010, 2))
    with open(gw.config_path, "a") as f:
        f.write("\n# reloaded\n")
    gw.signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while "generation 2 applied" not in gw.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    t.check("the reload was applied", "generation 2 applied" in gw.log(), "applied", gw.log()[-400:])
    # The old generation's workers count on until they stop; /metrics shows their counts
    # meanwhile: no counter drops back (a counter reset to Prometheus), the gauge counts
    # the sessions still open on them.
    after = tcp_counts(gw)
    t.check("right after the reload /metrics still shows the old generation's counts: "
            "sluice_tcp_bytes_total{in} 2 x 1005 and sluice_connections_active 2 (its open sessions)",
            before == (2010, 2) and after == before, ((2010, 2), (2010, 2)), (before, after))
    ok, detail = tp.exchange(port, b"new", 100)
    t.check("after a reload new sessions are served", ok, True, detail)
    done.send(b"y" * 1000)
    done.shutdown_write()
    data, how = done.read_until_close(5)
    t.check("a session of the old generation goes on after the reload, bytes both ways",
            data == b"2000\n", b"2000\n", (data, how))
    old.send(b"y" * 1000)
    t0 = time.monotonic()
    data, how = old.read_until_close(6)
    took = time.monotonic() - t0
    t.check("the old generation's session stayed open, then was closed at shutdown_timeout",
            how in ("eof", "reset") and took > 0.5, "closed after ~1.2 s more", (how, round(took, 2), data))
    got = h.poll(lambda: tcp_counts(gw), lambda v: v == (4019, 0))
    t.check("once the old generation's sessions ended, its bytes are counted once "
            "(2 x 1005 + 2 x 1000 on the old sessions, 9 on the new one), no session open",
            got == (4019, 0), (4019, 0), got)
    ok, detail = tp.exchange(port, b"after", 100)
    t.check("and new sessions still are served", ok, True, detail)


def test_sigterm_after_reload(t):
    gw, c = held_session(t, "shortened", "60s", workers=2)
    with open(gw.config_path) as f:
        cfg = f.read().replace("shutdown_timeout: 60s", "shutdown_timeout: 1s")
    with open(gw.config_path, "w") as f:
        f.write(cfg)
    st, _ = gw.reload(new_content=False)
    t.check("the reload to shutdown_timeout 1s applied", st == 200, 200, st)
    gw.signal(signal.SIGTERM)
    data, how = c.read_until_close(10)
    rc = gw.wait(5)
    t.check("the old generation's session is closed and the process exits 0", how in ("eof", "reset") and rc == 0,
            ("eof or reset", 0), (how, rc))
    t.check("its worker cut it: no 'did not cut its TCP sessions' in the log",
            "did not cut its TCP sessions" not in gw.log(), "absent", gw.log()[-400:])


if __name__ == "__main__":
    t = h.Suite("tcp_drain", budget=58)
    t.run(setup, test_sigterm_finishes_session, test_sigterm_deadline, test_second_sigterm, test_reload,
          test_sigterm_after_reload)
