"""examples/observability: every metric name the alert rules and the Grafana dashboard use
is one sluice exports. The names are taken from a real scrape: a sluice with an upstream
(breaker, retries, probes), a rate-limited route and a plugin that raises gets traffic,
a 5xx, a retry and a rejected reload, then /metrics is read; a name used by the examples
and missing from the scrape fails the test. With promtool installed (Debian: prometheus)
the scrape config and rules are checked, the rules' unit tests run, and every dashboard
query is parsed as PromQL.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("observability", budget=60)
SRC = os.environ.get("SLUICE_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OBS = os.path.join(SRC, "examples", "observability")
# Names that are Prometheus' own, not sluice's.
PROMETHEUS_OWN = {"up"}

CONF = """
workers: 1
watch: false
plugin_paths: [%s]
listeners:
  - name: web
    listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
upstreams:
  - name: api
    targets: [ { address: %s }, { address: 127.0.0.1:1 } ]
    circuit_breaker: { failure_ratio: 0.5, min_requests: 20, window: 30s }
    health: { passive: { max_failures: 5, window: 10s } }
    retry: { attempts: 2, on: [connect_error, 502] }
routes:
  - name: limited
    match: { paths: [/limited] }
    plugins: [ { name: rate-limit, config: { rate: 1, per: 1m, key: ip } }, { name: echo } ]
  - name: boom
    match: { paths: [/boom] }
    plugins: [ { name: boom } ]
  - name: api
    match: { paths: [/] }
    upstream: api
"""

BOOM = """
return { name = "boom", version = "1.0", schema = {},
         access = function(conf, ctx) error("boom") end }
"""


def used_names():
    """{file: set of metric names} the rules and the dashboard's queries use."""
    rules = open(os.path.join(OBS, "sluice-alerts.yml")).read()
    exprs = {"sluice-alerts.yml": [m.group(1) for m in re.finditer(r"expr:\s*\|?\s*((?:.|\n)*?)\n\s*(?:for|labels):", rules)]}
    dash = json.load(open(os.path.join(OBS, "grafana-dashboard.json")))
    exprs["grafana-dashboard.json"] = [tg["expr"] for p in dash["panels"] for tg in p.get("targets", [])]
    v = dash["templating"]["list"]
    exprs["grafana-dashboard.json"] += [x["definition"] for x in v if x.get("type") == "query"]
    out = {}
    for f, es in exprs.items():
        names = set()
        for e in es:
            e = re.sub(r'"[^"]*"', '""', e)  # label values are not metric names
            names |= {n for n in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b\s*(?=[{\[)\s,]|$)", e)
                      if n.startswith("sluice_") or n in PROMETHEUS_OWN}
        out[f] = (names, es)
    return out


def test_names_exported(t):
    up = h.MockUpstream(lambda req: h.Response(502 if req.path.startswith("/bad") else 200, b"ok"))
    d = tempfile.mkdtemp(dir=h.tmp_root())
    os.makedirs(os.path.join(d, "plugins"))
    with open(os.path.join(d, "plugins", "boom.lua"), "w") as f:
        f.write(BOOM)
    s = h.start_sluice(CONF % (os.path.join(d, "plugins"), up.address), suite=t, name="obs")
    for path in ["/"] * 6 + ["/bad"] * 4 + ["/limited", "/limited", "/boom"]:
        h.request(s.port(), "GET", path)
    with open(s.config_path, "a") as f:
        f.write("not_a_key: 1\n")
    code, _ = s.reload()
    t.check("a rejected reload (for sluice_reloads_total{result=rejected})", code == 422, 422, code)
    used = sorted(used_names().items())
    labels = ('sluice_reloads_total{result="rejected"} 1', 'result="limited"', 'code="5')
    scrape = {}

    def complete():
        # the last request is counted once its response is written: poll, never read once
        text = scrape["text"] = s.admin_get("/metrics").body.decode()
        scraped = scrape["names"] = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))
        return all(n in scraped or n in PROMETHEUS_OWN for _, (names, _) in used for n in names) and \
            all(label in text for label in labels)
    h.wait_until(complete)
    text, scraped = scrape["text"], scrape["names"]
    t.info("scraped %d series names" % len(scraped))
    for f, (names, _) in used:
        t.check("%s uses sluice metrics (found %d)" % (f, len(names)), len(names) >= 5, ">= 5", sorted(names))
        missing = sorted(n for n in names if n not in scraped and n not in PROMETHEUS_OWN)
        t.check("%s: every metric name is one sluice exports" % f, not missing, "none missing", missing)
    for label in labels:
        t.check("scrape holds %s" % label, label in text, label, None)
    s.stop()
    up.stop()


def test_rule_coverage(t):
    rules = open(os.path.join(OBS, "sluice-alerts.yml")).read()
    alerts = re.findall(r"^\s*- alert:\s*(\S+)", rules, re.M)
    for want in ("SluiceDown", "SluiceUpstreamTargetDown", "SluiceCircuitBreakerOpen", "SluiceHigh5xxRatio",
                 "SluiceConfigRejected"):
        t.check("alert %s defined" % want, want in alerts, want, alerts)


def test_promtool(t):
    promtool = shutil.which("promtool")
    if not promtool:
        t.info("promtool not installed (Debian: prometheus): syntax checks skipped")
        return
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "sluice-alerts.yml"],
                 ["test", "rules", "sluice-alerts.test.yml"]):
        p = subprocess.run([promtool] + args, cwd=OBS, capture_output=True, text=True, timeout=60)
        t.check("promtool %s" % " ".join(args), p.returncode == 0, 0, p.stdout + p.stderr)
    # The dashboard's queries, with Grafana's variables given values, as recording rules.
    d = tempfile.mkdtemp(dir=h.tmp_root())
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    panel_exprs = [e for e in used_names()["grafana-dashboard.json"][1] if not e.startswith("label_values(")]
    for i, e in enumerate(panel_exprs):
        e = e.replace("$__rate_interval", "5m").replace("$instance", ".*")
        rules += ["      - record: dashboard_query_%d" % i, "        expr: %s" % json.dumps(e)]
    path = os.path.join(d, "dashboard.rules.yml")
    with open(path, "w") as f:
        f.write("\n".join(rules) + "\n")
    p = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True, timeout=60)
    t.check("every dashboard query parses as PromQL", p.returncode == 0, 0, p.stdout + p.stderr)


t.run(test_names_exported, test_rule_coverage, test_promtool)
