"""harness.relay — a TCP relay on loopback that can hold an HTTP/1.1 request back.

Put between a client and an HTTP/1.1 server (etcd's JSON gateway, for one), it lets a test
order what happens on the wire from outside the process under test, so no test knob has
to live in the product:

    relay = h.HoldingRelay(etcd_port, hold=lambda path: gate.wait(5) if path == "/v3/watch" else None)
    ... point the client at relay.url ...

Each accepted connection gets its own connection to the server. Its first request is read
whole (head, then a Content-Length body), `hold(path)` is called with the request's path
on that connection's thread (whatever it does, blocking included, delays only that
request), and then the request is forwarded; from there on bytes flow both ways untouched
(a streamed answer such as a watch's included). A client that sends several requests on
one connection has only the first one seen by `hold`: sluice's etcd client opens one
connection per call. `paths` lists the first request path of every connection, in order.
"""

import socket
import threading

from .wire import Reader, TCPServer, hget, parse_headers


class HoldingRelay(TCPServer):
    def __init__(self, upstream_port, hold=None):
        self.upstream_port = upstream_port
        self.hold = hold
        self.paths = []
        self._lock = threading.Lock()
        super().__init__()
        self.url = "http://127.0.0.1:%d" % self.port

    def handle(self, conn):
        up = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
        try:
            r = Reader(lambda buf: _fill(conn, buf))
            line = r.read_line()
            hdrs = parse_headers(r)
            n = int(hget(hdrs, "content-length") or 0)
            body = r.read_exact(n) if n else b""
            parts = line.split(b" ")
            path = parts[1].decode("latin-1") if len(parts) > 1 else ""
            with self._lock:
                self.paths.append(path)
            if self.hold:
                self.hold(path)
            head = line + b"\r\n" + b"".join(b"%s: %s\r\n" % (k.encode("latin-1"), v.encode("latin-1"))
                                             for k, v in hdrs) + b"\r\n"
            up.settimeout(None)
            up.sendall(head + body + bytes(r.buf))
            back = threading.Thread(target=_pipe, args=(up, conn), daemon=True)
            back.start()
            _pipe(conn, up)
            back.join()
        finally:
            up.close()


def _fill(sock, buf):
    d = sock.recv(65536)
    if not d:
        return False
    buf += d
    return True


def _pipe(src, dst):
    """Copies src to dst until EOF or an error, then half-closes dst."""
    try:
        while True:
            d = src.recv(65536)
            if not d:
                break
            dst.sendall(d)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
