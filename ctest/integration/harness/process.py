"""harness.process — the sluice under test: the Suite that checks and summarises a test
file (and fails it on a sanitizer report in any gateway's log), starting a gateway on a
config and waiting for its ready file, stopping it, its log, and running the CLI."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback

from .client import request
from .lifecycle import (BIN, _die_with_parent, _register, _unregister, cleanup_all, new_tmpdir,
                        poll, stop_process)
from .metrics import parse_prometheus
from .wire import short, wait_port


# ---------------------------------------------------------------- checks / suite

class Suite:
    """Collects checks and prints the summary. One per test file."""

    def __init__(self, name, budget=55.0):
        self.name = name
        self.passed = 0
        self.failed = 0
        self.failures = []
        self.sluices = []
        self.t0 = time.monotonic()
        self.budget = budget
        self._lock = threading.Lock()
        self._done = False
        self._watchdog = threading.Timer(budget, self._overrun)
        self._watchdog.daemon = True
        self._watchdog.start()
        # a test killed by SIGTERM/SIGINT (ctest timeout, ^C) still stops what it started
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):
        print("FAIL  interrupted by signal %d; stopping what this file started" % signum,
              flush=True)
        cleanup_all()
        os._exit(128 + signum)

    def check(self, name, cond, expected=None, actual=None):
        """Records one check; prints PASS/FAIL with expected vs actual on failure."""
        with self._lock:
            if cond:
                self.passed += 1
                print("PASS  %s" % name, flush=True)
            else:
                self.failed += 1
                self.failures.append(name)
                print("FAIL  %s\n      expected: %s\n      actual:   %s"
                      % (name, short(expected), short(actual)), flush=True)
        return bool(cond)

    def info(self, msg):
        print("      info: %s" % msg, flush=True)

    def _overrun(self):
        print("FAIL  watchdog: %s exceeded its %.0f s budget; killing what it started"
              % (self.name, self.budget), flush=True)
        self.failed += 1
        self._dump_logs()
        cleanup_all()
        print("%d passed, %d failed" % (self.passed, self.failed), flush=True)
        os._exit(3)

    def _dump_logs(self):
        for s in self.sluices:
            txt = s.log()
            lines = txt.splitlines()[-25:]
            print("---- sluice log tail (%s, pid %s) ----" % (s.name, s.pid))
            for ln in lines:
                print("  | " + ln[:400])
        sys.stdout.flush()

    def run(self, *tests):
        """Runs each test function with this suite; an exception fails that test.
        SLUICE_TEST_ONLY=name[,name] runs only those (and `setup`), for a developer's loop."""
        print("== %s (binary %s)" % (self.name, BIN), flush=True)
        only = [n for n in os.environ.get("SLUICE_TEST_ONLY", "").split(",") if n]
        for fn in tests:
            if only and fn.__name__ not in only and fn.__name__ != "setup":
                continue
            print("-- %s" % fn.__name__, flush=True)
            try:
                fn(self)
            except Exception as e:  # a crash in a test is one failed check
                self.check("%s completed without exception" % fn.__name__, False,
                           "no exception", "%s: %s" % (type(e).__name__, e))
                traceback.print_exc(file=sys.stdout)
                if fn.__name__ == "setup":
                    print("setup failed: skipping the remaining tests", flush=True)
                    break
        self.finish()

    def finish(self):
        self._watchdog.cancel()
        for sl in self.sluices:
            if sl.alive():
                try:
                    sl.stop(timeout=10)
                except Exception:
                    pass
        # A sanitizer report in any gateway's log fails the suite, whatever the checks
        # said: leaks are reported at exit, after the last check ran.
        for sl in self.sluices:
            try:
                log = sl.log()
            except OSError:
                continue
            for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
                if marker in log:
                    at = log.index(marker)
                    self.check("%s: no sanitizer report in its log" % sl.name, False, "none",
                               log[max(0, at - 200):at + 1500])
                    break
        if self.failed:
            self._dump_logs()
        cleanup_all()
        if self.passed + self.failed == 0:
            print("FAIL  no checks ran")
            self.failed = 1
        print("%d passed, %d failed" % (self.passed, self.failed), flush=True)
        sys.exit(0 if self.failed == 0 else 1)



# ---------------------------------------------------------------- sluice process

class SluiceStartError(Exception):
    pass


class Sluice:
    """A running sluice process started by start_sluice()."""

    def __init__(self, proc, dir_, config_path, ready_path, log_path, name):
        self.proc = proc
        self.pid = proc.pid
        self.dir = dir_
        self.config_path = config_path
        self.ready_path = ready_path
        self.log_path = log_path
        self.name = name
        self.ready = None
        self.returncode = None

    # addresses from the ready file
    def addr(self, listener="web"):
        host, port = self.ready["listeners"][listener].rsplit(":", 1)
        return host, int(port)

    def port(self, listener="web"):
        return self.addr(listener)[1]

    @property
    def admin(self):
        return self.ready["admin"]

    @property
    def admin_port(self):
        return int(self.ready["admin"].rsplit(":", 1)[1])

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        if self.proc.poll() is None:
            os.kill(self.pid, sig)

    def stop(self, timeout=10.0):
        """SIGTERM, wait; SIGKILL after `timeout`. Returns the exit code (negative = signal)."""
        return stop_process(self, timeout)

    def wait(self, timeout):
        """Waits for exit; returns the code or None on timeout."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        _unregister(self)

    def _status_kb(self, key):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        raise KeyError(key)

    def rss_kb(self):
        return self._status_kb("VmRSS")

    def hwm_kb(self):
        return self._status_kb("VmHWM")

    def threads(self):
        return self._status_kb("Threads")

    def log(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def admin_get(self, path, timeout=5.0, method="GET"):
        return request(self.admin_port, method, path, timeout=timeout,
                       headers=[("Host", "127.0.0.1")])

    def metrics(self):
        r = self.admin_get("/metrics")
        return r, parse_prometheus(r.body.decode("utf-8", "replace"))

    def status(self):
        r = self.admin_get("/status")
        return json.loads(r.body)

    def metrics_until(self, pred, timeout=5.0):
        """The parsed /metrics samples once pred(samples) holds, polled up to timeout, else
        the last scrape (for the check to show). A request is counted once its response is
        written (its upstream attempt released, its log phase run), which the client can
        read first: read counts that follow a request through this, never once."""
        return poll(lambda: self.metrics()[1], pred, timeout)

    def status_until(self, pred, timeout=5.0):
        """/status once pred(status) holds, polled up to timeout, else the last answer."""
        return poll(self.status, pred, timeout)

    def reload(self, timeout=10.0, new_content=True):
        """POST /reload on the admin API: (status code, its JSON answer).

        A reload of unchanged content applies nothing, so by default a comment line is
        appended to the config first: the reload then starts a new generation, which is
        what a test of draining or retiring wants. new_content=False reloads as is."""
        if new_content:
            self.reloads_asked = getattr(self, "reloads_asked", 0) + 1
            with open(self.config_path, "a") as f:
                f.write("# reload %d\n" % self.reloads_asked)
        r = request(self.admin_port, "POST", "/reload", body=b"", timeout=timeout,
                    headers=[("Host", "127.0.0.1")])
        return r.status, r.json()


def set_workers(config_text, workers):
    if workers is None:
        return config_text
    if re.search(r"^workers:.*$", config_text, re.M):
        return re.sub(r"^workers:.*$", "workers: %s" % workers, config_text, count=1, flags=re.M)
    return "workers: %s\n" % workers + config_text



def start_sluice(config_text, workers=None, name="sluice", suite=None, args=None, cwd=None,
                 ready_timeout=15.0, env=None, binary=None, shared_dir=False, prefix=None, config_dir=None,
                 config_file=None):
    """Writes the config into a fresh temp dir and runs the binary (`binary`, default the
    one under test) on it. shared_dir: the dir is writable by any user (a gateway that
    switches to `user:` writes its ready file after the switch). prefix: argv put before
    the binary's (a wrapper such as setpriv). config_dir: a folder the test made (holding
    files the config names relative to itself) to write the config into instead.
    config_file: a config the test laid out itself (config_text is then ignored: nothing
    is written beside it; the ready file and logs go to a fresh temp dir).

    Returns a Sluice once the ready file holds valid JSON; raises SluiceStartError
    (with the log tail) if the process exits or the ready file never appears.
    """
    d = config_dir or new_tmpdir(name)
    cfg = config_file or os.path.join(d, "sluice.yaml")
    if not config_file:
        with open(cfg, "w") as f:
            f.write(set_workers(config_text, workers))
    if shared_dir:
        os.chmod(os.path.dirname(d), 0o755)
        os.chmod(d, 0o777)
        os.chmod(cfg, 0o644)
    ready = os.path.join(d, "ready.json")
    logp = os.path.join(d, "stderr.log")
    argv = list(prefix or []) + [binary or BIN, "run", "-c", cfg, "--ready-file", ready] + list(args or [])
    logf = open(logp, "wb")
    outf = open(os.path.join(d, "stdout.log"), "wb")
    proc = subprocess.Popen(argv, cwd=cwd or d, stdout=outf, stderr=logf,
                            stdin=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent)
    logf.close()
    outf.close()
    s = Sluice(proc, d, cfg, ready, logp, name)
    _register(s)
    if suite is not None:
        suite.sluices.append(s)
    deadline = time.monotonic() + ready_timeout
    while True:
        if proc.poll() is not None:
            _unregister(s)
            raise SluiceStartError("sluice exited with %s before ready; log:\n%s"
                                   % (proc.returncode, s.log()[-3000:]))
        try:
            with open(ready) as f:
                data = json.load(f)
            if isinstance(data, dict) and "listeners" in data and "admin" in data:
                s.ready = data
                return s
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            s.kill()
            raise SluiceStartError("no valid ready file after %.0f s; log:\n%s"
                                   % (ready_timeout, s.log()[-3000:]))
        time.sleep(0.02)


def start_nginx(d, http_body, ports):
    """A real nginx (one process: master off, daemon off) whose http block holds http_body,
    its files in folder d; waits until each of `ports` listens; the Popen, stopped at exit."""
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        # as root nginx's workers run as nobody, who cannot enter the test's 0700 folders
        f.write(("user root;\n" if os.geteuid() == 0 else "") +
                "worker_processes 1;\nmaster_process off;\ndaemon off;\npid %s/nginx.pid;\n"
                "error_log %s/nginx.err warn;\nevents { worker_connections 512; }\n"
                "http {\n    access_log off;\n%s}\n" % (d, d, http_body))
    proc = subprocess.Popen(["nginx", "-p", d, "-c", conf], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    _register(proc)
    for p in ports:
        wait_port(p)
    return proc


def run_cli(args, timeout=20.0, cwd=None):
    """Runs the binary with args; returns CompletedProcess (text)."""
    return subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, stdin=subprocess.DEVNULL)


def read_alloc_count(s, path):
    """The allocation count of a sluice run under the LD_PRELOAD shim (ctest/alloc_shim.c,
    SL_ALLOC_COUNT_FILE=path): SIGUSR2 makes it write the count, which is read back."""
    if os.path.exists(path):
        os.unlink(path)
    s.signal(signal.SIGUSR2)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                txt = f.read()
            if txt.endswith("\n"):
                return int(txt)
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError("the shim wrote no count")
