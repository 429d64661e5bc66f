"""python3-h2 as a raw-frame HTTP/2 client through sluice (h2c, prior knowledge): flow
control with a tiny window, 100 concurrent streams, RST_STREAM of one stream mid-body, and
GOAWAY on a reload and on a graceful shutdown with streams in flight.

The client splits the frames it reads itself: GOAWAY and PING frames are kept from the h2
library (which would refuse every frame after a GOAWAY, and answers PINGs at once), so a
case sees each GOAWAY's last-stream-id, answers PINGs when it chooses, and goes on reading
the streams in flight, as RFC 9113 wants of a client."""

import hashlib
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

try:
    import h2.config
    import h2.connection
    import h2.errors
    import h2.events
    import h2.exceptions
    import h2.settings
except ImportError:  # need_modules fails the case
    h2 = None

GOAWAY, PING, DATA = 0x7, 0x6, 0x0


class Stream:
    def __init__(self, sid, path):
        self.sid, self.path = sid, path
        self.status = None
        self.sha = hashlib.sha256()
        self.n = 0
        self.frames = 0
        self.max_frame = 0
        self.ended = False
        self.reset = None   # the error code of a RST_STREAM from the server

    @property
    def done(self):
        return self.ended or self.reset is not None


class Client:
    """One h2c connection. window: the stream-level initial window this client announces
    (its SETTINGS are acknowledged before connect() returns). grant: give back each DATA
    frame's bytes to the stream and the connection as soon as it is read."""

    def __init__(self, t, port, window=None, timeout=30.0):
        io.need_modules(t, "h2")
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                         header_encoding="utf-8"))
        if window is not None:
            self.conn.local_settings = h2.settings.Settings(
                client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.window = window or 65535
        self.conn.initiate_connection()
        self.flush()
        self.buf = b""
        self.streams = {}
        self.goaways = []       # (last_stream_id, error code) in arrival order
        self.pings = []         # opaque data of PINGs not answered yet
        self.answer_pings = True
        self.grant = True
        self.outstanding = {}   # stream id -> bytes received and not granted back yet
        self.max_outstanding = 0
        self.closed = False
        self.settings_acked = False
        self.pump_until(lambda: self.settings_acked, 10)

    def flush(self, extra=b""):
        data = self.conn.data_to_send() + extra
        if data:
            self.sock.sendall(data)

    def get(self, path, flush=True):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", "GET"), (":path", path), (":scheme", "http"),
                                     (":authority", "127.0.0.1")], end_stream=True)
        self.streams[sid] = Stream(sid, path)
        self.outstanding[sid] = 0
        if flush:
            self.flush()
        return sid

    def give(self, sid, n):
        """Grants n bytes back to the stream (if still open) and the connection."""
        self.outstanding[sid] -= n
        if not self.streams[sid].done and n:
            try:
                self.conn.increment_flow_control_window(n, stream_id=sid)
            except h2.exceptions.StreamClosedError:
                pass

    def _frame(self, ftype, flags, sid, payload):
        if ftype == GOAWAY:
            last, code = struct.unpack(">II", payload[:8])
            self.goaways.append((last & 0x7fffffff, code))
            return b""
        if ftype == PING and not flags & 1:
            self.pings.append(payload)
            return b""
        if ftype == DATA and sid in self.streams:
            st = self.streams[sid]
            st.frames += 1
            st.max_frame = max(st.max_frame, len(payload))
            self.outstanding[sid] += len(payload)
            self.max_outstanding = max(self.max_outstanding, self.outstanding[sid])
        return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload

    def pump(self, timeout=1.0):
        """Reads what arrives within timeout; False once the server closed."""
        if self.closed:
            return False
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return True
        except ConnectionError:
            data = b""
        if not data:
            self.closed = True
            return False
        self.buf += data
        feed = b""
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                break
            ftype, flags = self.buf[3], self.buf[4]
            sid = struct.unpack(">I", self.buf[5:9])[0] & 0x7fffffff
            feed += self._frame(ftype, flags, sid, self.buf[9:9 + n])
            self.buf = self.buf[9 + n:]
        if self.answer_pings:
            self.flush(self.ping_acks())
        for ev in self.conn.receive_data(feed):
            self._event(ev)
        self.flush()
        return True

    def ping_acks(self):
        acks = b"".join(b"\x00\x00\x08\x06\x01\x00\x00\x00\x00" + p for p in self.pings)
        self.pings = []
        return acks

    def _event(self, ev):
        if isinstance(ev, h2.events.SettingsAcknowledged):
            self.settings_acked = True
        elif isinstance(ev, h2.events.ResponseReceived):
            self.streams[ev.stream_id].status = dict(ev.headers).get(":status")
        elif isinstance(ev, h2.events.DataReceived):
            st = self.streams[ev.stream_id]
            st.sha.update(ev.data)
            st.n += len(ev.data)
            if ev.stream_ended is not None:
                st.ended = True
            if self.grant:
                self.give(ev.stream_id, ev.flow_controlled_length)
            if ev.flow_controlled_length:
                self.conn.increment_flow_control_window(ev.flow_controlled_length)
        elif isinstance(ev, h2.events.StreamEnded):
            self.streams[ev.stream_id].ended = True
        elif isinstance(ev, h2.events.StreamReset):
            if ev.stream_id in self.streams:
                self.streams[ev.stream_id].reset = ev.error_code

    def pump_until(self, cond, timeout):
        deadline = time.monotonic() + timeout
        while not cond() and time.monotonic() < deadline:
            if not self.pump(min(0.5, max(0.01, deadline - time.monotonic()))):
                break
        return cond()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def origin_files(t, sizes):
    """nginx serving random files /f<i> of the given sizes: (port, {path: sha256})."""
    root = io.h.new_tmpdir("www")
    shas = {}
    for i, size in enumerate(sizes):
        shas["/f%d" % i] = io.random_file(os.path.join(root, "f%d" % i), size)
    _, (p,) = io.nginx(t, root, ["sendfile on;"])
    return p, shas


def exact(c, sids, shas):
    """Stream ids whose answer is not 200 with the file's exact bytes."""
    return [(sid, c.streams[sid].path, c.streams[sid].status, c.streams[sid].n, c.streams[sid].reset)
            for sid in sids if not (c.streams[sid].ended and c.streams[sid].status == "200"
                                    and c.streams[sid].sha.hexdigest() == shas[c.streams[sid].path])]


@io.case("h2c.flow_control_1m", "a client announcing a 1 KiB stream window reads a 1 MiB body "
         "sha256-exact: sluice never has more than 1 KiB unacknowledged on the stream, sends no "
         "DATA while the window is shut, and resumes on WINDOW_UPDATE", budget=60)
def flow_control(t):
    p, shas = origin_files(t, [1 << 20])
    s = io.l7(t, io.upstream("127.0.0.1:%d" % p))
    c = Client(t, s.port(), window=1024)
    sid = c.get("/f0")
    st = c.streams[sid]
    # read half, granting as it comes; then shut the window: stop granting for a second
    c.pump_until(lambda: st.n >= 512 << 10 or st.done, 30)
    c.grant = False
    c.pump_until(lambda: st.done, 1.0)
    stalled = c.outstanding[sid]
    at_stall = st.n
    t.check("while the client grants nothing (1 s), at most the 1 KiB window arrives",
            stalled <= 1024 and not st.done and st.n >= 512 << 10,
            "<= 1024 outstanding, stream open", "%d outstanding, %d read, done %s" % (stalled, st.n, st.done))
    c.grant = True
    c.give(sid, c.outstanding[sid])
    c.flush()
    c.pump_until(lambda: st.done, 60)
    t.check("after WINDOW_UPDATE the body completes: 200, %d bytes, sha256-exact" % (1 << 20),
            st.ended and st.status == "200" and st.n == 1 << 20 and st.sha.hexdigest() == shas["/f0"],
            "200 %d %s" % (1 << 20, shas["/f0"][:16]),
            "%s %d %s reset=%s (%d read when the window shut)" % (st.status, st.n, st.sha.hexdigest()[:16],
                                                                  st.reset, at_stall))
    t.check("no DATA frame above 1 KiB, never more than 1 KiB unacknowledged on the stream",
            st.max_frame <= 1024 and c.max_outstanding <= 1024, "<= 1024 each",
            "largest frame %d, most outstanding %d" % (st.max_frame, c.max_outstanding))
    t.check("the body came in at least 1024 DATA frames (one window each at most)", st.frames >= 1024,
            ">= 1024", st.frames)
    c.close()


@io.case("h2c.concurrent_100", "100 streams opened at once on one connection (sluice's "
         "max_concurrent_streams) to 100 different files of 1 KiB..1 MiB all end 200 sha256-exact, "
         "their DATA interleaved", budget=60)
def concurrent(t):
    p, shas = origin_files(t, [1024 + i * 10571 for i in range(100)])
    s = io.l7(t, io.upstream("127.0.0.1:%d" % p))
    c = Client(t, s.port())
    sids = [c.get("/f%d" % i, flush=False) for i in range(100)]
    c.flush()
    most = [0]
    prev = c.pump

    def pump(timeout=1.0):
        ok = prev(timeout)
        most[0] = max(most[0], sum(1 for sid in sids if c.streams[sid].n and not c.streams[sid].done))
        return ok
    c.pump = pump
    c.pump_until(lambda: all(c.streams[sid].done for sid in sids), 60)
    bad = exact(c, sids, shas)
    t.check("100 of 100 streams: 200, exact length, sha256-exact", not bad, [], bad[:5])
    t.check("the responses were multiplexed: at one moment several streams had begun and not ended",
            most[0] >= 2, ">= 2", most[0])
    c.close()


@io.case("h2c.rst_one_stream", "RST_STREAM(CANCEL) of one of four 4 MiB downloads mid-body leaves "
         "the other three sha256-exact and the connection usable; the gateway stops sending the "
         "cancelled one (its access log's bytes_out)", budget=60)
def rst_one(t):
    p, shas = origin_files(t, [4 << 20] * 4 + [64 << 10])
    log = os.path.join(io.h.new_tmpdir("log"), "access.log")
    s = io.l7(t, io.upstream("127.0.0.1:%d" % p), workers=1,
              routes="  - { name: all, match: { paths: [/] }, upstream: o, plugins: [ { name: access-log, "
                     "config: { path: %s, fields: [path, status, bytes_out] } } ] }\n" % log)
    c = Client(t, s.port())
    sids = [c.get("/f%d" % i) for i in range(4)]
    victim = c.streams[sids[1]]
    c.pump_until(lambda: victim.n >= 256 << 10, 30)
    at_reset = victim.n
    c.conn.reset_stream(victim.sid, h2.errors.ErrorCodes.CANCEL)
    c.flush()
    others = [sid for sid in sids if sid != victim.sid]
    c.pump_until(lambda: all(c.streams[sid].done for sid in others), 60)
    t.check("the cancelled stream stopped short (%d of %d bytes when reset)" % (at_reset, 4 << 20),
            at_reset < 4 << 20 and not victim.ended, "< 4 MiB, not ended", (at_reset, victim.n, victim.ended))
    bad = exact(c, others, shas)
    t.check("the three other streams: 200, 4 MiB each, sha256-exact", not bad, [], bad)
    sid = c.get("/f4")
    c.pump_until(lambda: c.streams[sid].done, 30)
    t.check("a new stream on the same connection afterwards: 200, sha256-exact", not exact(c, [sid], shas)
            and not c.goaways and not c.closed, "200, no GOAWAY", (exact(c, [sid], shas), c.goaways))
    c.close()
    lines = io.json_lines(log, 5, timeout=10)
    got = sorted((x["path"], x["status"], x["bytes_out"] >= 4 << 20) for x in lines)
    want = sorted([("/f%d" % i, 200, i != 1) for i in range(4)] + [("/f4", 200, False)])
    t.check("the access log: five 200s; the cancelled stream's bytes_out stayed under 4 MiB "
            "(the gateway stopped sending it), the others' reached it",
            got == want and [x["bytes_out"] for x in lines if x["path"] == "/f1"][0] < 4 << 20, want,
            [(x["path"], x["status"], x["bytes_out"]) for x in lines])


def slow_origin(size, pieces, delay):
    """A MockUpstream answering every GET with `size` bytes of pattern data in `pieces`
    pieces, `delay` s apart (Content-Length known): (upstream, sha256)."""
    block = size // pieces

    def handler(req):
        return io.h.Response(200, stream=io.h.pattern_blocks(size, block), length=size, chunk_delay=delay)
    return io.h.MockUpstream(handler, name="slow", record_limit=4096), io.h.pattern_sha256(size, block)


def drain(t, how):
    """Three 2 MiB streams in flight (each ~3 s long at the origin) when the gateway's
    generation retires (how: "reload" or "sigterm")."""
    up, sha = slow_origin(2 << 20, 32, 0.1)
    s = io.l7(t, io.upstream(up.address), workers=1)
    c = Client(t, s.port())
    sids = [c.get("/s%d" % i) for i in range(3)]
    c.pump_until(lambda: all(c.streams[sid].n for sid in sids), 30)
    if how == "reload":
        code, answer = s.reload()
        t.check("POST /reload applied a new generation", code == 200 and answer.get("ok"), 200, (code, answer))
    else:
        s.signal(io.signal.SIGTERM)
    # the shutdown notice: GOAWAY naming 2^31-1, and a PING the client holds its answer to
    c.answer_pings = False
    c.pump_until(lambda: c.goaways and c.pings, 15)
    notice = list(c.goaways)
    t.check("%s: a shutdown notice (GOAWAY NO_ERROR, last-stream-id 2^31-1) and a PING arrive "
            "while the streams are in flight" % how,
            notice == [(2 ** 31 - 1, 0)] and c.pings and not any(c.streams[sid].done for sid in sids),
            [(2 ** 31 - 1, 0)], (notice, len(c.pings), [c.streams[sid].n for sid in sids]))
    # a stream the client opens before answering the PING is still served
    late = c.get("/late", flush=False)
    c.flush(c.ping_acks())
    c.answer_pings = True
    c.pump_until(lambda: all(c.streams[sid].done for sid in sids + [late]) and c.closed, 60)
    t.check("%s: then the final GOAWAY NO_ERROR naming the last stream taken (%d)" % (how, late),
            c.goaways[1:] == [(late, 0)], [(late, 0)], c.goaways)
    bad = [(sid, c.streams[sid].status, c.streams[sid].n, c.streams[sid].reset) for sid in sids + [late]
           if not (c.streams[sid].ended and c.streams[sid].status == "200" and c.streams[sid].n == 2 << 20
                   and c.streams[sid].sha.hexdigest() == sha)]
    t.check("%s: the 3 streams in flight and the one opened after the notice complete: 200, "
            "2 MiB each, sha256-exact" % how, not bad, [], bad)
    t.check("%s: then sluice closed the connection" % how, c.closed, "closed", "open")
    c.close()
    return s


@io.case("h2c.goaway_reload", "a reload retires the generation of a connection with 3 slow "
         "downloads in flight: GOAWAY 2^31-1 + PING, then GOAWAY naming the last stream (one opened "
         "after the notice included); all 4 streams complete sha256-exact; new connections are "
         "served", budget=60)
def goaway_reload(t):
    s = drain(t, "reload")
    c = Client(t, s.port())
    sid = c.get("/after")
    c.pump_until(lambda: c.streams[sid].done, 30)
    t.check("a new connection after the reload is served (200, 2 MiB)",
            c.streams[sid].status == "200" and c.streams[sid].n == 2 << 20, "200", c.streams[sid].status)
    c.close()


@io.case("h2c.goaway_shutdown", "SIGTERM with 3 slow downloads in flight on one connection: "
         "GOAWAY 2^31-1 + PING, then GOAWAY naming the last stream (one opened after the notice "
         "included); all 4 streams complete sha256-exact and the gateway exits 0", budget=60)
def goaway_shutdown(t):
    s = drain(t, "sigterm")
    t.check("sigterm: the gateway exits 0 once drained", s.wait(15) == 0, 0, s.returncode)


if __name__ == "__main__":
    io.main()
