"""The Lua preread phase of protocol: tcp listeners (issue 7).

Backends A, B and C greet each connection with their name (a server-first protocol: the
gateway must not wait for the client's bytes on a listener without sni_routes or
accept_proxy_protocol). Plugins come from ctest/integration/preread_fixture:

  1. route-by chooses by client address (clients bound to 127.0.0.1/.2/.4): the default
     upstream, another upstream, an IP:PORT address; and, on a listener with sni_routes
     and no default, by the ClientHello's server name where no entry matches;
     an upstream only route-by chooses (no listener names it) shows the TCP-layer breaker
     its refused sessions opened, in /status (breaker_tcp) and /metrics (layer="tcp");
  2. the built-in ip-restriction, on a tcp listener, closes a denied client before any
     upstream connection; tcp-info answers with what sluice.session sees and closes;
  3. a plugin raising, or calling what preread cannot do (sluice.sleep, the request API),
     closes that session only: the error is logged with listener and plugin and counted
     in sluice_plugin_errors_total{route="listener:NAME"}; the gateway serves on;
  4. config errors (sluice check): plugins on an http listener, a plugin without preread
     on a tcp listener, a preread-only plugin in a route or the global chain.
Every check runs on a `splice: off` listener as well where the data path matters.
"""

import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("tcp_preread", budget=60)
S = {}
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "preread_fixture")


class Greeter(h.TCPServer):
    """Writes its name to every connection it accepts, then echoes until EOF; counts them."""

    def __init__(self, name):
        self.name = name.encode()
        super().__init__()

    def handle(self, c):
        c.settimeout(10)
        c.sendall(self.name + b"\n")
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)


def talk(port, source="127.0.0.1", send=b"", read_until_eof=False, timeout=5):
    """Connects from `source`, sends `send`, returns what came back (the greeting line, or
    everything until EOF); b"" when the gateway closed at once."""
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(timeout)
    try:
        s.connect(("127.0.0.1", port))
    except ConnectionResetError:  # closed with a reset before connect() even returned
        s.close()
        return b""
    try:
        if send:
            try:
                s.sendall(send)
            except (ConnectionResetError, BrokenPipeError):
                return b""
        data = b""
        while read_until_eof or b"\n" not in data:
            try:
                d = s.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                break
            if not d:
                break
            data += d
        return data
    finally:
        s.close()


def client_hello(sni):
    return h.tls_client_hello(sni)[3]


def counts():
    return tuple(S[n].accepted for n in ("A", "B", "C"))


def setup(t):
    for n in ("A", "B", "C"):
        S[n] = Greeter(n)
    up = lambda name, g: "  - { name: %s, targets: [ { address: 127.0.0.1:%d } ] }\n" % (name, S[g].port)  # noqa: E731
    route_by = ('      - name: route-by\n'
                '        config: { ip: { "127.0.0.2": up_b, "127.0.0.4": "127.0.0.1:%d", "127.0.0.5": up_dead } }\n'
                % S["C"].port)
    S["dead"] = dead = h.refused_port()  # held open (never listening): every connect is refused
    cfg = ("workers: 2\n"
           "admin: { listen: 127.0.0.1:0 }\n"
           "plugin_paths: [%s]\n"
           "listeners:\n"
           "  - name: pre\n    listen: 127.0.0.1:0\n    protocol: tcp\n    upstream: up_a\n"
           "    plugins:\n" + route_by +
           "      - { name: ip-restriction, config: { deny: [127.0.0.3] } }\n"
           "  - name: precopy\n    listen: 127.0.0.1:0\n    protocol: tcp\n    upstream: up_a\n    splice: off\n"
           "    plugins:\n" + route_by +
           "  - name: presni\n    listen: 127.0.0.1:0\n    protocol: tcp\n"
           "    sni_routes: [ { sni: [a.test], upstream: up_a } ]\n"
           "    plugins: [ { name: route-by, config: { sni: { b.test: up_b } } } ]\n"
           "  - name: info\n    listen: 127.0.0.1:0\n    protocol: tcp\n"
           "    sni_routes: [ { sni: [\"*.test\"], upstream: up_b } ]\n"
           "    plugins: [ { name: route-by, config: { sni: { x.test: up_c } } }, { name: tcp-info } ]\n"
           "  - { name: boom, listen: 127.0.0.1:0, protocol: tcp, upstream: up_a, plugins: [ { name: tcp-boom } ] }\n"
           "  - { name: sleepy, listen: 127.0.0.1:0, protocol: tcp, upstream: up_a,\n"
           "      plugins: [ { name: tcp-boom, config: { misuse: sleep } } ] }\n"
           "  - { name: nosy, listen: 127.0.0.1:0, protocol: tcp, upstream: up_a,\n"
           "      plugins: [ { name: tcp-boom, config: { misuse: request } } ] }\n"
           "upstreams:\n" + up("up_a", "A") + up("up_b", "B") + up("up_c", "C") +
           "  - { name: up_dead, targets: [ { address: 127.0.0.1:%d } ],\n"
           "      circuit_breaker: { min_requests: 2, failure_ratio: 0.5, open_timeout: 60s } }\n"
           % dead[1]) % FIXTURE
    S["gw"] = h.start_sluice(cfg, suite=t)


def test_route_by_address(t):
    for lst in ("pre", "precopy"):
        port = S["gw"].port(lst)
        before = counts()
        t.check("%s: 127.0.0.1 goes to the listener's upstream (server speaks first)" % lst,
                talk(port, "127.0.0.1") == b"A\n", b"A\n", talk(port, "127.0.0.1"))
        t.check("%s: 127.0.0.2 goes to up_b" % lst, talk(port, "127.0.0.2") == b"B\n")
        t.check("%s: 127.0.0.4 goes to the address route-by set" % lst, talk(port, "127.0.0.4") == b"C\n")
        t.check("%s: bytes flow both ways after the choice" % lst,
                talk(port, "127.0.0.2", send=b"ping\n" * 20000, read_until_eof=False).startswith(b"B\n"))
        after = counts()
        t.check("%s: one backend connection per session" % lst,
                after == (before[0] + 2, before[1] + 2, before[2] + 1), (2, 2, 1),
                tuple(a - b for a, b in zip(after, before)))


def test_breaker_of_a_plugin_upstream(t):
    """up_dead is named by no listener, only chosen by route-by: its TCP-layer breaker, which
    its sessions open, shows in /status and /metrics like a named upstream's."""
    gw = S["gw"]
    for _ in range(3):
        talk(gw.port("pre"), source="127.0.0.5")
    target = "127.0.0.1:%d" % S["dead"][1]

    def tcp_breaker():
        up = [u for u in gw.status()["upstreams"] if u["name"] == "up_dead"][0]
        return up["targets"][0].get("breaker_tcp")
    t.check("a plugin-chosen upstream's TCP breaker, opened by refused connects, shows in /status",
            h.wait_until(lambda: tcp_breaker() == "open", 3), "open", tcp_breaker())
    _, samples = gw.metrics()
    got = h.metric_values(samples, "sluice_circuit_breaker_state", upstream="up_dead", target=target, layer="tcp")
    t.check("... and in sluice_circuit_breaker_state{layer=\"tcp\"}", got == [1.0], [1.0], got)


def test_big_stream_after_preread(t):
    """Half-close after a plugin chose: 4 MiB up and echoed back, on splice and copy."""
    for lst in ("pre", "precopy"):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", S["gw"].port(lst)))
        payload = os.urandom(4 << 20)
        threading.Thread(target=lambda: (s.sendall(payload), s.shutdown(socket.SHUT_WR)), daemon=True).start()
        got = b""
        while True:
            d = s.recv(1 << 20)
            if not d:
                break
            got += d
        s.close()
        t.check("%s: 4 MiB echoed intact through up_b" % lst, got == b"B\n" + payload, len(payload) + 2, len(got))


def test_route_by_sni(t):
    port = S["gw"].port("presni")
    t.check("presni: an sni_routes name goes to its upstream", talk(port, send=client_hello("a.test"))[:2] == b"A\n")
    t.check("presni: a name no entry lists, chosen by the plugin", talk(port, send=client_hello("b.test"))[:2] == b"B\n")
    before = counts()
    t.check("presni: neither: closed", talk(port, send=client_hello("c.test")) == b"")
    t.check("presni: ... without a backend connection", counts() == before, before, counts())


def test_session_api(t):
    port = S["gw"].port("info")
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    me = s.getsockname()[1]
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    s.sendall(client_hello("X.Test"))
    data = h.recv_all(s)
    s.close()
    try:
        info = json.loads(data)
    except ValueError:
        info = data
    want = {"listener": "info", "ip": "127.0.0.2", "port": me, "sni": "x.test", "upstream": "up_c",
            "routed_by": "sni"}
    t.check("sluice.session: listener, client ip and port, sni, the upstream chosen so far, ctx shared "
            "along the chain; close(message) reaches the client", info == want, want, info)
    info = json.loads(talk(port, send=client_hello("q.test"), read_until_eof=True))
    t.check("sluice.session.get_upstream: what sni_routes chose", info.get("upstream") == "up_b", "up_b", info)


def test_ip_restriction(t):
    before = counts()
    t.check("ip-restriction on a tcp listener: a denied client is closed",
            talk(S["gw"].port("pre"), "127.0.0.3", read_until_eof=True) == b"")
    t.check("... and reaches no upstream", counts() == before, before, counts())


def test_errors(t):
    gw = S["gw"]
    before = counts()
    for lst in ("boom", "sleepy", "nosy"):
        t.check("%s: a plugin error closes the session" % lst, talk(gw.port(lst), read_until_eof=True) == b"")
    t.check("... without a backend connection", counts() == before, before, counts())
    time.sleep(0.2)
    log = gw.log()
    lines = [json.loads(x) for x in log.splitlines() if x.startswith("{") and "preread" in x]
    def has(listener, text):
        return any(x.get("listener") == listener and x.get("plugin") == "tcp-boom" and text in x.get("msg", "")
                   for x in lines)
    t.check("the error is logged with listener and plugin", has("boom", "tcp boom"), "tcp boom", lines[-3:])
    t.check("sluice.sleep in preread raises: preread cannot wait", has("sleepy", "cannot wait"), "cannot wait",
            lines[-3:])
    t.check("the request API in preread raises", has("nosy", "has no request"), "has no request", lines[-3:])
    _, samples = gw.metrics()
    for lst in ("boom", "sleepy", "nosy"):
        v = h.metric_values(samples, "sluice_plugin_errors_total", route="listener:" + lst, plugin="tcp-boom")
        t.check("sluice_plugin_errors_total{route=\"listener:%s\",plugin=\"tcp-boom\"} is 1" % lst, v == [1.0],
                [1.0], v)
    t.check("the gateway still serves", talk(gw.port("pre"), "127.0.0.2") == b"B\n")


def test_config_errors(t):
    d = h.new_tmpdir("preread_check")
    base_up = "upstreams: [ { name: u, targets: [ { address: 127.0.0.1:9 } ] } ]\n"

    def check(body):
        p = os.path.join(d, "c.yaml")
        with open(p, "w") as f:
            f.write("plugin_paths: [%s]\n" % FIXTURE + body + base_up)
        r = h.run_cli(["check", "-c", p])
        return r.returncode, r.stdout + r.stderr

    rc, out = check("listeners: [ { name: web, listen: 127.0.0.1:0, plugins: [ { name: route-by } ] } ]\n")
    t.check("plugins on an http listener: an error",
            rc == 1 and "'plugins' belongs to protocol: tcp listeners" in out, "error", out)
    rc, out = check("listeners: [ { name: pg, listen: 127.0.0.1:0, protocol: tcp, upstream: u,\n"
                    "               plugins: [ { name: cors } ] } ]\n")
    t.check("a plugin without preread on a tcp listener: an error at its name",
            rc == 1 and "c.yaml:3:35: listener 'pg', plugin 'cors': defines no preread function" in out, "error", out)
    rc, out = check("listeners: [ { name: web, listen: 127.0.0.1:0 } ]\n"
                    "routes: [ { name: r, upstream: u, plugins: [ { name: route-by } ] } ]\n")
    t.check("a preread-only plugin on a route: an error",
            rc == 1 and "route 'r', plugin 'route-by': defines only preread" in out, "error", out)
    rc, out = check("plugins: [ { name: tcp-info } ]\n"
                    "listeners: [ { name: web, listen: 127.0.0.1:0 } ]\n")
    t.check("a preread-only plugin in the global chain: an error",
            rc == 1 and "the global chain, plugin 'tcp-info': defines only preread" in out, "error", out)
    rc, out = check("listeners: [ { name: pg, listen: 127.0.0.1:0, protocol: tcp,\n"
                    "               plugins: [ { name: ip-restriction, config: { deny: [nope] } } ] } ]\n")
    t.check("a tcp listener's plugin configs are validated", rc == 1 and "listener 'pg', plugin 'ip-restriction'" in out,
            "error", out)
    rc, out = check("listeners: [ { name: pg, listen: 127.0.0.1:0, protocol: tcp,\n"
                    "               plugins: [ { name: ip-restriction, config: { deny: [10.0.0.0/8] } } ] } ]\n")
    t.check("a tcp listener with plugins and no upstream is valid (a plugin chooses)", rc == 0, 0, (rc, out))


t.run(setup, test_route_by_address, test_breaker_of_a_plugin_upstream, test_big_stream_after_preread, test_route_by_sni, test_session_api,
      test_ip_restriction, test_errors, test_config_errors)
