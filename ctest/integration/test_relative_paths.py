"""Every path a config names resolves against the config file's folder, never the working
directory: a gateway started from / (as systemd starts it) on a config that names its files
relatively finds them all. Each kind of path key is used once:
  plugin_paths                   a plugin folder next to the config (hello adds X-Hello)
  lua_routes                     a Lua routes file next to the config
  tls.certificates cert / key    a certificate and key next to the config (an https request)
  jwt-auth jwks_file             a JWKS next to the config (an EdDSA token accepted)
  access-log path                the log written next to the config (one JSON line)
and `sluice check -c`, run from /, accepts the same config.
"""

import http.client
import json
import os
import ssl
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("relative_paths", budget=60)

CONF = """
workers: 1
watch: false
admin: { listen: 127.0.0.1:0 }
plugin_paths: [myplugins]
lua_routes: [routes.lua]
listeners:
  - { name: web, listen: 127.0.0.1:0 }
  - name: tls
    listen: 127.0.0.1:0
    tls: { certificates: [ { cert: certs/leaf.crt, key: certs/leaf.key } ] }
routes:
  - name: hello
    match: { paths: [/hello] }
    plugins:
      - { name: hello }
      - { name: access-log, config: { path: logs-access.log } }
      - { name: echo }
  - name: jwt
    match: { paths: [/jwt] }
    plugins:
      - { name: jwt-auth, config: { algorithms: [EdDSA], jwks_file: keys/jwks.json } }
      - { name: echo }
"""

HELLO = """local sluice = require("sluice")
return { name = "hello", version = "1.0", schema = {},
         header_filter = function(conf, ctx) sluice.response.set_header("X-Hello", "yes") end }
"""

ROUTES = """return {
  { name = "from-lua", match = { paths = { "/lua" } }, plugins = { { name = "echo" } } },
}
"""


def test_from_root(t):
    d = h.new_tmpdir("conf")
    for sub in ("myplugins", "certs", "keys"):
        os.mkdir(os.path.join(d, sub))
    with open(os.path.join(d, "myplugins", "hello.lua"), "w") as f:
        f.write(HELLO)
    with open(os.path.join(d, "routes.lua"), "w") as f:
        f.write(ROUTES)
    certs = os.path.join(d, "certs")
    h.make_ca(certs)
    h.make_leaf(certs, "leaf", "localhost", "DNS:localhost,IP:127.0.0.1")
    keys = os.path.join(d, "keys")
    jwk = h.ed25519_key(keys, "k1")
    with open(os.path.join(keys, "jwks.json"), "w") as f:
        json.dump({"keys": [jwk]}, f)
    os.chmod(d, 0o755)

    s = h.start_sluice(CONF, suite=t, config_dir=d, cwd="/")
    p = subprocess.run([h.BIN, "check", "-c", s.config_path], capture_output=True, text=True, cwd="/", timeout=20)
    t.check("sluice check -c CONFIG from /: ok", p.returncode == 0, 0, (p.returncode, p.stdout, p.stderr))

    r = h.request(s.port(), "GET", "/hello")
    t.check("plugin_paths myplugins (relative): hello's X-Hello on the answer", r.status == 200 and
            r.header("x-hello") == "yes", (200, "yes"), (r.status, r.header("x-hello")))
    r = h.request(s.port(), "GET", "/lua")
    t.check("lua_routes routes.lua (relative): its route answers", r.status == 200 and b"/lua" in r.body, 200,
            (r.status, r.body[:200]))
    ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))
    c = http.client.HTTPSConnection("127.0.0.1", s.port("tls"), context=ctx, timeout=5)
    c.request("GET", "/lua")
    rr = c.getresponse()
    t.check("tls cert/key certs/leaf.* (relative): an https request verified against the CA", rr.status == 200,
            200, rr.status)
    c.close()
    tok = h.eddsa(keys, "k1", {"sub": "u1", "exp": int(time.time()) + 300})
    r = h.request(s.port(), "GET", "/jwt", headers=[("Authorization", "Bearer " + tok)])
    t.check("jwt-auth jwks_file keys/jwks.json (relative): the signed token is accepted", r.status == 200, 200,
            (r.status, r.body[:200]))
    log = os.path.join(d, "logs-access.log")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (os.path.exists(log) and os.path.getsize(log)):
        time.sleep(0.05)
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    t.check("access-log path logs-access.log (relative): written next to the config, not in /",
            len(lines) == 1 and json.loads(lines[0]).get("route") == "hello" and
            not os.path.exists("/logs-access.log"), 1, (lines, os.path.exists("/logs-access.log")))


t.run(test_from_root)
