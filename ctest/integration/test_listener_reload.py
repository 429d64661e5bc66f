"""Listening sockets bound by a reload are opened exactly like those bound at start
(issue 11, item 3).

sluice sets TCP_NODELAY on its listening sockets so that the sockets they accept inherit it
(Linux copies the listener's Nagle setting into every accepted socket). The TCP (L4) proxy
never sets it on the client side itself, so a `protocol: tcp` listener first bound by a
reload whose opener forgot TCP_NODELAY proxies with Nagle on: small writes to the client
wait for the client's delayed ACK (~40 ms each round).

How it is measured, deterministically: the test process is the gateway's parent, so
pidfd_getfd(2) may copy any of the gateway's descriptors into this process. The test copies
(1) every listening socket on the listener's port (one per worker, SO_REUSEPORT) and
(2) the gateway's side of a connection this test opened (found by its peer address), and
reads their socket options with getsockopt. A timing test (40 ms delayed-ACK stalls)
would be slower and flaky on a loaded machine; strace or gdb would need ptrace and would
perturb the process. Copying a descriptor changes nothing for the gateway: the copy is
closed right after.

  1. at start: an http listener and a tcp listener, each with TCP_NODELAY, SO_REUSEADDR and
     SO_REUSEPORT on all its listening sockets and TCP_NODELAY on the accepted socket (the
     control: shows the measurement sees the option);
  2. after POST /reload to a config that adds a second http and a second tcp listener:
     the new listeners' listening sockets carry the same options, and the socket a new tcp
     listener accepts has TCP_NODELAY (so does an accepted http socket, which the HTTP
     connection also sets itself).
  3. a reload that renames a listener (same address) keeps its listening sockets: the
     connections queued on them while the old worker was busy are served by it, none is
     reset. It opened new sockets beside the old ones in the SO_REUSEPORT group and closed
     the old ones at the drain, resetting what the kernel had queued on them.
"""

import ctypes
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("listener_reload", budget=60)
WORKERS = 2
SYS_pidfd_getfd = 438  # the same number on every Linux architecture
_libc = ctypes.CDLL(None, use_errno=True)


def gateway_sockets(pid):
    """A copy of each socket process `pid` holds, as socket objects (the caller closes
    them). Descriptors that close meanwhile are skipped; a socket held through several
    descriptors (dup()s kept by an old and a new generation) is copied once."""
    pidfd = os.pidfd_open(pid)
    out = []
    seen = set()
    try:
        for name in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, name))
            except OSError:
                continue
            if not link.startswith("socket:") or link in seen:
                continue
            seen.add(link)
            fd = _libc.syscall(SYS_pidfd_getfd, pidfd, int(name), 0)
            if fd < 0:
                err = ctypes.get_errno()
                if err == 9:  # EBADF: closed since the listing
                    continue
                raise OSError(err, "pidfd_getfd(%s): %s" % (name, os.strerror(err)))
            out.append(socket.socket(fileno=fd))
    finally:
        os.close(pidfd)
    return out


def _name(s, fn):
    try:
        return getattr(s, fn)()
    except OSError:
        return None


def options(s):
    return {"TCP_NODELAY": s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
            "SO_REUSEADDR": s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR),
            "SO_REUSEPORT": s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)}


def listening_options(pid, port):
    """The options of each of the gateway's listening sockets on 127.0.0.1:port."""
    found = []
    for s in gateway_sockets(pid):
        with s:
            if (s.family == socket.AF_INET and s.type == socket.SOCK_STREAM
                    and s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                    and _name(s, "getsockname") == ("127.0.0.1", port)):
                found.append(options(s))
    return found


def accepted_nodelay(pid, client, timeout=3.0):
    """TCP_NODELAY of the gateway's end of `client` (a connected socket of this process);
    None if the gateway holds no such socket within `timeout`."""
    me = client.getsockname()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for s in gateway_sockets(pid):
            with s:
                if s.family == socket.AF_INET and _name(s, "getpeername") == me:
                    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        time.sleep(0.05)
    return None


class Holder(h.TCPServer):
    """A tcp upstream that holds each connection open until the gateway closes it."""

    def handle(self, conn):
        while conn.recv(65536):
            pass


def config(listeners):
    return ("workers: %d\nadmin: { listen: 127.0.0.1:0 }\nshutdown_timeout: 2s\n"
            "listeners:\n%s"
            "upstreams:\n  - { name: web_up, targets: [ { address: %s } ] }\n"
            "  - { name: tcp_up, targets: [ { address: 127.0.0.1:%d } ] }\n"
            "routes:\n  - { name: all, upstream: web_up }\n"
            % (WORKERS, "".join("  - %s\n" % l for l in listeners), MOCK.address, HOLDER.port))


def check_listener(t, s, label, port):
    opts = listening_options(s.pid, port)
    want = [{"TCP_NODELAY": 1, "SO_REUSEADDR": 1, "SO_REUSEPORT": 1}] * WORKERS
    t.check("%s: its %d listening sockets have TCP_NODELAY, SO_REUSEADDR, SO_REUSEPORT"
            % (label, WORKERS), opts == want, want, opts)
    c = socket.create_connection(("127.0.0.1", port), timeout=3)
    try:
        nd = accepted_nodelay(s.pid, c)
        t.check("%s: the socket it accepts has TCP_NODELAY" % label, nd == 1, 1, nd)
    finally:
        c.close()


MOCK = HOLDER = None


def setup(t):
    global MOCK, HOLDER
    MOCK = h.MockUpstream()
    HOLDER = Holder()


def test_start_and_reload(t):
    p_web, p_tcp, p_web2, p_tcp2 = (h.free_port() for _ in range(4))
    first = ["{ name: web, listen: 127.0.0.1:%d }" % p_web,
             "{ name: t, listen: 127.0.0.1:%d, protocol: tcp, upstream: tcp_up }" % p_tcp]
    s = h.start_sluice(config(first), suite=t, name="listeners")
    check_listener(t, s, "http listener bound at start", p_web)
    check_listener(t, s, "tcp listener bound at start", p_tcp)

    added = ["{ name: web2, listen: 127.0.0.1:%d }" % p_web2,
             "{ name: t2, listen: 127.0.0.1:%d, protocol: tcp, upstream: tcp_up }" % p_tcp2]
    with open(s.config_path, "w") as f:
        f.write(config(first + added))
    code, res = s.reload()
    t.check("POST /reload adding two listeners answers 200 ok",
            code == 200 and res.get("ok") is True, 200, (code, res))
    t.check("the new http listener serves", h.wait_port(p_web2, 5) and
            h.request(p_web2, "GET", "/").status == 200, True, None)
    check_listener(t, s, "http listener bound by a reload", p_web2)
    check_listener(t, s, "tcp listener bound by a reload", p_tcp2)
    check_listener(t, s, "tcp listener kept through the reload", p_tcp)
    t.check("exit 0 on SIGTERM", s.stop() == 0, 0, s.returncode)


def inodes(pid, port):
    """The inode numbers of the gateway's listening sockets on 127.0.0.1:port."""
    found = set()
    for s in gateway_sockets(pid):
        with s:
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) and _name(s, "getsockname") == ("127.0.0.1", port):
                found.add(os.fstat(s.fileno()).st_ino)
    return found


BLOCK = """local sluice = require("sluice")
return { name = "block", version = "1", schema = {},
  access = function()
    local f = io.open("%(d)s/blocking", "w"); f:close()
    local stop = os.time() + 5
    while os.time() < stop do  -- busy until the test releases it: the worker accepts nothing
      local r = io.open("%(d)s/release"); if r then r:close(); break end
    end
    return sluice.response.exit(200, "released\\n")
  end }
"""


def test_rename_keeps_queue(t):
    d = h.new_tmpdir("rename")
    os.makedirs(os.path.join(d, "plugins"))
    with open(os.path.join(d, "plugins", "block.lua"), "w") as f:
        f.write(BLOCK % {"d": d})
    port = h.free_port()
    cfg = ("workers: 1\nwatch: false\nadmin: { listen: 127.0.0.1:0 }\nplugin_paths: [%s]\n"
           "listeners:\n  - { name: NAME, listen: 127.0.0.1:%d }\n"
           "upstreams:\n  - { name: up, targets: [ { address: %s } ] }\n"
           "routes:\n  - { name: all, upstream: up }\n"
           "  - { name: block, match: { paths: [/block] }, plugins: [ { name: block } ] }\n"
           % (os.path.join(d, "plugins"), port, MOCK.address))
    s = h.start_sluice(cfg.replace("NAME", "web"), suite=t, name="rename")
    before = inodes(s.pid, port)
    blocked = h.Client(port, timeout=10)
    blocked.send(h.build_request("GET", "/block"))
    h.wait_until(lambda: os.path.exists(os.path.join(d, "blocking")))
    with open(s.config_path, "w") as f:
        f.write(cfg.replace("NAME", "renamed"))
    code, res = s.reload(new_content=False)
    t.check("the reload renaming the listener applied", code == 200, 200, (code, res))
    # the old worker is busy: what the kernel queues on its socket waits for it
    clients = [h.Client(port, timeout=10) for _ in range(20)]
    for c in clients:
        c.send(h.build_request("GET", "/"))
    with open(os.path.join(d, "release"), "w"):
        pass
    served = 0
    for c in clients:
        try:
            served += c.read_response().status == 200
        except Exception:  # EOF or reset: the connection was dropped
            pass
        c.close()
    t.check("the busy request finished", blocked.read_response().status == 200, 200, None)
    t.check("all 20 connections made right after the rename are served", served == 20, 20, served)
    after = inodes(s.pid, port)
    t.check("the renamed listener listens on the same sockets", after == before and len(before) == 1,
            before, after)
    t.check("exit 0 on SIGTERM", s.stop() == 0, 0, s.returncode)


t.run(setup, test_start_and_reload, test_rename_keeps_queue)
