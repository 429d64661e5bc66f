"""Targets named by DNS (`address: NAME:PORT`), resolved by c-ares against a real dnsmasq.

dnsmasq serves a hosts file on a high loopback port; the test rewrites the file and
sends SIGHUP (dnsmasq rereads it) to change records. Backends are HTTP servers on
127.0.0.2-5 (all loopback on Linux), each answering with its own address.

- a name resolves, and its upstream serves; with `resolver.ipv6` an AAAA record too;
  /etc/hosts is read first;
- a name with three addresses spreads load over three targets;
- a changed record moves traffic within the TTL with no failed request (requests run
  all along);
- NXDOMAIN at start: that upstream answers 503 (the gateway starts), then serves once
  the name resolves; `sluice check` warns and exits 0;
- a resolver that stops answering (SIGSTOP): the last addresses keep serving, the
  failure is counted;
- /status shows each name's addresses and when it was resolved;
- TLS to a named target sends the name as SNI and verifies the certificate against it;
- a tcp listener reaches a named upstream; `upstream.set("NAME:PORT")` from Lua goes to
  the upstream that lists the name;
- `timeout` is per try and `attempts` counts rounds (a silent nameserver is asked
  `attempts` times, `timeout` apart).
"""

import http.server
import os
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("dns_targets", budget=120)


class Backend:
    """An HTTP/1.1 keep-alive server on ip:port answering its own ip."""

    def __init__(self, ip, port, tls=None):
        self.sni = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                body = ip.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            address_family = socket.AF_INET6 if ":" in ip else socket.AF_INET

        self.srv = Server((ip, port), Handler)
        if tls:  # (cert, key): TLS, recording the SNI each client sent
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            ctx.sni_callback = lambda sock, name, c: self.sni.append(name)
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        self.th = threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.th.start()
        h._register(self)

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()
        h._unregister(self)


class Dnsmasq:
    def __init__(self, d):
        self.hosts = os.path.join(d, "hosts")
        self.port = h.free_port()
        self.write({})
        self.proc = subprocess.Popen(
            ["dnsmasq", "--keep-in-foreground", "--port=%d" % self.port, "--listen-address=127.0.0.1",
             "--bind-interfaces", "--no-resolv", "--no-hosts", "--addn-hosts=" + self.hosts,
             "--local=/sluice.test/", "--local-ttl=1", "--user=root", "--pid-file=",
             "--conf-file=/dev/null", "--log-facility=" + os.path.join(d, "dnsmasq.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=h.lifecycle._die_with_parent)
        self.pid = self.proc.pid
        h._register(self)
        time.sleep(0.3)

    def write(self, records):
        lines = ["%s %s\n" % (ip, name) for name, ips in records.items() for ip in ips]
        tmp = self.hosts + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join(lines))
        os.replace(tmp, self.hosts)

    def update(self, records):
        self.write(records)
        os.kill(self.pid, signal.SIGHUP)

    def stop(self):
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        h.stop_process(self, 5)


def get(s, path):
    try:
        r = h.request(s.port(), "GET", path, timeout=5)
        return r.status, r.body.decode()
    except Exception as e:  # noqa: BLE001
        return 0, repr(e)


SETTER = """local sluice = require("sluice")
return { name = "set-target", version = "1", schema = { target = { type = "string" } },
  access = function(conf) assert(sluice.upstream.set(conf.target)) end }
"""
# the balancer phase sees only the targets holding an address: the last one is a real one
LAST = """local sluice = require("sluice")
return { name = "last-target", version = "1",
  balancer = function(conf) local t = sluice.balancer.targets(); sluice.balancer.set_target(t[#t].address) end }
"""


def hosts_name():
    """A name /etc/hosts maps to 127.0.0.1 (other than localhost, which the config parser
    itself knows), or None."""
    try:
        for line in open("/etc/hosts"):
            f = line.split("#")[0].split()
            if len(f) >= 2 and f[0] == "127.0.0.1":
                for n in f[1:]:
                    if n != "localhost" and any(c.isalpha() for c in n):
                        return n
    except OSError:
        pass
    return None


def config(d, dns, port, tls_port, ca, hosts_port):
    ups = [("api", "api.sluice.test"), ("three", "three.sluice.test"), ("late", "late.sluice.test"),
           ("six", "six.sluice.test")]
    os.makedirs(os.path.join(d, "plugins"), exist_ok=True)
    with open(os.path.join(d, "plugins", "set-target.lua"), "w") as f:
        f.write(SETTER)
    with open(os.path.join(d, "plugins", "last-target.lua"), "w") as f:
        f.write(LAST)
    text = ("admin: { listen: 127.0.0.1:0 }\nplugin_paths: [%s]\n"
            "resolver: { nameservers: [\"127.0.0.1:%d\"], timeout: 200ms, attempts: 1, min_ttl: 1s, max_ttl: 2s, "
            "ipv6: true }\n"
            "listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
            "  - { name: tcp, listen: 127.0.0.1:0, protocol: tcp, upstream: api }\n"
            "upstreams:\n" % (os.path.join(d, "plugins"), dns.port))
    for name, host in ups:
        text += "  - { name: %s, targets: [ { address: \"%s:%d\" } ] }\n" % (name, host, port)
    text += ("  - { name: secure, targets: [ { address: \"secure.sluice.test:%d\", tls: { ca: %s } } ] }\n"
             % (tls_port, ca))
    hn = hosts_name()
    if hn:
        text += "  - { name: etchosts, targets: [ { address: \"%s:%d\" } ] }\n" % (hn, hosts_port)
    text += "routes:\n"
    for name, _ in ups + [("secure", "")] + ([("etchosts", "")] if hn else []):
        text += "  - { name: %s, match: { paths: [/%s] }, upstream: %s }\n" % (name, name, name)
    text += ("  - { name: viaset, match: { paths: [/viaset] }, plugins: [ { name: set-target, config: "
             "{ target: \"three.sluice.test:%d\" } } ] }\n" % port)
    text += "  - { name: last, match: { paths: [/last] }, upstream: three, plugins: [ { name: last-target } ] }\n"
    return text


def test_dns_targets(t):
    d = h.new_tmpdir("dns")
    port = h.free_port()
    backends = [Backend("127.0.0.%d" % i, port) for i in (2, 3, 4, 5)]
    h.make_ca(d)
    leaf = h.make_leaf(d, "secure", "secure.sluice.test", "DNS:secure.sluice.test")
    tls_port = h.free_port()
    secure = Backend("127.0.0.2", tls_port, tls=leaf)
    six = Backend("::1", port)
    dns = Dnsmasq(d)
    dns.update({"api.sluice.test": ["127.0.0.2"], "secure.sluice.test": ["127.0.0.2"], "six.sluice.test": ["::1"],
                "three.sluice.test": ["127.0.0.3", "127.0.0.4", "127.0.0.5"]})
    time.sleep(0.2)
    local = h.MockUpstream(name="etchosts", handler=lambda req: h.Response(200, b"from /etc/hosts"))
    cfg = config(d, dns, port, tls_port, os.path.join(d, "ca.crt"), local.port)

    # `sluice check`: the unresolvable name is a warning, not an error
    cpath = os.path.join(d, "check.yaml")
    with open(cpath, "w") as f:
        f.write(cfg)
    cli = h.run_cli(["check", "-c", cpath])
    t.check("sluice check: exit 0 with an unresolvable name", cli.returncode == 0, 0, cli)
    t.check("sluice check: warns about late.sluice.test",
            "warning" in cli.stderr and "late.sluice.test" in cli.stderr and "api.sluice" not in cli.stderr,
            "one warning", cli.stderr)

    s = h.start_sluice(cfg, workers=2, suite=t)
    t.check("a name resolves: /api is served by 127.0.0.2", get(s, "/api") == (200, "127.0.0.2"),
            (200, "127.0.0.2"), get(s, "/api"))

    seen = {}
    for _ in range(60):
        st, b = get(s, "/three")
        seen[b] = seen.get(b, 0) + 1
    t.check("a name with three addresses spreads load over three targets",
            sorted(seen) == ["127.0.0.3", "127.0.0.4", "127.0.0.5"] and min(seen.values()) >= 10,
            "3 targets, >= 10 each", seen)

    st, body = get(s, "/secure")
    t.check("TLS to a named target: verified against the name", (st, body) == (200, "127.0.0.2"),
            (200, "127.0.0.2"), (st, body))
    t.check("TLS to a named target: the name is sent as SNI", secure.sni[-1:] == ["secure.sluice.test"],
            ["secure.sluice.test"], secure.sni)
    r = h.request(s.port("tcp"), "GET", "/", timeout=5)
    t.check("a tcp listener reaches a named upstream", (r.status, r.body) == (200, b"127.0.0.2"),
            (200, b"127.0.0.2"), (r.status, r.body))
    seen = set(get(s, "/viaset")[1] for _ in range(12))
    t.check("upstream.set(\"NAME:PORT\") goes to the upstream listing the name",
            seen == {"127.0.0.3", "127.0.0.4", "127.0.0.5"}, "the three addresses", seen)

    t.check("resolver.ipv6: an AAAA record becomes a target", get(s, "/six") == (200, "::1"), (200, "::1"),
            get(s, "/six"))
    hn = hosts_name()
    if hn:  # dnsmasq knows only *.sluice.test: the answer can only come from /etc/hosts
        t.check("/etc/hosts is honoured (%s)" % hn, get(s, "/etchosts") == (200, "from /etc/hosts"),
                (200, "from /etc/hosts"), get(s, "/etchosts"))
    else:
        t.info("/etc/hosts maps no name but localhost to 127.0.0.1: its check is skipped")

    seen = [get(s, "/last") for _ in range(6)]
    t.check("sluice.balancer.targets() lists only the addresses a name holds",
            len(set(seen)) == 1 and seen[0][0] == 200 and seen[0][1] in ("127.0.0.3", "127.0.0.4", "127.0.0.5"),
            "one of the three, always", seen)

    st, _ = get(s, "/late")
    t.check("NXDOMAIN at start: the gateway starts and that upstream answers 503", st == 503, 503, st)

    status = s.status()
    api = [u for u in status["upstreams"] if u["name"] == "api"][0]
    t.check("/status: the name's addresses and when it was resolved",
            api["names"][0]["addresses"] == ["127.0.0.2:%d" % port] and api["names"][0]["resolved_at_ms"] > 0
            and api["names"][0]["last_result"] == "ok", "addresses + resolved_at_ms", api)

    # a changed record moves traffic within the TTL (max_ttl 2s), with no failed request
    results, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            results.append(get(s, "/api"))

    th = threading.Thread(target=load)
    th.start()
    time.sleep(0.5)
    dns.update({"api.sluice.test": ["127.0.0.3"], "three.sluice.test": ["127.0.0.3", "127.0.0.4", "127.0.0.5"],
                "late.sluice.test": ["127.0.0.4"], "secure.sluice.test": ["127.0.0.2"], "six.sluice.test": ["::1"]})
    changed_at = time.monotonic()
    moved = None
    while time.monotonic() - changed_at < 5:
        if results and results[-1] == (200, "127.0.0.3"):
            moved = time.monotonic() - changed_at
            break
        time.sleep(0.05)
    time.sleep(0.5)
    stop.set()
    th.join()
    bad = [r for r in results if r[0] != 200]
    t.check("a changed record moves traffic within the TTL (3 s)", moved is not None and moved < 3.0, "< 3 s", moved)
    t.check("no failed request while the record changed", not bad and len(results) > 20, "0 failed",
            (len(bad), len(results), bad[:3]))
    t.check("after the change every request goes to the new address", results[-1] == (200, "127.0.0.3"),
            (200, "127.0.0.3"), results[-1])

    deadline = time.monotonic() + 4
    st = 0
    while time.monotonic() < deadline:
        st, body = get(s, "/late")
        if st == 200:
            break
        time.sleep(0.1)
    t.check("NXDOMAIN then recovery: /late serves once its name resolves", st == 200, 200, st)

    # the resolver stops answering: the last addresses keep serving
    os.kill(dns.pid, signal.SIGSTOP)
    time.sleep(3.5)  # past max_ttl (2 s) + one timeout
    rs = [get(s, "/api") for _ in range(20)]
    t.check("a resolver that stops answering: the last addresses keep serving",
            all(r == (200, "127.0.0.3") for r in rs), "20 x 200", rs[:3])
    _, m = s.metrics()
    timeouts = h.metric_values(m, "sluice_dns_resolutions_total", result="timeout")
    stale = h.metric_values(m, "sluice_dns_stale_total")
    oks = h.metric_values(m, "sluice_dns_resolutions_total", result="ok")
    nx = h.metric_values(m, "sluice_dns_resolutions_total", result="nxdomain")
    t.check("the failed re-resolutions are counted", timeouts and timeouts[0] > 0 and stale and stale[0] > 0,
            "timeout > 0, stale > 0", (timeouts, stale))
    t.check("sluice_dns_resolutions_total counts ok and nxdomain", oks and oks[0] > 0 and nx and nx[0] > 0,
            "> 0", (oks, nx))
    t.check("the keeping is logged", "keeping the last 1 address" in s.log(), "log line", s.log()[-600:])
    os.kill(dns.pid, signal.SIGCONT)

    t.check("exit 0 on SIGTERM", s.stop() == 0, 0, None)

    # a failed lookup is retried every min_ttl but at least 1 s apart, even with a max_ttl
    # below 1 s (which bounds only how long a good answer is kept)
    s2 = h.start_sluice("admin: { listen: 127.0.0.1:0 }\nresolver: { nameservers: [\"127.0.0.1:%d\"], "
                        "timeout: 200ms, attempts: 1, min_ttl: 100ms, max_ttl: 200ms }\n"
                        "listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
                        "upstreams:\n  - { name: nx, targets: [ { address: \"nx.sluice.test:%d\" } ] }\n"
                        "routes:\n  - { name: nx, match: { paths: [/nx] }, upstream: nx }\n" % (dns.port, port),
                        name="fastttl", suite=t)
    names = [None]

    def failed_once():
        names[0] = [u for u in s2.status()["upstreams"] if u["name"] == "nx"][0]["names"][0]
        return names[0]["last_result"] == "nxdomain"

    h.wait_until(failed_once, 5)
    n = names[0]
    # the next lookup is due next_in_ms from now; the last one answered at tried_at_ms
    interval = time.time() * 1000 + n["next_in_ms"] - n["tried_at_ms"]
    t.check("a failed lookup is retried no sooner than 1 s (min_ttl 100ms, max_ttl 200ms)",
            n["last_result"] == "nxdomain" and interval >= 900, ">= 900 ms", (interval, n))
    t.check("exit 0 on SIGTERM (fastttl)", s2.stop() == 0, 0, None)

    # a reload that changes the resolver asks every known name again through it (the last
    # answer serves meanwhile), instead of keeping the old answer for its whole TTL
    conf3 = ("admin: { listen: 127.0.0.1:0 }\nresolver: { nameservers: [\"127.0.0.1:%d\"], timeout: %s, "
             "attempts: 1, min_ttl: 30s, max_ttl: 60s }\nlisteners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
             "upstreams:\n  - { name: api, targets: [ { address: \"api.sluice.test:%d\" } ] }\n"
             "routes:\n  - { name: api, match: { paths: [/api] }, upstream: api }\n")
    s3 = h.start_sluice(conf3 % (dns.port, "200ms", port), name="resolver-reload", suite=t)
    before = get(s3, "/api")
    dns.update({"api.sluice.test": ["127.0.0.4"]})
    with open(s3.config_path, "w") as f:
        f.write(conf3 % (dns.port, "300ms", port))
    code, ans = s3.reload()
    moved = h.wait_until(lambda: get(s3, "/api") == (200, "127.0.0.4"), 3)
    t.check("a reload that changes the resolver looks known names up again (min_ttl 30s)",
            before == (200, "127.0.0.3") and code == 200 and moved, ((200, "127.0.0.3"), 200, True),
            (before, code, ans, get(s3, "/api")))
    t.check("exit 0 on SIGTERM (resolver-reload)", s3.stop() == 0, 0, None)
    dns.stop()
    for b in backends + [secure, local, six]:
        b.stop()


def test_timeout_per_try(t):
    """`timeout` is per try and `attempts` counts rounds: a nameserver that never answers
    is asked `attempts` times, `timeout` apart (c-ares's own rounds double the timeout)."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    silent.settimeout(0.2)
    arrivals, done = [], threading.Event()

    def listen():
        while not done.is_set():
            try:
                silent.recvfrom(512)
                arrivals.append(time.monotonic())
            except socket.timeout:
                pass
    th = threading.Thread(target=listen, daemon=True)
    th.start()
    d = h.new_tmpdir("dns-silent")
    cfg = os.path.join(d, "c.yaml")
    with open(cfg, "w") as f:
        f.write("resolver: { nameservers: [\"127.0.0.1:%d\"], timeout: 300ms, attempts: 3 }\n"
                "listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
                "upstreams:\n  - { name: api, targets: [ { address: \"silent.sluice.test:80\" } ] }\n"
                "routes:\n  - { name: api, match: { paths: [/] }, upstream: api }\n" % silent.getsockname()[1])
    try:
        t0 = time.monotonic()
        r = h.run_cli(["check", "-c", cfg])
        took = time.monotonic() - t0
        gaps = [round(b - a, 2) for a, b in zip(arrivals, arrivals[1:])]
        t.check("check warns that the name does not resolve, exit 0",
                r.returncode == 0 and "warning" in r.stderr and "silent.sluice.test" in r.stderr, "warning, 0",
                (r.returncode, r.stderr[-300:]))
        t.check("3 attempts: 3 queries, 300 ms apart each (not 300 then 600 ms)",
                len(arrivals) == 3 and all(0.2 < g < 0.5 for g in gaps), "3 queries, gaps ~0.3 s",
                (len(arrivals), gaps, round(took, 2)))
    finally:
        done.set()
        th.join()
        silent.close()


t.run(test_dns_targets, test_timeout_per_try)
