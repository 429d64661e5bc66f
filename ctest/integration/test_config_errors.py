"""A config with errors at several levels reports them all at once, in file order: a
YAML-level error (an unknown core key) does not hide the plugin errors behind it, plugin
names and plugin config keys get the "did you mean" core keys get, and a lua_routes
file's errors follow the YAML file's, at their own lines."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("config_errors", budget=30)

CFG = """listeners:
  - { name: web, listen: 127.0.0.1:0, protocl: http }
lua_routes: [ routes.lua ]
routes:
  - name: a
    match: { paths: [/a] }
    plugins:
      - { name: respons }
      - { name: cors, config: { max_ag: 5 } }
  - name: b
    match: { paths: [/b] }
    upstream: nowhere
    plugins: [ { name: response, config: { status: 999 } } ]
"""

ROUTES = """return {
  { name = "l", plugins = { { name = "redirect", config = { to = "/x", stauts = 301 } } } },
}
"""


def test_all_at_once(t):
    d = h.new_tmpdir("cfgerr")
    cfg = os.path.join(d, "gw.yaml")
    with open(cfg, "w") as f:
        f.write(CFG)
    with open(os.path.join(d, "routes.lua"), "w") as f:
        f.write(ROUTES)
    r = h.run_cli(["check", "-c", cfg])
    lines = [ln.replace(d + os.sep, "") for ln in r.stderr.strip().splitlines()]
    want = [
        "gw.yaml:2:39: unknown key 'protocl' in listener 'web' (did you mean 'protocol'?)",
        "gw.yaml:8:17: route 'a', plugin 'respons': unknown plugin 'respons' (did you mean 'response'?)",
        "gw.yaml:9:33: route 'a', plugin 'cors': unknown key 'max_ag' (did you mean 'max_age'?)",
        "gw.yaml:12:15: route 'b' names unknown upstream 'nowhere'",
        "gw.yaml:13:52: route 'b', plugin 'response': status: must be <= 599",
        "routes.lua:2:72: route 'l', plugin 'redirect': unknown key 'stauts' (did you mean 'status'?)",
    ]
    t.check("exit 1", r.returncode == 1, 1, r.returncode)
    t.check("six errors, one line each", len(lines) == len(want), len(want), lines)
    for w in want:
        t.check("reported: %s" % w, any(ln.startswith(w) for ln in lines), w, lines)
    order = [next((i for i, ln in enumerate(lines) if ln.startswith(w)), -1) for w in want]
    t.check("in file order (the YAML file by position, then the Lua file)", order == sorted(order) and -1 not in order,
            list(range(len(want))), order)


t.run(test_all_at_once)
