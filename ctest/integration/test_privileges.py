"""`user:`/`group:`: started as root, sluice binds its listeners and admin socket, then
switches every thread to the named user and group (setgroups, setgid, setuid) before it
serves. Runs as root (skipped otherwise): the main thread and the worker threads all carry
the new uid/gid in /proc, supplementary groups are gone, requests are served, a reload
after the switch can keep its port below 1024 but cannot bind a new one (no capability is
kept), a switch that cannot be made refuses to run, and an unknown user is a config error.
"""

import os
import pwd
import grp
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("privileges", budget=60)

CONF = """
workers: 2
watch: false
{user}
listeners:
  - name: web
    listen: 127.0.0.1:{port}
admin:
  listen: 127.0.0.1:0
routes:
  - name: echo
    match: {{ paths: [/] }}
    plugins: [ {{ name: echo }} ]
"""


def task_ids(pid):
    """{tid: (uids, gids, groups)} of every thread of pid, from /proc."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        fields = {}
        with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
            for line in f:
                k, _, v = line.partition(":")
                fields[k] = v.split()
        out[tid] = (fields["Uid"], fields["Gid"], fields.get("Groups", []))
    return out


def free_low_port():
    for p in range(1000, 1023):
        if h.port_free(p):
            return p
    return None


def test_switch(t):
    nobody = pwd.getpwnam("nobody")
    nogroup = grp.getgrgid(nobody.pw_gid).gr_name
    low = free_low_port()
    conf = CONF.format(user="user: nobody", port=low)
    s = h.start_sluice(conf, suite=t, name="own", shared_dir=True)
    ids = task_ids(s.pid)
    t.check("main thread and 2 workers (3 threads at least)", len(ids) >= 3, ">= 3", len(ids))
    want_u = [str(nobody.pw_uid)] * 4
    want_g = [str(nobody.pw_gid)] * 4
    bad = {tid: v for tid, v in ids.items() if v[0] != want_u or v[1] != want_g}
    t.check("every thread: real, effective, saved and fs uid/gid are nobody's", not bad,
            "uid %s gid %s" % (want_u, want_g), bad)
    groups = {tid: v[2] for tid, v in ids.items() if v[2] not in ([], [str(nobody.pw_gid)])}
    t.check("supplementary groups: only %s" % nogroup, not groups, [str(nobody.pw_gid)], groups)
    r = h.request(s.port(), "GET", "/x")
    t.check("serves on port %d (bound as root) after the switch" % low, r.status == 200, 200, r.status)
    t.check("the log says which user", "running as user nobody (uid %d" % nobody.pw_uid in s.log(),
            "running as user nobody", s.log()[-400:])

    # A reload keeps the listener's socket: fine. A new port below 1024 needs a capability
    # the process no longer has: the reload is rejected and the old generation serves on.
    code, body = s.reload()
    t.check("reload keeping port %d: accepted" % low, code == 200, 200, (code, body))
    low2 = next((p for p in range(low + 1, 1024) if h.port_free(p)), None)
    with open(s.config_path) as f:
        text = f.read()
    with open(s.config_path, "w") as f:
        f.write(text.replace("admin:", "  - name: low2\n    listen: 127.0.0.1:%d\nadmin:" % low2))
    code, body = s.reload()
    err = (body or {}).get("error", "")
    t.check("reload adding port %d: rejected (permission denied)" % low2,
            code == 422 and "ermission denied" in err, "422 permission denied", (code, body))
    r = h.request(s.port(), "GET", "/x")
    t.check("still serving after the rejected reload", r.status == 200, 200, r.status)
    with open(s.config_path, "w") as f:
        f.write(text.replace("admin:", "  - name: high\n    listen: 127.0.0.1:0\nadmin:"))
    code, body = s.reload()
    t.check("reload adding an unprivileged port: accepted", code == 200, 200, (code, body))
    with open(s.config_path, "w") as f:
        f.write(text.replace("user: nobody", "user: daemon"))
    code, body = s.reload()
    t.check("reload changing user: rejected, a restart applies it",
            code == 422 and "'user' or 'group' changed" in (body or {}).get("error", ""), 422, (code, body))
    t.check("exit 0 on SIGTERM", s.stop() == 0, 0, None)


def test_group(t):
    conf = CONF.format(user="user: nobody\ngroup: daemon", port=0)
    s = h.start_sluice(conf, suite=t, name="grp", shared_dir=True)
    gid = str(grp.getgrnam("daemon").gr_gid)
    ids = task_ids(s.pid)
    t.check("group: daemon: every thread's gids and groups are daemon's",
            all(v[1] == [gid] * 4 and v[2] == [gid] for v in ids.values()), gid, ids)
    t.check("serves", h.request(s.port(), "GET", "/").status == 200, 200, None)
    t.check("exit 0", s.stop() == 0, 0, None)


def test_ambient_capability(t):
    """The systemd unit's way (User=sluice, AmbientCapabilities=CAP_NET_BIND_SERVICE, no
    `user:`): never root, yet a reload can bind a new port below 1024."""
    low = free_low_port()
    conf = CONF.format(user="", port=low)
    s = h.start_sluice(conf, suite=t, name="ambient", shared_dir=True, prefix=[
        "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
        "--inh-caps=+net_bind_service", "--ambient-caps=+net_bind_service"])
    t.check("as nobody with the ambient capability: serves on port %d" % low,
            h.request(s.port(), "GET", "/").status == 200, 200, None)
    low2 = next((p for p in range(low + 1, 1024) if h.port_free(p)), None)
    with open(s.config_path) as f:
        text = f.read()
    with open(s.config_path, "w") as f:
        f.write(text.replace("admin:", "  - name: low2\n    listen: 127.0.0.1:%d\nadmin:" % low2))
    code, body = s.reload()
    t.check("... and a reload binds a new port %d" % low2, code == 200, 200, (code, body))
    t.check("... which serves", h.request(low2, "GET", "/").status == 200, 200, None)
    t.check("exit 0", s.stop() == 0, 0, None)


def test_refuses(t):
    # Not root: a switch to another user cannot be made, and sluice must not serve as is.
    d = h.new_tmpdir("refuse")
    os.chmod(os.path.dirname(d), 0o755)
    os.chmod(d, 0o755)
    cfg = os.path.join(d, "sluice.yaml")
    with open(cfg, "w") as f:
        f.write(CONF.format(user="user: daemon", port=0))
    os.chmod(cfg, 0o644)
    p = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", h.BIN,
                        "run", "-c", cfg], capture_output=True, text=True, timeout=20, cwd=d,
                       stdin=subprocess.DEVNULL)
    t.check("a switch that fails: exit 1", p.returncode == 1, 1, (p.returncode, p.stderr[-500:]))
    t.check("... saying which step failed and why",
            "cannot switch to user daemon" in p.stderr and "setgroups" in p.stderr
            and "only root can switch users" in p.stderr, "cannot switch ... setgroups", p.stderr[-500:])


def test_check_errors(t):
    d = h.new_tmpdir("chk")
    cases = [("user: no-such-user-here", "user 'no-such-user-here' does not exist on this host"),
             ("user: nobody\ngroup: no-such-group", "group 'no-such-group' does not exist"),
             ("group: daemon", "'group' needs 'user'"),
             ("user: root", "is root")]
    for i, (line, want) in enumerate(cases):
        cfg = os.path.join(d, "c%d.yaml" % i)
        with open(cfg, "w") as f:
            f.write(CONF.format(user=line, port=0))
        p = h.run_cli(["check", "-c", cfg])
        t.check("check: %s -> %s" % (line.replace("\n", "; "), want),
                p.returncode == 1 and want in p.stderr and re.search(r"c%d\.yaml:\d+:\d+: " % i, p.stderr),
                want, (p.returncode, p.stderr))
    # every error is reported: a missing user hid the missing group behind it
    cfg = os.path.join(d, "both.yaml")
    with open(cfg, "w") as f:
        f.write(CONF.format(user="user: no-such-user-here\ngroup: no-such-group", port=0))
    p = h.run_cli(["check", "-c", cfg])
    t.check("check: a missing user and a missing group are two errors",
            p.returncode == 1 and "user 'no-such-user-here' does not exist" in p.stderr
            and "group 'no-such-group' does not exist" in p.stderr, "both", (p.returncode, p.stderr))
    cfg = os.path.join(d, "ok.yaml")
    with open(cfg, "w") as f:
        f.write(CONF.format(user="user: %d" % pwd.getpwnam("nobody").pw_uid, port=0))
    p = h.run_cli(["check", "-c", cfg])
    t.check("check: a numeric uid is accepted", p.returncode == 0, 0, (p.returncode, p.stderr))


if os.geteuid() != 0:
    print("SKIP  not root: a user switch needs root")
    t.run(test_check_errors)
else:
    t.run(test_switch, test_group, test_ambient_capability, test_refuses, test_check_errors)
