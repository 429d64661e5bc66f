"""proxy-cache through the real binary, with a real upstream on loopback that counts what it
is asked (the count is the truth: a HIT never reaches it).

  * MISS then HIT (same status, fields and body; Age; X-Cache-Status); a HEAD is answered
    from the GET's entry (its Content-Length) and never fills one.
  * a HIT answers If-None-Match (weak comparison) / If-Modified-Since with a 304; a MISS
    asks the upstream without the client's validators and Range, and stores the 200.
  * 100 concurrent misses of one key on 2 workers: exactly 1 upstream request, and the
    waiters are woken when the response is stored (not by their 1 s safety timer).
  * Cache-Control private / no-store / no-cache and Set-Cookie: never stored (BYPASS);
    cache_set_cookie stores Set-Cookie; max-age overrides ttl.
  * ttl expiry -> EXPIRED; stale_if_error -> STALE for an upstream 503 and a refused one.
  * Vary from the upstream: one entry per value of the named request header.
  * purge: DELETE /cache?key=..., ?route=NAME (the admin token is required).
  * a 1 GiB body streams through with bounded RSS and is not stored; a chunked body over
    max_body likewise.
  * the store stays under cache.size when filled past it (sluice_cache_bytes, RSS); a
    reload to a smaller size evicts down to it.
  * HTTP/2 (curl --http2-prior-knowledge): MISS then HIT.
  * sluice_cache_total{route,status}.
"""

import os
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("proxy_cache", budget=150)

# Under the ASan build (SLUICE_SANITIZE) freed memory sits in the sanitizer's quarantine:
# evicted entries still count in RSS there, so the RSS bound is the plain build's.
SANITIZED = os.environ.get("SLUICE_SANITIZE", "").upper() in ("1", "ON", "TRUE")

TOKEN = "cache-admin-token"


class Upstream:
    """A mock upstream whose answer per path is set by the test; counts requests per path."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.method_log = {}
        self.answers = {}
        self.up = h.MockUpstream(self.handle, name="origin")
        self.address = self.up.address

    def handle(self, req):
        path = req.path
        with self.lock:
            self.counts[path] = self.counts.get(path, 0) + 1
            self.method_log.setdefault(path, []).append(req.method)
            n = self.counts[path]
            make = self.answers.get(path)
        if make:
            return make(req, n)
        return h.Response(200, b"body of %s #%d" % (path.encode(), n), [("Content-Type", "text/plain")])

    def count(self, path):
        with self.lock:
            return self.counts.get(path, 0)

    def methods(self, path):
        with self.lock:
            return list(self.method_log.get(path, []))

    def stop(self):
        self.up.stop()


def start(t, up, workers=1, size="64MiB", extra_routes=""):
    conf = """\
workers: %d
shutdown_timeout: 2s
cache: { size: %s }
admin: { listen: 127.0.0.1:0, token_env: SL_CACHE_TEST_TOKEN }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - { name: origin, targets: [ { address: %s } ], retry: { attempts: 1 } }
routes:
  - name: cached
    match: { paths: [/c/] }
    upstream: origin
    plugins: [ { name: proxy-cache, config: { ttl: 60s } } ]
  - name: short
    match: { paths: [/s/] }
    upstream: origin
    plugins: [ { name: proxy-cache, config: { ttl: 1s, stale_if_error: 60s } } ]
  - name: cookies
    match: { paths: [/k/] }
    upstream: origin
    plugins: [ { name: proxy-cache, config: { cache_set_cookie: true } } ]
  - name: big
    match: { paths: [/big/] }
    upstream: origin
    plugins: [ { name: proxy-cache, config: { max_body: 1MiB } } ]
%s""" % (workers, size, up.address, extra_routes)
    env = dict(os.environ, SL_CACHE_TEST_TOKEN=TOKEN)
    return h.start_sluice(conf, suite=t, name="cache", env=env)


def get(s, path, headers=None, method="GET"):
    return h.request(s.port(), method, path, headers=headers)


def xcs(r):
    return r.header("X-Cache-Status")


def admin(s, method, path, token=TOKEN):
    hdrs = [("Host", "127.0.0.1")]
    if token:
        hdrs.append(("Authorization", "Bearer " + token))
    return h.request(s.admin_port, method, path, headers=hdrs)


def metrics(s):
    r = admin(s, "GET", "/metrics")
    return h.parse_prometheus(r.body.decode())


def test_miss_then_hit(t):
    up = Upstream()
    up.answers["/c/a"] = lambda req, n: h.Response(
        200, b"alpha #%d" % n, [("Content-Type", "text/plain"), ("X-Origin", "yes")])
    s = start(t, up)
    try:
        r1 = get(s, "/c/a")
        r2 = get(s, "/c/a")
        t.check("first: MISS from the upstream", (r1.status, xcs(r1), r1.body) == (200, "MISS", b"alpha #1"),
                (200, "MISS", b"alpha #1"), (r1.status, xcs(r1), r1.body))
        t.check("second: HIT with the same body and fields, the upstream asked once",
                (r2.status, xcs(r2), r2.body, r2.header("X-Origin"), r2.header("Content-Type"), up.count("/c/a")) ==
                (200, "HIT", b"alpha #1", "yes", "text/plain", 1),
                "HIT alpha #1", (r2.status, xcs(r2), r2.body, r2.header("X-Origin"), up.count("/c/a")))
        t.check("a HIT carries Age", r2.header("Age") is not None and r2.header("Age").isdigit(), "digits",
                r2.header("Age"))
        r3 = get(s, "/c/a?v=2")
        t.check("another query is another key", (xcs(r3), up.count("/c/a")) == ("MISS", 2), ("MISS", 2),
                (xcs(r3), up.count("/c/a")))
        rh = get(s, "/c/a", method="HEAD")
        t.check("HEAD is answered from the GET's entry: HIT, the GET's Content-Length, no body, no upstream",
                (xcs(rh), rh.header("Content-Length"), rh.body, up.count("/c/a")) == ("HIT", "8", b"", 2),
                ("HIT", "8", b"", 2), (xcs(rh), rh.header("Content-Length"), rh.body, up.count("/c/a")))
        rh = get(s, "/c/h", method="HEAD")
        rg = get(s, "/c/h")
        rh2 = get(s, "/c/h", method="HEAD")
        t.check("a HEAD MISS goes upstream as HEAD and fills nothing: the next GET is a MISS, then HEAD HITs",
                (xcs(rh), up.methods("/c/h"), xcs(rg), xcs(rh2), rh2.header("Content-Length"), rh2.body) ==
                ("MISS", ["HEAD", "GET"], "MISS", "HIT", str(len(rg.body)), b""),
                ("MISS", ["HEAD", "GET"], "MISS", "HIT", str(len(rg.body)), b""),
                (xcs(rh), up.methods("/c/h"), xcs(rg), xcs(rh2), rh2.header("Content-Length"), rh2.body))
        rp = h.request(s.port(), "POST", "/c/a", body=b"x")
        t.check("POST is not a cached method: BYPASS", xcs(rp) == "BYPASS", "BYPASS", xcs(rp))
        ms = metrics(s)
        hits = h.metric_values(ms, "sluice_cache_total", route="cached", status="HIT")
        miss = h.metric_values(ms, "sluice_cache_total", route="cached", status="MISS")
        t.check("sluice_cache_total counts HIT and MISS by route", (hits, miss) == ([3.0], [4.0]),
                ([3.0], [4.0]), (hits, miss))
        b = h.metric_values(ms, "sluice_cache_bytes")
        t.check("sluice_cache_bytes is reported", b and b[0] > 0, "> 0", b)
    finally:
        s.stop()
        up.stop()


def test_conditional(t):
    lm = "Mon, 01 Dec 2025 10:00:00 GMT"
    up = Upstream()
    up.answers["/c/cond"] = lambda req, n: h.Response(
        200, b"cond #%d" % n, [("Content-Type", "text/plain"), ("ETag", '"v1"'), ("Last-Modified", lm)])
    s = start(t, up)
    try:
        get(s, "/c/cond")
        cases = [
            ('If-None-Match', '"v1"', 304), ('If-None-Match', 'W/"v1"', 304), ('If-None-Match', '"a", "v1"', 304),
            ('If-None-Match', '*', 304), ('If-None-Match', '"v2"', 200),
            ('If-Modified-Since', lm, 304), ('If-Modified-Since', "Tue, 02 Dec 2025 10:00:00 GMT", 304),
            ('If-Modified-Since', "Sun, 30 Nov 2025 10:00:00 GMT", 200), ('If-Modified-Since', "yesterday", 200),
        ]
        for name, value, want in cases:
            r = get(s, "/c/cond", [(name, value)])
            got = (r.status, xcs(r), r.body if want == 200 else b"")
            t.check("a HIT with %s: %s answers %d from the entry" % (name, value, want),
                    got == (want, "HIT", b"cond #1" if want == 200 else b"") and r.body == (b"cond #1" if want == 200 else b""),
                    (want, "HIT"), (r.status, xcs(r), r.body))
        r = get(s, "/c/cond", [("If-None-Match", '"v2"'), ("If-Modified-Since", lm)])
        t.check("If-None-Match that does not match wins over a matching If-Modified-Since: 200",
                r.status == 200, 200, r.status)
        r = get(s, "/c/cond", [("If-None-Match", '"v1"')])
        t.check("the 304 keeps ETag and Last-Modified, drops Content-Type",
                (r.header("ETag"), r.header("Last-Modified"), r.header("Content-Type")) == ('"v1"', lm, None),
                ('"v1"', lm, None), (r.header("ETag"), r.header("Last-Modified"), r.header("Content-Type")))
        t.check("... and the upstream was asked once", up.count("/c/cond") == 1, 1, up.count("/c/cond"))

        # A MISS fetches the whole representation (as nginx's cache): a revalidating or
        # ranged client would otherwise get the upstream's 304/206 and nothing be stored.
        def conditional_origin(req, n):
            if req.header("If-None-Match") == '"v1"' or req.header("If-Modified-Since"):
                return h.Response(304, b"", [("ETag", '"v1"')])
            if req.header("Range"):
                return h.Response(206, b"mi", [("Content-Range", "bytes 0-1/8"), ("ETag", '"v1"')])
            return h.Response(200, b"miss #%d" % n, [("ETag", '"v1"')])
        up.answers["/c/m304"] = up.answers["/c/m206"] = conditional_origin
        a = get(s, "/c/m304", [("If-None-Match", '"v1"'), ("If-Modified-Since", lm)])
        b = get(s, "/c/m304")
        t.check("a MISS with If-None-Match: the upstream is asked without it, the 200 is stored",
                (a.status, xcs(a), b.status, xcs(b), b.body) == (200, "MISS", 200, "HIT", b"miss #1"),
                (200, "MISS", 200, "HIT", b"miss #1"), (a.status, xcs(a), b.status, xcs(b), b.body))
        a = get(s, "/c/m206", [("Range", "bytes=0-1")])
        b = get(s, "/c/m206")
        t.check("a MISS with Range: the upstream is asked for the whole body, which is stored",
                (a.status, xcs(a), b.status, xcs(b), b.body) == (200, "MISS", 200, "HIT", b"miss #1"),
                (200, "MISS", 200, "HIT", b"miss #1"), (a.status, xcs(a), b.status, xcs(b), b.body))
    finally:
        s.stop()
        up.stop()


def test_collapsed_misses(t):
    up = Upstream()
    up.answers["/c/slow"] = lambda req, n: h.Response(200, b"slow #%d" % n, delay=0.3)
    s = start(t, up, workers=2)
    try:
        results = [None] * 100
        took = [None] * 100
        go = threading.Barrier(100)

        def one(i):
            try:
                go.wait()
                t0 = time.monotonic()
                r = get(s, "/c/slow")
                took[i] = time.monotonic() - t0
                results[i] = (r.status, r.body)
            except Exception as e:  # noqa: BLE001
                results[i] = ("error", str(e))

        ths = [threading.Thread(target=one, args=(i,)) for i in range(100)]
        for x in ths:
            x.start()
        for x in ths:
            x.join(30)
        ok = sum(1 for r in results if r == (200, b"slow #1"))
        t.check("100 concurrent misses of one key (2 workers): all answered with the one response",
                ok == 100, 100, (ok, [r for r in results if r != (200, b"slow #1")][:3]))
        t.check("... from exactly 1 upstream request", up.count("/c/slow") == 1, 1, up.count("/c/slow"))
        ts = sorted(x for x in took if x is not None)
        med = ts[len(ts) // 2] if ts else None
        # the upstream takes 0.3 s; a waiter's timer would wake it only after 1 s: the
        # doorbell (rung by whichever worker stored the response) wakes them at once
        t.check("the waiters, on both workers, are woken when the response is stored (median < 0.7 s)",
                med is not None and med < 0.7, "< 0.7 s", med)
    finally:
        s.stop()
        up.stop()


def test_not_stored(t):
    up = Upstream()
    for name, cc in (("private", "private"), ("nostore", "no-store"), ("nocache", "no-cache"),
                     ("privmax", "max-age=60, private")):
        up.answers["/c/" + name] = (lambda cc: lambda req, n: h.Response(
            200, b"x%d" % n, [("Cache-Control", cc)]))(cc)
    up.answers["/c/cookie"] = lambda req, n: h.Response(200, b"c%d" % n, [("Set-Cookie", "s=%d" % n)])
    up.answers["/k/cookie"] = lambda req, n: h.Response(200, b"c%d" % n, [("Set-Cookie", "s=%d" % n)])
    up.answers["/c/teapot"] = lambda req, n: h.Response(418, b"t%d" % n)
    up.answers["/c/maxage"] = lambda req, n: h.Response(200, b"m%d" % n, [("Cache-Control", "max-age=1")])
    s = start(t, up)
    try:
        for name in ("private", "nostore", "nocache", "privmax", "cookie", "teapot"):
            a, b = get(s, "/c/" + name), get(s, "/c/" + name)
            t.check("%s: never stored (BYPASS twice, the upstream asked twice)" % name,
                    (xcs(a), xcs(b), up.count("/c/" + name)) == ("BYPASS", "BYPASS", 2),
                    ("BYPASS", "BYPASS", 2), (xcs(a), xcs(b), up.count("/c/" + name)))
        a, b = get(s, "/k/cookie"), get(s, "/k/cookie")
        t.check("cache_set_cookie: a Set-Cookie response is stored and replayed",
                (xcs(a), xcs(b), b.header("Set-Cookie")) == ("MISS", "HIT", "s=1"), ("MISS", "HIT", "s=1"),
                (xcs(a), xcs(b), b.header("Set-Cookie")))
        a, b = get(s, "/c/maxage"), get(s, "/c/maxage")
        time.sleep(1.2)
        c = get(s, "/c/maxage")
        t.check("max-age=1 overrides ttl 60s: HIT then EXPIRED after 1 s",
                (xcs(a), xcs(b), xcs(c), c.body) == ("MISS", "HIT", "EXPIRED", b"m2"),
                ("MISS", "HIT", "EXPIRED", b"m2"), (xcs(a), xcs(b), xcs(c), c.body))
    finally:
        s.stop()
        up.stop()


def test_expiry_and_stale(t):
    up = Upstream()
    state = {"fail": False}
    up.answers["/s/x"] = lambda req, n: (h.Response(503, b"down") if state["fail"]
                                         else h.Response(200, b"fresh #%d" % n))
    s = start(t, up)
    try:
        a = get(s, "/s/x")
        time.sleep(1.2)
        b = get(s, "/s/x")
        c = get(s, "/s/x")
        t.check("ttl 1s: MISS, then EXPIRED (fetched again), then HIT",
                (xcs(a), xcs(b), b.body, xcs(c), c.body) == ("MISS", "EXPIRED", b"fresh #2", "HIT", b"fresh #2"),
                "MISS EXPIRED HIT", (xcs(a), xcs(b), b.body, xcs(c), c.body))
        time.sleep(1.2)
        state["fail"] = True
        d = get(s, "/s/x")
        t.check("stale_if_error: an upstream 503 is answered with the stale entry (STALE)",
                (d.status, xcs(d), d.body) == (200, "STALE", b"fresh #2"), (200, "STALE", b"fresh #2"),
                (d.status, xcs(d), d.body))
        up.stop()
        e = get(s, "/s/x")
        t.check("stale_if_error: a refused upstream too", (e.status, xcs(e), e.body) == (200, "STALE", b"fresh #2"),
                (200, "STALE", b"fresh #2"), (e.status, xcs(e), e.body))
        f = get(s, "/c/never-seen")
        t.check("without a stale entry the failure goes through", f.status in (502, 503), "502", f.status)
        ms = metrics(s)
        t.check("STALE is counted", h.metric_values(ms, "sluice_cache_total", route="short", status="STALE") == [2.0],
                [2.0], h.metric_values(ms, "sluice_cache_total", route="short", status="STALE"))
    finally:
        s.stop()
        up.stop()


def test_vary(t):
    up = Upstream()
    up.answers["/c/v"] = lambda req, n: h.Response(
        200, b"%s #%d" % ((req.header("Accept-Language") or "none").encode(), n), [("Vary", "Accept-Language")])
    s = start(t, up, extra_routes="""\
  - name: cvary
    match: { paths: [/cv/] }
    upstream: origin
    plugins: [ { name: proxy-cache, config: { vary: [Accept-Language] } } ]
""")
    try:
        en1 = get(s, "/c/v", [("Accept-Language", "en")])
        fr1 = get(s, "/c/v", [("Accept-Language", "fr")])
        en2 = get(s, "/c/v", [("Accept-Language", "en")])
        fr2 = get(s, "/c/v", [("Accept-Language", "fr")])
        got = [(xcs(r), r.body) for r in (en1, fr1, en2, fr2)]
        want = [("MISS", b"en #1"), ("MISS", b"fr #2"), ("HIT", b"en #1"), ("HIT", b"fr #2")]
        t.check("Vary: Accept-Language keeps one entry per language", got == want, want, got)
        def de_it(path):
            rs = [get(s, path, [("Accept-Language", "de"), ("Accept-Language", "it")]),
                  get(s, path, [("Accept-Language", "de")]), get(s, path, [("Accept-Language", "de, it")])]
            return [(xcs(r), r.body) for r in rs]
        got, want = de_it("/c/v"), [("MISS", b"de #3"), ("MISS", b"de #4"), ("HIT", b"de #3")]
        t.check("Vary selects on every field of the header: two fields 'de' + 'it' are 'de, it', not 'de'",
                got == want, want, got)
        up.answers["/cv/v"] = lambda req, n: h.Response(200, b"%s #%d" % (req.header("Accept-Language").encode(), n))
        got, want = de_it("/cv/v"), [("MISS", b"de #1"), ("MISS", b"de #2"), ("HIT", b"de #1")]
        t.check("config vary: [Accept-Language] keys on every field too, as the upstream's Vary does",
                got == want, want, got)
    finally:
        s.stop()
        up.stop()


def test_purge(t):
    up = Upstream()
    s = start(t, up)
    try:
        get(s, "/c/p1")
        get(s, "/c/p2")
        r = admin(s, "DELETE", "/cache?key=" + urllib.parse.quote("GET 127.0.0.1/c/p1"), token=None)
        t.check("DELETE /cache needs the admin token", r.status == 401, 401, r.status)
        r = admin(s, "DELETE", "/cache?key=" + urllib.parse.quote("GET 127.0.0.1/c/p1"))
        t.check("DELETE /cache?key=... purges that key", (r.status, r.json().get("purged")) == (200, 1), (200, 1),
                (r.status, r.body))
        a, b = get(s, "/c/p1"), get(s, "/c/p2")
        t.check("... the purged key misses, the other still hits", (xcs(a), xcs(b)) == ("MISS", "HIT"),
                ("MISS", "HIT"), (xcs(a), xcs(b)))
        r = admin(s, "DELETE", "/cache?route=cached")
        t.check("DELETE /cache?route=NAME purges the route's entries", (r.status, r.json().get("purged")) == (200, 2),
                (200, 2), (r.status, r.body))
        a = get(s, "/c/p2")
        t.check("... then its keys miss", xcs(a) == "MISS", "MISS", xcs(a))
        r = admin(s, "DELETE", "/cache")
        t.check("DELETE /cache without key/route/all: 400", r.status == 400, 400, r.status)
    finally:
        s.stop()
        up.stop()


GIB = 1 << 30


def test_big_bodies(t):
    up = Upstream()
    piece = b"z" * (256 << 10)
    up.answers["/big/gib"] = lambda req, n: h.Response(200, stream=(piece for _ in range(GIB // len(piece))),
                                                       length=GIB)
    up.answers["/big/chunked"] = lambda req, n: h.Response(200, stream=(piece for _ in range(8)))
    s = start(t, up)
    try:
        rss0 = s.rss_kb()
        c = h.Client(s.port(), timeout=60)
        got = [0]

        def sink(p):
            got[0] += len(p)

        c.send(h.build_request("GET", "/big/gib"))
        r = c.read_response("GET", sink=sink)
        c.close()
        n = got[0]
        hwm = s.hwm_kb()
        t.check("a 1 GiB body streams through whole", n == GIB, GIB, n)
        t.check("... with bounded memory (peak RSS < start + 64 MiB)", hwm < rss0 + 64 * 1024, rss0 + 64 * 1024, hwm)
        t.check("... and is not stored (BYPASS: Content-Length over max_body)", xcs(r) == "BYPASS", "BYPASS", xcs(r))
        a, b = get(s, "/big/chunked"), get(s, "/big/chunked")
        t.check("a chunked body over max_body streams whole and is not stored",
                (len(a.body), len(b.body), up.count("/big/chunked")) == (2 << 20, 2 << 20, 2),
                (2 << 20, 2 << 20, 2), (len(a.body), len(b.body), up.count("/big/chunked")))
        ms = metrics(s)
        t.check("nothing of them is in the store", h.metric_values(ms, "sluice_cache_bytes") == [0.0], [0.0],
                h.metric_values(ms, "sluice_cache_bytes"))
    finally:
        s.stop()
        up.stop()


def test_size_bound(t):
    up = Upstream()
    body = b"q" * (100 << 10)
    s = start(t, up, size="1MiB")
    for i in range(60):
        up.answers["/c/fill%d" % i] = lambda req, n: h.Response(200, body)
    try:
        rss0 = s.rss_kb()
        worst = 0
        for i in range(60):
            get(s, "/c/fill%d" % i)
            if i % 10 == 9:
                v = h.metric_values(metrics(s), "sluice_cache_bytes")[0]
                worst = max(worst, v)
        t.check("filling 6 MiB into a 1 MiB store: sluice_cache_bytes never above 1 MiB",
                0 < worst <= 1 << 20, "<= 1048576", worst)
        last, first = get(s, "/c/fill59"), get(s, "/c/fill0")
        t.check("the most recent entry hits, the oldest was evicted", (xcs(last), xcs(first)) == ("HIT", "MISS"),
                ("HIT", "MISS"), (xcs(last), xcs(first)))
        # a reload with a smaller size evicts down to it at once, and keeps what fits
        with open(s.config_path) as f:
            text = f.read()
        with open(s.config_path, "w") as f:
            f.write(text.replace("cache: { size: 1MiB }", "cache: { size: 300KiB }"))
        r = admin(s, "POST", "/reload")
        after = h.metric_values(metrics(s), "sluice_cache_bytes")[0]
        hit = get(s, "/c/fill59")
        t.check("a reload to cache.size 300KiB evicts down to it and keeps the most recent",
                (r.status, after <= 300 * 1024, after > 0, xcs(hit)) == (200, True, True, "HIT"),
                (200, "<= 307200", "HIT"), (r.status, after, xcs(hit)))
        rss = s.rss_kb()
        if SANITIZED:
            t.info("RSS grew by %d KiB (not checked under ASan: its quarantine keeps evicted entries)" % (rss - rss0))
        else:
            t.check("RSS grew by less than 8 MiB", rss - rss0 < 8 * 1024, "< 8192 KiB", rss - rss0)
    finally:
        s.stop()
        up.stop()


def test_http2(t):
    up = Upstream()
    s = start(t, up)
    try:
        outs = []
        for _ in range(2):
            p = subprocess.run(["curl", "-s", "-i", "--http2-prior-knowledge", "http://127.0.0.1:%d/c/h2" % s.port()],
                               capture_output=True, text=True, timeout=10)
            outs.append(p.stdout)
        first = "x-cache-status: MISS" in outs[0].lower().replace("miss", "MISS")
        second = "x-cache-status: HIT" in outs[1].lower().replace("hit", "HIT")
        t.check("HTTP/2: MISS then HIT", first and second and outs[1].startswith("HTTP/2 200"),
                "MISS then HIT", [o[:200] for o in outs])
        t.check("... the HIT body is the stored one", outs[1].rstrip().endswith("body of /c/h2 #1"),
                "body of /c/h2 #1", outs[1][-40:])
    finally:
        s.stop()
        up.stop()


t.run(test_miss_then_hit, test_conditional, test_collapsed_misses, test_not_stored, test_expiry_and_stale, test_vary, test_purge,
      test_big_bodies, test_size_bound, test_http2)
