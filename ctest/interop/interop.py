"""interop — the real-peer matrix: independent clients and servers through sluice.

Each peer_*.py file of this folder declares cases with @case("MODE.CASE") and ends with
`main()`. ctest registers one test per case, named `interop.<peer>.<mode>.<case>` (the peer
is the file's name without `peer_`), whose command is `peer_X.py --case MODE.CASE`; the
list comes from `peer_X.py --list` when CMake configures. A case starts its own peers and
its own gateway, states what it expects (bytes, sha256, counts, error kinds) in its checks,
and stops within its budget (the Suite's watchdog). A peer that is not installed fails the
case: it never skips (scripts/install-deps installs every one).

Runs under Debian's /usr/bin/python3 (python3-h2, python3-grpcio, python3-websockets import
there only); the gateway machinery is ../integration/harness.
"""

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import harness as h  # noqa: E402

CASES = {}  # "mode.case" -> (function, budget in seconds, what it proves)


def case(name, proves, budget=60.0):
    """Declares one case of the calling peer file: name is "MODE.CASE"; proves is one
    sentence for docs/testing.md's table (what the case shows when it passes)."""
    assert name.count(".") == 1 and name not in CASES, name
    assert proves, name

    def deco(fn):
        CASES[name] = (fn, budget, proves)
        return fn
    return deco


def main():
    """`--list`: the case names, one a line; `--table`: docs/testing.md's rows for them;
    `--case MODE.CASE`: runs that case."""
    peer = os.path.basename(sys.argv[0])[len("peer_"):-len(".py")]
    if "--list" in sys.argv:
        for name in CASES:
            print(name)
        return
    if "--table" in sys.argv:
        for name, (fn, budget, proves) in CASES.items():
            mode, what = name.split(".")
            print("| %s | %s | %s | %s |" % (peer, mode, what, proves))
        return
    if "--case" not in sys.argv:
        raise SystemExit("usage: %s --list | --case MODE.CASE" % sys.argv[0])
    name = sys.argv[sys.argv.index("--case") + 1]
    if name not in CASES:
        raise SystemExit("no case %s in %s (--list names them)" % (name, sys.argv[0]))
    fn, budget, proves = CASES[name]
    t = h.Suite("interop.%s.%s" % (peer, name), budget=budget)

    def run_case(t):
        fn(t)
    run_case.__name__ = name
    t.run(run_case)


# ---------------------------------------------------------------- small tools

def need(t, *programs):
    """Fails the case (no skip) when a peer program is not installed."""
    missing = [p for p in programs if shutil.which(p) is None and not os.path.exists(p)]
    t.check("peers installed (scripts/install-deps): %s" % ", ".join(programs), not missing,
            "all on PATH", missing)
    if missing:
        raise RuntimeError("missing peer programs: %s" % missing)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def file_sha256(path):
    d = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            d.update(block)
    return d.hexdigest()


def random_file(path, size):
    """A file of `size` random bytes; returns its sha256."""
    d = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            block = os.urandom(min(left, 1 << 20))
            d.update(block)
            f.write(block)
            left -= len(block)
    return d.hexdigest()


def port():
    return h.free_port()


def spawn(argv, log=None, env=None, cwd=None, netns=None):
    """Starts a peer process (stopped by PID at exit, and killed if this test dies)."""
    if netns:
        argv = ["ip", "netns", "exec", netns] + list(argv)
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(argv, stdout=out, stderr=out if log else subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=env, cwd=cwd, preexec_fn=h._die_with_parent)
    if log:
        out.close()
    p = Proc(proc, argv[0])
    h._register(p)
    return p


class Proc:
    """A started peer; stop() sends SIGTERM, then SIGKILL."""

    def __init__(self, proc, name):
        self.proc, self.pid, self.name = proc, proc.pid, name
        self.returncode = None

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=5.0):
        return h.stop_process(self, timeout)

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(5)
        h._unregister(self)


class Nginx(Proc):
    """An nginx() server: its master and the workers it forked. A SIGKILL of the master
    alone leaves the workers running, orphaned, still serving on the listening socket; the
    master goes first so it cannot fork a new worker for one killed."""

    def kill(self):
        try:
            with open("/proc/%d/task/%d/children" % (self.pid, self.pid)) as f:
                workers = [int(w) for w in f.read().split()]
        except OSError:
            workers = []
        Proc.kill(self)
        for w in workers:
            try:
                os.kill(w, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_port(p, host="127.0.0.1", timeout=15.0, netns=None):
    if netns is None:
        return h.wait_port(p, timeout=timeout, host=host)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(["ip", "netns", "exec", netns, "bash", "-c",
                            "exec 3<>/dev/tcp/%s/%d" % (host, p)], capture_output=True)
        if r.returncode == 0:
            return True
        time.sleep(0.1)
    return False


def run(argv, netns=None, timeout=120, **kw):
    """subprocess.run of argv (in namespace `netns` if given), output captured."""
    if netns:
        argv = ["ip", "netns", "exec", netns] + list(argv)
    kw.setdefault("capture_output", True)
    return subprocess.run(argv, timeout=timeout, stdin=subprocess.DEVNULL, **kw)


def curl(*args, timeout=30, netns=None):
    """Runs curl (-sS, exit code kept); returns CompletedProcess with bytes stdout."""
    argv = ["curl", "-sS"] + [str(a) for a in args]
    if netns:
        argv = ["ip", "netns", "exec", netns] + argv
    return subprocess.run(argv, capture_output=True, timeout=timeout + 5)


def sluice(t, config, **kw):
    """The gateway under test on `config` (YAML text), registered with the case's Suite."""
    return h.start_sluice(config, suite=t, **kw)


# ---------------------------------------------------------------- peers

def nginx(t, root, servers, netns=None):
    """A real nginx serving `root`. servers: a list of server-block bodies, each with a
    `{port}` that is replaced by a free port; returns (Proc, [ports])."""
    need(t, "nginx")
    d = h.new_tmpdir("nginx")
    ports, blocks = [], []
    for body in servers:
        p = port()
        ports.append(p)
        blocks.append("    server { listen %s:%d; root %s; %s }\n"
                      % ("0.0.0.0" if netns else "127.0.0.1", p, root, body))
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        # as root, nginx's workers run as nobody, who cannot enter the test's 0700 folders
        f.write(("user root;\n" if os.geteuid() == 0 else "") +
                "worker_processes 1;\ndaemon off;\npid %s/nginx.pid;\nerror_log %s/error.log warn;\n"
                "events { worker_connections 1024; }\n"
                "http {\n    access_log off;\n    keepalive_requests 10000;\n"
                "    client_body_temp_path %s/body;\n    proxy_temp_path %s/proxy;\n"
                "    fastcgi_temp_path %s/fcgi;\n    uwsgi_temp_path %s/uwsgi;\n    scgi_temp_path %s/scgi;\n"
                "%s}\n" % ((d,) * 7 + ("".join(blocks),)))
    proc = spawn(["nginx", "-p", d, "-c", conf], netns=netns)
    proc.__class__ = Nginx
    for p in ports:
        wait_port(p, netns=netns, host="127.0.0.1")
    return proc, ports


def haproxy(t, body):
    """A real haproxy on `body` (frontends/backends; `{port}`s are not replaced: pass ports
    in). Returns its Proc once its config check passed."""
    need(t, "haproxy")
    d = h.new_tmpdir("haproxy")
    conf = os.path.join(d, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write("global\n    maxconn 4096\n\ndefaults\n    timeout connect 5s\n    timeout client 60s\n"
                "    timeout server 60s\n\n" + body)
    chk = subprocess.run(["haproxy", "-c", "-f", conf], capture_output=True, text=True)
    if chk.returncode != 0:
        raise RuntimeError("haproxy -c: %s" % chk.stdout + chk.stderr)
    return spawn(["haproxy", "-db", "-f", conf], log=os.path.join(d, "haproxy.log"))


def redis(t, netns=None):
    """A throwaway redis-server on a free port (no persistence); returns (Proc, port)."""
    need(t, "redis-server")
    d = h.new_tmpdir("redis")
    p = port()
    proc = spawn(["redis-server", "--port", str(p), "--bind", "0.0.0.0" if netns else "127.0.0.1",
                  "--save", "", "--appendonly", "no", "--dir", d, "--protected-mode", "no"],
                 log=os.path.join(d, "redis.log"), netns=netns)
    wait_port(p, netns=netns)
    return proc, p


PG_BIN = "/usr/lib/postgresql/15/bin"


class Postmaster(Proc):
    """A postgres() server: stopped with SIGINT (fast shutdown: it ends its sessions and
    removes its shared memory; SIGTERM would wait for every client to leave, and SIGKILL
    leaves the SysV segment behind), SIGKILL after 10 s."""

    def stop(self, timeout=10.0):
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        Proc.kill(self)  # SIGKILL if still running; unregisters
        return self.proc.returncode

    kill = stop  # cleanup_all calls kill


def postgres(t, netns=None):
    """A throwaway PostgreSQL cluster made with initdb (trust auth, user postgres) on a free
    port. Returns (Proc, port, env) where env has PGHOST/PGPORT/PGUSER for the client tools."""
    initdb = os.path.join(PG_BIN, "initdb")
    need(t, initdb, "pgbench", "psql")
    d = h.new_tmpdir("pg")
    os.chmod(h.tmp_root(), 0o755)
    os.chmod(d, 0o777)
    data = os.path.join(d, "data")
    asuser = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"] if os.geteuid() == 0 else []
    r = subprocess.run(asuser + [initdb, "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("initdb: %s%s" % (r.stdout, r.stderr))
    p = port()
    listen = "0.0.0.0" if netns else "127.0.0.1"
    proc = spawn(asuser + [os.path.join(PG_BIN, "postgres"), "-D", data, "-p", str(p), "-k", d,
                           "-c", "listen_addresses=%s" % listen, "-c", "fsync=off",
                           "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                           "-c", "max_connections=100", "-c", "dynamic_shared_memory_type=mmap"],
                 log=os.path.join(d, "postgres.log"), netns=netns)
    proc.__class__ = Postmaster
    wait_port(p, netns=netns)
    env = dict(os.environ, PGHOST="127.0.0.1", PGPORT=str(p), PGUSER="postgres", PGDATABASE="postgres")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if run(["psql", "-qAtc", "select 1"], env=env, netns=netns).returncode == 0:
            break
        time.sleep(0.1)
    return proc, p, env


# ---------------------------------------------------------------- origins (peer_nginx, peer_haproxy, peer_pyorigin)

def fetch(url, *args, timeout=30):
    """curl of url on a fresh connection, the body kept apart from curl's messages.
    Returns (curl's exit code, body bytes, response head text lower-cased)."""
    d = h.new_tmpdir("fetch")
    body, head = os.path.join(d, "body"), os.path.join(d, "head")
    r = curl("--max-time", timeout, "-o", body, "-D", head, *args, url, timeout=timeout)
    out = []
    for p in (body, head):
        try:
            with open(p, "rb") as f:
                out.append(f.read())
        except OSError:
            out.append(b"")
    shutil.rmtree(d, ignore_errors=True)
    return r.returncode, out[0], out[1].decode("latin-1").lower()


def origin_l7(t, origin_port, workers=2):
    """The gateway in front of one origin: http listener `web`, every request to upstream
    `o` at 127.0.0.1:origin_port."""
    return sluice(t, """
workers: %d
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0 }
upstreams:
  - { name: o, targets: [ { address: 127.0.0.1:%d } ] }
routes:
  - { name: all, upstream: o }
""" % (workers, origin_port))


def origin_l4(t, origin_port):
    """The gateway in front of one origin at L4: tcp listeners `auto` (splice auto) and
    `off` (splice off), both to 127.0.0.1:origin_port."""
    return sluice(t, """
workers: 2
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: auto, listen: 127.0.0.1:0, protocol: tcp, upstream: o, splice: auto }
  - { name: off, listen: 127.0.0.1:0, protocol: tcp, upstream: o, splice: off }
upstreams:
  - { name: o, targets: [ { address: 127.0.0.1:%d } ] }
""" % origin_port)


def at_once(calls, timeout=120):
    """Runs each (function, args...) of `calls` on a thread of its own, all at once, and
    waits for them (each bounds its own time; `timeout` caps the wait for each)."""
    import threading
    th = [threading.Thread(target=c[0], args=tuple(c[1:]), daemon=True) for c in calls]
    for x in th:
        x.start()
    for x in th:
        x.join(timeout)


class Kept:
    """GETs one after another on a kept-alive client connection; one that fails (its error
    returned) leaves the next to a new connection."""

    def __init__(self, port, timeout=20):
        self.port, self.timeout, self.c = port, timeout, None

    def get(self, path):
        """(the response, None) or (None, what went wrong)."""
        try:
            if self.c is None:
                self.c = h.Client(self.port, timeout=self.timeout)
            self.c.send(h.build_request("GET", path))
            return self.c.read_response(), None
        except Exception as e:
            self.close()
            return None, repr(e)

    def close(self):
        if self.c is not None:
            self.c.close()
            self.c = None

# ---------------------------------------------------------------- clients (curl, h2load, nghttp, h2,
# websocket, grpcio, openssl, chromium): what their peer files share

def certs(t, names=("localhost",)):
    """A test CA and one leaf per name (SAN DNS:name, and IP:127.0.0.1 on the first),
    made by the openssl CLI: {"dir", "ca", name: (crt, key)}."""
    d = h.new_tmpdir("certs")
    out = {"dir": d, "ca": h.make_ca(d)[1]}
    for i, n in enumerate(names):
        out[n] = h.make_leaf(d, n.replace("*", "star"), n, "DNS:%s%s" % (n, ",IP:127.0.0.1" if i == 0 else ""))
    return out


def hashing_origin():
    """A MockUpstream that answers every request with JSON {method, len, sha256, chunked,
    content_length}: what it received, so an upload is checked on the far side."""
    def handler(req):
        return h.json_response({"method": req.method, "len": req.body_len, "sha256": req.body_sha256,
                                "chunked": req.chunked, "content_length": req.header("Content-Length")})
    return h.MockUpstream(handler, name="hashing", record_limit=4096, body_keep=0)


def l7(t, upstreams, routes="  - { name: all, match: { paths: [/] }, upstream: o }\n", tls=None, workers=2,
       listener_extra=""):
    """sluice on L7: listener `web` (plaintext: HTTP/1.1 and h2c) and, with tls=(crt, key)
    or a list of certificate entries, listener `tls` (ALPN h2, http/1.1). upstreams: the
    YAML list items of `upstreams:` (e.g. "  - { name: o, targets: [ { address: A } ] }")."""
    if tls is not None and not isinstance(tls, str):
        tls = "[ { cert: %s, key: %s } ]" % tls
    return sluice(t, "workers: %d\nadmin: { listen: 127.0.0.1:0 }\nlisteners:\n"
                     "  - { name: web, listen: 127.0.0.1:0%s }\n%s"
                     "upstreams:\n%s\nroutes:\n%s"
                  % (workers, listener_extra,
                     "  - { name: tls, listen: 127.0.0.1:0, tls: { certificates: %s }%s }\n"
                     % (tls, listener_extra) if tls else "", upstreams.rstrip("\n"), routes))


def upstream(addr, name="o", extra=""):
    """One `upstreams:` item: upstream `name` with the single target `addr` (host:port)."""
    return "  - { name: %s, targets: [ { address: %s } ]%s }\n" % (name, addr, extra)


def need_modules(t, *names):
    """Fails the case (no skip) when a module of Debian's python3 (python3-h2, python3-grpcio,
    python3-websockets) does not import; a peer file imports them lazily, so --list works."""
    import importlib
    missing = []
    for n in names:
        try:
            importlib.import_module(n)
        except ImportError:
            missing.append(n)
    t.check("python modules import (Debian's python3, scripts/install-deps): %s" % ", ".join(names),
            not missing, "all import", missing)
    if missing:
        raise RuntimeError("missing python modules: %s" % missing)


def json_lines(path, n, timeout=10.0):
    """The JSON lines of file `path` (an access log) once it holds n of them, or what it
    holds after timeout s."""
    import json
    deadline = time.monotonic() + timeout
    while True:
        with open(path) as f:
            lines = [json.loads(x) for x in f if x.strip()]
        if len(lines) >= n or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


# ---------------------------------------------------------------- databases over L4 (peer_postgres, peer_redis)

def tcp_gateway(t, origin_port, splice=("auto",)):
    """sluice (2 workers) with one tcp listener per splice mode, named after it ("auto",
    "off"), each in front of 127.0.0.1:origin_port."""
    listeners = "".join("  - { name: %s, listen: 127.0.0.1:0, protocol: tcp, upstream: o, splice: %s }\n"
                        % (m, m) for m in splice)
    return sluice(t, "workers: 2\nadmin: { listen: 127.0.0.1:0 }\nlisteners:\n%supstreams:\n"
                     "  - { name: o, targets: [ { address: 127.0.0.1:%d } ] }\n" % (listeners, origin_port))


def tcp_bytes(s, listener):
    """sluice_tcp_bytes_total of a listener: {"in": read from clients, "out": from upstreams}."""
    _, m = s.metrics()
    return {d: sum(v for name, labels, v in m if name == "sluice_tcp_bytes_total"
                   and labels.get("listener") == listener and labels.get("direction") == d)
            for d in ("in", "out")}
