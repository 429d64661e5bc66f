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


# --------------------------------------------------------------------------- results
# Every run of scripts/bench writes one file per scenario to bench/results/
# (<scenario>-<UTC timestamp>.json); scripts/bench-report renders the newest file of each
# scenario into docs/BENCHMARKS.md, between `<!-- results NAME ... -->` and `<!-- /results -->`
# (render_run: one heading line and one compact table per scenario; the file keeps the rest),
# and the goals table from GOALS below. scripts/check-docs fails when the page differs.

RESULTS_SCHEMA = 1

# The goals a results file can report a value for: id -> (issue, text, op, limit, unit).
# PASS when `value op limit` and the run had no errors; the page computes it from the value.
GOALS = {
    "small.cpu_vs_nginx": (30, "small GET: proxy CPU per request ≤ 0.8× nginx", "<=", 0.8, "×"),
    "small.rps_vs_nginx": (30, "small GET: req/s ≥ 1.1× nginx", ">=", 1.1, "×"),
    "small.p99_vs_haproxy": (30, "small GET: p99 ≤ HAProxy's", "<=", 1.0, "×"),
    "plugins.three_added_us": (30, "request-id + headers + ip-restriction add ≤ 3 µs CPU per request", "<=", 3.0,
                               " µs"),
    "scale.rps_10k_vs_10": (30, "req/s at 10,000 routes ≥ 0.95× at 10", ">=", 0.95, "×"),
    "scale.reload_stall_ms": (30, "reload of 10,000 routes under load: stall ≤ 2 ms", "<=", 2.0, " ms"),
    "l4.cpr_copy_vs_haproxy": (30, "L4 connection per request (copy): CPU ≤ HAProxy mode tcp's", "<=", 1.0, "×"),
    "l4.cpr_splice_vs_haproxy": (30, "L4 connection per request (splice): CPU ≤ HAProxy mode tcp's", "<=", 1.0,
                                 "×"),
    "l4.down1_vs_haproxy_splice": (30, "L4 1 MiB downloads (splice): MB/s ≥ HAProxy splice's", ">=", 1.0, "×"),
    "l4peers.pgbench_durable_vs_direct": (27, "pgbench (durable commits, PostgreSQL's default) through sluice L4: "
                                              "TPS ≥ 0.95× direct, 0 errors", ">=", 0.95, "×"),
    "l4peers.pgbench_durable_vs_haproxy": (27, "pgbench (durable commits) through sluice L4: TPS ≥ HAProxy mode tcp's",
                                           ">=", 1.0, "×"),
    "l4peers.pgbench_vs_direct": (27, "pgbench (commits not waited, CPUs full) through sluice L4: TPS ≥ 0.95× direct, "
                                      "0 errors", ">=", 0.95, "×"),
    "l4peers.pgbench_vs_haproxy": (27, "pgbench (commits not waited) through sluice L4: TPS ≥ HAProxy mode tcp's",
                                   ">=", 1.0, "×"),
    "l4peers.redis_vs_direct": (27, "redis-benchmark through sluice L4: ops/s ≥ 0.95× direct, 0 errors", ">=",
                                0.95, "×"),
    "l4peers.redis_vs_haproxy": (27, "redis-benchmark through sluice L4: ops/s ≥ HAProxy mode tcp's", ">=", 1.0,
                                 "×"),
    "plugins.read1_added_us": (20, "one access phase reading one header adds ≤ 0.7 µs", "<=", 0.7, " µs"),
    "plugins.three_vs_nginxlua_rps": (20, "req/s with the three plugins ≥ 1.4× nginx + Lua doing the same", ">=",
                                      1.4, "×"),
    "plugins.cache_hit_vs_response": (19, "proxy-cache HIT: CPU per request ≤ 1.2× the response plugin's", "<=",
                                      1.2, "×"),
    "plugins.kong_vs_native": (31, "a Kong-style plugin's added CPU per request ≤ 1.2× the same logic as a sluice plugin",
                               "<=", 1.2, "×"),
    "plugins.kong_vs_native_instr": (31, "the same, in instructions counted by callgrind (scripts/bench-instr: "
                                         "not moved by the machine's load)", "<=", 1.2, "×"),
    "grpc.calls_vs_nginx": (14, "gRPC unary: calls/s ≥ 1.0× nginx grpc_pass", ">=", 1.0, "×"),
    "grpc.cpu_vs_nginx": (14, "gRPC unary: CPU per call ≤ 0.9× nginx grpc_pass", "<=", 0.9, "×"),
    "h2-tls.rps_vs_best": (13, "HTTP/2 over TLS: req/s ≥ 1.0× the best of nginx and h2o", ">=", 1.0, "×"),
    "h2-tls.cpu_vs_nginx": (13, "HTTP/2 over TLS: CPU per request ≤ 0.9× nginx", "<=", 0.9, "×"),
    "h2-h2c.rps_vs_best": (13, "HTTP/2 h2c: req/s ≥ 1.0× the best of nginx and h2o", ">=", 1.0, "×"),
    "h2-h2c.cpu_vs_nginx": (13, "HTTP/2 h2c: CPU per request ≤ 0.9× nginx", "<=", 0.9, "×"),
    "spike.back_mib": (12, "after a spike of 4,000 requests: RSS within 8 MiB of before, 10 s after", "<=", 8.0,
                       " MiB"),
    "spike.peak_vs_haproxy": (12, "spike: peak RSS in flight ≤ HAProxy's", "<=", 1.0, "×"),
    "tls.keepalive_vs_nginx": (6, "HTTPS keep-alive req/s ≥ 1.0× nginx (ECDSA and RSA; the lower shown)", ">=",
                               1.0, "×"),
    "tls.handshakes_vs_nginx": (6, "new TLS handshakes/s ≥ 1.0× nginx (ECDSA and RSA; the lower shown)", ">=", 1.0,
                                "×"),
    "edge.jwt_vs_none": (5, "jwt-auth route: req/s ≥ 0.9× the bare route", ">=", 0.9, "×"),
    "edge.ratelimit_vs_none": (5, "local rate-limit route: req/s ≥ 0.95× the bare route", ">=", 0.95, "×"),
    "resilience.p2c_one_slow": (4, "p2c-ewma with one target 10× slower keeps ≥ 0.9× of its all-fast req/s", ">=",
                                0.9, "×"),
    "big.mibs_vs_nginx": (3, "1 MiB responses: MiB/s ≥ 1.0× nginx", ">=", 1.0, "×"),
    "idle.kib_per_conn": (3, "idle keep-alive client connection ≤ 1.5 KiB", "<=", 1.5, " KiB"),
}


def goal_result(g):
    """"PASS", "MISS" or "no data" for a results file's goal entry ({"id", "value", "clean"})."""
    _, _, op, limit, _ = GOALS[g["id"]]
    v = g.get("value")
    if v is None:
        return "no data"
    ok = v <= limit if op == "<=" else v >= limit
    return "PASS" if ok and g.get("clean", True) else "MISS"


def goal_value(g):
    unit = GOALS[g["id"]][4]
    v = g.get("value")
    s = "—" if v is None else (f"{v:.2f}×" if unit == "×" else f"{v:.2f}{unit}")
    if not g.get("clean", True):
        s += " (sluice had errors)"
    note = g.get("note") or ""
    if len(note) > 80:  # the first clause; the whole note is in the results file
        note = note.split("; ")[0] + "; more in the file"
    return s + (f"; {note}" if note else "")


def results_dir(root=ROOT):
    return os.environ.get("BENCH_RESULTS") or os.path.join(root, "bench", "results")


def git_commit(root=ROOT):
    """(short commit of HEAD, True when tracked files differ from it), or (None, None)."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head or None, bool(dirty)
    except (OSError, subprocess.SubprocessError):
        return None, None


def machine_facts():
    """CPU model, cores, kernel and OS of this machine."""
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    osname = None
    try:
        with open("/etc/os-release") as f:
            osname = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line).get("PRETTY_NAME", "")
            osname = osname.strip('"') or None
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "kernel": os.uname().release, "os": osname}


PEER_VERSION = {  # name -> (argv, pattern of the version in its stdout + stderr)
    "nginx": (["nginx", "-v"], r"nginx/(\S+)"),
    "haproxy": (["haproxy", "-v"], r"version (\S+)"),
    "wrk": (["wrk", "-v"], r"wrk (\S+)"),
    "h2load": (["h2load", "--version"], r"nghttp2/(\S+)"),
    "h2o": (["h2o", "--version"], r"version (\S+)"),
    "postgres": (["pgbench", "--version"], r"\) (\S+)"),
    "redis": (["redis-server", "--version"], r"v=(\S+)"),
    "openssl": (["openssl", "version"], r"OpenSSL (\S+)"),
}


def peer_versions(names):
    out = {}
    for n in names:
        argv, pat = PEER_VERSION[n]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            m = re.search(pat, r.stdout + r.stderr)
            out[n] = m.group(1) if m else None
        except (OSError, subprocess.SubprocessError):
            out[n] = None
    return out


def save_result(rec, when=None):
    """Writes one scenario's record (the fields below filled in where missing) to
    results_dir()/<scenario>-<UTC timestamp>.json and returns the path; BENCH_RESULTS=0 writes
    nothing (returns None)."""
    if os.environ.get("BENCH_RESULTS") == "0":
        return None
    import datetime
    import json
    when = when or datetime.datetime.now(datetime.timezone.utc)
    commit, dirty = git_commit()
    rec = dict({"schema": RESULTS_SCHEMA, "commit": commit, "dirty": dirty,
                "date": when.strftime("%Y-%m-%dT%H:%M:%SZ"), "machine": machine_facts()}, **rec)
    d = results_dir()
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "%s-%s.json" % (rec["scenario"], when.strftime("%Y%m%dT%H%M%SZ")))
    with open(path, "w") as f:
        json.dump(rec, f, indent=1, ensure_ascii=False, default=str)
        f.write("\n")
    return path


def load_results(d):
    """Every record of the *.json files in d, oldest first (by date, then file name)."""
    import json
    recs = []
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if name.endswith(".json"):
            with open(os.path.join(d, name)) as f:
                rec = json.load(f)
            rec["_file"] = name
            recs.append(rec)
    return sorted(recs, key=lambda r: (r["date"], r["_file"]))


def newest_complete(recs):
    """{scenario: its newest record that ran the scenario's usual peers and configs}: a run of
    a subset of the proxies (or --same-headers, --plugin-runs) is "complete": false."""
    return {r["scenario"]: r for r in recs if r.get("complete") is not False}


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# The page shows one compact table per scenario; the results file keeps everything the run
# printed (every table, the ranges, the notes) and every repetition's figures.
_RANGE = re.compile(r"\s*\([^()]*?(?:–| to )[^()]*\)")  # " (a–b)", " (a to b, n=3)"
# Notes shown under a scenario's table: the ones that qualify its figures and that the table
# does not show (a comparison within noise, what a reload did); the others are in the file.
NOTES_SHOWN = ("scale", "edge")
# Plugin runs the page shows (the goals' figures and their comparisons); the file has all.
PLUGIN_ROWS = ("sluice none", "sluice noop×10", "sluice read×1", "sluice three",
               "sluice response", "sluice cache HIT", "sluice native", "sluice kong", "nginx none",
               "nginx+lua three")


def median_only(cell):
    """A cell without its range: "39,035 (33,312–40,540)" -> "39,035"."""
    return _RANGE.sub("", str(cell))


def _short_version(v):
    m = re.search(r"\d+(?:\.\d+)+", str(v))
    return m.group(0) if m else str(v)


def run_heading(rec, also=()):
    """One line: what ran, commit and date, the machine, the same-run peers' versions, the file
    and the command. also: records of the same invocation shown in the same table (their
    titles and files are added)."""
    m = rec.get("machine") or {}
    kernel = re.match(r"\d+\.\d+", m.get("kernel") or "")
    machine = ", ".join(x for x in (m.get("cpu"), "%s cores" % m.get("cores", "?"),
                                    "Linux " + kernel.group(0) if kernel else None) if x)
    peers = ", ".join("%s %s" % (k, _short_version(v)) for k, v in sorted((rec.get("peers") or {}).items()) if v)
    title = rec["title"]
    for r in also:  # "A — how" + "B — how" -> "A; B — how"
        head, _, how = r["title"].partition(" — ")
        mine, sep, myhow = title.partition(" — ")
        title = "%s; %s%s%s" % (mine, head, sep, myhow) if how == myhow else "%s; %s" % (title, r["title"])
    if title[1:2].islower():  # "small keep-alive GET" -> "Small ...", "gRPC" and "mTLS" kept
        title = title[0].upper() + title[1:]
    files = ", ".join("[%s](../bench/results/%s)" % (r["_file"], r["_file"]) for r in (rec,) + tuple(also))
    parts = [title,
             "`%s`%s, %s" % (rec.get("commit") or "unknown", " + local changes" if rec.get("dirty") else "",
                             rec["date"][:10]),
             machine, peers, files + (" (transcribed)" if rec.get("transcribed") else ""),
             "`%s`" % rec["command"]]
    return "#### " + " · ".join(p for p in parts if p)


def _is_ratio(t):
    return t["header"][0] == "ratio"


def _metric(h):
    return {"CPU µs/req": "CPU", "added CPU (− none)": "added CPU"}.get(h, h.split(" (")[0])


def compact_paired(rec):
    """The main table with each "sluice/PEER" ratio table's row folded into a column on PEER's
    row ("sluice ÷ this: METRICS"); a ratio row naming no row of the table is appended."""
    tables = rec.get("tables", [])
    main, ratios = tables[0], [t for t in tables[1:] if _is_ratio(t)]
    header = list(main["header"])
    rows = [[median_only(c) for c in r] for r in main["rows"]]
    for t in ratios:
        header.append("sluice ÷ this: " + ", ".join(t["header"][1:]))
        for r in rows:
            r.append("")
        for rr in t["rows"]:
            cell = ", ".join(median_only(c) or "—" for c in rr[1:])
            peer = rr[0].split("/", 1)[1].strip() if rr[0].startswith("sluice/") else None
            hit = next((r for r in rows if peer and (r[0] == peer or r[0].startswith(peer + " "))), None)
            if hit is not None:
                hit[-1] = cell
            else:
                rows.append([rr[0]] + [""] * (len(header) - 2) + [cell])
    return header, rows  # other tables (none today) stay in the file


def compact_plugins(rec):
    """One row per configuration the goals use; the ratio tables and the per-phase/per-call
    figures go into a "compared" column of the row they are about."""
    tables = rec["tables"]
    main = tables[0]
    keep = [main["header"].index(h) for h in ("run", "what the proxy does", "req/s", "p99 ms", "proxy CPU µs/req",
                                              "added CPU µs/req", "errors") if h in main["header"]]
    header = [main["header"][i] for i in keep] + ["compared"]
    rows = [[median_only(r[i]) for i in keep] + [[]] for r in main["rows"]
            if r[0] in PLUGIN_ROWS or not PLUGIN_ROWS]
    by_name = {r[0]: r for r in rows}
    for t in tables[1:]:
        for rr in t["rows"]:
            if _is_ratio(t) and " / " in rr[0]:
                a, b = rr[0].split(" / ", 1)
                if a in by_name:
                    by_name[a][-1].append("÷ %s: %s" % (b, ", ".join(
                        "%s %s" % (_metric(h), median_only(c)) for h, c in zip(t["header"][1:], rr[1:]))))
            else:
                m = re.search(r"\(\((\S+) −", rr[0])  # derived: "each further phase entered ((phases×4 − ..."
                if m and "sluice " + m.group(1) in by_name:
                    by_name["sluice " + m.group(1)][-1].append("%s: %s ns" % (rr[0].split(" ((")[0],
                                                                             median_only(rr[1])))
    for r in rows:
        r[-1] = "; ".join(r[-1])
    return header, rows


def compact_join(rec):
    """Tables about the same proxies (first column) side by side: one row per proxy; a table
    of sluice's ratios to peers ("sluice mode" | "/ PEER"...) becomes one column."""
    header, rows, index = ["proxy"], [], {}
    for t in rec["tables"]:
        n = len(header)
        if t["header"][0] == "sluice mode":
            header.append("sluice CPU ÷ " + ", ".join(h.lstrip("/ ") for h in t["header"][1:]))
            cols = None
        else:
            prefix = "1 MiB download " if (t.get("title") or "").startswith("L4 download") else ""
            header += [prefix + h for h in t["header"][1:]]
            cols = len(t["header"]) - 1
        for r in rows:
            r += [""] * (len(header) - len(r))
        for rr in t["rows"]:
            if rr[0] not in index:
                index[rr[0]] = [rr[0]] + [""] * (len(header) - 1)
                rows.append(index[rr[0]])
            row = index[rr[0]]
            if cols is None:
                row[n] = ", ".join(median_only(c) for c in rr[1:])
            else:
                row[n:n + cols] = [median_only(c) for c in rr[1:]]
    return header, rows


def compact_l4peers(rec):
    """Three protocols, each a table and a table of sluice's ratios: per proxy, each
    protocol's rate with its ratio to direct, sluice's ratio to HAProxy mode tcp (copy), and
    the errors of all three."""
    def name(title):
        t = (title or "").lower()
        return ("pgbench durable" if "synchronous_commit on" in t else "pgbench no-wait"
                if "synchronous_commit off" in t else "redis-benchmark" if "redis" in t else title)
    tables = rec["tables"]
    header, rows, index, errors = ["proxy"], [], {}, {}
    for i in range(0, len(tables), 2):
        main, ratio = tables[i], tables[i + 1] if i + 1 < len(tables) else None
        h = main["header"]
        header.append("%s %s (× direct)" % (name(main.get("title")), h[1]))
        for rr in main["rows"]:
            if rr[0] not in index:
                index[rr[0]] = [rr[0]]
                rows.append(index[rr[0]])
            row = index[rr[0]]
            row += [""] * (len(header) - 1 - len(row))
            row.append("%s (%s)" % (median_only(rr[1]), median_only(rr[2])))
            if "errors" in h:
                errors[rr[0]] = errors.get(rr[0], 0) + int(str(rr[h.index("errors")]).replace(",", "") or 0)
        if ratio:
            col = next((j for j, x in enumerate(ratio["header"]) if "haproxy mode tcp" in x), None)
            if col is not None:
                header.append("sluice ÷ haproxy tcp")
                for r in rows:
                    r += [""] * (len(header) - len(r))
                for rr in ratio["rows"]:
                    if rr[0] in index:
                        index[rr[0]][-1] = median_only(rr[col])
    header.append("errors")
    for r in rows:
        r += [""] * (len(header) - 1 - len(r))
        r.append(str(errors.get(r[0], "—")))
    return header, rows


COMPACT = {"plugins": compact_plugins, "l4": compact_join, "l4peers": compact_l4peers}


def _table(rec):
    return COMPACT.get(rec["scenario"], compact_paired)(rec)


def render_run(rec, also=()):
    """A scenario's run: the one-line heading of run_heading, then one table (COMPACT's for
    the scenarios that printed several tables; else the main table with its paired ratios as
    a column), medians only; then its notes for NOTES_SHOWN. also: runs of the same
    invocation with a table of the same shape (h2-tls and h2-h2c), joined as columns
    prefixed by the part of the scenario's name after its first "-"."""
    if not rec.get("tables"):
        return run_heading(rec) + "\n\nNo table in this results file."
    header, rows = _table(rec)
    if also:
        group = (rec,) + tuple(also)
        label = [r["scenario"].split("-", 1)[-1] for r in group]
        header = [header[0]] + ["%s %s" % (label[i], h) for i, r in enumerate(group) for h in _table(r)[0][1:]]
        index, rows = {}, []
        for i, r in enumerate(group):
            h, rs = _table(r)
            at = 1 + sum(len(_table(x)[0]) - 1 for x in group[:i])
            for row in rs:
                if row[0] not in index:
                    index[row[0]] = [row[0]] + [""] * (len(header) - 1)
                    rows.append(index[row[0]])
                index[row[0]][at:at + len(h) - 1] = row[1:]
    lines = [run_heading(rec, also), md_table(header, rows)]
    notes = [n for r in (rec,) + tuple(also) if r["scenario"] in NOTES_SHOWN for n in r.get("notes") or []]
    if notes:
        lines += ["", " ".join(notes)]
    return "\n".join(lines)


def render_runs(group):
    """Records in the page's order; consecutive ones of one invocation (same command, date and
    commit) whose tables have the same header share one heading and one table."""
    out, i = [], 0
    while i < len(group):
        j = i + 1
        while (j < len(group) and group[i].get("tables") and group[j].get("tables")
               and all(group[j].get(k) == group[i].get(k) for k in ("command", "date", "commit"))
               and _table(group[j])[0] == _table(group[i])[0]):
            j += 1
        out.append(render_run(group[i], tuple(group[i + 1:j])))
        i = j
    return "\n".join(out)


def render_goals(recs):
    """The goals table: each goal of GOALS with its value from the newest record reporting it
    (complete or not: a goal's ratio is between runs of one run's proxies)."""
    best = {}
    for rec in recs:  # oldest first: the newest wins
        for g in rec.get("goals", []):
            if g["id"] in GOALS:
                best[g["id"]] = (g, rec)
    rows = []
    for gid, (issue, text, _, _, _) in GOALS.items():
        if gid in best:
            g, rec = best[gid]
            rows.append([str(issue), text, goal_value(g), "**%s**" % goal_result(g),
                         "[%s](../bench/results/%s), `%s`, %s" % (rec["scenario"], rec["_file"],
                                                                  rec.get("commit") or "?", rec["date"][:10])])
        else:
            rows.append([str(issue), text, "—", "no data", "—"])
    return md_table(["issue", "goal", "measured", "result", "run (scenario, commit, date)"], rows)


REGION = re.compile(r"(<!-- results ([^>]*?) -->\n)(.*?)(<!-- /results -->)", re.S)


def render_page(text, recs):
    """text with every results region replaced by what the records say; also the regions the
    page names that have no record, and the scenarios the page has no region for. A region
    may name several scenarios (`<!-- results small big -->`): their runs follow each other."""
    newest = newest_complete(recs)
    seen, missing = set(), []

    def sub(m):
        parts, runs = [], []
        for name in m.group(2).split():
            seen.add(name)
            if name in newest and name != "goals":
                runs.append(newest[name])
                continue
            if runs:
                parts.append(render_runs(runs))
                runs = []
            if name == "goals":
                parts.append(render_goals(recs))
            else:
                missing.append(name)
                parts.append("No results file for scenario %s yet." % name)
        if runs:
            parts.append(render_runs(runs))
        return m.group(1) + "\n".join(parts) + "\n" + m.group(4)

    out = REGION.sub(sub, text)
    return out, missing, sorted(set(newest) - seen)
