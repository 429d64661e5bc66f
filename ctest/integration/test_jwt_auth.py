"""jwt-auth with the real binary.

  * `sluice check` rejects a jwt-auth config whose secret_env names an unset variable, or
    whose jwks_file cannot be read: exit 1 and one FILE:LINE:COL line at the plugin's
    `config:` mapping, naming the route and the plugin; a good config exits 0.
  * `sluice run`: HS256 tokens made here (Python's hmac) and EdDSA tokens made by the
    openssl CLI pass with X-Consumer upstream; a bad one gets 401 with the Bearer
    challenge and the upstream sees nothing; a JWKS served by a mock (jwks_uri) rotates
    to a new kid without a reload.

The busted spec (spec/plugins/jwt-auth_spec.lua) covers every refusal case and the cache.
"""

import http.server
import json
import os
import ssl
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("jwt_auth", budget=50)

SECRET = "it-secret-0123456789abcdefghijklmnopqrstuvwxyz"
UNSET = "SLUICE_IT_JWT_NEVER_SET"

HEAD = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http }
upstreams:
  - name: api
    targets: [ { address: %s } ]
routes:
"""


b64u, ed25519_key, eddsa = h.b64u, h.ed25519_key, h.eddsa


def hs256(claims, secret=SECRET):
    return h.hs256(claims, secret)


def check_one_error(t, case, plugin_yaml, words):
    """plugin_yaml has a « where the error must point; exactly one error line is expected."""
    text = HEAD % "127.0.0.1:9" + "  - name: R\n    match: { paths: [/] }\n    upstream: api\n    plugins:\n" + plugin_yaml
    i = text.index("«")
    line = text[:i].count("\n") + 1
    col = i - (text.rfind("\n", 0, i) + 1) + 1
    d = h.new_tmpdir("check")
    p = os.path.join(d, "bad.yaml")
    with open(p, "w") as f:
        f.write(text.replace("«", ""))
    cp = h.run_cli(["check", "-c", p])
    out = cp.stdout + cp.stderr
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith(p + ":")]
    want = "%s:%d:%d: route 'R', plugin 'jwt-auth': " % (p, line, col)
    t.check("%s: exit 1" % case, cp.returncode == 1, 1, (cp.returncode, out[-400:]))
    t.check("%s: one line %s..." % (case, want), len(lines) == 1 and lines[0].startswith(want), want, lines)
    t.check("%s: the message names %s" % (case, words), lines and all(w in lines[0] for w in words), words, lines)


def test_check(t):
    os.environ.pop(UNSET, None)
    os.environ["SLUICE_IT_JWT_SECRET"] = SECRET
    check_one_error(t, "secret_env names an unset variable",
                    "      - { name: jwt-auth, config: «{ algorithms: [HS256], secret_env: %s } }\n" % UNSET,
                    ["environment variable '%s'" % UNSET, "not set"])
    check_one_error(t, "jwks_file does not exist",
                    "      - name: jwt-auth\n        config:\n          «algorithms: [RS256]\n"
                    "          jwks_file: /nonexistent/sluice-jwks.json\n",
                    ["cannot read jwks_file", "/nonexistent/sluice-jwks.json"])
    d = h.new_tmpdir("jwksdir")
    check_one_error(t, "jwks_file is a folder",
                    "      - { name: jwt-auth, config: «{ algorithms: [EdDSA], jwks_file: %s } }\n" % d,
                    ["cannot read jwks_file", d])

    jwks = os.path.join(d, "jwks.json")
    with open(jwks, "w") as f:
        json.dump({"keys": [ed25519_key(d, "k1")]}, f)
    good = HEAD % "127.0.0.1:9" + (
        "  - name: R\n    match: { paths: [/] }\n    upstream: api\n    plugins:\n"
        "      - { name: jwt-auth, config: { algorithms: [HS256, EdDSA], secret_env: SLUICE_IT_JWT_SECRET,"
        " jwks_file: %s, audience: api, leeway: 10 } }\n" % jwks)
    p = os.path.join(d, "good.yaml")
    with open(p, "w") as f:
        f.write(good)
    cp = h.run_cli(["check", "-c", p])
    t.check("a set variable and a readable JWKS: exit 0", cp.returncode == 0, 0,
            (cp.returncode, (cp.stdout + cp.stderr)[-400:]))


def test_run(t):
    d = h.new_tmpdir("keys")
    keys = {"k1": ed25519_key(d, "k1"), "k2": ed25519_key(d, "k2")}
    served = {"jwks": json.dumps({"keys": [keys["k1"]]}).encode(), "fetches": 0,
              "aged": json.dumps({"keys": [keys["k1"]]}).encode()}

    def upstream(req):
        if req.path == "/jwks":
            served["fetches"] += 1
            return h.Response(200, served["jwks"], [("Content-Type", "application/json")])
        if req.path == "/jwks-aged":
            return h.Response(200, served["aged"], [("Content-Type", "application/json")])
        return h.Response(200, json.dumps(req.summary()).encode(), [("Content-Type", "application/json")])

    up = h.MockUpstream(upstream, name="up")
    conf = HEAD % up.address + (
        "  - name: hs\n    match: { paths: [/hs] }\n    upstream: api\n    plugins:\n"
        "      - { name: jwt-auth, config: { algorithms: [HS256], secret_env: SLUICE_IT_JWT_SECRET } }\n"
        "  - name: uri\n    match: { paths: [/uri] }\n    upstream: api\n    plugins:\n"
        "      - { name: jwt-auth, config: { algorithms: [EdDSA], jwks_uri: \"http://%s/jwks\", jwks_refresh: 1 } }\n"
        "  - name: aged\n    match: { paths: [/aged] }\n    upstream: api\n    plugins:\n"
        "      - { name: jwt-auth, config: { algorithms: [EdDSA], jwks_uri: \"http://%s/jwks-aged\", jwks_max_age: 1s } }\n"
        % (up.address, up.address))
    env = dict(os.environ, SLUICE_IT_JWT_SECRET=SECRET)
    s = h.start_sluice(conf, suite=t, name="jwt", env=env)
    try:
        port = s.port()
        now = int(time.time())

        def get(path, token):
            r = h.request(port, "GET", path, headers=[("Authorization", "Bearer " + token),
                                                      ("X-Consumer", "mallory")])
            seen = json.loads(r.body)["headers"] if r.status == 200 else []
            return r, h.hall(seen, "X-Consumer")

        r, consumer = get("/hs", hs256({"sub": "alice", "exp": now + 60}))
        t.check("HS256 from Python's hmac: 200, the upstream sees X-Consumer: alice only",
                (r.status, consumer) == (200, ["alice"]), (200, ["alice"]), (r.status, consumer))
        good, forged = hs256({"sub": "alice", "exp": now + 60}), hs256({"sub": "admin", "exp": now + 60}, "forged" * 8)
        r = h.request(port, "GET", "/hs", headers=[("Authorization", "Bearer " + good), ("Authorization", "Bearer " + forged)])
        seen = h.hall(json.loads(r.body)["headers"], "Authorization") if r.status == 200 else r.body[:200]
        t.check("two Authorization fields: the first is verified and is the only one the upstream gets",
                (r.status, seen) == (200, ["Bearer " + good]), (200, ["Bearer " + good]), (r.status, seen))
        n = len(up.requests)
        for case, tok in [("another secret", hs256({"sub": "alice"}, SECRET + "x")),
                          ("expired", hs256({"sub": "alice", "exp": now - 3600})),
                          ("alg none", b64u(b'{"alg":"none"}') + "." + b64u(b'{"sub":"alice"}') + ".")]:
            r = h.request(port, "GET", "/hs", headers=[("Authorization", "Bearer " + tok)])
            t.check("HS256 %s: 401 with the Bearer challenge" % case,
                    (r.status, r.header("WWW-Authenticate")) == (401, 'Bearer error="invalid_token"'),
                    (401, 'Bearer error="invalid_token"'), (r.status, r.header("WWW-Authenticate")))
        r = h.request(port, "GET", "/hs", headers=[("Authorization", "Basic YWxpY2U6cHc=")])
        t.check("Authorization with another scheme: 401, a bare Bearer challenge (no error code, RFC 6750 3.1)",
                (r.status, r.header("WWW-Authenticate")) == (401, "Bearer"), (401, "Bearer"),
                (r.status, r.header("WWW-Authenticate")))
        t.check("refused tokens reach no upstream", len(up.requests) == n, n, len(up.requests))

        r, consumer = get("/uri", eddsa(d, "k1", {"sub": "bob", "exp": now + 60}))
        t.check("EdDSA from openssl, key from jwks_uri: 200, X-Consumer: bob",
                (r.status, consumer, served["fetches"]) == (200, ["bob"], 1), (200, ["bob"], 1),
                (r.status, consumer, served["fetches"]))
        served["jwks"] = json.dumps({"keys": [keys["k1"], keys["k2"]]}).encode()
        time.sleep(1.1)
        r, consumer = get("/uri", eddsa(d, "k2", {"sub": "carol", "exp": now + 60}))
        t.check("after rotation to a new kid: 200 without a reload (one refetch)",
                (r.status, consumer, served["fetches"]) == (200, ["carol"], 2), (200, ["carol"], 2),
                (r.status, consumer, served["fetches"]))

        # A key withdrawn at the identity provider stops verifying once the set is older
        # than jwks_max_age, even for a token already verified (cached) with a known kid.
        tok = eddsa(d, "k1", {"sub": "dave", "exp": now + 60})
        codes = [get("/aged", tok)[0].status for _ in range(4)]
        t.check("jwks_max_age 1s: a k1 token is accepted while k1 is served", codes == [200] * 4, [200] * 4, codes)
        served["aged"] = json.dumps({"keys": [keys["k2"]]}).encode()
        time.sleep(1.1)
        codes = [get("/aged", tok)[0].status for _ in range(4)]
        t.check("k1 withdrawn: after jwks_max_age its tokens are refused (401) without a reload",
                codes == [401] * 4, [401] * 4, codes)
        tok2 = eddsa(d, "k2", {"sub": "erin", "exp": now + 60})
        time.sleep(1.1)
        codes = [get("/aged", tok2)[0].status for _ in range(4)]
        t.check("... and an unchanged set past jwks_max_age keeps verifying (k2: 200)", codes == [200] * 4,
                [200] * 4, codes)
    finally:
        s.stop()
        up.stop()


class _JWKSHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    jwks = b"{}"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.jwks)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.jwks)

    def log_message(self, *a):
        pass


def test_jwks_https(t):
    """jwks_uri over https (sluice.http's TLS client), verified against jwks_ca."""
    d = h.new_tmpdir("jwks-https")
    h.make_ca(d, "ca")
    h.make_leaf(d, "srv", "idp.test", "DNS:idp.test,IP:127.0.0.1")
    _JWKSHandler.jwks = json.dumps({"keys": [ed25519_key(d, "k1")]}).encode()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(d, "srv.crt"), os.path.join(d, "srv.key"))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _JWKSHandler)
    srv.daemon_threads = True
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    up = h.MockUpstream(lambda req: h.Response(200, b"ok"), name="up")
    uri = "https://127.0.0.1:%d/jwks" % srv.server_address[1]
    conf = HEAD % up.address + (
        "  - name: ca\n    match: { paths: [/ca] }\n    upstream: api\n    plugins:\n"
        "      - { name: jwt-auth, config: { algorithms: [EdDSA], jwks_uri: \"%s\", jwks_ca: %s } }\n"
        "  - name: noca\n    match: { paths: [/noca] }\n    upstream: api\n    plugins:\n"
        "      - { name: jwt-auth, config: { algorithms: [EdDSA], jwks_uri: \"%s\" } }\n"
        % (uri, os.path.join(d, "ca.crt"), uri))
    s = h.start_sluice(conf, suite=t, name="jwt-https")
    try:
        tok = eddsa(d, "k1", {"sub": "dave", "exp": int(time.time()) + 60})
        r = h.request(s.port(), "GET", "/ca", headers=[("Authorization", "Bearer " + tok)])
        t.check("https jwks_uri verified against jwks_ca: the key is fetched, 200", r.status == 200, 200,
                (r.status, r.body[:200]))
        r = h.request(s.port(), "GET", "/noca", headers=[("Authorization", "Bearer " + tok)])
        t.check("https jwks_uri whose CA the system store lacks: refused (503: no keys yet), verify failure logged",
                r.status == 503 and "certificate verify failed" in s.log(), 503, (r.status, s.log()[-300:]))
    finally:
        s.stop()
        srv.shutdown()
        up.stop()


t.run(test_check, test_run, test_jwks_https)
