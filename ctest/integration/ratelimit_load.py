"""ratelimit_load.py — what the rate-limit integration tests share: an upstream that
answers 200, a paced request generator, a free loopback port and a redis-server the test
starts and stops (test_rate_limit.py, test_rate_limit_redis.py)."""

import signal
import socket
import subprocess
import threading
import time

import harness as h


def ok_handler(req):
    return h.Response(200, b"ok")


def fire(port, n, seconds, path="/", headers=None, conns=10, span=None, times=None):
    """n requests spread evenly over `seconds` on `conns` keep-alive connections. When
    `span` (a list) is given, it gets the seconds from the first send to the last; when
    `times` (a list) is given, it gets every send's time (time.monotonic())."""
    statuses, lock = [], threading.Lock()
    sends = []
    per = n // conns
    start = time.monotonic() + 0.05

    def worker(k):
        c = h.Client(port, timeout=10)
        local = []
        for i in range(per):
            due = start + (i * conns + k) * seconds / n
            d = due - time.monotonic()
            if d > 0:
                time.sleep(d)
            sends.append(time.monotonic())
            c.send(h.build_request("GET", path, headers=headers))
            r = c.read_response()
            local.append((r.status, r.header("Retry-After"), r.header("RateLimit"), r.header("RateLimit-Policy")))
            if r.header("Connection") == "close":
                c.close()
                c = h.Client(port, timeout=10)
        c.close()
        with lock:
            statuses.extend(local)

    ths = [threading.Thread(target=worker, args=(k,)) for k in range(conns)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(60)
    if span is not None and sends:
        span.append(max(sends) - min(sends))
    if times is not None:
        times.extend(sends)
    return statuses


def bucket_allows(times, rate, burst=0):
    """What a token bucket of `rate` a second and burst + 1 tokens, full at first and on
    the grid of core/upstream/limiter.h, admits of single takes at these times (seconds,
    any origin). Stalls included: a burst-0 bucket loses the tokens it cannot hold."""
    one, cap, tat, n = 1.0 / rate, (burst + 1) / rate, None, 0
    for now in sorted(times):
        base = now if tat is None else tat
        if base < now:
            base = now - (now - base) % one
        if base - now + one <= cap + 1e-9:
            tat = base + one
            n += 1
    return n


def free_port():
    sk = socket.socket()
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]
    sk.close()
    return port


class Redis:
    def __init__(self, port):
        self.port = port
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--daemonize", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        h.wait_port(self.port, timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
