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


t.run(test_explain)
