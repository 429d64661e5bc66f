"""A grpc.health.v1.Health service for tests, on Debian's python3-grpcio (which has no
grpc_health module): a generic handler with the two messages encoded by hand
(HealthCheckRequest{string service = 1}, HealthCheckResponse{ServingStatus status = 1}).

    srv = HealthServer({"": 1, "svc.A": 1})   # service -> status (1 SERVING, 2 NOT_SERVING)
    srv.port; srv.set("", 2); srv.calls; srv.stop()
A service it does not know gets grpc-status NOT_FOUND, as grpc's own servicer answers.
"""

import threading
from concurrent import futures

import grpc

SERVING, NOT_SERVING = 1, 2


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def parse_service(req):
    """The service field of a HealthCheckRequest (only field 1 is read)."""
    i = 0
    while i < len(req):
        key = req[i]
        i += 1
        if key == 0x0A:
            n, sh = 0, 0
            while True:
                b = req[i]
                i += 1
                n |= (b & 0x7F) << sh
                sh += 7
                if not b & 0x80:
                    break
            return req[i:i + n].decode()
        return ""
    return ""


class HealthServer:
    def __init__(self, statuses):
        self.statuses = dict(statuses)
        self.calls = []
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        ident = lambda b: b  # noqa: E731

        def check(req, ctx):
            svc = parse_service(req)
            with self.lock:
                self.calls.append(svc)
                st = self.statuses.get(svc)
            if st is None:
                ctx.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
            return b"\x08" + _varint(st)

        handler = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
            "Check": grpc.unary_unary_rpc_method_handler(check, request_deserializer=ident,
                                                         response_serializer=ident)})
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def set(self, service, status):
        with self.lock:
            self.statuses[service] = status

    def stop(self):
        self.server.stop(0).wait(5)
