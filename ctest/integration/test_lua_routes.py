"""lua_routes: Lua files returning routes with the keys of YAML routes, where `match` may be
a function(request) -> boolean. Checked: static Lua routes, a function match (above a "/"
catch-all, below a longer prefix), an error in a match function (logged, no match),
hosts and methods normalized as YAML's are, config errors at build time (the checks of
YAML routes' names and match conditions included), and a reload picking up an edited
routes file."""

import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("lua_routes", budget=40)

ROUTES = """return {
  { name = "beta", match = function(req) return req.get_header("X-Beta") == "1" end,
    plugins = { { name = "response", config = { body = "beta" } } } },
  { name = "static", match = { paths = { "/s/" }, methods = { "GET" } },
    plugins = { { name = "response", config = { body = "static", status = 201 } } } },
  { name = "boom", match = function(req) error("oops") end,
    plugins = { { name = "response", config = { body = "never" } } } },
  { name = "api", match = { paths = { "/api/" } }, upstream = "up", strip_prefix = true },
  { name = "cased", match = { hosts = { "Lua.Example.COM" }, paths = { "/cased" }, methods = { "post" } },
    plugins = { { name = "response", config = { body = "cased" } } } },
}
"""

CFG = """workers: 1
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0 }
upstreams:
  - { name: up, targets: [ { address: %s } ] }
lua_routes: [%s]
routes:
  - { name: all, match: { paths: [/] }, plugins: [ { name: response, config: { body: "yaml" } } ] }
  - { name: deep, match: { paths: [/deep/] }, plugins: [ { name: response, config: { body: "deep" } } ] }
"""


def get(s, path, headers=None):
    r = h.request(s.port(), "GET", path, headers=headers or [])
    return r.status, r.body


def test_routes(t):
    up = h.MockUpstream()
    d = h.new_tmpdir("luaroutes")
    with open(os.path.join(d, "routes.lua"), "w") as f:
        f.write(ROUTES)
    routes = os.path.join(d, "routes.lua")
    cfg_path = os.path.join(d, "sluice.yaml")
    with open(cfg_path, "w") as f:
        f.write(CFG % (up.address, routes))
    chk = h.run_cli(["check", "-c", cfg_path])
    t.check("sluice check accepts the config with lua_routes", chk.returncode == 0, 0, (chk.returncode, chk.stderr))
    s = h.start_sluice(open(cfg_path).read(), suite=t)
    t.check("plain request: the YAML catch-all", get(s, "/x") == (200, b"yaml"), (200, b"yaml"), get(s, "/x"))
    t.check("function match wins over the '/' catch-all", get(s, "/x", [("X-Beta", "1")]) == (200, b"beta"),
            (200, b"beta"), get(s, "/x", [("X-Beta", "1")]))
    t.check("a longer YAML prefix wins over the function route",
            get(s, "/deep/1", [("X-Beta", "1")]) == (200, b"deep"), (200, b"deep"), get(s, "/deep/1", [("X-Beta", "1")]))
    t.check("static Lua route with paths and methods", get(s, "/s/a") == (201, b"static"), (201, b"static"), get(s, "/s/a"))
    r = h.request(s.port(), "GET", "/api/v1?q=1")
    seen = json.loads(r.body) if r.status == 200 else {}
    t.check("a Lua route to an upstream, with strip_prefix", r.status == 200 and seen.get("target") == "/v1?q=1",
            "/v1?q=1", (r.status, seen.get("target")))
    # hosts are lower-cased and methods upper-cased when loaded, as in YAML
    r = h.request(s.port(), "POST", "/cased", headers=[("Host", "lua.example.com")])
    t.check("a Lua route's hosts and methods ignore the case they were written in",
            (r.status, r.body) == (200, b"cased"), (200, b"cased"), (r.status, r.body))
    t.check("an error in a match function is logged and does not match",
            "lua_routes match function failed" in s.log() and "oops" in s.log(), "logged", s.log()[-500:])
    _, m = s.metrics()
    t.check("Lua routes are metric labels like YAML routes",
            bool(h.metric_values(m, "sluice_requests_total", route="beta", code="200")), "route=beta", None)
    # an edited routes file is picked up by a reload
    with open(routes, "w") as f:
        f.write(ROUTES.replace('body = "beta"', 'body = "beta2"'))
    req = urllib.request.Request("http://%s/reload" % s.admin, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=10) as rr:
        res = json.loads(rr.read())
    t.check("reload applies an edited routes file", res.get("ok") and get(s, "/x", [("X-Beta", "1")]) == (200, b"beta2"),
            (200, b"beta2"), (res, get(s, "/x", [("X-Beta", "1")])))
    t.check("exit 0", s.stop() == 0, 0, None)


def test_errors(t):
    """Each error names routes.lua and the line and column of the route, key or value at
    fault (not the YAML `lua_routes:` value)."""
    d = h.new_tmpdir("luaroutes-bad")
    # (case, routes.lua (one line), message, the text the error points at)
    cases = [
        ("unknown upstream", 'return { { name = "x", match = { paths = { "/" } }, upstream = "nope" } }',
         "route 'x' names unknown upstream 'nope'", '"nope"'),
        ("syntax error", "return { {", "near '<eof>'", None),
        ("duplicate name", 'return { { name = "all", match = { paths = { "/" } }, plugins = { { name = "echo" } } } }',
         "duplicate route name 'all' (first in ", '{ name = "all"'),
        ("unknown key", 'return { { name = "y", mtch = {}, plugins = { { name = "echo" } } } }',
         "unknown key 'mtch' (did you mean 'match'?)", "mtch"),
        ("bad plugin config", 'return { { name = "z", plugins = { { name = "response", config = { status = "x" } } } } }',
         "plugin 'response': status: expected an integer", '"x"'),
        ("unknown plugin", 'return { { name = "z", plugins = { { name = "respons" } } } }',
         "unknown plugin 'respons' (did you mean 'response'?)", '"respons"'),
        ("h2c upgrade", 'return { { name = "w", upgrade = { "H2C" }, plugins = { { name = "echo" } } } }',
         "route 'w': upgrade: h2c is never forwarded", "{ \"H2C\" }"),
        ("bad upgrade token", 'return { { name = "v", upgrade = { "web socket" }, plugins = { { name = "echo" } } } }',
         "upgrade protocol 'web socket' is not a token", '{ "web socket" }'),
        # the checks of a YAML route's names and match (a name is a metric label; a host with
        # a port, a path without '/' or a method that is no token would never match)
        ("bad route name", 'return { { name = \'a"b\', plugins = { { name = "echo" } } } }',
         "route 1: invalid route name 'a\"b': use 1 to 64 letters", "'a\"b'"),
        ("reserved route name", 'return { { name = "none", plugins = { { name = "echo" } } } }',
         "route 'none': route name 'none' is reserved", '"none"'),
        ("bad plugin name", 'return { { name = "p", plugins = { { name = "../echo" } } } }',
         "route 'p': invalid plugin name '../echo'", '"../echo"'),
        ("path without /", 'return { { name = "q", match = { paths = { "/ok", "v1" } }, plugins = { { name = "echo" } } } }',
         "route 'q': path 'v1' must start with '/'", '"v1"'),
        ("host with a port", 'return { { name = "r", match = { hosts = { "A.com:80" } }, plugins = { { name = "echo" } } } }',
         "route 'r': host 'a.com:80': hosts match without the port", '"A.com:80"'),
        ("bad method", 'return { { name = "s", match = { methods = { "G T" } }, plugins = { { name = "echo" } } } }',
         "route 's': method 'G T' is not a valid HTTP method token", '"G T"'),
        ("bad header name", 'return { { name = "t", match = { headers = { ["X A"] = "1" } }, plugins = { { name = "echo" } } } }',
         "route 't': header name 'X A' is not a valid token", '"X A"'),
        ("strip_prefix not a boolean", 'return { { name = "u", strip_prefix = "yes", plugins = { { name = "echo" } } } }',
         "route 'u': strip_prefix must be a boolean", '"yes"'),
        ("strip_prefix without paths", 'return { { name = "w", strip_prefix = true, plugins = { { name = "echo" } } } }',
         "route 'w': strip_prefix needs match.paths", "true"),
    ]
    for name, lua, want, at in cases:
        with open(os.path.join(d, "routes.lua"), "w") as f:
            f.write(lua)
        cfg = os.path.join(d, "c.yaml")
        with open(cfg, "w") as f:
            f.write("listeners:\n  - { name: web, listen: 127.0.0.1:0 }\nlua_routes: [routes.lua]\n"
                    "routes:\n  - { name: all, match: { paths: [/] }, plugins: [ { name: echo } ] }\n")
        r = h.run_cli(["check", "-c", cfg])
        out = r.stdout + r.stderr
        loc = "routes.lua:1:%d: " % (lua.index(at) + 1) if at else "routes.lua:1:"
        t.check("%s: exit 1 with %r at %s" % (name, want, loc),
                r.returncode == 1 and want in out and loc in out and not out.startswith(cfg),
                loc + want, (r.returncode, out[:400]))

    # every error of a file at once, each at its own line, in file order
    many = ('return {\n'
            '  { name = "a", match = { paths = { "/a" } }, upstream = "nope" },\n'
            '  { name = "b", mtch = {}, plugins = { { name = "echo" } } },\n'
            '  { name = "c",\n'
            '    plugins = { { name = "cors", config = { max_age = "1x" } } } },\n'
            '}\n')
    with open(os.path.join(d, "routes.lua"), "w") as f:
        f.write(many)
    r = h.run_cli(["check", "-c", cfg])
    got = [ln.split(os.sep)[-1].split(": ")[0] for ln in r.stderr.strip().splitlines()]
    lines = many.splitlines()
    want = ["routes.lua:%d:%d" % (n, lines[n - 1].index(at) + 1)
            for n, at in ((2, '"nope"'), (3, "mtch"), (5, '"1x"'))]
    t.check("three routes with errors: three lines, each at its Lua line, in order", got == want, want, r.stderr)

    # Lua shortens a long file name in its own messages ("...TAIL:LINE:"): the line stays
    deep = os.path.join(d, "x" * 40, "y" * 40)
    os.makedirs(deep)
    with open(os.path.join(deep, "routes.lua"), "w") as f:
        f.write('return {\n  { name = "x",\n    upstream = = 1 },\n}\n')
    with open(os.path.join(deep, "c.yaml"), "w") as f:
        f.write("listeners:\n  - { name: web, listen: 127.0.0.1:0 }\nlua_routes: [routes.lua]\n")
    r = h.run_cli(["check", "-c", os.path.join(deep, "c.yaml")])
    t.check("a syntax error in a file with a long path: Lua's own line", "routes.lua:3:1: unexpected symbol" in r.stderr,
            "routes.lua:3:1: unexpected symbol", r.stderr)


t.run(test_routes, test_errors)
