"""The compression plugin through the real binary, against a real upstream on loopback,
with real decoders on the client side:

  * byte-identical bodies after decoding, for 1 B, 859 B, 860 B, 64 KiB, 1 MiB and 10 MiB
    of text and of random bytes: gzip decoded by curl --compressed, br saved raw and decoded
    by Debian's `brotli` CLI; over HTTP/1.1 (chunked, no Content-Length) and HTTP/2 (no
    content-length, END_STREAM), and for a chunked (unknown-length) upstream body too;
    bodies below min_length (859 B with a Content-Length) go out untouched;
  * a 100 MiB body (random hex: about 50 MiB encoded) compresses with the worker's RSS
    growing by less than 16 MiB (sampled every 20 ms during the transfer),
    and clients that leave mid-body cost nothing afterwards;
  * already Content-Encoded and Cache-Control: no-transform responses untouched, HEAD,
    204 and 304 untouched; Vary: Accept-Encoding set, appended to the upstream's Vary;
    the q-value rule (br before gzip at equal q, q=0 refused, identity preferred when
    weighted higher);
  * with proxy-cache before it (when plugins/proxy-cache.lua is in the tree): the cache
    stores the identity response and compression encodes on the way out of a HIT as of a
    MISS: one entry serves gzip, br and identity clients, each decoding to the same bytes.
"""

import gzip
import hashlib
import os
import random
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("compression", budget=240)
# Under the ASan build freed memory sits in the sanitizer's quarantine: the RSS bounds are
# not checked there (its leak check at exit covers encoders not freed).
SANITIZED = os.environ.get("SLUICE_SANITIZE", "").upper() in ("1", "ON", "TRUE")

SIZES = [1, 859, 860, 64 << 10, 1 << 20, 10 << 20]
BIG = 100 << 20
WORDS = [b"sluice ", b"gateway ", b"upstream ", b"compress ", b"{\"id\": 42} ", b"\n", b"text/plain "]


def make_text(n, seed):
    rnd = random.Random(seed)
    out = bytearray()
    while len(out) < n:
        out += b"".join(rnd.choice(WORDS) for _ in range(4096))
    return bytes(out[:n])


BODIES = {}
for n in SIZES:
    BODIES[("text", n)] = make_text(n, n)
    BODIES[("rand", n)] = random.Random(n).randbytes(n)
TEXT_MIB = make_text(1 << 20, 7)
# The 100 MiB body: random hex, which encodes to about half its size, so that holding
# either the input or the output whole would show in the RSS.
HEX_MIB = random.Random(8).randbytes(1 << 19).hex().encode()


def big_stream():
    for _ in range(BIG // len(HEX_MIB)):
        for i in range(0, len(HEX_MIB), 65536):
            yield HEX_MIB[i:i + 65536]


def handler(req):
    parts = req.path.split("/")  # /kind/size[/chunked]
    kind = parts[1]
    if kind == "big":
        return h.Response(200, headers=[("Content-Type", "text/plain")], stream=big_stream(), length=BIG)
    if kind == "hdr":  # /hdr?<case>
        q = req.query
        body = TEXT_MIB[:4000]
        if q == "encoded":
            return h.Response(200, body, [("Content-Type", "text/plain"), ("Content-Encoding", "deflate")])
        if q == "notransform":
            return h.Response(200, body, [("Content-Type", "text/plain"), ("Cache-Control", "public, no-transform")])
        if q == "vary":
            return h.Response(200, body, [("Content-Type", "text/html"), ("Vary", "Origin"), ("ETag", '"e1"')])
        if q == "204":
            return h.Response(204, b"", [("Content-Type", "text/plain")])
        if q == "304":
            return h.Response(304, b"", [("Content-Type", "text/plain"), ("ETag", '"e1"')])
        return h.Response(200, body, [("Content-Type", "application/json")])
    body = BODIES[(kind, int(parts[2]))]
    ctype = [("Content-Type", "text/plain; charset=utf-8")]
    if len(parts) > 3:
        return h.Response(200, headers=ctype, stream=[body[i:i + 5000] for i in range(0, len(body), 5000)])
    return h.Response(200, body, ctype)


def setup(t):
    global gw, up, port
    up = h.MockUpstream(handler, name="up")
    gw = h.start_sluice("""\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams: [ { name: up, targets: [ { address: %s } ] } ]
routes:
  - name: c
    match: { paths: [ / ] }
    upstream: up
    plugins: [ { name: compression } ]
""" % up.address, suite=t, name="compression")
    port = gw.port()


def curl(path, *args, out=None):
    """Runs curl; returns (headers dict lower-case, body bytes)."""
    d = h.new_tmpdir("cmp")
    body_file = out or os.path.join(d, "body")
    hdr_file = os.path.join(d, "head")
    subprocess.run(["curl", "-s", "-S", "--max-time", "60", "-o", body_file, "-D", hdr_file]
                   + list(args) + ["http://127.0.0.1:%d%s" % (port, path)], check=True)
    hs = {}
    with open(hdr_file, "rb") as f:
        for ln in f.read().decode("latin-1").split("\r\n")[1:]:
            if ":" in ln:
                k, v = ln.split(":", 1)
                hs[k.strip().lower()] = v.strip()
    if not os.path.exists(body_file):  # curl writes no file for an empty body
        return hs, b""
    with open(body_file, "rb") as f:
        return hs, f.read()


def brotli_decode(raw):
    return subprocess.run(["brotli", "-d", "-c"], input=raw, stdout=subprocess.PIPE, check=True).stdout


def sha(b):
    return hashlib.sha256(b).hexdigest()[:16]


def test_round_trips(t):
    for h2 in (False, True):
        proto = ["--http2-prior-knowledge"] if h2 else []
        name = "h2" if h2 else "h1"
        for (kind, n), body in BODIES.items():
            for chunked in ((False, True) if n in (859, 64 << 10) and not h2 else (False,)):
                path = "/%s/%d%s" % (kind, n, "/chunked" if chunked else "")
                compressed = n >= 860 or chunked  # an unknown length is compressed
                # gzip, decoded by curl
                hs, got = curl(path, "-H", "Accept-Encoding: gzip", "--compressed", *proto)
                t.check("%s gzip %s: decoded body identical (%d B)" % (name, path, n),
                        sha(got) == sha(body), sha(body), sha(got))
                t.check("%s gzip %s: Content-Encoding" % (name, path),
                        hs.get("content-encoding") == ("gzip" if compressed else None),
                        "gzip" if compressed else None, hs.get("content-encoding"))
                if compressed:
                    t.check("%s %s: no Content-Length, Vary set" % (name, path),
                            "content-length" not in hs and hs.get("vary") == "Accept-Encoding"
                            and (h2 or hs.get("transfer-encoding") == "chunked"),
                            "chunked (h1) / none (h2), Vary", hs)
                # br, saved raw and decoded by the brotli CLI
                hs, raw = curl(path, "-H", "Accept-Encoding: gzip, br", *proto)
                got = brotli_decode(raw) if hs.get("content-encoding") == "br" else raw
                t.check("%s br %s: decoded by brotli identical" % (name, path),
                        sha(got) == sha(body) and (hs.get("content-encoding") == "br") == compressed,
                        (sha(body), compressed), (sha(got), hs.get("content-encoding")))
                if kind == "text" and n >= 1 << 20:
                    t.info("%s text %d B: br %d B" % (name, n, len(raw)))
                    t.check("%s br %s: text shrinks" % (name, path), len(raw) < n / 3, "< n/3", len(raw))


def rss_during(path, args):
    """Runs curl on path while sampling the gateway's RSS; returns (max RSS kB, baseline kB, bytes)."""
    base = gw.rss_kb()
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], gw.rss_kb())
            time.sleep(0.02)

    th = threading.Thread(target=sample)
    th.start()
    d = h.new_tmpdir("big")
    try:
        hs, _ = curl(path, *args, out=os.path.join(d, "out"))
        size = os.path.getsize(os.path.join(d, "out"))
        sz = (hs.get("content-encoding"), size)
        os.unlink(os.path.join(d, "out"))
    finally:
        done.set()
        th.join()
    return peak[0], base, sz


def test_big_bounded_rss(t):
    # a first pass warms the worker's block freelist and the Lua state
    curl("/text/%d" % (1 << 20), "-H", "Accept-Encoding: gzip")
    for coding in ("gzip", "br"):
        peak, base, (ce, size) = rss_during("/big", ["-H", "Accept-Encoding: " + coding, "--compressed"])
        t.info("100 MiB %s: RSS %d kB before, %d kB peak (+%d kB)" % (coding, base, peak, peak - base))
        t.check("100 MiB %s: all of it decoded" % coding, ce == coding and size == BIG, (coding, BIG), (ce, size))
        if not SANITIZED:
            t.check("100 MiB %s: RSS grew by less than 16 MiB" % coding, peak - base < 16 << 10, "< 16384 kB",
                    peak - base)


def test_client_aborts(t):
    """Clients that leave mid-body free their encoders: the RSS after 30 of them is the
    RSS after the first few, and the gateway still serves."""
    def abort_some(n):
        for i in range(n):
            c = h.Client(port, timeout=5)
            try:
                c.send(b"GET /big HTTP/1.1\r\nHost: x\r\nAccept-Encoding: %s\r\n\r\n"
                       % (b"br" if i % 2 else b"gzip"))
                c.sock.recv(65536)
                c.sock.recv(65536)
            finally:
                c.close()
    abort_some(6)
    time.sleep(0.3)
    before = gw.rss_kb()
    abort_some(30)
    time.sleep(0.3)
    after = gw.rss_kb()
    t.info("RSS after 6 aborts %d kB, after 30 more %d kB" % (before, after))
    if not SANITIZED:
        t.check("30 aborted responses leave no growth (< 8 MiB)", after - before < 8 << 10, "< 8192 kB",
                after - before)
    hs, got = curl("/text/%d" % (64 << 10), "-H", "Accept-Encoding: gzip", "--compressed")
    t.check("the gateway serves after aborts", got == BODIES[("text", 64 << 10)], True, len(got))
    log = gw.log()
    t.check("no plugin error logged", "plugin error" not in log, "none", log[-500:])


def test_untouched(t):
    ae = ["-H", "Accept-Encoding: gzip, br"]
    hs, body = curl("/hdr?encoded", *ae)
    t.check("already encoded: untouched", hs.get("content-encoding") == "deflate" and body == TEXT_MIB[:4000],
            "deflate, same bytes", hs.get("content-encoding"))
    hs, body = curl("/hdr?notransform", *ae)
    t.check("no-transform: untouched", "content-encoding" not in hs and body == TEXT_MIB[:4000], None,
            hs.get("content-encoding"))
    hs, body = curl("/hdr?vary", *ae)
    t.check("Vary appended to the upstream's", hs.get("vary") == "Origin, Accept-Encoding",
            "Origin, Accept-Encoding", hs.get("vary"))
    t.check("strong ETag weakened", hs.get("etag") == 'W/"e1"', 'W/"e1"', hs.get("etag"))
    hs, body = curl("/hdr?json", "-I", *ae)
    t.check("HEAD: not encoded", "content-encoding" not in hs, None, hs.get("content-encoding"))
    hs, _ = curl("/hdr?204", *ae)
    t.check("204: not encoded", "content-encoding" not in hs, None, hs.get("content-encoding"))
    hs, _ = curl("/hdr?304", *ae)
    t.check("304: not encoded", "content-encoding" not in hs, None, hs.get("content-encoding"))


def test_q_values(t):
    cases = [
        ("gzip, deflate, br", "br"),
        ("br;q=0.5, gzip", "gzip"),
        ("br;q=0, gzip;q=0.1", "gzip"),
        ("br;q=0, gzip;q=0", None),
        ("gzip;q=0.4, identity;q=0.5", None),
        ("*", "br"),
        ("*;q=0", None),
        ("identity", None),
        ("", None),
    ]
    for ae, want in cases:
        hs, body = curl("/hdr?json", "-H", "Accept-Encoding: " + ae)
        t.check("Accept-Encoding %r -> %s" % (ae, want), hs.get("content-encoding") == want, want,
                hs.get("content-encoding"))
        if want is None:
            t.check("Accept-Encoding %r: identity body, Vary set" % ae,
                    body == TEXT_MIB[:4000] and hs.get("vary") == "Accept-Encoding", True, hs)


def test_with_proxy_cache(t):
    if not os.path.exists(os.path.join(h.SRC, "plugins", "proxy-cache.lua")):
        t.info("no proxy-cache plugin in this tree: skipped")
        return
    up2 = h.MockUpstream(handler, name="up2")
    cgw = h.start_sluice("""\
workers: 1
admin: { listen: 127.0.0.1:0 }
cache: { size: 16MiB }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams: [ { name: up, targets: [ { address: %s } ] } ]
routes:
  - name: c
    match: { paths: [ / ] }
    upstream: up
    plugins: [ { name: proxy-cache }, { name: compression } ]
""" % up2.address, suite=t, name="cache")
    global port
    saved, port = port, cgw.port()
    try:
        path = "/text/%d" % (64 << 10)
        body = BODIES[("text", 64 << 10)]
        seen = []
        for ae in ("gzip", "br", "gzip", "identity", "br"):
            hs, raw = curl(path, "-H", "Accept-Encoding: " + ae)
            got = brotli_decode(raw) if hs.get("content-encoding") == "br" else raw
            if hs.get("content-encoding") == "gzip":
                got = gzip.decompress(raw)
            seen.append((ae, hs.get("x-cache-status"), hs.get("content-encoding")))
            t.check("cache + compression, %s (%s): decoded body identical" % (ae, hs.get("x-cache-status")),
                    got == body, sha(body), sha(got))
        t.check("one upstream request for all five, each encoded as asked",
                seen == [("gzip", "MISS", "gzip"), ("br", "HIT", "br"), ("gzip", "HIT", "gzip"),
                         ("identity", "HIT", None), ("br", "HIT", "br")] and up2.snapshot()[2] == 1,
                "MISS then HITs, 1 upstream request", (seen, up2.snapshot()[2]))
        # a HIT shorter than min_length goes out as it is, as its MISS did
        short = [curl("/text/859", "-H", "Accept-Encoding: gzip") for _ in range(2)]
        t.check("cache + compression: 859 B MISS and HIT both identity",
                [(hs.get("x-cache-status"), hs.get("content-encoding"), b == BODIES[("text", 859)])
                 for hs, b in short] == [("MISS", None, True), ("HIT", None, True)], "MISS, HIT identity",
                [(hs.get("x-cache-status"), hs.get("content-encoding"), len(b)) for hs, b in short])
    finally:
        port = saved
        cgw.stop()
        up2.stop()


t.run(setup, test_round_trips, test_untouched, test_q_values, test_big_bounded_rss, test_client_aborts,
      test_with_proxy_cache)
