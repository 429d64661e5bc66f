"""Absolute-form request targets (RFC 9112 3.2.2) over raw sockets, against real loopback
upstreams: the target's authority is the request's host whatever Host says, the scheme's
default port compares equal to none, routing goes by that host, and the upstream gets an
origin-form request line with that host as its one Host. A Host that is not a Host, a
duplicate, and an HTTP/1.1 request without Host are still 400 and reach no upstream.
HTTP/1.0 may omit Host (RFC 9112 3.2): with absolute-form the target's authority is the
host (and the Host the upstream gets); with origin-form the request goes to the route
without hosts, as nginx serves it from its default server.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("absolute_form", budget=30)

CONF = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
upstreams:
  - { name: a, targets: [ { address: %(a)s } ] }
  - { name: b, targets: [ { address: %(b)s } ] }
  - { name: any, targets: [ { address: %(any)s } ] }
routes:
  - { name: a, match: { hosts: [a.test] }, upstream: a }
  - { name: b, match: { hosts: [b.test] }, upstream: b }
  - { name: any, match: { paths: [/] }, upstream: any }
"""

ups = {}
state = {}


def setup(t):
    for n in ("a", "b", "any"):
        ups[n] = h.MockUpstream(name=n)
    state["s"] = h.start_sluice(CONF % {n: m.address for n, m in ups.items()}, suite=t, name="absform")


def send(raw):
    """(status, the upstream that got it or None, its request) for one raw request."""
    marks = {n: len(m.requests) for n, m in ups.items()}
    c = h.Client(state["s"].port())
    try:
        c.send(raw)
        r = c.read_response()
    finally:
        c.close()
    got = [(n, m.requests[marks[n]]) for n, m in ups.items() if len(m.requests) > marks[n]]
    return r.status, got[0][0] if got else None, got[0][1] if got else None


def routed(name, raw, want_up, want_target, want_host):
    st, up, req = send(raw)
    seen = (st, up, req.target if req else None, req.header_all("host") if req else None)
    want = (200, want_up, want_target, [want_host])
    t.check(name, seen == want, want, seen)
    return req


def refused(name, raw):
    st, up, _ = send(raw)
    t.check(name, (st, up) == (400, None), (400, None), (st, up))


def test_authority_wins(t):
    req = routed("http://a.test:80/ with Host: a.test: the default port is no port (routed to a)",
                 b"GET http://a.test:80/x?q=1 HTTP/1.1\r\nHost: a.test\r\n\r\n", "a", "/x?q=1", "a.test")
    t.check("... X-Forwarded-Host is that host", req.header("x-forwarded-host") == "a.test", "a.test",
            req.header("x-forwarded-host"))
    routed("https://a.test:443 with Host: a.test:443: the upstream's Host has no default port",
           b"GET https://a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n", "a", "/", "a.test")
    routed("http://A.test:8080/ with Host: a.test:8080: routed by host, the port kept upstream",
           b"GET http://A.test:8080/p HTTP/1.1\r\nHost: a.test:8080\r\n\r\n", "a", "/p", "A.test:8080")
    routed("http://a.test/ with Host: a.test:80: the same host", b"GET http://a.test/y HTTP/1.1\r\nHost: a.test:80\r\n\r\n",
           "a", "/y", "a.test")
    routed("origin-form still routes by Host", b"GET /z HTTP/1.1\r\nHost: b.test:80\r\n\r\n", "b", "/z",
           "b.test:80")


def test_still_refused(t):
    refused("http://a.test/ with Host: b.test: another host, 400",
            b"GET http://a.test/y HTTP/1.1\r\nHost: b.test\r\n\r\n")
    refused("http://a.test:8080/ with Host: a.test: another port, 400",
            b"GET http://a.test:8080/y HTTP/1.1\r\nHost: a.test\r\n\r\n")
    refused("absolute-form with a malformed Host (userinfo): 400",
            b"GET http://a.test/ HTTP/1.1\r\nHost: evil@a.test\r\n\r\n")
    refused("absolute-form with two Hosts: 400",
            b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: a.test\r\n\r\n")
    refused("origin-form with two differing Hosts: 400",
            b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n")
    refused("HTTP/1.1 origin-form without Host: 400", b"GET / HTTP/1.1\r\nX-A: 1\r\n\r\n")


def test_http10_without_host(t):
    routed("HTTP/1.0 absolute-form without Host: routed by the target's host, which the upstream gets",
           b"GET http://a.test/x HTTP/1.0\r\n\r\n", "a", "/x", "a.test")
    routed("... the default port dropped, another port kept",
           b"GET http://b.test:8080/x HTTP/1.0\r\n\r\n", "b", "/x", "b.test:8080")
    routed("... https's default port on https", b"GET https://b.test:443/s?k=v HTTP/1.0\r\n\r\n", "b",
           "/s?k=v", "b.test")
    routed("HTTP/1.0 origin-form without Host: the route without hosts", b"GET /o HTTP/1.0\r\n\r\n", "any",
           "/o", "")
    refused("HTTP/1.1 absolute-form without Host: still 400 (RFC 9112 3.2)",
            b"GET http://a.test/x HTTP/1.1\r\n\r\n")


def teardown(t):
    state["s"].stop()
    for m in ups.values():
        m.stop()


t.run(setup, test_authority_wins, test_still_refused, test_http10_without_host, teardown)
