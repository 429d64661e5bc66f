"""HTTP/2 :authority and host must agree (issue 26; RFC 9113 8.3.1, DESIGN's HTTP/2 bullet).

An HTTP/2 request is rewritten as HTTP/1.1 for the upstream, with one Host. A request whose
`host` field names another authority than its `:authority`, or that carries two
`:authority` pseudo-headers or two `host` fields, leaves the gateway and the upstream to
pick different ones (the HTTP/2 -> HTTP/1 downgrade): it is malformed, a stream error
RST_STREAM PROTOCOL_ERROR, and the upstream (an HTTP/1.1 mock recording every byte) never
sees a byte of it. Host names compare ASCII case-insensitively (RFC 9110 4.2.3), nothing
else is normalised (docs/DECISIONS.md): `a.test` and `A.Test` agree, `a.test:80` and
`a.test` do not. `:authority` alone, `host` alone, or both agreeing stay valid: 200,
forwarded once, with that authority as Host.

Every case runs, in order, on one connection per transport: h2c with prior knowledge on a
plaintext listener and h2 over TLS (ALPN, certificates made by openssl here), so each good
stream after a bad one also shows the connection survived the stream error (no GOAWAY).

python3-h2 imports only under /usr/bin/python3: the file re-executes itself there. The
client sends the fields as given (outbound validation and normalisation off).
"""

import os
import socket
import ssl
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_util as g  # noqa: E402

g.reexec_under_debian_python("h2")

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.errors  # noqa: E402
import h2.events  # noqa: E402

import harness as h  # noqa: E402

t = h.Suite("h2_authority", budget=90)
S = {}
PROTOCOL_ERROR = int(h2.errors.ErrorCodes.PROTOCOL_ERROR)

# (name, the request's fields after :method/:scheme/:path, whether it is valid, the Host the
# upstream must see). The path of each case is /up/<transport>/<name>; a case whose name
# ends in -body is a POST whose DATA follows its HEADERS in the same write, so it reaches the
# gateway after the head was refused.
CASES = [
    ("agree", [(":authority", "a.test"), ("host", "a.test")], True, "a.test"),
    ("mismatch", [(":authority", "a.test"), ("host", "b.test")], False, None),
    ("mismatch-body", [(":authority", "a.test"), ("host", "b.test")], False, None),
    ("agree-body", [(":authority", "a.test"), ("host", "a.test")], True, "a.test"),
    ("authority-only", [(":authority", "a.test")], True, "a.test"),
    ("dup-authority", [(":authority", "a.test"), (":authority", "b.test")], False, None),
    ("host-only", [("host", "a.test")], True, "a.test"),
    ("dup-authority-same", [(":authority", "a.test"), (":authority", "a.test")], False, None),
    ("agree-case", [(":authority", "a.test"), ("host", "A.Test")], True, "a.test"),
    ("dup-host", [("host", "a.test"), ("host", "b.test")], False, None),
    ("agree-2", [(":authority", "a.test:8443"), ("host", "a.test:8443")], True, "a.test:8443"),
    ("dup-host-authority", [(":authority", "a.test"), ("host", "a.test"), ("host", "b.test")], False, None),
    ("port-differs", [(":authority", "a.test:80"), ("host", "a.test")], False, None),
    ("last", [(":authority", "a.test")], True, "a.test"),
]


def setup(t):
    d = h.new_tmpdir("h2auth")
    h.make_ca(d)
    crt, key = h.make_leaf(d, "gw", "localhost", "DNS:localhost,IP:127.0.0.1")
    S["ca"] = os.path.join(d, "ca.crt")
    S["up"] = h.MockUpstream()
    S["sl"] = h.start_sluice(f"""
workers: 1
admin: {{ listen: 127.0.0.1:0 }}
watch: false
listeners:
  - {{ name: web, listen: 127.0.0.1:0 }}
  - name: tls
    listen: 127.0.0.1:0
    tls:
      certificates:
        - {{ cert: {crt}, key: {key} }}
upstreams: [ {{ name: up, targets: [ {{ address: {S["up"].address} }} ] }} ]
routes: [ {{ name: up, match: {{ paths: [/up] }}, upstream: up }} ]
""", suite=t)


def connect(tls):
    """A client connection (socket, h2 connection) to the web (h2c) or tls (h2) listener."""
    s = socket.create_connection(("127.0.0.1", S["sl"].port("tls" if tls else "web")), timeout=5)
    if tls:
        ctx = ssl.create_default_context(cafile=S["ca"])
        ctx.set_alpn_protocols(["h2"])
        s = ctx.wrap_socket(s, server_hostname="localhost")
        if s.selected_alpn_protocol() != "h2":
            raise RuntimeError("ALPN chose %r, not h2" % s.selected_alpn_protocol())
    c = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False,
        validate_inbound_headers=False, header_encoding="utf-8"))
    c.initiate_connection()
    s.sendall(c.data_to_send())
    return s, c


def exchange(s, c, fields, body=None):
    """Sends one request (HEADERS, then `body` as DATA when given, ending the stream) and reads
    until its stream ends or is reset. {"status", "reset" (error code), "goaway" (error
    code), "closed"}."""
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, fields, end_stream=body is None)
    if body is not None:
        c.send_data(sid, body, end_stream=True)
    s.sendall(c.data_to_send())
    out = {"status": None, "reset": None, "goaway": None, "closed": False}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            data = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            data = b""
        if not data:
            out["closed"] = True
            return out
        done = False
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                out["status"] = int(dict(ev.headers)[":status"])
            elif isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                done = True
            elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                out["reset"] = int(ev.error_code)
                done = True
            elif isinstance(ev, h2.events.ConnectionTerminated):
                out["goaway"] = int(ev.error_code)
                done = True
        s.sendall(c.data_to_send())
        if done:
            return out
    return out


def run_cases(t, tls):
    name = "tls" if tls else "h2c"
    mark = S["up"].mark()
    n0 = len(S["up"].requests)
    s, c = connect(tls)
    got, bodies = {}, {}
    try:
        for case, extra, _, _ in CASES:
            path = "/up/%s/%s" % (name, case)
            body = bodies[case] = b"payload-" + case.encode() if case.endswith("-body") else None
            got[case] = exchange(s, c, [(":method", "GET" if body is None else "POST"),
                                        (":scheme", "https" if tls else "http"), (":path", path)] + extra, body)
    finally:
        s.close()
    time.sleep(0.3)  # anything forwarded late would have arrived by now
    seen = [rq for rq in S["up"].requests[n0:]]
    raw = S["up"].since(mark)
    for case, extra, valid, host in CASES:
        path = "/up/%s/%s" % (name, case)
        r, body = got[case], bodies[case]
        ups = [rq for rq in seen if rq.path == path]
        shown = ", ".join("%s: %s" % f for f in extra)
        if valid:
            t.check("%s %s (%s) -> 200, forwarded once with Host %s" % (name, case, shown, host),
                    r["status"] == 200 and r["reset"] is None and len(ups) == 1 and ups[0].header_all("host") == [host]
                    and ups[0].body == (body or b""), (200, None, 1, [host], body or b""),
                    (r, len(ups), [(u.header_all("host"), u.body[:100]) for u in ups]))
        else:
            t.check("%s %s (%s) -> RST_STREAM PROTOCOL_ERROR, no response" % (name, case, shown),
                    r["reset"] == PROTOCOL_ERROR and r["status"] is None and r["goaway"] is None,
                    {"reset": PROTOCOL_ERROR, "status": None, "goaway": None}, r)
            t.check("%s %s: the upstream received none of its bytes" % (name, case),
                    not ups and path.encode() not in raw and not (body and body in raw),
                    "no request, neither its path nor its body in the upstream's bytes",
                    (len(ups), path.encode() in raw, bool(body and body in raw)))
    t.check("%s: the connection survived every stream error (no GOAWAY, not closed)" % name,
            all(r["goaway"] is None and not r["closed"] for r in got.values()), "no GOAWAY, open",
            {k: (v["goaway"], v["closed"]) for k, v in got.items()})


def test_h2c(t):
    run_cases(t, tls=False)


def test_tls(t):
    run_cases(t, tls=True)


if __name__ == "__main__":
    t.run(setup, test_h2c, test_tls)
