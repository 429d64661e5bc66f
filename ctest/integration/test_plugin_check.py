"""Acceptance: plugin config errors from `sluice check -c FILE`.

Every plugin use is validated against its plugin's schema (and its check(), when it
has one) at config load. A bad one makes `sluice check` exit 1 and print exactly one

    FILE:LINE:COL: route 'R', plugin 'P': message          (or "the global chain")

line, at the position of the offending YAML node:
  * an unknown key                  -> the key
  * a value of the wrong type       -> the value
  * a missing required key          -> the plugin's `config:` mapping (the plugin's own
                                       mapping when it has no `config:` at all)
  * a failing check()               -> the `config:` mapping
  * an unknown plugin / a plugin file that does not load -> the `name:` value

Each case below marks that spot with « (removed before writing the file).
Fixture plugins come from plugins_fixture/ through `plugin_paths`.
"""

import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("plugin_check", budget=50)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins_fixture")

HEAD = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
plugin_paths: [%s]
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http }
upstreams:
  - name: api
    targets: [ { address: 127.0.0.1:9 } ]
""" % FIXTURES


def route(plugins_yaml, name="R"):
    """A config with one route whose `plugins:` block is plugins_yaml (already indented)."""
    return HEAD + "routes:\n  - name: %s\n    match: { paths: [/] }\n    upstream: api\n" \
        "    plugins:\n%s" % (name, plugins_yaml)


# (case, config with one « marker, route/where text, plugin, words the message must contain)
CASES = [
    ("missing required key (redirect without `to`, flow config)",
     route("      - { name: redirect, config: «{ status: 301 } }\n"),
     "route 'R'", "redirect", ["missing required key", "'to'"]),
    ("missing required key (block config: the mapping starts at its first key)",
     route("      - name: redirect\n        config:\n          «status: 301\n"
           "          keep_path: true\n"),
     "route 'R'", "redirect", ["missing required key", "'to'"]),
    ("missing required key (no config at all: the plugin's mapping)",
     route("      - «{ name: redirect }\n"),
     "route 'R'", "redirect", ["missing required key", "'to'"]),
    ("wrong type (response status: abc)",
     route("      - { name: response, config: { status: «abc } }\n"),
     "route 'R'", "response", ["integer"]),
    ("wrong type (quoted number is a string)",
     route('      - { name: response, config: { status: «"200" } }\n'),
     "route 'R'", "response", ["integer"]),
    ("wrong type (a list where a string is due: redirect to)",
     route("      - name: redirect\n        config:\n          to: «[a, b]\n"),
     "route 'R'", "redirect", ["string"]),
    ("wrong type (a string where a list is due: ip-restriction allow)",
     route("      - { name: ip-restriction, config: { allow: «10.0.0.0/8 } }\n"),
     "route 'R'", "ip-restriction", ["list"]),
    ("bad enum value (redirect status 305)",
     route("      - { name: redirect, config: { to: /x, status: «305 } }\n"),
     "route 'R'", "redirect", ["301", "308"]),
    ("below the minimum (response status 42)",
     route("      - { name: response, config: { status: «42 } }\n"),
     "route 'R'", "response", ["200"]),
    ("unknown key inside config",
     route("      - { name: response, config: { «stauts: 200 } }\n"),
     "route 'R'", "response", ["unknown key", "stauts"]),
    ("unknown key inside a nested record (headers request.sett)",
     route("      - name: headers\n        config:\n          request:\n"
           "            «sett: { X-A: b }\n"),
     "route 'R'", "headers", ["unknown key", "sett"]),
    ("failing check(): ip-restriction deny: [not-an-ip]",
     route("      - { name: ip-restriction, config: «{ deny: [not-an-ip] } }\n"),
     "route 'R'", "ip-restriction", ["not-an-ip"]),
    ("failing check(): cors credentials with origin '*'",
     route("      - { name: cors, config: «{ credentials: true } }\n"),
     "route 'R'", "cors", ["credentials"]),
    ("failing check(): fixture plugin returns nil, msg",
     route("      - { name: odd-check, config: «{ n: 3 } }\n"),
     "route 'R'", "odd-check", ["n must be even"]),
    ("unknown plugin name",
     route("      - { name: «no-such-plugin }\n"),
     "route 'R'", "no-such-plugin", ["unknown plugin", "no-such-plugin"]),
    ("plugin file with a Lua syntax error",
     route("      - { name: echo }\n      - { name: «syntax-error }\n"),
     "route 'R'", "syntax-error", ["syntax-error.lua:5", "expected"]),
    ("nested record error: headers request.set values must be strings",
     route("      - name: headers\n        config:\n          request:\n"
           "            set: { X-A: «1 }\n"),
     "route 'R'", "headers", ["string", "request.set.X-A"]),
    ("nested record error: headers response.remove must be a list",
     route("      - { name: headers, config: { response: { remove: «X-A } } }\n"),
     "route 'R'", "headers", ["list"]),
    ("headers: a header name that is not a token (would fail every request)",
     route("      - { name: headers, config: «{ request: { set: { Bad Name: x } } } }\n"),
     "route 'R'", "headers", ["Bad Name"]),
    ("headers: a framing header the gateway owns (would fail every request)",
     route("      - { name: headers, config: «{ response: { remove: [Content-Length] } } }\n"),
     "route 'R'", "headers", ["Content-Length"]),
    ("the global chain is named as such",
     HEAD.replace("listeners:", "plugins:\n  - { name: request-id, config: { «overide: true } }\n"
                  "listeners:")
     + "routes:\n  - { name: R, match: { paths: [/] }, upstream: api }\n",
     "the global chain", "request-id", ["unknown key", "overide"]),
    ("an error in the second route names that route",
     HEAD + "routes:\n  - { name: first, match: { paths: [/a] }, upstream: api,\n"
     "      plugins: [ { name: echo } ] }\n"
     "  - name: second\n    match: { paths: [/b] }\n    plugins:\n"
     "      - { name: echo }\n      - { name: response, config: { body: «[1] } }\n",
     "route 'second'", "response", ["string"]),
]

ALL_BUILTINS = HEAD + """\
plugins:
  - { name: request-id, config: { header: X-Req, override: true, response: false } }
  - { name: traceparent, config: { sample_ratio: 0.5 } }
  - { name: access-log, config: { path: %(log)s, fields: [ts, method, path, status, query, host, user_agent] } }
routes:
  - name: api
    match: { paths: [/api] }
    upstream: api
    plugins:
      - name: headers
        config:
          request: { set: { X-A: "1" }, add: { X-B: b }, remove: [X-C] }
          response: { remove: [Server] }
      - { name: cors, config: { origins: [https://a.example], methods: [GET], headers: [X-A],
                                expose_headers: [X-B], credentials: true, max_age: 60 } }
      - { name: ip-restriction, config: { allow: [10.0.0.0/8, "::1", 127.0.0.1/32], deny: [10.1.0.0/16], status: 401 } }
      - { name: access-log }
  - { name: echo, match: { paths: [/echo] }, plugins: [ { name: echo } ] }
  - name: resp
    match: { paths: [/resp] }
    plugins:
      - { name: response, config: { status: 201, body: made, headers: { X-R: r } } }
  - name: redir
    match: { paths: [/old] }
    plugins:
      - { name: redirect, config: { to: "https://new.example/", status: 308, keep_path: true, keep_query: false } }
  - name: defaults
    match: { paths: [/d] }
    upstream: api
    plugins: [ { name: headers }, { name: cors }, { name: ip-restriction }, { name: traceparent },
               { name: request-id }, { name: response } ]
"""


def locate(text):
    """Removes the « marker; returns (clean text, line, col), both 1-based."""
    assert text.count("«") == 1, text
    i = text.index("«")
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


def write(name, text, d=None):
    d = d or h.new_tmpdir("cfg")
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(text)
    return p


def test_bad_plugin_configs(t):
    for case, marked, where, plugin, words in CASES:
        text, line, col = locate(marked)
        p = write("bad.yaml", text)
        cp = h.run_cli(["check", "-c", p])
        out = cp.stdout + cp.stderr
        errs = error_lines(p, out)
        t.check("%s: exit 1" % case, cp.returncode == 1, 1, (cp.returncode, out[-400:]))
        if not t.check("%s: exactly one FILE:LINE:COL line" % case, len(errs) == 1,
                       "1 line %s:%d:%d: ..." % (p, line, col), out[-700:]):
            continue
        l, c, msg = errs[0]
        t.check("%s: reported at %d:%d" % (case, line, col), (l, c) == (line, col),
                (line, col), (l, c, msg))
        prefix = "%s, plugin '%s': " % (where, plugin)
        t.check("%s: message starts with %r" % (case, prefix), msg.startswith(prefix), prefix, msg)
        missing = [w for w in words if w not in msg]
        t.check("%s: message names %s" % (case, words), not missing, words, msg)


def test_all_builtins_valid(t):
    d = h.new_tmpdir("all")
    log = os.path.join(d, "access.log")
    p = write("all.yaml", ALL_BUILTINS % {"log": log}, d)
    cp = h.run_cli(["check", "-c", p])
    out = cp.stdout + cp.stderr
    t.check("every built-in plugin with valid settings: exit 0", cp.returncode == 0, 0,
            (cp.returncode, out[-800:]))
    t.check("every built-in plugin with valid settings: no error lines", error_lines(p, out) == [],
            [], error_lines(p, out))


def test_access_log_bad_field_and_path(t):
    cases = [
        ("access-log: unknown field (check())",
         route("      - { name: access-log, config: «{ fields: [ts, shoe_size] } }\n"),
         ["shoe_size"]),
        ("access-log: a path that cannot be opened (check())",
         route("      - { name: access-log, config: «{ path: /nonexistent-dir/x/access.log } }\n"),
         ["/nonexistent-dir/x/access.log"]),
    ]
    for case, marked, words in cases:
        text, line, col = locate(marked)
        p = write("bad.yaml", text)
        cp = h.run_cli(["check", "-c", p])
        errs = error_lines(p, cp.stdout + cp.stderr)
        t.check("%s: exit 1, one line at %d:%d naming %s" % (case, line, col, words),
                cp.returncode == 1 and len(errs) == 1 and errs[0][:2] == (line, col)
                and all(w in errs[0][2] for w in words),
                (1, line, col, words), (cp.returncode, errs, (cp.stdout + cp.stderr)[-300:]))


def test_every_error_reported(t):
    """Several bad plugin uses in one file: one line each, in file order."""
    text = route("      - { name: response, config: { stauts: 200 } }\n"
                 "      - { name: redirect, config: { status: 301 } }\n"
                 "      - { name: no-such-plugin }\n")
    p = write("multi.yaml", text)
    cp = h.run_cli(["check", "-c", p])
    errs = error_lines(p, cp.stdout + cp.stderr)
    t.check("three bad plugin uses: exit 1", cp.returncode == 1, 1, cp.returncode)
    t.check("three bad plugin uses: three lines", len(errs) == 3, 3, errs)
    t.check("three bad plugin uses: in file order", [e[0] for e in errs] == sorted(e[0] for e in errs),
            "ascending lines", errs)


def test_relative_plugin_paths(t):
    """A relative plugin path resolves against the config's folder, whatever the cwd, and a
    user's folder shadows a built-in of the same name."""
    d = h.new_tmpdir("rel")
    mine = os.path.join(d, "my-plugins")
    os.mkdir(mine)
    shutil.copy(os.path.join(FIXTURES, "odd-check.lua"), mine)
    with open(os.path.join(mine, "echo.lua"), "w") as f:
        f.write('return { name = "echo", version = "9", schema = { shadow = { type = "string",'
                ' required = true } }, access = function() end }\n')
    base = ("admin: { listen: 127.0.0.1:0 }\nplugin_paths: [my-plugins]\n"
            "listeners:\n  - { name: web, listen: 127.0.0.1:0, protocol: http }\n"
            "routes:\n  - name: R\n    match: { paths: [/] }\n    plugins:\n")
    good = write("good.yaml", base + "      - { name: odd-check, config: { n: 4 } }\n"
                 "      - { name: echo, config: { shadow: yes } }\n", d)
    cp = h.run_cli(["check", "-c", good], cwd="/")
    t.check("relative plugin_paths found from cwd=/: exit 0", cp.returncode == 0, 0,
            (cp.returncode, (cp.stdout + cp.stderr)[-500:]))
    text, line, col = locate(base + "      - { name: odd-check, config: «{ n: 5 } }\n")
    bad = write("bad.yaml", text, d)
    cp = h.run_cli(["check", "-c", bad], cwd="/")
    errs = error_lines(bad, cp.stdout + cp.stderr)
    t.check("relative plugin_paths: the fixture's check() runs (n must be even at %d:%d)" % (line, col),
            cp.returncode == 1 and len(errs) == 1 and errs[0][:2] == (line, col)
            and "n must be even" in errs[0][2], (1, line, col), (cp.returncode, errs))
    text, line, col = locate(base + "      - «{ name: echo }\n")
    bad = write("shadow.yaml", text, d)
    cp = h.run_cli(["check", "-c", bad], cwd="/")
    errs = error_lines(bad, cp.stdout + cp.stderr)
    t.check("a user's echo.lua shadows the built-in echo (its required key is enforced)",
            cp.returncode == 1 and len(errs) == 1 and "shadow" in errs[0][2] and errs[0][:2] == (line, col),
            (1, line, col, "missing required key 'shadow'"), (cp.returncode, errs))


def test_run_refuses_bad_plugin_config(t):
    """`sluice run` validates the same way: a bad plugin config never starts serving."""
    text, line, col = locate(route("      - { name: response, config: { «stauts: 200 } }\n"))
    d = h.new_tmpdir("run")
    p = write("bad.yaml", text, d)
    cp = h.run_cli(["run", "-c", p, "--ready-file", os.path.join(d, "ready.json")], timeout=10)
    out = cp.stdout + cp.stderr
    t.check("run with a bad plugin config: exits nonzero", cp.returncode != 0, "!= 0",
            (cp.returncode, out[-300:]))
    t.check("run with a bad plugin config: names FILE:%d:%d" % (line, col),
            ("%s:%d:%d:" % (p, line, col)) in out and "stauts" in out, "%s:%d:%d" % (p, line, col),
            out[-400:])
    t.check("run with a bad plugin config: no ready file", not os.path.exists(os.path.join(d, "ready.json")),
            "absent", "present")


t.run(test_bad_plugin_configs, test_all_builtins_valid, test_access_log_bad_field_and_path,
      test_every_error_reported, test_relative_plugin_paths, test_run_refuses_bad_plugin_config)
