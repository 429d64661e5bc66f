"""Headless Chromium (Debian's) through sluice's TLS listener: a page with 50 subresources
(25 PNG images, 25 scripts) served by nginx. The page counts its subresources' load events,
then fetches each subresource again (no cache) and compares its SHA-256 (WebCrypto) with the
one the test wrote into the page, and reads the protocol of every resource from the
Resource Timing API; it writes the result into document.title, which `--dump-dom` prints.

The test CA is not installed: Chromium trusts the leaf through
--ignore-certificate-errors-spki-list (its SPKI hash), which needs --user-data-dir. As root
Chromium needs --no-sandbox. Host names resolve nowhere (--host-resolver-rules) and
background networking is off, so the browser's traffic stays on loopback."""

import base64
import hashlib
import json
import os
import re
import struct
import sys
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
    document.title = "RESULT " + JSON.stringify({ loaded: loaded, failed: failed,
      mismatch: mismatch.filter(function (x) { return x; }), checked: urls.length, protocols: protos });
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


@io.case("h2.page_50", "headless Chromium loads a page over TLS from sluice with 25 images and 25 "
         "scripts (nginx behind): all 50 load events fire, each subresource fetched again is "
         "SHA-256-exact in the browser, every resource came over h2, and sluice served them all "
         "on at most 2 connections", budget=120)
def page_50(t):
    io.need(t, "chromium", "openssl")
    root = io.h.new_tmpdir("www")
    want, body = {}, []
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
        f.write(PAGE % {"want": json.dumps(want), "body": "\n".join(body)})
    _, (p,) = io.nginx(t, root, ["types { text/html html; image/png png; application/javascript js; }"])
    c = io.certs(t)
    s = io.l7(t, io.upstream("127.0.0.1:%d" % p), workers=1, tls=c["localhost"])

    before = sum(w["connections"] for w in s.status()["workers"])
    profile = io.h.new_tmpdir("chromium-profile")
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--user-data-dir=" + profile, "--ignore-certificate-errors-spki-list=" + spki_hash(c["localhost"][0]),
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
            "--disable-domain-reliability", "--no-pings", "--metrics-recording-only",
            "--disable-features=MediaRouter,OptimizationHints,Translate,AutofillServerCommunication",
            "--virtual-time-budget=30000", "--timeout=60000", "--dump-dom",
            "https://127.0.0.1:%d/index.html" % s.port("tls")]
    r = io.run(argv, timeout=100, env=dict(os.environ, HOME=profile))
    dom = r.stdout.decode(errors="replace")
    m = re.search(r"<title>RESULT (.*?)</title>", dom, re.S)
    try:
        res = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")) if m else {}
    except ValueError:
        res = {}
    t.check("Chromium ran and the page finished (its title holds the result)", r.returncode == 0 and res,
            "exit 0, RESULT title", "exit %d, title %s; stderr %s" % (
                r.returncode, re.findall(r"<title>.*?</title>", dom)[:1], r.stderr.decode(errors="replace")[-600:]))
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
    t.check("sluice served the page, the 50 and the 50 fetches (>= 101 answers of 200) on at most 2 "
            "connections (HTTP/1.1 would take about 6)", reqs >= 101 and 1 <= conns <= 2,
            ">= 101 on 1-2 connections", "%s answers on %d connections" % (reqs, conns))


if __name__ == "__main__":
    io.main()
