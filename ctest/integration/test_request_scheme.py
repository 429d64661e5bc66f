"""request.get_scheme() on a real TLS listener: "https" there, "http" on a plain one (the
plugin API additions' only case the in-process specs cannot reach: sluice.test has no TLS
client)."""

import json
import os
import socket
import ssl
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("request_scheme", budget=30)


def test_scheme(t):
    cfg = """workers: 1
admin: { listen: 127.0.0.1:0 }
plugin_paths: [ %s ]
listeners:
  - { name: web, listen: 127.0.0.1:0 }
  - name: secure
    listen: 127.0.0.1:0
    tls: { certificates: [ { cert: %s, key: %s } ] }
routes:
  - { name: q, match: { paths: [/q] }, plugins: [ { name: inspect-more } ] }
""" % (os.path.join(h.SRC, "spec", "fixtures", "plugins"), os.path.join(h.SRC, "conf", "test.crt"),
       os.path.join(h.SRC, "conf", "test.key"))
    s = h.start_sluice(cfg, suite=t)
    r = h.request(s.port("web"), "GET", "/q")
    t.check("plain listener: http", r.status == 200 and json.loads(r.body)["scheme"] == "http", "http",
            (r.status, r.body[:200]))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", s.port("secure")), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as c:
            c.sendall(b"GET /q HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                b = c.recv(65536)
                if not b:
                    break
                data += b
    body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b"{}"
    t.check("TLS listener: https", json.loads(body or b"{}").get("scheme") == "https", "https", data[:300])
    s.stop()


t.run(test_scheme)
