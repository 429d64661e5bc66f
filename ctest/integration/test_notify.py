"""The service manager's readiness protocol (systemd Type=notify, sd_notify(3)), with no
systemd: the test binds a unix datagram socket of its own, passes it in NOTIFY_SOCKET and
checks what sluice says, in order: READY=1 once the listeners answer, RELOADING=1 with a
MONOTONIC_USEC (systemd >= 253 wants it) then READY=1 around a SIGHUP reload (accepted or
rejected alike), STOPPING=1 on SIGTERM; and the same over an abstract socket ('@name').
"""

import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("notify", budget=60)

CONF = """
workers: 2
watch: false
listeners:
  - name: web
    listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
routes:
  - name: echo
    match: { paths: [/] }
    plugins: [ { name: echo } ]
"""


def recv(sock, timeout=10.0):
    """The next datagram as a dict of KEY=VALUE lines, or None on timeout."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(4096).decode()
    except socket.timeout:
        return None
    return dict(line.split("=", 1) for line in data.split("\n") if "=" in line)


def mono_usec():
    return int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)


def run_protocol(t, label, sock, addr):
    env = dict(os.environ, NOTIFY_SOCKET=addr)
    s = h.start_sluice(CONF, suite=t, env=env, name="notify")
    m = recv(sock)
    t.check("%s: READY=1 first" % label, m == {"READY": "1"}, {"READY": "1"}, m)
    r = h.request(s.port(), "GET", "/")
    t.check("%s: serving once READY came" % label, r.status == 200, 200, r.status)

    with open(s.config_path, "a") as f:  # unchanged content would apply nothing
        f.write("# reload\n")
    before = mono_usec()
    s.signal(signal.SIGHUP)
    m = recv(sock)
    after = mono_usec()
    t.check("%s: SIGHUP: RELOADING=1 with MONOTONIC_USEC" % label,
            m is not None and m.get("RELOADING") == "1" and "MONOTONIC_USEC" in m, "RELOADING=1", m)
    usec = int(m.get("MONOTONIC_USEC", "0")) if m else 0
    t.check("%s: MONOTONIC_USEC is CLOCK_MONOTONIC at the reload" % label,
            before <= usec <= after, "%d..%d" % (before, after), usec)
    m = recv(sock)
    t.check("%s: READY=1 after the reload" % label, m == {"READY": "1"}, {"READY": "1"}, m)
    deadline = time.monotonic() + 5
    while s.status().get("generation") != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    t.check("%s: the SIGHUP reloaded (generation 2)" % label, s.status().get("generation") == 2, 2,
            s.status().get("generation"))

    # A rejected reload still ends in READY=1: the old generation serves on.
    with open(s.config_path, "a") as f:
        f.write("bogus_key: 1\n")
    s.signal(signal.SIGHUP)
    msgs = [recv(sock), recv(sock)]
    t.check("%s: rejected reload: RELOADING=1 then READY=1" % label,
            msgs[0] is not None and msgs[0].get("RELOADING") == "1" and msgs[1] == {"READY": "1"},
            "RELOADING=1, READY=1", msgs)
    t.check("%s: still generation 2" % label, s.status().get("generation") == 2, 2,
            s.status().get("generation"))

    s.signal(signal.SIGTERM)
    m = recv(sock)
    t.check("%s: SIGTERM: STOPPING=1" % label, m == {"STOPPING": "1"}, {"STOPPING": "1"}, m)
    rc = s.wait(15)
    t.check("%s: exit 0 after the drain" % label, rc == 0, 0, rc)
    m = recv(sock, timeout=0.3)
    t.check("%s: nothing after STOPPING=1" % label, m is None, None, m)


def test_path_socket(t):
    d = h.new_tmpdir("nsock")
    path = os.path.join(d, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    try:
        run_protocol(t, "path", sock, path)
    finally:
        sock.close()


def test_abstract_socket(t):
    name = "sluice-notify-test-%d" % os.getpid()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    try:
        run_protocol(t, "abstract", sock, "@" + name)
    finally:
        sock.close()


# CONF's listener and admin, with one route to an upstream that answers late.
SLOW = CONF.split("routes:")[0].replace("workers: 2", "workers: 1") + """upstreams:
  - name: slow
    targets: [ { address: %s } ]
routes:
  - name: slow
    match: { paths: [/] }
    upstream: slow
"""


def test_reload_while_draining(t):
    """A SIGHUP after SIGTERM is refused; the service manager hears nothing after STOPPING=1."""
    up = h.MockUpstream(lambda req: h.Response(200, b"late", delay=1.5))
    d = h.new_tmpdir("nsock-drain")
    path = os.path.join(d, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    try:
        s = h.start_sluice(SLOW % up.address, suite=t, env=dict(os.environ, NOTIFY_SOCKET=path), name="drain")
        t.check("drain: READY=1", recv(sock) == {"READY": "1"}, None, None)
        result = {}
        th = threading.Thread(target=lambda: result.update(r=h.request(s.port(), "GET", "/", timeout=10)))
        th.start()
        up.wait_requests(1)  # the request is at the upstream (it answers 1.5 s later)
        s.signal(signal.SIGTERM)
        m = recv(sock)
        t.check("drain: STOPPING=1", m == {"STOPPING": "1"}, {"STOPPING": "1"}, m)
        s.signal(signal.SIGHUP)
        m = recv(sock, timeout=0.8)
        t.check("drain: a SIGHUP now says nothing (no RELOADING/READY after STOPPING)", m is None, None, m)
        th.join(10)
        t.check("drain: the in-flight request finished", result.get("r") is not None and result["r"].status == 200,
                200, result)
        t.check("drain: exit 0", s.wait(15) == 0, 0, None)
        t.check("drain: the SIGHUP was refused", "the server is shutting down" in s.log(), None, s.log()[-600:])
    finally:
        sock.close()
        up.stop()


def test_no_socket(t):
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    s = h.start_sluice(CONF, suite=t, env=env, name="nonotify")
    t.check("no NOTIFY_SOCKET: serves", h.request(s.port(), "GET", "/").status == 200, 200, None)
    t.check("no NOTIFY_SOCKET: no warning about it", "NOTIFY_SOCKET" not in s.log(), "", s.log()[-500:])
    t.check("no NOTIFY_SOCKET: exit 0", s.stop() == 0, 0, None)


t.run(test_path_socket, test_abstract_socket, test_reload_while_draining, test_no_socket)
