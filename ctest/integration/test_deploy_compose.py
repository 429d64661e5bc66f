"""deploy/compose (issue 28), tested without a Docker daemon:

  1. Debian's docker-compose accepts compose.yaml (`docker-compose config`);
  2. the file agrees with the repository: the gateways are built from its Dockerfile and
     run the image's command on the mounted gateway/sluice.yaml; every mounted file and
     secret exists; Prometheus mounts the project's alert rules where prometheus.yml's
     rule_files names them, scrapes each gateway at the config's admin port with the
     mounted secret as its token; Grafana's data source is that Prometheus at its listen
     port, its dashboard provider reads the folder the project's
     examples/observability/grafana-dashboard.json is mounted into; the config's default
     addresses are the Compose network's (backends' --listen ports, Redis's fixed IP);
     stop_grace_period exceeds shutdown_timeout;
  3. `sluice check` accepts the gateway config with the token set as Compose sets it, and
     names the variable without it; promtool accepts prometheus.yml (syntax) and the
     mounted rules;
  4. deploy/compose/run-native --check --free-ports runs the same topology on loopback
     (redis-server, the three backends, two gateways, Debian's prometheus) and asserts
     traffic, the shared Redis limit (exactly 10 of 15 across both gateways) and a
     Prometheus query answering sluice_requests_total; each of its checks is one here.
"""

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

yaml = h.debian_module("yaml")

t = h.Suite("deploy_compose", budget=60)
DIR = os.path.join(h.SRC, "deploy", "compose")
COMPOSE = os.path.join(DIR, "compose.yaml")


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def mounts(svc):
    """{container path: host path} of a service's volumes."""
    out = {}
    for v in svc.get("volumes") or []:
        src, dst = str(v).split(":")[:2]
        out[dst] = os.path.normpath(os.path.join(DIR, src))
    return out


def flag(argv, name):
    for w in argv:
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


def test_compose_config(t):
    dc = shutil.which("docker-compose")
    if not t.check("docker-compose installed (Debian: docker-compose)", dc, "a path", dc):
        return
    p = subprocess.run([dc, "-f", COMPOSE, "config", "-q"], capture_output=True, text=True, timeout=30,
                       cwd=DIR)
    t.check("docker-compose config accepts compose.yaml", p.returncode == 0, 0, p.stdout + p.stderr)
    p = subprocess.run([dc, "-f", COMPOSE, "config", "--services"], capture_output=True, text=True,
                       timeout=30, cwd=DIR)
    services = set(p.stdout.split())
    want = {"sluice-1", "sluice-2", "backend-1", "backend-2", "backend-3", "redis", "prometheus", "grafana"}
    t.check("services: two gateways, three backends, redis, prometheus, grafana", services == want,
            sorted(want), sorted(services))


def test_files_agree(t):
    doc = load(COMPOSE)
    svcs = doc["services"]
    gws = [n for n, s in svcs.items() if "build" in s]
    t.check("two gateways built from the repository", len(gws) == 2, 2, gws)
    conf_path = os.path.join(DIR, "gateway", "sluice.yaml")
    conf_text = open(conf_path).read()
    conf = load(conf_path)
    for gw in gws:
        s = svcs[gw]
        b = s["build"]
        t.check("%s: build context is the repository, with its Dockerfile" % gw,
                os.path.realpath(os.path.join(DIR, b["context"])) == os.path.realpath(h.SRC)
                and os.path.exists(os.path.join(h.SRC, b.get("dockerfile", "Dockerfile"))), h.SRC, b)
        cfg_in = s["command"][-1]
        m = mounts(s)
        host = m.get(os.path.dirname(cfg_in))
        t.check("%s: runs the image's command on the mounted gateway/sluice.yaml" % gw,
                s["command"] == ["run", "-c", "/etc/sluice/sluice.yaml"] and host
                and os.path.join(host, os.path.basename(cfg_in)) == conf_path, conf_path, (s["command"], m))
        grace = re.fullmatch(r"(\d+)s", str(s.get("stop_grace_period", "10s")))
        shut = re.fullmatch(r"(\d+)s", str(conf.get("shutdown_timeout", "30s")))
        t.check("%s: stop_grace_period > shutdown_timeout" % gw,
                grace and shut and int(grace.group(1)) > int(shut.group(1)),
                "> %s" % conf.get("shutdown_timeout"), s.get("stop_grace_period"))
        t.check("%s: the token's secret reaches admin.token_env's variable" % gw,
                "admin-token" in s.get("secrets", []) and
                ("export %s=" % conf["admin"]["token_env"]) in " ".join(s["entrypoint"]),
                conf["admin"]["token_env"], s.get("entrypoint"))

    for name, s in svcs.items():
        for dst, src in mounts(s).items():
            t.check("%s: mounted %s exists" % (name, os.path.relpath(src, h.SRC)), os.path.exists(src), src, None)
    for name, sec in doc["secrets"].items():
        t.check("secret %s's file exists" % name, os.path.exists(os.path.join(DIR, sec["file"])), sec, None)

    # Addresses: the config's defaults are the Compose network's.
    defaults = dict(re.findall(r"\$\{(\w+):-([^}]*)\}", "\n".join(
        ln.split("#", 1)[0] for ln in conf_text.splitlines())))
    backends = {n: s["command"][s["command"].index("--listen") + 1] for n, s in svcs.items()
                if n.startswith("backend-")}
    targets = sorted(d for v, d in defaults.items() if v.startswith("BACKEND_"))
    t.check("the upstream's targets are the three backends at their --listen ports",
            targets == sorted("%s:%s" % (n, a.rsplit(":", 1)[1]) for n, a in backends.items()),
            sorted(backends.items()), targets)
    redis_ip = svcs["redis"]["networks"]["default"]["ipv4_address"]
    t.check("redis.address is the redis service's fixed address and port",
            defaults.get("REDIS_ADDR") == "%s:%s" % (redis_ip, svcs["redis"]["command"][
                svcs["redis"]["command"].index("--port") + 1]), redis_ip, defaults.get("REDIS_ADDR"))
    admin_port = defaults["SLUICE_ADMIN_LISTEN"].rsplit(":", 1)[1]
    web_port = defaults["SLUICE_LISTEN"].rsplit(":", 1)[1]
    for gw in gws:
        published = [str(p).split(":")[-1] for p in svcs[gw]["ports"]]
        t.check("%s publishes the config's listener and admin ports" % gw,
                sorted(published) == sorted([web_port, admin_port]), [web_port, admin_port], published)

    # Prometheus: the project's rules, both gateways, the token.
    ps = svcs["prometheus"]
    pm = mounts(ps)
    prom_cfg_path = pm.get(flag(ps["command"], "--config.file"))
    t.check("prometheus runs the mounted prometheus.yml", prom_cfg_path == os.path.join(DIR, "prometheus.yml"),
            "deploy/compose/prometheus.yml", prom_cfg_path)
    prom = load(os.path.join(DIR, "prometheus.yml"))
    rules = [pm.get(r) for r in prom.get("rule_files", [])]
    t.check("rule_files is the project's examples/observability/sluice-alerts.yml, mounted",
            rules == [os.path.join(h.SRC, "examples", "observability", "sluice-alerts.yml")], None, rules)
    sc = prom["scrape_configs"][0]
    tgts = sorted(tg for st in sc["static_configs"] for tg in st["targets"])
    t.check("prometheus scrapes each gateway at the config's admin port",
            tgts == sorted("%s:%s" % (g, admin_port) for g in gws), gws, tgts)
    cred = sc.get("authorization", {}).get("credentials_file")
    t.check("prometheus sends the admin token from the mounted secret",
            cred and cred == "/run/secrets/" + ps["secrets"][0] and ps["secrets"][0] in doc["secrets"], None, cred)

    # Grafana: the data source is that Prometheus; the dashboard is the project's file.
    gs = svcs["grafana"]
    gm = mounts(gs)
    prov = gm.get("/etc/grafana/provisioning")
    t.check("grafana mounts grafana/provisioning", prov == os.path.join(DIR, "grafana", "provisioning"), None, prov)
    ds = load(os.path.join(DIR, "grafana", "provisioning", "datasources", "prometheus.yaml"))["datasources"]
    listen = flag(ps["command"], "--web.listen-address")
    t.check("grafana's default data source is the prometheus service at its listen port",
            len(ds) == 1 and ds[0]["type"] == "prometheus" and ds[0].get("isDefault")
            and ds[0]["url"] == "http://prometheus:%s" % listen.rsplit(":", 1)[1], listen, ds)
    prov_d = load(os.path.join(DIR, "grafana", "provisioning", "dashboards", "sluice.yaml"))["providers"]
    folder = prov_d[0]["options"]["path"]
    dash = {dst: src for dst, src in gm.items() if os.path.dirname(dst) == folder}
    t.check("the dashboard provider's folder holds the project's grafana-dashboard.json (mounted, not a copy)",
            list(dash.values()) == [os.path.join(h.SRC, "examples", "observability", "grafana-dashboard.json")],
            folder, gm)
    home = gs.get("environment", {}).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    t.check("grafana's home dashboard is that file", home in dash, list(dash), home)
    t.check("no copy of the dashboard under deploy/", not any(
        f.endswith(".json") for _, _, fs in os.walk(DIR) for f in fs), None, None)


def test_checks(t):
    conf = os.path.join(DIR, "gateway", "sluice.yaml")
    env = dict(os.environ, SLUICE_ADMIN_TOKEN=open(os.path.join(DIR, "secrets", "admin-token")).read().strip())
    p = subprocess.run([h.BIN, "check", "-c", conf], capture_output=True, text=True, timeout=30, env=env)
    t.check("`sluice check` accepts gateway/sluice.yaml with the token set", p.returncode == 0, 0, p.stdout + p.stderr)
    env.pop("SLUICE_ADMIN_TOKEN")
    p = subprocess.run([h.BIN, "check", "-c", conf], capture_output=True, text=True, timeout=30, env=env)
    t.check("without the token it names the variable", p.returncode != 0 and "SLUICE_ADMIN_TOKEN" in p.stderr,
            "SLUICE_ADMIN_TOKEN", p.stderr)
    promtool = shutil.which("promtool")
    if not t.check("promtool installed (Debian: prometheus)", promtool, "a path", promtool):
        return
    for args in (["check", "config", "--syntax-only", os.path.join(DIR, "prometheus.yml")],
                 ["check", "rules", os.path.join(h.SRC, "examples", "observability", "sluice-alerts.yml")]):
        p = subprocess.run([promtool] + args, capture_output=True, text=True, timeout=30)
        t.check("promtool %s" % " ".join(args[:2] + [os.path.relpath(args[-1], h.SRC)]), p.returncode == 0, 0,
                p.stdout + p.stderr)


class Native:
    """run-native as a process the suite's cleanup stops (its children die with it)."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(DIR, "run-native"), "--check", "--free-ports", "--sluice", h.BIN],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
            preexec_fn=h._die_with_parent)
        self.pid = self.proc.pid
        h._register(self)

    def stop(self, timeout=10):
        return h.stop_process(self, timeout)


def test_native(t):
    n = Native()
    out, _ = n.proc.communicate(timeout=45)
    h._unregister(n)
    for m in re.finditer(r"^(PASS|FAIL)  (.*)(?:\n      expected: (.*)\n      actual:   (.*))?", out, re.M):
        t.check("run-native: " + m.group(2), m.group(1) == "PASS", m.group(3), m.group(4))
    t.check("run-native --check exits 0 with `N passed, 0 failed`",
            n.proc.returncode == 0 and re.search(r"^\d+ passed, 0 failed$", out, re.M), 0, out[-3000:])


t.run(test_compose_config, test_files_agree, test_checks, test_native)
