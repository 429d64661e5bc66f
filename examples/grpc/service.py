"""A tiny gRPC service for examples/grpc, on python3-grpcio (Debian: python3-grpcio, run
with /usr/bin/python3) without protoc: generic handlers with raw-bytes messages.

  /greet.Greeter/SayHello    unary: the request's bytes are a name; answers b"hello, NAME"
  /greet.Greeter/Countdown   server streaming: the request is a number N; answers N..1,
                             one message every 200 ms
  /grpc.health.v1.Health/Check   SERVING (the gateway's `health.active.type: grpc` probe)

  /usr/bin/python3 examples/grpc/service.py [--port 50051]
"""

import argparse
import time
from concurrent import futures

import grpc

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, default=50051)
args = ap.parse_args()
ident = lambda b: b  # noqa: E731


def say_hello(req, ctx):
    if not req:
        ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "a name, please")
    return b"hello, " + req


def countdown(req, ctx):
    for i in range(int(req or b"3"), 0, -1):
        yield str(i).encode()
        time.sleep(0.2)


def health_check(req, ctx):
    return b"\x08\x01"  # HealthCheckResponse{status: SERVING}


server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
server.add_generic_rpc_handlers((
    grpc.method_handlers_generic_handler("greet.Greeter", {
        "SayHello": grpc.unary_unary_rpc_method_handler(say_hello, ident, ident),
        "Countdown": grpc.unary_stream_rpc_method_handler(countdown, ident, ident),
    }),
    grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
        "Check": grpc.unary_unary_rpc_method_handler(health_check, ident, ident),
    }),
))
server.add_insecure_port("127.0.0.1:%d" % args.port)
server.start()
print("serving on 127.0.0.1:%d" % args.port, flush=True)
server.wait_for_termination()
