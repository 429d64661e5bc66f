"""limit-conn through the real binary: slots never leak.

10,000 requests through a route with limit-conn (max 16, burst 4), 7,000 over HTTP/1.1
from 32 threads and 3,000 over HTTP/2 (prior knowledge, 50 streams a connection), ending
every way a request can end: a whole response, the client closing mid-request (before
the answer) or mid-response (after the head, or with an RST), an HTTP/2 RST_STREAM before
or after the head, a whole HTTP/2 connection dropped, an upstream reset (502), an upstream
that never answers (504 at timeouts.read), a later plugin's exit (418) and
a later plugin's error (500). Afterwards sluice_limit_conn_in_flight{route} must come back
to 0, the decisions must add up, and the limit must still admit exactly max + burst
requests held at once (a leaked slot would lower it).
"""

import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("limit_conn", budget=240)

MAX, BURST = 24, 8
H1_REQUESTS, H1_THREADS = 7000, 32
H2_CONNS, H2_STREAMS = 60, 50

BOOM = """
local M = { name = "boom", version = "1.0", schema = {} }
local sluice = require("sluice")
function M.access(conf, ctx)
    local path = sluice.request.get_path()
    if path:find("boom", 1, true) then error("boom") end
    if path:find("exit", 1, true) then return sluice.response.exit(418, "exit") end
end
return M
"""


def handler(req):
    p = req.path
    if p.endswith("/reset"):
        return h.RESET
    if p.endswith("/hang"):
        return h.HANG
    if p.endswith("/hold"):
        return h.Response(200, b"held", delay=0.8)
    # a body in three pieces, a little apart: clients can leave mid-response
    return h.Response(200, stream=[b"x" * 2000] * 3, length=6000, delay=random.random() * 0.004,
                      chunk_delay=0.002)


def start(t):
    up = h.MockUpstream(handler, name="up")
    fx = h.new_tmpdir("boom")
    with open(os.path.join(fx, "boom.lua"), "w") as f:
        f.write(BOOM)
    conf = """\
workers: 2
shutdown_timeout: 2s
admin: { listen: 127.0.0.1:0 }
plugin_paths: [%s]
listeners: [ { name: web, listen: 127.0.0.1:0, http2: true } ]
upstreams: [ { name: up, targets: [ { address: %s } ], timeouts: { read: 1500ms } } ]
routes:
  - name: lc
    match: { paths: [ /lc ] }
    upstream: up
    plugins:
      - { name: limit-conn, config: { max: %d, burst: %d, key: route } }
      - { name: boom }
""" % (fx, up.address, MAX, BURST)
    s = h.start_sluice(conf, suite=t, name="lc")
    return s, up


def metrics(s):
    r = h.request(s.admin_port, "GET", "/metrics")
    return h.parse_prometheus(r.body.decode())


def in_flight(s):
    v = h.metric_values(metrics(s), "sluice_limit_conn_in_flight", route="lc")
    return int(v[0]) if v else None


PATHS = ["/lc/ok"] * 80 + ["/lc/reset"] * 6 + ["/lc/hang"] * 1 + ["/lc/boom"] * 6 + ["/lc/exit"] * 6


def h1_one(port, rnd, counts):
    path = rnd.choice(PATHS)
    how = rnd.random()
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
        if how < 0.15:  # gone mid-request: before any answer
            kind = "abort_request"
        elif how < 0.30:  # gone mid-response: after the first bytes
            s.recv(100)
            kind = "abort_response"
        elif how < 0.38:  # gone with an RST
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            kind = "rst"
        else:
            data = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
            kind = "status_" + (data[9:12].decode() if len(data) >= 12 else "none")
    except OSError:
        kind = "error"
    finally:
        s.close()
    counts[kind] = counts.get(kind, 0) + 1


def run_h1(port, counts_all):
    per = H1_REQUESTS // H1_THREADS
    ths = []
    for i in range(H1_THREADS):
        counts = {}
        counts_all.append(counts)

        def loop(counts=counts, seed=i):
            rnd = random.Random(seed)
            for _ in range(per + (1 if seed < H1_REQUESTS % H1_THREADS else 0)):
                h1_one(port, rnd, counts)
        th = threading.Thread(target=loop, daemon=True)
        th.start()
        ths.append(th)
    for th in ths:
        th.join()


# python3-h2 imports only under /usr/bin/python3: this client runs there. Opens `conns`
# prior-knowledge connections one after another, each sending `streams` GETs at once and
# then: resetting a stream right away (15%), resetting one once its head arrives (15%),
# dropping the whole connection after a few events (10% of connections), or reading all.
H2_CLIENT = r"""
import json, random, socket, sys
import h2.config, h2.connection, h2.events, h2.exceptions
port, conns, streams, paths = json.loads(sys.stdin.read())
rnd = random.Random(7)
counts = {}
def bump(k): counts[k] = counts.get(k, 0) + 1
for ci in range(conns):
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
    open_ = set(); after_head = set()
    for i in range(streams):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, [(":method", "GET"), (":path", rnd.choice(paths)), (":scheme", "http"),
                             (":authority", "x")], end_stream=True)
        x = rnd.random()
        if x < 0.15:
            c.reset_stream(sid); bump("rst_request")
        else:
            open_.add(sid)
            if x < 0.30: after_head.add(sid)
    sock.sendall(c.data_to_send())
    drop = rnd.random() < 0.10
    events = 0
    try:
        while open_:
            data = sock.recv(65536)
            if not data: bump("conn_closed"); break
            for ev in c.receive_data(data):
                events += 1
                sid = getattr(ev, "stream_id", None)
                try:
                    if isinstance(ev, h2.events.ResponseReceived) and sid in after_head:
                        c.reset_stream(sid); open_.discard(sid); bump("rst_response")
                    elif isinstance(ev, h2.events.DataReceived):
                        c.acknowledge_received_data(ev.flow_controlled_length, sid)
                    elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                        if sid in open_: open_.discard(sid); bump("ended")
                except h2.exceptions.StreamClosedError:
                    open_.discard(sid)
            sock.sendall(c.data_to_send())
            if drop and events > 10:
                bump("conn_dropped"); break
    except (OSError, h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError) as e:
        bump("error " + type(e).__name__)
    sock.close()
print(json.dumps(counts))
"""


def test_no_leak(t):
    s, up = start(t)
    try:
        counts = []
        t0 = time.time()
        th = threading.Thread(target=run_h1, args=(s.port(), counts), daemon=True)
        th.start()
        r = subprocess.run(["/usr/bin/python3", "-c", H2_CLIENT], capture_output=True, timeout=200,
                           input=json.dumps([s.port(), H2_CONNS, H2_STREAMS, PATHS]).encode())
        th.join()
        total = {}
        for c in counts:
            for k, v in c.items():
                total[k] = total.get(k, 0) + v
        t.info("HTTP/1.1 outcomes: %s" % json.dumps(total, sort_keys=True))
        t.check("h2 client ran", r.returncode == 0, 0, r.stderr.decode()[-500:])
        h2c = json.loads(r.stdout or b"{}")
        t.info("HTTP/2 outcomes: %s; load took %.1f s" % (json.dumps(h2c, sort_keys=True), time.time() - t0))
        t.check("HTTP/1.1: every kind of end happened",
                all(total.get(k, 0) > 0 for k in ("abort_request", "abort_response", "rst", "status_200",
                                                  "status_503", "status_502", "status_418", "status_500")),
                "all > 0", total)
        t.check("HTTP/2: resets before and after the head happened",
                h2c.get("rst_request", 0) > 0 and h2c.get("rst_response", 0) > 0, "> 0", h2c)
        # the hung upstream requests end at timeouts.read (1.5 s): wait for every end
        deadline = time.time() + 10
        v = in_flight(s)
        while v != 0 and time.time() < deadline:
            time.sleep(0.1)
            v = in_flight(s)
        t.check("in-flight count back to 0 after 10,000 requests", v == 0, 0, v)
        m = metrics(s)
        dec = {k: sum(h.metric_values(m, "sluice_limit_conn_total", route="lc", result=k))
               for k in ("admitted", "burst", "rejected", "failopen")}
        t.info("decisions: %s" % dec)
        n = sum(dec.values())
        t.check("every request that reached limit-conn was decided (no more than were sent)",
                0 < n <= H1_REQUESTS + H2_CONNS * H2_STREAMS, "<= 10000", n)
        t.check("some were rejected and some admitted in burst", dec["rejected"] > 0 and dec["burst"] > 0,
                "> 0", dec)
        # the limit is whole: max + burst requests held at once are admitted, one more is not
        holders = []
        for _ in range(MAX + BURST):
            c = h.Client(s.port(), timeout=5)
            c.send(b"GET /lc/hold HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            holders.append(c)
        deadline = time.time() + 3
        while in_flight(s) != MAX + BURST and time.time() < deadline:
            time.sleep(0.02)
        v = in_flight(s)
        t.check("max + burst held at once", v == MAX + BURST, MAX + BURST, v)
        over = h.request(s.port(), "GET", "/lc/ok")
        t.check("one more is refused with 503", over.status == 503, 503, over.status)
        statuses = sorted(c.read_response("GET").status for c in holders)
        for c in holders:
            c.close()
        t.check("the held ones were answered", statuses == [200] * (MAX + BURST), "all 200", statuses)
        # limit-conn leaves in its log phase, once each response is written: polled
        v = h.poll(lambda: in_flight(s), lambda v: v == 0)
        t.check("back to 0 at the end", v == 0, 0, v)
    finally:
        s.stop()
        up.stop()


t.run(test_no_leak)
