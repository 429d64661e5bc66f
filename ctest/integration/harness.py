"""harness.py — shared machinery for sluice's black-box integration tests.

Python 3.11 standard library only. Every test_*.py in this folder imports it:

    import harness as h
    t = h.Suite("proxy_stream")
    def test_something(t): ...
    t.run(test_something, ...)        # prints checks, "N passed, M failed", exits

What it provides:
  * Suite: check(name, cond, expected, actual), a watchdog that kills everything
    the file started when it overruns its budget, a temp dir per test file, and
    the final summary line (exit 0 only when every check passed).
  * start_sluice(config_text, workers=N): runs `sluice run -c FILE --ready-file P`,
    waits for the ready file, returns a Sluice with port(listener), admin,
    admin_port, pid, proc, stop(), kill(), rss_kb(), hwm_kb(), log().
  * MockUpstream: a real TCP server on 127.0.0.1:0 serving HTTP/1.1 keep-alive
    through a handler function, recording every connection and every byte it
    received; handlers may misbehave on demand (HANG, RESET, CLOSE, raw bytes,
    slow answers, truncated bodies, streamed bodies, wrong framing).
  * TCPServer: a raw TCP peer on 127.0.0.1:0 whose handle(conn) a subclass writes
    (greeters, TLS backends, recorders of first bytes).
  * Client: a raw TCP client (send exact bytes, read until close) with a small
    HTTP/1.1 response parser that reads N pipelined responses (CL, chunked,
    HEAD/1xx/204/304, read-until-close) and can stream a body into a sink.

Processes are stopped by PID only; threads poll a stop flag and are joined.
"""

import atexit
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("SLUICE_SRC") or os.path.abspath(os.path.join(HERE, "..", ".."))
BIN = os.environ.get("SLUICE_BIN") or os.path.join(SRC, "build", "sluice")

# Everything started by this process that must be stopped at exit.
_live = []
_live_lock = threading.Lock()
_tmp_root = None


def openssl(*args, cwd=None):
    """Runs the openssl CLI; raises with its stderr when it fails."""
    r = subprocess.run(["openssl"] + list(args), capture_output=True, timeout=60, cwd=cwd,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), r.stderr.decode(errors="replace")))
    return r


def make_ca(d, name="ca"):
    """A test CA (EC P-256) made by the openssl CLI in folder d: (key path, cert path)."""
    key, crt = os.path.join(d, name + ".key"), os.path.join(d, name + ".crt")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", key)
    openssl("req", "-x509", "-new", "-key", key, "-out", crt, "-days", "30", "-subj", "/CN=" + name,
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return key, crt


def make_leaf(d, name, cn, san, ca="ca"):
    """A server certificate signed by CA `ca` of folder d, with subjectAltName `san`
    ("DNS:a.test,IP:127.0.0.1"): (cert path, key path)."""
    key, csr = os.path.join(d, name + ".key"), os.path.join(d, name + ".csr")
    crt, ext = os.path.join(d, name + ".crt"), os.path.join(d, name + ".ext")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", key)
    openssl("req", "-new", "-key", key, "-out", csr, "-subj", "/CN=" + cn)
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                "extendedKeyUsage=serverAuth\n" % san)
    openssl("x509", "-req", "-in", csr, "-CA", os.path.join(d, ca + ".crt"), "-CAkey", os.path.join(d, ca + ".key"),
            "-CAcreateserial", "-out", crt, "-days", "30", "-extfile", ext)
    return crt, key


def tmp_root():
    """One temp dir per test file, removed at exit (kept when KEEP_TMP is set)."""
    global _tmp_root
    if _tmp_root is None:
        _tmp_root = tempfile.mkdtemp(prefix="sluice-it-")
    return _tmp_root


def new_tmpdir(prefix="t"):
    return tempfile.mkdtemp(prefix=prefix + "-", dir=tmp_root())


def _register(obj):
    with _live_lock:
        _live.append(obj)


def _unregister(obj):
    with _live_lock:
        if obj in _live:
            _live.remove(obj)


def cleanup_all():
    """Stops every sluice process and mock server still alive (by PID / own sockets)."""
    with _live_lock:
        items = list(reversed(_live))
    for obj in items:
        try:
            obj.kill() if isinstance(obj, Sluice) else obj.stop()
        except Exception:
            pass
    global _tmp_root
    if _tmp_root and not os.environ.get("KEEP_TMP"):
        shutil.rmtree(_tmp_root, ignore_errors=True)
        _tmp_root = None


atexit.register(cleanup_all)


# ---------------------------------------------------------------- checks / suite

def short(v, limit=600):
    """repr() of a value, cut to a readable length."""
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v)
    s = repr(v)
    if len(s) > limit:
        s = s[:limit] + "... (%d chars)" % len(s)
    return s


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
        """Runs each test function with this suite; an exception fails that test."""
        print("== %s (binary %s)" % (self.name, BIN), flush=True)
        for fn in tests:
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
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.returncode = self.proc.returncode
        _unregister(self)
        return self.returncode

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


def set_workers(config_text, workers):
    if workers is None:
        return config_text
    if re.search(r"^workers:.*$", config_text, re.M):
        return re.sub(r"^workers:.*$", "workers: %s" % workers, config_text, count=1, flags=re.M)
    return "workers: %s\n" % workers + config_text


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL if this test process dies (even by SIGKILL).

    PR_SET_PDEATHSIG follows the forking thread, so start processes from the main thread.
    """
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def start_sluice(config_text, workers=None, name="sluice", suite=None, args=None, cwd=None,
                 ready_timeout=15.0, env=None):
    """Writes the config into a fresh temp dir and runs the binary on it.

    Returns a Sluice once the ready file holds valid JSON; raises SluiceStartError
    (with the log tail) if the process exits or the ready file never appears.
    """
    d = new_tmpdir(name)
    cfg = os.path.join(d, "sluice.yaml")
    with open(cfg, "w") as f:
        f.write(set_workers(config_text, workers))
    ready = os.path.join(d, "ready.json")
    logp = os.path.join(d, "stderr.log")
    argv = [BIN, "run", "-c", cfg, "--ready-file", ready] + list(args or [])
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


def run_cli(args, timeout=20.0, cwd=None):
    """Runs the binary with args; returns CompletedProcess (text)."""
    return subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------- byte reader

class Incomplete(Exception):
    """The peer closed (or the source ended) in the middle of a message."""


class ParseError(Exception):
    pass


class ReadTimeout(Exception):
    pass


class Reader:
    """A byte buffer fed by fill(buf) -> bool (False at EOF)."""

    def __init__(self, fill):
        self.buf = bytearray()
        self._fill = fill
        self.eof = False

    def more(self):
        if self.eof:
            return False
        if not self._fill(self.buf):
            self.eof = True
            return False
        return True

    def read_line(self, limit=1 << 20):
        """A line without its CRLF (a bare LF also ends it)."""
        start = 0
        while True:
            i = self.buf.find(b"\n", start)
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                if line.endswith(b"\r"):
                    line = line[:-1]
                return line
            start = len(self.buf)
            if len(self.buf) > limit:
                raise ParseError("line longer than %d" % limit)
            if not self.more():
                raise Incomplete("EOF in line (have %r)" % bytes(self.buf[:200]))

    def read_exact(self, n, sink=None):
        """n bytes; with a sink, bytes are passed on in pieces and b'' is returned."""
        out = bytearray() if sink is None else None
        while n > 0:
            if not self.buf and not self.more():
                raise Incomplete("EOF with %d body bytes missing" % n)
            take = min(n, len(self.buf))
            piece = bytes(self.buf[:take])
            del self.buf[:take]
            n -= take
            if sink is None:
                out += piece
            else:
                sink(piece)
        return bytes(out) if out is not None else b""

    def read_to_eof(self, sink=None):
        out = bytearray()
        while True:
            if self.buf:
                piece = bytes(self.buf)
                self.buf.clear()
                if sink is None:
                    out += piece
                else:
                    sink(piece)
            if not self.more():
                return bytes(out)


def parse_headers(reader, limit=1 << 20):
    """Reads header lines up to the empty line. Returns a list of (name, value)."""
    headers = []
    total = 0
    while True:
        line = reader.read_line()
        total += len(line)
        if total > limit:
            raise ParseError("header block too large")
        if line == b"":
            return headers
        if line[:1] in (b" ", b"\t"):
            raise ParseError("obs-fold in header block: %r" % line)
        if b":" not in line:
            raise ParseError("header line without colon: %r" % line)
        n, v = line.split(b":", 1)
        headers.append((n.decode("latin-1"), v.strip(b" \t").decode("latin-1")))


def hget(headers, name):
    """First value of a header (case-insensitive) or None."""
    name = name.lower()
    for n, v in headers:
        if n.lower() == name:
            return v
    return None


def hall(headers, name):
    name = name.lower()
    return [v for n, v in headers if n.lower() == name]


def read_chunked(reader, sink=None):
    """Decodes a chunked body; returns (body bytes or b'' with a sink, trailers, sizes)."""
    out = bytearray()
    sizes = []
    while True:
        line = reader.read_line()
        size_s = line.split(b";", 1)[0].strip()
        if not size_s or not re.fullmatch(rb"[0-9a-fA-F]+", size_s):
            raise ParseError("bad chunk size line %r" % line[:100])
        size = int(size_s, 16)
        sizes.append(size)
        if size == 0:
            trailers = parse_headers(reader)
            return (bytes(out) if sink is None else b""), trailers, sizes
        if sink is None:
            out += reader.read_exact(size)
        else:
            reader.read_exact(size, sink)
        if reader.read_line() != b"":
            raise ParseError("chunk not followed by CRLF")


# ---------------------------------------------------------------- responses (client side)

class HTTPResponse:
    def __init__(self):
        self.version = None
        self.status = None
        self.reason = None
        self.headers = []
        self.body = b""
        self.body_len = 0
        self.sha256 = None
        self.trailers = []
        self.framing = None  # "length", "chunked", "none", "close"
        self.chunk_sizes = []

    def header(self, name):
        return hget(self.headers, name)

    def header_all(self, name):
        return hall(self.headers, name)

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "<HTTPResponse %s %s %s body=%s>" % (self.version, self.status, self.headers,
                                                   short(self.body, 200))


def read_response(reader, method="GET", sink=None):
    """Parses one response (interim 1xx responses are returned on their own).

    With sink, body bytes go to sink(piece) and .body stays b''; .body_len and
    .sha256 are always filled.
    """
    line = reader.read_line()
    m = re.fullmatch(rb"(HTTP/\d\.\d) (\d{3})(?: (.*))?", line)
    if not m:
        raise ParseError("bad status line %r" % line[:200])
    r = HTTPResponse()
    r.version = m.group(1).decode()
    r.status = int(m.group(2))
    r.reason = (m.group(3) or b"").decode("latin-1")
    r.headers = parse_headers(reader)
    h = hashlib.sha256()
    count = [0]
    body = bytearray()

    def _sink(piece):
        h.update(piece)
        count[0] += len(piece)
        if sink is None:
            body.extend(piece)
        else:
            sink(piece)

    te = r.header("Transfer-Encoding")
    cl = r.header("Content-Length")
    if method == "HEAD" or 100 <= r.status < 200 or r.status in (204, 304):
        r.framing = "none"
    elif te is not None:
        if te.lower().split(",")[-1].strip() == "chunked":
            r.framing = "chunked"
            _, r.trailers, r.chunk_sizes = read_chunked(reader, _sink)
        else:
            r.framing = "close"
            reader.read_to_eof(_sink)
    elif cl is not None:
        if not re.fullmatch(r"\d+", cl):
            raise ParseError("bad Content-Length %r" % cl)
        r.framing = "length"
        reader.read_exact(int(cl), _sink)
    else:
        r.framing = "close"
        reader.read_to_eof(_sink)
    r.body = bytes(body)
    r.body_len = count[0]
    r.sha256 = h.hexdigest()
    return r


def bytes_reader(data):
    """A Reader over a fixed byte string."""
    it = [bytes(data)]

    def fill(buf):
        if it:
            buf.extend(it.pop())
            return True
        return False
    return Reader(fill)


def parse_responses(data, n=None, methods=None):
    """Parses up to n responses (all when None) from bytes. Returns (list, leftover bytes, error)."""
    rd = bytes_reader(data)
    rd.more()
    out = []
    err = None
    i = 0
    while n is None or len(out) < n:
        if not rd.buf and rd.eof:
            break
        m = (methods[i] if methods and i < len(methods) else "GET")
        try:
            r = read_response(rd, m)
        except (Incomplete, ParseError) as e:
            err = e
            break
        out.append(r)
        if not (100 <= r.status < 200):
            i += 1
    return out, bytes(rd.buf), err


class Client:
    """A raw HTTP/1.1 client over one TCP connection."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0, connect_timeout=3.0):
        self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.sock.settimeout(timeout)
        self.closed_how = None  # "eof" | "reset" once the peer closed
        self.reader = Reader(self._fill)
        self.deadline = None

    def _fill(self, buf):
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise ReadTimeout("deadline passed")
            self.sock.settimeout(left)
        try:
            d = self.sock.recv(262144)
        except socket.timeout:
            raise ReadTimeout("no data within timeout")
        except ConnectionResetError:
            self.closed_how = "reset"
            return False
        if not d:
            self.closed_how = self.closed_how or "eof"
            return False
        buf.extend(d)
        return True

    def send(self, data):
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.sock.sendall(data)

    def shutdown_write(self):
        self.sock.shutdown(socket.SHUT_WR)

    def read_response(self, method="GET", timeout=None, sink=None, skip_interim=True):
        """One response; 1xx interim responses are skipped unless skip_interim=False."""
        self.deadline = time.monotonic() + (timeout or self.timeout)
        try:
            while True:
                r = read_response(self.reader, method, sink)
                if skip_interim and 100 <= r.status < 200:
                    continue
                return r
        finally:
            self.deadline = None
            self.sock.settimeout(self.timeout)

    def read_responses(self, n, methods=None, timeout=None):
        out = []
        for i in range(n):
            out.append(self.read_response(methods[i] if methods else "GET", timeout))
        return out

    def read_until_close(self, timeout=5.0):
        """All bytes until EOF/reset or timeout. Returns (bytes, how): how is eof|reset|timeout."""
        self.deadline = time.monotonic() + timeout
        data = bytearray(self.reader.buf)
        self.reader.buf.clear()
        try:
            while True:
                buf = bytearray()
                if not self._fill(buf):
                    return bytes(data), self.closed_how
                data += buf
        except ReadTimeout:
            return bytes(data), "timeout"
        finally:
            self.deadline = None
            self.sock.settimeout(self.timeout)

    def pending(self, wait=0.2):
        """Bytes that arrive within `wait` seconds without asking (b'' if none)."""
        data, how = self.read_until_close(wait)
        if how != "timeout":
            self.closed_how = how
        return data

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def build_request(method, path, headers=None, body=None, host="127.0.0.1", chunked=False):
    """Serialises one request. headers: list of (name, value); Host is added unless given."""
    headers = list(headers or [])
    if hget(headers, "Host") is None and host is not None:
        headers.insert(0, ("Host", host))
    if body is not None and not chunked and hget(headers, "Content-Length") is None:
        headers.append(("Content-Length", str(len(body))))
    if chunked:
        headers.append(("Transfer-Encoding", "chunked"))
    head = "%s %s HTTP/1.1\r\n" % (method, path)
    head += "".join("%s: %s\r\n" % (n, v) for n, v in headers) + "\r\n"
    out = head.encode("latin-1")
    if body is not None:
        if chunked:
            if body:
                out += b"%x\r\n" % len(body) + body + b"\r\n"
            out += b"0\r\n\r\n"
        else:
            out += body
    return out


def request(port, method="GET", path="/", headers=None, body=None, timeout=5.0, host="127.0.0.1"):
    """One request on a fresh connection; returns the HTTPResponse."""
    c = Client(port, timeout=timeout)
    try:
        c.send(build_request(method, path, headers, body))
        return c.read_response(method)
    finally:
        c.close()


def wait_port(port, timeout=10.0, host="127.0.0.1"):
    """True once something accepts on host:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def port_free(port, host="127.0.0.1"):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def refused_port():
    """A bound socket that never listens: connecting to its port is refused.

    Returns (socket, port); keep the socket open for as long as the port is used.
    """
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


# ---------------------------------------------------------------- prometheus

def parse_prometheus(text):
    """Returns a list of (name, {label: value}, float) samples; raises ValueError on bad lines."""
    samples = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?', line.strip())
        if not m:
            raise ValueError("bad metrics line %r" % line)
        labels = {}
        if m.group(3):
            for lm in re.finditer(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3)):
                labels[lm.group(1)] = lm.group(2)
        v = m.group(4)
        samples.append((m.group(1), labels, float(v.replace("+Inf", "inf"))))
    return samples


def metric_values(samples, name, **labels):
    return [v for n, l, v in samples
            if n == name and all(l.get(k) == str(x) for k, x in labels.items())]


# ---------------------------------------------------------------- raw TCP peers

class TCPServer:
    """A listening socket on 127.0.0.1:0 (.port). Each accepted connection goes to
    handle(conn), on a thread of its own, or in the accept thread with threaded=False (so
    connections are handled in order); it is closed after. .accepted counts connections.
    Subclasses set their own fields before calling __init__ (the accept thread starts
    there). Registered: cleanup_all stops it."""

    def __init__(self, threaded=True, backlog=64):
        self.accepted = 0
        self.threaded = threaded
        self.stopping = False
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._run, daemon=True).start()
        _register(self)

    def _run(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.threaded:
                threading.Thread(target=self._handle, args=(c,), daemon=True).start()
            else:
                self._handle(c)

    def _handle(self, c):
        try:
            self.handle(c)
        except OSError:
            pass
        finally:
            c.close()

    def handle(self, conn):
        raise NotImplementedError

    def stop(self):
        self.stopping = True
        self.sock.close()


def recv_all(sock, chunk=65536):
    """Everything `sock` (a socket or an ssl socket) gives until EOF."""
    data = b""
    while True:
        d = sock.recv(chunk)
        if not d:
            return data
        data += d


def tls_client_hello(sni, ctx=None):
    """A TLS client's first flight for `sni` (None: no SNI), made in memory with `ctx` (by
    default one that verifies nothing). Returns (the SSLObject, its incoming and outgoing
    MemoryBIOs, the ClientHello bytes): a test sends the hello its own way (a byte at a
    time, re-cut into records) and may finish the handshake over any socket."""
    if ctx is None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return obj, inc, out, out.read()


# ---------------------------------------------------------------- mock upstream

# A handler returns a Response, raw bytes, a list of raw pieces and pauses
# ([b"...", 0.3, b"..."]), or one of these:
HANG = "HANG"     # read everything, never answer, until the peer closes or the mock stops
RESET = "RESET"   # close with SO_LINGER 0 (RST) without answering
CLOSE = "CLOSE"   # close without answering


class Stop(Exception):
    pass


class Response:
    """What a mock handler answers.

    body: bytes; or stream: an iterable of byte pieces (length declares a
    Content-Length for it; without it the body is chunked). chunked=True sends
    body/stream chunked. delay: seconds before the head; chunk_delay: seconds
    between pieces. truncate=N: send the head and only N body bytes (chunked:
    N bytes of chunk data, no terminator) then close. after: None | "close" |
    "reset" once the response is sent. framing=False: send headers exactly as
    given (no Content-Length / Transfer-Encoding added).
    """

    def __init__(self, status=200, body=b"", headers=None, chunked=False, stream=None,
                 length=None, delay=0.0, chunk_delay=0.0, truncate=None, after=None,
                 reason=None, framing=True):
        self.status = status
        self.body = body if isinstance(body, bytes) else body.encode()
        self.headers = list(headers or [])
        self.chunked = chunked or (stream is not None and length is None)
        self.stream = stream
        self.length = length
        self.delay = delay
        self.chunk_delay = chunk_delay
        self.truncate = truncate
        self.after = after
        self.reason = reason
        self.framing = framing


REASONS = {100: "Continue", 200: "OK", 204: "No Content", 304: "Not Modified", 400: "Bad Request",
           404: "Not Found", 500: "Internal Server Error", 502: "Bad Gateway"}


def json_response(obj, status=200, **kw):
    return Response(status, json.dumps(obj).encode(), [("Content-Type", "application/json")], **kw)


class Request:
    """A request as the mock upstream received it."""

    def __init__(self):
        self.method = self.target = self.version = None
        self.headers = []
        self.body = b""
        self.body_len = 0
        self.body_sha256 = None
        self.chunked = False
        self.conn = None
        self.index = 0        # position on its connection, from 0
        self.raw_head = b""
        self.t = None

    @property
    def path(self):
        return self.target.split("?", 1)[0]

    @property
    def query(self):
        return self.target.split("?", 1)[1] if "?" in self.target else ""

    def header(self, name):
        return hget(self.headers, name)

    def header_all(self, name):
        return hall(self.headers, name)

    def summary(self):
        return {"method": self.method, "target": self.target, "path": self.path,
                "headers": self.headers, "body_len": self.body_len, "sha256": self.body_sha256,
                "body": (self.body.decode("latin-1") if self.body is not None
                         and len(self.body) <= 4096 else None),
                "conn": self.conn.id, "index": self.index}


class ConnRecord:
    """One accepted upstream connection: every byte received (up to record_limit)."""

    def __init__(self, id_, sock, record_limit):
        self.id = id_
        self.sock = sock
        self.data = bytearray()
        self.nbytes = 0
        self.record_limit = record_limit
        self.requests = []
        self.eof = False              # the peer (the gateway) closed its side
        self.eof_event = threading.Event()
        self.closed_by_mock = False
        self.error = None
        self.opened = time.monotonic()
        self.closed = None


def default_handler(req):
    """Answers JSON describing the request (path, headers, body checksum, connection)."""
    return json_response(req.summary())


class MockUpstream:
    """A threaded HTTP/1.1 keep-alive server on 127.0.0.1:0 (see module doc)."""

    def __init__(self, handler=None, name="mock", record_limit=1 << 20, body_keep=1 << 20,
                 auto_continue=True, pre_body=None, idle_close=None):
        self.handler = handler or default_handler
        # like a server whose keep-alive timeout is shorter than the gateway's pool:
        # after each response, close the connection if no request starts within idle_close s
        self.idle_close = idle_close
        self.pre_body = pre_body  # called with the request after its head, before its body
        self.name = name
        self.record_limit = record_limit
        self.body_keep = body_keep
        self.auto_continue = auto_continue
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(512)
        self.lsock.settimeout(0.1)
        self.port = self.lsock.getsockname()[1]
        self.address = "127.0.0.1:%d" % self.port
        self.conns = []
        self.requests = []
        self.lock = threading.Lock()
        self.stopping = False
        self.threads = []
        self.handler_errors = []
        self._t = threading.Thread(target=self._accept_loop, name=name + "-accept", daemon=True)
        self._t.start()
        _register(self)

    # -- inspection
    @property
    def accepted(self):
        with self.lock:
            return len(self.conns)

    def total_bytes(self):
        with self.lock:
            return sum(c.nbytes for c in self.conns)

    def snapshot(self):
        """(connections accepted, bytes received, requests parsed)."""
        with self.lock:
            return len(self.conns), sum(c.nbytes for c in self.conns), len(self.requests)

    def mark(self):
        """A position in the recorded traffic, for since()."""
        with self.lock:
            return {c.id: len(c.data) for c in self.conns}

    def since(self, mark):
        """Bytes recorded after mark, over all connections (new connections included)."""
        with self.lock:
            return b"".join(bytes(c.data[mark.get(c.id, 0):]) for c in self.conns)

    def wait_requests(self, n, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= n:
                    return True
            time.sleep(0.01)
        return False

    # -- server
    def _accept_loop(self):
        while not self.stopping:
            try:
                s, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            # as real servers do: a head and its body written separately must not wait
            # for a delayed ACK (Nagle), or every exchange costs 40 ms and more
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                c = ConnRecord(len(self.conns), s, self.record_limit)
                self.conns.append(c)
            th = threading.Thread(target=self._serve, args=(c,), name="%s-c%d" % (self.name, c.id),
                                  daemon=True)
            self.threads.append(th)
            th.start()

    def _fill_for(self, c):
        def fill(buf):
            while True:
                if self.stopping:
                    raise Stop()
                try:
                    d = c.sock.recv(262144)
                except socket.timeout:
                    continue
                except OSError as e:
                    c.error = c.error or repr(e)
                    d = b""
                if not d:
                    c.eof = True
                    c.eof_event.set()
                    return False
                c.nbytes += len(d)
                room = c.record_limit - len(c.data)
                if room > 0:
                    c.data += d[:room]
                buf.extend(d)
                return True
        return fill

    def _serve(self, c):
        # like real servers: no Nagle delay between a head and its body
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sock.settimeout(0.1)
        rd = Reader(self._fill_for(c))
        try:
            while not self.stopping:
                try:
                    req = self._read_request(c, rd)
                except Incomplete:
                    break
                except ParseError as e:
                    c.error = "parse: %s" % e
                    # a distinctive status, so a gateway relaying it is never taken for
                    # a gateway that rejected the request itself
                    self._send(c, b"HTTP/1.1 418 Mock Could Not Parse\r\nContent-Length: 0\r\n"
                                  b"Connection: close\r\n\r\n")
                    break
                if req is None:
                    break
                try:
                    resp = self.handler(req)
                except Exception as e:
                    self.handler_errors.append(repr(e))
                    resp = Response(500, repr(e).encode())
                if not self._respond(c, rd, req, resp):
                    break
                conn_hdr = (req.header("Connection") or "").lower()
                if "close" in [x.strip() for x in conn_hdr.split(",")]:
                    break
                if self.idle_close is not None and not rd.buf:
                    r, _, _ = select.select([c.sock], [], [], self.idle_close)
                    if not r:
                        break
            # wait until the peer closes (so eof is recorded) unless we close first
        except Stop:
            pass
        finally:
            if not c.eof:
                c.closed_by_mock = True
            try:
                c.sock.close()
            except OSError:
                pass
            c.closed = time.monotonic()

    def _read_request(self, c, rd):
        # an EOF before the first byte of a request is a clean close
        if not rd.buf and not rd.more():
            return None
        line = rd.read_line()
        m = re.fullmatch(rb"([A-Z]+) (\S+) (HTTP/\d\.\d)", line)
        if not m:
            raise ParseError("bad request line %r" % line[:200])
        req = Request()
        req.method, req.target, req.version = (x.decode("latin-1") for x in m.groups())
        req.headers = parse_headers(rd)
        req.conn = c
        req.t = time.monotonic()
        req.raw_head = line  # first line only; c.data has the rest
        with self.lock:
            req.index = len(c.requests)
            c.requests.append(req)
            self.requests.append(req)
        if self.pre_body is not None:
            self.pre_body(req)
        if self.auto_continue and (req.header("Expect") or "").lower() == "100-continue":
            self._send(c, b"HTTP/1.1 100 Continue\r\n\r\n")
        h = hashlib.sha256()
        body = bytearray()
        keep = self.body_keep

        def sink(piece):
            h.update(piece)
            req.body_len += len(piece)
            if len(body) < keep:
                body.extend(piece[:keep - len(body)])

        te = req.header("Transfer-Encoding")
        cl = req.header("Content-Length")
        if te is not None:
            req.chunked = True
            read_chunked(rd, sink)
        elif cl is not None:
            if not re.fullmatch(r"\d+", cl):
                raise ParseError("bad Content-Length %r" % cl)
            rd.read_exact(int(cl), sink)
        req.body = bytes(body) if req.body_len <= keep else None
        req.body_sha256 = h.hexdigest()
        return req

    def _send(self, c, data):
        try:
            c.sock.settimeout(30)
            c.sock.sendall(data)
            return True
        except OSError as e:
            c.error = c.error or "send: %r" % e
            return False
        finally:
            c.sock.settimeout(0.1)

    def _reset(self, c):
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return False

    def _hang(self, c, rd):
        """Keeps reading (recording) until the peer closes; never answers."""
        while rd.more():
            rd.buf.clear()

    def _respond(self, c, rd, req, resp):
        """Sends resp; returns False when the connection must end."""
        if resp == HANG:
            self._hang(c, rd)
            return False
        if resp == RESET:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if resp == CLOSE:
            return False
        if isinstance(resp, (bytes, bytearray)):
            return self._send(c, bytes(resp))
        if isinstance(resp, list):  # raw pieces and pauses: [b"...", 0.3, b"..."]
            for item in resp:
                if isinstance(item, (bytes, bytearray)):
                    if not self._send(c, bytes(item)):
                        return False
                else:
                    time.sleep(item)
            return True
        if resp.delay:
            end = time.monotonic() + resp.delay
            while time.monotonic() < end:
                if self.stopping:
                    raise Stop()
                time.sleep(min(0.02, max(0, end - time.monotonic())))
        head = "HTTP/1.1 %d %s\r\n" % (resp.status, resp.reason or REASONS.get(resp.status, "X"))
        hdrs = list(resp.headers)
        no_body = req.method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
        if resp.framing:
            if resp.chunked:
                hdrs.append(("Transfer-Encoding", "chunked"))
            elif resp.stream is not None:
                hdrs.append(("Content-Length", str(resp.length)))
            elif resp.status not in (204, 304):
                hdrs.append(("Content-Length", str(len(resp.body))))
        head += "".join("%s: %s\r\n" % (n, v) for n, v in hdrs) + "\r\n"
        if no_body:
            return self._send(c, head.encode("latin-1")) and resp.after is None
        pieces = resp.stream if resp.stream is not None else ([resp.body] if resp.body else [])
        if (resp.stream is None and not resp.chunked and resp.truncate is None
                and len(resp.body) <= 65536):
            # a small fixed body goes out with its head in one write
            if not self._send(c, head.encode("latin-1") + resp.body):
                return False
            if resp.after == "reset":
                return self._reset(c)
            return resp.after is None
        if not self._send(c, head.encode("latin-1")):
            return False
        sent = 0
        for piece in pieces:
            if resp.truncate is not None and sent + len(piece) >= resp.truncate:
                piece = piece[:resp.truncate - sent]
                if piece:
                    self._send(c, (b"%x\r\n" % len(piece) + piece + b"\r\n") if resp.chunked
                               else piece)
                return False  # close mid-body
            if resp.chunked:
                if piece:
                    if not self._send(c, b"%x\r\n" % len(piece) + piece + b"\r\n"):
                        return False
            elif not self._send(c, piece):
                return False
            sent += len(piece)
            if resp.chunk_delay:
                time.sleep(resp.chunk_delay)
        if resp.truncate is not None:
            return False
        if resp.chunked and not self._send(c, b"0\r\n\r\n"):
            return False
        if resp.after == "reset":
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if resp.after == "close":
            return False
        return True

    def stop(self):
        self.stopping = True
        try:
            self.lsock.close()
        except OSError:
            pass
        self._t.join(2)
        for th in list(self.threads):
            th.join(2)
        with self.lock:
            for c in self.conns:
                try:
                    c.sock.close()
                except OSError:
                    pass
        _unregister(self)


# ---------------------------------------------------------------- data helpers

def pattern_blocks(total, block=1 << 20, seed=1):
    """Deterministic pseudo-random data in blocks: yields `total` bytes in pieces of `block`.

    Each block starts with its index so a reordered or repeated block changes the checksum.
    """
    import random
    rnd = random.Random(seed)
    base = rnd.randbytes(block)
    i = 0
    sent = 0
    while sent < total:
        n = min(block, total - sent)
        piece = (struct.pack(">Q", i) + base[8:])[:n]
        yield piece
        sent += n
        i += 1


def pattern_sha256(total, block=1 << 20, seed=1):
    h = hashlib.sha256()
    for p in pattern_blocks(total, block, seed):
        h.update(p)
    return h.hexdigest()


# ---------------------------------------------------------------- fault upstream

FAULT_BIN = (os.environ.get("SLUICE_FAULT_UPSTREAM")
             or os.path.join(os.path.dirname(BIN), "ctest", "fault_upstream"))


class FaultUpstream:
    """A running ctest/fault_upstream (its request grammar is at the top of fault_upstream.c).

    port/address: the listen socket; control_port: the one "down" never closes.
    """

    def __init__(self, proc, ready, log_path):
        self.proc, self.pid, self.log_path = proc, proc.pid, log_path
        self.name, self.address, self.control = ready["name"], ready["address"], ready["control"]
        self.port = int(self.address.rsplit(":", 1)[1])
        self.control_port = int(self.control.rsplit(":", 1)[1])

    def stats(self):
        return request(self.control_port, "GET", "/_fault/stats").json()

    def reset_stats(self):
        return request(self.control_port, "DELETE", "/_fault/stats").json()

    def mode(self, words):
        """POST /_fault/mode, e.g. "down", "up", "slow:500 status:503", "normal"; the stats."""
        r = request(self.control_port, "POST", "/_fault/mode", body=words.encode())
        if r.status != 200:
            raise RuntimeError("mode %r: %d %r" % (words, r.status, r.body))
        return r.json()

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, timeout=5.0):
        """SIGTERM (SIGKILL after `timeout`); returns the exit code."""
        Sluice.stop(self, timeout)  # the same steps on the same attributes (proc, pid)
        return self.returncode

    kill = stop


def start_fault_upstream(name="fault", listen="127.0.0.1:0", delay_ms=None, status=None,
                         size=None, fault=None, args=None, ready_timeout=10.0):
    """Runs fault_upstream with these defaults; returns a FaultUpstream once it listens."""
    d = new_tmpdir(name)
    ready, logp = os.path.join(d, "ready.json"), os.path.join(d, "log")
    argv = [FAULT_BIN, "--listen", listen, "--name", name, "--ready-file", ready]
    for flag, v in (("--delay-ms", delay_ms), ("--status", status), ("--size", size),
                    ("--fault", fault)):
        if v is not None:
            argv += [flag, str(v)]
    with open(logp, "wb") as logf:
        proc = subprocess.Popen(argv + list(args or []), stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    deadline = time.monotonic() + ready_timeout
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            with open(logp, errors="replace") as f:
                raise RuntimeError("fault_upstream did not start: %s" % f.read()[-2000:])
        time.sleep(0.01)
    with open(ready) as f:
        fu = FaultUpstream(proc, json.load(f), logp)
    _register(fu)
    return fu
