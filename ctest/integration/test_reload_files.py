"""Files plugins read are part of the generation (issue 26, item 2): a JWKS rotation.

jwt-auth's `jwks_file` (written relative to the config file, the gateway started from
another working directory) holds key k1; a token signed by k1 (openssl) passes. Then the
file is rotated to k2 only, the config text untouched, and:
  1. SIGHUP: within 1 s the k2 token gets 200 and the revoked k1 token 401;
  2. `sluice reload -c FILE` after rotating back to k1: exit 0, its answer is applied and
     lists "file:PATH" of the JWKS in `changed`; k1 200, k2 401 within 1 s;
  3. the file watch (watch: true, no explicit reload at all): k2 200, k1 401 within 1 s
     of the rotation (the JWKS's folder is watched; its content is in the watch's hash);
  4. a generation keeps the text its check read: rotated before any request (jwt-auth
     prepares per worker at its first request), with no reload, the old key still passes
     and the new one is refused on every worker, until SIGHUP;
  5. 20 explicit reloads (POST /reload) of unchanged content under keep-alive load: each
     answers applied with the next generation number and `unchanged: true`, /status
     counts 20 new generations, and no request of the load failed.
Before the fix an explicit reload of an unchanged YAML answered "unchanged" and kept the
revoked key (200) while refusing the new one (401).
"""

import http.client
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("reload_files", budget=120)
S = {}

CONF = """\
workers: 2
watch: %s
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: http }
upstreams:
  - { name: api, targets: [ { address: %s } ] }
routes:
  - name: api
    match: { paths: [/] }
    upstream: api
    plugins:
      - { name: jwt-auth, config: { algorithms: [EdDSA], jwks_file: keys/jwks.json } }
"""


def setup(t):
    d = h.new_tmpdir("keys")
    S["d"] = d
    S["jwk"] = {k: h.ed25519_key(d, k) for k in ("k1", "k2")}
    exp = int(time.time()) + 600
    S["tok"] = {k: h.eddsa(d, k, {"sub": "user-" + k, "exp": exp}) for k in ("k1", "k2")}
    S["up"] = h.MockUpstream(lambda req: h.Response(200, b"ok"), name="up")


def write_jwks(s, kid):
    """Rotates keys/jwks.json (beside the config) to one key, atomically (rename)."""
    kd = os.path.join(s.dir, "keys")
    os.makedirs(kd, exist_ok=True)
    tmp = os.path.join(kd, ".jwks.tmp")
    with open(tmp, "w") as f:
        json.dump({"keys": [S["jwk"][kid]]}, f)
    os.rename(tmp, os.path.join(kd, "jwks.json"))
    return os.path.join(kd, "jwks.json")


def code(s, kid):
    return h.request(s.port(), "GET", "/", headers=[("Authorization", "Bearer " + S["tok"][kid])]).status


def settles(s, good, bad, within=1.0):
    """Polls until the good key's token is 200 and the bad one's 401, up to `within` s."""
    deadline = time.monotonic() + within
    while True:
        got = (code(s, good), code(s, bad))
        if got == (200, 401) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_sighup_and_cli(t):
    s = S["explicit"]
    t.check("k1's token passes, k2's is refused (jwks_file resolved against the config's folder)",
            (code(s, "k1"), code(s, "k2")) == (200, 401), (200, 401), (code(s, "k1"), code(s, "k2")))
    gen = s.status()["generation"]
    write_jwks(s, "k2")
    os.kill(s.pid, signal.SIGHUP)
    got = settles(s, "k2", "k1")
    t.check("rotation to k2 + SIGHUP: within 1 s k2 200, the revoked k1 401", got == (200, 401), (200, 401), got)
    t.check("... SIGHUP made a new generation", s.status()["generation"] == gen + 1, gen + 1,
            s.status()["generation"])
    path = write_jwks(s, "k1")
    r = h.run_cli(["reload", "-c", s.config_path, "--ready-file", s.ready_path])
    ans = {}
    try:
        ans = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pass
    t.check("rotation back to k1 + `sluice reload`: exit 0, applied", r.returncode == 0 and ans.get("applied") is True,
            "exit 0, applied", (r.returncode, r.stdout, r.stderr))
    t.check("... its answer lists the key file as changed", "file:" + path in ans.get("changed", []),
            "file:" + path, ans.get("changed"))
    got = settles(s, "k1", "k2")
    t.check("... within 1 s k1 200, k2 401", got == (200, 401), (200, 401), got)


def test_watch(t):
    s = S["watch"]
    t.check("watching gateway: k1 200, k2 401", (code(s, "k1"), code(s, "k2")) == (200, 401), (200, 401),
            (code(s, "k1"), code(s, "k2")))
    gen = s.status()["generation"]
    write_jwks(s, "k2")
    got = settles(s, "k2", "k1", within=1.0)
    t.check("rotation to k2, no reload asked: the watch applies it within 1 s (k2 200, k1 401)",
            got == (200, 401), (200, 401), got)
    t.check("... as one new generation", s.status()["generation"] == gen + 1, gen + 1, s.status()["generation"])


def test_forced_unchanged(t):
    s = S["explicit"]
    gen0 = s.status()["generation"]
    stop = threading.Event()
    res = {"n": 0, "bad": 0}

    def load_tok():
        c = http.client.HTTPConnection("127.0.0.1", s.port(), timeout=5)
        while not stop.is_set():
            try:
                c.request("GET", "/", headers={"Authorization": "Bearer " + S["tok"]["k1"]})
                r = c.getresponse()
                r.read()
                ok = r.status == 200
                if not ok:
                    res.setdefault("kinds", {}).setdefault(r.status, 0)
                    res["kinds"][r.status] += 1
            except Exception as e:  # noqa: BLE001 - any failure counts
                ok = False
                res.setdefault("kinds", {}).setdefault(type(e).__name__, 0)
                res["kinds"][type(e).__name__] += 1
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", s.port(), timeout=5)
            res["n"] += 1
            res["bad"] += not ok
        c.close()

    ths = [threading.Thread(target=load_tok) for _ in range(4)]
    for th in ths:
        th.start()
    answers = []
    try:
        for _ in range(20):
            answers.append(s.reload(new_content=False))
            time.sleep(0.05)
    finally:
        stop.set()
        for th in ths:
            th.join()
    gens = [a.get("generation") for _, a in answers]
    t.check("20 explicit reloads of unchanged content: each applied, unchanged: true, the next generation",
            all(c == 200 and a.get("applied") is True and a.get("unchanged") is True for c, a in answers)
            and gens == list(range(gen0 + 1, gen0 + 21)),
            "generations %d..%d" % (gen0 + 1, gen0 + 20), answers[:2] + answers[-1:])
    t.check("/status counts 20 new generations", s.status()["generation"] == gen0 + 20, gen0 + 20,
            s.status()["generation"])
    t.check("keep-alive load across the 20 reloads: nothing failed", res["n"] > 100 and res["bad"] == 0,
            "> 100 requests, 0 failed", res)


def test_generation_snapshot(t):
    """A generation keeps the file its check read: rotated before any request reached a
    worker (whose plugin prepares at its first request), with no reload and no watch, the
    old key still passes and the new one is refused, on every worker; a reload applies it."""
    s = S["snapshot"]
    write_jwks(s, "k2")
    got = [(code(s, "k1"), code(s, "k2")) for _ in range(12)]  # new connections: both workers
    t.check("rotated to k2 before the first request, no reload: 12 times k1 200 and k2 401 (the generation's file)",
            all(g == (200, 401) for g in got), [(200, 401)] * 12, got)
    os.kill(s.pid, signal.SIGHUP)
    got = settles(s, "k2", "k1")
    t.check("... SIGHUP applies the rotation: k2 200, k1 401", got == (200, 401), (200, 401), got)


def boot(t):
    d = h.new_tmpdir("gw")
    os.makedirs(os.path.join(d, "keys"))
    with open(os.path.join(d, "keys", "jwks.json"), "w") as f:
        json.dump({"keys": [S["jwk"]["k1"]]}, f)
    S["snapshot"] = h.start_sluice(CONF % ("false", S["up"].address), suite=t, cwd=h.new_tmpdir("cwd"),
                                   name="snapshot", config_dir=d)
    for watch in (False, True):
        d = h.new_tmpdir("gw")
        os.makedirs(os.path.join(d, "keys"))
        with open(os.path.join(d, "keys", "jwks.json"), "w") as f:
            json.dump({"keys": [S["jwk"]["k1"]]}, f)
        S["explicit" if not watch else "watch"] = h.start_sluice(
            CONF % ("true" if watch else "false", S["up"].address), suite=t, cwd=h.new_tmpdir("cwd"),
            name="watch" if watch else "explicit", config_dir=d)


t.run(setup, boot, test_generation_snapshot, test_sighup_and_cli, test_watch, test_forced_unchanged)
