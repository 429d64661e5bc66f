"""`sluice test`, `sluice spec`, `sluice new` and the examples (issue 18).

  1. every example's smoke spec passes through `sluice test`, and a small spec runs in
     well under a second;
  2. a failing case prints PASS/FAIL lines with a readable diff and exits 1;
  3. a spec with a YAML syntax error, an unknown key, or a config error is reported at
     FILE:LINE:COL (the config's own file for the config's errors);
  4. `--junit FILE` writes JUnit XML that parses, with the right counts and a <failure>;
  5. the mock upstreams' faults: reset, hang (the gateway's read timeout), close mid-body,
     delay, a fault for N requests then the plain answer; what the upstream received;
  6. `sluice new plugin demo && sluice spec demo && sluice test demo/smoke.yaml` passes in
     an empty folder, and prints the next three commands;
  7. the sluice commands (and examples/ scripts) of each examples/*/README.md work in a
     copy of the tracked files of examples/ (what a clean clone has; `sluice run` lines
     are run as `sluice check`: the examples listen on fixed ports other tests may hold;
     other programs a README names, such as prometheus, are not run);
  8. `sluice spec` finds libsluice.so and sluice's Lua modules without LUA_PATH set.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("sluice_test", budget=200)

BUILD = os.path.dirname(os.path.abspath(h.BIN))


def env():
    e = dict(os.environ)
    e["PATH"] = BUILD + os.pathsep + e.get("PATH", "")
    for k in ("LUA_PATH", "LUA_CPATH", "SLUICE_LIB"):
        e.pop(k, None)
    return e


def sluice(args, cwd=None, timeout=60):
    return subprocess.run([h.BIN] + args, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or h.SRC, env=env(), stdin=subprocess.DEVNULL)


def write(d, name, text):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(text)
    return p


def test_examples(t):
    specs = sorted(glob.glob(os.path.join(h.SRC, "examples", "*", "smoke.yaml")))
    t.check("at least six examples have a smoke spec", len(specs) >= 6, ">= 6", len(specs))
    rel = [os.path.relpath(s, h.SRC) for s in specs]
    t0 = time.monotonic()
    cp = sluice(["test"] + rel)
    out = cp.stdout + cp.stderr
    t.check("sluice test examples/*/smoke.yaml exits 0", cp.returncode == 0, 0,
            (cp.returncode, out[-1500:]))
    m = re.search(r"^(\d+) passed, (\d+) failed", cp.stdout, re.M)
    t.check("the summary line says N passed, 0 failed", m is not None and m.group(2) == "0"
            and int(m.group(1)) >= 20, "N>=20 passed, 0 failed", m and m.group(0))
    t.check("no case failed", "FAIL" not in cp.stdout, "no FAIL", out[-800:])
    print("  all examples: %.2f s wall" % (time.monotonic() - t0))
    # docs/testing.md says how many specs and cases the examples hold: it must stay true
    doc = open(os.path.join(h.SRC, "docs", "testing.md")).read()
    said = re.search(r"All of `examples/\*/smoke\.yaml` \((\d+) specs, (\d+) cases", doc)
    t.check("docs/testing.md counts the examples' specs and cases as they are",
            said and m and (int(said.group(1)), int(said.group(2))) == (len(specs), int(m.group(1))),
            (len(specs), m and int(m.group(1))), said and said.groups())
    cp2 = sluice(["test", "examples"])
    m2 = re.search(r"^(\d+) passed, (\d+) failed", cp2.stdout, re.M)
    t.check("sluice test examples (a folder) runs the same specs", cp2.returncode == 0 and m
            and m2 and m2.group(1) == m.group(1), m and m.group(0), m2 and m2.group(0))
    # a small spec, timed inside the process (its own summary) and from outside
    t0 = time.monotonic()
    cp = sluice(["test", "examples/websocket/smoke.yaml"])
    wall = time.monotonic() - t0
    m = re.search(r"\((\d+) ms\)\s*$", cp.stdout)
    ms = int(m.group(1)) if m else None
    print("  examples/websocket/smoke.yaml: %s ms in-process, %.0f ms wall" % (ms, wall * 1000))
    t.check("a small spec runs in well under a second (in-process time)",
            ms is not None and ms < 1000, "< 1000 ms", ms)


FAILING = """\
name: failing
config:
  upstreams: [{ name: api, targets: [{ address: "mock:api" }] }]
  routes:
    - { name: r, match: { paths: [/] }, upstream: api }
mocks:
  api: { status: 200, headers: { X-From: api }, body: "line one\\nline two\\n" }
cases:
  - name: passes
    request: { path: /ok }
    expect: { status: 200, headers: { x-from: api } }
  - name: wrong status and body
    request: { path: /x }
    expect:
      status: 201
      body: "line one\\nline 2\\n"
  - name: a sequence
    request: { path: /y }
    repeat: 3
    expect: { status: [200, 200, 429] }
  - name: json subset and absent header
    request: { path: /z }
    expect:
      headers: { x-from: null }
      upstream: { mock: api, path: /other }
"""


DYING = """name: dies
services:
  db: { command: "sh -c 'echo cannot open the data dir >&2; echo second line >&2; exit 3' '{port}'" }
config: |
  listeners: [ { name: web, listen: 127.0.0.1:0 } ]
  routes: [ { name: e, match: { paths: [/] }, plugins: [ { name: echo } ] } ]
cases:
  - { request: { path: / }, expect: { status: 200 } }
"""


def test_service_dies(t):
    d = h.new_tmpdir("dies")
    p = write(d, "dies.yaml", DYING)
    t0 = time.monotonic()
    cp = sluice(["test", p])
    dt = time.monotonic() - t0
    out = cp.stdout + cp.stderr
    t.check("a service that exits at once fails the spec (exit 1)", cp.returncode == 1, 1, (cp.returncode, out))
    t.check("... at once, not after the 5 s start timeout", dt < 3, "< 3 s", dt)
    t.check("... saying it exited before it listened, at the service's FILE:LINE:COL",
            re.search(r"dies\.yaml:3:3: service 'db' .* exited before it listened on port \d+", out) is not None,
            "dies.yaml:3:3: service 'db' ... exited before it listened", out)
    t.check("... with the service's last stderr lines", "cannot open the data dir" in out and "second line" in out,
            "its stderr", out)


def test_failing_diff(t):
    d = h.new_tmpdir("fail")
    p = write(d, "failing.yaml", FAILING)
    cp = sluice(["test", p])
    out = cp.stdout
    t.check("a failing spec exits 1", cp.returncode == 1, 1, (cp.returncode, cp.stderr[-300:]))
    t.check("a passing case prints PASS", re.search(r"^PASS passes", out, re.M) is not None,
            "PASS passes", out[:300])
    t.check("a failing case prints FAIL", re.search(r"^FAIL wrong status and body", out, re.M)
            is not None, "FAIL wrong status and body", out[:600])
    t.check("the status mismatch says expected and got", "status: expected 201, got 200" in out,
            "status: expected 201, got 200", out)
    t.check("a multi-line body shows a line diff", "- line 2" in out and "+ line two" in out,
            "- line 2 / + line two", out)
    t.check("a sequence names the request and the whole sequence",
            "status (request 3 of 3): expected 429, got 200" in out
            and "expected [200,200,429], got [200,200,200]" in out, "request 3 of 3 ...", out)
    t.check("an absent-header expectation shows the value present",
            "header x-from: expected absent, got \"api\"" in out, "expected absent", out)
    t.check("what the upstream received is compared",
            "upstream api path: expected \"/other\", got \"/z\"" in out, "upstream api path", out)
    t.check("the last line counts passed and failed",
            re.search(r"^1 passed, 3 failed", out, re.M) is not None, "1 passed, 3 failed",
            out[-200:])


def test_positions(t):
    d = h.new_tmpdir("pos")
    p = write(d, "syntax.yaml", "config: gw.yaml\ncases:\n  - name: x\n    request: { path: / \n")
    cp = sluice(["test", p])
    t.check("a YAML syntax error: exit 1", cp.returncode == 1, 1, cp.returncode)
    t.check("a YAML syntax error is reported at FILE:LINE:COL",
            re.search(re.escape(p) + r":5:1: YAML syntax error", cp.stdout) is not None,
            p + ":5:1: YAML syntax error", cp.stdout)
    write(d, "gw.yaml", "listeners: [{name: web, listen: \"127.0.0.1:8080\"}]\n"
                        "routes:\n  - name: r\n    match: { paths: [/] }\n"
                        "    plugins: [{name: response, config: {stauts: 1}}]\n")
    p = write(d, "key.yaml", "config: gw.yaml\ncases:\n  - name: x\n    request: { path: / }\n"
                             "    expect: { stauts: 200 }\n")
    cp = sluice(["test", p])
    t.check("an unknown spec key is reported at its FILE:LINE:COL",
            (p + ":5:15: unknown key 'stauts' in expect") in cp.stdout,
            p + ":5:15: unknown key 'stauts' in expect", cp.stdout)
    p = write(d, "cfg.yaml", "config: gw.yaml\ncases:\n  - name: x\n    request: { path: / }\n")
    cp = sluice(["test", p])
    gw = os.path.join(d, "gw.yaml")
    t.check("a config error names the config's own file, line and column",
            (gw + ":5:41: route 'r', plugin 'response': unknown key 'stauts'") in cp.stdout,
            gw + ":5:41: ...", cp.stdout)
    # two specs of one run on that config: each ERROR line says which spec could not run
    p2 = write(d, "cfg2.yaml", "config: gw.yaml\ncases:\n  - name: y\n    request: { path: / }\n")
    cp = sluice(["test", p, p2])
    errs = [l for l in cp.stdout.splitlines() if l.startswith("ERROR ")]
    t.check("with several specs, a config's ERROR line names the spec too",
            len(errs) == 2 and errs[0].startswith("ERROR " + gw + ":5:41: ") and errs[0].endswith(" (spec %s)" % p)
            and errs[1].endswith(" (spec %s)" % p2), "ERROR gw.yaml:5:41: ... (spec cfg.yaml)", errs)
    # a quoted status is the number; a status that is no number is the spec's error
    p = write(d, "status.yaml", "config:\n  routes: [{ name: r, match: { paths: [/] }, plugins: [{ name: response, "
                                "config: { status: 201 } }] }]\ncases:\n  - request: { path: / }\n"
                                "    expect: { status: \"201\" }\n  - request: { path: / }\n    repeat: 2\n"
                                "    expect: { status: [\"201\", 201] }\n")
    cp = sluice(["test", p])
    t.check("expect.status \"201\" is 201", cp.returncode == 0 and "2 passed, 0 failed" in cp.stdout, 0,
            (cp.returncode, cp.stdout[-300:]))
    write(d, "status.yaml", "config:\n  routes: [{ name: r, match: { paths: [/] }, plugins: [{ name: response }] }]\n"
                            "cases:\n  - request: { path: / }\n    expect: { status: OK }\n")
    cp = sluice(["test", p])
    t.check("expect.status OK is an error at its FILE:LINE:COL",
            (p + ":5:23: expect.status must be") in cp.stdout, p + ":5:23: expect.status must be ...", cp.stdout)
    # the same for expect.upstream.count
    p = write(d, "count.yaml", "mocks: { api: { echo: true } }\nconfig:\n  upstreams: [{ name: api, targets: "
                               "[{ address: \"127.0.0.1:1\" }] }]\n  routes: [{ name: r, match: { paths: [/] }, "
                               "upstream: api }]\ncases:\n  - request: { path: / }\n"
                               "    expect: { upstream: { mock: api, count: \"1\" } }\n")
    cp = sluice(["test", p])
    t.check("expect.upstream.count \"1\" is 1", cp.returncode == 0, 0, (cp.returncode, cp.stdout[-300:]))
    with open(p, "a") as f:
        f.write("  - request: { path: / }\n    expect: { upstream: { mock: api, count: one } }\n")
    cp = sluice(["test", p])
    t.check("expect.upstream.count one is an error at its FILE:LINE:COL",
            (p + ":9:45: expect.upstream.count must be") in cp.stdout, p + ":9:45: ...", cp.stdout)
    # an inline config's errors name the spec file's real line
    p = write(d, "inline.yaml", "name: inline\nconfig:\n  routes:\n    - name: r\n"
                                "      match: { paths: [/] }\n      upstream: nowhere\n"
                                "cases:\n  - request: { path: / }\n")
    cp = sluice(["test", p])
    t.check("an inline config's error is at the spec's line",
            re.search(re.escape(p) + r":6:17: .*nowhere", cp.stdout) is not None,
            p + ":6:17: ... nowhere", cp.stdout)


def test_ports_zero(t):
    """A config's fixed ports, and the admin API's default 127.0.0.1:9090, never matter:
    a spec's gateway listens on port 0 while something else holds them."""
    import socket
    held = []
    for port in (8080, 9090):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
            held.append(s)
        except OSError:
            s.close()                    # someone else holds it: just as good
    try:
        d = h.new_tmpdir("ports")
        write(d, "gw.yaml", "listeners: [{ name: web, listen: \"127.0.0.1:8080\" }]\n"
                            "routes: [{ name: r, match: { paths: [/] }, plugins: [{ name: echo }] }]")
        p = write(d, "file.yaml", "config: gw.yaml\ncases:\n  - request: { path: /f }\n"
                                  "    expect: { status: 200 }\n")
        q = write(d, "inline.yaml", "config:\n  routes: [{ name: r, match: { paths: [/] }, "
                                    "plugins: [{ name: echo }] }]\ncases:\n  - request: { path: /i }\n"
                                    "    expect: { body: { json: { path: /i } } }\n")
        cp = sluice(["test", p, q])
        t.check("specs run while 8080 and 9090 are taken (listen ports and admin go to 0)",
                cp.returncode == 0 and "2 passed, 0 failed" in cp.stdout, 0,
                (cp.returncode, cp.stdout[-400:]))
    finally:
        for s in held:
            s.close()


def test_junit(t):
    d = h.new_tmpdir("junit")
    p = write(d, "failing.yaml", FAILING)
    report = os.path.join(d, "report.xml")
    cp = sluice(["test", p, "examples/ci/smoke.yaml", "--junit", report])
    t.check("with --junit the exit status is still 1", cp.returncode == 1, 1, cp.returncode)
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError) as e:
        t.check("the JUnit report parses", False, "XML", repr(e))
        return
    t.check("the root is <testsuites>", root.tag == "testsuites", "testsuites", root.tag)
    suites = root.findall("testsuite")
    t.check("one <testsuite> per spec file", len(suites) == 2, 2, len(suites))
    first = suites[0]
    t.check("tests and failures counted", (first.get("tests"), first.get("failures"))
            == ("4", "3"), ("4", "3"), (first.get("tests"), first.get("failures")))
    cases = first.findall("testcase")
    failures = [c for c in cases if c.find("failure") is not None]
    t.check("each failing case has a <failure> with the diff",
            len(failures) == 3 and "expected 201, got 200" in (failures[0].find("failure").text
                                                              or ""), 3, len(failures))
    t.check("every testcase has a name and a time",
            all(c.get("name") and c.get("time") is not None for c in root.iter("testcase")),
            True, [c.attrib for c in root.iter("testcase")][:3])
    t.check("the second suite passed", suites[1].get("failures") == "0"
            and int(suites[1].get("tests")) >= 4, "0 failures", suites[1].attrib)


ENV_SETS = """\
env: { SLUICE_SPEC_A: from-a, SLUICE_SPEC_OUTER: from-a }
config:
  routes: [ { name: r, match: { paths: [/] }, plugins: [ { name: response, config: { body: "${SLUICE_SPEC_A}" } } ] } ]
cases:
  - request: { path: / }
    expect: { body: from-a }
"""

ENV_READS = """\
config:
  routes:
    - { name: r, match: { paths: [/] },
        plugins: [ { name: response, config: { body: "${SLUICE_SPEC_A:-unset} ${SLUICE_SPEC_OUTER:-unset}" } } ] }
cases:
  - name: another spec's env is not this one's
    request: { path: / }
    expect: { body: unset outer }
"""


def test_env_per_spec(t):
    d = h.new_tmpdir("env")
    a = write(d, "a.smoke.yaml", ENV_SETS)
    b = write(d, "b.smoke.yaml", ENV_READS)
    e = env()
    e["SLUICE_SPEC_OUTER"] = "outer"
    e.pop("SLUICE_SPEC_A", None)
    cp = subprocess.run([h.BIN, "test", a, b], capture_output=True, text=True, timeout=60, cwd=d, env=e,
                        stdin=subprocess.DEVNULL)
    t.check("a spec's env ends with it: the next spec sees the variables as they were (exit 0)",
            cp.returncode == 0, 0, (cp.returncode, cp.stdout[-600:]))


FAULTS = """\
config:
  upstreams:
    - name: api
      targets: [{ address: "mock:api" }]
      timeouts: { read: 300ms }
      keepalive: { max_idle: 0 }     # a fresh connection per request: one fault each
  routes:
    - { name: r, match: { paths: [/] }, upstream: api }
mocks:
  api: { echo: true }
cases:
  - name: echo and what the upstream received
    request: { method: PUT, path: /e, query: { a: "1 2", t: [x, "y z"] }, headers: { X-A: v, X-B: true, X-L: [1, 2] },
               body: hi }
    expect:
      status: 200
      body: { json: { method: PUT, path: /e, query: a=1%202&t=x&t=y%20z, body: hi, headers: { x-a: v } } }
      upstream: { mock: api, method: PUT, path: /e, query: a=1%202&t=x&t=y%20z, body: hi, count: 1,
                  headers: { x-b: "true", x-l: "1, 2" } }
  - name: over HTTP/2
    request: { http2: true, method: POST, path: /h2, body: abc, headers: { X-A: "2" } }
    expect:
      status: 200
      body: { json: { method: POST, path: /h2, body: abc, headers: { x-a: "2" } } }
  - name: reset
    mocks: { api: { fault: reset } }
    request: { path: /r }
    expect: { status: 502 }
  - name: hang until the read timeout
    mocks: { api: { fault: hang } }
    request: { path: /h }
    expect: { status: 504 }
  - name: close mid-body
    mocks: { api: { echo: false, status: 200, body: "0123456789abcdef", fault: close-mid-body } }
    request: { path: /c }
    expect: { status: 200, body: { matches: "^01234567$" } }
  - name: delay
    mocks: { api: { echo: false, status: 201, body: slow, delay: 150ms } }
    request: { path: /d }
    expect: { status: 201, body: slow }
  - name: a fault twice, then the plain answer
    mocks: { api: { echo: false, status: 200, body: fine, fault: reset, times: 2 } }
    request: { path: /t }
    repeat: 3
    expect: { status: [502, 502, 200] }
"""


def test_mock_faults(t):
    d = h.new_tmpdir("faults")
    p = write(d, "faults.yaml", FAULTS)
    cp = sluice(["test", p, "-v"])
    out = cp.stdout
    for name in ("echo and what the upstream received", "over HTTP/2", "reset", "hang until the read timeout",
                 "delay", "a fault twice, then the plain answer"):
        t.check("mock case passes: " + name, re.search(r"^PASS " + re.escape(name), out, re.M)
                is not None, "PASS", out[-1200:])
    # a body cut mid-way: the client sees the head and half the body, then the close
    m = re.search(r"^(PASS|FAIL) close mid-body", out, re.M)
    t.check("close mid-body: half the body arrives", m is not None and m.group(1) == "PASS",
            "PASS", out[-1200:])
    m = re.search(r"^PASS delay \(([\d.]+) ms\)", out, re.M)
    t.check("a delay of 150ms shows in the case's time", m is not None and float(m.group(1))
            >= 140, ">= 140 ms", m and m.group(1))


def test_new_plugin(t):
    d = h.new_tmpdir("new")
    cp = sluice(["new", "plugin", "demo"], cwd=d)
    t.check("sluice new plugin demo exits 0", cp.returncode == 0, 0, (cp.returncode, cp.stderr))
    for f in ("demo.lua", "demo_spec.lua", "smoke.yaml", "gw.yaml", "README.md"):
        t.check("sluice new wrote demo/" + f, os.path.exists(os.path.join(d, "demo", f)), True,
                os.listdir(os.path.join(d, "demo")) if os.path.isdir(os.path.join(d, "demo"))
                else None)
    nxt = [line.strip() for line in cp.stdout.splitlines() if line.startswith("  sluice ")]
    t.check("it prints the next three commands", nxt == ["sluice spec demo",
            "sluice test demo/smoke.yaml", "sluice run -c demo/gw.yaml"], 3, nxt)
    if shutil.which("busted"):
        cp = sluice(["spec", "demo"], cwd=d)
        t.check("sluice spec demo passes (no LUA_PATH, no SLUICE_LIB set)", cp.returncode == 0,
                0, (cp.returncode, (cp.stdout + cp.stderr)[-800:]))
        t.check("sluice spec ran the two specs", "2 successes / 0 failures" in cp.stdout,
                "2 successes", cp.stdout[-300:])
    cp = sluice(["test", "demo/smoke.yaml"], cwd=d)
    t.check("sluice test demo/smoke.yaml passes", cp.returncode == 0, 0,
            (cp.returncode, cp.stdout[-800:]))
    cp = sluice(["check", "-c", "demo/gw.yaml"], cwd=d)
    t.check("the generated config checks clean", cp.returncode == 0, 0, cp.stderr[-300:])
    cp = sluice(["new", "plugin", "demo"], cwd=d)
    t.check("sluice new refuses to overwrite", cp.returncode == 1 and "exists" in cp.stderr,
            1, (cp.returncode, cp.stderr))
    # gw.yaml answers with the built-in echo: a plugin named echo would shadow it and the
    # scaffold would fail its own specs
    cp = sluice(["new", "plugin", "echo"], cwd=d)
    t.check("sluice new refuses the name echo, saying why", cp.returncode == 2 and "shadow" in cp.stderr
            and not os.path.exists(os.path.join(d, "echo")), 2, (cp.returncode, cp.stdout, cp.stderr))
    cp = sluice(["new", "plugin", "x", "--dir", "plugins/x"], cwd=d)
    t.check("--dir D writes there", cp.returncode == 0
            and os.path.exists(os.path.join(d, "plugins", "x", "x.lua")), True, cp.stderr)
    # the scaffold fails when the plugin is broken: the specs are not vacuous
    with open(os.path.join(d, "demo", "demo.lua")) as f:
        src = f.read()
    with open(os.path.join(d, "demo", "demo.lua"), "w") as f:
        f.write(src.replace("sluice.response.set_header(conf.header, conf.value)", "-- removed"))
    cp = sluice(["test", "demo/smoke.yaml"], cwd=d)
    t.check("a broken plugin fails its smoke spec", cp.returncode == 1
            and "header x-demo: expected \"yes\", got (absent)" in cp.stdout, 1, cp.stdout[-600:])
    if shutil.which("busted"):
        cp = sluice(["spec", "demo"], cwd=d)
        t.check("a broken plugin fails its busted spec", cp.returncode != 0, "!= 0",
                cp.returncode)


def readme_commands(path):
    """The lines of the ```sh blocks of a README, without comments."""
    cmds, inside = [], False
    with open(path) as f:
        for line in f:
            s = line.strip()
            if s.startswith("```"):
                inside = (s == "```sh") if not inside else False
                continue
            if inside and s and not s.startswith("#"):
                cmds.append(s)
    return cmds


def clean_copy():
    """The tracked files of examples/ (a clean clone's, taken from the working tree), copied
    to a new folder; the checkout itself when git cannot list them."""
    try:
        files = subprocess.run(["git", "-C", h.SRC, "ls-files", "examples"], capture_output=True,
                               text=True, timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return h.SRC
    if not files:
        return h.SRC
    d = h.new_tmpdir("clone")
    for f in files:
        os.makedirs(os.path.join(d, os.path.dirname(f)), exist_ok=True)
        shutil.copy2(os.path.join(h.SRC, f), os.path.join(d, f))
    return d


def free_ports(n):
    """n distinct ports nothing listens on now (all bound at once, then released)."""
    import socket
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_readme_commands(t):
    root = clean_copy()
    print("  README commands run in", root)
    readmes = sorted(glob.glob(os.path.join(root, "examples", "*", "README.md")))
    folders = sorted(d for d in glob.glob(os.path.join(root, "examples", "*")) if os.path.isdir(d))
    t.check("every example has a README (whose commands run here)",
            [os.path.dirname(r) for r in readmes] == folders and len(folders) >= 7,
            [os.path.basename(f) for f in folders], [os.path.basename(os.path.dirname(r)) for r in readmes])
    ran = 0
    for r in readmes + [os.path.join(root, "examples", "README.md")]:
        rel = os.path.relpath(r, root)
        cmds = readme_commands(r)
        for c in cmds:
            # sluice's own commands and the examples' scripts; other programs a README
            # names (prometheus, redis-cli) are the reader's to run
            word = re.sub(r"^(\w+=\S+\s+)*", "", c).split()[0]
            if word != "sluice" and not word.startswith("examples/"):
                continue
            ran += 1
            run = re.sub(r"\bsluice run -c (\S+)", r"sluice check -c \1", c)
            e = env()
            # examples/fleet/run.sh: free ports instead of its fixed ones
            e["FLEET_PORTS"] = " ".join(str(p) for p in free_ports(9))
            proc = subprocess.Popen(["sh", "-c", run], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, cwd=root, env=e,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                out, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)   # its own session: nothing it started outlives it
                out, _ = proc.communicate()
            t.check("%s: `%s` works" % (rel, c), proc.returncode == 0, 0,
                    (proc.returncode, out[-600:]))
    t.check("the READMEs hold sluice commands to run", ran >= 15, ">= 15", ran)


t.run(test_examples, test_service_dies, test_failing_diff, test_positions, test_ports_zero, test_junit, test_mock_faults,
      test_env_per_spec, test_new_plugin, test_readme_commands)
