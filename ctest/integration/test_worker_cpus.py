"""worker_cpus: workers pinned to CPUs, the other threads kept off them.

The gateway's threads are read from /proc/PID/task/TID/{comm,status} (Cpus_allowed_list):
  1. `worker_cpus: [C]` with two workers and the process on its whole CPU set: both
     workers may run on C only; the main thread on the set without C (with one CPU, on it);
     requests are served.
  2. a reload (the new generation's workers are new threads) keeps them pinned; a reload
     that leaves worker_cpus out gives the new workers and the main thread the whole set
     back; `worker_cpus: auto` puts worker i on the i-th CPU of the set.
  3. a CPU outside the process's set is refused at the list item's file:line:col, by
     `sluice check` and by a reload (the running config keeps serving).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("worker_cpus", budget=60)
CPUS = sorted(os.sched_getaffinity(0))


def cpu_list(text):
    out = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def threads(pid):
    """{name: [allowed CPU set, ...]} of the process's threads."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                name = f.read().strip()
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                allowed = [l.split(":", 1)[1].strip() for l in f if l.startswith("Cpus_allowed_list")][0]
        except (OSError, IndexError):
            continue
        out.setdefault(name, []).append(cpu_list(allowed))
    return out


def config(port, cpus_line):
    return ("workers: 2\n%s"
            "listeners: [ { name: web, listen: 127.0.0.1:%d } ]\n"
            "routes: [ { name: r, match: { paths: [/] }, plugins: [ { name: echo } ] } ]\n" % (cpus_line, port))


def workers_settled(s, want_sets, timeout=5.0):
    """The worker threads' allowed sets once the old generation's are gone."""
    deadline = time.monotonic() + timeout
    while True:
        th = threads(s.pid)
        got = sorted(sorted(c) for c in th.get("sl-worker-0", []) + th.get("sl-worker-1", []))
        if got == sorted(sorted(c) for c in want_sets) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_pinned(t):
    port = h.free_port()
    pin = CPUS[-1]
    rest = set(CPUS) - {pin} or {pin}
    s = h.start_sluice(config(port, "worker_cpus: [%d]\n" % pin), suite=t, name="pinned")
    th = threads(s.pid)
    got = sorted(sorted(c) for c in th.get("sl-worker-0", []) + th.get("sl-worker-1", []))
    t.check("both workers run on CPU %d only" % pin, got == [[pin], [pin]], [[pin], [pin]], got)
    got = sorted(th.get("sluice", [set()])[0])
    t.check("the main thread runs on the CPUs without the workers' (%s)" % sorted(rest), got == sorted(rest),
            sorted(rest), got)
    st = h.request(port, "GET", "/x").status
    t.check("it serves", st == 200, 200, st)

    code, res = s.reload()
    t.check("POST /reload answers ok", code == 200 and res.get("ok") is True, True, (code, res))
    got = workers_settled(s, [{pin}, {pin}])
    t.check("the new generation's workers are pinned too", got == [[pin], [pin]], [[pin], [pin]], got)

    with open(s.config_path, "w") as f:
        f.write(config(port, ""))
    code, res = s.reload()
    t.check("a reload without worker_cpus answers ok", code == 200 and res.get("ok") is True, True, (code, res))
    got = workers_settled(s, [set(CPUS), set(CPUS)])
    t.check("its workers may run on every CPU", got == [CPUS, CPUS], [CPUS, CPUS], got)
    got = sorted(threads(s.pid)["sluice"][0])
    t.check("and so may the main thread", got == CPUS, CPUS, got)

    with open(s.config_path, "w") as f:
        f.write(config(port, "worker_cpus: auto\n"))
    code, res = s.reload()
    want = [{CPUS[0]}, {CPUS[1 % len(CPUS)]}]
    got, exp = workers_settled(s, want), sorted(sorted(c) for c in want)
    t.check("worker_cpus: auto puts worker i on the i-th CPU", got == exp, exp, got)
    st = h.request(port, "GET", "/x").status
    t.check("it serves", st == 200, 200, st)

    # a CPU the process may not use: refused where it is written, the running config stays
    bad = max(CPUS) + 1
    with open(s.config_path, "w") as f:
        f.write(config(port, "worker_cpus: [%d, %d]\n" % (CPUS[0], bad)))
    code, res = s.reload()
    err = res.get("error", "") if isinstance(res, dict) else str(res)
    t.check("a reload naming CPU %d is refused" % bad, code != 200 or res.get("ok") is False, True, (code, res))
    t.check("the error names the item's line and column and the CPUs there are",
            "sluice.yaml:2:18: worker_cpus: CPU %d is not one this process may run on" % bad in err, True, err)
    st = h.request(port, "GET", "/x").status
    t.check("the running config still serves", st == 200, 200, st)
    t.check("exit 0 on SIGTERM", s.stop() == 0, 0, s.returncode)

    p = os.path.join(h.new_tmpdir("cpus-check"), "bad.yaml")
    with open(p, "w") as f:
        f.write(config(port, "worker_cpus: [%d]\n" % bad))
    cp = h.run_cli(["check", "-c", p])
    t.check("sluice check refuses it too, exit 1", cp.returncode == 1, 1, cp.returncode)
    t.check("at bad.yaml:2:15", ("bad.yaml:2:15: worker_cpus: CPU %d" % bad) in cp.stderr + cp.stdout, True,
            cp.stderr + cp.stdout)


t.run(test_pinned)
