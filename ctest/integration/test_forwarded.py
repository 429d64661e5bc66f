"""X-Forwarded-Proto and -Port say how a request reached the gateway (issue 12).

curl over real TLS (a certificate made by the openssl CLI) and over plain HTTP, through
sluice, to a recording upstream: the upstream must see `X-Forwarded-Proto: https` and the
TLS listener's port for the first, `http` and the plain listener's port for the second.
A client's own X-Forwarded-Proto/-Host/-Port are replaced unless it connects from one of
the listener's trusted_proxies, whose values are kept; a PROXY header's destination port
becomes X-Forwarded-Port.
"""

import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("forwarded", budget=120)
S = {}


def setup(t):
    d = h.new_tmpdir("certs")
    h.make_ca(d)
    crt, key = h.make_leaf(d, "gw", "localhost", "DNS:localhost,IP:127.0.0.1")
    S["ca"] = os.path.join(d, "ca.crt")
    up = h.MockUpstream()
    S["up"] = up
    S["sl"] = h.start_sluice(f"""
workers: 1
admin: {{ listen: 127.0.0.1:0 }}
watch: false
listeners:
  - name: tls
    listen: 127.0.0.1:0
    tls:
      certificates:
        - {{ cert: {crt}, key: {key} }}
  - {{ name: web, listen: 127.0.0.1:0 }}
  - {{ name: behind, listen: 127.0.0.1:0, trusted_proxies: [127.0.0.0/8] }}
  - {{ name: lb, listen: 127.0.0.1:0, accept_proxy_protocol: {{ from: [127.0.0.1] }} }}
upstreams: [ {{ name: up, targets: [ {{ address: {up.address} }} ] }} ]
routes: [ {{ name: all, match: {{ paths: [/] }}, upstream: up }} ]
""", suite=t)


def curl(url, *extra):
    p = subprocess.run(["curl", "-sS", "--cacert", S["ca"], "-o", "/dev/null", "-w", "%{http_code}", url] + list(extra),
                       capture_output=True, text=True, timeout=20)
    return p.stdout.strip(), p.stderr


def last_request():
    return S["up"].requests[-1]


def test_tls_is_https(t):
    port = S["sl"].port("tls")
    code, err = curl("https://localhost:%d/x" % port)
    t.check("curl over TLS answered 200", code == "200", "200", (code, err))
    r = last_request()
    t.check("upstream saw X-Forwarded-Proto: https", r.header("x-forwarded-proto") == "https", "https",
            r.header("x-forwarded-proto"))
    t.check("upstream saw X-Forwarded-Port: the TLS listener's", r.header("x-forwarded-port") == str(port),
            str(port), r.header("x-forwarded-port"))
    code, err = curl("https://localhost:%d/x" % port, "-H", "X-Forwarded-Proto: http", "-H", "X-Forwarded-Port: 1")
    r = last_request()
    t.check("a client's X-Forwarded-Proto over TLS is replaced",
            r.header_all("x-forwarded-proto") == ["https"], ["https"], r.header_all("x-forwarded-proto"))
    t.check("a client's X-Forwarded-Port is replaced",
            r.header_all("x-forwarded-port") == [str(port)], [str(port)], r.header_all("x-forwarded-port"))


def test_plain_is_http(t):
    port = S["sl"].port("web")
    code, err = curl("http://127.0.0.1:%d/y" % port, "-H", "X-Forwarded-Proto: https",
                     "-H", "X-Forwarded-Host: evil.example")
    t.check("curl over plain HTTP answered 200", code == "200", "200", (code, err))
    r = last_request()
    t.check("upstream saw X-Forwarded-Proto: http (the client's https dropped)",
            r.header_all("x-forwarded-proto") == ["http"], ["http"], r.header_all("x-forwarded-proto"))
    t.check("the client's X-Forwarded-Host is dropped", r.header_all("x-forwarded-host") == ["127.0.0.1:%d" % port],
            ["127.0.0.1:%d" % port], r.header_all("x-forwarded-host"))
    t.check("X-Forwarded-Port is the plain listener's", r.header("x-forwarded-port") == str(port), str(port),
            r.header("x-forwarded-port"))


def test_trusted_proxy_kept(t):
    port = S["sl"].port("behind")
    code, err = curl("http://127.0.0.1:%d/z" % port, "-H", "X-Forwarded-Proto: https",
                     "-H", "X-Forwarded-Host: shop.example", "-H", "X-Forwarded-Port: 443",
                     "-H", "X-Forwarded-For: 203.0.113.9")
    t.check("curl from a trusted proxy answered 200", code == "200", "200", (code, err))
    r = last_request()
    t.check("a trusted proxy's X-Forwarded-Proto is kept", r.header_all("x-forwarded-proto") == ["https"],
            ["https"], r.header_all("x-forwarded-proto"))
    t.check("a trusted proxy's X-Forwarded-Host is kept", r.header_all("x-forwarded-host") == ["shop.example"],
            ["shop.example"], r.header_all("x-forwarded-host"))
    t.check("a trusted proxy's X-Forwarded-Port is kept", r.header_all("x-forwarded-port") == ["443"], ["443"],
            r.header_all("x-forwarded-port"))
    t.check("X-Forwarded-For gains the proxy's address", r.header("x-forwarded-for") == "203.0.113.9, 127.0.0.1",
            "203.0.113.9, 127.0.0.1", r.header("x-forwarded-for"))
    code, _ = curl("http://127.0.0.1:%d/z2" % port, "-H", "X-Forwarded-For: 203.0.113.9, 10.0.0.1",
                   "-H", "X-Forwarded-For: 10.0.0.2")
    r = last_request()
    t.check("two X-Forwarded-For fields are one list: both, in order, then the peer",
            r.header_all("x-forwarded-for") == ["203.0.113.9, 10.0.0.1, 10.0.0.2, 127.0.0.1"],
            ["203.0.113.9, 10.0.0.1, 10.0.0.2, 127.0.0.1"], r.header_all("x-forwarded-for"))
    code, _ = curl("http://127.0.0.1:%d/z" % port)
    r = last_request()
    t.check("without its headers the gateway's own are set",
            (r.header("x-forwarded-proto"), r.header("x-forwarded-port")) == ("http", str(port)),
            ("http", str(port)), (r.header("x-forwarded-proto"), r.header("x-forwarded-port")))


def test_proxy_protocol_port(t):
    port = S["sl"].port("lb")
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"PROXY TCP4 198.51.100.4 192.0.2.1 51000 8443\r\n"
              b"GET /pp HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    resp = h.recv_all(s)
    s.close()
    t.check("a request behind a PROXY header answered 200", resp.startswith(b"HTTP/1.1 200"), "200", resp[:40])
    r = last_request()
    t.check("X-Forwarded-Port is the PROXY header's destination port", r.header("x-forwarded-port") == "8443",
            "8443", r.header("x-forwarded-port"))
    t.check("X-Forwarded-For is the PROXY header's source", r.header("x-forwarded-for") == "198.51.100.4",
            "198.51.100.4", r.header("x-forwarded-for"))


t.run(setup, test_tls_is_https, test_plain_is_http, test_trusted_proxy_kept, test_proxy_protocol_port)
