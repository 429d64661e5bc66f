"""`sluice explain -c FILE [ROUTE]` prints each route's effective chain per phase:
global plugins first, then the route's, in config order, only the phases a plugin defines."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("explain", budget=30)

CFG = """listeners:
  - { name: web, listen: 127.0.0.1:0 }
plugins: [ { name: request-id } ]
upstreams:
  - { name: api, targets: [ { address: 127.0.0.1:9 } ] }
routes:
  - name: api
    match: { paths: [/] }
    upstream: api
    plugins: [ { name: headers }, { name: access-log }, { name: cors } ]
  - { name: mock, match: { paths: [/m] }, plugins: [ { name: response } ] }
"""


def test_explain(t):
    d = h.new_tmpdir("explain")
    path = os.path.join(d, "c.yaml")
    with open(path, "w") as f:
        f.write(CFG)
    r = h.run_cli(["explain", "-c", path])
    t.check("exit 0", r.returncode == 0, 0, (r.returncode, r.stderr))
    lines = r.stdout.splitlines()
    t.check("route api with its upstream", "route api -> api" in lines, "route api -> api", lines)
    rw = [x for x in lines if x.strip().startswith("rewrite") and "headers" in x]
    t.check("rewrite: global first, then the route's, in order",
            rw and rw[0].split(None, 1)[1] == "request-id (global) -> headers -> cors", "request-id (global) -> headers -> cors", rw)
    t.check("log phase lists access-log only", any(x.split() == ["log", "access-log"] for x in lines), "log access-log", lines)
    t.check("access phase absent for api (no plugin defines it)",
            not any(x.strip().startswith("access ") for x in lines[:lines.index("route mock -> (no upstream: the chain answers)")]),
            "no access line", lines)
    one = h.run_cli(["explain", "-c", path, "mock"])
    t.check("one route only", one.returncode == 0 and "route api" not in one.stdout and "access        response" in one.stdout,
            "mock only", one.stdout)
    bad = h.run_cli(["explain", "-c", path, "nope"])
    t.check("an unknown route exits 1 and says so", bad.returncode == 1 and "no route named 'nope'" in bad.stderr,
            1, (bad.returncode, bad.stderr))


def test_match_precedence_source(t):
    d = h.new_tmpdir("explain2")
    with open(os.path.join(d, "routes.lua"), "w") as f:
        f.write('return {\n'
                '  { name = "beta", match = function(req) return true end, upstream = "api" },\n'
                '  { name = "legacy", match = { paths = { "/old/" }, methods = { "GET" } }, upstream = "api" },\n'
                '}\n')
    path = os.path.join(d, "c.yaml")
    with open(path, "w") as f:
        f.write(CFG + "  - { name: host, match: { hosts: [a.example.com], paths: [/x], headers: { X-A: \"1\" } },"
                " upstream: api }\nlua_routes: [ routes.lua ]\n")
    r = h.run_cli(["explain", "-c", path])
    t.check("exit 0", r.returncode == 0, 0, (r.returncode, r.stderr))
    blocks, cur = {}, None
    for ln in r.stdout.splitlines():
        if ln.startswith("route "):
            cur = ln.split()[1]
            blocks[cur] = {}
        elif ln.startswith("  ") and len(ln.split(None, 1)) == 2 and cur:
            k, v = ln.strip().split(None, 1)
            if k in ("match", "precedence", "defined"):
                blocks[cur][k] = v
    want = {
        "host": ("hosts a.example.com; paths /x; header X-A: 1", "1 of 5", "c.yaml:"),
        "legacy": ("paths /old/; methods GET", "2 of 5", "routes.lua:3 (lua_routes)"),
        "mock": ("paths /m", "3 of 5", "c.yaml:"),
        "beta": ("a Lua match function", "4 of 5", "routes.lua:2 (lua_routes)"),
        "api": ("paths /", "5 of 5", "c.yaml:"),
    }
    for name, (match, prec, src) in want.items():
        b = blocks.get(name, {})
        t.check("%s: match conditions shown" % name, b.get("match") == match, match, b)
        t.check("%s: precedence %s" % (name, prec), b.get("precedence") == prec, prec, b)
        t.check("%s: defined in %s" % (name, src), src in b.get("defined", "") and
                (src.endswith("(lua_routes)") or "lua_routes" not in b.get("defined", "")), src, b)


t.run(test_explain, test_match_precedence_source)
