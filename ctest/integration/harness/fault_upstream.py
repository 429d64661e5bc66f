"""harness.fault_upstream — runs ctest/fault_upstream (the C upstream whose faults are
switched at run time; its request grammar is at the top of fault_upstream.c)."""

import json
import os
import subprocess
import time

from .client import request
from .lifecycle import BIN, _die_with_parent, _register, new_tmpdir, stop_process


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
        return stop_process(self, timeout)

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
