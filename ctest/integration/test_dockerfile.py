"""The Dockerfile, checked against the code without Docker (no daemon or registry in CI):
two stages on Debian 12 whose COPY --from names the build stage; the build stage installs
every library package scripts/install-deps builds with (so a new dependency cannot be
forgotten there) and builds the .deb the way scripts/package-test does; the runtime stage
runs as the user the package's postinst creates, not root; its HEALTHCHECK asks the admin
API's /ready at the address packaging/docker.yaml gives the admin listener; EXPOSE is the
port of that config's listener, which binds all interfaces; the config COPY'd in is the
one CMD runs and `sluice check` accepts it; every COPY source exists.
"""

import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("dockerfile", budget=40)
SRC = os.environ.get("SLUICE_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def instructions(path):
    """[(stage index, INSTRUCTION, argument text)] with continuations joined, comments dropped."""
    out, cur, stage = [], "", -1
    for line in open(path):
        line = line.rstrip("\n")
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        word, _, rest = cur.strip().partition(" ")
        if word.upper() == "FROM":
            stage += 1
        out.append((stage, word.upper(), rest.strip()))
        cur = ""
    return out


def test_dockerfile(t):
    ins = instructions(os.path.join(SRC, "Dockerfile"))
    froms = [a.split() for _, w, a in ins if w == "FROM"]
    t.check("two stages", len(froms) == 2, 2, froms)
    t.check("both on Debian 12", all(f[0] in ("debian:12", "debian:12-slim") for f in froms), "debian:12*", froms)
    names = [f[2] for f in froms if len(f) == 3 and f[1].upper() == "AS"]
    t.check("stages named", len(names) == 2, 2, names)
    copies_from = [re.search(r"--from=(\S+)", a).group(1) for s, w, a in ins if w == "COPY" and "--from=" in a]
    t.check("COPY --from names the build stage", copies_from == [names[0]], [names[0]], copies_from)

    build = " ".join(a for s, w, a in ins if s == 0 and w == "RUN")
    apt = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", build.split("install", 1)[1].split("&&")[0]))
    deps = open(os.path.join(SRC, "scripts", "install-deps")).read()
    listed = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", " ".join(re.findall(r"pkgs=\(([^)]*)\)", deps))))
    need = {p for p in listed if p.endswith("-dev") and not p.startswith(("libclang-rt", "libnginx"))
            and p not in ("libluajit-5.1-dev",)} | {"node-llhttp", "cmake", "pkg-config", "build-essential"}
    t.check("build stage installs every build dependency of scripts/install-deps", need <= apt,
            sorted(need), sorted(need - apt))
    t.check("build stage: file and dpkg-dev (cpack's dpkg-shlibdeps)", {"file", "dpkg-dev"} <= apt, None, sorted(apt))
    t.check("build stage builds the .deb like package-test (cpack -G DEB)", "cpack -G DEB" in build,
            "cpack -G DEB", build)
    t.check("build stage: no install prefix (the package is under /usr whatever the tree's prefix)",
            "CMAKE_INSTALL_PREFIX" not in build, None, build)

    run_stage = [(w, a) for s, w, a in ins if s == 1]
    users = [a for w, a in run_stage if w == "USER"]
    t.check("runtime: a USER, not root", len(users) == 1 and users[0] not in ("root", "0"), "sluice", users)
    postinst = open(os.path.join(SRC, "packaging", "debian", "postinst")).read()
    t.check("runtime: the user is the one the package creates",
            users and re.search(r"adduser --system.*\b%s\s*$" % users[0], postinst, re.M | re.S), users, None)

    conf_copy = [a.split() for w, a in run_stage if w == "COPY" and "--from" not in a]
    cmd = [w_a for w_a in run_stage if w_a[0] == "CMD"]
    entry = [w_a for w_a in run_stage if w_a[0] == "ENTRYPOINT"]
    import json
    argv = json.loads(entry[0][1]) + json.loads(cmd[0][1]) if cmd and entry else []
    t.check("runtime: runs /usr/bin/sluice run -c FILE", argv[:3] == ["/usr/bin/sluice", "run", "-c"], None, argv)
    t.check("runtime: the COPY'd config is the one CMD runs",
            len(conf_copy) == 1 and argv[3:4] == [conf_copy[0][1]], conf_copy, argv)
    for s, w, a in ins:
        if w == "COPY" and "--from" not in a:
            srcs = a.split()[:-1]
            t.check("COPY source %s exists" % srcs, all(os.path.exists(os.path.join(SRC, x)) or x == "." for x in srcs),
                    srcs, None)
    conf_path = os.path.join(SRC, conf_copy[0][0]) if conf_copy else ""
    p = h.run_cli(["check", "-c", conf_path])
    t.check("`sluice check` accepts %s" % conf_copy[0][0] if conf_copy else "config", p.returncode == 0, 0,
            p.stdout + p.stderr)
    conf = open(conf_path).read() if conf_copy else ""
    admin = re.search(r"^admin:\s*\n(?:\s*#.*\n)*\s+listen:\s*(\S+)", conf, re.M)
    web = re.search(r"^\s+listen:\s*(\S+)", conf.split("listeners:", 1)[1], re.M) if "listeners:" in conf else None

    hc = [a for w, a in run_stage if w == "HEALTHCHECK"]
    url = re.search(r"http://([0-9.]+:\d+)(/\S*)", hc[0]) if hc else None
    t.check("HEALTHCHECK asks /ready", url and url.group(2) == "/ready", "/ready", hc)
    admin_src = open(os.path.join(SRC, "core", "server", "admin.c")).read()
    t.check("/ready is an admin endpoint (core/server/admin.c), open without a token",
            re.search(r'static bool admin_public\([^)]*\) \{[^}]*path_is\(path, "/ready"\)', admin_src) is not None,
            'admin_public(): path_is(path, "/ready")', None)
    t.check("HEALTHCHECK address is the config's admin listener",
            url and admin and url.group(1) == admin.group(1), admin and admin.group(1), url and url.group(1))
    t.check("HEALTHCHECK fails on a non-2xx (curl -f)", hc and "curl -f" in hc[0], "curl -f", hc)
    expose = [a for w, a in run_stage if w == "EXPOSE"]
    t.check("EXPOSE is the listener's port, bound on all interfaces",
            web and expose and web.group(1) == "0.0.0.0:" + expose[0], expose, web and web.group(1))

    # The documented run command is in docs/operations.md.
    ops = open(os.path.join(SRC, "docs", "operations.md")).read()
    t.check("docs/operations.md has the docker build and run commands",
            "docker build -t sluice ." in ops and re.search(r"docker run .*sluice", ops), None, None)


def test_apt_names(t):
    """Every package the Dockerfile installs exists in this Debian's archive index."""
    ins = instructions(os.path.join(SRC, "Dockerfile"))
    for s, w, a in ins:
        if w != "RUN" or "apt-get install" not in a:
            continue
        words = [p for p in shlex.split(a.split("apt-get install", 1)[1].split("&&")[0])
                 if not p.startswith("-") and "/" not in p]
        r = subprocess.run(["apt-cache", "show", "--no-all-versions"] + words, capture_output=True,
                           text=True, timeout=60)
        found = set(re.findall(r"^Package: (\S+)", r.stdout, re.M))
        t.check("stage %d: every apt package exists in the archive index" % s, set(words) <= found,
                sorted(words), sorted(set(words) - found))


t.run(test_dockerfile, test_apt_names)
