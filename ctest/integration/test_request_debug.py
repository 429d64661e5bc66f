"""Request debugging (issue 17): X-Sluice-Debug with admin.debug_token_env's token.

1. With the right token the response carries X-Sluice-Debug-Output: JSON with the route,
   the config generation, each attempt (a 502 retried on the second target: two, with
   their targets and statuses) and each plugin call's time (a 50 ms sleep shows as such).
2. With a wrong token, a token one byte off, or an empty value: no output header.
3. In every case the upstream never sees X-Sluice-Debug.
4. A gateway-made answer (a plugin's exit) carries it too; after a reload the generation
   is the new one.
"""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("request_debug", budget=60)
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins_fixture")
TOKEN = "s3cret-debug-token"

CONF = """
workers: 1
watch: false
plugin_paths: [%s]
admin: { listen: 127.0.0.1:0, debug_token_env: SL_TEST_DEBUG_TOKEN }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - name: api
    targets: [ { address: %s }, { address: %s } ]
    balancer: round-robin
    retry: { attempts: 2, on: [502], backoff: 0s }
routes:
  - name: exit
    match: { paths: [/exit] }
    plugins: [ { name: exit-with, config: { status: 203 } } ]
  - name: api
    match: { paths: [/] }
    plugins:
      - { name: request-id }
      - { name: sleeper, config: { seconds: 0.05, answer: false } }
    upstream: api
"""


def test_debug(t):
    bad = h.MockUpstream(lambda req: h.Response(502, b"bad"), name="bad")
    good = h.MockUpstream(lambda req: h.Response(200, b"good"), name="good")
    env = dict(os.environ, SL_TEST_DEBUG_TOKEN=TOKEN)
    s = h.start_sluice(CONF % (FIXTURE, bad.address, good.address), suite=t, name="debug", env=env)

    outs = []
    for _ in range(2):  # round robin: one of the two starts on the 502 target
        r = h.request(s.port(), "GET", "/x", headers=[("X-Sluice-Debug", TOKEN)])
        t.check("answered 200", r.status == 200, 200, r.status)
        raw = r.header("X-Sluice-Debug-Output")
        t.check("X-Sluice-Debug-Output present", raw is not None, "present", None)
        outs.append(json.loads(raw) if raw else {})
    t.info(json.dumps(outs[0]))
    for o in outs:
        t.check("route named", o.get("route") == "api", "api", o.get("route"))
        t.check("generation 1", o.get("generation") == 1, 1, o.get("generation"))
        calls = {(c["plugin"], c["phase"]): c["ms"] for c in o.get("plugins", [])}
        t.check("sleeper's access call took ~50 ms", 45 <= calls.get(("sleeper", "access"), 0) < 200, "45..200",
                calls.get(("sleeper", "access")))
        t.check("request-id's rewrite call listed", ("request-id", "rewrite") in calls, "listed", sorted(calls))
    retried = [o for o in outs if o.get("attempts") and o["attempts"][0]["target"] == bad.address]
    t.check("a request met the 502 target first", retried, ">= 1", [o.get("attempts") for o in outs])
    for o in outs:
        a = o.get("attempts", [])
        t.check("attempts: the 200 last (to its response head)", a and a[-1]["status"] == 200, 200, a)
    for o in retried:
        a = o["attempts"]
        t.check("retried: two attempts", len(a) == 2, 2, a)
        t.check("first attempt: the 502 target", a[0]["target"] == bad.address and a[0]["status"] == 502,
                (bad.address, 502), (a[0]["target"], a[0]["status"]))
        t.check("second attempt: the good target, 200", a[-1]["target"] == good.address and a[-1]["status"] == 200,
                (good.address, 200), (a[-1]["target"], a[-1]["status"]))
        t.check("attempt times are numbers >= 0", all(isinstance(x["ms"], (int, float)) and x["ms"] >= 0 for x in a),
                ">= 0", a)

    for value in ("wrong", TOKEN[:-1], TOKEN + "x", ""):
        r = h.request(s.port(), "GET", "/x", headers=[("X-Sluice-Debug", value)])
        t.check("token %r: no output header" % value, r.status == 200 and r.header("X-Sluice-Debug-Output") is None,
                "absent", r.header("X-Sluice-Debug-Output"))
    r = h.request(s.port(), "GET", "/x")
    t.check("no header: no output", r.header("X-Sluice-Debug-Output") is None, "absent", None)
    seen = [req.header("X-Sluice-Debug") for up in (bad, good) for req in up.requests]
    t.check("the upstreams never saw X-Sluice-Debug (%d requests)" % len(seen), seen and all(v is None for v in seen),
            "never", [v for v in seen if v is not None])

    r = h.request(s.port(), "GET", "/exit", headers=[("X-Sluice-Debug", TOKEN)])
    o = json.loads(r.header("X-Sluice-Debug-Output") or "{}")
    t.check("a plugin's exit: output with no attempt and the plugin's call",
            r.status == 203 and o.get("route") == "exit" and o.get("attempts") == [] and
            any(c["plugin"] == "exit-with" for c in o.get("plugins", [])), "exit, [], exit-with", o)

    code, _ = s.reload()
    t.check("reload applied", code == 200, 200, code)
    r = h.request(s.port(), "GET", "/exit", headers=[("X-Sluice-Debug", TOKEN)])
    o = json.loads(r.header("X-Sluice-Debug-Output") or "{}")
    t.check("after a reload: generation 2", o.get("generation") == 2, 2, o.get("generation"))
    s.stop()
    bad.stop()
    good.stop()


def test_unset_variable(t):
    d = tempfile.mkdtemp(dir=h.tmp_root())
    path = os.path.join(d, "sluice.yaml")
    with open(path, "w") as f:
        f.write(CONF % (FIXTURE, "127.0.0.1:1", "127.0.0.1:2"))
    p = subprocess.run([h.BIN, "check", "-c", path], capture_output=True, text=True, timeout=20,
                       env=dict((k, v) for k, v in os.environ.items() if k != "SL_TEST_DEBUG_TOKEN"))
    t.check("check: the variable unset is an error at its key",
            p.returncode != 0 and "debug_token_env" in (p.stdout + p.stderr), "error naming debug_token_env",
            p.stdout + p.stderr)


t.run(test_debug, test_unset_variable)
