"""deploy/kubernetes (issue 28), tested without a cluster:

  1. `kubectl kustomize` renders every overlay (kustomize Components need kubectl >= 1.21);
     every component is used by an overlay;
  2. in each rendering, the Deployment agrees with the gateway config of its ConfigMap:
     the ConfigMap (no hash suffix: edits update it in place) is mounted as a folder, not
     a subPath, where `-c` reads it, and the config watches it (watch: true); the
     readiness probe asks /ready and the liveness probe /health on the named port that is
     the config's admin port; the traffic port is the listener's and the Service targets
     it; admin.token_env's variable comes from a Secret; preStop sleeps and
     terminationGracePeriodSeconds exceeds that sleep plus shutdown_timeout; the pod runs
     non-root on a read-only root filesystem without privilege escalation or capabilities;
     requests and limits are set and workers equals the CPU limit;
  3. the components agree with the base: the HPA scales that Deployment (whose replicas
     field is gone), the PDB and every Service select its pods, the ServiceMonitor selects
     the metrics Service, scrapes /metrics on its port that targets the admin port, with
     the token from the Deployment's Secret;
  4. `sluice check` accepts each rendered config with the environment the Deployment sets,
     and a sluice started on it (addresses moved to loopback) answers each probe path on
     the probe's port, and 401 to /status without the token;
  5. reload on change, as the kubelet updates a mounted ConfigMap: the config is
     FOLDER/sluice.yaml -> ..data/sluice.yaml with ..data -> ..TIMESTAMP; a new
     timestamped folder swapped in by renaming a new ..data symlink over the old one
     reloads sluice (a new generation on /status, the new route answers), and a swap to a
     config sluice rejects keeps the last one serving.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

yaml = h.debian_module("yaml")

t = h.Suite("deploy_kubernetes", budget=60)
DIR = os.path.join(h.SRC, "deploy", "kubernetes")
TOKEN = "k8s-test-admin-token"
renders = {}  # overlay -> [documents]


def seconds(v):
    m = re.fullmatch(r"(\d+)(ms|s|m)", str(v))
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)] if m else None


def one(docs, kind):
    found = [d for d in docs if d.get("kind") == kind]
    return found[0] if len(found) == 1 else None


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def test_render(t):
    kubectl = shutil.which("kubectl")
    if not t.check("kubectl installed (Debian: kubernetes-client)", kubectl, "a path", kubectl):
        return
    overlays = sorted(glob.glob(os.path.join(DIR, "overlays", "*", "kustomization.yaml")))
    t.check("overlays exist", len(overlays) >= 2, ">= 2", overlays)
    used = set()
    for k in overlays:
        d = os.path.dirname(k)
        name = os.path.basename(d)
        p = subprocess.run([kubectl, "kustomize", d], capture_output=True, text=True, timeout=30)
        hint = ""
        if "components" in p.stderr:
            hint = " (this kubectl's kustomize predates Components: kubectl >= 1.21 is needed)"
        if t.check("kubectl kustomize overlays/%s renders" % name, p.returncode == 0, 0, p.stderr + hint):
            renders[name] = [x for x in yaml.safe_load_all(p.stdout) if x]
        for c in load(k).get("components") or []:
            used.add(os.path.normpath(os.path.join(d, c)))
    comps = sorted(os.path.dirname(c) for c in glob.glob(os.path.join(DIR, "components", "*", "kustomization.yaml")))
    for c in comps:
        t.check("component %s is a kustomize Component used by an overlay" % os.path.basename(c),
                load(os.path.join(c, "kustomization.yaml")).get("kind") == "Component" and c in used, c, sorted(used))
    kinds = {x["kind"] for docs in renders.values() for x in docs}
    t.check("some overlay renders an HPA, a PDB and a ServiceMonitor",
            {"HorizontalPodAutoscaler", "PodDisruptionBudget", "ServiceMonitor"} <= kinds, None, sorted(kinds))


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def pod(docs):
    """(deployment, its container, the gateway config text, the parsed config, the ConfigMap)."""
    dep = one(docs, "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    args = c.get("args") or c.get("command") or []
    conf_path = args[args.index("-c") + 1]
    mount = [m for m in c.get("volumeMounts", []) if m["mountPath"] == os.path.dirname(conf_path)]
    vol = [v for v in dep["spec"]["template"]["spec"]["volumes"] if mount and v["name"] == mount[0]["name"]]
    cm_name = vol[0]["configMap"]["name"] if vol and "configMap" in vol[0] else None
    cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name]
    text = cm[0]["data"].get(os.path.basename(conf_path)) if cm else None
    return dep, c, conf_path, mount, text, (yaml.safe_load(text) if text else None), cm


def env_of(container):
    env = dict(os.environ)
    for e in container.get("env", []):
        env[e["name"]] = e["value"] if "value" in e else TOKEN
    return env


def port_of(container, name):
    for p in container.get("ports", []):
        if name in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    return None


def test_manifests(t):
    for name, docs in sorted(renders.items()):
        dep, c, conf_path, mount, text, conf, cm = pod(docs)
        spec = dep["spec"]["template"]["spec"]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        t.check("%s: the ConfigMap holding -c's file is mounted as a folder (no subPath), read-only" % name,
                text and mount and "subPath" not in mount[0] and mount[0].get("readOnly"), conf_path, mount)
        if not conf:
            continue
        t.check("%s: the ConfigMap's name has no hash suffix (edits update it in place)" % name,
                cm[0]["metadata"]["name"] == "sluice-config", "sluice-config", cm[0]["metadata"]["name"])
        t.check("%s: the config watches its folder (watch: true)" % name, conf.get("watch", True) is True, True,
                conf.get("watch"))
        admin_port = int(str(conf["admin"]["listen"]).rsplit(":", 1)[1])
        web_port = int(str(conf["listeners"][0]["listen"]).rsplit(":", 1)[1])
        for probe, path in (("readinessProbe", "/ready"), ("livenessProbe", "/health")):
            g = (c.get(probe) or {}).get("httpGet") or {}
            t.check("%s: %s asks %s on the config's admin port" % (name, probe, path),
                    g.get("path") == path and port_of(c, g.get("port")) == admin_port, (path, admin_port),
                    (g.get("path"), port_of(c, g.get("port"))))
        t.check("%s: the admin API listens off loopback for the probes, with a token" % name,
                str(conf["admin"]["listen"]).startswith("0.0.0.0:") and conf["admin"].get("token_env"), None,
                conf["admin"])
        tok = [e for e in c.get("env", []) if e["name"] == conf["admin"].get("token_env")]
        t.check("%s: admin.token_env's variable comes from a Secret" % name,
                tok and "secretKeyRef" in tok[0].get("valueFrom", {}), conf["admin"].get("token_env"), tok)
        t.check("%s: the web port is the listener's" % name, port_of(c, "web") == web_port, web_port,
                port_of(c, "web"))
        pre = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command") or []
        sleep = int(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else None
        grace = spec.get("terminationGracePeriodSeconds", 30)
        shut = seconds(conf.get("shutdown_timeout", "30s"))
        t.check("%s: preStop sleeps, and the grace period covers the sleep and shutdown_timeout" % name,
                sleep and grace > sleep + shut, "> %s + %s" % (sleep, shut), grace)
        sc, psc = c.get("securityContext") or {}, spec.get("securityContext") or {}
        t.check("%s: non-root, read-only root filesystem, no privilege escalation, no capabilities" % name,
                psc.get("runAsNonRoot") and psc.get("runAsUser", 0) > 0 and sc.get("readOnlyRootFilesystem")
                and sc.get("allowPrivilegeEscalation") is False and sc.get("capabilities", {}).get("drop") == ["ALL"],
                None, (psc, sc))
        res = c.get("resources") or {}
        t.check("%s: cpu and memory requests and limits" % name,
                {"cpu", "memory"} <= set(res.get("requests", {})) and {"cpu", "memory"} <= set(res.get("limits", {})),
                None, res)
        t.check("%s: workers equals the CPU limit" % name, str(conf.get("workers")) == str(res["limits"]["cpu"]),
                res["limits"]["cpu"], conf.get("workers"))
        for svc in (d for d in docs if d["kind"] == "Service"):
            t.check("%s: Service %s selects the gateway's pods, on its ports" % (name, svc["metadata"]["name"]),
                    matches(svc["spec"]["selector"], labels)
                    and all(port_of(c, p["targetPort"]) for p in svc["spec"]["ports"]), labels, svc["spec"])

        hpa = one(docs, "HorizontalPodAutoscaler")
        if hpa:
            ref = hpa["spec"]["scaleTargetRef"]
            t.check("%s: the HPA scales the Deployment, which has no replicas field" % name,
                    ref["kind"] == "Deployment" and ref["name"] == dep["metadata"]["name"]
                    and "replicas" not in dep["spec"] and hpa["spec"]["minReplicas"] >= 2, None, (ref, dep["spec"]))
        pdb = one(docs, "PodDisruptionBudget")
        if pdb:
            t.check("%s: the PDB selects the gateway's pods" % name,
                    matches(pdb["spec"]["selector"]["matchLabels"], labels)
                    and ("maxUnavailable" in pdb["spec"] or "minAvailable" in pdb["spec"]), labels, pdb["spec"])
        sm = one(docs, "ServiceMonitor")
        if sm:
            svcs = [d for d in docs if d["kind"] == "Service"
                    and matches(sm["spec"]["selector"]["matchLabels"], d["metadata"].get("labels", {}))]
            ep = sm["spec"]["endpoints"][0]
            sp = [p for s in svcs for p in s["spec"]["ports"] if p["name"] == ep["port"]]
            t.check("%s: the ServiceMonitor scrapes /metrics on a Service port that targets the admin port" % name,
                    len(svcs) == 1 and sp and port_of(c, sp[0]["targetPort"]) == admin_port
                    and ep.get("path") == "/metrics", admin_port, (svcs, ep))
            cred = ep.get("authorization", {}).get("credentials", {})
            ref = tok[0]["valueFrom"]["secretKeyRef"] if tok else {}
            t.check("%s: the ServiceMonitor sends the token from the Deployment's Secret" % name,
                    cred.get("name") == ref.get("name") and cred.get("key") == ref.get("key"), ref, cred)


def loopback(text, conf):
    """The config with its admin and listener addresses on 127.0.0.1:0."""
    for addr in [conf["admin"]["listen"]] + [x["listen"] for x in conf["listeners"]]:
        text = re.sub(r"(listen:\s*)\"?%s\"?" % re.escape(str(addr)), r"\g<1>127.0.0.1:0", text)
    return text


def auth():
    return [("Host", "127.0.0.1"), ("Authorization", "Bearer " + TOKEN)]


def test_probes(t):
    seen = {}
    for name, docs in sorted(renders.items()):
        dep, c, conf_path, mount, text, conf, cm = pod(docs)
        if not conf:
            continue
        d = h.new_tmpdir("check-" + name)
        path = os.path.join(d, os.path.basename(conf_path))
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run([h.BIN, "check", "-c", path], capture_output=True, text=True, timeout=30, env=env_of(c))
        t.check("%s: `sluice check` accepts the ConfigMap's config with the Deployment's env" % name,
                p.returncode == 0, 0, p.stdout + p.stderr)
        if text in seen:
            t.info("%s: same config as %s, already started" % (name, seen[text]))
            continue
        seen[text] = name
        s = h.start_sluice(loopback(text, conf), name="k8s-" + name, suite=t, env=env_of(c))
        admin_port = int(str(conf["admin"]["listen"]).rsplit(":", 1)[1])
        for probe in ("readinessProbe", "livenessProbe"):
            g = c[probe]["httpGet"]
            port = s.admin_port if port_of(c, g["port"]) == admin_port else None
            r = h.request(port, "GET", g["path"], headers=[("Host", "127.0.0.1")]) if port else None
            t.check("%s: %s GET %s on port %s answers 200 without the token" % (name, probe, g["path"], g["port"]),
                    r is not None and r.status == 200, 200, r and (r.status, r.body))
        r = h.request(s.admin_port, "GET", "/status", headers=[("Host", "127.0.0.1")])
        t.check("%s: /status without the token: 401" % name, r.status == 401, 401, r.status)
        s.stop()


class KubeletFolder:
    """A ConfigMap volume as the kubelet lays it out and updates it (its AtomicWriter):
    KEY -> ..data/KEY, ..data -> ..TIMESTAMP; an update writes a new timestamped folder,
    points ..data_tmp at it, renames ..data_tmp over ..data, removes the old folder."""

    def __init__(self, root, key, text):
        self.root, self.key, self.n = root, key, 0
        os.makedirs(root)
        self.current = self._write(text)
        os.symlink(self.current, os.path.join(root, "..data"))
        os.symlink(os.path.join("..data", key), os.path.join(root, key))

    def _write(self, text):
        self.n += 1
        name = "..2026_01_01_00_00_%02d.%d" % (self.n, 1000 + self.n)
        os.makedirs(os.path.join(self.root, name))
        with open(os.path.join(self.root, name, self.key), "w") as f:
            f.write(text)
        return name

    def update(self, text):
        new = self._write(text)
        tmp = os.path.join(self.root, "..data_tmp")
        os.symlink(new, tmp)
        os.rename(tmp, os.path.join(self.root, "..data"))
        shutil.rmtree(os.path.join(self.root, self.current))
        self.current = new


def wait_status(s, cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    st = None
    while time.monotonic() < deadline:
        st = h.request(s.admin_port, "GET", "/status", headers=auth()).json()
        if cond(st):
            return st
        time.sleep(0.05)
    return st


def test_reload_on_change(t):
    docs = renders.get("production") or next(iter(renders.values()), None)
    if not t.check("a rendered overlay to take the ConfigMap from", docs, "one", None):
        return
    dep, c, conf_path, mount, text, conf, cm = pod(docs)
    text = loopback(text, conf)
    folder = KubeletFolder(os.path.join(h.new_tmpdir("configmap"), "etc-sluice"), os.path.basename(conf_path), text)
    s = h.start_sluice(None, name="kubelet-folder", suite=t, env=env_of(c),
                       config_file=os.path.join(folder.root, folder.key))
    g1 = h.request(s.admin_port, "GET", "/status", headers=auth()).json()["generation"]
    edited = text.rstrip("\n") + "\n  - { name: edited, match: { paths: [/edited] }, plugins: [ { name: echo } ] }\n"
    folder.update(edited)
    st = wait_status(s, lambda st: st["generation"] > g1)
    t.check("a ..data swap reloads: a new generation", st["generation"] == g1 + 1, g1 + 1, st["generation"])
    t.check("the new config's route is served", "edited" in [r["name"] for r in st["routes"]]
            and h.request(s.port("web"), "GET", "/edited").status == 200, "edited", st["routes"])
    folder.update(edited.replace("/edited", "/again"))
    st = wait_status(s, lambda st: st["generation"] > g1 + 1)
    t.check("a second swap reloads too (the watch survives the swap)", st["generation"] == g1 + 2, g1 + 2,
            st["generation"])
    folder.update(edited.replace("workers: %s" % conf["workers"], "workers: many"))
    st = wait_status(s, lambda st: st["last_rejected_reload"] is not None)
    t.check("a swap to a config sluice rejects: rejected, the last generation keeps serving",
            st["last_rejected_reload"] is not None and st["generation"] == g1 + 2
            and h.request(s.port("web"), "GET", "/again").status == 200, g1 + 2, st)
    s.stop()


t.run(test_render, test_manifests, test_probes, test_reload_on_change)
