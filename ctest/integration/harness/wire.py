"""harness.wire — raw bytes on sockets: a byte reader, an HTTP/1.1 head/body/response
parser, helpers for ports, a raw TCP peer (TCPServer), recv_all and a TLS ClientHello."""

import hashlib
import json
import re
import socket
import ssl
import threading
import time

from .lifecycle import _register


def short(v, limit=600):
    """repr() of a value, cut to a readable length."""
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v)
    s = repr(v)
    if len(s) > limit:
        s = s[:limit] + "... (%d chars)" % len(s)
    return s


# ---------------------------------------------------------------- byte reader

class Incomplete(Exception):
    """The peer closed (or the source ended) in the middle of a message."""


class ParseError(Exception):
    pass


class ReadTimeout(Exception):
    pass


class Reader:
    """A byte buffer fed by fill(buf) -> bool (False at EOF)."""

    def __init__(self, fill):
        self.buf = bytearray()
        self._fill = fill
        self.eof = False

    def more(self):
        if self.eof:
            return False
        if not self._fill(self.buf):
            self.eof = True
            return False
        return True

    def read_line(self, limit=1 << 20):
        """A line without its CRLF (a bare LF also ends it)."""
        start = 0
        while True:
            i = self.buf.find(b"\n", start)
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                if line.endswith(b"\r"):
                    line = line[:-1]
                return line
            start = len(self.buf)
            if len(self.buf) > limit:
                raise ParseError("line longer than %d" % limit)
            if not self.more():
                raise Incomplete("EOF in line (have %r)" % bytes(self.buf[:200]))

    def read_exact(self, n, sink=None):
        """n bytes; with a sink, bytes are passed on in pieces and b'' is returned."""
        out = bytearray() if sink is None else None
        while n > 0:
            if not self.buf and not self.more():
                raise Incomplete("EOF with %d body bytes missing" % n)
            take = min(n, len(self.buf))
            piece = bytes(self.buf[:take])
            del self.buf[:take]
            n -= take
            if sink is None:
                out += piece
            else:
                sink(piece)
        return bytes(out) if out is not None else b""

    def read_to_eof(self, sink=None):
        out = bytearray()
        while True:
            if self.buf:
                piece = bytes(self.buf)
                self.buf.clear()
                if sink is None:
                    out += piece
                else:
                    sink(piece)
            if not self.more():
                return bytes(out)


def parse_headers(reader, limit=1 << 20):
    """Reads header lines up to the empty line. Returns a list of (name, value)."""
    headers = []
    total = 0
    while True:
        line = reader.read_line()
        total += len(line)
        if total > limit:
            raise ParseError("header block too large")
        if line == b"":
            return headers
        if line[:1] in (b" ", b"\t"):
            raise ParseError("obs-fold in header block: %r" % line)
        if b":" not in line:
            raise ParseError("header line without colon: %r" % line)
        n, v = line.split(b":", 1)
        headers.append((n.decode("latin-1"), v.strip(b" \t").decode("latin-1")))


def hget(headers, name):
    """First value of a header (case-insensitive) or None."""
    name = name.lower()
    for n, v in headers:
        if n.lower() == name:
            return v
    return None


def hall(headers, name):
    name = name.lower()
    return [v for n, v in headers if n.lower() == name]


def read_chunked(reader, sink=None):
    """Decodes a chunked body; returns (body bytes or b'' with a sink, trailers, sizes)."""
    out = bytearray()
    sizes = []
    while True:
        line = reader.read_line()
        size_s = line.split(b";", 1)[0].strip()
        if not size_s or not re.fullmatch(rb"[0-9a-fA-F]+", size_s):
            raise ParseError("bad chunk size line %r" % line[:100])
        size = int(size_s, 16)
        sizes.append(size)
        if size == 0:
            trailers = parse_headers(reader)
            return (bytes(out) if sink is None else b""), trailers, sizes
        if sink is None:
            out += reader.read_exact(size)
        else:
            reader.read_exact(size, sink)
        if reader.read_line() != b"":
            raise ParseError("chunk not followed by CRLF")


# ---------------------------------------------------------------- responses (client side)

class HTTPResponse:
    def __init__(self):
        self.version = None
        self.status = None
        self.reason = None
        self.headers = []
        self.body = b""
        self.body_len = 0
        self.sha256 = None
        self.trailers = []
        self.framing = None  # "length", "chunked", "none", "close"
        self.chunk_sizes = []

    def header(self, name):
        return hget(self.headers, name)

    def header_all(self, name):
        return hall(self.headers, name)

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "<HTTPResponse %s %s %s body=%s>" % (self.version, self.status, self.headers,
                                                   short(self.body, 200))


def read_response(reader, method="GET", sink=None):
    """Parses one response (interim 1xx responses are returned on their own).

    With sink, body bytes go to sink(piece) and .body stays b''; .body_len and
    .sha256 are always filled.
    """
    line = reader.read_line()
    m = re.fullmatch(rb"(HTTP/\d\.\d) (\d{3})(?: (.*))?", line)
    if not m:
        raise ParseError("bad status line %r" % line[:200])
    r = HTTPResponse()
    r.version = m.group(1).decode()
    r.status = int(m.group(2))
    r.reason = (m.group(3) or b"").decode("latin-1")
    r.headers = parse_headers(reader)
    h = hashlib.sha256()
    count = [0]
    body = bytearray()

    def _sink(piece):
        h.update(piece)
        count[0] += len(piece)
        if sink is None:
            body.extend(piece)
        else:
            sink(piece)

    te = r.header("Transfer-Encoding")
    cl = r.header("Content-Length")
    if method == "HEAD" or 100 <= r.status < 200 or r.status in (204, 304):
        r.framing = "none"
    elif te is not None:
        if te.lower().split(",")[-1].strip() == "chunked":
            r.framing = "chunked"
            _, r.trailers, r.chunk_sizes = read_chunked(reader, _sink)
        else:
            r.framing = "close"
            reader.read_to_eof(_sink)
    elif cl is not None:
        if not re.fullmatch(r"\d+", cl):
            raise ParseError("bad Content-Length %r" % cl)
        r.framing = "length"
        reader.read_exact(int(cl), _sink)
    else:
        r.framing = "close"
        reader.read_to_eof(_sink)
    r.body = bytes(body)
    r.body_len = count[0]
    r.sha256 = h.hexdigest()
    return r


def bytes_reader(data):
    """A Reader over a fixed byte string."""
    it = [bytes(data)]

    def fill(buf):
        if it:
            buf.extend(it.pop())
            return True
        return False
    return Reader(fill)


def parse_responses(data, n=None, methods=None):
    """Parses up to n responses (all when None) from bytes. Returns (list, leftover bytes, error)."""
    rd = bytes_reader(data)
    rd.more()
    out = []
    err = None
    i = 0
    while n is None or len(out) < n:
        if not rd.buf and rd.eof:
            break
        m = (methods[i] if methods and i < len(methods) else "GET")
        try:
            r = read_response(rd, m)
        except (Incomplete, ParseError) as e:
            err = e
            break
        out.append(r)
        if not (100 <= r.status < 200):
            i += 1
    return out, bytes(rd.buf), err


# ---------------------------------------------------------------- ports

def wait_port(port, timeout=10.0, host="127.0.0.1"):
    """True once something accepts on host:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def port_free(port, host="127.0.0.1"):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port(host="127.0.0.1"):
    """A port nothing listens on right now (another process may take it later)."""
    s = socket.socket()
    try:
        s.bind((host, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def refused_port():
    """A bound socket that never listens: connecting to its port is refused.

    Returns (socket, port); keep the socket open for as long as the port is used.
    """
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


# ---------------------------------------------------------------- raw TCP peers

class TCPServer:
    """A listening socket on 127.0.0.1:0 (.port). Each accepted connection goes to
    handle(conn), on a thread of its own, or in the accept thread with threaded=False (so
    connections are handled in order); it is closed after. .accepted counts connections.
    Subclasses set their own fields before calling __init__ (the accept thread starts
    there). Registered: cleanup_all stops it."""

    def __init__(self, threaded=True, backlog=64):
        self.accepted = 0
        self.threaded = threaded
        self.stopping = False
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._run, daemon=True).start()
        _register(self)

    def _run(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.threaded:
                threading.Thread(target=self._handle, args=(c,), daemon=True).start()
            else:
                self._handle(c)

    def _handle(self, c):
        try:
            self.handle(c)
        except OSError:
            pass
        finally:
            c.close()

    def handle(self, conn):
        raise NotImplementedError

    def stop(self):
        self.stopping = True
        self.sock.close()


def recv_all(sock, chunk=65536):
    """Everything `sock` (a socket or an ssl socket) gives until EOF."""
    data = b""
    while True:
        d = sock.recv(chunk)
        if not d:
            return data
        data += d


def tls_client_hello(sni, ctx=None):
    """A TLS client's first flight for `sni` (None: no SNI), made in memory with `ctx` (by
    default one that verifies nothing). Returns (the SSLObject, its incoming and outgoing
    MemoryBIOs, the ClientHello bytes): a test sends the hello its own way (a byte at a
    time, re-cut into records) and may finish the handshake over any socket."""
    if ctx is None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return obj, inc, out, out.read()
