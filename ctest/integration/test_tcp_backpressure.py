"""L4 TCP proxy (issue 7), acceptance 3: backpressure.

A fast sender offers 1 GiB through a tcp listener to an upstream that is stopped with
SIGSTOP (and later stopped again, and again, while the bytes flow): the gateway stops
reading the sender while the upstream takes nothing, so its RSS (sampled from
/proc/PID/status every 20 ms) grows by less than 16 MiB over its level before the
session; after SIGCONT the upstream receives all 1 GiB. Both paths: `splice: auto`
(the stream splices: kernel pipes, not user memory) and `splice: off` (copies through
one 64 KiB block per direction). Without backpressure the gateway would read the whole
gigabyte while the upstream sleeps.
"""

import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import test_tcp_proxy as tp  # noqa: E402

TOTAL = 1 << 30
LIMIT_KB = 16 * 1024


def offer(t, path):
    peer = tp.Peer("sink-" + path)
    gw = tp.gateway(t, [peer.address], splice=path, name="gw-" + path)
    port = gw.port("t")
    # a warm-up session, so the worker's pools exist before the baseline
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(b"SINK\n" + b"w" * (4 << 20))
    c.shutdown(socket.SHUT_WR)
    c.recv(100)
    c.close()
    time.sleep(0.2)
    base = gw.rss_kb()

    c = socket.create_connection(("127.0.0.1", port), timeout=60)
    c.sendall(b"SINK\n")
    time.sleep(0.1)
    peer.signal(signal.SIGSTOP)
    sent = [0]
    buf = memoryview(bytes(range(256)) * 4096)  # 1 MiB

    def sender():
        try:
            while sent[0] < TOTAL:
                n = min(len(buf), TOTAL - sent[0])
                c.sendall(buf[:n])
                sent[0] += n
            c.shutdown(socket.SHUT_WR)
        except OSError as e:
            sent.append(repr(e))
    th = threading.Thread(target=sender, daemon=True)
    th.start()
    peak = base
    t0 = time.monotonic()
    stalled = None
    # stopped for 2 s, then run and stop again in turns while the bytes flow
    plan = [(2.0, signal.SIGCONT), (0.3, signal.SIGSTOP), (0.7, signal.SIGCONT), (0.3, signal.SIGSTOP),
            (0.7, signal.SIGCONT)]
    for wait, sig in plan:
        end = time.monotonic() + wait
        while time.monotonic() < end:
            peak = max(peak, gw.rss_kb())
            time.sleep(0.02)
        if stalled is None:
            stalled = sent[0]  # what the sender got rid of while the upstream slept
        peer.signal(sig)
    while th.is_alive() and time.monotonic() - t0 < 40:
        peak = max(peak, gw.rss_kb())
        time.sleep(0.02)
    answer = b""
    c.settimeout(20)
    try:
        while not answer.endswith(b"\n"):
            d = c.recv(100)
            if not d:
                break
            answer += d
    except OSError as e:
        answer += repr(e).encode()
    c.close()
    growth = peak - base
    t.info("[%s] sender got %d MiB out while the upstream was stopped; RSS %d KiB before, peak +%d KiB"
           % (path, stalled >> 20, base, growth))
    t.check("[%s] the sender was held back while the upstream was stopped (< 64 MiB out of 1 GiB)"
            % path, stalled < (64 << 20), "< 64 MiB", stalled)
    t.check("[%s] gateway RSS grew by less than 16 MiB while 1 GiB was offered" % path,
            growth < LIMIT_KB, "< %d KiB" % LIMIT_KB, growth)
    t.check("[%s] the upstream received all 1 GiB after SIGCONT" % path,
            answer == b"%d\n" % TOTAL and sent[0] == TOTAL, TOTAL, (answer, sent))
    gw.stop()
    peer.stop()


def test_auto(t):
    offer(t, "auto")


def test_off(t):
    offer(t, "off")


if __name__ == "__main__":
    t = h.Suite("tcp_backpressure", budget=58)
    t.run(test_auto, test_off)
