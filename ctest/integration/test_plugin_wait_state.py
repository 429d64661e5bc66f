"""A request waiting in a plugin (sluice.sleep) keeps its own state while others run.

One worker, so everything shares one Lua VM: /slow sleeps 0.3 s in access and then goes
upstream; meanwhile another request ends its chain with sluice.response.exit and a tcp
session's preread closes itself with sluice.session.close. /slow must still be answered
by its upstream: the exit flag those set is theirs (it once leaked into the waiting
request, which was then answered "HTTP/1.1 0 Unknown").
"""

import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
t = h.Suite("plugin_wait_state", budget=40)
S = {}


def setup(t):
    S["up"] = h.MockUpstream(lambda req: h.Response(200, b"from upstream"))
    cfg = ("workers: 1\n"
           "admin: { listen: 127.0.0.1:0 }\n"
           "plugin_paths: [%s, %s]\n"
           "listeners:\n"
           "  - { name: web, listen: 127.0.0.1:0 }\n"
           "  - { name: tcp, listen: 127.0.0.1:0, protocol: tcp, plugins: [ { name: tcp-info } ] }\n"
           "upstreams: [ { name: u, targets: [ { address: %s } ] } ]\n"
           "routes:\n"
           "  - { name: slow, match: { paths: [/slow] }, upstream: u,\n"
           "      plugins: [ { name: sleeper, config: { seconds: 0.3, answer: false } } ] }\n"
           "  - { name: ex, match: { paths: [/exit] }, upstream: u, plugins: [ { name: exit-with } ] }\n"
           % (os.path.join(HERE, "plugins_fixture"), os.path.join(HERE, "preread_fixture"), S["up"].address))
    S["gw"] = h.start_sluice(cfg, suite=t)


def test_exit_does_not_leak_into_a_waiting_request(t):
    gw = S["gw"]
    res = {}

    def slow():
        try:
            res["slow"] = h.request(gw.port("web"), "GET", "/slow", timeout=5)
        except Exception as e:  # a malformed answer is the failure this test is about
            res["slow"] = e

    th = threading.Thread(target=slow)
    th.start()
    time.sleep(0.1)
    r = h.request(gw.port("web"), "GET", "/exit", timeout=5)
    t.check("another request exits meanwhile", r.status == 418, 418, r.status)
    with socket.create_connection(("127.0.0.1", gw.port("tcp")), timeout=5) as s:
        data = h.recv_all(s)
    t.check("a tcp session's preread closes itself meanwhile", b'"listener":"tcp"' in data, "tcp-info", data)
    th.join(10)
    got = res.get("slow")
    t.check("the waiting request is answered by its upstream",
            not isinstance(got, Exception) and got is not None and got.status == 200 and got.body == b"from upstream",
            (200, b"from upstream"), got if isinstance(got, Exception) or got is None else (got.status, got.body))


t.run(setup, test_exit_does_not_leak_into_a_waiting_request)
