"""python3-grpcio on both ends through sluice's gRPC routing (HTTP/2 upstreams): the four
RPC kinds over h2c (client prior knowledge -> `protocol: h2c` upstream) and over TLS
(client ALPN h2 -> `protocol: h2` upstream with TLS verified against the test CA); messages
sha256-exact, request metadata, initial metadata and trailers (text and -bin) intact, error
statuses with their details and trailers, a stream aborted midway, and deadlines.

Messages are raw bytes (generic handlers, identity serializers: no protoc)."""

import hashlib
import os
import queue
import sys
import time
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

try:
    import grpc
except ImportError:  # need_modules fails the case
    grpc = None

SVC = "interop.Peer"
SIZES = (0, 1, 1000, 64 << 10, 1 << 20)
OPTS = [("grpc.max_receive_message_length", 8 << 20), ("grpc.max_send_message_length", 8 << 20)]


def ident(b):
    return b


def msg(i, size):
    """Message i of `size` bytes: deterministic, different per i."""
    seed = hashlib.sha256(b"%d:%d" % (i, size)).digest()
    return (seed * (size // 32 + 1))[:size]


def trailers(ctx, kind):
    """Every call's trailers: its kind, the request's x-req echoed, a binary one."""
    md = dict(ctx.invocation_metadata())
    ctx.set_trailing_metadata((("x-kind", kind), ("x-req-echo", md.get("x-req", "")),
                               ("x-blob-bin", b"\x00\x01\xfe\xff")))


# ---------------------------------------------------------------- the server's methods

def unary(req, ctx):
    ctx.send_initial_metadata((("x-initial", "unary"),))
    if req == b"notfound":
        ctx.set_trailing_metadata((("x-why", "missing"), ("x-blob-bin", b"\xff\x00")))
        ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing: caf\u00e9 100%")
    if req.startswith(b"sleep:"):
        end = time.monotonic() + float(req[6:])
        while time.monotonic() < end and ctx.is_active():
            time.sleep(0.02)
    trailers(ctx, "unary")
    return hashlib.sha256(req).digest() + req


def server_stream(req, ctx):
    n, size = (int(x) for x in req.split(b":")[:2])
    for i in range(n):
        if req.endswith(b":abort") and i == 3:
            ctx.set_trailing_metadata((("x-why", "abort-at-3"),))
            ctx.abort(grpc.StatusCode.ABORTED, "stopped after 3")
        yield msg(i, size)
    trailers(ctx, "server_stream")


def client_stream(it, ctx):
    d, n = hashlib.sha256(), 0
    for m in it:
        d.update(m)
        n += 1
    trailers(ctx, "client_stream")
    return b"%d:%s" % (n, d.hexdigest().encode())


def bidi(it, ctx):
    for m in it:
        yield m[::-1]
    trailers(ctx, "bidi")


def server(t, cert=None):
    """A grpcio server on 127.0.0.1 (TLS when cert=(crt, key)); returns its port."""
    io.need_modules(t, "grpc")
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=OPTS)
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SVC, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, ident, ident),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, ident, ident),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, ident, ident),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi, ident, ident),
    }),))
    if cert:
        with open(cert[0], "rb") as f:
            crt = f.read()
        with open(cert[1], "rb") as f:
            key = f.read()
        port = srv.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, crt)]))
    else:
        port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    io.h._register(_Stop(srv))
    return port


class _Stop:
    """Registers a grpcio server with the harness's cleanup."""

    def __init__(self, srv):
        self.srv = srv

    def stop(self):
        self.srv.stop(0)


def gateway(t, tls):
    """sluice with a gRPC route to a grpcio server: h2c to a plaintext one, or (tls) TLS
    listener and `protocol: h2` with TLS to a TLS one. Returns (sluice, channel)."""
    c = io.certs(t) if tls else None
    port = server(t, c["localhost"] if tls else None)
    if tls:
        ups = "  - { name: o, protocol: h2, targets: [ { address: 127.0.0.1:%d, tls: { ca: %s } } ] }\n" % (
            port, c["ca"])
    else:
        ups = "  - { name: o, protocol: h2c, targets: [ { address: 127.0.0.1:%d } ] }\n" % port
    s = io.l7(t, ups, routes="  - { name: g, match: { paths: [/%s/] }, upstream: o }\n" % SVC,
              tls=c["localhost"] if tls else None)
    if tls:
        with open(c["ca"], "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        ch = grpc.secure_channel("127.0.0.1:%d" % s.port("tls"), creds, options=OPTS)
    else:
        ch = grpc.insecure_channel("127.0.0.1:%d" % s.port(), options=OPTS)
    return s, ch


def stub(ch, kind):
    make = {"Unary": ch.unary_unary, "ServerStream": ch.unary_stream,
            "ClientStream": ch.stream_unary, "Bidi": ch.stream_stream}[kind]
    return make("/%s/%s" % (SVC, kind), request_serializer=ident, response_deserializer=ident)


def want_trailers(kind, req="r-1"):
    return {"x-kind": kind, "x-req-echo": req, "x-blob-bin": b"\x00\x01\xfe\xff"}


def got_trailers(call):
    return {k: v for k, v in (call.trailing_metadata() or ()) if k in ("x-kind", "x-req-echo", "x-blob-bin")}


def kinds(t, tls):
    s, ch = gateway(t, tls)
    label = "tls" if tls else "h2c"
    md = (("x-req", "r-1"),)
    # unary: every size, the reply is sha256(request) + request
    bad = []
    for i, size in enumerate(SIZES):
        req = msg(100 + i, size)
        reply, call = stub(ch, "Unary").with_call(req, metadata=md, timeout=30)
        if reply != hashlib.sha256(req).digest() + req or call.code() != grpc.StatusCode.OK:
            bad.append(size)
    t.check("%s: unary: %d calls of 0 B..1 MiB, each reply exact, status OK" % (label, len(SIZES)),
            not bad, [], bad)
    t.check("%s: unary: initial metadata and trailers (text and -bin, request metadata echoed) intact"
            % label, dict(call.initial_metadata()).get("x-initial") == "unary"
            and got_trailers(call) == want_trailers("unary"),
            want_trailers("unary"), (call.initial_metadata(), call.trailing_metadata()))
    # server streaming: 20 messages of 64 KiB
    call = stub(ch, "ServerStream")(b"20:65536", metadata=md, timeout=30)
    got = list(call)
    t.check("%s: server streaming: 20 messages of 64 KiB, each exact, in order, then OK with its "
            "trailers" % label, got == [msg(i, 65536) for i in range(20)] and call.code() == grpc.StatusCode.OK
            and got_trailers(call) == want_trailers("server_stream"), "20 exact + trailers",
            (len(got), call.code(), got_trailers(call)))
    # client streaming: 50 messages of 0..~1 MiB
    sent = [msg(i, (i * 21011) % (1 << 20)) for i in range(50)]
    d = hashlib.sha256(b"".join(sent)).hexdigest().encode()
    reply, call = stub(ch, "ClientStream").with_call(iter(sent), metadata=md, timeout=60)
    t.check("%s: client streaming: 50 messages (%d bytes) counted and hashed by the server exact"
            % (label, sum(map(len, sent))),
            reply == b"50:" + d and got_trailers(call) == want_trailers("client_stream"),
            b"50:" + d[:16], (reply[:24], got_trailers(call)))
    # bidi, interleaved: each request goes only after the previous reply came back
    replies, q, bad = [], queue.Queue(), []

    def requests():
        for i in range(100):
            yield msg(1000 + i, 1 + i * 997)
            if q.get(timeout=30) is None:
                return
    call = stub(ch, "Bidi")(requests(), metadata=md, timeout=60)
    for i, r in enumerate(call):
        replies.append(r)
        if r != msg(1000 + i, 1 + i * 997)[::-1]:
            bad.append(i)
        q.put(True)
    t.check("%s: bidi: 100 messages interleaved (each reply before the next request), each reply "
            "exact, then OK with its trailers" % label,
            len(replies) == 100 and not bad and call.code() == grpc.StatusCode.OK
            and got_trailers(call) == want_trailers("bidi"), "100 exact",
            (len(replies), bad[:5], call.code(), got_trailers(call)))
    _, samples = s.metrics()
    ok = sum(io.h.metric_values(samples, "sluice_grpc_responses_total", route="g", grpc_status="0"))
    t.check("%s: the gateway counted %d gRPC responses with grpc-status 0 (it saw every trailer)"
            % (label, len(SIZES) + 3), ok == len(SIZES) + 3, len(SIZES) + 3, ok)
    ch.close()


@io.case("h2c.rpc_kinds", "unary, server streaming, client streaming and bidi (interleaved) "
         "grpcio calls through sluice over h2c to a grpcio h2c server: every message exact, "
         "metadata and trailers intact, status OK", budget=90)
def h2c_kinds(t):
    kinds(t, tls=False)


@io.case("tls.rpc_kinds", "the four RPC kinds with grpcio over TLS (ALPN h2, test CA) through "
         "sluice to a grpcio TLS server (protocol h2, certificate verified): every message exact, "
         "metadata and trailers intact, status OK", budget=90)
def tls_kinds(t):
    kinds(t, tls=True)


@io.case("h2c.status_and_deadline", "a server's NOT_FOUND with a non-ASCII details string and "
         "trailers, and a stream ABORTED after 3 messages, arrive intact through sluice; a call "
         "past its deadline ends DEADLINE_EXCEEDED in bounded time and the channel goes on",
         budget=90)
def status_deadline(t):
    s, ch = gateway(t, tls=False)
    try:
        stub(ch, "Unary").with_call(b"notfound", timeout=30)
        got = ("OK",)
    except grpc.RpcError as e:
        got = (e.code(), e.details(), {k: v for k, v in (e.trailing_metadata() or ())
                                       if k in ("x-why", "x-blob-bin")})
    want = (grpc.StatusCode.NOT_FOUND, "no such thing: caf\u00e9 100%", {"x-why": "missing", "x-blob-bin": b"\xff\x00"})
    t.check("NOT_FOUND: its details (non-ASCII, percent-encoded on the wire) and trailers arrive intact",
            got == want, want, got)
    call = stub(ch, "ServerStream")(b"10:1000:abort", timeout=30)
    got_msgs = []
    try:
        for m in call:
            got_msgs.append(m)
        end = ("OK",)
    except grpc.RpcError as e:
        end = (e.code(), e.details(), dict(e.trailing_metadata() or ()).get("x-why"))
    t.check("a server stream aborted after 3 messages: the 3 exact, then ABORTED with its details "
            "and trailer", got_msgs == [msg(i, 1000) for i in range(3)]
            and end == (grpc.StatusCode.ABORTED, "stopped after 3", "abort-at-3"),
            "3 + ABORTED", (len(got_msgs), end))
    t0 = time.monotonic()
    try:
        stub(ch, "Unary").with_call(b"sleep:5", timeout=1.0)
        code = grpc.StatusCode.OK
    except grpc.RpcError as e:
        code = e.code()
    took = time.monotonic() - t0
    t.check("a 1 s deadline on a 5 s call: DEADLINE_EXCEEDED well before the server's answer (%.2f s)"
            % took, code == grpc.StatusCode.DEADLINE_EXCEEDED and took < 4.5, "DEADLINE_EXCEEDED < 4.5 s",
            (code, took))
    reply, call = stub(ch, "Unary").with_call(b"after", timeout=30)
    t.check("the same channel serves the next call (OK, exact)",
            reply == hashlib.sha256(b"after").digest() + b"after", "exact", reply[-8:])
    _, samples = s.metrics()
    counted = {l["grpc_status"]: v for n, l, v in samples if n == "sluice_grpc_responses_total"}
    t.info("sluice_grpc_responses_total by grpc_status: %s" % counted)
    t.check("the gateway counted NOT_FOUND (5) and ABORTED (10) once each, and the OK call",
            counted.get("5") == 1 and counted.get("10") == 1 and counted.get("0") == 1,
            {"5": 1, "10": 1, "0": 1}, counted)
    ch.close()


if __name__ == "__main__":
    io.main()
