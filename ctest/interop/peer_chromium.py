"""Headless Chromium (Debian's) through sluice's TLS listener. A page with 50 subresources
(25 PNG images, 25 scripts) served by nginx: it counts its subresources' load events, then
fetches each again (no cache) and compares its SHA-256 (WebCrypto) with the one the test
wrote into the page, and reads every resource's protocol from the Resource Timing API. A
page that opens a wss:// WebSocket through sluice to a websockets echo server. Each page
POSTs its findings as JSON to /result, a route to a recorder (MockUpstream) the test reads.

The test CA is not installed: Chromium trusts the leaf through
--ignore-certificate-errors-spki-list (its SPKI hash), which needs --user-data-dir. As root
Chromium needs --no-sandbox. Host names resolve nowhere (--host-resolver-rules) and
background networking is off, so the browser's traffic stays on loopback."""

import asyncio
import base64
import hashlib
import json
import os
import struct
import sys
import threading
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

N_IMG, N_JS = 25, 25


def png(seed, side=48):
    """A valid RGB PNG of side x side pixels of seeded noise (about 7 KiB)."""
    raw = b"".join(b"\x00" + hashlib.shake_256(b"%d:%d" % (seed, y)).digest(side * 3) for y in range(side))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>pending</title>
<script>
%(report)s
var loaded = 0, failed = [];
function ok() { loaded++; }
function bad(what) { failed.push(what); }
var want = %(want)s;
window.addEventListener("load", function () {
  var urls = Object.keys(want);
  Promise.all(urls.map(function (u) {
    return fetch(u, { cache: "no-store" }).then(function (r) { return r.arrayBuffer(); })
      .then(function (b) { return crypto.subtle.digest("SHA-256", b); })
      .then(function (d) {
        var hex = Array.from(new Uint8Array(d)).map(function (x) {
          return x.toString(16).padStart(2, "0"); }).join("");
        return hex === want[u] ? null : u;
      }, function () { return u; });
  })).then(function (mismatch) {
    var protos = {};
    performance.getEntriesByType("resource").concat(performance.getEntriesByType("navigation"))
      .forEach(function (e) { protos[e.nextHopProtocol] = (protos[e.nextHopProtocol] || 0) + 1; });
    report({ loaded: loaded, failed: failed, mismatch: mismatch.filter(function (x) { return x; }),
             checked: urls.length, protocols: protos });
  });
});
</script></head><body>
%(body)s
</body></html>
"""


def spki_hash(crt):
    pub = io.run(["openssl", "x509", "-in", crt, "-pubkey", "-noout"]).stdout
    der = io.subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub, capture_output=True,
                            timeout=30).stdout
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


REPORT = """function report(r) {
  fetch("/result", { method: "POST", body: JSON.stringify(r), cache: "no-store" });
}"""


def gateway(t, c, upstreams, routes=""):
    """sluice's TLS listener for the browser, with the route /result to a recorder (a
    MockUpstream) where the page POSTs its result: (sluice, recorder)."""
    rec = io.h.MockUpstream(name="result")
    s = io.l7(t, upstreams + io.upstream(rec.address, "result"), workers=1, tls=c["localhost"],
              routes="  - { name: all, match: { paths: [/] }, upstream: o }\n"
                     "  - { name: result, match: { paths: [/result] }, upstream: result }\n" + routes)
    return s, rec


def www(t):
    """The folder nginx serves the case's page from (Chromium and openssl checked first)."""
    io.need(t, "chromium", "openssl")
    return io.h.new_tmpdir("www")


def browse(t, s, c, rec, path):
    """Headless Chromium on https://127.0.0.1:<sluice's tls port><path> until the page POSTs
    its result to /result (90 s at most): that JSON ({} when none came), checked to be there."""
    profile = io.h.new_tmpdir("chromium-profile")
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--user-data-dir=" + profile, "--ignore-certificate-errors-spki-list=" + spki_hash(c["localhost"][0]),
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
            "--disable-domain-reliability", "--no-pings", "--metrics-recording-only",
            "--disable-features=MediaRouter,OptimizationHints,Translate,AutofillServerCommunication",
            "https://127.0.0.1:%d%s" % (s.port("tls"), path)]
    log = os.path.join(profile, "chromium.log")
    proc = io.spawn(argv, log=log, env=dict(os.environ, HOME=profile))
    got = rec.wait_requests(1, timeout=90)
    alive = proc.alive()
    proc.stop()
    try:
        res = json.loads(rec.requests[0].body) if got else {}
    except ValueError:
        res = {}
    with open(log, errors="replace") as f:
        tail = [ln for ln in f.read().splitlines() if "dbus" not in ln.lower()][-8:]
    t.check("Chromium loaded the page and it POSTed its result", alive and res, "a result", (alive, res, tail))
    return res


@io.case("h2.page_50", "headless Chromium loads a page over TLS from sluice with 25 images and 25 scripts "
         "(nginx behind): all 50 load events fire, each subresource fetched again is SHA-256-exact in "
         "the browser, every resource came over h2, sluice served them on at most 3 connections", budget=120)
def page_50(t):
    want, body, root = {}, [], www(t)
    for i in range(N_IMG):
        data = png(i)
        with open(os.path.join(root, "i%02d.png" % i), "wb") as f:
            f.write(data)
        want["/i%02d.png" % i] = hashlib.sha256(data).hexdigest()
        body.append('<img src="/i%02d.png" onload="ok()" onerror="bad(\'i%02d\')">' % (i, i))
    for i in range(N_JS):
        # a script of ~4-20 KiB: a comment of noise, then the call that counts it
        data = ("/* %s */\nok();\n" % hashlib.shake_256(b"js%d" % i).hexdigest(2048 + i * 300)).encode()
        with open(os.path.join(root, "s%02d.js" % i), "wb") as f:
            f.write(data)
        want["/s%02d.js" % i] = hashlib.sha256(data).hexdigest()
        body.append('<script src="/s%02d.js" onerror="bad(\'s%02d\')"></script>' % (i, i))
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write(PAGE % {"want": json.dumps(want), "body": "\n".join(body), "report": REPORT})
    _, (p,) = io.nginx(t, root, ["types { text/html html; image/png png; application/javascript js; }"])
    c = io.certs(t)
    s, rec = gateway(t, c, io.upstream("127.0.0.1:%d" % p))
    before = sum(w["connections"] for w in s.status()["workers"])
    res = browse(t, s, c, rec, "/index.html")
    t.check("all 50 subresources fired their load event (25 images decoded, 25 scripts ran), none failed",
            res.get("loaded") == N_IMG + N_JS and res.get("failed") == [], 50, (res.get("loaded"), res.get("failed")))
    t.check("each of the 50, fetched again without cache, is SHA-256-exact in the browser",
            res.get("checked") == N_IMG + N_JS and res.get("mismatch") == [], "50 exact",
            (res.get("checked"), res.get("mismatch")))
    protos = res.get("protocols") or {}
    t.check("Resource Timing: every resource (page, 50, 50 fetches) came over h2",
            list(protos) == ["h2"] and protos["h2"] >= 1 + 2 * (N_IMG + N_JS), {"h2": ">= 101"}, protos)
    conns = sum(w["connections"] for w in s.status()["workers"]) - before
    _, samples = s.metrics()
    reqs = sum(io.h.metric_values(samples, "sluice_requests_total", route="all", code="200"))
    t.info("browser's protocols %s; sluice: %s answers of 200 on %d connections" % (protos, reqs, conns))
    # h2 multiplexes them on one connection (Chromium opens another for uncredentialed
    # requests such as the favicon); over HTTP/1.1 it opens 6 or more
    t.check("sluice served the page, the 50 and the 50 fetches (>= 101 answers of 200) on at most 3 "
            "connections (HTTP/1.1 takes 6 or more)", reqs >= 101 and 1 <= conns <= 3,
            ">= 101 on 1-3 connections", "%s answers on %d connections" % (reqs, conns))


WS_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>pending</title>
<script>
%(report)s
function data(n, seed) {
  var a = new Uint8Array(n), x = seed;
  for (var i = 0; i < n; i++) { x = (x * 1103515245 + 12345) & 0x7fffffff; a[i] = (x >> 16) & 255; }
  return a;
}
function text(n, seed) {
  return Array.from(data(n, seed), function (b) { return String.fromCharCode(97 + b %% 26); }).join("");
}
var sends = [], bad = [], i = 0;
[1, 65536, 1048576].forEach(function (n, k) { sends.push(text(n, k + 1)); sends.push(data(n, k + 11)); });
function same(a, b) {
  if (typeof a === "string") return a === b;
  if (!(b instanceof ArrayBuffer) || b.byteLength !== a.length) return false;
  var v = new Uint8Array(b);
  for (var j = 0; j < a.length; j++) if (v[j] !== a[j]) return false;
  return true;
}
var ws = new WebSocket("wss://" + location.host + "/ws/echo");
ws.binaryType = "arraybuffer";
ws.onopen = function () { ws.send(sends[0]); };
ws.onmessage = function (e) {
  if (!same(sends[i], e.data)) bad.push(i);
  i++;
  if (i < sends.length) ws.send(sends[i]); else ws.close(1000, "done");
};
ws.onclose = function (e) {
  report({ echoed: i, bad: bad, code: e.code, reason: e.reason, clean: e.wasClean });
};
</script></head><body></body></html>
"""


def echo_server(t):
    """A python3-websockets echo server on its own thread and loop: (port, the (code, reason)
    of each connection's close as the server saw it)."""
    io.need_modules(t, "websockets")
    import websockets
    closes, ready = [], threading.Event()
    box = {}

    async def handler(ws, path=None):
        try:
            async for m in ws:
                await ws.send(m)
        finally:
            await ws.wait_closed()
            closes.append((ws.close_code, ws.close_reason))

    async def main():
        async with websockets.serve(handler, "127.0.0.1", 0, max_size=None) as srv:
            box["port"] = srv.sockets[0].getsockname()[1]
            ready.set()
            await asyncio.Future()
    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    ready.wait(10)
    return box["port"], closes


@io.case("tls.websocket", "headless Chromium, on a page it loaded from sluice over h2, opens a "
         "wss:// WebSocket through sluice (route with upgrade: [websocket]) to a websockets echo "
         "server: text and binary of 1 B, 64 KiB, 1 MiB echoed exact in the browser, a clean "
         "close 1000 seen by both", budget=120)
def websocket(t):
    root = www(t)
    wsport, closes = echo_server(t)
    with open(os.path.join(root, "ws.html"), "w") as f:
        f.write(WS_PAGE % {"report": REPORT})
    _, (p,) = io.nginx(t, root, ["types { text/html html; }"])
    c = io.certs(t)
    s, rec = gateway(t, c, io.upstream("127.0.0.1:%d" % p) + io.upstream("127.0.0.1:%d" % wsport, "echo"),
                     "  - { name: ws, match: { paths: [/ws/] }, upstream: echo, upgrade: [websocket] }\n")
    res = browse(t, s, c, rec, "/ws.html")
    t.check("6 messages (text and binary, 1 B / 64 KiB / 1 MiB) echoed exact in the browser",
            res.get("echoed") == 6 and res.get("bad") == [], 6, (res.get("echoed"), res.get("bad")))
    for _ in range(100):
        if closes:
            break
        io.time.sleep(0.05)
    t.check("a clean close: 1000 'done' in the browser's close event and at the server",
            (res.get("code"), res.get("reason"), res.get("clean")) == (1000, "done", True)
            and closes == [(1000, "done")], "1000 done, clean, both",
            ((res.get("code"), res.get("reason"), res.get("clean")), closes))
    _, samples = s.metrics()
    got = {r: sum(io.h.metric_values(samples, "sluice_requests_total", route=r, code=k))
           for r, k in (("all", "200"), ("ws", "101"))}
    t.check("sluice served the page (200) and one upgrade that became a tunnel (101)",
            got == {"all": 1, "ws": 1}, {"all": 1, "ws": 1}, got)


if __name__ == "__main__":
    io.main()
