"""harness.mock_upstream — MockUpstream, a threaded HTTP/1.1 keep-alive server on
127.0.0.1:0 that answers through a handler function and records every connection and
every byte it received; handlers may misbehave on demand (HANG, RESET, CLOSE, raw bytes,
slow answers, truncated bodies, streamed bodies, wrong framing)."""

import hashlib
import json
import re
import select
import socket
import struct
import threading
import time

from .lifecycle import _register, _unregister
from .wire import Incomplete, ParseError, Reader, hall, hget, parse_headers, read_chunked


# A handler returns a Response, raw bytes, a list of raw pieces and pauses
# ([b"...", 0.3, b"..."]), or one of these:
HANG = "HANG"     # read everything, never answer, until the peer closes or the mock stops
RESET = "RESET"   # close with SO_LINGER 0 (RST) without answering
CLOSE = "CLOSE"   # close without answering


class Stop(Exception):
    pass


class Response:
    """What a mock handler answers.

    body: bytes; or stream: an iterable of byte pieces (length declares a
    Content-Length for it; without it the body is chunked). chunked=True sends
    body/stream chunked. delay: seconds before the head; chunk_delay: seconds
    between pieces. truncate=N: send the head and only N body bytes (chunked:
    N bytes of chunk data, no terminator) then close. after: None | "close" |
    "reset" once the response is sent. framing=False: send headers exactly as
    given (no Content-Length / Transfer-Encoding added).
    """

    def __init__(self, status=200, body=b"", headers=None, chunked=False, stream=None,
                 length=None, delay=0.0, chunk_delay=0.0, truncate=None, after=None,
                 reason=None, framing=True):
        self.status = status
        self.body = body if isinstance(body, bytes) else body.encode()
        self.headers = list(headers or [])
        self.chunked = chunked or (stream is not None and length is None)
        self.stream = stream
        self.length = length
        self.delay = delay
        self.chunk_delay = chunk_delay
        self.truncate = truncate
        self.after = after
        self.reason = reason
        self.framing = framing


REASONS = {100: "Continue", 200: "OK", 204: "No Content", 304: "Not Modified", 400: "Bad Request",
           404: "Not Found", 500: "Internal Server Error", 502: "Bad Gateway"}


def json_response(obj, status=200, **kw):
    return Response(status, json.dumps(obj).encode(), [("Content-Type", "application/json")], **kw)


class Request:
    """A request as the mock upstream received it."""

    def __init__(self):
        self.method = self.target = self.version = None
        self.headers = []
        self.body = b""
        self.body_len = 0
        self.body_sha256 = None
        self.chunked = False
        self.conn = None
        self.index = 0        # position on its connection, from 0
        self.raw_head = b""
        self.t = None

    @property
    def path(self):
        return self.target.split("?", 1)[0]

    @property
    def query(self):
        return self.target.split("?", 1)[1] if "?" in self.target else ""

    def header(self, name):
        return hget(self.headers, name)

    def header_all(self, name):
        return hall(self.headers, name)

    def summary(self):
        return {"method": self.method, "target": self.target, "path": self.path,
                "headers": self.headers, "body_len": self.body_len, "sha256": self.body_sha256,
                "body": (self.body.decode("latin-1") if self.body is not None
                         and len(self.body) <= 4096 else None),
                "conn": self.conn.id, "index": self.index}


class ConnRecord:
    """One accepted upstream connection: every byte received (up to record_limit)."""

    def __init__(self, id_, sock, record_limit):
        self.id = id_
        self.sock = sock
        self.data = bytearray()
        self.nbytes = 0
        self.record_limit = record_limit
        self.requests = []
        self.eof = False              # the peer (the gateway) closed its side
        self.eof_event = threading.Event()
        self.closed_by_mock = False
        self.error = None
        self.opened = time.monotonic()
        self.closed = None


def default_handler(req):
    """Answers JSON describing the request (path, headers, body checksum, connection)."""
    return json_response(req.summary())


class MockUpstream:
    """A threaded HTTP/1.1 keep-alive server on 127.0.0.1:0 (see module doc)."""

    def __init__(self, handler=None, name="mock", record_limit=1 << 20, body_keep=1 << 20,
                 auto_continue=True, pre_body=None, idle_close=None):
        self.handler = handler or default_handler
        # like a server whose keep-alive timeout is shorter than the gateway's pool:
        # after each response, close the connection if no request starts within idle_close s
        self.idle_close = idle_close
        self.pre_body = pre_body  # called with the request after its head, before its body
        self.name = name
        self.record_limit = record_limit
        self.body_keep = body_keep
        self.auto_continue = auto_continue
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(512)
        self.lsock.settimeout(0.1)
        self.port = self.lsock.getsockname()[1]
        self.address = "127.0.0.1:%d" % self.port
        self.conns = []
        self.requests = []
        self.lock = threading.Lock()
        self.stopping = False
        self.threads = []
        self.handler_errors = []
        self._t = threading.Thread(target=self._accept_loop, name=name + "-accept", daemon=True)
        self._t.start()
        _register(self)

    # -- inspection
    @property
    def accepted(self):
        with self.lock:
            return len(self.conns)

    def total_bytes(self):
        with self.lock:
            return sum(c.nbytes for c in self.conns)

    def snapshot(self):
        """(connections accepted, bytes received, requests parsed)."""
        with self.lock:
            return len(self.conns), sum(c.nbytes for c in self.conns), len(self.requests)

    def mark(self):
        """A position in the recorded traffic, for since()."""
        with self.lock:
            return {c.id: len(c.data) for c in self.conns}

    def since(self, mark):
        """Bytes recorded after mark, over all connections (new connections included)."""
        with self.lock:
            return b"".join(bytes(c.data[mark.get(c.id, 0):]) for c in self.conns)

    def wait_requests(self, n, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= n:
                    return True
            time.sleep(0.01)
        return False

    # -- server
    def _accept_loop(self):
        while not self.stopping:
            try:
                s, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            # as real servers do: a head and its body written separately must not wait
            # for a delayed ACK (Nagle), or every exchange costs 40 ms and more
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                c = ConnRecord(len(self.conns), s, self.record_limit)
                self.conns.append(c)
            th = threading.Thread(target=self._serve, args=(c,), name="%s-c%d" % (self.name, c.id),
                                  daemon=True)
            self.threads.append(th)
            th.start()

    def _fill_for(self, c):
        def fill(buf):
            while True:
                if self.stopping:
                    raise Stop()
                try:
                    d = c.sock.recv(262144)
                except socket.timeout:
                    continue
                except OSError as e:
                    c.error = c.error or repr(e)
                    d = b""
                if not d:
                    c.eof = True
                    c.eof_event.set()
                    return False
                c.nbytes += len(d)
                room = c.record_limit - len(c.data)
                if room > 0:
                    c.data += d[:room]
                buf.extend(d)
                return True
        return fill

    def _serve(self, c):
        # like real servers: no Nagle delay between a head and its body
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sock.settimeout(0.1)
        rd = Reader(self._fill_for(c))
        try:
            while not self.stopping:
                try:
                    req = self._read_request(c, rd)
                except Incomplete:
                    break
                except ParseError as e:
                    c.error = "parse: %s" % e
                    # a distinctive status, so a gateway relaying it is never taken for
                    # a gateway that rejected the request itself
                    self._send(c, b"HTTP/1.1 418 Mock Could Not Parse\r\nContent-Length: 0\r\n"
                                  b"Connection: close\r\n\r\n")
                    break
                if req is None:
                    break
                try:
                    resp = self.handler(req)
                except Exception as e:
                    self.handler_errors.append(repr(e))
                    resp = Response(500, repr(e).encode())
                if not self._respond(c, rd, req, resp):
                    break
                conn_hdr = (req.header("Connection") or "").lower()
                if "close" in [x.strip() for x in conn_hdr.split(",")]:
                    break
                if self.idle_close is not None and not rd.buf:
                    r, _, _ = select.select([c.sock], [], [], self.idle_close)
                    if not r:
                        break
            # wait until the peer closes (so eof is recorded) unless we close first
        except Stop:
            pass
        finally:
            if not c.eof:
                c.closed_by_mock = True
            try:
                c.sock.close()
            except OSError:
                pass
            c.closed = time.monotonic()

    def _read_request(self, c, rd):
        # an EOF before the first byte of a request is a clean close
        if not rd.buf and not rd.more():
            return None
        line = rd.read_line()
        m = re.fullmatch(rb"([A-Z]+) (\S+) (HTTP/\d\.\d)", line)
        if not m:
            raise ParseError("bad request line %r" % line[:200])
        req = Request()
        req.method, req.target, req.version = (x.decode("latin-1") for x in m.groups())
        req.headers = parse_headers(rd)
        req.conn = c
        req.t = time.monotonic()
        req.raw_head = line  # first line only; c.data has the rest
        with self.lock:
            req.index = len(c.requests)
            c.requests.append(req)
            self.requests.append(req)
        if self.pre_body is not None:
            self.pre_body(req)
        if self.auto_continue and (req.header("Expect") or "").lower() == "100-continue":
            self._send(c, b"HTTP/1.1 100 Continue\r\n\r\n")
        h = hashlib.sha256()
        body = bytearray()
        keep = self.body_keep

        def sink(piece):
            h.update(piece)
            req.body_len += len(piece)
            if len(body) < keep:
                body.extend(piece[:keep - len(body)])

        te = req.header("Transfer-Encoding")
        cl = req.header("Content-Length")
        if te is not None:
            req.chunked = True
            read_chunked(rd, sink)
        elif cl is not None:
            if not re.fullmatch(r"\d+", cl):
                raise ParseError("bad Content-Length %r" % cl)
            rd.read_exact(int(cl), sink)
        req.body = bytes(body) if req.body_len <= keep else None
        req.body_sha256 = h.hexdigest()
        return req

    def _send(self, c, data):
        try:
            c.sock.settimeout(30)
            c.sock.sendall(data)
            return True
        except OSError as e:
            c.error = c.error or "send: %r" % e
            return False
        finally:
            c.sock.settimeout(0.1)

    def _reset(self, c):
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return False

    def _hang(self, c, rd):
        """Keeps reading (recording) until the peer closes; never answers."""
        while rd.more():
            rd.buf.clear()

    def _respond(self, c, rd, req, resp):
        """Sends resp; returns False when the connection must end."""
        if resp == HANG:
            self._hang(c, rd)
            return False
        if resp == RESET:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if resp == CLOSE:
            return False
        if isinstance(resp, (bytes, bytearray)):
            return self._send(c, bytes(resp))
        if isinstance(resp, list):  # raw pieces and pauses: [b"...", 0.3, b"..."]
            for item in resp:
                if isinstance(item, (bytes, bytearray)):
                    if not self._send(c, bytes(item)):
                        return False
                else:
                    time.sleep(item)
            return True
        if resp.delay:
            end = time.monotonic() + resp.delay
            while time.monotonic() < end:
                if self.stopping:
                    raise Stop()
                time.sleep(min(0.02, max(0, end - time.monotonic())))
        head = "HTTP/1.1 %d %s\r\n" % (resp.status, resp.reason or REASONS.get(resp.status, "X"))
        hdrs = list(resp.headers)
        no_body = req.method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
        if resp.framing:
            if resp.chunked:
                hdrs.append(("Transfer-Encoding", "chunked"))
            elif resp.stream is not None:
                hdrs.append(("Content-Length", str(resp.length)))
            elif resp.status not in (204, 304):
                hdrs.append(("Content-Length", str(len(resp.body))))
        head += "".join("%s: %s\r\n" % (n, v) for n, v in hdrs) + "\r\n"
        if no_body:
            return self._send(c, head.encode("latin-1")) and resp.after is None
        pieces = resp.stream if resp.stream is not None else ([resp.body] if resp.body else [])
        if (resp.stream is None and not resp.chunked and resp.truncate is None
                and len(resp.body) <= 65536):
            # a small fixed body goes out with its head in one write
            if not self._send(c, head.encode("latin-1") + resp.body):
                return False
            if resp.after == "reset":
                return self._reset(c)
            return resp.after is None
        if not self._send(c, head.encode("latin-1")):
            return False
        sent = 0
        for piece in pieces:
            if resp.truncate is not None and sent + len(piece) >= resp.truncate:
                piece = piece[:resp.truncate - sent]
                if piece:
                    self._send(c, (b"%x\r\n" % len(piece) + piece + b"\r\n") if resp.chunked
                               else piece)
                return False  # close mid-body
            if resp.chunked:
                if piece:
                    if not self._send(c, b"%x\r\n" % len(piece) + piece + b"\r\n"):
                        return False
            elif not self._send(c, piece):
                return False
            sent += len(piece)
            if resp.chunk_delay:
                time.sleep(resp.chunk_delay)
        if resp.truncate is not None:
            return False
        if resp.chunked and not self._send(c, b"0\r\n\r\n"):
            return False
        if resp.after == "reset":
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if resp.after == "close":
            return False
        return True

    def stop(self):
        self.stopping = True
        try:
            self.lsock.close()
        except OSError:
            pass
        self._t.join(2)
        for th in list(self.threads):
            th.join(2)
        with self.lock:
            for c in self.conns:
                try:
                    c.sock.close()
                except OSError:
                    pass
        _unregister(self)
