"""Latency under a short load, for tests that compare a route's tail with a baseline:
keep-alive HTTP/1.1 GETs from a few client threads (stdlib http.client)."""

import http.client
import threading
import time


def keepalive_load(port, path, n, clients=8):
    """n GETs of path over `clients` keep-alive connections (n // clients each).
    Returns (sorted latencies in ms, number of requests not answered 200)."""
    lat, fails = [], []
    lock = threading.Lock()

    def worker(k):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        mine, bad = [], 0
        for _ in range(k):
            t0 = time.perf_counter()
            try:
                c.request("GET", path)
                r = c.getresponse()
                r.read()
                ok = r.status == 200
            except Exception:  # noqa: BLE001 - any failure counts as a failed request
                ok = False
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            mine.append((time.perf_counter() - t0) * 1000)
            bad += not ok
        c.close()
        with lock:
            lat.extend(mine)
            fails.append(bad)
    ths = [threading.Thread(target=worker, args=(n // clients,)) for _ in range(clients)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    lat.sort()
    return lat, sum(fails)


def percentile(lat, q):
    """The q-quantile (0..1) of sorted latencies."""
    return lat[min(len(lat) - 1, int(len(lat) * q))]
