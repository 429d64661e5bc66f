"""A gRPC test client on python3-grpcio (run under /usr/bin/python3): one scenario per
run, its results as one JSON line on stdout. Messages are raw bytes (identity
serializers), for the service of server.py.

  client.py SCENARIO TARGET [--ca CA --name NAME] [scenario options]
"""
import argparse
import hashlib
import json
import queue
import threading
import time

import grpc

ap = argparse.ArgumentParser()
ap.add_argument("scenario")
ap.add_argument("target")
ap.add_argument("--ca")
ap.add_argument("--name", default="localhost")
ap.add_argument("--seconds", type=float, default=3)
ap.add_argument("--threads", type=int, default=8)
ap.add_argument("--n", type=int, default=1000)
ap.add_argument("--timeout", type=float, default=20)
a = ap.parse_args()

ident = lambda b: b  # noqa: E731
opts = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
        ("grpc.enable_retries", 0)]
if a.ca:
    opts.append(("grpc.ssl_target_name_override", a.name))
    ch = grpc.secure_channel(a.target, grpc.ssl_channel_credentials(open(a.ca, "rb").read()), options=opts)
else:
    ch = grpc.insecure_channel(a.target, options=opts)
unary = ch.unary_unary("/t.S/Unary", request_serializer=ident, response_deserializer=ident)
collect = ch.stream_unary("/t.S/Collect", request_serializer=ident, response_deserializer=ident)
spray = ch.unary_stream("/t.S/Spray", request_serializer=ident, response_deserializer=ident)
echo = ch.stream_stream("/t.S/Echo", request_serializer=ident, response_deserializer=ident)
T = a.timeout


def md(m):
    return {k: (v.hex() if isinstance(v, bytes) else v) for k, v in (m or ())}


def err(e):
    return {"code": e.code().name, "details": e.details(), "trailers": md(e.trailing_metadata())}


out = {}
if a.scenario == "kinds":
    r, call = unary.with_call(b"hello", timeout=T)
    out["unary"] = {"reply": r.decode(), "trailers": md(call.trailing_metadata())}
    try:
        unary(b"err:NOT_FOUND:no such thing", timeout=T)
        out["error"] = "no error"
    except grpc.RpcError as e:
        out["error"] = err(e)
    try:
        unary(b"err:RESOURCE_EXHAUSTED:slow down", timeout=T)
    except grpc.RpcError as e:
        out["error2"] = err(e)
    r, call = collect.with_call(iter([b"m" * 100] * 7), timeout=T)
    out["collect"] = {"reply": r.decode(), "trailers": md(call.trailing_metadata())}
    it = spray(b"5:32", timeout=T)
    msgs = list(it)
    out["spray"] = {"n": len(msgs), "first": msgs[0][:8].decode(), "trailers": md(it.trailing_metadata())}
    it = echo(iter([b"one", b"two", b"three"]), timeout=T)
    out["echo"] = {"replies": [m.decode() for m in it], "code": it.code().name}
    it = spray(b"0:1", timeout=T)
    out["spray0"] = {"n": len(list(it)), "code": it.code().name, "trailers": md(it.trailing_metadata())}
elif a.scenario == "bidi":
    # each request is sent only once the previous reply arrived: the gateway must stream
    q = queue.Queue()
    q.put(b"%06d" % 0)
    state = {"sent": 0}

    def gen():
        while True:
            m = q.get()
            if m is None:
                return
            state["sent"] += 1
            yield m

    got, ok = 0, True
    t0 = time.monotonic()
    for reply in echo(gen(), timeout=T):
        if reply != b"%06d" % got or state["sent"] != got + 1:
            ok = False
        got += 1
        q.put(b"%06d" % got if got < a.n else None)
    out = {"got": got, "in_order": ok, "secs": round(time.monotonic() - t0, 3)}
elif a.scenario == "big":
    big = bytes(range(256)) * (4 << 12)  # 4 MiB
    h = hashlib.sha256(big).hexdigest()
    r = unary(big, timeout=T)
    out["unary"] = hashlib.sha256(r).hexdigest() == h and len(r) == len(big)
    out["collect"] = collect(iter([big, big]), timeout=T).decode()
    msgs = list(spray(b"3:%d" % (4 << 20), timeout=T))
    out["spray"] = [len(m) for m in msgs]
    rs = list(echo(iter([big, big[::-1]]), timeout=T))
    out["echo"] = [hashlib.sha256(m).hexdigest() == hashlib.sha256(x).hexdigest()
                   for m, x in zip(rs, [big, big[::-1]])] + [len(rs)]
elif a.scenario == "deadline":
    try:
        unary(b"sleep:5000", timeout=1.0)
        out["code"] = "OK"
    except grpc.RpcError as e:
        out = err(e)
elif a.scenario == "stream":
    got = []
    try:
        for m in spray(b"3:8", timeout=T):
            got.append(m.hex())
        out = {"got": got, "code": "OK"}
    except grpc.RpcError as e:
        out = dict(err(e), got=got)
elif a.scenario == "concurrent":
    res = []

    def one(i):
        try:
            res.append(unary(b"sleep:1500", timeout=T) == b"sleep:1500")
        except grpc.RpcError as e:
            res.append(e.code().name)

    ths = [threading.Thread(target=one, args=(i,)) for i in range(a.n)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    out = {"results": res}
elif a.scenario == "load":
    # unary calls from `threads` threads for `seconds`, and a slow server stream per thread
    # at the start: what fails, and with which code
    stop = time.monotonic() + a.seconds
    ok, fails, streams = [0], {}, []
    lock = threading.Lock()

    def worker(i):
        try:
            n = sum(1 for _ in spray(b"10:16:150", timeout=T))
            with lock:
                streams.append(n)
        except grpc.RpcError as e:
            with lock:
                streams.append(e.code().name)
        while time.monotonic() < stop:
            try:
                unary(b"ping", timeout=T)
                with lock:
                    ok[0] += 1
            except grpc.RpcError as e:
                with lock:
                    k = e.code().name + ": " + (e.details() or "")
                    fails[k] = fails.get(k, 0) + 1

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(a.threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    out = {"ok": ok[0], "fails": fails, "streams": streams}
print(json.dumps(out), flush=True)
