"""curl as the client: 20 MiB downloads (nginx static files) and 20 MiB uploads (a hashing
origin: the harness MockUpstream answering each body's length and sha256) through sluice's
L7 paths: HTTP/1.1, HTTP/2 over TLS (ALPN h2) and h2c with prior knowledge."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

SIZE = 20 << 20
W = "%{http_code} %{http_version} %{size_download} %{size_upload}"


def setup(t, tls=False):
    """nginx serving a 20 MiB random file at /dl/f, the hashing origin at /up/, sluice in
    front of both; returns (sluice, file path, its sha256, certs or None, the origin)."""
    io.need(t, "curl")
    root = io.h.new_tmpdir("www")
    os.mkdir(os.path.join(root, "dl"))
    path = os.path.join(root, "dl", "f")
    sha = io.random_file(path, SIZE)
    _, (p,) = io.nginx(t, root, ["sendfile on;"])
    up = io.hashing_origin()
    c = io.certs(t) if tls else None
    s = io.l7(t, io.upstream("127.0.0.1:%d" % p, "files") + io.upstream(up.address, "sink"),
              routes="  - { name: dl, match: { paths: [/dl/] }, upstream: files }\n"
                     "  - { name: up, match: { paths: [/up/] }, upstream: sink }\n",
              tls=c["localhost"] if c else None)
    return s, path, sha, c, up


def download(t, label, url, sha, args=(), version="1.1"):
    out = os.path.join(io.h.new_tmpdir("dl"), "got")
    r = io.curl("--max-time", 60, "-o", out, "-w", W, *args, url, timeout=60)
    code, ver, size = (r.stdout.decode().split() + ["", "", ""])[:3]
    got = io.file_sha256(out) if os.path.exists(out) else None
    t.check("%s: 20 MiB download: 200 over HTTP/%s, %d bytes, sha256-exact" % (label, version, SIZE),
            r.returncode == 0 and code == "200" and ver == version and size == str(SIZE) and got == sha,
            "curl 0, 200 %s %d %s" % (version, SIZE, sha[:16]),
            "curl %d, %s %s %s %s %s" % (r.returncode, code, ver, size, (got or "")[:16], r.stderr[-300:]))


def upload(t, label, url, path, sha, how, args=(), version="1.1", framing=None):
    """POSTs the file (how: "cl" = --data-binary with Content-Length, "chunked" = HTTP/1.1
    chunked, "stream" = from stdin, no length known); the origin's answer tells what it got."""
    argv = ["--max-time", 60, "-w", "\n" + W] + list(args)
    if how == "cl":
        argv += ["--data-binary", "@" + path]
    elif how == "chunked":
        argv += ["-H", "Transfer-Encoding: chunked", "--data-binary", "@" + path]
    else:
        argv += ["-X", "POST", "-T", "-"]
    argv.append(url)
    if how == "stream":
        with open(path, "rb") as f:
            r = io.subprocess.run(["curl", "-sS"] + [str(a) for a in argv], stdin=f, capture_output=True,
                                  timeout=70)
    else:
        r = io.curl(*argv, timeout=60)
    body, _, w = r.stdout.decode(errors="replace").rpartition("\n")
    try:
        seen = json.loads(body)
    except ValueError:
        seen = {"unparsed": body[:300]}
    code, ver = (w.split() + ["", ""])[:2]
    want = {"method": "POST", "len": SIZE, "sha256": sha}
    t.check("%s: 20 MiB upload (%s): 200 over HTTP/%s, the origin got %d bytes, sha256-exact"
            % (label, how, version, SIZE),
            r.returncode == 0 and code == "200" and ver == version
            and {k: seen.get(k) for k in want} == want,
            want, "curl %d, %s %s, origin saw %s %s" % (r.returncode, code, ver, seen, r.stderr[-300:]))
    if framing is not None:
        got = "chunked" if seen.get("chunked") else "content-length %s" % seen.get("content_length")
        t.check("%s: the origin's framing of the upload is %s" % (label, framing), got == framing, framing, got)


@io.case("h1.download_20m", "a 20 MiB nginx file through an HTTP/1.1 route arrives at curl "
         "sha256-exact with its exact length", budget=90)
def h1_download(t):
    s, path, sha, _, _ = setup(t)
    download(t, "http/1.1", "http://127.0.0.1:%d/dl/f" % s.port(), sha, ["--http1.1"])


@io.case("h1.upload_cl_20m", "a 20 MiB POST with Content-Length from curl reaches the origin "
         "sha256-exact, still framed by Content-Length", budget=90)
def h1_upload_cl(t):
    s, path, sha, _, _ = setup(t)
    upload(t, "http/1.1", "http://127.0.0.1:%d/up/x" % s.port(), path, sha, "cl", ["--http1.1"],
           framing="content-length %d" % SIZE)


@io.case("h1.upload_chunked_20m", "a 20 MiB chunked POST from curl (Transfer-Encoding: chunked) "
         "reaches the origin sha256-exact, still chunked", budget=90)
def h1_upload_chunked(t):
    s, path, sha, _, _ = setup(t)
    upload(t, "http/1.1", "http://127.0.0.1:%d/up/x" % s.port(), path, sha, "chunked", ["--http1.1"],
           framing="chunked")


@io.case("h1.h2c_upgrade_ignored", "curl --http2 on an http:// URL asks to upgrade to h2c; sluice "
         "never switches: the 20 MiB download comes over HTTP/1.1 sha256-exact, and an upload "
         "reaches the origin sha256-exact without Upgrade or HTTP2-Settings", budget=90)
def h1_h2c_upgrade(t):
    s, path, sha, _, up = setup(t)
    download(t, "Upgrade: h2c", "http://127.0.0.1:%d/dl/f" % s.port(), sha, ["--http2"])
    r = io.curl("-v", "--http2", "--data-binary", "@" + path, "http://127.0.0.1:%d/up/x" % s.port())
    sent = [ln for ln in r.stderr.decode(errors="replace").splitlines() if ln.lower().startswith("> upgrade")]
    seen = up.requests[-1].headers if up.requests else []
    hop = [n for n, _ in seen if n.lower() in ("upgrade", "http2-settings")]
    t.check("an upload asking for h2c: curl sent Upgrade: h2c, the origin got the body without "
            "Upgrade or HTTP2-Settings", sent and up.requests and up.requests[-1].body_sha256 == sha and not hop,
            "no Upgrade upstream", (sent, hop))


@io.case("h2.tls_20m", "curl over TLS negotiates h2 by ALPN with sluice (test CA trusted) and "
         "moves 20 MiB down and 20 MiB up twice (with content-length, and of unknown length) "
         "sha256-exact", budget=120)
def h2_tls(t):
    s, path, sha, c, _ = setup(t, tls=True)
    base = "https://localhost:%d" % s.port("tls")
    tls = ["--http2", "--cacert", c["ca"], "--resolve", "localhost:%d:127.0.0.1" % s.port("tls")]
    r = io.curl("-v", "-o", "/dev/null", "-w", "%{http_version}", *tls, base + "/dl/f")
    err = r.stderr.decode(errors="replace")
    t.check("ALPN: curl offered h2 and sluice chose it; the certificate verified against the test CA",
            r.returncode == 0 and "ALPN: server accepted h2" in err and "SSL certificate verify ok" in err
            and r.stdout == b"2", "accepted h2, verify ok, http_version 2",
            "curl %d, %s, %s" % (r.returncode, r.stdout, [ln for ln in err.splitlines() if "ALPN" in ln
                                                           or "verify" in ln]))
    download(t, "h2 (TLS)", base + "/dl/f", sha, tls, version="2")
    upload(t, "h2 (TLS)", base + "/up/x", path, sha, "cl", tls, version="2",
           framing="content-length %d" % SIZE)
    upload(t, "h2 (TLS)", base + "/up/x", path, sha, "stream", tls, version="2", framing="chunked")


@io.case("h2c.prior_knowledge_20m", "curl --http2-prior-knowledge on the plaintext listener "
         "speaks h2c and moves 20 MiB down and 20 MiB up twice (with content-length, and of "
         "unknown length) sha256-exact", budget=120)
def h2c_prior(t):
    s, path, sha, _, _ = setup(t)
    base = "http://127.0.0.1:%d" % s.port()
    pk = ["--http2-prior-knowledge"]
    download(t, "h2c", base + "/dl/f", sha, pk, version="2")
    upload(t, "h2c", base + "/up/x", path, sha, "cl", pk, version="2", framing="content-length %d" % SIZE)
    upload(t, "h2c", base + "/up/x", path, sha, "stream", pk, version="2", framing="chunked")


if __name__ == "__main__":
    io.main()
