"""harness.client — a raw HTTP/1.1 client over one TCP connection (exact bytes out, parsed
responses in) and one-shot requests."""

import socket
import time

from .wire import ReadTimeout, Reader, hget, read_response


class Client:
    """A raw HTTP/1.1 client over one TCP connection."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0, connect_timeout=3.0):
        self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.sock.settimeout(timeout)
        self.closed_how = None  # "eof" | "reset" once the peer closed
        self.reader = Reader(self._fill)
        self.deadline = None

    def _fill(self, buf):
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise ReadTimeout("deadline passed")
            self.sock.settimeout(left)
        try:
            d = self.sock.recv(262144)
        except socket.timeout:
            raise ReadTimeout("no data within timeout")
        except ConnectionResetError:
            self.closed_how = "reset"
            return False
        if not d:
            self.closed_how = self.closed_how or "eof"
            return False
        buf.extend(d)
        return True

    def send(self, data):
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.sock.sendall(data)

    def shutdown_write(self):
        self.sock.shutdown(socket.SHUT_WR)

    def read_response(self, method="GET", timeout=None, sink=None, skip_interim=True):
        """One response; 1xx interim responses are skipped unless skip_interim=False."""
        self.deadline = time.monotonic() + (timeout or self.timeout)
        try:
            while True:
                r = read_response(self.reader, method, sink)
                if skip_interim and 100 <= r.status < 200:
                    continue
                return r
        finally:
            self.deadline = None
            self.sock.settimeout(self.timeout)

    def read_responses(self, n, methods=None, timeout=None):
        out = []
        for i in range(n):
            out.append(self.read_response(methods[i] if methods else "GET", timeout))
        return out

    def read_until_close(self, timeout=5.0):
        """All bytes until EOF/reset or timeout. Returns (bytes, how): how is eof|reset|timeout."""
        self.deadline = time.monotonic() + timeout
        data = bytearray(self.reader.buf)
        self.reader.buf.clear()
        try:
            while True:
                buf = bytearray()
                if not self._fill(buf):
                    return bytes(data), self.closed_how
                data += buf
        except ReadTimeout:
            return bytes(data), "timeout"
        finally:
            self.deadline = None
            self.sock.settimeout(self.timeout)

    def pending(self, wait=0.2):
        """Bytes that arrive within `wait` seconds without asking (b'' if none)."""
        data, how = self.read_until_close(wait)
        if how != "timeout":
            self.closed_how = how
        return data

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def build_request(method, path, headers=None, body=None, host="127.0.0.1", chunked=False):
    """Serialises one request. headers: list of (name, value); Host is added unless given."""
    headers = list(headers or [])
    if hget(headers, "Host") is None and host is not None:
        headers.insert(0, ("Host", host))
    if body is not None and not chunked and hget(headers, "Content-Length") is None:
        headers.append(("Content-Length", str(len(body))))
    if chunked:
        headers.append(("Transfer-Encoding", "chunked"))
    head = "%s %s HTTP/1.1\r\n" % (method, path)
    head += "".join("%s: %s\r\n" % (n, v) for n, v in headers) + "\r\n"
    out = head.encode("latin-1")
    if body is not None:
        if chunked:
            if body:
                out += b"%x\r\n" % len(body) + body + b"\r\n"
            out += b"0\r\n\r\n"
        else:
            out += body
    return out


def finish_head(c, rest=b"X-Rest: of the head\r\n\r\n"):
    """Sends the rest of a request head begun earlier on Client c and reads the answer:
    (status, body, its Connection value lower-cased), or the error's repr when the request
    was dropped (EOF, reset)."""
    try:
        c.send(rest)
        r = c.read_response()
        return r.status, r.body, (r.header("Connection") or "").lower()
    except Exception as e:  # noqa: BLE001
        return repr(e)


def request(port, method="GET", path="/", headers=None, body=None, timeout=5.0, host="127.0.0.1"):
    """One request on a fresh connection; returns the HTTPResponse."""
    c = Client(port, timeout=timeout)
    try:
        c.send(build_request(method, path, headers, body))
        return c.read_response(method)
    finally:
        c.close()
