"""The admin listener's /ui dashboard (issue 17), in a real browser: Debian's headless
Chromium (`--dump-dom` after the page's scripts ran) loads /ui, which reads /ui/data.

1. /ui/data: the documented JSON (status, routes with counts and buckets, generations).
2. The page shows the configured routes with their upstream and counts, each target
   with its health and breaker in words, and the first generation.
3. The test kills an upstream: the page shows its target `unhealthy` (active tcp probes).
4. A rejected reload: the page shows `rejected` and the parser's error text; an applied
   one adds generation 2 with what changed.
5. With admin.token_env set, /ui answers without the token and the page asks for it
   (its form is shown); /ui/data wants the token.
A screenshot of the page is written to docs/dashboard.png when SLUICE_UI_SCREENSHOT is set.
"""

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("dashboard", budget=120)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

CONF = """
workers: 1
watch: false
admin: { listen: 127.0.0.1:0%s }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - name: api
    targets: [ { address: %s }, { address: %s } ]
    health: { active: { type: tcp, interval: 200ms, timeout: 200ms, unhealthy_threshold: 1, healthy_threshold: 1 } }
routes:
  - { name: shop, match: { paths: [/shop] }, upstream: api }
  - { name: everything-else, match: { paths: [/] }, upstream: api }
"""


def dump_dom(url, shot=None):
    d = tempfile.mkdtemp(dir=h.tmp_root())
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
            "--user-data-dir=" + d, "--virtual-time-budget=3000"]
    if shot:
        args += ["--screenshot=" + shot, "--window-size=1200,900"]
    else:
        args += ["--dump-dom"]
    p = subprocess.run(args + [url], capture_output=True, text=True, timeout=90)
    shutil.rmtree(d, ignore_errors=True)
    return p.stdout


def text_of(dom):
    return html.unescape(re.sub(r"<[^>]+>", " ", dom))


def test_dashboard(t):
    if not CHROMIUM:
        t.check("chromium installed (scripts/install-deps)", False, "chromium", None)
        return
    a = h.MockUpstream(name="a")
    b = h.MockUpstream(name="b")
    s = h.start_sluice(CONF % ("", a.address, b.address), suite=t, name="ui")
    for _ in range(6):
        h.request(s.port(), "GET", "/shop/x")
    h.request(s.port(), "GET", "/other")

    def ui_data():
        d = json.loads(s.admin_get("/ui/data").body)
        return d, {r["name"]: r for r in d["routes"]}

    def counted(routes):
        return routes.get("shop", {}).get("requests") == 6 and routes.get("everything-else", {}).get("requests") == 1

    def data_once_counted():
        d, routes = ui_data()
        return (d, routes) if counted(routes) else None

    # A request is counted once its response is written, which may be just after
    # this client has read it: poll briefly rather than read once.
    data, routes = h.wait_until(data_once_counted, 3.0) or ui_data()
    t.check("/ui/data: routes with their counts", counted(routes), (6, 1), routes)
    t.check("/ui/data: buckets cumulative, as many as bounds",
            all(len(r["buckets"]) == len(r["le"]) and r["buckets"][-1] <= r["count"] for r in data["routes"]),
            "consistent", data["routes"][0])
    t.check("/ui/data: generation 1 listed, with the config's hash",
            [(g["generation"], g["hash"]) for g in data["generations"]] == [(1, data["status"]["hash"])],
            [(1, data["status"]["hash"])], data["generations"])
    page = s.admin_get("/ui")
    t.check("/ui: a self-contained HTML page (no external src/href)",
            page.status == 200 and b"<script>" in page.body and not re.search(rb'(src|href)="(https?:)?//', page.body),
            "200, inline", page.status)

    url = "http://127.0.0.1:%d/ui" % s.admin_port
    dom = dump_dom(url)
    txt = text_of(dom)
    t.check("browser: both routes shown", "shop" in txt and "everything-else" in txt, "shop, everything-else", txt[:300])
    m = re.search(r"<tr><td>shop</td><td>api</td>(.*?)</tr>", dom)
    t.check("browser: route shop's row names its upstream and 6 requests", m and ">6<" in m.group(1), "6", m and m.group(0))
    healthy = re.findall(r'data-state="healthy">healthy<', dom)
    t.check("browser: both targets shown healthy, in words", len(healthy) == 2, 2, len(healthy))
    t.check("browser: breakers closed, in words", len(re.findall(r'>closed<', dom)) == 2, 2, None)
    t.check("browser: generation 1 (first load)", "first load" in txt, "first load", None)

    b.stop()  # its probes fail from now on
    # the probes (every 200 ms) mark it on their own time: wait for /status to say so, then
    # ask the browser (a fixed 1 s was short on a loaded machine)
    h.wait_until(lambda: any(x["address"] == b.address and x["health"] == "unhealthy"
                             for u in s.status()["upstreams"] for x in u["targets"]))
    dom = dump_dom(url)
    row = re.search(r"<tr><td>api</td><td>%s</td>(.*?)</tr>" % re.escape(b.address), dom)
    t.check("browser: the killed upstream's target shows unhealthy",
            row and 'data-state="unhealthy">unhealthy<' in row.group(1), "unhealthy", row and row.group(0))
    row_a = re.search(r"<tr><td>api</td><td>%s</td>(.*?)</tr>" % re.escape(a.address), dom)
    t.check("browser: the other stays healthy", row_a and ">healthy<" in row_a.group(1), "healthy", row_a and row_a.group(0))

    with open(s.config_path, "a") as f:
        f.write("no_such_key: 1\n")
    code, _ = s.reload()
    t.check("a rejected reload", code == 422, 422, code)
    dom = dump_dom(url)
    rej = re.search(r'<div id="rejected">(.*?)</div>', dom, re.S)
    t.check("browser: the rejected reload is shown with its error",
            rej and ">rejected<" in rej.group(1) and "no_such_key" in html.unescape(rej.group(1)), "rejected: no_such_key",
            rej and rej.group(1)[:300])
    with open(s.config_path) as f:
        text = f.read().replace("no_such_key: 1\n", "").replace("name: shop", "name: store")
    with open(s.config_path, "w") as f:
        f.write(text)
    code, _ = s.reload()
    t.check("an applied reload", code == 200, 200, code)
    dom = dump_dom(url)
    g2 = re.search(r"<tr><td>2</td><td>[0-9a-f]{16}</td><td>[^<]+</td><td>([^<]*)</td></tr>", dom)
    t.check("browser: generation 2 with what changed", g2 and "store" in g2.group(1), "route store", g2 and g2.group(0))
    shot = os.environ.get("SLUICE_UI_SCREENSHOT")
    if shot:
        for _ in range(20):
            h.request(s.port(), "GET", "/shop")
        dump_dom(url, shot=shot)
        t.info("screenshot written to %s" % shot)
    s.stop()
    a.stop()
    b.stop()


def test_token(t):
    if not CHROMIUM:
        return
    a = h.MockUpstream(name="a")
    b = h.MockUpstream(name="b")
    env = dict(os.environ, SL_TEST_ADMIN_TOKEN="ui-secret")
    s = h.start_sluice(CONF % (", token_env: SL_TEST_ADMIN_TOKEN", a.address, b.address), suite=t, name="uitoken",
                       env=env)
    page = s.admin_get("/ui")
    t.check("/ui answers without the token", page.status == 200, 200, page.status)
    t.check("/ui/data wants it", s.admin_get("/ui/data").status == 401, 401, s.admin_get("/ui/data").status)
    dom = dump_dom("http://127.0.0.1:%d/ui" % s.admin_port)
    t.check("browser: the page asks for the token (form shown)", re.search(r'<form id="auth"(?![^>]*hidden)', dom),
            "form without hidden", re.search(r'<form id="auth"[^>]*>', dom) and re.search(r'<form id="auth"[^>]*>', dom).group(0))
    s.stop()
    a.stop()
    b.stop()


t.run(test_dashboard, test_token)
