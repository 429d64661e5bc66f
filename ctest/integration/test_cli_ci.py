"""What a CI job trips on when it drives sluice from a script: `sluice reload` finds an
instance whose admin listens on port 0 (--ready-file PATH, --admin ADDR), the ready file
goes away when the process exits, `sluice check` without -c says what it checked, an
explicit reload of unchanged content applies a new generation and says the content was
unchanged (`applied: true, unchanged: true`) while the file watch applies nothing for a
save that changed nothing, /status keeps the last rejected reload, and a reload that adds
or removes listeners rewrites the ready file."""

import json
import subprocess
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("cli_ci", budget=60)

CFG = """workers: 1
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0 }
routes:
  - { name: hi, match: { paths: [/] }, plugins: [ { name: response, config: { status: 200, body: "v1\\n" } } ] }
"""


def test_reload_port_zero(t):
    s = h.start_sluice(CFG, suite=t)
    cli = h.run_cli(["reload", "-c", s.config_path])
    t.check("reload -c on an admin at port 0 exits 1 and points at --ready-file",
            cli.returncode == 1 and "--ready-file" in cli.stderr, 1, (cli.returncode, cli.stderr))
    gen = s.status()["generation"]
    with open(s.config_path, "w") as f:
        f.write(CFG.replace("v1", "v2"))
    cli = h.run_cli(["reload", "--ready-file", s.ready_path])
    ans = json.loads(cli.stdout or "{}")
    t.check("reload --ready-file reaches the instance and applies", cli.returncode == 0 and ans.get("ok") is True
            and ans.get("generation") == gen + 1, "ok, generation %d" % (gen + 1), (cli.returncode, cli.stdout, cli.stderr))
    with open(s.config_path, "w") as f:
        f.write(CFG.replace("v1", "v3"))
    cli = h.run_cli(["reload", "--admin", s.admin])
    ans = json.loads(cli.stdout or "{}")
    t.check("reload --admin ADDR reaches the instance and applies", cli.returncode == 0 and ans.get("ok") is True
            and ans.get("generation") == gen + 2, "ok, generation %d" % (gen + 2), (cli.returncode, cli.stdout, cli.stderr))
    cli = h.run_cli(["reload", "--ready-file", os.path.join(s.dir, "nope.json")])
    t.check("reload --ready-file of a missing file exits 1 and names it",
            cli.returncode == 1 and "nope.json" in cli.stderr, 1, (cli.returncode, cli.stderr))

    t.check("the ready file exists while running", os.path.exists(s.ready_path), True, False)
    rc = s.stop()
    t.check("exit 0 on SIGTERM", rc == 0, 0, rc)
    t.check("the ready file is removed when the process exits", not os.path.exists(s.ready_path), "gone",
            os.listdir(s.dir))


def test_ready_file_gone_after_shutdown_timeout(t):
    """A drain cut short at shutdown_timeout (a request still in flight) exits 0 and removes
    the ready file too, like a drain that ended in time."""
    up = h.MockUpstream(lambda req: h.HANG)
    cfg = ("workers: 1\nshutdown_timeout: 500ms\nadmin: { listen: 127.0.0.1:0 }\n"
           "listeners: [ { name: web, listen: 127.0.0.1:0 } ]\n"
           "upstreams: [ { name: u, targets: [ { address: %s } ], timeouts: { read: 30s } } ]\n"
           "routes: [ { name: hang, upstream: u } ]\n" % up.address)
    s = h.start_sluice(cfg, suite=t)
    c = h.Client(s.port(), timeout=10)
    c.send(h.build_request("GET", "/hang"))
    deadline = time.monotonic() + 5
    while not up.accepted and time.monotonic() < deadline:
        time.sleep(0.02)
    rc = s.stop()
    c.close()
    t.check("a request in flight at shutdown_timeout: exit 0", up.accepted and rc == 0, 0, (up.accepted, rc))
    t.check("... and the ready file is removed", not os.path.exists(s.ready_path), "gone", os.listdir(s.dir))
    t.check("... after the drain was cut", "shutdown_timeout reached" in s.log(), "shutdown_timeout reached",
            s.log()[-400:])
    up.stop()


def test_ready_file_follows_reload(t):
    """A reload that adds or removes a listener rewrites the ready file: a CI step finds the
    new listener's port (`listen: 127.0.0.1:0`), and the file never names a listener that
    is gone."""
    s = h.start_sluice(CFG, suite=t)
    with open(s.config_path, "w") as f:
        f.write(CFG.replace("  - { name: web, listen: 127.0.0.1:0 }\n",
                            "  - { name: web, listen: 127.0.0.1:0 }\n  - { name: extra, listen: 127.0.0.1:0 }\n"))
    code, ans = s.reload(new_content=False)
    with open(s.ready_path) as f:
        ready = json.load(f)
    extra = ready["listeners"].get("extra")
    live = {x["name"]: x["listen"] for x in s.status()["listeners"]}
    t.check("a listener added by a reload: in the ready file, at its real address", code == 200 and extra is not None
            and extra == live.get("extra") and not extra.endswith(":0"), live.get("extra"), (code, ready))
    if extra:
        r = h.request(int(extra.rsplit(":", 1)[1]), "GET", "/")
        t.check("... and that address serves", r.status == 200, 200, r.status)
    t.check("... the admin address and pid are unchanged", ready.get("admin") == s.admin
            and ready.get("pid") == s.proc.pid, (s.admin, s.proc.pid), ready)
    with open(s.config_path, "w") as f:
        f.write(CFG.replace("name: web,", "name: other,"))
    code, ans = s.reload(new_content=False)
    with open(s.ready_path) as f:
        ready = json.load(f)
    t.check("listeners removed by a reload: gone from the ready file", code == 200
            and sorted(ready["listeners"]) == ["other"], ["other"], (code, ready))
    s.stop()


def test_unchanged_and_rejected(t):
    s = h.start_sluice(CFG, suite=t)
    st = s.status()
    t.check("/status: no rejected reload yet", st.get("last_rejected_reload", "absent") is None, None,
            st.get("last_rejected_reload", "absent"))
    gen = st["generation"]
    code, ans = s.reload(new_content=False)
    t.check("an explicit reload of unchanged content applies a new generation and says the content was unchanged",
            code == 200 and ans.get("applied") is True and ans.get("unchanged") is True
            and ans.get("changed") == [] and ans.get("generation") == gen + 1,
            "applied, unchanged, changed [], gen %d" % (gen + 1), (code, ans))
    t.check("... the log says so", "content unchanged: plugins loaded again" in s.log()
            and s.status()["generation"] == gen + 1, "content unchanged", s.log()[-300:])
    # the watch (watch: true by default): a save that changes nothing applies nothing
    with open(s.config_path, "rb") as f:
        text = f.read()
    with open(s.config_path, "wb") as f:
        f.write(text)
    time.sleep(0.6)  # the watch's 200 ms debounce, and then some
    t.check("a save of the same content: the file watch applies nothing",
            s.status()["generation"] == gen + 1, gen + 1, s.status()["generation"])
    with open(s.config_path, "a") as f:
        f.write("bogus_key: 1\n")
    before = time.time()
    code, ans = s.reload(new_content=False)
    t.check("a bad config is rejected (422)", code == 422, 422, (code, ans))
    lr = s.status().get("last_rejected_reload") or {}
    t.check("/status shows the last rejected reload: trigger and error",
            lr.get("trigger") == "POST /reload" and "bogus_key" in lr.get("error", ""), "POST /reload, bogus_key", lr)
    ts = lr.get("time", "")
    ok = False
    try:
        ok = abs(time.mktime(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone - before) < 5
    except ValueError:
        pass
    t.check("/status: the rejection's time is UTC ISO 8601, now", ok, "~%d" % before, ts)
    s.stop()


def test_restart_keys_rejected_at_their_position(t):
    """A reload that changes what only a restart applies (workers, the admin listener) is
    rejected with FILE:LINE:COL of the key's value, as every other rejected reload."""
    s = h.start_sluice(CFG, suite=t)
    gen = s.status()["generation"]
    cases = (("workers", CFG.replace("workers: 1", "workers: 2"), "1:10", "'workers' changed: a restart applies it"),
             ("admin listener", CFG.replace("admin: { listen: 127.0.0.1:0 }", "admin: { listen: 127.0.0.1:9 }"),
              "2:18", "the admin listener changed: a restart applies it"))
    for name, text, at, msg in cases:
        with open(s.config_path, "w") as f:
            f.write(text)
        code, ans = s.reload(new_content=False)
        want = "%s:%s: %s" % (s.config_path, at, msg)
        t.check("a reload changing %s: 422 with FILE:LINE:COL" % name,
                code == 422 and (ans or {}).get("error") == want, (422, want), (code, ans))
    t.check("... the first generation still serves", s.status()["generation"] == gen, gen, s.status()["generation"])
    s.stop()


def test_env_substitution(t):
    cfg = CFG.replace("admin: { listen: 127.0.0.1:0 }", 'admin: { listen: "${T_ADMIN:-127.0.0.1:0}" }') \
             .replace("- { name: web, listen: 127.0.0.1:0 }", "- name: web\n    listen: 127.0.0.1:${T_PORT}")
    d = h.new_tmpdir("env")
    path = os.path.join(d, "c.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    env = dict(os.environ)
    env.pop("T_PORT", None)
    r = subprocess.run([h.BIN, "check", "-c", path], capture_output=True, text=True, env=env)
    t.check("an unset ${VAR} without default is an error at FILE:LINE:COL naming it",
            r.returncode == 1 and (path + ":5:23: environment variable 'T_PORT' is not set") in r.stderr,
            path + ":5:23: environment variable 'T_PORT' is not set", r.stderr)
    t.check("... said once (no second error about the raw text)", len(r.stderr.strip().splitlines()) == 1, 1,
            r.stderr)
    env["T_PORT"] = "0"
    s = h.start_sluice(cfg, suite=t, env=env)
    t.check("${T_PORT} (plain) is the integer port, ${T_ADMIN:-...} took its default",
            s.port() > 0 and s.admin.startswith("127.0.0.1:"), "a port", s.ready)
    r = h.request(s.port(), "GET", "/")
    t.check("the gateway serves", r.status == 200 and r.body == b"v1\n", 200, (r.status, r.body))
    s.stop()


def test_check_without_c(t):
    d = h.new_tmpdir("check_default")
    r = h.run_cli(["check"], cwd=d)
    t.check("check without -c says it checked the embedded default",
            r.returncode == 0 and "embedded default" in r.stdout and "built into" in r.stdout, "embedded default",
            (r.returncode, r.stdout, r.stderr))
    os.mkdir(os.path.join(d, "conf"))
    with open(os.path.join(d, "conf", "sluice.yaml"), "w") as f:
        f.write(CFG)
    r = h.run_cli(["check"], cwd=d)
    t.check("check without -c names ./conf/sluice.yaml when it checked that",
            r.returncode == 0 and r.stdout.startswith("conf/sluice.yaml: ok"), "conf/sluice.yaml: ok",
            (r.returncode, r.stdout, r.stderr))
    for args in (["help"], ["--help"], ["-h"]):
        r = h.run_cli(args, cwd=d)
        t.check("sluice %s prints the usage on stdout and exits 0" % args[0],
                r.returncode == 0 and r.stdout.startswith("usage: sluice") and r.stderr == "", "0, usage",
                (r.returncode, r.stdout[:40], r.stderr))
    r = h.run_cli(["hlep"], cwd=d)
    t.check("a misspelt command is still an error: exit 2, usage on stderr",
            r.returncode == 2 and "unknown command 'hlep'" in r.stderr and r.stdout == "", "2",
            (r.returncode, r.stderr[:60]))


class Silent(h.TCPServer):
    """Accepts and never answers (a stopped or wedged instance, a port that is not the
    admin API): reads until the client goes."""

    def handle(self, conn):
        while conn.recv(4096):
            pass


def test_reload_timeout(t):
    srv = Silent()
    addr = "127.0.0.1:%d" % srv.port
    # run_cli's own timeout (10 s) fails the check below as an exception: it hung forever
    try:
        r = h.run_cli(["reload", "--admin", addr, "--timeout", "500ms"], timeout=10)
        got = (r.returncode, r.stderr)
    except subprocess.TimeoutExpired:
        got = "still waiting after 10 s"
    t.check("reload --timeout 500ms: an admin address that never answers exits 1 and says so",
            got[0] == 1 and "did not answer within 500ms" in got[1], 1, got)
    r = h.run_cli(["reload", "--admin", addr, "--timeout", "soon"])
    t.check("a --timeout that is no duration is a usage error (2)", r.returncode == 2 and "--timeout" in r.stderr,
            2, (r.returncode, r.stderr))
    s = h.start_sluice(CFG, suite=t)
    r = h.run_cli(["reload", "--ready-file", s.ready_path, "--timeout", "10s"])
    t.check("a live instance answers within --timeout", r.returncode == 0 and json.loads(r.stdout or "{}").get("ok"),
            0, (r.returncode, r.stdout, r.stderr))
    s.stop()


def test_ready_file_unwritable(t):
    """A ready file that cannot be written: the CI step waiting for it would wait forever
    for ports it never learns; sluice says why and exits 1 (it logged and ran on)."""
    d = h.new_tmpdir("ready_unwritable")
    cfg = os.path.join(d, "gw.yaml")
    with open(cfg, "w") as f:
        f.write(CFG)
    ready = os.path.join(d, "no-such-dir", "ready.json")
    try:
        r = h.run_cli(["run", "-c", cfg, "--ready-file", ready], timeout=10)
        got = (r.returncode, r.stderr)
    except subprocess.TimeoutExpired:
        got = "still running after 10 s"
    t.check("run with an unwritable --ready-file exits 1 naming the file and why",
            got[0] == 1 and "cannot write ready file %s: No such file or directory" % ready in got[1], 1, got)


t.run(test_reload_port_zero, test_ready_file_follows_reload, test_ready_file_gone_after_shutdown_timeout,
      test_unchanged_and_rejected, test_restart_keys_rejected_at_their_position, test_env_substitution,
      test_check_without_c, test_reload_timeout, test_ready_file_unwritable)
