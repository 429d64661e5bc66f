"""Calls examples/grpc's service through the gateway (python3-grpcio, raw bytes).

  /usr/bin/python3 examples/grpc/client.py [--target 127.0.0.1:8080] [--key k-alice] NAME
"""

import argparse

import grpc

ap = argparse.ArgumentParser()
ap.add_argument("--target", default="127.0.0.1:8080")
ap.add_argument("--key", default="k-alice")
ap.add_argument("name", nargs="?", default="world")
args = ap.parse_args()
ident = lambda b: b  # noqa: E731
md = [("apikey", args.key)] if args.key else []

with grpc.insecure_channel(args.target) as ch:
    hello = ch.unary_unary("/greet.Greeter/SayHello", request_serializer=ident, response_deserializer=ident)
    count = ch.unary_stream("/greet.Greeter/Countdown", request_serializer=ident, response_deserializer=ident)
    try:
        print(hello(args.name.encode(), metadata=md, timeout=5).decode())
        for m in count(b"3", metadata=md, timeout=5):
            print(m.decode())
    except grpc.RpcError as e:
        print("%s: %s" % (e.code().name, e.details()))
