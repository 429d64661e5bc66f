"""HAProxy as an upstream of sluice: client -> sluice -> haproxy (mode http) -> nginx, through
sluice's L7 proxy route and its L4 tcp listener. Bodies exact, sluice's keep-alive pool
reused (haproxy counts fewer connections than requests on its stats socket), and haproxy
closing idle kept-alive connections (short `timeout http-keep-alive`, `timeout client`)
never costs a client request."""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

SIZES = [("0", 0), ("1", 1), ("64k", 64 << 10), ("1m", 1 << 20), ("20m", 20 << 20)]
KEEP_T = 0.2     # fe_idle's timeout http-keep-alive
CLIENT_T = 0.3   # fe_client's timeout client (no http-keep-alive: it applies between requests)


class Chain:
    """nginx (sendfile on) serving the SIZES files, behind haproxy's three frontends:
    keep (timeouts of 60 s), idle (timeout http-keep-alive 200ms), client (timeout client
    300ms); stats() reads haproxy's stats socket."""

    def __init__(self, t):
        io.need(t, "curl", "haproxy")
        root = io.h.new_tmpdir("www")
        self.shas = {n: io.random_file(os.path.join(root, n), size) for n, size in SIZES}
        _, (np,) = io.nginx(t, root, ["sendfile on;"])
        d = io.h.new_tmpdir("hastats")
        self.sock = os.path.join(d, "stats.sock")
        self.ports = {fe: io.port() for fe in ("keep", "idle", "client")}
        io.haproxy(t, """
global
    stats socket %s mode 600 level admin

defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s

frontend keep
    bind 127.0.0.1:%d
    timeout http-keep-alive 60s
    default_backend nginx

frontend idle
    bind 127.0.0.1:%d
    timeout http-keep-alive %dms
    default_backend nginx

frontend client
    bind 127.0.0.1:%d
    timeout client %dms
    default_backend nginx

backend nginx
    server n1 127.0.0.1:%d
""" % (self.sock, self.ports["keep"], self.ports["idle"], KEEP_T * 1000, self.ports["client"],
            CLIENT_T * 1000, np))
        for p in self.ports.values():
            t.check("haproxy listens on %d" % p, io.wait_port(p), True, False)

    def stats(self, frontend):
        """haproxy's `show stat` row of FRONTEND `frontend`: {column: value}."""
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(self.sock)
        s.sendall(b"show stat\n")
        out = io.h.recv_all(s).decode()
        s.close()
        lines = out.strip().splitlines()
        cols = lines[0].lstrip("# ").split(",")
        for ln in lines[1:]:
            row = dict(zip(cols, ln.split(",")))
            if row["pxname"] == frontend and row["svname"] == "FRONTEND":
                return {k: int(v) if v.isdigit() else v for k, v in row.items()}
        raise KeyError(frontend)


def gateway(t):
    """(the Chain, sluice in front of it): sluice, one worker (one pool: counts are exact): http listener `web` with a route per
    frontend (/keep/, /idle/, /client/, prefix stripped), tcp listeners l4_auto, l4_off to
    the keep frontend and l4_idle to the idle one."""
    chain = Chain(t)
    return chain, io.sluice(t, """
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0 }
  - { name: l4_auto, listen: 127.0.0.1:0, protocol: tcp, upstream: keep, splice: auto }
  - { name: l4_off, listen: 127.0.0.1:0, protocol: tcp, upstream: keep, splice: off }
  - { name: l4_idle, listen: 127.0.0.1:0, protocol: tcp, upstream: idle }
upstreams:
  - { name: keep, targets: [ { address: 127.0.0.1:%d } ] }
  - { name: idle, targets: [ { address: 127.0.0.1:%d } ] }
  - { name: client, targets: [ { address: 127.0.0.1:%d } ] }
routes:
  - { name: keep, match: { paths: [/keep/] }, upstream: keep, strip_prefix: true }
  - { name: idle, match: { paths: [/idle/] }, upstream: idle, strip_prefix: true }
  - { name: client, match: { paths: [/client/] }, upstream: client, strip_prefix: true }
""" % (chain.ports["keep"], chain.ports["idle"], chain.ports["client"]))


def bodies(t, label, url, shas):
    bad = []
    for name, size in SIZES:
        rc, body, head = io.fetch("%s/%s" % (url, name), timeout=60)
        if rc != 0 or io.sha256(body) != shas[name] or ("content-length: %d\r\n" % size) not in head:
            bad.append("/%s: exit %d, %d of %d B" % (name, rc, len(body), size))
    t.check("%s: fresh curl connections, 0 B, 1 B, 64 KiB, 1 MiB, 20 MiB: exit 0, Content-Length "
            "= size, sha256-exact" % label, not bad, [], bad)


def keepalive_seq(port, prefix, names, shas):
    """One client connection, a GET of each name: the failures (empty when all exact)."""
    bad = []
    c = io.h.Client(port, timeout=60)
    try:
        for name in names:
            c.send(io.h.build_request("GET", prefix + name))
            r = c.read_response()
            if (r.status, r.sha256) != (200, shas[name]):
                bad.append("/%s: %s %d B" % (name, r.status, r.body_len))
    except Exception as e:
        bad.append("%s: %s" % (type(e).__name__, e))
    finally:
        c.close()
    return bad


@io.case("l7.chain", "client -> sluice (HTTP/1.1 route) -> haproxy -> nginx: 0 B to 20 MiB arrive "
         "sha256-exact, and sluice reuses its pooled connection: 30 sequential fresh client "
         "requests reach haproxy on at most 2 connections", budget=90)
def l7_chain(t):
    ch, s = gateway(t)
    url = "http://127.0.0.1:%d/keep" % s.port("web")
    bodies(t, "L7", url, ch.shas)
    bad = keepalive_seq(s.port("web"), "/keep/", ["1m", "20m", "0", "64k", "1"], ch.shas)
    t.check("L7: one kept-alive client connection, 5 GETs (1 MiB, 20 MiB, 0 B, 64 KiB, 1 B) exact",
            not bad, [], bad)
    before = ch.stats("keep")
    bad = []
    for i in range(30):
        rc, body, _ = io.fetch(url + "/64k")
        if rc != 0 or io.sha256(body) != ch.shas["64k"]:
            bad.append((i, rc, len(body)))
    after = ch.stats("keep")
    conns, reqs = after["conn_tot"] - before["conn_tot"], after["req_tot"] - before["req_tot"]
    t.check("L7: 30 sequential curl GETs of 64 KiB, each a fresh client connection: all exact",
            not bad, [], bad)
    t.check("L7: haproxy counted those 30 requests on at most 2 connections (1 expected: sluice's "
            "pooled one)", reqs == 30 and conns <= 2, "30 requests, <= 2 connections",
            "%d requests, %d connections" % (reqs, conns))
    bad = []
    io.at_once([(lambda: bad.extend(keepalive_seq(s.port("web"), "/keep/", ["20m", "1m", "64k"], ch.shas)),)] * 4)
    t.check("L7: 4 kept-alive client connections at once, 3 GETs each (20 MiB, 1 MiB, 64 KiB): exact",
            not bad, [], bad)


@io.case("l4.chain", "client -> sluice (tcp listener, splice auto and off) -> haproxy -> nginx: "
         "0 B to 20 MiB arrive sha256-exact, a kept-alive client connection is one haproxy "
         "connection for 10 requests, and haproxy's idle close reaches the client as EOF",
         budget=90)
def l4_chain(t):
    ch, s = gateway(t)
    for listener in ("l4_auto", "l4_off"):
        bodies(t, listener, "http://127.0.0.1:%d" % s.port(listener), ch.shas)
        before = ch.stats("keep")
        bad = keepalive_seq(s.port(listener), "/", ["1", "64k", "1m", "20m", "0"] * 2, ch.shas)
        after = ch.stats("keep")
        conns, reqs = after["conn_tot"] - before["conn_tot"], after["req_tot"] - before["req_tot"]
        t.check("%s: one kept-alive client connection, 10 GETs exact, haproxy counted 10 requests "
                "on 1 connection" % listener, not bad and (reqs, conns) == (10, 1),
                "exact; 10 requests, 1 connection", "%s; %d requests, %d connections" % (bad, reqs, conns))
    # haproxy closes the idle session after KEEP_T: sluice passes the close on
    seen = []
    for i in range(3):
        c = io.h.Client(s.port("l4_idle"), timeout=20)
        c.send(io.h.build_request("GET", "/64k"))
        r = c.read_response()
        t0 = time.monotonic()
        rest, how = c.read_until_close(15)
        c.close()
        seen.append((r.status, r.sha256 == ch.shas["64k"], len(rest), how, time.monotonic() - t0 < 15))
    t.check("l4_idle: 3 sessions, each a 200 exact, then haproxy's idle close arrives as EOF (no "
            "stray byte) within 15 s", seen == [(200, True, 0, "eof", True)] * 3,
            [(200, True, 0, "eof", True)] * 3, seen)


@io.case("l7.idle_close", "haproxy closing sluice's idle kept-alive connections (timeout "
         "http-keep-alive 200ms, timeout client 300ms) never costs a client request: 50 GETs "
         "spaced around and past the timeouts, all 200 and exact", budget=90)
def l7_idle_close(t):
    ch, s = gateway(t)
    for fe, tmo in (("idle", KEEP_T), ("client", CLIENT_T)):
        before = ch.stats(fe)
        bad = []
        c = io.Kept(s.port("web"), timeout=30)
        for i in range(25):
            # odd: well past the timeout (the pooled connection is gone); even: sweeping
            # the close's moment (-40 ms .. +44 ms), where a reuse races haproxy's close
            time.sleep(tmo + 0.25 if i % 2 else tmo - 0.04 + (i // 2) * 0.007)
            name = ("64k", "1", "1m")[i % 3]
            r, err = c.get("/%s/%s" % (fe, name))
            if err or (r.status, r.sha256) != (200, ch.shas[name]):
                bad.append((i, err or (r.status, r.body_len)))
        c.close()
        after = ch.stats(fe)
        conns = after["conn_tot"] - before["conn_tot"]
        t.info("%s: haproxy saw %d connections for 25 requests" % (fe, conns))
        t.check("%s (%d ms): 25 GETs on one client connection, spaced around and past the timeout: "
                "25 x 200, exact, 0 failures" % (fe, tmo * 1000), not bad, [], bad)
        # haproxy really closed idle connections: the 12 long gaps alone take new ones
        t.check("%s: haproxy counted 25 requests on more than 6 connections (it closed idle ones)"
                % fe, after["req_tot"] - before["req_tot"] == 25 and conns > 6,
                "25 requests, > 6 connections",
                "%d requests, %d connections" % (after["req_tot"] - before["req_tot"], conns))
    failed = s.log().count("upstream failed") + s.log().count("-> 502")
    t.check("sluice logged no failed upstream exchange", failed == 0, 0, failed)


if __name__ == "__main__":
    io.main()
