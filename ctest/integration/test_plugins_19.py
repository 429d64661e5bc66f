"""The per-request built-in plugins of issue 19, through the real binary, with a real
upstream on loopback: what the upstream received (or that it received nothing) and what
the client got.

  * request-size-limit: 413 before any byte reaches the upstream, for a Content-Length
    over max (answered from the head alone, no body sent) and for a chunked body sent
    slowly in pieces (the upstream never connected); a body within max arrives whole; the
    same over HTTP/2 for a body without content-length in two DATA frames.
  * fault-injection: an abort answers without asking the upstream; a delay holds the
    request that long before the upstream sees it.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("plugins_19", budget=60)


def handler(req):
    return h.Response(200, json.dumps(req.summary()).encode(), [("Content-Type", "application/json")])


def seen(r):
    return json.loads(r.body)


def body_json(r):
    """The response body decoded, or the raw bytes when it is not JSON (for the report)."""
    try:
        return json.loads(r.body)
    except ValueError:
        return r.body


def start(t, routes, extra="", ret_conf=False, on_request=handler):
    up = h.MockUpstream(on_request, name="up")
    conf = """\
workers: 1
shutdown_timeout: 2s
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
%s
upstreams: [ { name: up, targets: [ { address: %s } ] } ]
routes:
%s""" % (extra, up.address, routes)
    if ret_conf:
        up.stop()
        return conf
    s = h.start_sluice(conf, suite=t, name="p19")
    return s, up


def slow_chunked(port, path, byte, last):
    """POSTs four 256-byte chunks 50 ms apart, then `last`; returns the response."""
    c = h.Client(port, timeout=3)
    try:
        c.send(b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" % path.encode())
        for _ in range(4):
            c.send(b"100\r\n" + byte * 256 + b"\r\n")
            time.sleep(0.05)
        c.send(last)
        return c.read_response("POST")
    finally:
        c.close()


# python3-h2 imports only under /usr/bin/python3: this client runs there. One POST on a
# prior-knowledge connection, its body in the DATA frames given (no content-length);
# prints the status and the body.
H2_POST = r"""
import json, socket, sys
import h2.config, h2.connection, h2.events
port, path, pieces = json.loads(sys.stdin.read())
sock = socket.create_connection(("127.0.0.1", port), timeout=5)
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
c.initiate_connection()
c.send_headers(1, [(":method", "POST"), (":path", path), (":scheme", "http"), (":authority", "x")])
for i, p in enumerate(pieces):
    c.send_data(1, p.encode(), end_stream=i == len(pieces) - 1)
sock.sendall(c.data_to_send())
status, body, done = None, b"", False
while not done:
    d = sock.recv(65536)
    if not d:
        break
    for e in c.receive_data(d):
        if isinstance(e, h2.events.ResponseReceived):
            status = dict(e.headers)[b":status"].decode()
        elif isinstance(e, h2.events.DataReceived):
            body += e.data
            c.acknowledge_received_data(e.flow_controlled_length, 1)
        elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
            done = True
    sock.sendall(c.data_to_send())
print(json.dumps([status, body.decode("latin-1")]))
"""


def h2_post(port, path, pieces):
    p = subprocess.run(["/usr/bin/python3", "-c", H2_POST], input=json.dumps([port, path, pieces]),
                       capture_output=True, text=True, timeout=20)
    if p.returncode != 0:
        return None, p.stderr[-300:]
    status, body = json.loads(p.stdout)
    return status, body


SIZE_ROUTES = """\
  - name: limited
    match: { paths: [/limited] }
    upstream: up
    plugins: [ { name: request-size-limit, config: { max: 1KiB } } ]
"""


def test_request_size_limit(t):
    s, up = start(t, SIZE_ROUTES)
    try:
        p = s.port()
        r = h.request(p, "POST", "/limited", body=b"a" * 1024)
        t.check("a body of exactly max reaches the upstream whole",
                r.status == 200 and seen(r)["body"] == "a" * 1024, 200, r.status)
        before = up.snapshot()

        # a Content-Length over max: only the head is sent; the answer must not wait for a body
        c = h.Client(p, timeout=3)
        c.send(b"POST /limited HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\n\r\n")
        r = c.read_response("POST")
        c.close()
        t.check("Content-Length over max: 413 from the head alone", r.status == 413, 413, r.status)
        t.check("... with the JSON error", json.loads(r.body) == {"error": "request body too large"},
                {"error": "request body too large"}, r.body)

        # chunked, sent in slow pieces: the gateway must hold everything until the limit trips
        r = slow_chunked(p, "/limited", b"b", b"1\r\nc\r\n")
        t.check("chunked over max: 413", r.status == 413, 413, r.status)
        time.sleep(0.1)
        t.check("no byte of either refused request reached the upstream (no connection, no bytes)",
                up.snapshot() == before, before, up.snapshot())

        before = up.snapshot()
        status, body = h2_post(p, "/limited", ["a" * 1000, "b" * 25])
        t.check("HTTP/2, no content-length, over max in the second DATA frame: 413", status == "413", "413",
                (status, body))
        time.sleep(0.1)
        t.check("... and the upstream saw nothing", up.snapshot() == before, before, up.snapshot())
        status, body = h2_post(p, "/limited", ["a" * 1000, "b" * 24])
        d = json.loads(body) if status == "200" else {}
        t.check("HTTP/2 within max: the upstream gets the whole body", d.get("body") == "a" * 1000 + "b" * 24,
                1024, (status, len(d.get("body") or "")))

        r = slow_chunked(p, "/limited", b"d", b"0\r\n\r\n")
        d = seen(r) if r.status == 200 else {}
        t.check("chunked within max: the upstream gets the whole body with a Content-Length",
                r.status == 200 and d.get("body") == "d" * 1024 and
                h.hget([tuple(x) for x in d["headers"]], "Content-Length") == "1024",
                (200, 1024), (r.status, len(d.get("body", ""))))
    finally:
        s.stop()
        up.stop()


FAULT_ROUTES = """\
  - name: abort
    match: { paths: [/abort] }
    upstream: up
    plugins: [ { name: fault-injection, config: { abort: { status: 503, body: "chaos", percentage: 100 } } } ]
  - name: delay
    match: { paths: [/delay] }
    upstream: up
    plugins: [ { name: fault-injection, config: { delay: { duration: 300ms } } } ]
"""


def test_fault_injection(t):
    s, up = start(t, FAULT_ROUTES)
    try:
        p = s.port()
        r = h.request(p, "GET", "/abort")
        t.check("abort: the configured status and body", (r.status, r.body) == (503, b"chaos"),
                (503, b"chaos"), (r.status, r.body))
        t.check("abort: the upstream is never asked", up.snapshot()[2] == 0, 0, up.snapshot()[2])
        t0 = time.monotonic()
        r = h.request(p, "GET", "/delay")
        took = time.monotonic() - t0
        t.check("delay: the request reaches the upstream after the delay",
                r.status == 200 and seen(r)["path"] == "/delay" and took >= 0.29, ">= 0.3 s", took)
    finally:
        s.stop()
        up.stop()


ACL_CONSUMERS = """\
consumers:
  - { name: alice, groups: [admin, staff], credentials: { key-auth: { key: ka } } }
  - { name: bob, groups: [staff], credentials: { key-auth: { key: kb } } }
"""
ACL_ROUTES = """\
  - name: admin
    match: { paths: [/admin] }
    upstream: up
    plugins: [ { name: key-auth }, { name: acl, config: { allow: [admin] } } ]
"""


def test_acl(t):
    s, up = start(t, ACL_ROUTES, ACL_CONSUMERS)
    try:
        p = s.port()
        r = h.request(p, "GET", "/admin", headers=[("apikey", "ka"), ("X-Consumer-Groups", "root")])
        hs = [tuple(x) for x in seen(r)["headers"]] if r.status == 200 else []
        t.check("a consumer in an allowed group passes; the upstream sees its groups, not the client's",
                r.status == 200 and h.hall(hs, "X-Consumer-Groups") == ["admin, staff"],
                (200, ["admin, staff"]), (r.status, h.hall(hs, "X-Consumer-Groups")))
        n = up.snapshot()[2]
        r = h.request(p, "GET", "/admin", headers=[("apikey", "kb")])
        t.check("a consumer outside the allowed groups: 403, the upstream not asked",
                r.status == 403 and up.snapshot()[2] == n, (403, n), (r.status, up.snapshot()[2]))
    finally:
        s.stop()
        up.stop()
    wrong = ACL_ROUTES.replace("[ { name: key-auth }, { name: acl, config: { allow: [admin] } } ]",
                               "[ { name: acl, config: { allow: [admin] } }, { name: key-auth } ]")
    path = os.path.join(h.new_tmpdir("acl"), "wrong.yaml")
    with open(path, "w") as f:
        f.write(start(t, wrong, ACL_CONSUMERS, ret_conf=True))
    cp = h.run_cli(["check", "-c", path])
    out = cp.stdout + cp.stderr
    t.check("sluice check: acl before key-auth is an error naming both, at the acl's line",
            cp.returncode != 0 and "wrong.yaml:14:" in out and "must come after 'key-auth'" in out,
            "exit != 0 and wrong.yaml:14: ... must come after 'key-auth'", (cp.returncode, h.short(out)))


RT_ROUTES = """\
  - name: rt
    match: { paths: [/api] }
    upstream: up
    plugins:
      - name: request-transformer
        config:
          remove: { headers: [Cookie], querystring: [debug], body: [password] }
          add: { headers: ["X-Env:prod"], body: ["source:gateway"] }
          append: { querystring: ["via:sluice"] }
          regex_uri: ["^/api/v1/(.*)$", "/v2/$1"]
"""


def test_request_transformer(t):
    s, up = start(t, RT_ROUTES)
    try:
        p = s.port()
        body = json.dumps({"user": "u", "password": "p"}).encode()
        r = h.request(p, "POST", "/api/v1/items/7?debug=1&a=b", body=body,
                      headers=[("Content-Type", "application/json"), ("Cookie", "c=1")])
        d = seen(r) if r.status == 200 else {"headers": [], "body": "null", "target": ""}
        hs = [tuple(x) for x in d["headers"]]
        got = json.loads(d["body"])
        t.check("the upstream gets the rewritten path and query", d["target"] == "/v2/items/7?a=b&via=sluice",
                "/v2/items/7?a=b&via=sluice", d["target"])
        t.check("... the edited headers", h.hget(hs, "Cookie") is None and h.hget(hs, "X-Env") == "prod",
                (None, "prod"), (h.hget(hs, "Cookie"), h.hget(hs, "X-Env")))
        t.check("... the edited JSON body, with its own Content-Length",
                got == {"user": "u", "source": "gateway"} and
                h.hget(hs, "Content-Length") == str(len(d["body"].encode())),
                {"user": "u", "source": "gateway"}, (got, h.hget(hs, "Content-Length")))
    finally:
        s.stop()
        up.stop()


RESP_ROUTES = """\
  - name: resp
    match: { paths: [/resp] }
    upstream: up
    plugins:
      - name: response-transformer
        config:
          remove: { headers: [Server], json: [internal] }
          add: { headers: ["X-Via:sluice"], json: ["gateway:sluice"] }
          max_body: 4KiB
"""
BIG = b'{"internal":"' + b"x" * 8192 + b'"}'


def json_pieces(req):
    hs = [("Content-Type", "application/json"), ("Server", "mock")]
    if req.path == "/resp/len":
        return h.Response(200, headers=hs, body=b'{"user":"u","internal":1}')
    if req.path == "/resp/big":
        return h.Response(200, headers=hs, stream=[BIG[:4000], BIG[4000:]], chunk_delay=0.05)
    pieces = [b'{"user":', b'"u","inter', b'nal":{"a":1}}']
    return h.Response(200, headers=hs, stream=pieces, chunk_delay=0.05)


def test_response_transformer(t):
    s, up = start(t, RESP_ROUTES, on_request=json_pieces)
    try:
        p = s.port()
        r = h.request(p, "GET", "/resp")
        got = body_json(r)
        t.check("a JSON body streamed in pieces arrives edited whole", got == {"user": "u", "gateway": "sluice"},
                {"user": "u", "gateway": "sluice"}, got)
        t.check("... with the edited headers", h.hget(r.headers, "Server") is None and
                h.hget(r.headers, "X-Via") == "sluice", (None, "sluice"),
                (h.hget(r.headers, "Server"), h.hget(r.headers, "X-Via")))
        r = h.request(p, "GET", "/resp/big")
        t.check("a body over max_body streams through unchanged", r.body == BIG, len(BIG), len(r.body))
        # The upstream's Content-Length is for the body before the edit: a GET goes without
        # one (chunked), and so must a HEAD, over HTTP/1.1 and HTTP/2 alike.
        g = h.request(p, "GET", "/resp/len")
        hd = h.request(p, "HEAD", "/resp/len")
        t.check("GET of an edited body: no upstream Content-Length", body_json(g) == {"user": "u", "gateway": "sluice"}
                and h.hget(g.headers, "Content-Length") is None, None, h.hget(g.headers, "Content-Length"))
        t.check("HEAD of an edited body: no upstream Content-Length either", hd.status == 200 and
                h.hget(hd.headers, "Content-Length") is None, (200, None), (hd.status, h.hget(hd.headers, "Content-Length")))
        c = subprocess.run(["curl", "-sS", "-I", "--http2-prior-knowledge", "http://127.0.0.1:%d/resp/len" % p],
                           capture_output=True, text=True, timeout=20)
        t.check("HEAD over HTTP/2: no upstream Content-Length", c.stdout.startswith("HTTP/2 200") and
                "content-length" not in c.stdout.lower(), "HTTP/2 200 without content-length", c.stdout + c.stderr)
    finally:
        s.stop()
        up.stop()


RV_ROUTES = """\
  - name: rv
    match: { paths: [/rv] }
    upstream: up
    plugins:
      - name: request-validation
        config:
          body_schema:
            type: object
            required: [name]
            properties:
              name: { type: string }
              items: { type: array, items: { type: object, required: [id] } }
"""


def test_request_validation(t):
    s, up = start(t, RV_ROUTES)
    try:
        p = s.port()
        good = b'{"name":"n","items":[{"id":1}]}'
        r = h.request(p, "POST", "/rv", body=good, headers=[("Content-Type", "application/json")])
        t.check("a valid body reaches the upstream unchanged",
                r.status == 200 and seen(r)["body"] == good.decode(), 200, r.status)
        n = up.snapshot()[2]
        r = h.request(p, "POST", "/rv", body=b'{"name":"n","items":[{"id":1},{}]}',
                      headers=[("Content-Type", "application/json")])
        d = body_json(r)
        t.check("an invalid body: 400 naming the first failing path",
                r.status == 400 and d == {"error": "request validation failed", "path": "body.items[1].id",
                                          "reason": "is required"}, 400, (r.status, d))
        t.check("... and the upstream is not asked", up.snapshot()[2] == n, n, up.snapshot()[2])
    finally:
        s.stop()
        up.stop()


REALIP_ROUTES = """\
  - name: rip
    match: { paths: [/rip] }
    upstream: up
    plugins:
      - { name: real-ip, config: { trusted: [127.0.0.1] } }
      - { name: ip-restriction, config: { deny: [203.0.113.0/24] } }
      - { name: access-log, config: { path: %s, fields: [path, client] } }
"""


def test_real_ip(t):
    log = os.path.join(h.new_tmpdir("rip"), "access.log")
    s, up = start(t, REALIP_ROUTES % log)
    try:
        p = s.port()
        r = h.request(p, "GET", "/rip/a", headers=[("X-Forwarded-For", "127.0.0.9"),
                                                   ("X-Forwarded-For", "198.51.100.7")])
        hs = [tuple(x) for x in seen(r)["headers"]] if r.status == 200 else []
        xff = h.hget(hs, "X-Forwarded-For") or ""
        t.check("the upstream's X-Forwarded-For still ends with the socket peer (real-ip does not edit it)",
                xff.endswith("198.51.100.7, 127.0.0.1"), "..., 198.51.100.7, 127.0.0.1", xff)
        r = h.request(p, "GET", "/rip/b", headers=[("X-Forwarded-For", "203.0.113.5")])
        t.check("ip-restriction judges the real client", r.status == 403, 403, r.status)
        lines = []
        deadline = time.monotonic() + 3
        while len(lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            with open(log) as f:
                lines = [json.loads(x) for x in f if x.strip()]
        t.check("access-log writes the real client (the proxy's own field, added last, decides)",
                lines == [{"path": "/rip/a", "client": "198.51.100.7"}, {"path": "/rip/b", "client": "203.0.113.5"}],
                "198.51.100.7 then 203.0.113.5", lines)
    finally:
        s.stop()
        up.stop()


t.run(test_request_size_limit, test_fault_injection, test_acl, test_request_transformer,
      test_response_transformer, test_request_validation, test_real_ip)
