"""L4 in front of a real nginx serving static files (issue 26, item 1).

A `protocol: tcp` listener in front of nginx with `sendfile on` stalled mid-transfer: a
nonblocking splice(2) from a socket stops when the pipe runs out of slots (one per skb
fragment; a sendfile origin's page-sized fragments fill them long before the pipe's bytes),
and the session took that short splice for "the socket is dry", so on the edge-triggered set
no new event came for the bytes still queued: the transfer hung until curl's --max-time.

For each origin (nginx with sendfile on, and off) x each listener (splice auto, splice off)
x each size (64 KiB, 1 MiB, 20 MiB):
  * 20 fresh connections with curl, 10 one after another and 10 at once;
  * 10 keep-alive connections of 3 requests each, 5 one after another and 5 at once;
every body sha256-exact against the file nginx serves, every transfer within its time bound
(curl --max-time, a socket timeout on the keep-alive client). The splice listeners must have
spliced: the gateway holds more pipes after the transfers than before them.
"""

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import test_tcp_proxy as tp  # noqa: E402

t = h.Suite("l4_nginx_origin", budget=280.0)
S = {}
SIZES = [("64k", 64 << 10), ("1m", 1 << 20), ("20m", 20 << 20)]


def bound(size):
    """Seconds one transfer may take: generous for a loaded 2-core machine and ASan."""
    return 10.0 if size <= (1 << 20) else 30.0


def start_nginx(root, d):
    sk1, p_on = h.refused_port()
    sk2, p_off = h.refused_port()
    sk1.close()
    sk2.close()
    proc = h.start_nginx(d, "    keepalive_requests 1000;\n"
                            "    server { listen 127.0.0.1:%d; root %s; sendfile on; }\n"
                            "    server { listen 127.0.0.1:%d; root %s; sendfile off; }\n" % (p_on, root, p_off, root),
                         [p_on, p_off])
    return proc, p_on, p_off


def setup(t):
    t.check("nginx is installed (scripts/install-deps)", shutil.which("nginx") is not None,
            "nginx on PATH", shutil.which("nginx"))
    t.check("curl is installed", shutil.which("curl") is not None, "curl on PATH", None)
    d = h.new_tmpdir("nginx")
    root = os.path.join(d, "www")
    os.mkdir(root)
    S["sha"] = {}
    for name, size in SIZES:
        data = os.urandom(size)
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        S["sha"][name] = hashlib.sha256(data).hexdigest()
    S["nginx"], p_on, p_off = start_nginx(root, d)
    S["sl"] = h.start_sluice("""
workers: 2
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: on_auto,  listen: 127.0.0.1:0, protocol: tcp, upstream: sendfile_on,  splice: auto }
  - { name: on_off,   listen: 127.0.0.1:0, protocol: tcp, upstream: sendfile_on,  splice: off }
  - { name: off_auto, listen: 127.0.0.1:0, protocol: tcp, upstream: sendfile_off, splice: auto }
  - { name: off_off,  listen: 127.0.0.1:0, protocol: tcp, upstream: sendfile_off, splice: off }
upstreams:
  - { name: sendfile_on,  targets: [ { address: 127.0.0.1:%d } ] }
  - { name: sendfile_off, targets: [ { address: 127.0.0.1:%d } ] }
""" % (p_on, p_off), suite=t)
    S["pipes0"] = tp.pipes(S["sl"].pid)
    direct = subprocess.run(["curl", "-s", "--max-time", "10", "http://127.0.0.1:%d/1m" % p_on],
                            capture_output=True)
    t.check("nginx serves the file directly (sendfile on)",
            hashlib.sha256(direct.stdout).hexdigest() == S["sha"]["1m"], S["sha"]["1m"],
            hashlib.sha256(direct.stdout).hexdigest())


def curl_fetch(port, name, size):
    """One fresh connection: curl's body, hashed. Returns (ok, detail)."""
    t0 = time.monotonic()
    p = subprocess.run(["curl", "-s", "--max-time", "%d" % bound(size), "-o", "-",
                        "http://127.0.0.1:%d/%s" % (port, name)], capture_output=True)
    dt = time.monotonic() - t0
    got = hashlib.sha256(p.stdout).hexdigest()
    if p.returncode == 0 and got == S["sha"][name]:
        return True, None
    return False, "curl exit %d, %d of %d bytes after %.1f s" % (p.returncode, len(p.stdout), size, dt)


def keepalive_fetch(port, name, size, n):
    """One connection, n requests in turn, each body read by its Content-Length."""
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=bound(size))
    except OSError as e:
        return False, "connect: %s" % e
    buf = b""
    deadline = time.monotonic() + bound(size) * n
    try:
        for i in range(n):
            c.sendall(b"GET /%s HTTP/1.1\r\nHost: origin\r\n\r\n" % name.encode())
            while b"\r\n\r\n" not in buf:
                chunk = c.recv(65536)
                if not chunk:
                    return False, "request %d: EOF before the head" % (i + 1)
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            clen = None
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    clen = int(v.strip())
            if not head.startswith(b"HTTP/1.1 200") or clen != size:
                return False, "request %d: %r" % (i + 1, head[:80])
            hs, got = hashlib.sha256(), 0
            while got < size:
                if not buf:
                    if time.monotonic() > deadline:
                        return False, "request %d: over the time bound at %d bytes" % (i + 1, got)
                    buf = c.recv(1 << 20)
                    if not buf:
                        return False, "request %d: EOF at %d of %d bytes" % (i + 1, got, size)
                take = buf[:size - got]
                hs.update(take)
                got += len(take)
                buf = buf[len(take):]
            if hs.hexdigest() != S["sha"][name]:
                return False, "request %d: sha256 differs" % (i + 1)
        return True, None
    except socket.timeout:
        return False, "stalled (no byte for %.0f s)" % bound(size)
    except OSError as e:
        return False, "socket: %s" % e
    finally:
        c.close()


def run_many(fn, args, count, parallel):
    """count calls of fn(*args), one after another or all at once: (ok count, first failure)."""
    results = []
    lock = threading.Lock()

    def one():
        r = fn(*args)
        with lock:
            results.append(r)

    if parallel:
        ts = [threading.Thread(target=one) for _ in range(count)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
    else:
        for _ in range(count):
            one()
    oks = sum(1 for ok, _ in results if ok)
    fails = [why for ok, why in results if not ok]
    return oks, fails[0] if fails else None


def transfers(t):
    sl = S["sl"]
    for lname in ("on_auto", "on_off", "off_auto", "off_off"):
        port = sl.port(lname)
        origin = "sendfile %s" % ("on" if lname.startswith("on_") else "off")
        mode = "splice auto" if lname.endswith("_auto") else "splice off"
        for name, size in SIZES:
            what = "%s, %s, %s" % (origin, mode, name)
            for parallel in (False, True):
                how = "at once" if parallel else "one after another"
                oks, why = run_many(curl_fetch, (port, name, size), 10, parallel)
                t.check("%s: 10 fresh curl connections %s, all sha256-exact" % (what, how),
                        oks == 10, "10 of 10", "%d of 10; first failure: %s" % (oks, why))
                oks, why = run_many(keepalive_fetch, (port, name, size, 3), 5, parallel)
                t.check("%s: 5 keep-alive connections x 3 requests %s, all sha256-exact" % (what, how),
                        oks == 5, "5 of 5", "%d of 5; first failure: %s" % (oks, why))


def paths_used(t):
    """The splice listeners spliced: the pipe pool holds pipes it did not hold at start."""
    pipes = tp.pipes(S["sl"].pid)
    t.check("the splice: auto listeners spliced (the gateway holds pooled pipes)", pipes > S["pipes0"],
            "more than %d pipe fds" % S["pipes0"], pipes)


t.run(setup, transfers, paths_used)
