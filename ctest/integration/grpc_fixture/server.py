"""A gRPC test service on python3-grpcio (Debian's: run it under /usr/bin/python3).

Generic handlers with identity serializers: messages are raw bytes, no protoc. Prints
"READY <port>" once serving; SIGTERM (or a line "stop <grace>" on stdin) stops it
gracefully: GOAWAY to its clients, in-flight calls finish within the grace.

  /t.S/Unary         echoes the request; "err:CODE:MSG" aborts with that status and the
                     trailers x-custom: kept, x-bin-bin: bytes; "sleep:MS" answers after MS;
                     "meta:H:T" answers with a header x-big-head of H bytes and a trailer
                     x-big-trailer of T bytes; "trailers:N" answers with N trailers
                     x-t000: v0 ... (after x-served-by)
  /t.S/Collect       client streaming: answers "<messages>:<bytes>" of what it got
  /t.S/Spray         server streaming: "N:SIZE[:MS]" -> N messages of SIZE bytes (MS apart),
                     then trailers
  /t.S/Echo          bidi: each message is answered as it arrives
Every call gets the trailing metadata x-served-by: <port>.
"""
import argparse
import signal
import sys
import threading
import time
from concurrent import futures

import grpc

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, default=0)
ap.add_argument("--cert")
ap.add_argument("--key")
ap.add_argument("--max-streams", type=int, default=0)
ap.add_argument("--workers", type=int, default=64)
a = ap.parse_args()

ident = lambda b: b  # noqa: E731
port_box = [0]


def served(ctx, extra=()):
    ctx.set_trailing_metadata((("x-served-by", str(port_box[0])),) + tuple(extra))


def unary(req, ctx):
    if req.startswith(b"err:"):
        _, code, msg = req.decode().split(":", 2)
        served(ctx, (("x-custom", "kept"), ("x-bin-bin", b"\x00\x01\xfe")))
        ctx.abort(grpc.StatusCode[code], msg)
    if req.startswith(b"sleep:"):
        time.sleep(int(req[6:]) / 1000.0)
    if req.startswith(b"trailers:"):
        served(ctx, tuple(("x-t%03d" % i, "v%d" % i) for i in range(int(req[9:]))))
        return req
    if req.startswith(b"meta:"):
        _, hn, tn = req.decode().split(":")
        ctx.send_initial_metadata((("x-big-head", "h" * int(hn)),))
        served(ctx, (("x-big-trailer", "t" * int(tn)),))
        return req
    served(ctx, (("x-custom", "unary"),))
    return req


def collect(it, ctx):
    n = total = 0
    for m in it:
        n += 1
        total += len(m)
    served(ctx)
    return b"%d:%d" % (n, total)


def spray(req, ctx):
    parts = [int(x) for x in req.decode().split(":")]
    n, size, delay = parts[0], parts[1], parts[2] if len(parts) > 2 else 0
    for i in range(n):
        if delay:
            time.sleep(delay / 1000.0)
        yield (b"%08d" % i) + b"s" * max(0, size - 8)
    served(ctx, (("x-custom", "spray"),))


def echo(it, ctx):
    for m in it:
        yield m
    served(ctx)


handlers = {
    "Unary": grpc.unary_unary_rpc_method_handler(unary, ident, ident),
    "Collect": grpc.stream_unary_rpc_method_handler(collect, ident, ident),
    "Spray": grpc.unary_stream_rpc_method_handler(spray, ident, ident),
    "Echo": grpc.stream_stream_rpc_method_handler(echo, ident, ident),
}
opts = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
        ("grpc.so_reuseport", 0)]
if a.max_streams:
    opts.append(("grpc.max_concurrent_streams", a.max_streams))
server = grpc.server(futures.ThreadPoolExecutor(max_workers=a.workers), options=opts)
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.S", handlers),))
addr = "127.0.0.1:%d" % a.port
if a.cert:
    creds = grpc.ssl_server_credentials([(open(a.key, "rb").read(), open(a.cert, "rb").read())])
    port = server.add_secure_port(addr, creds)
else:
    port = server.add_insecure_port(addr)
port_box[0] = port
server.start()
print("READY %d" % port, flush=True)

done = threading.Event()


def stop(grace):
    server.stop(grace).wait()
    done.set()


signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=stop, args=(5,)).start())


def stdin_loop():
    for line in sys.stdin:
        if line.startswith("stop"):
            parts = line.split()
            stop(float(parts[1]) if len(parts) > 1 else 5)
            return


threading.Thread(target=stdin_loop, daemon=True).start()
done.wait()
