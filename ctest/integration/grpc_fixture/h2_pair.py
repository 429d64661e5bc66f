"""Two HTTP/2 (h2c) origins in one process (run it under /usr/bin/python3) that answer a
hedged request's two streams at the same instant: a request that arrived at one waits (up
to --wait seconds) for a request at the other, then both are answered together. Origin A
answers 200 with 100 bytes of "A", origin B 201 with "BB" (each with its content-length),
so a client can tell whose head and whose body it got. Prints "READY <port A> <port B>";
on stdin EOF, "STATS <json>" (pairs answered together, requests answered alone).

--mode split: the origin whose request came first sends the first part of its head (a
HEADERS frame without END_HEADERS: 200, x-from: first), then the other answers 503 whole
(x-from: second, body "NO"), then the first sends the rest of its head (a CONTINUATION
frame: x-rest) and 50 bytes of "F". Stats count the pairs played that way ("split": the
second answered before the first's head ended).
"""
import argparse
import json
import socket
import sys
import threading
import time

import h2.config
import h2.connection
import h2.events

ap = argparse.ArgumentParser()
ap.add_argument("--wait", type=float, default=2.0)
ap.add_argument("--mode", choices=["together", "split"], default="together")
a = ap.parse_args()

ANSWERS = {"A": (200, b"A" * 100), "B": (201, b"BB")}
barrier = threading.Barrier(2)
stats = {"together": 0, "alone": 0, "split": 0}
lock = threading.Lock()
pairs = []  # split mode: per pair of requests, (first sent its part, second answered)


def frame(ftype, flags, sid, payload):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + sid.to_bytes(4, "big") + payload


def play_split(sock, c, sid):
    """One stream of a split pair, as the first or the second of the pair to arrive."""
    with lock:
        k = sum(len(p[2]) for p in pairs)
        if k % 2 == 0:
            pairs.append((threading.Event(), threading.Event(), [sid]))
        else:
            pairs[-1][2].append(sid)
        part_sent, second_done, _ = pairs[-1]
    if k % 2 == 0:
        c.send_headers(sid, [(":status", "200"), ("x-from", "first"), ("x-rest", "r" * 40),
                             ("content-length", "50")])
        raw = c.data_to_send()
        n = int.from_bytes(raw[:3], "big")
        assert raw[3] == 0x1 and len(raw) == 9 + n, "one HEADERS frame"
        block = raw[9:9 + n]
        cut = len(block) // 2
        sock.sendall(frame(0x1, 0, sid, block[:cut]))  # HEADERS without END_HEADERS
        part_sent.set()
        second_done.wait(a.wait)
        time.sleep(0.2)  # the second's whole answer reaches the gateway first
        with lock:  # counted before the answer ends, which the client waits for
            stats["split"] += second_done.is_set()
        c.send_data(sid, b"F" * 50, end_stream=True)
        sock.sendall(frame(0x9, 0x4, sid, block[cut:]) + c.data_to_send())  # CONTINUATION, END_HEADERS
    else:
        part_sent.wait(a.wait)
        c.send_headers(sid, [(":status", "503"), ("x-from", "second"), ("content-length", "2")])
        c.send_data(sid, b"NO", end_stream=True)
        sock.sendall(c.data_to_send())
        second_done.set()

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
            elif isinstance(ev, h2.events.StreamEnded) and a.mode == "split":
                sock.sendall(c.data_to_send())
                play_split(sock, c, ev.stream_id)  # this connection waits; the other goes on
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
