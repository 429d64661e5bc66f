"""An HTTP/2 (h2c) upstream on python3-h2 that misbehaves on purpose (run it under
/usr/bin/python3). Prints "READY <port>"; its counts as "STATS <json>" on stdin EOF.

  --mode goaway  on each connection, answers the first --serve requests (0: all), then sends
                 GOAWAY naming the last of them and leaves every later stream unanswered
                 (never processed: a gateway may send them again), closing the connection
                 shortly after. Answers: 200, "<connection number>:<request body length>".
  --mode hang    never answers.
  --mode head    answers a gRPC response head and one message, then nothing more.
  --mode cut     answers a gRPC response head and one message, then closes the connection.
  --mode slow    answers each request --delay seconds after it ended, 200 "<--name>:<connection
                 number>"; a stream the client resets first is counted ("resets") and never
                 answered, and its connection goes on.
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
import h2.exceptions
from hyperframe.frame import GoAwayFrame

ap = argparse.ArgumentParser()
ap.add_argument("--serve", type=int, default=5)
ap.add_argument("--max-streams", type=int, default=100)
ap.add_argument("--mode", default="goaway", choices=["goaway", "hang", "head", "cut", "slow"])
ap.add_argument("--delay", type=float, default=0.0)
ap.add_argument("--name", default="h2")
a = ap.parse_args()

stats = {"conns": 0, "answered": 0, "unanswered": 0, "resets": 0, "closed": 0}
lock = threading.Lock()


def handle_slow(sock, n):
    """--mode slow: each request answered --delay seconds after its end, unless reset."""
    cfg = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
    c = h2.connection.H2Connection(config=cfg)
    c.initiate_connection()
    sock.sendall(c.data_to_send())
    sock.settimeout(0.01)
    due = {}  # stream id -> when to answer
    while True:
        try:
            data = sock.recv(65536)
            if not data:
                break
        except socket.timeout:
            data = b""
        except OSError:
            break
        for ev in c.receive_data(data) if data else []:
            if isinstance(ev, h2.events.DataReceived):
                c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                due[ev.stream_id] = time.monotonic() + a.delay
            elif isinstance(ev, h2.events.StreamReset):
                with lock:
                    stats["resets"] += 1
                due.pop(ev.stream_id, None)
        now = time.monotonic()
        for sid in [s for s, d in due.items() if d <= now]:
            del due[sid]
            body = ("%s:%d" % (a.name, n)).encode()
            c.send_headers(sid, [(":status", "200"), ("content-length", str(len(body)))])
            c.send_data(sid, body, end_stream=True)
            with lock:
                stats["answered"] += 1
        try:
            sock.sendall(c.data_to_send())
        except OSError:
            break
    with lock:
        stats["closed"] += 1
    sock.close()


def handle(sock, n):
    if a.mode == "slow":
        handle_slow(sock, n)
        return
    cfg = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
    c = h2.connection.H2Connection(config=cfg)
    c.local_settings.max_concurrent_streams = a.max_streams
    c.initiate_connection()
    sock.sendall(c.data_to_send())
    bodies, done, last, gone = {}, [], 0, False
    sock.settimeout(0.3)
    while True:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            if gone:
                break
            continue
        except OSError:
            break
        if not data:
            break
        try:
            events = c.receive_data(data)
        except h2.exceptions.ProtocolError:
            events = []  # frames after our GOAWAY closed the state machine: not processed
        for ev in events:
            if isinstance(ev, h2.events.RequestReceived):
                bodies[ev.stream_id] = 0
            elif isinstance(ev, h2.events.DataReceived):
                bodies[ev.stream_id] = bodies.get(ev.stream_id, 0) + len(ev.data)
                c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                done.append(ev.stream_id)
        while done and a.mode in ("head", "cut"):
            sid = done.pop(0)
            c.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
            c.send_data(sid, b"\x00\x00\x00\x00\x05first")
            if a.mode == "cut":
                sock.sendall(c.data_to_send())
                time.sleep(0.2)
                gone = True
        if a.mode != "goaway":
            done.clear()
        if gone and a.mode == "cut":
            break
        while done and not gone:
            sid = done.pop(0)
            if last < a.serve or not a.serve:
                last += 1
                body = ("%d:%d" % (n, bodies.get(sid, 0))).encode()
                c.send_headers(sid, [(":status", "200"), ("content-length", str(len(body)))])
                c.send_data(sid, body, end_stream=True)
                with lock:
                    stats["answered"] += 1
                if last == a.serve and a.serve:
                    # the frame by hand: h2's close_connection would stop parsing what
                    # follows, and the streams refused are what is counted
                    sock.sendall(c.data_to_send())
                    g = GoAwayFrame(0)
                    g.last_stream_id = sid
                    g.error_code = 0
                    sock.sendall(g.serialize())
                    gone = True
        if gone:
            with lock:
                stats["unanswered"] += len(done)
            done.clear()
        try:
            sock.sendall(c.data_to_send())
        except OSError:
            break
    sock.close()


srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(64)
print("READY %d" % srv.getsockname()[1], flush=True)


def accept_loop():
    while True:
        s, _ = srv.accept()
        with lock:
            stats["conns"] += 1
            n = stats["conns"]
        threading.Thread(target=handle, args=(s, n), daemon=True).start()


threading.Thread(target=accept_loop, daemon=True).start()
sys.stdin.read()
print("STATS " + json.dumps(stats), flush=True)
