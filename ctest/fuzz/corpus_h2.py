#!/usr/bin/python3
"""Writes the seed corpus of fuzz_h2 (ctest/fuzz/corpus_h2/): what a client sends after the
connection preface (the target sends the preface itself), one valid or nearly valid frame
sequence per file, covering every frame type and the routes of fuzz_h2.c's config (/e echo,
/r response, /u an upstream that refuses, anything else 404).

    /usr/bin/python3 ctest/fuzz/corpus_h2.py     # rewrites the directory

Header blocks are HPACK-encoded by python3-hpack (Debian's, under /usr/bin/python3).
"""

import os
import shutil
import struct

import hpack

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 0x1, 0x1, 0x4, 0x8, 0x20


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def settings(**kv):
    ids = {"header_table_size": 1, "enable_push": 2, "max_concurrent_streams": 3, "initial_window_size": 4,
           "max_frame_size": 5, "max_header_list_size": 6}
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", ids[k], v) for k, v in kv.items()))


def block(enc, path, method="GET", extra=(), authority="example.com"):
    hd = [(":method", method), (":scheme", "http"), (":path", path)]
    if authority is not None:
        hd.append((":authority", authority))
    return enc.encode(hd + list(extra))


def headers(enc, sid, path, end_stream=True, **kw):
    return frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), sid, block(enc, path, **kw))


def data(sid, payload, end_stream=True, pad=0):
    if pad:
        return frame(DATA, PADDED | (END_STREAM if end_stream else 0), sid, bytes([pad]) + payload + b"\0" * pad)
    return frame(DATA, END_STREAM if end_stream else 0, sid, payload)


def window_update(sid, n):
    return frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", n))


def rst(sid, code=8):
    return frame(RST_STREAM, 0, sid, struct.pack(">I", code))


def seeds():
    e = hpack.Encoder
    out = {}
    out["settings_only"] = settings()
    out["settings_ack"] = settings(initial_window_size=1 << 20, max_frame_size=32768) + frame(SETTINGS, ACK, 0)
    out["get_404"] = settings() + headers(e(), 1, "/")
    out["get_echo"] = settings() + headers(e(), 1, "/e/x?k=v", extra=[("accept", "*/*"), ("user-agent", "f")])
    out["get_resp"] = settings() + headers(e(), 1, "/r")
    out["get_up"] = settings() + headers(e(), 1, "/u/p")
    out["head_resp"] = settings() + headers(e(), 1, "/r", method="HEAD")
    out["connect_405"] = settings() + frame(HEADERS, END_HEADERS | END_STREAM, 1,
                                            e().encode([(":method", "CONNECT"), (":authority", "a:443")]))
    out["post_echo_cl"] = (settings() + headers(e(), 1, "/e", method="POST", end_stream=False,
                                                extra=[("content-length", "5")]) + data(1, b"hello"))
    out["post_echo_pieces"] = (settings() + window_update(0, 1 << 20) +
                               headers(e(), 1, "/e", method="POST", end_stream=False) +
                               data(1, b"a" * 1000, False) + data(1, b"b" * 1000, False, pad=10) +
                               data(1, b"", False) + data(1, b"c" * 10))
    out["post_big_window"] = (settings() + headers(e(), 1, "/e", method="PUT", end_stream=False) +
                              b"".join(data(1, b"x" * 16384, False) for _ in range(3)) + data(1, b"y" * 16383))
    out["post_cl_mismatch"] = (settings() + headers(e(), 1, "/e", method="POST", end_stream=False,
                                                    extra=[("content-length", "3")]) + data(1, b"hello"))
    out["post_expect"] = (settings() + headers(e(), 1, "/e", method="POST", end_stream=False,
                                               extra=[("expect", "100-continue"), ("content-length", "2")]) +
                          data(1, b"hi"))
    out["trailers"] = (settings() + headers(e(), 1, "/e", method="POST", end_stream=False) + data(1, b"abc", False) +
                       frame(HEADERS, END_HEADERS | END_STREAM, 1, e().encode([("x-trailer", "t")])))
    enc = e()
    b = block(enc, "/e", extra=[("x-long", "v" * 300), ("x-other", "w" * 300)])
    out["continuation"] = (settings() + frame(HEADERS, END_STREAM, 1, b[:100]) +
                           frame(CONTINUATION, 0, 1, b[100:400]) + frame(CONTINUATION, END_HEADERS, 1, b[400:]))
    out["continuation_flood"] = (settings() + frame(HEADERS, END_STREAM, 1, block(e(), "/e")) +
                                 b"".join(frame(CONTINUATION, 0, 1, e().encode([("x-a", "b" * 100)]))
                                          for _ in range(40)))
    out["priority"] = (settings() + frame(HEADERS, END_HEADERS | END_STREAM | PRIO, 1,
                                          struct.pack(">IB", 0, 15) + block(e(), "/r")) +
                       frame(PRIORITY, 0, 3, struct.pack(">IB", 1, 200)))
    out["rst_after_headers"] = settings() + headers(e(), 1, "/u", end_stream=False) + rst(1)
    out["rst_echo_waiting"] = settings() + headers(e(), 1, "/e", method="POST", end_stream=False) + data(1, b"z", False) + rst(1, 0)
    out["rapid_reset"] = settings() + b"".join(headers(enc, 2 * i + 1, "/u") + rst(2 * i + 1) for i in range(30))
    enc = e()
    out["many_streams"] = settings() + b"".join(headers(enc, 2 * i + 1, ["/", "/e", "/r", "/u"][i % 4])
                                                for i in range(12))
    out["ping"] = settings() + frame(PING, 0, 0, b"12345678") + frame(PING, ACK, 0, b"abcdefgh")
    out["goaway"] = (settings() + headers(e(), 1, "/r") +
                     frame(GOAWAY, 0, 0, struct.pack(">II", 1, 0) + b"bye"))
    out["window_updates"] = (settings(initial_window_size=10) + headers(e(), 1, "/e/w") +
                             window_update(1, 100) + window_update(0, 100) + window_update(1, 100000))
    out["zero_window"] = settings(initial_window_size=0) + headers(e(), 1, "/r")
    out["cookies"] = settings() + headers(e(), 1, "/e", extra=[("cookie", "a=1"), ("cookie", "b=2"),
                                                                ("cookie", "c=3")])
    out["host_no_authority"] = settings() + headers(e(), 1, "/e", authority=None, extra=[("host", "h.example")])
    # issue 26: a host that disagrees with :authority (its DATA arrives after the reset, then a
    # good stream), one that agrees but for case, and a second :authority
    out["bad_host_authority"] = (settings() + headers(enc := e(), 1, "/e", method="POST", end_stream=False,
                                                      extra=[("host", "other.example")]) +
                                 data(1, b"smuggled") + headers(enc, 3, "/e"))
    out["host_authority_case"] = settings() + headers(e(), 1, "/e", extra=[("host", "Example.COM")])
    out["bad_dup_authority"] = settings() + headers(e(), 1, "/e", extra=[(":authority", "other.example")])
    out["bad_uppercase"] = settings() + headers(e(), 1, "/e", extra=[("X-Upper", "1")])
    out["bad_connection"] = settings() + headers(e(), 1, "/e", extra=[("connection", "close")])
    out["bad_te"] = settings() + headers(e(), 1, "/e", extra=[("te", "gzip")])
    out["bad_no_path"] = settings() + frame(HEADERS, END_HEADERS | END_STREAM, 1,
                                            e().encode([(":method", "GET"), (":scheme", "http")]))
    out["big_header_431"] = settings() + headers(e(), 1, "/e", extra=[("x-%d" % i, "v" * 200) for i in range(30)])
    out["hpack_table"] = (settings(header_table_size=100) + headers(enc := e(), 1, "/e", extra=[("x-a", "1" * 50)]) +
                          headers(enc, 3, "/e", extra=[("x-a", "1" * 50)]))
    out["data_on_idle"] = settings() + data(5, b"nope")
    out["headers_even_stream"] = settings() + headers(e(), 2, "/e")
    out["bad_frame_size"] = settings() + frame(PING, 0, 0, b"123")
    out["unknown_frame"] = settings() + frame(0x42, 0, 0, b"ext") + headers(e(), 1, "/r")
    return out


def main():
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_h2")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, b in sorted(seeds().items()):
        with open(os.path.join(d, name), "wb") as f:
            f.write(b)
    print("%d seeds in %s" % (len(seeds()), d))


if __name__ == "__main__":
    main()
