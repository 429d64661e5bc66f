"""nghttp (nghttp2's client) through sluice: a page and the assets it links (-a) over TLS
with ALPN h2, the SETTINGS exchange both ways, and over h2c a download with a small stream
window (flow control paced by nghttp's WINDOW_UPDATEs) and an upload, sha256-exact."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

ASSETS = 30


def streams(out):
    """{path: (status, DATA bytes)} from nghttp -v's frame log: the :path each stream was
    opened with, its :status and the lengths of its DATA frames."""
    paths = dict(re.findall(r"send HEADERS frame <[^>]*stream_id=(\d+)>\n(?:\s+[;(].*\n)*\s+:method: \w+\n"
                            r"\s+:path: (\S+)", out))
    status = dict(re.findall(r"recv \(stream_id=(\d+)\) :status: (\d+)", out))
    size = {}
    for sid, n in re.findall(r"recv DATA frame <length=(\d+), flags=0x\w+, stream_id=(\d+)>", out):
        size[n] = size.get(n, 0) + int(sid)
    return {p: (int(status.get(sid, 0)), size.get(sid, 0)) for sid, p in paths.items()}


def nginx_file(t, size, conf):
    """nginx (server block body `conf`) serving a random file /f of `size` bytes: (its path,
    its sha256, nginx's port)."""
    io.need(t, "nghttp")
    root = io.h.new_tmpdir("www")
    src = os.path.join(root, "f")
    sha = io.random_file(src, size)
    _, (p,) = io.nginx(t, root, [conf])
    return src, sha, p


@io.case("h2.page_assets", "nghttp negotiates h2 by ALPN with sluice (certificate verified against "
         "the test CA), both sides' SETTINGS are acknowledged, and a page with its 30 linked "
         "assets (-a) arrive 200 at their exact sizes on one connection", budget=60)
def h2_page_assets(t):
    io.need(t, "nghttp")
    want, links, root = {}, [], io.h.new_tmpdir("www")
    for i in range(ASSETS):
        kind = ("png", "js", "css")[i % 3]
        name = "/a%02d.%s" % (i, kind)
        size = 1000 + 997 * i
        io.random_file(root + name, size)
        want[name] = (200, size)
        links.append({"png": '<img src="%s">', "js": '<script src="%s"></script>',
                      "css": '<link rel="stylesheet" href="%s">'}[kind] % name)
    page = ("<!doctype html><html><head><title>t</title></head><body>%s</body></html>\n"
            % "\n".join(links)).encode()
    with open(os.path.join(root, "index.html"), "wb") as f:
        f.write(page)
    want["/index.html"] = (200, len(page))
    _, (p,) = io.nginx(t, root, [""])
    c = io.certs(t)
    s = io.l7(t, io.upstream("127.0.0.1:%d" % p), tls=c["localhost"])
    r = io.run(["nghttp", "-nva", "https://localhost:%d/index.html" % s.port("tls")], timeout=60,
               env=dict(os.environ, SSL_CERT_FILE=c["ca"]))
    out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    t.check("nghttp exits 0 and the certificate verified against the test CA (no warning)",
            r.returncode == 0 and "verification failed" not in err, "exit 0, no warning",
            "exit %d %s" % (r.returncode, err[-300:]))
    t.check("ALPN: the negotiated protocol is h2", "The negotiated protocol: h2" in out, "h2",
            re.findall(r"negotiated protocol.*", out) or out[:300])
    server_settings = re.search(r"recv SETTINGS frame <length=\d+, flags=0x00, stream_id=0>\n"
                                r"\s+\(niv=\d+\)\n((?:\s+\[SETTINGS_\w+\(0x\w+\):\d+\]\n)*)", out)
    names = re.findall(r"SETTINGS_(\w+)\(0x\w+\):(\d+)", server_settings.group(1)) if server_settings else []
    t.check("sluice's SETTINGS announce MAX_CONCURRENT_STREAMS 100 (its default)",
            ("MAX_CONCURRENT_STREAMS", "100") in names, "MAX_CONCURRENT_STREAMS 100", names or out[:600])
    t.check("sluice acknowledged nghttp's SETTINGS and nghttp acknowledged sluice's",
            re.search(r"recv SETTINGS frame <length=0, flags=0x01, stream_id=0>", out) is not None
            and re.search(r"send SETTINGS frame <length=0, flags=0x01, stream_id=0>", out) is not None,
            "an ACK each way", re.findall(r"(?:send|recv) SETTINGS frame <[^>]*>", out))
    got = streams(out)
    t.check("the page and its %d assets: each 200 at its exact size" % ASSETS, got == want,
            "%d rows" % len(want), {k: v for k, v in got.items() if want.get(k) != v} or len(got))
    t.check("one connection carried the %d streams" % (ASSETS + 1),
            out.count("Connected") == 1 and out.count("; Open new stream") == ASSETS + 1,
            "1 connection, %d streams" % (ASSETS + 1),
            "%d, %d" % (out.count("Connected"), out.count("; Open new stream")))


@io.case("h2c.window_and_upload", "nghttp over h2c with a 4 KiB stream window downloads 8 MiB "
         "sha256-exact (sluice paces DATA to the WINDOW_UPDATEs) and uploads 8 MiB (-d) that "
         "reach the origin sha256-exact", budget=60)
def h2c_window_upload(t):
    src, sha, p = nginx_file(t, 8 << 20, "sendfile on;")
    up = io.hashing_origin()
    s = io.l7(t, io.upstream("127.0.0.1:%d" % p, "files") + io.upstream(up.address, "sink"),
              routes="  - { name: dl, match: { paths: [/f] }, upstream: files }\n"
                     "  - { name: up, match: { paths: [/up/] }, upstream: sink }\n")
    out = os.path.join(io.h.new_tmpdir("dl"), "got")
    with open(out, "wb") as f:
        r = io.subprocess.run(["nghttp", "-w", "12", "-W", "16", "http://127.0.0.1:%d/f" % s.port()],
                              stdout=f, stderr=io.subprocess.PIPE, timeout=60)
    got = io.file_sha256(out)
    t.check("8 MiB through a 4 KiB stream window: %d bytes, sha256-exact" % (8 << 20),
            r.returncode == 0 and os.path.getsize(out) == 8 << 20 and got == sha,
            "exit 0, %s" % sha[:16], "exit %d, %d bytes, %s %s" % (r.returncode, os.path.getsize(out),
                                                                    got[:16], r.stderr[-300:]))
    r = io.run(["nghttp", "-d", src, "http://127.0.0.1:%d/up/x" % s.port()], timeout=60)
    try:
        seen = json.loads(r.stdout)
    except ValueError:
        seen = {"unparsed": r.stdout[:300]}
    want = {"method": "POST", "len": 8 << 20, "sha256": sha}
    t.check("8 MiB upload (-d): the origin got a POST of %d bytes, sha256-exact" % (8 << 20),
            r.returncode == 0 and {k: seen.get(k) for k in want} == want, want,
            "exit %d, %s %s" % (r.returncode, seen, r.stderr[-300:]))


@io.case("h2c.early_413", "an origin that answers 413 before reading a 20 MiB upload: nghttp gets "
         "the 413 and its body whole, then RST_STREAM NO_ERROR (RFC 9113 8.1: stop sending, no "
         "error), the upload stops early, and the connection is not torn down", budget=60)
def h2c_early_413(t):
    src, _, p = nginx_file(t, 20 << 20, "client_max_body_size 1m;")
    s = io.l7(t, io.upstream("127.0.0.1:%d" % p))
    r = io.run(["nghttp", "-v", "-d", src, "http://127.0.0.1:%d/f" % s.port()], timeout=60)
    out = r.stdout.decode(errors="replace")
    got = streams(out).get("/f")
    t.check("nghttp exits 0 with the origin's 413 and its 183-byte body, ended (END_STREAM)",
            r.returncode == 0 and got == (413, 183) and re.search(
                r"recv DATA frame <length=\d+, flags=0x01, stream_id=13>", out) is not None,
            "exit 0, (413, 183)", "exit %d, %s" % (r.returncode, got))
    rst = re.findall(r"recv RST_STREAM frame <[^>]*stream_id=13>\n\s*\(error_code=(\w+)", out)
    t.check("then RST_STREAM NO_ERROR on the stream (stop the upload), and no GOAWAY from sluice",
            rst == ["NO_ERROR"] and "recv GOAWAY" not in out, ["NO_ERROR"], (rst, "recv GOAWAY" in out))
    sent = sum(int(n) for n in re.findall(r"send DATA frame <length=(\d+)", out))
    t.check("the upload stopped early: at most 2 MiB of the 20 sent", sent <= 2 << 20, "<= 2 MiB", sent)


if __name__ == "__main__":
    io.main()
