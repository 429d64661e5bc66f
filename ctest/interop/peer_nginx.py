"""nginx as the origin: static files with sendfile on and off, through sluice's L4 (tcp
listener, splice auto and off) and L7 (HTTP/1.1 proxy route; HTTP/2 clients too) paths.
Bodies of 0 B to 20 MiB sha256-exact with Content-Length; chunked responses (nginx's gzip
filter of a static file); HEAD; conditional GETs answered 304; fresh and kept-alive
connections, one after another and in parallel."""

import gzip
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402
from test_tcp_proxy import pipes  # noqa: E402  (ctest/integration: the pipes a process holds)

SIZES = [("0", 0), ("1", 1), ("64k", 64 << 10), ("1m", 1 << 20), ("20m", 20 << 20)]
SIZE_NAMES = "0 B, 1 B, 64 KiB, 1 MiB, 20 MiB"
GZIP = "gzip on; gzip_types *; gzip_min_length 0; gzip_proxied any; gzip_comp_level 1;"


def bound(size):
    """Seconds one transfer may take: generous for a loaded 2-core machine and ASan."""
    return 10 if size <= (1 << 20) else 30


def origin(t, *servers):
    """nginx serving the SIZES files from one root, a server per entry of `servers`.
    Returns ({name: sha256}, [ports])."""
    io.need(t, "curl")
    root = io.h.new_tmpdir("www")
    shas = {name: io.random_file(os.path.join(root, name), size) for name, size in SIZES}
    _, ports = io.nginx(t, root, list(servers))
    return shas, ports


def keepalive(port, seq, shas, out, extra=()):
    """One connection, a GET of each name of `seq` in turn (headers `extra` added); every
    response must be 200, Content-Length framed, sha256-exact. Failures go to out."""
    try:
        c = io.h.Client(port, timeout=60)
    except OSError as e:
        out.append("connect: %s" % e)
        return
    try:
        for i, name in enumerate(seq):
            c.send(io.h.build_request("GET", "/" + name, list(extra)))
            r = c.read_response(timeout=bound(dict(SIZES)[name]))
            if (r.status, r.framing, r.sha256) != (200, "length", shas[name]):
                out.append("request %d (/%s): %s %s %d B" % (i + 1, name, r.status, r.framing, r.body_len))
    except Exception as e:
        out.append("%s: %s" % (type(e).__name__, e))
    finally:
        c.close()


def fresh(url, name, size, shas, out, *args):
    """One curl fetch on a fresh connection: exit 0, Content-Length = size, sha256-exact."""
    rc, body, head = io.fetch(url + "/" + name, *args, timeout=bound(size))
    if rc != 0 or io.sha256(body) != shas[name] or ("content-length: %d\r\n" % size) not in head:
        out.append("/%s: curl exit %d, %d of %d B, head %r" % (name, rc, len(body), size, head[:120]))


def sizes_matrix(t, label, url, port, shas, h2=False):
    """The body matrix through one listener: every size on a fresh curl connection, one
    kept-alive sequence of them all, 3 kept-alive sequences and 4 fresh fetches at once.
    A failed step ends it (a stalling path would take each later step's whole bound)."""
    args = ("--http2-prior-knowledge",) if h2 else ()
    bad = []
    for name, size in SIZES:
        fresh(url, name, size, shas, bad, *args)
    if not t.check("%s: fresh connections, %s: each curl exit 0, Content-Length = size, sha256-exact"
                   % (label, SIZE_NAMES), not bad, [], bad):
        return
    if not h2:
        bad = []
        seq = [n for n, _ in SIZES] + ["1m", "0", "64k"]
        keepalive(port, seq, shas, bad)
        if not t.check("%s: one kept-alive connection, 8 GETs (%s, then 1 MiB, 0 B, 64 KiB): each 200, "
                       "Content-Length framed, sha256-exact" % (label, SIZE_NAMES), not bad, [], bad):
            return
    bad = []
    calls = [(fresh, url, n, dict(SIZES)[n], shas, bad) + args for n in ("20m", "1m", "20m", "64k")]
    if not h2:
        calls += [(keepalive, port, ["64k", "20m", "1", "1m"], shas, bad)] * 3
    io.at_once(calls)
    t.check("%s: at once, 4 fresh fetches (20 MiB, 1 MiB, 20 MiB, 64 KiB)%s: all exact"
            % (label, "" if h2 else " and 3 kept-alive connections of 4 GETs"), not bad, [], bad)


def l4(t, sendfile):
    shas, (p,) = origin(t, "sendfile %s;" % sendfile)
    s = io.origin_l4(t, p)
    pipes0 = pipes(s.pid)
    for splice in ("auto", "off"):
        sizes_matrix(t, "splice %s" % splice, "http://127.0.0.1:%d" % s.port(splice), s.port(splice), shas)
        if splice == "auto":
            n = pipes(s.pid)
            t.check("splice auto spliced: the gateway holds more pipes than before (%d)" % pipes0,
                    n > pipes0, "> %d" % pipes0, n)


def l7_gateway(t, conf):
    """(sluice, {name: sha256}): nginx with `conf` behind sluice's HTTP/1.1 route."""
    shas, (p,) = origin(t, conf)
    return io.origin_l7(t, p), shas


def l7(t, sendfile):
    s, shas = l7_gateway(t, "sendfile %s;" % sendfile)
    sizes_matrix(t, "HTTP/1.1", "http://127.0.0.1:%d" % s.port("web"), s.port("web"), shas)
    return s, shas


@io.case("l4.sendfile_on", "static files of 0 B to 20 MiB from nginx with sendfile on, through a "
         "tcp listener with splice auto and with splice off, arrive sha256-exact with their "
         "Content-Length: fresh curl connections, a kept-alive sequence, and 7 at once", budget=120)
def l4_sendfile_on(t):
    l4(t, "on")


@io.case("l4.sendfile_off", "static files of 0 B to 20 MiB from nginx with sendfile off, through a "
         "tcp listener with splice auto and with splice off, arrive sha256-exact with their "
         "Content-Length: fresh curl connections, a kept-alive sequence, and 7 at once", budget=120)
def l4_sendfile_off(t):
    l4(t, "off")


@io.case("l7.sendfile_on", "static files of 0 B to 20 MiB from nginx with sendfile on, through the "
         "HTTP/1.1 proxy route, reach HTTP/1.1 and HTTP/2 clients sha256-exact with their "
         "Content-Length: fresh curl connections, a kept-alive sequence, and 7 at once", budget=120)
def l7_sendfile_on(t):
    s, shas = l7(t, "on")
    sizes_matrix(t, "HTTP/2 (prior knowledge)", "http://127.0.0.1:%d" % s.port("web"), None, shas, h2=True)


@io.case("l7.sendfile_off", "static files of 0 B to 20 MiB from nginx with sendfile off, through "
         "the HTTP/1.1 proxy route, reach HTTP/1.1 clients sha256-exact with their "
         "Content-Length: fresh curl connections, a kept-alive sequence, and 7 at once", budget=120)
def l7_sendfile_off(t):
    l7(t, "off")


def gzip_sequence(t, label, port, shas):
    """On one kept-alive connection: a gzip-encoded GET of 1 B, 64 KiB, 1 MiB and 20 MiB, then
    the 1 MiB without Accept-Encoding. Each gzip answer must come chunked (nginx's gzip
    filter drops the length), decompress to the file's sha256."""
    seen, want = [], []
    c = io.h.Client(port, timeout=60)
    try:
        for name in ("1", "64k", "1m", "20m"):
            c.send(io.h.build_request("GET", "/" + name, [("Accept-Encoding", "gzip")]))
            r = c.read_response(timeout=bound(dict(SIZES)[name]))
            try:
                plain = io.sha256(gzip.decompress(r.body))
            except Exception as e:
                plain = repr(e)
            seen.append((name, r.status, r.framing, r.header("Content-Encoding"), r.header("Content-Length"),
                         plain == shas[name]))
            want.append((name, 200, "chunked", "gzip", None, True))
        c.send(io.h.build_request("GET", "/1m"))
        r = c.read_response()
        seen.append(("1m plain", r.status, r.framing, r.header("Content-Encoding"), r.header("Content-Length"),
                     r.sha256 == shas["1m"]))
        want.append(("1m plain", 200, "length", None, str(1 << 20), True))
    except Exception as e:
        seen.append(repr(e))
    finally:
        c.close()
    t.check("%s: one kept-alive connection: gzip GETs of 1 B, 64 KiB, 1 MiB, 20 MiB come "
            "Transfer-Encoding: chunked, Content-Encoding: gzip, no Content-Length, and gunzip to "
            "the file's sha256; then 1 MiB plain with its Content-Length, exact" % label,
            seen == want, want, seen)


@io.case("l7.chunked_gzip", "responses nginx sends chunked (its gzip filter on static files) pass "
         "the HTTP/1.1 proxy route chunked and decompress sha256-exact, on a kept-alive connection "
         "with a Content-Length response after them and with curl --compressed", budget=90)
def l7_chunked_gzip(t):
    shas, (p,) = origin(t, "sendfile on; " + GZIP)
    direct = io.h.Client(p, timeout=10)
    direct.send(io.h.build_request("GET", "/64k", [("Accept-Encoding", "gzip")]))
    r = direct.read_response()
    direct.close()
    t.check("nginx itself answers a gzip GET chunked (the setup yields Transfer-Encoding: chunked)",
            r.framing == "chunked" and r.header("Content-Encoding") == "gzip", "chunked gzip",
            (r.framing, r.header("Content-Encoding")))
    s = io.origin_l7(t, p)
    gzip_sequence(t, "HTTP/1.1", s.port("web"), shas)
    bad = []
    for name, size in SIZES[1:]:
        rc, body, head = io.fetch("http://127.0.0.1:%d/%s" % (s.port("web"), name), "--compressed",
                                  timeout=bound(size))
        if rc != 0 or io.sha256(body) != shas[name] or "transfer-encoding: chunked" not in head:
            bad.append("/%s: exit %d, %d B, %r" % (name, rc, len(body), head[:200]))
    t.check("curl --compressed, fresh connections, 1 B to 20 MiB: exit 0, chunked, sha256-exact "
            "after decompression", not bad, [], bad)
    bad = []
    io.at_once([(gzip_check_parallel, s.port("web"), shas, bad)] * 3)
    t.check("3 connections at once, each gzip GETs of 20 MiB and 1 MiB: chunked, gunzip exact",
            not bad, [], bad)


def gzip_check_parallel(port, shas, out):
    try:
        c = io.h.Client(port, timeout=60)
        for name in ("20m", "1m"):
            c.send(io.h.build_request("GET", "/" + name, [("Accept-Encoding", "gzip")]))
            r = c.read_response()
            if r.framing != "chunked" or io.sha256(gzip.decompress(r.body)) != shas[name]:
                out.append("/%s: %s %s" % (name, r.status, r.framing))
        c.close()
    except Exception as e:
        out.append("%s: %s" % (type(e).__name__, e))


def same_headers(get, head):
    """GET's and HEAD's header lists without Date (the second may turn between them)."""
    def keep(r):
        return [(n.lower(), v) for n, v in r.headers if n.lower() != "date"]
    return keep(get), keep(head)


@io.case("l7.head", "a HEAD through the HTTP/1.1 proxy route gets the same header fields as the "
         "GET (Content-Length of the file kept, 0 B to 20 MiB) and no body: GETs after HEADs on "
         "one kept-alive connection still parse exact; curl -I agrees", budget=60)
def l7_head(t):
    s, shas = l7_gateway(t, "sendfile on;")
    bad = []
    c = io.h.Client(s.port("web"), timeout=60)
    try:
        for name, size in SIZES:
            c.send(io.h.build_request("HEAD", "/" + name))
            hd = c.read_response("HEAD")
            c.send(io.h.build_request("GET", "/" + name))
            g = c.read_response(timeout=bound(size))
            gh, hh = same_headers(g, hd)
            if gh != hh:
                bad.append("/%s: GET %r, HEAD %r" % (name, gh, hh))
            if hd.status != 200 or hd.header("Content-Length") != str(size):
                bad.append("/%s HEAD: %s, Content-Length %s" % (name, hd.status, hd.header("Content-Length")))
            if g.sha256 != shas[name]:
                bad.append("/%s GET after HEAD: %d B, not the file" % (name, g.body_len))
        # a HEAD that sent a body would leave bytes before this answer
        c.send(io.h.build_request("HEAD", "/20m") + io.h.build_request("GET", "/1"))
        c.read_response("HEAD")
        g = c.read_response()
        if (g.status, g.body_len, g.sha256) != (200, 1, shas["1"]):
            bad.append("GET /1 pipelined after HEAD /20m: %s %d B" % (g.status, g.body_len))
        extra = c.pending(0.3)
        if extra:
            bad.append("%d stray bytes after the last answer" % len(extra))
    except Exception as e:
        bad.append("%s: %s" % (type(e).__name__, e))
    finally:
        c.close()
    t.check("one kept-alive connection, HEAD then GET of each of %s: HEAD 200 with Content-Length "
            "= size, header fields = the GET's (Date aside), no body; each GET exact; a GET "
            "pipelined after HEAD /20m exact, no stray byte" % SIZE_NAMES, not bad, [], bad)
    bad = []
    for name, size in SIZES:
        # curl -I writes the head as its output too: nothing else may follow it
        rc, body, head = io.fetch("http://127.0.0.1:%d/%s" % (s.port("web"), name), "-I")
        if (rc != 0 or body.decode("latin-1").lower() != head or ("content-length: %d\r\n" % size) not in head
                or not head.startswith("http/1.1 200")):
            bad.append("/%s: exit %d, %d B body, %r" % (name, rc, len(body), head[:120]))
    t.check("curl -I on fresh connections, %s: exit 0, 200, Content-Length = size, no body"
            % SIZE_NAMES, not bad, [], bad)


@io.case("l7.conditional_304", "conditional GETs through the HTTP/1.1 proxy route (If-None-Match "
         "with nginx's ETag, If-Modified-Since with its Last-Modified) get 304 with no body, and "
         "the same kept-alive connection then serves a normal 200 exact", budget=60)
def l7_conditional_304(t):
    s, shas = l7_gateway(t, "sendfile on;")
    conditional(t, "HTTP/1.1 route", s.port("web"), shas)
    bad = []
    for name, size in SIZES[2:]:
        g = io.h.request(s.port("web"), "HEAD", "/" + name)
        rc, body, head = io.fetch("http://127.0.0.1:%d/%s" % (s.port("web"), name),
                                  "-H", "If-None-Match: %s" % g.header("ETag"))
        if rc != 0 or body or not head.startswith("http/1.1 304"):
            bad.append("/%s: exit %d, %d B, %r" % (name, rc, len(body), head[:60]))
    t.check("curl with If-None-Match on fresh connections (64 KiB, 1 MiB, 20 MiB): 304, no body",
            not bad, [], bad)


def conditional(t, label, port, shas):
    """The conditional sequence on one kept-alive connection (shared with the L4 case)."""
    seen, want = [], []
    c = io.h.Client(port, timeout=60)
    try:
        val = {}
        for name in ("1m", "20m"):
            c.send(io.h.build_request("GET", "/" + name))
            r = c.read_response(timeout=bound(dict(SIZES)[name]))
            val[name] = {"If-None-Match": r.header("ETag"), "If-Modified-Since": r.header("Last-Modified")}
            seen.append((name, r.status, r.sha256 == shas[name], None not in val[name].values()))
            want.append((name, 200, True, True))
        steps = [("If-None-Match", "1m", 304), ("", "1m", 200),
                 ("If-Modified-Since", "20m", 304), ("", "20m", 200),
                 ("foreign", "64k", 200),
                 ("If-None-Match", "20m", 304), ("If-Modified-Since", "1m", 304),
                 ("", "1m", 200)]
        for hname, name, status in steps:
            if hname in ("", "foreign"):
                hdrs = [("If-None-Match", '"no-such-etag"')] if hname else []
            else:
                hdrs = [(hname, val[name][hname])]
            c.send(io.h.build_request("GET", "/" + name, hdrs))
            r = c.read_response(timeout=bound(dict(SIZES)[name]))
            seen.append((hname or "plain", name, r.status, r.body_len if r.status == 304 else r.sha256 == shas[name]))
            want.append((hname or "plain", name, status, 0 if status == 304 else True))
            if status == 304:
                seen.append(("304 keeps ETag", r.header("ETag") == val[name]["If-None-Match"]))
                want.append(("304 keeps ETag", True))
        extra = c.pending(0.3)
        seen.append(("stray bytes", len(extra)))
        want.append(("stray bytes", 0))
    except Exception as e:
        seen.append("%s: %s" % (type(e).__name__, e))
    finally:
        c.close()
    t.check("%s, one kept-alive connection: GETs of 1 MiB and 20 MiB 200 exact (ETag, "
            "Last-Modified), then with their validators If-None-Match -> 304 no body (ETag kept), "
            "GET 200 exact, If-Modified-Since -> 304, GET 200 exact, a foreign ETag -> 200 exact, "
            "304, 304, GET 200 exact; no stray byte" % label, seen == want, want, seen)


@io.case("l4.chunked_head_304", "through a tcp listener (splice auto and off) nginx's chunked gzip "
         "answers, HEADs and conditional 304s pass byte-exact on kept-alive connections",
         budget=60)
def l4_chunked_head_304(t):
    shas, (p,) = origin(t, "sendfile on; " + GZIP)
    s = io.origin_l4(t, p)
    for splice in ("auto", "off"):
        port = s.port(splice)
        gzip_sequence(t, "splice %s" % splice, port, shas)
        conditional(t, "splice %s" % splice, port, shas)
        bad = []
        c = io.h.Client(port, timeout=60)
        try:
            for name, size in SIZES:
                c.send(io.h.build_request("HEAD", "/" + name) + io.h.build_request("GET", "/" + name))
                hd = c.read_response("HEAD")
                g = c.read_response(timeout=bound(size))
                if hd.header("Content-Length") != str(size) or g.sha256 != shas[name]:
                    bad.append("/%s: HEAD CL %s, GET %d B" % (name, hd.header("Content-Length"), g.body_len))
        except Exception as e:
            bad.append("%s: %s" % (type(e).__name__, e))
        finally:
            c.close()
        t.check("splice %s: HEAD and GET pipelined for each of %s: HEAD Content-Length = size "
                "and no body, GET exact" % (splice, SIZE_NAMES), not bad, [], bad)


if __name__ == "__main__":
    io.main()
