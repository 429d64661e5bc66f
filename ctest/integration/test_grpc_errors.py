"""Gateway-made errors reach gRPC clients as gRPC errors (issue 14).

A real grpcio client (Debian python3-grpcio) calls through sluice over HTTP/2 prior
knowledge; every answer the gateway makes itself becomes an HTTP 200 trailers-only response
whose grpc-status follows gRPC's HTTP-to-gRPC mapping:
  no route (404) -> UNIMPLEMENTED; refused upstream (502) -> UNAVAILABLE; breaker open
  (503) -> UNAVAILABLE; the upstream's read timeout (the gateway's 504) -> DEADLINE_EXCEEDED;
  key-auth and jwt-auth (401) -> UNAUTHENTICATED; rate-limit (429) -> UNAVAILABLE; an exit
  with status 403 -> PERMISSION_DENIED; a plugin's explicit grpc-status/grpc-message win.
With an h2c upstream (a real grpcio server), jwt-auth, key-auth and rate-limit on gRPC
routes read their credentials from gRPC metadata (headers): the call passes with a valid
key or token (the reply and the upstream's trailers arrive) and is refused with
UNAUTHENTICATED without (or with an expired token); the rate-limited call is UNAVAILABLE
(429 in gRPC's table).
Over HTTP/2 the answer is one HEADERS frame with END_STREAM (h2 library); over HTTP/1.1
(grpc-web clients) a 200 head with grpc-status, Content-Length 0. A non-gRPC request on
the same route still gets its HTTP error. sluice_grpc_responses_total counts them.
A grpc-timeout that passes while a plugin sleeps (fault-injection's delay) or in a retry's
backoff is answered DEADLINE_EXCEEDED at the deadline (the route's header_filter still
running on it).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_util as g  # noqa: E402

g.reexec_under_debian_python()

import base64  # noqa: E402
import hashlib  # noqa: E402
import hmac  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402

import harness as h  # noqa: E402
from grpc_inproc import Service  # noqa: E402

t = h.Suite("grpc_errors", budget=90)

CONF = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
consumers:
  - name: alice
    credentials:
      key-auth: { key: k-alice }
upstreams:
  - { name: dead, targets: [ { address: %(dead)s } ] }
  - { name: brk, targets: [ { address: %(dead)s } ],
      circuit_breaker: { failure_ratio: 0.5, min_requests: 2, open_timeout: 30s } }
  - { name: slow, targets: [ { address: %(slow)s } ], timeouts: { read: 300ms } }
routes:
  - { name: dead, match: { paths: [/dead.Svc/] }, upstream: dead }
  - { name: brk, match: { paths: [/brk.Svc/] }, upstream: brk }
  - { name: slow, match: { paths: [/slow.Svc/] }, upstream: slow }
  - { name: keyed, match: { paths: [/keyed.Svc/] }, upstream: slow,
      plugins: [ { name: key-auth, config: {} } ] }
  - { name: jwt, match: { paths: [/jwt.Svc/] }, upstream: slow,
      plugins: [ { name: jwt-auth, config: { algorithms: [HS256], secret_env: SL_GRPC_JWT } } ] }
  - { name: limited, match: { paths: [/limited.Svc/] }, upstream: dead,
      plugins: [ { name: rate-limit, config: { rate: 1, per: 1m, burst: 0 } } ] }
  - { name: denied, match: { paths: [/denied.Svc/] },
      plugins: [ { name: response, config: { status: 403, body: "go away" } } ] }
  - { name: explicit, match: { paths: [/explicit.Svc/] },
      plugins: [ { name: response, config: { status: 404,
                   headers: { grpc-status: "5", grpc-message: "no such thing" } } } ] }
"""


def grpc_counts(samples):
    """{(route, grpc_status): count} of sluice_grpc_responses_total."""
    return {(lab.get("route"), lab.get("grpc_status")): float(v) for n, lab, v in samples
            if n == "sluice_grpc_responses_total"}


def h2_frames(port, path, ctype="application/grpc", extra=()):
    """Sends one request over h2c and returns the events of its stream, to see the frame
    shape of the answer: [(event class name, headers or None, stream_ended)]."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", "x"), (":path", path),
                            ("content-type", ctype), ("te", "trailers")] + list(extra))
    conn.send_data(sid, g.frame(b""), end_stream=True)
    sock.sendall(conn.data_to_send())
    evs, done = [], False
    while not done:
        data = sock.recv(65536)
        if not data:
            break
        for ev in conn.receive_data(data):
            if getattr(ev, "stream_id", None) != sid:
                continue
            hdrs = dict((k.decode(), v.decode()) for k, v in ev.headers) if hasattr(ev, "headers") else None
            evs.append((type(ev).__name__, hdrs, getattr(ev, "stream_ended", None) is not None))
            if isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                done = True
        sock.sendall(conn.data_to_send())
    sock.close()
    return evs


def test_errors(t):
    slow = h.MockUpstream(lambda req: h.HANG, name="slow")
    dead_sock, dead = h.refused_port()
    s = h.start_sluice(CONF % {"dead": "127.0.0.1:%d" % dead, "slow": slow.address}, suite=t, name="grpc-err",
                       env=dict(os.environ, SL_GRPC_JWT="k" * 32))
    try:
        p = s.port()
        cases = [
            ("no route (404)", "/nowhere.Svc/M", None, "UNIMPLEMENTED"),
            ("refused upstream (502)", "/dead.Svc/M", None, "UNAVAILABLE"),
            ("upstream read timeout (the gateway's deadline, 504)", "/slow.Svc/M", None, "DEADLINE_EXCEEDED"),
            ("key-auth without a key (401)", "/keyed.Svc/M", None, "UNAUTHENTICATED"),
            ("key-auth with a wrong key (401)", "/keyed.Svc/M", [("apikey", "nope")], "UNAUTHENTICATED"),
            ("jwt-auth without a token (401)", "/jwt.Svc/M", None, "UNAUTHENTICATED"),
            ("response.exit(403)", "/denied.Svc/M", None, "PERMISSION_DENIED"),
            ("a plugin's own grpc-status 5 on a 404 exit", "/explicit.Svc/M", None, "NOT_FOUND"),
        ]
        for name, path, md, want in cases:
            code, details, _, _ = g.unary(p, path, metadata=md)
            t.check("%s -> %s" % (name, want), code == want, want, (code, details))
        code, details, _, _ = g.unary(p, "/explicit.Svc/M")
        t.check("the plugin's grpc-message reaches the client", details == "no such thing", "no such thing", details)
        code, details, _, _ = g.unary(p, "/denied.Svc/M")
        t.check("grpc-message is the exit's body", details == "go away", "go away", details)
        code, details, _, _ = g.unary(p, "/dead.Svc/M")
        t.check("grpc-message names the gateway's reason", "bad gateway" in (details or ""), "bad gateway", details)

        # rate-limit: one call a minute; the second is limited (429 -> UNAVAILABLE)
        first = g.unary(p, "/limited.Svc/M")[0]
        second = g.unary(p, "/limited.Svc/M")
        t.check("rate-limit: the admitted call reaches the (dead) upstream: UNAVAILABLE", first == "UNAVAILABLE",
                "UNAVAILABLE", first)
        t.check("rate-limit's 429 -> UNAVAILABLE, its body as the message", second[0] == "UNAVAILABLE" and
                "rate limited" in (second[1] or ""), "UNAVAILABLE rate limited", second[:2])

        # breaker: two failures open it; the next call is refused by the gateway (503)
        for _ in range(2):
            g.unary(p, "/brk.Svc/M")
        code, details, _, _ = g.unary(p, "/brk.Svc/M")
        t.check("open breaker (503) -> UNAVAILABLE \"circuit breaker open\"",
                code == "UNAVAILABLE" and "circuit breaker open" in (details or ""), "UNAVAILABLE", (code, details))

        # the frame shape: one HEADERS frame with END_STREAM, no DATA, no content-length
        evs = h2_frames(p, "/nowhere.Svc/M")
        first = evs[0] if evs else (None, None, None)
        hd = first[1] or {}
        t.check("HTTP/2: trailers-only = one HEADERS frame with END_STREAM (no DATA, no trailers)",
                first[0] == "ResponseReceived" and first[2] and
                [e[0] for e in evs] == ["ResponseReceived", "StreamEnded"], "ResponseReceived+END_STREAM", evs)
        t.check("HTTP/2: :status 200, content-type application/grpc, grpc-status 12, grpc-message, no length",
                hd.get(":status") == "200" and hd.get("content-type") == "application/grpc" and
                hd.get("grpc-status") == "12" and "grpc-message" in hd and "content-length" not in hd, "that", hd)
        evs = h2_frames(p, "/denied.Svc/M")
        hd = (evs[0][1] if evs else None) or {}
        t.check("the JSON Content-Type an exit set is replaced by application/grpc",
                hd.get("content-type") == "application/grpc" and hd.get("grpc-status") == "7", "grpc 7", hd)

        # HTTP/1.1 (grpc-web clients): a 200 head with grpc-status, Content-Length 0
        r = h.request(p, "POST", "/nowhere.Svc/M", headers=[("Content-Type", "application/grpc-web+proto")],
                      body=g.frame(b""))
        t.check("HTTP/1.1 grpc-web request: 200, grpc-status 12, its own content type back, empty body",
                r.status == 200 and r.header("grpc-status") == "12" and
                r.header("content-type") == "application/grpc-web+proto" and r.body == b"" and
                r.header("content-length") == "0", (200, "12"),
                (r.status, r.header("grpc-status"), r.header("content-type"), r.body[:80]))
        r = h.request(p, "GET", "/nowhere.Svc/M")
        t.check("a non-gRPC request keeps its HTTP error (404 JSON)", r.status == 404 and r.header("grpc-status") is None,
                404, (r.status, r.header("grpc-status")))

        # percent-encoding: a message with '%' and non-ASCII bytes arrives decoded
        def counted(got):
            return got.get(("none", "12"), 0) >= 3 and (
                got.get(("keyed", "16")) == 2 and got.get(("denied", "7")) == 3 and got.get(("explicit", "5")) == 2)
        got = grpc_counts(s.metrics_until(lambda m: counted(grpc_counts(m))))
        t.check("sluice_grpc_responses_total: none/12 (no route) counted", got.get(("none", "12"), 0) >= 3,
                ">= 3", got)
        t.check("sluice_grpc_responses_total: keyed/16, denied/7, explicit/5",
                got.get(("keyed", "16")) == 2 and got.get(("denied", "7")) == 3 and got.get(("explicit", "5")) == 2,
                "2, 3, 2", got)
    finally:
        s.stop()
        slow.stop()
        dead_sock.close()


AUTH_CONF = """\
workers: 1
admin: { listen: 127.0.0.1:0 }
listeners: [ { name: web, listen: 127.0.0.1:0 } ]
consumers:
  - name: alice
    credentials:
      key-auth: { key: k-alice }
upstreams:
  - { name: svc, protocol: h2c, targets: [ { address: 127.0.0.1:%(port)d } ] }
routes:
  - { name: keyed, match: { paths: [/w.S/Unary], headers: { x-route: keyed } }, upstream: svc,
      plugins: [ { name: key-auth } ] }
  - { name: jwt, match: { paths: [/w.S/Unary], headers: { x-route: jwt } }, upstream: svc,
      plugins: [ { name: jwt-auth, config: { algorithms: [HS256], secret_env: SL_GRPC_JWT } } ] }
  - { name: limited, match: { paths: [/w.S/Unary], headers: { x-route: limited } }, upstream: svc,
      plugins: [ { name: rate-limit, config: { rate: 1, per: 1m, burst: 0 } } ] }
"""
SECRET = "k" * 32


def hs256(claims):
    b64u = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()  # noqa: E731
    signing = b64u(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + b64u(json.dumps(claims).encode())
    return signing + "." + b64u(hmac.new(SECRET.encode(), signing.encode(), hashlib.sha256).digest())


def test_auth_metadata(t):
    svc = Service()
    s = h.start_sluice(AUTH_CONF % {"port": svc.port}, suite=t, name="grpc-auth",
                       env=dict(os.environ, SL_GRPC_JWT=SECRET))
    try:
        p = s.port()
        code, _, reply, tr = g.unary(p, "/w.S/Unary", b"hi", [("x-route", "keyed"), ("apikey", "k-alice")])
        t.check("key-auth: a valid apikey in the metadata passes (reply and the upstream's trailer)",
                code == "OK" and reply == b"hi" and tr.get("x-custom") == "unary", ("OK", b"hi"), (code, reply, tr))
        t.check("key-auth: the key is hidden from the upstream, the consumer named",
                "apikey" not in svc.metadata and svc.metadata.get("x-consumer") == "alice", "no apikey, alice",
                svc.metadata)
        code, details, _, _ = g.unary(p, "/w.S/Unary", b"hi", [("x-route", "keyed")])
        t.check("key-auth: no apikey -> UNAUTHENTICATED", code == "UNAUTHENTICATED", "UNAUTHENTICATED", (code, details))

        token = hs256({"sub": "alice", "exp": int(time.time()) + 300})
        code, _, reply, _ = g.unary(p, "/w.S/Unary", b"jw", [("x-route", "jwt"), ("authorization", "Bearer " + token)])
        t.check("jwt-auth: a valid bearer token in the metadata passes", code == "OK" and reply == b"jw", "OK",
                (code, reply))
        bad = hs256({"sub": "alice", "exp": int(time.time()) - 300})
        code, details, _, _ = g.unary(p, "/w.S/Unary", b"jw", [("x-route", "jwt"), ("authorization", "Bearer " + bad)])
        t.check("jwt-auth: an expired token -> UNAUTHENTICATED", code == "UNAUTHENTICATED", "UNAUTHENTICATED",
                (code, details))

        first = g.unary(p, "/w.S/Unary", b"1", [("x-route", "limited")])
        second = g.unary(p, "/w.S/Unary", b"2", [("x-route", "limited")])
        t.check("rate-limit: the first call passes, the second is UNAVAILABLE (429's mapping)",
                first[0] == "OK" and second[0] == "UNAVAILABLE", ("OK", "UNAVAILABLE"), (first[:2], second[:2]))
        def counted(got):
            return (got.get(("keyed", "0")) == 1 and got.get(("keyed", "16")) == 1 and got.get(("jwt", "0")) == 1 and
                    got.get(("limited", "14")) == 1 and got.get(("limited", "0")) == 1)
        # a passed-through status is counted where the response ends, after the client read it
        got = grpc_counts(s.metrics_until(lambda m: counted(grpc_counts(m))))
        t.check("sluice_grpc_responses_total counts passed-through OKs and the gateway's refusals",
                counted(got), "each 1", got)
    finally:
        s.stop()
        svc.stop()


def test_deadline_in_plugin_wait(t):
    """grpc-timeout counts from the request's arrival, plugins' time included: a deadline
    that passes while a plugin sleeps (fault-injection's delay) is answered at once."""
    svc = Service()
    dead_sock, dead = h.refused_port()
    s = h.start_sluice(f"""
workers: 1
admin: {{ listen: 127.0.0.1:0 }}
listeners: [ {{ name: web, listen: 127.0.0.1:0 }} ]
upstreams:
  - {{ name: svc, protocol: h2c, targets: [ {{ address: 127.0.0.1:{svc.port} }} ] }}
  - {{ name: flaky, protocol: h2c, balancer: round-robin, retry: {{ attempts: 2, backoff: 5s, max_backoff: 5s }},
      targets: [ {{ address: 127.0.0.1:{dead} }}, {{ address: 127.0.0.1:{svc.port} }} ] }}
routes:
  - {{ name: slow, match: {{ paths: [/w.S/] }}, upstream: svc,
      plugins: [ {{ name: cors }}, {{ name: fault-injection, config: {{ delay: {{ duration: 5s }} }} }} ] }}
  - {{ name: flaky, match: {{ paths: [/f.S/] }}, upstream: flaky }}
""", suite=t, name="grpc-deadline-wait")
    try:
        t0 = time.monotonic()
        evs = h2_frames(s.port(), "/w.S/Unary", extra=[("grpc-timeout", "300m"), ("origin", "https://a.example")])
        took = time.monotonic() - t0
        hd = (evs[0][1] if evs else None) or {}
        t.check("grpc-timeout 300m, a 5 s fault-injection delay: trailers-only DEADLINE_EXCEEDED at the deadline, "
                "not after the delay", hd.get(":status") == "200" and hd.get("grpc-status") == "4" and
                [e[0] for e in evs] == ["ResponseReceived", "StreamEnded"] and took < 3.0, ("4", "< 3 s"),
                (round(took, 2), evs))
        t.check("... the route's header_filter ran on it (cors: access-control-allow-origin)",
                hd.get("access-control-allow-origin") == "*", "*", hd)
        code, _, reply, _ = g.unary(s.port(), "/w.S/Unary", b"hi", timeout=10)
        t.check("a call without grpc-timeout waits out the delay and is answered", code == "OK" and reply == b"hi",
                "OK", code)
        got = grpc_counts(s.metrics_until(lambda m: grpc_counts(m).get(("slow", "4")) == 1))
        t.check("counted as grpc_status 4", got.get(("slow", "4")) == 1, 1, got)
        # a retry's backoff: the refused target first (round-robin), then up to 5 s of backoff
        # (full jitter: a backoff drawn under the 300 ms left goes on to the target, answered
        # UNIMPLEMENTED at once; 4 calls all drawing one is a chance of about 1 in 10^5)
        shapes = []
        while len(shapes) < 4 and not any(took < 3.0 and sh[0] == ("ResponseReceived", "4") for took, sh in shapes):
            t0 = time.monotonic()
            evs = h2_frames(s.port(), "/f.S/M", extra=[("grpc-timeout", "300m")])
            shapes.append((round(time.monotonic() - t0, 2), [(e[0], (e[1] or {}).get("grpc-status")) for e in evs]))
        t.check("a deadline passing in a retry's backoff: trailers-only DEADLINE_EXCEEDED at the deadline, the "
                "upstream never asked",
                any(sh == [("ResponseReceived", "4"), ("StreamEnded", None)] and took < 3.0 for took, sh in shapes),
                "a trailers-only grpc-status 4 in < 3 s", shapes)
    finally:
        s.stop()
        svc.stop()
        dead_sock.close()


t.run(test_errors, test_auth_metadata, test_deadline_in_plugin_wait)
