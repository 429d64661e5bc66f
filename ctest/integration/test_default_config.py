"""Acceptance 1: a bare `sluice` with no config runs the embedded default.

From an empty temporary cwd (no -c, no ./conf/sluice.yaml) the binary must
serve an echo route on 127.0.0.1:8080 and the admin API on 127.0.0.1:9090.
These fixed ports are part of the contract, so this test does not skip when
they are busy: it fails and says so.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("default_config", budget=50)
PROXY_PORT, ADMIN_PORT = 8080, 9090


def start_bare(args, cwd):
    logp = os.path.join(cwd, "..", os.path.basename(cwd) + "-stderr.log")
    logf = open(logp, "wb")
    outf = open(logp.replace("-stderr.log", "-stdout.log"), "wb")
    proc = subprocess.Popen([h.BIN] + args, cwd=cwd, stdout=outf, stderr=logf,
                            stdin=subprocess.DEVNULL, preexec_fn=h._die_with_parent)
    logf.close()
    outf.close()
    s = h.Sluice(proc, cwd, None, None, logp, "bare")
    h._register(s)
    t.sluices.append(s)
    return s


def wait_ready(s, timeout=10.0):
    """Polls admin /ready until 200; returns (ok, last status or error)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if not s.alive():
            return False, "process exited with %s" % s.proc.returncode
        try:
            r = h.request(ADMIN_PORT, "GET", "/ready", timeout=1.0)
            last = r.status
            if r.status == 200:
                return True, 200
        except Exception as e:
            last = repr(e)
        time.sleep(0.05)
    return False, last


def test_ports_free(t):
    for p in (PROXY_PORT, ADMIN_PORT):
        free = h.port_free(p)
        t.check("port %d is free before the test (the default config needs it)" % p, free,
                "127.0.0.1:%d free" % p, "busy: another process listens there" if not free
                else "free")
        if not free:
            t.finish()


def test_bare_binary(t):
    cwd = h.new_tmpdir("emptycwd")
    t.check("cwd is empty (no conf/sluice.yaml)", os.listdir(cwd) == [], [], os.listdir(cwd))
    s = start_bare([], cwd)
    ok, last = wait_ready(s)
    t.check("bare `sluice`: admin /ready answers 200 on 127.0.0.1:9090", ok, 200, last)
    if not ok:
        s.kill()
        return

    # the real curl, as a user would run it
    hdr_file = os.path.join(h.tmp_root(), "curl-headers.txt")
    cp = subprocess.run(["curl", "-s", "--noproxy", "*", "-D", hdr_file, "-m", "5",
                         "127.0.0.1:%d/x" % PROXY_PORT], capture_output=True, timeout=10)
    t.check("curl exits 0", cp.returncode == 0, 0, (cp.returncode, cp.stderr[-300:]))
    try:
        with open(hdr_file, "rb") as f:
            head = f.read().decode("latin-1")
    except OSError:
        head = ""
    m = re.match(r"HTTP/1\.1 (\d{3})", head)
    status = int(m.group(1)) if m else None
    t.check("curl 127.0.0.1:8080/x -> 200", status == 200, 200, head[:300])
    ctype = re.search(r"(?im)^content-type:\s*([^\r\n]*)", head)
    t.check("echo answers Content-Type application/json",
            ctype is not None and ctype.group(1).lower().startswith("application/json"),
            "application/json", ctype.group(1) if ctype else None)
    try:
        body = json.loads(cp.stdout)
    except ValueError:
        body = None
    t.check("echo body is a JSON object", isinstance(body, dict), "JSON object", cp.stdout[:300])
    body = body if isinstance(body, dict) else {}
    t.check("echo method is GET", body.get("method") == "GET", "GET", body.get("method"))
    t.check("echo path is /x", body.get("path") == "/x", "/x", body.get("path"))
    hdrs = body.get("headers") if isinstance(body.get("headers"), dict) else {}
    t.check("echo headers has lower-case host 127.0.0.1:8080",
            hdrs.get("host") == "127.0.0.1:%d" % PROXY_PORT, "127.0.0.1:8080", hdrs)
    t.check("echo headers carry curl's user-agent",
            str(hdrs.get("user-agent", "")).startswith("curl/"), "curl/...",
            hdrs.get("user-agent"))
    for k in ("query", "body"):
        t.check("echo body has key %r" % k, k in body, k, sorted(body))

    r = h.request(ADMIN_PORT, "GET", "/health", timeout=3)
    t.check("admin /health -> 200", r.status == 200, 200, r.status)
    r = h.request(ADMIN_PORT, "GET", "/ready", timeout=3)
    t.check("admin /ready -> 200", r.status == 200, 200, r.status)
    r = h.request(PROXY_PORT, "GET", "/echo/more?a=1", timeout=3)
    t.check("a second path is echoed too (the default route matches every path)",
            r.status == 200 and r.json().get("path") == "/echo/more"
            and r.json().get("query") in ("a=1", "?a=1", {"a": "1"}),
            "200 path /echo/more query a=1", (r.status, r.body[:200]))

    code = s.stop(timeout=10)
    t.check("SIGTERM -> exit code 0", code == 0, 0, code)
    log = s.log()
    lines = [ln for ln in log.splitlines() if ln.strip()]
    bad = []
    for ln in lines:
        try:
            o = json.loads(ln)
            if not (isinstance(o, dict) and {"ts", "level", "msg"} <= set(o)):
                bad.append(ln)
        except ValueError:
            bad.append(ln)
    t.check("stderr has log lines", len(lines) > 0, ">0 lines", len(lines))
    t.check("every stderr line is a JSON object with ts, level, msg", not bad, [], bad[:5])
    t.check("ports released after exit", h.port_free(PROXY_PORT) and h.port_free(ADMIN_PORT),
            "8080/9090 free", (h.port_free(PROXY_PORT), h.port_free(ADMIN_PORT)))


def test_run_ready_file(t):
    """`sluice run --ready-file` without -c: the ready file names the default ports."""
    cwd = h.new_tmpdir("emptycwd2")
    ready = os.path.join(h.tmp_root(), "ready-default.json")
    s = start_bare(["run", "--ready-file", ready], cwd)
    data = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and s.alive():
        try:
            with open(ready) as f:
                data = json.load(f)
            break
        except (OSError, ValueError):
            time.sleep(0.05)
    t.check("`sluice run --ready-file P` (no -c) writes a JSON ready file", isinstance(data, dict),
            "JSON object", (data, s.alive(), s.log()[-300:]))
    if not isinstance(data, dict):
        s.kill()
        return
    t.check("ready file pid is the process", data.get("pid") == s.pid, s.pid, data.get("pid"))
    lst = data.get("listeners") if isinstance(data.get("listeners"), dict) else {}
    t.check("ready file lists one listener at 127.0.0.1:8080",
            list(lst.values()) == ["127.0.0.1:%d" % PROXY_PORT], ["127.0.0.1:8080"], lst)
    t.check("ready file admin is 127.0.0.1:9090", data.get("admin") == "127.0.0.1:%d" % ADMIN_PORT,
            "127.0.0.1:9090", data.get("admin"))
    r = h.request(PROXY_PORT, "GET", "/y", timeout=3)
    t.check("once the ready file exists, 127.0.0.1:8080/y is served (echo path /y)",
            r.status == 200 and r.json().get("path") == "/y", "200 /y", (r.status, r.body[:200]))
    code = s.stop(timeout=10)
    t.check("`sluice run`: SIGTERM -> exit code 0", code == 0, 0, code)


def test_sigint(t):
    cwd = h.new_tmpdir("emptycwd3")
    s = start_bare([], cwd)
    ok, last = wait_ready(s)
    t.check("restart on the same default ports succeeds", ok, 200, last)
    s.signal(signal.SIGINT)
    code = s.wait(10)
    t.check("SIGINT -> exit code 0", code == 0, 0, code)
    if code is None:
        s.kill()


def test_version(t):
    cp = h.run_cli(["version"], timeout=10)
    t.check("`sluice version` exits 0", cp.returncode == 0, 0, (cp.returncode, cp.stderr[-300:]))
    out = (cp.stdout + cp.stderr).strip()
    t.check("`sluice version` prints a version number", re.search(r"\d+\.\d+", out) is not None,
            "something like 0.1.0", out[:200])


def test_version_flag(t):
    """`sluice --version` and `-V` answer as `sluice version` does (packaging scripts and
    Dockerfile smoke steps try the flag first); they were an unknown argument, exit 2."""
    want = h.run_cli(["version"], timeout=10).stdout
    for flag in ("--version", "-V"):
        cp = h.run_cli([flag], timeout=10)
        t.check(f"`sluice {flag}` exits 0", cp.returncode == 0, 0, (cp.returncode, cp.stderr[-300:]))
        t.check(f"`sluice {flag}` prints what `sluice version` prints", cp.stdout == want, want, cp.stdout)


t.run(test_ports_free, test_version, test_version_flag, test_bare_binary, test_run_ready_file, test_sigint)
