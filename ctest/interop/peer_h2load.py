"""h2load (nghttp2's load generator) as the client: many multiplexed HTTP/2 streams through
sluice to an nginx origin, over h2c (prior knowledge) and over TLS (ALPN h2), and HTTP/1.1
requests pipelined on keep-alive connections (--h1). What is
asserted is correctness under load (every request succeeded, all 2xx, the gateway
counted each once); the rate is only recorded."""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

N, C, M = 20000, 20, 10


def load(t, label, url, tls=False, h1=False):
    io.need(t, "h2load")
    root = io.h.new_tmpdir("www")
    sha = io.random_file(os.path.join(root, "f"), 1024)
    _, (p,) = io.nginx(t, root, [""])
    c = io.certs(t) if tls else None
    s = io.l7(t, io.upstream("127.0.0.1:%d" % p), tls=c["localhost"] if c else None)
    # the body itself, once, through the same route: what every load request fetches
    r = io.curl("--http2-prior-knowledge", "http://127.0.0.1:%d/f" % s.port())
    t.check("%s: the 1 KiB file arrives sha256-exact (what the load fetches)" % label,
            io.sha256(r.stdout) == sha, sha[:16], io.sha256(r.stdout)[:16])
    port = s.port("tls" if tls else "web")
    r = io.run(["h2load", "-n", str(N), "-c", str(C), "-m", str(M), "-T", "200", "-N", "60"]
               + (["--h1"] if h1 else []) + [url % port], timeout=240)
    out = r.stdout.decode(errors="replace")
    req = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                    r"(\d+) errored, (\d+) timeout", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    proto = re.search(r"Application protocol: (\S+)", out)
    got = [int(x) for x in req.groups()] if req else None
    t.check("%s: h2load -n %d -c %d -m %d%s: %d done, %d succeeded, 0 failed, 0 errored, 0 timeout"
            % (label, N, C, M, " --h1" if h1 else "", N, N), r.returncode == 0 and got == [N, N, N, N, 0, 0, 0],
            [N, N, N, N, 0, 0, 0], "exit %d, %s\n%s" % (r.returncode, got, out[-1500:]))
    t.check("%s: status codes: %d 2xx, nothing else" % (label, N),
            codes is not None and [int(x) for x in codes.groups()] == [N, 0, 0, 0],
            [N, 0, 0, 0], codes.groups() if codes else out[-800:])
    want = "http/1.1" if h1 else "h2" if tls else "h2c"
    t.check("%s: h2load's application protocol was %s" % (label, want),
            proto is not None and proto.group(1) == want, want, proto.group(1) if proto else None)
    rate = re.search(r"finished in ([\d.]+\w+), ([\d.]+) req/s", out)
    if rate:
        t.info("%s: %s req/s (finished in %s; %d workers, ASan=%s)"
               % (label, rate.group(2), rate.group(1), 2, os.environ.get("SLUICE_SANITIZE", "")))
    _, samples = s.metrics()
    n200 = sum(io.h.metric_values(samples, "sluice_requests_total", route="all", code="200"))
    nall = sum(io.h.metric_values(samples, "sluice_requests_total"))
    t.check("%s: the gateway answered %d + 1 requests, every one 200 (none lost or doubled)"
            % (label, N), n200 == N + 1 and nall == N + 1, N + 1, "200: %s, all: %s" % (n200, nall))


def uploads(t, label, h1):
    """2,000 POSTs of the same 64 KiB file (h2load -d) to the hashing origin: every body
    arrives there sha256-exact."""
    io.need(t, "h2load")
    n = 2000
    src = os.path.join(io.h.new_tmpdir("up"), "b")
    sha = io.random_file(src, 64 << 10)
    up = io.hashing_origin()
    s = io.l7(t, io.upstream(up.address))
    r = io.run(["h2load", "-n", str(n), "-c", "10", "-m", "10", "-d", src, "-T", "200", "-N", "60"]
               + (["--h1"] if h1 else []) + ["http://127.0.0.1:%d/up" % s.port()], timeout=240)
    out = r.stdout.decode(errors="replace")
    req = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                    r"(\d+) errored, (\d+) timeout", out)
    codes = re.search(r"status codes: (\d+) 2xx", out)
    got = [int(x) for x in req.groups()] + [int(codes.group(1))] if req and codes else None
    t.check("%s: %d uploads of 64 KiB, 10 connections x 10 in flight: %d done, succeeded, 2xx; "
            "0 failed, errored, timeout" % (label, n, n), r.returncode == 0 and got == [n, n, 0, 0, 0, n],
            [n, n, 0, 0, 0, n], "exit %d %s %s" % (r.returncode, got, out[-600:]))
    bodies = {}
    for q in up.requests:
        bodies[(q.method, q.body_len, q.body_sha256)] = bodies.get((q.method, q.body_len, q.body_sha256), 0) + 1
    t.check("%s: the origin got %d POST bodies, every one 64 KiB and sha256-exact" % (label, n),
            bodies == {("POST", 64 << 10, sha): n}, {("POST", 64 << 10, sha[:16]): n},
            {(m, ln, x[:16]): c for (m, ln, x), c in bodies.items()})


@io.case("h2c.load_20k", "h2load's 20,000 requests on 20 h2c connections, 10 streams each, all succeed "
         "with 2xx through sluice to nginx, and the gateway counts each once", budget=150)
def h2c_load_20k(t):
    load(t, label="h2c", url="http://127.0.0.1:%d/f")


@io.case("h2.tls_load_20k", "h2load's 20,000 requests on 20 TLS connections (ALPN h2), 10 streams each, "
         "all succeed with 2xx through sluice to nginx, and the gateway counts each once", budget=150)
def h2_tls_load_20k(t):
    load(t, label="h2 (TLS)", url="https://127.0.0.1:%d/f", tls=True)


@io.case("h1.pipelined_20k", "h2load --h1's 20,000 requests on 20 HTTP/1.1 keep-alive connections, "
         "pipelined 10 deep, all succeed with 2xx through sluice to nginx, and the gateway counts each once",
         budget=150)
def h1_pipelined_20k(t):
    load(t, label="http/1.1 pipelined", url="http://127.0.0.1:%d/f", h1=True)


@io.case("h2c.uploads_2k", "h2load's 2,000 POSTs of a 64 KiB body multiplexed on 10 h2c connections "
         "(10 streams each) all succeed, and every body reaches the origin sha256-exact", budget=150)
def h2c_uploads_2k(t):
    uploads(t, label="h2c", h1=False)


@io.case("h1.pipelined_uploads_2k", "h2load --h1's 2,000 POSTs of a 64 KiB body pipelined 10 deep on 10 "
         "keep-alive connections all succeed, and every body reaches the origin sha256-exact", budget=150)
def h1_pipelined_uploads_2k(t):
    uploads(t, label="http/1.1 pipelined", h1=True)


if __name__ == "__main__":
    io.main()
