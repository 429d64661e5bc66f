"""A fleet configured from etcd (config_source): a real etcd 3.4 on loopback.

- Three gateways converge on a pushed change: p99 <= 1 s over 50 pushes, measured at
  the data path (the new route answers on all three), with zero failed requests under
  steady load during 20 of them.
- An endpoint given by a name is resolved off the main loop: a name with two addresses
  whose first refuses (a private /etc/hosts, ::1 first) is read through the second; a name
  that does not resolve leaves the source down while /health answers at once.
- A plugin's code changed by a push takes effect on all three without a restart.
- An invalid route written with `etcdctl put` is rejected (old config keeps serving,
  the error names the key and its line:col, sluice_reloads_total{result="rejected"});
  fixing the key applies it.
- `etcdctl compact` at the current revision while a gateway's watch is behind (the
  gateway stopped with SIGSTOP while 6 MB of writes and the compaction happen): nothing is
  missed; and, certain to hit etcd's cancel, a gateway whose first watch request a relay
  (harness.HoldingRelay, between it and etcd) holds back while the test writes and
  compacts: the watch is cancelled with the compact revision, the prefix read again,
  nothing missed.
- etcd stopped: all three keep serving, sluice_config_source_up goes 0; etcd back: a
  change pushed then arrives, sluice_config_source_up 1.
- etcd wiped and reloaded from a push: the gateways follow the new history.
- A gateway started while etcd is down serves from its snapshot; one with neither answers
  /ready 503 until etcd gives it a config.
- `sluice pull --plugins DIR` writes no file outside DIR for a key plugins/../../x.
- `sluice push`/`pull` refuse a --prefix that config_source would refuse ("" would
  delete every key starting with '/').
- Two `sluice push` runs racing (a relay holds each one's write, the txn, until both have
  read): exactly one wins, the other exits 1 and says why.
"""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("etcd_fleet", budget=170)
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
PREFIX = "/fleet"


class Etcd:
    """One etcd member on loopback high ports; stopped by PID."""

    def __init__(self):
        self.dir = h.new_tmpdir("etcd")
        self.port, self.peer = h.free_port(), h.free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = None

    def start(self, wipe=False):
        data = os.path.join(self.dir, "data")
        if wipe:
            shutil.rmtree(data, ignore_errors=True)
        peer = "http://127.0.0.1:%d" % self.peer
        log = open(os.path.join(self.dir, "etcd.log"), "ab")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "t", "--data-dir", data, "--listen-client-urls", self.url,
             "--advertise-client-urls", self.url, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", "t=" + peer],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=h._die_with_parent)
        log.close()
        self.pid = self.proc.pid
        h._register(self)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.ctl("get", "/x").returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("etcd did not start")

    def stop(self, timeout=10.0):
        return h.stop_process(self, timeout)

    def ctl(self, *args):
        env = dict(os.environ, ETCDCTL_API="3")
        return subprocess.run(["etcdctl", "--endpoints", self.url, "--command-timeout=3s"] + list(args),
                              capture_output=True, text=True, errors="replace", env=env, timeout=10)

    def put(self, key, value):
        """PUT through the HTTP/JSON gateway (etcdctl is a process per call: too slow for many)."""
        import base64
        import json
        import urllib.request
        body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                           "value": base64.b64encode(value.encode()).decode()}).encode()
        with urllib.request.urlopen(self.url + "/v3/kv/put", data=body, timeout=5) as r:
            return json.loads(r.read())

    def revision(self):
        out = self.ctl("get", "/x", "-w", "json").stdout
        return int(__import__("json").loads(out)["header"]["revision"])


def plugin(version):
    return ('local sluice = require("sluice")\n'
            'return { name = "hello", version = "1", schema = { say = { type = "string", default = "hi" } },\n'
            '  access = function(conf) return sluice.response.exit(200, "%s " .. conf.say .. "\\n") end }\n'
            % version)


class Pusher:
    """Writes ordinary config files (routes named in `routes`) and pushes them."""

    def __init__(self, etcd):
        self.etcd = etcd
        self.dir = h.new_tmpdir("push")
        os.makedirs(os.path.join(self.dir, "plugins"))
        self.code("v1")
        self.routes = ["a"]

    def code(self, version):
        with open(os.path.join(self.dir, "plugins", "hello.lua"), "w") as f:
            f.write(plugin(version))

    def file(self, routes=None, name="push.yaml"):
        text = "listeners:\n  - { name: web, listen: 127.0.0.1:0 }\nplugin_paths: [plugins]\nroutes:\n"
        for r in routes or self.routes:
            text += "  - { name: %s, match: { paths: [/%s/] }, plugins: [ { name: hello, config: { say: %s } } ] }\n" % (r, r, r)
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def push(self, routes=None, env=None, wait=True):
        argv = [h.BIN, "push", "-c", self.file(routes), "--etcd", self.etcd.url, "--prefix", PREFIX]
        return subprocess.run(argv, capture_output=True, text=True, timeout=20, env=env)


def gw_conf(etcd, snapshot=True, timeout="1s"):
    """etcd: anything with a url (an Etcd, or a HoldingRelay in front of one)."""
    return ("workers: 1\nadmin: { listen: 127.0.0.1:0 }\nlisteners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
           "config_source:\n  etcd: { endpoints: [%s], prefix: %s, timeout: %s%s }\n"
           % (etcd.url, PREFIX, timeout, ", snapshot: snap.json" if snapshot else ""))


def gateway(etcd, name, snapshot=True):
    return h.start_sluice(gw_conf(etcd, snapshot), name=name, suite=t)


def get(g, path):
    try:
        r = h.request(g.port(), "GET", path, timeout=2)
        return r.status, r.body
    except Exception as e:  # noqa: BLE001 - a refused or reset connection is an answer here
        return 0, repr(e).encode()


def until(fn, timeout):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.01)


def source_up(g):
    return h.metric_values(g.metrics()[1], "sluice_config_source_up")


def rejected(g):
    v = h.metric_values(g.metrics()[1], "sluice_reloads_total", result="rejected")
    return v[0] if v else None


class Load:
    """Steady requests to /a on every gateway from one thread; counts failures."""

    def __init__(self, gws):
        self.gws, self.ok, self.failed, self.stop_flag = gws, 0, [], False
        self.th = threading.Thread(target=self.run)
        self.th.start()

    def run(self):
        while not self.stop_flag:
            for g in self.gws:
                st, body = get(g, "/a/")
                if st == 200 and body.endswith(b" a\n"):
                    self.ok += 1
                else:
                    self.failed.append((g.name, st, body[:80]))

    def stop(self):
        self.stop_flag = True
        self.th.join()


S = {}


def test_fleet(t):
    etcd = Etcd()
    etcd.start()
    p = Pusher(etcd)
    r = p.push()
    t.check("sluice push writes the first config", r.returncode == 0, 0, (r.returncode, r.stderr))
    gws = [gateway(etcd, "gw%d" % i) for i in range(3)]
    ok = until(lambda: all(get(g, "/a/") == (200, b"v1 a\n") for g in gws), 5)
    t.check("three gateways serve the pushed route", ok, True, [get(g, "/a/") for g in gws])
    S.update(etcd=etcd, p=p, gws=gws)

    # 50 pushes, each adding a route; the time until all three answer it, at the data path
    lat, load = [], Load(gws)
    for i in range(50):
        if i == 20:
            load.stop()
        name = "r%d" % i
        p.routes.append(name)
        t0 = time.monotonic()
        r = p.push()
        if r.returncode != 0:
            t.check("push %d" % i, False, 0, r.stderr)
            break
        until(lambda: all(get(g, "/%s/" % name)[0] == 200 for g in gws), 3)
        lat.append(time.monotonic() - t0)
    if not load.stop_flag:
        load.stop()
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 99
    t.info("convergence over %d pushes: p50 %.0f ms, p99 %.0f ms, max %.0f ms (push CLI included)"
           % (len(lat), lat[len(lat) // 2] * 1000, p99 * 1000, lat[-1] * 1000))
    t.check("three gateways converge: p99 <= 1 s over 50 pushes", len(lat) == 50 and p99 <= 1.0, "<= 1.0", p99)
    t.check("zero failed requests under steady load during 20 pushes", load.ok > 50 and not load.failed,
            "0 failed", (load.ok, load.failed[:3]))
    gen = gws[0].status()["generation"]
    t.check("one generation per push", gen >= 50, ">= 50", gen)


class Named:
    """An endpoint given by a name: the client resolves it on libuv's pool, so the main loop
    never waits for DNS."""
    def __init__(self, name, port):
        self.url = "http://%s:%d" % (name, port)


# A private /etc/hosts (a mount namespace of the gateway's own) where one name has two
# addresses, ::1 first (RFC 6724 sorts it before 127.0.0.1) while etcd listens on 127.0.0.1
# only: the client must try the second address when the first refuses.
TWO = "sluice-etcd-two"


def two_address_prefix():
    hosts = os.path.join(h.new_tmpdir("hosts"), "hosts")
    with open(hosts, "w") as f:
        f.write("::1 %s\n127.0.0.1 %s\n127.0.0.1 localhost\n" % (TWO, TWO))
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"',
            hosts], hosts


def test_endpoint_names(t):
    etcd, gws = S["etcd"], S["gws"]
    want = get(gws[0], "/a/")
    prefix, hosts = two_address_prefix()
    order = subprocess.run(prefix + ["getent", "ahosts", TWO], capture_output=True,
                           text=True, timeout=10).stdout.split()
    t.info("%s resolves, in order, to %s" % (TWO, [x for x in order if ":" in x or x.count(".") == 3][:4]))
    g = h.start_sluice(gw_conf(Named(TWO, etcd.port), snapshot=False), name="gw-named", suite=t, prefix=prefix)
    ok = until(lambda: get(g, "/a/") == want, 5)
    t.check("an endpoint given by a name of two addresses, the first refusing, is read through the second",
            ok, want, get(g, "/a/"))
    t.check("... sluice_config_source_up 1", source_up(g) == [1], [1], source_up(g))
    g.stop()
    # a name that cannot be resolved: the source is down, the admin API answers meanwhile
    g2 = h.start_sluice(gw_conf(Named("sluice-no-such-name.invalid", 2379), snapshot=False),
                        name="gw-unresolvable", suite=t)
    t0 = time.monotonic()
    st = g2.admin_get("/health").status
    t.check("an unresolvable endpoint: /health answers at once", st == 200 and time.monotonic() - t0 < 1, 200, st)
    ok = until(lambda: source_up(g2) == [0], 5)
    t.check("... and the source is down", ok, [0], source_up(g2))
    t.check("... not ready (no config yet)", g2.admin_get("/ready").status == 503, 503, g2.admin_get("/ready").status)
    g2.stop()


def test_plugin_code(t):
    p, gws = S["p"], S["gws"]
    p.code("v2")
    r = p.push()
    t.check("a push with only plugin code changed writes it", r.returncode == 0 and "1 put" in r.stdout,
            "1 put", r.stdout + r.stderr)
    ok = until(lambda: all(get(g, "/a/") == (200, b"v2 a\n") for g in gws), 3)
    t.check("the new plugin code answers on all three without a restart", ok, True, [get(g, "/a/") for g in gws])
    pdir = os.path.join(gws[0].dir, "snap.json.plugins")
    # removed once the reload has finished, which may be just after the new code answers
    until(lambda: len(os.listdir(pdir)) == 1, 3)
    dirs = os.listdir(pdir)
    t.check("the folder of the old code is removed once the new one applies", len(dirs) == 1, 1, dirs)
    if os.geteuid() == 0:
        # with `user:`, a snapshot folder that user cannot write rejects the generation
        # (documented); the error gives the real cause, not the ENOENT of a later mkdir
        d = h.new_tmpdir("gw-user")
        os.mkdir(os.path.join(d, "ro"), 0o755)
        conf = "user: nobody\n" + gw_conf(S["etcd"], snapshot=False).replace("timeout: 1s", "timeout: 1s, snapshot: ro/snap.json")
        g = h.start_sluice(conf, name="gw-user", suite=t, config_dir=d, shared_dir=True)
        err = until(lambda: (g.status().get("config_source") or {}).get("last_error"), 5)
        t.check("a snapshot folder `user:` cannot write: the error says so",
                err and "snap.json.plugins: Permission denied" in err, "Permission denied", err)
        g.stop()


def test_invalid_key(t):
    etcd, gws = S["etcd"], S["gws"]
    before = [rejected(g) for g in gws]
    bad = "name: bad\nmatch: { paths: [/bad/] }\nplugins: [ { name: hello, config: { say: 5 } } ]\n"
    etcd.ctl("put", PREFIX + "/routes/bad", bad)
    ok = until(lambda: all(rejected(g) == b + 1 for g, b in zip(gws, before)), 3)
    t.check("an invalid route put with etcdctl is rejected on all three", ok, [b + 1 for b in before],
            [rejected(g) for g in gws])
    err = gws[0].status()["config_source"]["last_error"] or ""
    t.check("the error names the key, its line:col and the plugin",
            ("etcd %s/routes/bad:3:42:" % PREFIX) in err and "hello" in err, "etcd /fleet/routes/bad:3:42: ...", err)
    t.check("the old config keeps serving", all(get(g, "/a/") == (200, b"v2 a\n") for g in gws), True,
            [get(g, "/a/") for g in gws])
    t.check("the invalid route is not served", get(gws[0], "/bad/")[0] == 404, 404, get(gws[0], "/bad/"))
    etcd.ctl("put", PREFIX + "/routes/bad", bad.replace("say: 5", "say: fixed"))
    ok = until(lambda: all(get(g, "/bad/") == (200, b"v2 fixed\n") for g in gws), 3)
    t.check("fixing the key applies it", ok, True, [get(g, "/bad/") for g in gws])
    # more ways to be wrong, each rejected whole with the key named
    cases = [
        ("routes/bad", "name: bad\nmatch: { paths: [/bad/] \n", "etcd %s/routes/bad:3:1:" % PREFIX),
        ("routes/bad", "name: other\nmatch: { paths: [/bad/] }\n",
         "etcd %s/routes/bad:1:7: name 'other' is not the key's last part 'bad'" % PREFIX),
        ("route/x", "name: x\n", "etcd %s/route/x:1:1: unknown key" % PREFIX),
    ]
    for key, val, want in cases:
        n = rejected(gws[0])
        etcd.put(PREFIX + "/" + key, val)
        until(lambda: rejected(gws[0]) == n + 1, 3)
        err = gws[0].status()["config_source"]["last_error"] or ""
        t.check("rejected and named: %s" % want, want in err and get(gws[0], "/bad/") == (200, b"v2 fixed\n"),
                want, err)
        if key != "routes/bad":
            etcd.ctl("del", PREFIX + "/" + key)
    etcd.ctl("put", PREFIX + "/routes/bad", bad.replace("say: 5", "say: fixed"))
    until(lambda: gws[0].status()["config_source"]["last_error"] is None, 3)
    t.check("/status clears the error once applied", gws[0].status()["config_source"]["last_error"] is None,
            None, gws[0].status()["config_source"]["last_error"])
    # a value written as a YAML document of its own ("---" ... "...", as `etcdctl put K
    # "$(cat route.yaml)"` stores a file that starts with ---) applies like the bare mapping
    etcd.ctl("put", PREFIX + "/routes/doc", "%YAML 1.1\n---\nname: doc\nmatch: { paths: [/doc/] }\n"
             "plugins: [ { name: hello, config: { say: doc } } ]\n...\n")
    ok = until(lambda: all(get(g, "/doc/") == (200, b"v2 doc\n") for g in gws), 3)
    t.check("a value with %YAML, --- and ... applies", ok, (200, b"v2 doc\n"),
            (get(gws[0], "/doc/"), gws[0].status()["config_source"]["last_error"]))
    etcd.ctl("del", PREFIX + "/routes/doc")
    until(lambda: all(get(g, "/doc/")[0] == 404 for g in gws), 3)
    # plugin code that does not load: the error names its key, not the file it became
    n = rejected(gws[0])
    etcd.put(PREFIX + "/plugins/hello", "return {")
    until(lambda: rejected(gws[0]) == n + 1, 3)
    err = gws[0].status()["config_source"]["last_error"] or ""
    t.check("plugin code that does not load: the error names its key plugins/hello",
            ("etcd %s/plugins/hello:1: unexpected symbol" % PREFIX) in err and "/tmp/" not in err
            and "hello.lua" not in err, "etcd /fleet/plugins/hello:1: unexpected symbol ...", err)
    etcd.put(PREFIX + "/plugins/hello", plugin("v2"))
    ok = until(lambda: gws[0].status()["config_source"]["last_error"] is None, 3)
    t.check("... and the old code kept serving, the fixed code applies",
            ok and all(get(g, "/a/") == (200, b"v2 a\n") for g in gws), True, [get(g, "/a/") for g in gws])


def test_compaction_behind(t):
    etcd, gws = S["etcd"], S["gws"]
    g = gws[0]
    g.signal(signal.SIGSTOP)  # its watch falls behind: etcd cannot deliver while it sleeps
    try:
        pad = "# " + "x" * 16000 + "\n"
        for i in range(400):  # about 6 MB of events: far more than the sockets and etcd's buffers hold
            etcd.put(PREFIX + "/routes/c%d" % i,
                     pad + "name: c%d\nmatch: { paths: [/c%d/] }\nplugins: [ { name: hello, config: { say: c } } ]\n"
                     % (i, i))
        rev = etcd.revision()
        etcd.ctl("put", PREFIX + "/routes/c0", "name: c0\nmatch: { paths: [/c0/] }\n"
                 "plugins: [ { name: hello, config: { say: during } } ]\n")
        cr = etcd.ctl("compact", str(rev + 1))
        etcd.ctl("put", PREFIX + "/routes/late", "name: late\nmatch: { paths: [/late/] }\n"
                 "plugins: [ { name: hello, config: { say: late } } ]\n")
        etcd.ctl("del", PREFIX + "/routes/c1")
    finally:
        g.signal(signal.SIGCONT)
    t.check("etcdctl compact at the current revision", cr.returncode == 0, 0, cr.stderr)
    want = lambda x: (get(x, "/c0/") == (200, b"v2 during\n") and get(x, "/late/") == (200, b"v2 late\n")  # noqa: E731
                      and get(x, "/c1/")[0] == 404 and get(x, "/c399/")[0] == 200)
    ok = until(lambda: want(g), 8)
    st = g.status()["config_source"]
    t.info("the behind gateway: %d compaction cancel(s), %d full read(s)" % (st["compactions"], st["full_reads"]))
    t.check("the gateway that was behind missed nothing across the compaction", ok, True,
            [get(g, p_) for p_ in ("/c0/", "/late/", "/c1/", "/c399/")])
    t.check("the others too", all(until(lambda x=x: want(x), 5) for x in gws[1:]), True, None)

    # The same, certain to hit the compaction: a relay between a new gateway and etcd holds
    # the gateway's first watch request (sent from the revision of its first full read)
    # while the test writes and compacts, then lets it go. The gateway's etcd timeout is
    # longer than the hold: the held watch is not taken for a dead etcd.
    released, held = threading.Event(), []

    def hold(path):
        if path == "/v3/watch" and not held:
            held.append(path)
            released.wait(5)

    relay = h.HoldingRelay(etcd.port, hold)
    g = h.start_sluice(gw_conf(relay, snapshot=False, timeout="10s"), name="gw-compact", suite=t)
    until(lambda: get(g, "/a/")[0] == 200 and held, 5)
    for say in ("first", "k1"):  # two revisions: the compaction then removes the watch's start
        etcd.put(PREFIX + "/routes/k1",
                 "name: k1\nmatch: { paths: [/k1/] }\nplugins: [ { name: hello, config: { say: %s } } ]\n" % say)
    cr = etcd.ctl("compact", str(etcd.revision()))
    etcd.put(PREFIX + "/routes/k2", "name: k2\nmatch: { paths: [/k2/] }\nplugins: [ { name: hello, config: { say: k2 } } ]\n")
    t.check("the relay held the gateway's first watch request", held == ["/v3/watch"], ["/v3/watch"], held)
    released.set()
    ok = until(lambda: get(g, "/k1/") == (200, b"v2 k1\n") and get(g, "/k2/")[0] == 200, 6)
    st = g.status()["config_source"]
    t.check("a watch from before a compaction is cancelled for it and the prefix read again",
            cr.returncode == 0 and st["compactions"] >= 1 and st["full_reads"] >= 2, ">= 1 and >= 2",
            (cr.stderr, st["compactions"], st["full_reads"]))
    t.check("... and nothing written before or after the compaction is missed", ok, True,
            (get(g, "/k1/"), get(g, "/k2/")))
    g.stop()
    relay.stop()


def test_etcd_down(t):
    etcd, p, gws = S["etcd"], S["p"], S["gws"]
    etcd.stop()
    ok = until(lambda: all(source_up(g) == [0] for g in gws), 3)
    t.check("etcd stopped: sluice_config_source_up 0 on all three", ok, [0], [source_up(g) for g in gws])
    st = gws[0].status()["config_source"]
    t.check("/status says since when the source is down", st["up"] is False and st["since"], "up false, since",
            (st["up"], st["since"]))
    gen_down = [g.status()["generation"] for g in gws]
    t.check("etcd stopped: all three keep serving", all(get(g, "/a/") == (200, b"v2 a\n") for g in gws), True,
            [get(g, "/a/") for g in gws])
    # a gateway started now serves from a snapshot (a copy of gw0's); one with neither is not ready
    snap = os.path.join(gws[0].dir, "snap.json")
    d = h.new_tmpdir("gw-snap")
    with open(os.path.join(d, "sluice.yaml"), "w") as f:
        f.write(gw_conf(etcd))
    shutil.copy(snap, os.path.join(d, "snap.json"))
    g5 = start_in(d)
    t.check("a gateway started while etcd is down serves from its snapshot", get(g5, "/a/") == (200, b"v2 a\n"),
            (200, b"v2 a\n"), get(g5, "/a/"))
    t.check("... and is ready", g5.admin_get("/ready").status == 200, 200, g5.admin_get("/ready").status)
    g6 = gateway(etcd, "gw-none", snapshot=False)
    t.check("with neither etcd nor a snapshot: /ready 503", g6.admin_get("/ready").status == 503, 503,
            g6.admin_get("/ready").status)
    etcd.start()
    ok = until(lambda: all(source_up(g) == [1] for g in gws), 20)  # reconnect backoff reaches 5 s while down
    t.check("etcd back: sluice_config_source_up 1 on all three", ok, [1], [source_up(g) for g in gws])
    time.sleep(0.3)
    gen_back = [g.status()["generation"] for g in gws]
    t.check("the full read after reconnecting builds nothing when nothing changed", gen_back == gen_down, gen_down,
            gen_back)
    p.routes.append("after")
    r = p.push()
    t.check("a push after the restart", r.returncode == 0, 0, r.stderr)
    ok = until(lambda: all(get(g, "/after/")[0] == 200 for g in gws + [g5, g6]), 8)
    t.check("the change pushed after etcd restarts arrives (and the snapshot/none gateways catch up)", ok, True,
            [get(g, "/after/") for g in gws + [g5, g6]])
    t.check("the gateway without a snapshot is ready once etcd gave a config",
            g6.admin_get("/ready").status == 200, 200, g6.admin_get("/ready").status)
    S["extra"] = [g5, g6]


def start_in(d):
    """Runs sluice on the sluice.yaml already in d (to keep a snapshot written there)."""
    ready = os.path.join(d, "ready.json")
    logp = os.path.join(d, "stderr.log")
    log = open(logp, "wb")
    proc = subprocess.Popen([h.BIN, "run", "-c", os.path.join(d, "sluice.yaml"), "--ready-file", ready],
                            cwd=d, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL,
                            preexec_fn=h._die_with_parent)
    log.close()
    s = h.Sluice(proc, d, os.path.join(d, "sluice.yaml"), ready, logp, "gw-snapshot")
    h._register(s)
    t.sluices.append(s)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            import json
            with open(ready) as f:
                s.ready = json.load(f)
            return s
        except (OSError, ValueError):
            time.sleep(0.05)
    raise RuntimeError("no ready file: " + s.log()[-2000:])


def test_wipe(t):
    etcd, p, gws = S["etcd"], S["p"], S["gws"]
    etcd.stop()
    etcd.start(wipe=True)
    rev = etcd.revision()
    until(lambda: all(source_up(g) == [1] for g in gws), 8)
    time.sleep(0.3)
    t.check("an empty etcd is not applied: the fleet keeps its last generation until a push",
            all(get(g, "/a/")[0] == 200 for g in gws) and "holds no keys" in gws[0].log(), True,
            [get(g, "/a/") for g in gws])
    r = p.push(["a", "fresh"])
    t.check("a push into a wiped etcd", r.returncode == 0, 0, r.stderr)
    ok = until(lambda: all(get(g, "/fresh/")[0] == 200 and get(g, "/after/")[0] == 404 for g in gws), 8)
    t.check("etcd wiped (revision %d) and reloaded from a push: the gateways follow the new history" % rev, ok,
            True, [(get(g, "/fresh/")[0], get(g, "/after/")[0]) for g in gws])
    p.routes = ["a", "fresh", "next"]
    p.push()
    ok = until(lambda: all(get(g, "/next/")[0] == 200 for g in gws), 3)
    t.check("... and the watch follows the new revisions", ok, True, [get(g, "/next/") for g in gws])


def test_race(t):
    p = S["p"]
    # Each push reads the prefix (/v3/kv/range), then writes (/v3/kv/txn). The relay holds
    # each write until the other push's write arrives too, so both read the same revision
    # before either writes: a race that is certain, not likely.
    both = threading.Barrier(2, timeout=10)

    def hold(path):
        if path == "/v3/kv/txn":
            try:
                both.wait()
            except threading.BrokenBarrierError:
                pass  # one push never wrote: the checks below say so

    relay = h.HoldingRelay(p.etcd.port, hold)
    a = subprocess.Popen([h.BIN, "push", "-c", p.file(["a", "one"], "one.yaml"), "--etcd", relay.url, "--prefix",
                          PREFIX], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen([h.BIN, "push", "-c", p.file(["a", "two"], "two.yaml"), "--etcd", relay.url, "--prefix",
                          PREFIX], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ra, rb = a.communicate(timeout=20), b.communicate(timeout=20)
    relay.stop()
    t.check("the relay saw each push read, then write",
            sorted(relay.paths) == ["/v3/kv/range"] * 2 + ["/v3/kv/txn"] * 2, "2 range, 2 txn", relay.paths)
    codes = sorted([a.returncode, b.returncode])
    t.check("two racing pushes: exactly one wins", codes == [0, 1], [0, 1], codes)
    loser = ra if a.returncode else rb
    t.check("the loser says why and that nothing was written",
            "won the race" in loser[1] and "nothing was written" in loser[1], "...won the race...", loser[1])
    winner = "one" if a.returncode == 0 else "two"
    other = "two" if winner == "one" else "one"
    gws = S["gws"]
    ok = until(lambda: all(get(g, "/%s/" % winner)[0] == 200 and get(g, "/%s/" % other)[0] == 404 for g in gws), 3)
    t.check("the gateways serve the winner's config only", ok, True, None)


def test_pull(t):
    p = S["p"]
    d = h.new_tmpdir("pull")
    r = subprocess.run([h.BIN, "pull", "--etcd", p.etcd.url, "--prefix", PREFIX, "--plugins", os.path.join(d, "pl")],
                       capture_output=True, text=True, timeout=20)
    path = os.path.join(d, "pulled.yaml")
    with open(path, "w") as f:
        f.write(r.stdout)
    c = h.run_cli(["check", "-c", path])
    t.check("sluice pull prints a file sluice check accepts (plugins written to --plugins)",
            r.returncode == 0 and c.returncode == 0 and os.path.exists(os.path.join(d, "pl", "hello.lua")),
            0, (r.returncode, r.stderr, c.stderr, r.stdout[:400]))
    # a plugin key whose NAME is a path (gateways reject the key) is not written outside DIR
    outside = os.path.join(d, "outside")
    rel = os.path.relpath(outside, os.path.join(d, "pl2"))
    p.etcd.put("/evil/plugins/" + rel, "return {}")
    p.etcd.put("/evil/plugins/fine", "return {}")
    r = subprocess.run([h.BIN, "pull", "--etcd", p.etcd.url, "--prefix", "/evil", "--plugins", os.path.join(d, "pl2")],
                       capture_output=True, text=True, timeout=20)
    t.check("pull --plugins writes no file outside DIR for a key plugins/%s" % rel,
            not os.path.exists(outside + ".lua") and os.path.exists(os.path.join(d, "pl2", "fine.lua")),
            "only pl2/fine.lua", (os.listdir(d), r.stderr))
    t.check("... and says so, exit 1", r.returncode == 1 and "not a plugin name" in r.stderr, 1,
            (r.returncode, r.stderr))
    # non-ASCII text before an item (libyaml's marks count characters, not bytes): each
    # key still holds its item's exact text, and pull then push writes nothing
    utf8 = os.path.join(d, "utf8.yaml")
    with open(utf8, "w", encoding="utf-8") as f:
        f.write("# maintained by the café team ✓✓✓✓ 🚀\nlisteners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
                "routes:\n  - name: a\n    match: { paths: [/a/] }\n"
                "    plugins: [ { name: response, config: { body: \"déjà vu\" } } ]\n"
                "  - name: b\n    match: { paths: [/b/] }\n"
                "    plugins: [ { name: response, config: { body: \"b\" } } ]\n")
    r = h.run_cli(["push", "-c", utf8, "--etcd", p.etcd.url, "--prefix", "/utf8"])
    got = {k: p.etcd.ctl("get", "/utf8/routes/" + k, "--print-value-only").stdout for k in ("a", "b")}
    t.check("push after non-ASCII text: each key holds its item's exact text",
            r.returncode == 0 and got == {
                "a": "name: a\nmatch: { paths: [/a/] }\nplugins: [ { name: response, config: { body: \"déjà vu\" } } ]\n\n",
                "b": "name: b\nmatch: { paths: [/b/] }\nplugins: [ { name: response, config: { body: \"b\" } } ]\n\n"},
            "the items' text", (r.returncode, r.stderr, got))
    r = subprocess.run([h.BIN, "pull", "--etcd", p.etcd.url, "--prefix", "/utf8"], capture_output=True, text=True,
                       timeout=20)
    with open(path, "w", encoding="utf-8") as f:
        f.write(r.stdout)
    r = h.run_cli(["push", "-c", path, "--etcd", p.etcd.url, "--prefix", "/utf8"])
    t.check("... and pulling then pushing it back writes nothing", r.returncode == 0 and "nothing to write" in r.stdout,
            "nothing to write", (r.returncode, r.stdout, r.stderr))


def test_local_file_rules(t):
    d = h.new_tmpdir("local")
    path = os.path.join(d, "gw.yaml")
    with open(path, "w") as f:
        f.write("listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
                "routes:\n  - { name: a, match: { paths: [/] } }\n"
                "config_source:\n  etcd: { endpoints: [http://127.0.0.1:1], prefix: /x/ }\n")
    c = h.run_cli(["check", "-c", path])
    t.check("with config_source, routes in the local file are an error at the key",
            c.returncode == 1 and "gw.yaml:3:1: 'routes' lives in etcd with config_source" in c.stderr, 1, c.stderr)
    t.check("... and a prefix ending with '/' too", "must start with '/' and not end with one" in c.stderr, True,
            c.stderr)
    r = h.run_cli(["push", "-c", path, "--etcd", S["etcd"].url])
    t.check("push refuses a file with config_source (it pushes ordinary configs)", r.returncode == 1, 1, r.stderr)
    # --prefix follows config_source's rule: "" would be every key starting with '/' (the
    # push would delete another application's keys), "/x/" keys no gateway reads
    etcd = S["etcd"]
    etcd.put("/other-app/k", "v")
    ordinary = os.path.join(d, "ordinary.yaml")
    with open(ordinary, "w") as f:
        f.write("listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n")
    for bad in ("", "/x/", "x"):
        for cmd in (["push", "-c", ordinary], ["pull"]):
            r = h.run_cli(cmd + ["--etcd", etcd.url, "--prefix", bad])
            t.check("%s refuses --prefix '%s'" % (cmd[0], bad),
                    r.returncode == 2 and "must start with '/' and not end with one" in r.stderr, 2,
                    (r.returncode, r.stdout, r.stderr))
    t.check("... and wrote nothing: another application's key is still there",
            etcd.ctl("get", "/other-app/k", "--print-value-only").stdout.strip() == "v", "v",
            etcd.ctl("get", "--prefix", "/", "--keys-only").stdout[:300])
    os.makedirs(os.path.join(d, "plugins", "folded"))
    with open(os.path.join(d, "plugins", "folded", "init.lua"), "w") as f:
        f.write('return { name = "folded", version = "1", schema = {}, access = function() end }\n')
    with open(path, "w") as f:
        f.write("listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
                "routes:\n  - { name: a, match: { paths: [/] }, plugins: [ { name: folded } ] }\n")
    r = h.run_cli(["push", "-c", path, "--etcd", S["etcd"].url, "--prefix", "/other"])
    t.check("push refuses a folder plugin, saying why", r.returncode == 1 and "is a folder" in r.stderr, 1, r.stderr)
    # a Kong-shaped plugin (handler.lua + schema.lua) is a folder too
    os.makedirs(os.path.join(d, "plugins", "kongish"))
    with open(os.path.join(d, "plugins", "kongish", "handler.lua"), "w") as f:
        f.write('return { PRIORITY = 1, VERSION = "1", access = function(self, conf) end }\n')
    with open(os.path.join(d, "plugins", "kongish", "schema.lua"), "w") as f:
        f.write('return { name = "kongish", fields = { { config = { type = "record", fields = {} } } } }\n')
    with open(path, "w") as f:
        f.write("listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
                "routes:\n  - { name: a, match: { paths: [/] }, plugins: [ { name: kongish } ] }\n")
    r = h.run_cli(["push", "-c", path, "--etcd", S["etcd"].url, "--prefix", "/other"])
    t.check("push refuses a Kong plugin folder, saying why", r.returncode == 1 and "kongish/handler.lua" in r.stderr,
            1, r.stderr)


def test_auth(t):
    etcd, p = S["etcd"], S["p"]
    for args in (("user", "add", "root:rootpw", "--interactive=false"), ("auth", "enable")):
        r = etcd.ctl(*args)
        t.check("etcdctl " + " ".join(args[:2]), r.returncode == 0, 0, r.stderr)
    cfg = gw_conf(etcd).replace("timeout: 1s", "timeout: 1s, username_env: ETCD_U, password_env: ETCD_P")
    g = h.start_sluice(cfg, name="gw-auth", suite=t, env=dict(os.environ, ETCD_U="root", ETCD_P="rootpw"))
    ok = until(lambda: get(g, "/a/")[0] == 200, 5)
    t.check("a gateway with username_env/password_env reads an etcd with auth on", ok, 200, get(g, "/a/"))
    r = p.push(["a", "authed"])
    t.check("push without credentials is refused by etcd", r.returncode == 1, 1, r.stdout + r.stderr)
    r = p.push(["a", "authed"], env=dict(os.environ, ETCDCTL_USER="root:rootpw"))
    t.check("push with ETCDCTL_USER", r.returncode == 0, 0, r.stdout + r.stderr)
    ok = until(lambda: get(g, "/authed/")[0] == 200, 3)
    t.check("... and the authenticated watch delivers it", ok, 200, get(g, "/authed/"))


t.run(test_fleet, test_endpoint_names, test_plugin_code, test_invalid_key, test_compaction_behind, test_etcd_down, test_wipe, test_race, test_pull,
      test_local_file_rules, test_auth)
