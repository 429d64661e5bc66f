"""An in-process gRPC service for the grpc-web and auth tests (Debian python3-grpcio,
generic handlers, raw-bytes messages):

  /w.S/Unary   echoes the request, trailing metadata x-custom: unary
  /w.S/Fail    aborts NOT_FOUND "nope" before any message (a trailers-only answer)
  /w.S/Tick    server streaming: "tick-1", then waits until release() (at most 10 s),
               "tick-2", trailing metadata x-custom: tick
  svc = Service(); svc.port; svc.metadata (the last call's invocation metadata); svc.stop()
"""

import threading
from concurrent import futures

import grpc


class Service:
    def __init__(self):
        self.gate = threading.Event()
        self.metadata = {}
        ident = lambda b: b  # noqa: E731

        def unary(req, ctx):
            self.metadata = dict(ctx.invocation_metadata())
            ctx.set_trailing_metadata((("x-custom", "unary"),))
            return req

        def fail(req, ctx):
            ctx.abort(grpc.StatusCode.NOT_FOUND, "nope")

        def tick(req, ctx):
            yield b"tick-1"
            self.gate.wait(10)
            yield b"tick-2"
            ctx.set_trailing_metadata((("x-custom", "tick"),))

        handlers = {
            "Unary": grpc.unary_unary_rpc_method_handler(unary, ident, ident),
            "Fail": grpc.unary_unary_rpc_method_handler(fail, ident, ident),
            "Tick": grpc.unary_stream_rpc_method_handler(tick, ident, ident),
        }
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("w.S", handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def release(self):
        self.gate.set()

    def stop(self):
        self.gate.set()
        self.server.stop(0).wait(5)
