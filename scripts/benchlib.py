"""Shared pieces of scripts/bench-resilience, scripts/bench-edge, scripts/bench-tls and scripts/bench:
ports, processes, wrk, medians, the machine-wide bench lock, the release build, and the TLS
certificate and pinned client suite."""

import fcntl
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def say(msg=""):
    print(msg, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("process exited before listening on %d" % port)
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("nothing listens on %d" % port)


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def wrk(port, dur, conns, path="/bench", headers=(), script=None):
    """req/s, non-2xx count, socket-error text of one wrk run (-t1)."""
    argv = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % dur, "--latency"]
    for hd in headers:
        argv += ["-H", hd]
    if script:
        argv += ["-s", script]
    argv.append("http://127.0.0.1:%d%s" % (port, path))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=dur + 30)
    m = re.search(r"Requests/sec:\s+([\d.]+)", out.stdout)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
    errs = re.search(r"Socket errors: (.*)", out.stdout)
    if not m:
        raise RuntimeError("wrk said: " + out.stdout[-500:] + out.stderr[-500:])
    return float(m.group(1)), int(bad.group(1)) if bad else 0, errs.group(1) if errs else ""


def _latency_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)$", text)
    if not m:
        return float("nan")
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]


def wrk_url(url, dur, conns, headers=(), env=None, prefix=()):
    """One wrk run (-t1 --latency) against a full URL (http:// or https://): a dict with rps,
    requests, p50_ms, p99_ms, non2xx, errors (socket errors, summed) and errs (their text).
    env: the client's environment (e.g. OPENSSL_CONF); prefix: e.g. ["taskset", "-c", "1"]."""
    argv = list(prefix) + ["wrk", "-t1", "-c%d" % conns, "-d%ds" % dur, "--latency"]
    for hd in headers:
        argv += ["-H", hd]
    argv.append(url)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=dur + 30, env=env)
    m = re.search(r"Requests/sec:\s+([\d.]+)", out.stdout)
    if not m:
        raise RuntimeError("wrk said: " + out.stdout[-500:] + out.stderr[-500:])
    n = re.search(r"(\d+) requests in", out.stdout)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
    errs = re.search(r"Socket errors: (.*)", out.stdout)
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out.stdout, re.M))
    return {"rps": float(m.group(1)), "requests": int(n.group(1)) if n else 0,
            "p50_ms": _latency_ms(lat.get("50", "")), "p99_ms": _latency_ms(lat.get("99", "")),
            "non2xx": int(bad.group(1)) if bad else 0,
            "errors": sum(int(x) for x in re.findall(r"\d+", errs.group(1))) if errs else 0,
            "errs": errs.group(1) if errs else "", "raw": out.stdout}


def machine_cpu_ticks():
    """user+nice+system ticks of the whole machine (/proc/stat): what processes' utime+stime
    add up to. With the benchmark's own CPU subtracted, what other work used meanwhile."""
    with open("/proc/stat") as f:
        v = f.readline().split()[1:4]
    return sum(int(x) for x in v)


def wait_quiet(max_wait, threshold=0.10):
    """Waits (at most max_wait s) for half a second in which the machine used less than
    threshold of one CPU; returns the seconds waited. Other sessions share this machine: a run
    that overlaps their builds says more about them than about the gateway."""
    t0 = time.monotonic()
    while True:
        k0 = machine_cpu_ticks()
        time.sleep(0.5)
        busy = (machine_cpu_ticks() - k0) / os.sysconf("SC_CLK_TCK") / 0.5
        if busy < threshold or time.monotonic() - t0 >= max_wait:
            return time.monotonic() - t0 - 0.5


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def build(build_dir, targets):
    subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build_dir, "-j2", "--target"] + list(targets), check=True,
                   stdout=subprocess.DEVNULL)


def take_lock(name):
    """The machine-wide lock scripts/bench takes (two benchmarks measure each other)."""
    lock = open(os.path.join(tempfile.gettempdir(), "sluice-bench.lock"), "a+")
    if os.environ.get("BENCH_NO_LOCK"):  # development runs only: numbers are not comparable
        return lock
    say("%s: waiting for the machine-wide bench lock" % name)
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def proc_tree(pid):
    """pid and all its descendants (nginx: master + worker), from /proc/*/stat."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass  # exited meanwhile
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(c for c, pp in parent.items() if pp == p)
    return sorted(out)


def tree_cpu_seconds(pids):
    """Sum of cpu_seconds over pids (a process tree from proc_tree)."""
    return sum(cpu_seconds(p) for p in pids)


def tree_rss_kib(pids):
    """Sum of VmRSS over pids, in KiB."""
    total = 0
    for p in pids:
        with open("/proc/%d/status" % p) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def fd_kinds(pids):
    """{"socket": n, "pipe": n, "anon_inode": n, "file": n} over the open fds of pids."""
    kinds = {}
    for p in pids:
        d = "/proc/%d/fd" % p
        for fd in os.listdir(d):
            try:
                t = os.readlink(os.path.join(d, fd))
            except OSError:
                continue
            k = t.split(":", 1)[0] if ":" in t and not t.startswith("/") else "file"
            kinds[k] = kinds.get(k, 0) + 1
    return kinds


# The TLS pin (scripts/bench-tls, scripts/bench --scenarios h2): servers offer only TLS 1.3,
# and every TLS client started (wrk, h2load, openssl s_client, curl) reads CLIENT_CNF through
# OPENSSL_CONF; OpenSSL applies system_default to each SSL_CTX it creates, so the client offers
# only TLS 1.3 with TLS_SUITE and every server must pick it.
TLS_SUITE = "TLS_AES_128_GCM_SHA256"
CLIENT_CNF = """openssl_conf = openssl_init
[openssl_init]
ssl_conf = ssl_sect
[ssl_sect]
system_default = system_default_sect
[system_default_sect]
MinProtocol = TLSv1.3
Ciphersuites = %s
""" % TLS_SUITE


def make_cert(d, kind):
    """A self-signed localhost/127.0.0.1 certificate made by the openssl CLI in d: kind "ecdsa"
    (P-256) or "rsa" (2048); returns the (cert, key) file names, relative to d."""
    key, crt = os.path.join(d, kind + ".key"), os.path.join(d, kind + ".crt")
    newkey = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"] if kind == "ecdsa"
              else ["-newkey", "rsa:2048"])
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"] + newkey + ["-keyout", key, "-out", crt],
                   check=True, capture_output=True)
    return os.path.basename(crt), os.path.basename(key)
