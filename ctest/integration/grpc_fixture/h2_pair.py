"""Two HTTP/2 (h2c) origins in one process (run it under /usr/bin/python3) that answer a
hedged request's two streams at the same instant: a request that arrived at one waits (up
to --wait seconds) for a request at the other, then both are answered together. Origin A
answers 200 with 100 bytes of "A", origin B 201 with "BB" (each with its content-length),
so a client can tell whose head and whose body it got. Prints "READY <port A> <port B>";
on stdin EOF, "STATS <json>" (pairs answered together, requests answered alone).
"""
import argparse
import json
import socket
import sys
import threading

import h2.config
import h2.connection
import h2.events

ap = argparse.ArgumentParser()
ap.add_argument("--wait", type=float, default=2.0)
a = ap.parse_args()

ANSWERS = {"A": (200, b"A" * 100), "B": (201, b"BB")}
barrier = threading.Barrier(2)
stats = {"together": 0, "alone": 0}
lock = threading.Lock()


def handle(sock, name):
    cfg = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
    c = h2.connection.H2Connection(config=cfg)
    c.initiate_connection()
    sock.sendall(c.data_to_send())
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            break
        if not data:
            break
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                try:
                    barrier.wait(timeout=a.wait)
                    together = True
                except threading.BrokenBarrierError:
                    together = False
                    barrier.reset()
                with lock:
                    stats["together" if together else "alone"] += 1
                status, body = ANSWERS[name]
                c.send_headers(ev.stream_id, [(":status", str(status)), ("content-length", str(len(body)))])
                c.send_data(ev.stream_id, body, end_stream=True)
        try:
            sock.sendall(c.data_to_send())
        except OSError:
            break
    sock.close()


def serve(ls, name):
    while True:
        s, _ = ls.accept()
        threading.Thread(target=handle, args=(s, name), daemon=True).start()


ports = []
for name in ("A", "B"):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    ports.append(ls.getsockname()[1])
    threading.Thread(target=serve, args=(ls, name), daemon=True).start()
print("READY %d %d" % tuple(ports), flush=True)
sys.stdin.read()
with lock:
    print("STATS " + json.dumps(stats), flush=True)
