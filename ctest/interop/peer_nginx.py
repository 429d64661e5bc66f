"""nginx as the origin: static files with sendfile on and off, through sluice's L4 (tcp
listener, splice auto and off) and L7 (HTTP/1.1 proxy) paths."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402


@io.case("l4.sendfile_1m", "a 1 MiB static file from nginx (sendfile on) through a tcp listener "
         "arrives sha256-exact over 10 fresh curl connections, splice on auto", budget=60)
def l4_sendfile_1m(t):
    io.need(t, "curl")
    root = io.h.new_tmpdir("www")
    sha = io.random_file(os.path.join(root, "f"), 1 << 20)
    _, (p,) = io.nginx(t, root, ["sendfile on;"])
    s = io.sluice(t, """
workers: 2
admin: { listen: 127.0.0.1:0 }
listeners:
  - { name: web, listen: 127.0.0.1:0, protocol: tcp, upstream: o, splice: auto }
upstreams:
  - { name: o, targets: [ { address: 127.0.0.1:%d } ] }
""" % p)
    good = 0
    for _ in range(10):
        r = io.curl("--max-time", 10, "http://127.0.0.1:%d/f" % s.port())
        good += r.returncode == 0 and io.sha256(r.stdout) == sha
    t.check("10 of 10 fetches sha256-exact within 10 s each", good == 10, 10, good)


if __name__ == "__main__":
    io.main()
