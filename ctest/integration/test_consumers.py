"""Consumers: the config's consumers reach plugins (sluice.consumers), ctx.consumer set by
an auth plugin goes upstream in the consumer header, and a client can never send that
header itself (stripped on every route, with or without an auth plugin).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("consumers", budget=40)
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins_fixture")

CONF = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
plugin_paths: [%(fx)s]
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
%(header)s
consumers:
  - name: alice
    credentials:
      key-auth: { key: k-alice }
      basic-auth: { username: alice, password_hash: "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1" }
  - { name: bob, credentials: { key-auth: { key: k-bob } } }
upstreams: [ { name: up, targets: [ { address: %(up)s } ] } ]
routes:
  - { name: auth, match: { paths: [/auth] }, upstream: up, plugins: [ { name: who-am-i } ] }
  - { name: open, match: { paths: [/open] }, upstream: up }
  - { name: bad, match: { paths: [/bad] }, upstream: up, plugins: [ { name: who-am-i, config: { as: "two words" } } ] }
"""


def seen_headers(r):
    d = json.loads(r.body)
    return [tuple(x) for x in d["headers"]]


def handler(req):
    return h.Response(200, json.dumps(req.summary()).encode(), [("Content-Type", "application/json")])


def run_with(t, header_line, header_name):
    up = h.MockUpstream(handler, name="up")
    s = h.start_sluice(CONF % {"fx": FIXTURES, "up": up.address, "header": header_line}, suite=t,
                       name="consumers")
    try:
        p = s.port()
        r = h.request(p, "GET", "/auth", headers=[("X-Key", "k-alice"), (header_name, "mallory")])
        hs = seen_headers(r)
        t.check("%s: a known key: the upstream sees %s: alice (the client's value is gone)" % (header_name, header_name),
                h.hall(hs, header_name) == ["alice"], ["alice"], h.hall(hs, header_name))
        t.check("sluice.consumers.credential: alice's basic-auth username", h.hget(hs, "X-Has-Basic") == "alice",
                "alice", h.hget(hs, "X-Has-Basic"))
        r = h.request(p, "GET", "/auth", headers=[("X-Key", "k-bob")])
        t.check("bob: no basic-auth credential", (h.hget(seen_headers(r), header_name),
                                                  h.hget(seen_headers(r), "X-Has-Basic")) == ("bob", "no"),
                ("bob", "no"), (h.hget(seen_headers(r), header_name), h.hget(seen_headers(r), "X-Has-Basic")))
        n = len(up.requests)
        r = h.request(p, "GET", "/auth", headers=[("X-Key", "nope")])
        t.check("an unknown key: 401 and the upstream sees nothing", r.status == 401 and len(up.requests) == n,
                (401, n), (r.status, len(up.requests)))
        r = h.request(p, "GET", "/open", headers=[(header_name, "mallory"), (header_name.lower(), "eve")])
        t.check("a route without auth: a client's %s never reaches the upstream" % header_name,
                h.hall(seen_headers(r), header_name) == [], [], h.hall(seen_headers(r), header_name))
        r = h.request(p, "GET", "/bad")
        t.check("a ctx.consumer that cannot be a header value: a plugin error, 500", r.status == 500, 500, r.status)
    finally:
        s.stop()
        up.stop()


def test_default_header(t):
    run_with(t, "", "X-Consumer")


def test_configured_header(t):
    run_with(t, "consumer_header: X-Auth-User", "X-Auth-User")


t.run(test_default_header, test_configured_header)
