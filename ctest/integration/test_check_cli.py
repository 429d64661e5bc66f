"""Acceptance 2: `sluice check -c FILE` reports errors as FILE:LINE:COL: message.

Each bad config below carries a « marker at the exact spot the error must be
reported (removed before the file is written); LINE and COL are 1-based, the
position of the offending YAML node: the key for an unknown key, the value
for a wrong type / bad value / duplicate name / unknown reference. Every
config has exactly one error, so exactly one error line is expected.
Then every *.yaml shipped under conf/ and examples/ must check clean.
"""

import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("check_cli", budget=55)

BASE = """\
workers: 1
shutdown_timeout: 5s
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http, header_timeout: 2s, idle_timeout: 60s }
upstreams:
  - name: api
    targets: [ { address: 127.0.0.1:9 } ]
    keepalive: { max_idle: 64, idle_timeout: 60s }
    timeouts: { connect: 2s, read: 1s, write: 30s }
routes:
  - { name: api, match: { paths: [/] }, upstream: api }
  - name: e
    match: { paths: [/echo] }
    strip_prefix: true
    plugins: [ { name: echo } ]
"""

# (case name, config text with one « marker, words the message must contain)
CASES = [
    ("unknown key in a listener",
     BASE.replace("protocol: http,", "«protocl: http,"), ["protocl"]),
    ("unknown top-level key",
     BASE.replace("shutdown_timeout: 5s", "shutdown_timeout: 5s\n«shutdown_timout: 5s"),
     ["shutdown_timout"]),
    ("wrong type: listeners is a scalar",
     BASE.split("listeners:")[0] + "listeners: «web\n" + "upstreams:" + BASE.split("upstreams:")[1],
     []),
    ("wrong type: targets is a mapping",
     BASE.replace("targets: [ { address: 127.0.0.1:9 } ]", "targets: «{ address: 127.0.0.1:9 }"),
     []),
    ("wrong type: strip_prefix is not a boolean",
     BASE.replace("strip_prefix: true", "strip_prefix: «sometimes"), []),
    ("bad duration: shutdown_timeout",
     BASE.replace("shutdown_timeout: 5s", "shutdown_timeout: «5 parsecs"), []),
    ("bad duration: upstream read timeout",
     BASE.replace("read: 1s", "read: «fast"), []),
    ("bad duration: listener header_timeout",
     BASE.replace("header_timeout: 2s", "header_timeout: «2x"), []),
    ("duplicate route name",
     BASE.replace("  - name: e\n", "  - name: «api\n"), ["api"]),
    ("route names an unknown upstream",
     BASE.replace("upstream: api }", "upstream: «nope }"), ["nope"]),
    ("bad listen address (port out of range)",
     BASE.replace("listen: 127.0.0.1:0, protocol", "listen: «127.0.0.1:99999, protocol"), []),
    ("route names an unknown plugin",
     BASE.replace("plugins: [ { name: echo } ]", "plugins: [ { name: «no-such-plugin } ]"),
     ["no-such-plugin"]),
]


def locate(text):
    """Removes the « marker; returns (clean text, line, col), both 1-based."""
    i = text.index("«")
    assert text.count("«") == 1
    before = text[:i]
    line = before.count("\n") + 1
    col = i - (before.rfind("\n") + 1) + 1
    return text.replace("«", ""), line, col


def error_lines(path, out):
    pat = re.compile(r"^" + re.escape(path) + r":(\d+):(\d+): (.+)$")
    res = []
    for ln in out.splitlines():
        m = pat.match(ln.strip())
        if m:
            res.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    return res


def write(name, text):
    d = h.new_tmpdir("cfg")
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(text)
    return p


def test_valid_base(t):
    p = write("good.yaml", BASE)
    cp = h.run_cli(["check", "-c", p])
    t.check("valid base config: exit 0", cp.returncode == 0, 0,
            (cp.returncode, (cp.stdout + cp.stderr)[-500:]))
    t.check("valid base config: no error lines", error_lines(p, cp.stdout + cp.stderr) == [], [],
            error_lines(p, cp.stdout + cp.stderr))


def test_bad_configs(t):
    for name, marked, words in CASES:
        text, line, col = locate(marked)
        p = write("bad.yaml", text)
        cp = h.run_cli(["check", "-c", p])
        out = cp.stdout + cp.stderr
        errs = error_lines(p, out)
        t.check("%s: exit 1" % name, cp.returncode == 1, 1, (cp.returncode, out[-400:]))
        t.check("%s: exactly one FILE:LINE:COL line" % name, len(errs) == 1,
                "1 line %s:%d:%d: ..." % (p, line, col), out[-600:])
        got = [(l, c) for l, c, _ in errs]
        t.check("%s: reported at %d:%d" % (name, line, col), (line, col) in got,
                "%s:%d:%d" % (os.path.basename(p), line, col), errs)
        for w in words:
            t.check("%s: message names %r" % (name, w), any(w in m for _, _, m in errs), w, errs)


def test_syntax_error_and_missing_file(t):
    p = write("syntax.yaml", BASE.replace("  - { name: api, match", "  - { name: api, [match"))
    cp = h.run_cli(["check", "-c", p])
    errs = error_lines(p, cp.stdout + cp.stderr)
    t.check("YAML syntax error: exit 1", cp.returncode == 1, 1, cp.returncode)
    t.check("YAML syntax error: a FILE:LINE:COL line on the broken line (12)",
            any(l == 12 for l, _, _ in errs), "%s:12:COL: ..." % p, (cp.stdout + cp.stderr)[-400:])

    missing = os.path.join(h.tmp_root(), "does-not-exist.yaml")
    cp = h.run_cli(["check", "-c", missing])
    t.check("missing file: exit 1", cp.returncode == 1, 1, cp.returncode)
    t.check("missing file: the message names the file", missing in cp.stdout + cp.stderr,
            missing, (cp.stdout + cp.stderr)[-300:])

    # an option without its value says so, not that the option is unknown
    for argv in (["check", "-c"], ["reload", "--admin"], ["run", "--ready-file"]):
        cp = h.run_cli(argv)
        msg = (cp.stdout + cp.stderr).splitlines()[:1]
        t.check("%s: exit 2, '%s' needs a value" % (" ".join(argv), argv[-1]),
                cp.returncode == 2 and msg == ["sluice: '%s' needs a value" % argv[-1]],
                (2, "sluice: '%s' needs a value" % argv[-1]), (cp.returncode, msg))


def test_shipped_configs(t):
    files = sorted(set(glob.glob(os.path.join(h.SRC, "conf", "**", "*.yaml"), recursive=True)
                       + glob.glob(os.path.join(h.SRC, "examples", "**", "*.yaml"),
                                   recursive=True)))
    t.check("conf/sluice.yaml exists", os.path.join(h.SRC, "conf", "sluice.yaml") in files,
            "conf/sluice.yaml", [os.path.relpath(f, h.SRC) for f in files])
    # smoke.yaml files are `sluice test` specs, not configs (it.test_sluice_test runs them);
    # examples/jwt-api reads its HMAC secret from JWT_SECRET, as its README says
    files = [f for f in files if os.path.basename(f) != "smoke.yaml"]
    os.environ.setdefault("JWT_SECRET", "example-secret-change-me-0123456789")
    for f in files:
        rel = os.path.relpath(f, h.SRC)
        cp = h.run_cli(["check", "-c", rel], cwd=h.SRC)
        t.check("shipped %s checks clean (exit 0)" % rel, cp.returncode == 0, 0,
                (cp.returncode, (cp.stdout + cp.stderr)[-500:]))


t.run(test_valid_base, test_bad_configs, test_syntax_error_and_missing_file, test_shipped_configs)
