"""sluice_plugin_duration_seconds: each plugin's phase calls timed in C (issue 17).

1. A plugin that sleeps 50 ms in access lands in the (0.05, 0.1] bucket of its own series
   (route, plugin, phase), and a plugin doing nothing lands in the first buckets; the
   series of a phase a plugin does not define is absent.
2. The counts survive a reload (folded by route and plugin name).
3. `metrics: { plugin_timing: false }` drops the metric.
4. `sluice explain --costs` prints each route's chain with every plugin phase's calls,
   p50 and p99, read from the running instance.
"""

import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("plugin_timing", budget=60)
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins_fixture")

CONF = """
workers: 2
watch: false
plugin_paths: [%s]
%s
listeners:
  - name: web
    listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
upstreams:
  - name: api
    targets: [ { address: %s } ]
routes:
  - name: slow
    match: { paths: [/slow] }
    plugins:
      - { name: request-id }
      - { name: sleeper, config: { seconds: 0.05, answer: false } }
    upstream: api
  - name: fast
    match: { paths: [/] }
    plugins: [ { name: request-id } ]
    upstream: api
"""


def bucket(text, route, plugin, phase, le):
    m = re.search(r'^sluice_plugin_duration_seconds_bucket\{route="%s",plugin="%s",phase="%s",le="%s"\} (\d+)$'
                  % (route, plugin, phase, re.escape(le)), text, re.M)
    return int(m.group(1)) if m else None


def count(text, route, plugin, phase):
    m = re.search(r'^sluice_plugin_duration_seconds_count\{route="%s",plugin="%s",phase="%s"\} (\d+)$'
                  % (route, plugin, phase), text, re.M)
    return int(m.group(1)) if m else None


def test_buckets(t):
    up = h.MockUpstream()
    s = h.start_sluice(CONF % (FIXTURE, "", up.address), suite=t, name="timed")
    for _ in range(5):
        r = h.request(s.port(), "GET", "/slow")
        t.check("slow answered 200", r.status == 200, 200, r.status)
    for _ in range(20):
        h.request(s.port(), "GET", "/")
    text = s.admin_get("/metrics").body.decode()
    t.check("HELP/TYPE lines", "# TYPE sluice_plugin_duration_seconds histogram" in text, "present", None)
    t.check("sleeper: 5 access calls", count(text, "slow", "sleeper", "access") == 5, 5,
            count(text, "slow", "sleeper", "access"))
    # libuv's sleep timer counts from the loop's cached time, so a 50 ms sleep may measure a
    # little under 50 ms: the buckets below 0.025 s are empty, all are in by 0.1 s and the
    # mean (from _sum) is the sleep's
    t.check("sleeper: none at or under 0.025 s", bucket(text, "slow", "sleeper", "access", "0.025") == 0, 0,
            bucket(text, "slow", "sleeper", "access", "0.025"))
    m = re.search(r'^sluice_plugin_duration_seconds_sum\{route="slow",plugin="sleeper",phase="access"\} (\S+)$',
                  text, re.M)
    mean = float(m.group(1)) / 5 if m else None
    t.check("sleeper: mean call 0.045..0.1 s", mean is not None and 0.045 <= mean < 0.1, "0.045..0.1", mean)
    t.check("sleeper: all 5 by 0.1 s", bucket(text, "slow", "sleeper", "access", "0.1") == 5, 5,
            bucket(text, "slow", "sleeper", "access", "0.1"))
    t.check("sleeper defines no rewrite: no series", count(text, "slow", "sleeper", "rewrite") is None, None,
            count(text, "slow", "sleeper", "rewrite"))
    rid = count(text, "fast", "request-id", "rewrite") or count(text, "fast", "request-id", "access") or 0
    t.check("request-id on route fast: 20 calls in one of its phases", rid == 20, 20, rid)
    phase = "rewrite" if count(text, "fast", "request-id", "rewrite") else "access"
    quick = bucket(text, "fast", "request-id", phase, "0.005")
    t.check("request-id: every call under 5 ms", quick == 20, 20, quick)
    hf = count(text, "fast", "request-id", "header_filter")
    t.info("request-id header_filter calls: %s" % hf)

    p = subprocess.run([h.BIN, "explain", "--costs", "-c", s.config_path, "--admin", "127.0.0.1:%d" % s.admin_port],
                       capture_output=True, text=True, timeout=20)
    t.info(p.stdout)
    m = re.search(r"^  sleeper\s+access\s+calls 5\s+p50 <= 100 ms\s+p99 <= 100 ms$", p.stdout, re.M)
    t.check("explain --costs: sleeper's access calls with p50/p99 in the 0.1 s bucket", p.returncode == 0 and m,
            "sleeper access calls 5 p50 <= 100 ms", p.stdout + p.stderr)
    t.check("explain --costs: every route of the chain listed", "route slow" in p.stdout and "route fast" in p.stdout,
            "route slow, route fast", p.stdout)
    p = subprocess.run([h.BIN, "explain", "--costs", "-c", s.config_path, "--admin", "127.0.0.1:%d" % s.admin_port,
                        "fast"], capture_output=True, text=True, timeout=20)
    t.check("explain --costs ROUTE: that route only", p.returncode == 0 and "route fast" in p.stdout and
            "route slow" not in p.stdout, "route fast", p.stdout)

    # without -c the routes are the instance's own (not ./conf/sluice.yaml's or the default's):
    # run from a folder with no conf/ so nothing could be read by default either
    p = subprocess.run([h.BIN, "explain", "--costs", "--admin", "127.0.0.1:%d" % s.admin_port],
                       capture_output=True, text=True, timeout=20, cwd=s.dir)
    t.check("explain --costs without -c: the instance's routes (slow, fast), not the default config's echo",
            p.returncode == 0 and "routes of the instance at 127.0.0.1:%d" % s.admin_port in p.stdout and
            "route slow" in p.stdout and "route fast" in p.stdout and "route echo" not in p.stdout and
            re.search(r"^  sleeper\s+access\s+calls 5\s", p.stdout, re.M), "route slow, route fast, sleeper calls 5",
            p.stdout + p.stderr)
    p = subprocess.run([h.BIN, "explain", "--costs", "--admin", "127.0.0.1:%d" % s.admin_port, "echo"],
                       capture_output=True, text=True, timeout=20, cwd=s.dir)
    t.check("explain --costs without -c, a route the instance lacks: exit 1 naming it",
            p.returncode == 1 and "no route named 'echo' in the instance" in p.stderr, 1, (p.returncode, p.stderr))

    code, _ = s.reload()
    t.check("reload applied", code == 200, 200, code)
    h.request(s.port(), "GET", "/slow")
    text = s.admin_get("/metrics").body.decode()
    t.check("after a reload the counts carry on", count(text, "slow", "sleeper", "access") == 6, 6,
            count(text, "slow", "sleeper", "access"))
    s.stop()
    up.stop()


def test_off(t):
    up = h.MockUpstream()
    s = h.start_sluice(CONF % (FIXTURE, "metrics: { plugin_timing: false }", up.address), suite=t, name="untimed")
    r = h.request(s.port(), "GET", "/slow")
    t.check("slow answered 200", r.status == 200, 200, r.status)
    text = s.admin_get("/metrics").body.decode()
    t.check("plugin_timing: false: no sluice_plugin_duration_seconds", "sluice_plugin_duration_seconds" not in text,
            "absent", None)
    s.stop()
    up.stop()


t.run(test_buckets, test_off)
