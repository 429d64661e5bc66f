"""harness.lifecycle — paths, temp dirs, and the registry of everything a test file started.

Every sluice, mock and fault upstream registers here; cleanup_all (run at exit, on a
signal and by the Suite's watchdog) stops each by its own PID or socket.
"""

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # ctest/integration
SRC = os.environ.get("SLUICE_SRC") or os.path.abspath(os.path.join(HERE, "..", ".."))
BIN = os.environ.get("SLUICE_BIN") or os.path.join(SRC, "build", "sluice")

# Everything started by this process that must be stopped at exit.
_live = []
_live_lock = threading.Lock()
_tmp_root = None


def wait_until(pred, timeout=5.0, step=0.02):
    """pred()'s first truthy value within timeout, else its value at the deadline.

    For what sluice does after the client already has its answer: a request is
    counted and logged once its response is written, so a client can read the
    response before the counters move.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def poll(read, pred, timeout=5.0, step=0.02):
    """read()'s value once pred(value) holds, polled up to timeout, else its last value
    (for the check to show): wait_until for a value that is checked afterwards."""
    last = [None]

    def once():
        last[0] = read()
        return pred(last[0])
    wait_until(once, timeout, step)
    return last[0]


def tmp_root():
    """One temp dir per test file, removed at exit (kept when KEEP_TMP is set)."""
    global _tmp_root
    if _tmp_root is None:
        _tmp_root = tempfile.mkdtemp(prefix="sluice-it-")
    return _tmp_root


def new_tmpdir(prefix="t"):
    # made again if something outside the test removed it (a /tmp cleaner on a shared machine)
    os.makedirs(tmp_root(), exist_ok=True)
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
            # a sluice is killed (SIGKILL); mocks and fault upstreams are stopped
            getattr(obj, "kill", obj.stop)()
        except Exception:
            pass
    global _tmp_root
    if _tmp_root and not os.environ.get("KEEP_TMP"):
        shutil.rmtree(_tmp_root, ignore_errors=True)
        _tmp_root = None


atexit.register(cleanup_all)


def debian_module(name):
    """Imports a module that comes from a Debian package (python3-yaml: `yaml`). ctest runs
    these files with the first python3 on PATH, which may be one without Debian's
    dist-packages: then the test file is run again under /usr/bin/python3. Call it before
    anything is started."""
    import importlib
    import sys
    try:
        return importlib.import_module(name)
    except ImportError:
        debian = "/usr/bin/python3"
        if os.path.exists(debian) and os.path.realpath(sys.executable) != os.path.realpath(debian):
            os.execv(debian, [debian] + sys.argv)
        raise


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL if this test process dies (even by SIGKILL).

    PR_SET_PDEATHSIG follows the forking thread, so start processes from the main thread.
    """
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass



def stop_process(obj, timeout):
    """SIGTERM obj.proc (a Popen), wait; SIGKILL after `timeout`. Sets obj.returncode,
    unregisters obj and returns the code (negative = signal)."""
    if obj.proc.poll() is None:
        try:
            os.kill(obj.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            obj.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(obj.pid, signal.SIGKILL)
            obj.proc.wait(5)
    obj.returncode = obj.proc.returncode
    _unregister(obj)
    return obj.returncode
