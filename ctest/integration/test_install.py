"""`cmake --install` and an installed binary that finds its Lua trees relative to itself.

The build tree the test binary comes from is installed three ways: into DESTDIR with the
prefix /usr, with the prefix /usr/local, and to a --prefix that is then moved elsewhere
(a relocated tree). Each installed PREFIX/bin/sluice must load the Lua modules and the
built-in plugins from PREFIX/share/sluice (its startup log says where from), check the
packaged config, start, serve a request through a built-in plugin, reload, and stop;
the binary in the build tree keeps using the source tree.
"""

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("install", budget=90)
BUILD = os.path.dirname(os.path.abspath(h.BIN))
SRC = os.environ.get("SLUICE_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CONF = """
workers: 2
watch: false
listeners:
  - name: web
    listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
routes:
  - name: echo
    match: { paths: [/] }
    plugins: [ { name: request-id }, { name: echo } ]
"""


def install(label, prefix, destdir=None):
    env = dict(os.environ)
    env.pop("DESTDIR", None)
    if destdir:
        env["DESTDIR"] = destdir
    p = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], capture_output=True,
                       text=True, env=env, timeout=120)
    t.check("%s: cmake --install exits 0" % label, p.returncode == 0, 0, (p.returncode, p.stderr[-800:]))
    return (destdir or "") + prefix


def serve_from(label, binary, share):
    """Starts `binary` on CONF; checks where its Lua comes from, a request, a reload, a stop."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLUICE_LUA_DIR", "SLUICE_PLUGIN_DIR")}
    s = h.start_sluice(CONF, suite=t, name=label.replace(" ", "-").replace("/", "_"), env=env,
                       binary=binary)
    lines = [l for l in s.log().splitlines() if "lua modules from" in l]
    m = re.search(r"lua modules from (\S+)/lua, built-in plugins from (\S+)/plugins", lines[0] if lines else "")
    t.check("%s: Lua modules and built-in plugins from %s" % (label, share),
            m and os.path.realpath(m.group(1)) == share and os.path.realpath(m.group(2)) == share,
            share, lines)
    r = h.request(s.port(), "GET", "/hello")
    t.check("%s: serves through built-in plugins (echo, request-id)" % label,
            r.status == 200 and b"/hello" in r.body and r.header("x-request-id"), 200,
            (r.status, r.body[:200]))
    with open(s.config_path, "a") as f:  # unchanged content would apply nothing
        f.write("# reload\n")
    s.signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and s.status().get("generation") != 2:
        time.sleep(0.05)
    t.check("%s: a SIGHUP reload works" % label, s.status().get("generation") == 2, 2,
            s.status().get("generation"))
    t.check("%s: exit 0 on SIGTERM" % label, s.stop() == 0, 0, s.log()[-800:])


def check_layout(label, root, prefix, destdir=None):
    libs = glob.glob(os.path.join(root, "lib*", "libsluice.so")) + \
        glob.glob(os.path.join(root, "lib*", "*", "libsluice.so"))
    want = ["bin/sluice", "share/sluice/lua/sluice/init.lua", "share/sluice/plugins/echo.lua",
            "share/sluice/plugins/rate-limit.lua", "lib/systemd/system/sluice.service"]
    missing = [w for w in want if not os.path.exists(os.path.join(root, w))]
    t.check("%s: layout (bin, share/sluice/lua and plugins, the unit)" % label, not missing, want, missing)
    t.check("%s: libsluice.so installed" % label, len(libs) == 1, "one libsluice.so", libs)
    tlibs = [os.path.join(os.path.dirname(l), "libsluice_test.so") for l in libs]
    t.check("%s: libsluice_test.so (the test harness) installed beside it" % label,
            len(tlibs) == 1 and os.path.exists(tlibs[0]), "beside libsluice.so", tlibs)
    # the installed `sluice test` finds the harness in its prefix: it is not in the binary
    spec = os.path.join(SRC, "spec", "smoke", "real-ip.yaml")
    p = subprocess.run([os.path.join(root, "bin/sluice"), "test", spec], capture_output=True, text=True,
                       timeout=60, env={k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")})
    t.check("%s: installed `sluice test` runs a smoke spec" % label,
            p.returncode == 0 and " 0 failed" in p.stdout, "exit 0, 0 failed",
            (p.returncode, p.stdout[-400:], p.stderr[-400:]))
    n_src = len(glob.glob(os.path.join(SRC, "plugins", "*.lua")))
    n_dst = len(glob.glob(os.path.join(root, "share/sluice/plugins", "*.lua")))
    t.check("%s: every built-in plugin" % label, n_src == n_dst and n_src > 0, n_src, n_dst)
    # the config and the unit follow the install's prefix, not the one the tree was configured
    # with: /etc/sluice for the prefix /usr (the package's), PREFIX/etc/sluice otherwise
    etc = os.path.join(destdir or "", "etc") if prefix == "/usr" else os.path.join(root, "etc")
    conf = os.path.join(etc, "sluice", "sluice.yaml")
    stray = [c for c in glob.glob(os.path.join(destdir or root, "**", "sluice.yaml"), recursive=True)
             if os.path.realpath(c) != os.path.realpath(conf)]
    t.check("%s: the service config at %s only" % (label, conf[len(destdir or ""):]),
            os.path.exists(conf) and not stray, conf, stray)
    unit_path = os.path.join(root, "lib/systemd/system/sluice.service")
    unit = open(unit_path).read() if os.path.exists(unit_path) else ""
    want = "ExecStart=%s/bin/sluice run -c %s/sluice/sluice.yaml" % (prefix, conf[len(destdir or ""):].rsplit("/sluice/", 1)[0])
    t.check("%s: the unit starts %s/bin/sluice on that config" % (label, prefix),
            re.search("^" + re.escape(want) + "$", unit, re.M) is not None, want,
            [l for l in unit.splitlines() if l.startswith("ExecStart")])
    if os.path.exists(conf):
        p = subprocess.run([os.path.join(root, "bin/sluice"), "check", "-c", conf],
                           capture_output=True, text=True, timeout=20)
        t.check("%s: installed `sluice check` of the packaged config" % label,
                p.returncode == 0 and p.stdout.strip().endswith(": ok"), "ok", (p.returncode, p.stdout, p.stderr))


def test_build_tree(t):
    serve_from("build tree", h.BIN, os.path.realpath(SRC))


def test_destdir_usr(t):
    d = h.new_tmpdir("destdir")
    root = install("DESTDIR, prefix /usr", "/usr", destdir=d)
    check_layout("prefix /usr", root, "/usr", d)
    serve_from("prefix /usr", os.path.join(root, "bin/sluice"), os.path.realpath(root + "/share/sluice"))


def test_destdir_usr_local(t):
    d = h.new_tmpdir("destdir-local")
    root = install("DESTDIR, prefix /usr/local", "/usr/local", destdir=d)
    check_layout("prefix /usr/local", root, "/usr/local", d)
    serve_from("prefix /usr/local", os.path.join(root, "bin/sluice"),
               os.path.realpath(root + "/share/sluice"))


def test_relocated(t):
    d = h.new_tmpdir("reloc")
    root = install("--prefix", os.path.join(d, "first"))
    check_layout("--prefix %s" % root, root, root)
    moved = os.path.join(d, "elsewhere", "opt")
    os.makedirs(os.path.dirname(moved))
    shutil.move(root, moved)
    serve_from("moved after install", os.path.join(moved, "bin/sluice"),
               os.path.realpath(moved + "/share/sluice"))


t.run(test_build_tree, test_destdir_usr, test_destdir_usr_local, test_relocated)
