"""grpc_util — what the gRPC integration tests share: running under Debian's python3
(python3-grpcio and python3-h2 import only there), a raw-bytes grpcio client call, and
gRPC message framing (the 5-byte prefix)."""

import os
import struct
import sys


def reexec_under_debian_python(*modules):
    """grpc and h2 are Debian packages: run this test file under /usr/bin/python3 unless
    `modules` (default: grpc and h2) already import here."""
    try:
        for m in modules or ("grpc", "h2"):
            __import__(m)
    except ImportError:
        if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        raise


def ident(b):
    return b


def unary(port, method, payload=b"", metadata=None, timeout=5.0):
    """Calls `method` with raw bytes over h2c prior knowledge: (code name, details, reply,
    trailing metadata as a dict)."""
    import grpc
    with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
        call = ch.unary_unary(method, request_serializer=ident, response_deserializer=ident)
        try:
            reply, c = call.with_call(payload, metadata=metadata, timeout=timeout)
            return "OK", c.details(), reply, dict(c.trailing_metadata() or ())
        except grpc.RpcError as e:
            return e.code().name, e.details(), None, dict(e.trailing_metadata() or ())


def frame(msg, flags=0):
    """One gRPC length-prefixed message."""
    return struct.pack(">BI", flags, len(msg)) + msg


def unframe(data):
    """[(flags, message)] of a byte string of whole length-prefixed messages."""
    out, i = [], 0
    while i + 5 <= len(data):
        flags, n = struct.unpack(">BI", data[i:i + 5])
        out.append((flags, data[i + 5:i + 5 + n]))
        i += 5 + n
    return out
