"""Open WebSocket tunnels count as in-flight on their target until they close (issue 12).

A `least-conn` upstream starts with one target, a; ten upgrades open ten tunnels on it.
A reload adds target b to the same upstream (target state is kept across reloads for
every (upstream, address) that stays, in-flight included). Ten more upgrades must all go
to b: a still holds ten open tunnels. While a tunnel stopped counting at its 101, a and
b both looked idle and least-conn split the ten between them. Then the ten tunnels on a
close, and the next ten upgrades must all go to a: the count falls when a tunnel ends.
"""

import os
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("tunnel_least_conn", budget=120)
S = {}

SWITCH = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"


class HoldingUpstream(h.TCPServer):
    """Answers each upgrade with 101 and holds the tunnel open until the peer closes it."""

    def __init__(self, name):
        self.name = name
        self.open = 0
        self.lock = threading.Lock()
        super().__init__(threaded=True)

    def handle(self, c):
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = c.recv(4096)
            if not d:
                return
            buf += d
        c.sendall(SWITCH)
        with self.lock:
            self.open += 1
        try:
            c.settimeout(60)
            while c.recv(4096):
                pass
        except OSError:
            pass
        finally:
            with self.lock:
                self.open -= 1


def upgrade(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(4096)
        if not d:
            break
        head += d
    return s, head


def config(targets):
    addrs = ", ".join("{ address: 127.0.0.1:%d }" % u.port for u in targets)
    return f"""
workers: 1
admin: {{ listen: 127.0.0.1:0 }}
watch: false
shutdown_timeout: 60s
listeners: [ {{ name: web, listen: 127.0.0.1:0 }} ]
upstreams:
  - name: ws
    balancer: least-conn
    targets: [ {addrs} ]
routes:
  - {{ name: ws, match: {{ paths: [/ws] }}, upstream: ws, upgrade: [websocket] }}
"""


def open_tunnels(t, n, ups, what):
    port = S["sl"].port()
    socks = []
    total = sum(u.open for u in ups)
    for i in range(n):
        s, head = upgrade(port)
        socks.append(s)
        t.check("%s: upgrade %d switched" % (what, i), head.startswith(b"HTTP/1.1 101"), "101", head[:40])
        h.wait_until(lambda: sum(u.open for u in ups) == total + i + 1)
    return socks


def in_flight():
    """{target address: in_flight} of upstream ws in /status."""
    ws = [u for u in S["sl"].status()["upstreams"] if u["name"] == "ws"]
    return {x["address"]: x.get("in_flight") for x in (ws[0]["targets"] if ws else [])}


def setup(t):
    a, b = HoldingUpstream("a"), HoldingUpstream("b")
    S["ups"] = (a, b)
    S["sl"] = h.start_sluice(config([a]), suite=t)


def test_open_tunnels_count(t):
    a, b = S["ups"]
    S["on_a"] = open_tunnels(t, 10, (a, b), "one target")
    t.check("ten tunnels open on a", a.open == 10, 10, a.open)
    with open(S["sl"].config_path, "w") as f:
        f.write(config([a, b]))
    st, body = S["sl"].reload()
    t.check("reload adding target b accepted", st == 200, 200, (st, body))
    S["on_b"] = open_tunnels(t, 10, (a, b), "two targets")
    t.check("the next ten upgrades all go to b: a holds ten open tunnels", (a.open, b.open) == (10, 10),
            (10, 10), (a.open, b.open))


def test_count_falls_when_tunnels_close(t):
    a, b = S["ups"]
    for s in S["on_a"]:
        s.close()
    t.check("a's ten tunnels closed", h.wait_until(lambda: a.open == 0), 0, a.open)
    # the gateway sees both ends close, then releases the attempts: a's in-flight count,
    # which the next upgrades are balanced on, is polled down to 0
    st = h.poll(lambda: in_flight(), lambda st: st.get("127.0.0.1:%d" % a.port) == 0)
    t.check("the gateway released a's tunnels", st.get("127.0.0.1:%d" % a.port) == 0, 0, st)
    more = open_tunnels(t, 10, (a, b), "after closing")
    t.check("the next ten upgrades all go to a: b still holds ten", (a.open, b.open) == (10, 10),
            (10, 10), (a.open, b.open))
    for s in more + S["on_b"]:
        s.close()


t.run(setup, test_open_tunnels_count, test_count_falls_when_tunnels_close)
