"""HTTP/2 under load: reload and SIGTERM while h2load and GOAWAY-aware clients run (issue 13).

h2load (-c 10 -m 10, on the echo route: the Python mock upstream would be the bottleneck)
keeps the worker busy; beside it, clients of this file (hand-built
frames, one thread per connection, 10 streams in flight each) count every stream the way
RFC 9113 6.8 asks a client to: after a GOAWAY no new stream is opened on that connection;
streams above the final GOAWAY's last-stream-id were not processed and go again on a new
connection (the client's job); every stream at or below it must complete. A stream that is
reset (other than REFUSED_STREAM, which is also a "not processed"), answered with an error
status, or cut off by the close counts as failed. h2load does not follow 6.8: it goes on
submitting requests on a connection that got a GOAWAY, and its nghttp2 refuses them
locally (counted "errored": up to -m per connection, none of them ever sent), so its
tally is printed, not asserted.

  1. POST /reload under load: the old generation's connections drain; zero failed
     streams, and the clients went on over new connections.
  2. SIGTERM under load: zero failed streams; the streams the server never took (above the
     last-stream-id, or never sent once it stopped accepting) are not failures.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from test_http2_conformance import (ACK, DATA, END_STREAM, GOAWAY, HEADERS, PING, RST, SETTINGS,  # noqa: E402
                                    WU, frame, headers, settings)

t = h.Suite("http2_load", budget=120)
S = {}
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
REFUSED = 7


class Runner(threading.Thread):
    """One client: a connection at a time with `m` streams in flight, GOAWAY handled per
    RFC 9113 6.8, until stop is set and nothing is left to retry."""

    def __init__(self, port, m, stop):
        super().__init__(daemon=True)
        self.port, self.m, self.stop = port, m, stop
        self.ok = self.failed = self.retried = self.conns = self.goaways = self.unsent = 0
        self.errors = []

    def run(self):
        retry = 0
        while not (self.stop.is_set() and not retry):
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                self.unsent = retry  # the server is gone: nothing to retry onto
                return
            self.conns += 1
            try:
                retry = self.connection(s, retry)
            finally:
                s.close()

    def fail(self, why):
        self.failed += 1
        if len(self.errors) < 10:
            self.errors.append(why)

    def connection(self, s, retry):
        s.sendall(PREFACE + settings())
        sid, inflight, status, last, buf, out = 1, set(), {}, None, b"", []
        while True:
            while last is None and len(inflight) < self.m and (retry or not self.stop.is_set()):
                if retry:
                    retry -= 1
                out.append(headers(sid, [(":method", "GET"), (":scheme", "http"), (":path", "/load/%d" % sid),
                                         (":authority", "127.0.0.1")]))
                inflight.add(sid)
                sid += 2
            if out:
                try:
                    s.sendall(b"".join(out))
                except OSError:
                    pass
                out = []
            if not inflight and (last is not None or self.stop.is_set()):
                return retry
            try:
                d = s.recv(65536)
            except OSError:
                d = b""
            if not d:
                for x in inflight:
                    if last is not None and x > last:
                        retry += 1
                        self.retried += 1
                    else:
                        self.fail("stream %d cut off by the close (last-stream-id %s)" % (x, last))
                return retry
            buf += d
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                ftype, flags, fsid, p = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n]
                buf = buf[9 + n:]
                if ftype == SETTINGS and not flags & ACK:
                    out.append(frame(SETTINGS, ACK, 0))
                elif ftype == PING and not flags & ACK:
                    out.append(frame(PING, ACK, 0, p))
                elif ftype == HEADERS and fsid in inflight and fsid not in status:
                    k = 0
                    while k < len(p) and 0x20 <= p[k] < 0x40:  # dynamic table size updates
                        k += 1
                    status[fsid] = p[k:k + 1] == b"\x88"  # :status 200, static index 8
                elif ftype == DATA and n:
                    out.append(frame(WU, 0, 0, n.to_bytes(4, "big")))
                elif ftype == RST and fsid in inflight:
                    inflight.discard(fsid)
                    code = int.from_bytes(p[:4], "big")
                    if code == REFUSED:
                        retry += 1
                        self.retried += 1
                    else:
                        self.fail("stream %d reset, code %d" % (fsid, code))
                elif ftype == GOAWAY:
                    self.goaways += 1
                    last = int.from_bytes(p[:4], "big") & 0x7FFFFFFF
                    for x in [x for x in inflight if x > last]:
                        inflight.discard(x)
                        retry += 1
                        self.retried += 1
                if ftype in (HEADERS, DATA) and flags & END_STREAM and fsid in inflight:
                    inflight.discard(fsid)
                    if status.get(fsid):
                        self.ok += 1
                    else:
                        self.fail("stream %d: status not 200" % fsid)


def setup(t):
    S["up"] = h.MockUpstream()
    S["sl"] = h.start_sluice(f"""
workers: 1
admin: {{ listen: 127.0.0.1:0 }}
watch: false
listeners: [ {{ name: web, listen: 127.0.0.1:0 }} ]
upstreams: [ {{ name: up, targets: [ {{ address: {S["up"].address} }} ] }} ]
routes:
  - {{ name: echo, match: {{ paths: [/echo] }}, plugins: [ {{ name: echo }} ] }}
  - {{ name: up, match: {{ paths: [/] }}, upstream: up }}
""", suite=t)


def under_load(event, settle):
    """Runs h2load and 4 runners, calls event() after a second of load, stops the runners
    `settle` seconds later; returns (runners, h2load's summary lines)."""
    port = S["sl"].port("web")
    load = subprocess.Popen(["h2load", "-D", "4", "-c", "10", "-m", "10", "http://127.0.0.1:%d/echo/h2load" % port],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stop = threading.Event()
    runners = [Runner(port, 10, stop) for _ in range(4)]
    for r in runners:
        r.start()
    time.sleep(1.0)
    event()
    time.sleep(settle)
    stop.set()
    for r in runners:
        r.join(20)
    try:
        out, _ = load.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        load.kill()
        out, _ = load.communicate()
    return runners, [x for x in out.splitlines() if x.startswith("requests:") or "status codes" in x]


def tally(runners):
    keys = ("ok", "failed", "retried", "conns", "goaways", "unsent")
    d = {k: sum(getattr(r, k) for r in runners) for k in keys}
    d["errors"] = [e for r in runners for e in r.errors][:5]
    d["alive"] = sum(1 for r in runners if r.is_alive())
    return d


def test_reload(t):
    got = {}
    runners, h2l = under_load(lambda: got.update(code=S["sl"].reload()[0]), 2.0)
    d = tally(runners)
    print("      reload: clients %s; h2load %s" % (d, h2l))
    t.check("reload under h2load + GOAWAY-aware clients: zero failed streams, hundreds completed",
            got.get("code") == 200 and d["failed"] == 0 and d["ok"] > 500 and not d["alive"],
            "0 failed, > 500 ok", (got, d, h2l))
    # a client whose streams are done may close at the shutdown notice, before the final one
    t.check("reload: every client got the drain's GOAWAY and went on over a new connection",
            d["goaways"] >= 4 and d["conns"] >= 8, ">= 4 GOAWAYs, >= 8 connections", (d["goaways"], d["conns"]))


def test_sigterm(t):
    runners, h2l = under_load(lambda: S["sl"].signal(signal.SIGTERM), 2.0)
    d = tally(runners)
    print("      SIGTERM: clients %s; h2load %s" % (d, h2l))
    t.check("SIGTERM under h2load + GOAWAY-aware clients: zero failed streams (those the server never took "
            "are not failures)",
            d["failed"] == 0 and d["ok"] >= 40 and d["goaways"] >= 4 and not d["alive"],
            "0 failed", (d, h2l))
    t.check("SIGTERM: the gateway exits", S["sl"].wait(10) is not None, "exited", S["sl"].alive())


t.run(setup, test_reload, test_sigterm)
