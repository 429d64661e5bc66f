"""A config with errors at several levels reports them all at once, in file order: a
YAML-level error (an unknown core key) does not hide the plugin errors behind it, plugin
names and plugin config keys get the "did you mean" core keys get, and a lua_routes
file's errors follow the YAML file's, at their own lines.

Keys that would do nothing where they stand are errors at the key (issue 26): an Upgrade
toward an HTTP/2 upstream from a Lua route, and a limit keyed by route with trusted
proxies; `sluice check` names FILE:LINE:COL and the key, and exits 1. Hedging on an HTTP/2
upstream was one until hedges became streams: it is valid now."""

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


def check_file(files):
    """Writes files (name -> text) into a new folder; `sluice check -c` the first one. Returns
    (CompletedProcess, stderr lines with the folder taken off)."""
    d = h.new_tmpdir("cfgerr")
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    r = h.run_cli(["check", "-c", os.path.join(d, next(iter(files)))])
    return r, [ln.replace(d + os.sep, "") for ln in r.stderr.strip().splitlines()]


HEDGE_H2C = """listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - name: grpc
    protocol: h2c
    targets: [ { address: 127.0.0.1:50051 }, { address: 127.0.0.1:50052 } ]
    retry: { attempts: 2, hedge_after: 50ms }
routes: [ { name: r, upstream: grpc } ]
"""


def test_hedge_after_h2c(t):
    # hedging works on HTTP/2 upstreams (a second stream): the key is valid on every protocol
    r, lines = check_file({"gw.yaml": HEDGE_H2C})
    t.check("hedge_after on an h2c upstream: valid", r.returncode == 0, 0, (r.returncode, lines))
    r, lines = check_file({"gw.yaml": HEDGE_H2C.replace("protocol: h2c", "protocol: http1")})
    t.check("hedge_after on an http1 upstream: valid", r.returncode == 0, 0, (r.returncode, lines))


UPGRADE_LUA = """listeners: [ { name: web, listen: 127.0.0.1:0 } ]
lua_routes: [ routes.lua ]
upstreams: [ { name: grpc, protocol: h2c, targets: [ { address: 127.0.0.1:50051 } ] } ]
"""

ROUTES_UPGRADE = """return {
  { name = "ws", upstream = "grpc", upgrade = { "websocket" } },
}
"""


def test_upgrade_lua_route_h2c(t):
    r, lines = check_file({"gw.yaml": UPGRADE_LUA, "routes.lua": ROUTES_UPGRADE})
    want = ("routes.lua:2:47: route 'ws': 'upgrade' does nothing for upstream 'grpc' (protocol: h2c): an "
            "Upgrade is never forwarded to an HTTP/2 upstream (WebSockets need protocol: http1)")
    t.check("a Lua route's upgrade toward an h2c upstream: exit 1", r.returncode == 1, 1, r.returncode)
    t.check("a Lua route's upgrade toward an h2c upstream: at the key", lines == [want], [want], lines)


LIMIT_ROUTE = """listeners: [ { name: web, listen: 127.0.0.1:0 } ]
routes:
  - name: r
    plugins:
      - { name: PLUGIN, config: { KEYS, key: route, trusted_proxies: [10.0.0.0/8] } }
      - { name: echo }
"""


def test_limit_key_route_trusted(t):
    for plugin, keys in (("rate-limit", "rate: 5"), ("limit-conn", "max: 5")):
        r, lines = check_file({"gw.yaml": LIMIT_ROUTE.replace("PLUGIN", plugin).replace("KEYS", keys)})
        want = ("gw.yaml:5:%d: route 'r', plugin '%s': trusted_proxies does nothing with key: route (no "
                "client address is counted)" % (27 + len(plugin), plugin))
        t.check("%s: key route with trusted_proxies: exit 1" % plugin, r.returncode == 1, 1, r.returncode)
        t.check("%s: key route with trusted_proxies: the error" % plugin, lines == [want], [want], lines)


RATE_BOUNDS = """listeners: [ { name: web, listen: 127.0.0.1:0 } ]
routes:
  - name: r
    plugins:
      - { name: rate-limit, config: { rate: 2000000, per: 1ms } }
      - { name: rate-limit, config: { rate: 10, burst: 1e300 } }
      - { name: echo }
"""


def test_rate_limit_bounds(t):
    # both were accepted: the first answered every request 500 (the core's limiter refuses
    # more than 1e9 tokens a second), the second sent RateLimit-Policy q=-9223372036854775808
    r, lines = check_file({"gw.yaml": RATE_BOUNDS})
    want = ["gw.yaml:5:37: route 'r', plugin 'rate-limit': rate / per must be at most 1e9 a second "
            "(here 2e+09)",
            "gw.yaml:6:56: route 'r', plugin 'rate-limit': burst: must be <= 1000000000"]
    t.check("rate-limit over 1e9 a second, or a burst over 1e9: exit 1", r.returncode == 1, 1, r.returncode)
    t.check("rate-limit over 1e9 a second, or a burst over 1e9: the errors", lines == want, want, lines)


LIMIT_CONN_BOUNDS = """listeners: [ { name: web, listen: 127.0.0.1:0 } ]
routes:
  - name: r
    plugins:
      - { name: limit-conn, config: { max: 3000000000 } }
      - { name: limit-conn, config: { max: 1, burst: 4294967296 } }
      - { name: echo }
"""


def test_limit_conn_bounds(t):
    # both were accepted and then answered every request 500: the core counts in 32 bits
    r, lines = check_file({"gw.yaml": LIMIT_CONN_BOUNDS})
    want = ["gw.yaml:5:44: route 'r', plugin 'limit-conn': max: must be <= 2147483647",
            "gw.yaml:6:54: route 'r', plugin 'limit-conn': burst: must be <= 2147483647"]
    t.check("limit-conn max or burst over 2^31 - 1: config errors", r.returncode == 1 and lines == want,
            want, lines)


REDIS_AUTH = """listeners: [ { name: web, listen: 127.0.0.1:0 } ]
redis: { username_env: SLUICE_IT_UNSET_USER, database: -1 }
"""


def test_redis_auth_keys(t):
    r, lines = check_file({"gw.yaml": REDIS_AUTH})
    want = ["gw.yaml:2:10: redis: username_env needs password_env (AUTH takes both)",
            "gw.yaml:2:24: username_env: the environment variable SLUICE_IT_UNSET_USER is not set",
            "gw.yaml:2:56: 'database' must be between 0 and 2147483647"]
    t.check("redis: a username without a password, an unset variable, a negative database: the errors",
            r.returncode == 1 and lines == want, want, lines)


NESTED = """listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - name: u
    targets: [ { address: 127.0.0.1:1 } ]
    health: { active: { intervall: 1s } }
routes:
  - name: r
    upstream: u
    plugins:
      - { name: headers, config: [1, 2] }
      - name: headers
        config: { request: { sett: { a: b } } }
"""


def test_nested_and_non_mapping(t):
    # every plugin config error names its route and plugin, a config that is not a mapping
    # too; an unknown key below the top of a mapping says where it stands
    r, lines = check_file({"gw.yaml": NESTED})
    want = [
        "gw.yaml:5:25: unknown key 'intervall' in 'health.active' of upstream 'u' (did you mean 'interval'?)",
        "gw.yaml:10:34: route 'r', plugin 'headers': config: expected a mapping",
        "gw.yaml:12:30: route 'r', plugin 'headers': unknown key 'sett' in 'request' (did you mean 'set'?)",
    ]
    t.check("exit 1", r.returncode == 1, 1, r.returncode)
    t.check("one line each, named", lines == want, want, lines)


RETRY = """listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - name: u
    targets: [ { address: 127.0.0.1:9001 } ]
    retry: { attempts: 11, on: [502], backoff: 10ms }
routes: [ { name: r, upstream: u } ]
"""


def test_retry_attempts_out_of_range(t):
    # attempts: 11 was reported, then 'on' and 'backoff' as doing "nothing with attempts: 1",
    # an attempts the user never wrote
    r, lines = check_file({"gw.yaml": RETRY})
    want = ["gw.yaml:5:24: 'attempts' must be between 1 and 10"]
    t.check("attempts out of range: that error alone", lines == want, want, lines)
    r, lines = check_file({"gw.yaml": RETRY.replace("attempts: 11", "attempts: 1")})
    t.check("attempts: 1 with on and backoff: both keys named", len(lines) == 2
            and all("does nothing with attempts: 1" in ln for ln in lines), 2, lines)



t.run(test_all_at_once, test_hedge_after_h2c, test_upgrade_lua_route_h2c, test_limit_key_route_trusted, test_rate_limit_bounds, test_redis_auth_keys, test_limit_conn_bounds,
      test_nested_and_non_mapping, test_retry_attempts_out_of_range)
