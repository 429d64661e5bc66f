"""What a tcp listener tells its operator: sluice_tcp_sessions_total{listener,result} counts
every session by how it ended, sluice_tcp_connect_failures_total{upstream,target} counts the
connects that failed per target, and /status names a tcp listener's upstream's protocol tcp.

Sessions of each kind are made on purpose, each on its own listener so its counts are exact:
  closed          a client sends, the echo origin answers, both sides close
  connect_failed  the only target refuses (two sessions, each tried once more: the same target)
  rejected        accept_proxy_protocol from 127.0.0.1 and no PROXY header
  timeout         idle_timeout 300ms with no byte moved
  no_route        sni_routes, a ClientHello for a name no entry lists and no default
  reset           the client resets mid-session (SO_LINGER 0)
"""

import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("tcp_observability", budget=60)
S = {}


class Echo(h.TCPServer):
    def handle(self, conn):
        try:
            while True:
                b = conn.recv(65536)
                if not b:
                    break
                conn.sendall(b)
        except OSError:
            pass


def setup(t):
    S["echo"] = Echo()
    S["refused_sock"], refused = h.refused_port()
    S["refused"] = "127.0.0.1:%d" % refused
    S["sl"] = h.start_sluice("""
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: ok,      listen: 127.0.0.1:0, protocol: tcp, upstream: echo }
  - { name: reset,   listen: 127.0.0.1:0, protocol: tcp, upstream: echo }
  - { name: refused, listen: 127.0.0.1:0, protocol: tcp, upstream: down }
  - { name: proxied, listen: 127.0.0.1:0, protocol: tcp, upstream: echo, header_timeout: 5s,
      accept_proxy_protocol: { from: [127.0.0.1] } }
  - { name: idle,    listen: 127.0.0.1:0, protocol: tcp, upstream: echo, idle_timeout: 300ms }
  - { name: sni,     listen: 127.0.0.1:0, protocol: tcp, sni_routes: [ { sni: [a.test], upstream: echo } ] }
  - { name: web,     listen: 127.0.0.1:0 }
upstreams:
  - { name: echo, targets: [ { address: 127.0.0.1:%d } ] }
  - { name: down, targets: [ { address: %s } ], timeouts: { connect: 1s } }
  - { name: api,  targets: [ { address: 127.0.0.1:%d } ] }
routes:
  - { name: api, match: { paths: [/] }, upstream: api }
""" % (S["echo"].port, S["refused"], S["echo"].port), suite=t)


def sessions(listener):
    m = h.parse_prometheus(S["sl"].admin_get("/metrics").body.decode())
    return {lab.get("result"): v for n, lab, v in m
            if n == "sluice_tcp_sessions_total" and lab.get("listener") == listener and v}


def wait_count(listener, result, want, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = sessions(listener)
        if got.get(result, 0) >= want:
            return got
        time.sleep(0.05)
    return sessions(listener)


def one_session(listener, first=b"", result=None):
    """A connection to `listener` that sends `first`, reads until the gateway closes it;
    returns the counts of `listener` once `result` has been counted."""
    c = socket.create_connection(("127.0.0.1", S["sl"].port(listener)), timeout=5)
    if first:
        c.sendall(first)
    try:
        c.recv(10)
    except OSError:
        pass
    c.close()
    return wait_count(listener, result, 1)


def test_closed(t):
    for _ in range(3):
        c = socket.create_connection(("127.0.0.1", S["sl"].port("ok")), timeout=5)
        c.sendall(b"ping")
        got = c.recv(10)
        c.shutdown(socket.SHUT_WR)
        c.recv(10)
        c.close()
        t.check("ok: the echo answers through the listener", got == b"ping", b"ping", got)
    got = wait_count("ok", "closed", 3)
    t.check("ok: 3 sessions closed, none of another result",
            got.get("closed") == 3 and sum(v for k, v in got.items() if k != "closed") == 0,
            {"closed": 3}, got)


def test_reset(t):
    c = socket.create_connection(("127.0.0.1", S["sl"].port("reset")), timeout=5)
    c.sendall(b"x")
    c.recv(1)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
    got = wait_count("reset", "reset", 1)
    t.check("reset: a client's RST mid-session counts as reset", got.get("reset") == 1, 1, got)


def test_connect_failed(t):
    for _ in range(2):
        c = socket.create_connection(("127.0.0.1", S["sl"].port("refused")), timeout=5)
        c.settimeout(5)
        try:
            rest = c.recv(10)
        except OSError:
            rest = b""
        c.close()
        t.check("refused: the client's connection is closed with nothing", rest == b"", b"", rest)
    got = wait_count("refused", "connect_failed", 2)
    t.check("refused: 2 sessions ended connect_failed", got.get("connect_failed") == 2, 2, got)
    m = h.parse_prometheus(S["sl"].admin_get("/metrics").body.decode())
    fails = {(lab["upstream"], lab["target"]): v for n, lab, v in m if n == "sluice_tcp_connect_failures_total"}
    t.check("sluice_tcp_connect_failures_total{upstream=down,target=...} counts each refused connect (>= 2)",
            fails.get(("down", S["refused"]), 0) >= 2 and ("echo", "127.0.0.1:%d" % S["echo"].port) not in fails,
            ">= 2 for down only", fails)


def test_rejected(t):
    got = one_session("proxied", b"GET / HTTP/1.0\r\n\r\n", "rejected")
    t.check("proxied: no PROXY header from a trusted peer counts as rejected", got.get("rejected") == 1, 1, got)


def test_timeout(t):
    got = one_session("idle", b"", "timeout")  # the gateway closes it after idle_timeout
    t.check("idle: a session idle past idle_timeout counts as timeout", got.get("timeout") == 1, 1, got)


def test_no_route(t):
    got = one_session("sni", h.tls_client_hello("b.test")[3], "no_route")
    t.check("sni: a server name no entry lists (no default) counts as no_route", got.get("no_route") == 1, 1, got)


def test_status_protocol(t):
    st = S["sl"].status()
    proto = {u["name"]: u["protocol"] for u in st["upstreams"]}
    t.check("/status: upstreams only tcp listeners use say protocol tcp; a route's says http1",
            proto == {"echo": "tcp", "down": "tcp", "api": "http1"}, {"echo": "tcp", "down": "tcp", "api": "http1"},
            proto)


def test_http_listener_has_no_series(t):
    m = h.parse_prometheus(S["sl"].admin_get("/metrics").body.decode())
    got = [lab for n, lab, v in m if n == "sluice_tcp_sessions_total" and lab.get("listener") == "web"]
    t.check("an http listener has no sluice_tcp_sessions_total series", got == [], [], got)


t.run(setup, test_closed, test_reset, test_connect_failed, test_rejected, test_timeout, test_no_route,
      test_status_protocol, test_http_listener_has_no_series)
