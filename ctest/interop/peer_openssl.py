"""openssl s_client against sluice's TLS listeners: ALPN negotiation, SNI certificate
selection, TLS 1.2 and 1.3 accepted and older versions or weak ciphers refused, session
resumption (tickets, both versions), and clients that send garbage or stall instead of a
ClientHello. The origin behind the listener is nginx."""

import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402


def s_client(port, *args, request=False):
    """openssl s_client to 127.0.0.1:port, its output as text. With request, it sends a GET
    of /f with `Connection: close` and keeps its stdin open: s_client ends when sluice
    closes the connection after the answer (30 s at most), whatever the machine's load."""
    argv = ["openssl", "s_client", "-connect", "127.0.0.1:%d" % port] + [str(a) for a in args]
    if not request:
        r = io.run(argv, timeout=30)
        return (r.stdout + r.stderr).decode(errors="replace")
    p = io.subprocess.Popen(argv, stdin=io.subprocess.PIPE, stdout=io.subprocess.PIPE,
                            stderr=io.subprocess.STDOUT, preexec_fn=io.h._die_with_parent)
    timer = threading.Timer(30, p.kill)
    timer.start()
    try:
        p.stdin.write(b"GET /f HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        p.stdin.flush()
        out = p.stdout.read()
        p.wait(5)
    finally:
        timer.cancel()
        p.stdin.close()
        if p.poll() is None:
            p.kill()
            p.wait()
    return out.decode(errors="replace")


def gateway(t, names=("localhost",), tls=None):
    """nginx serving /f, test certificates for `names`, and sluice with a TLS listener `tls`
    (the first name's certificate, or tls(certs): its certificate entries): (sluice, certs,
    the nginx port)."""
    io.need(t, "openssl")
    root = io.h.new_tmpdir("www")
    with open(os.path.join(root, "f"), "w") as f:
        f.write("hello over tls\n")
    _, (p,) = io.nginx(t, root, [""])
    c = io.certs(t, names)
    return io.l7(t, io.upstream("127.0.0.1:%d" % p), workers=1, tls=tls(c) if tls else c[names[0]]), c, p


def handshakes(s, result):
    _, samples = s.metrics()
    return sum(io.h.metric_values(samples, "sluice_tls_handshakes_total", result=result))


def alpn_of(out):
    m = re.search(r"ALPN protocol: (\S+)", out)
    return m.group(1) if m else ("none" if "No ALPN negotiated" in out else "?")


@io.case("tls.alpn", "s_client's ALPN offers get h2 (whatever their order), http/1.1, or no ALPN "
         "answer (none offered, or only unknown protocols, which still speak HTTP/1.1); a listener "
         "with http2 off never chooses h2", budget=60)
def alpn(t):
    on, c, p = gateway(t)
    off = io.l7(t, io.upstream("127.0.0.1:%d" % p), workers=1, tls=c["localhost"], listener_extra=", http2: false")
    want = [(on, ["-alpn", "h2"], "h2"), (on, ["-alpn", "http/1.1"], "http/1.1"),
            (on, ["-alpn", "http/1.1,h2"], "h2"), (on, [], "none"),
            (on, ["-alpn", "spdy/3,foo"], "none"), (off, ["-alpn", "h2,http/1.1"], "http/1.1"),
            (off, ["-alpn", "h2"], "none")]
    got = [(" ".join(a), alpn_of(s_client(g.port("tls"), *a))) for g, a, _ in want]
    t.check("ALPN answers: h2 -> h2; http/1.1 -> http/1.1; http/1.1,h2 -> h2; none offered -> none; "
            "spdy/3,foo -> none; http2 off: h2,http/1.1 -> http/1.1, h2 alone -> none",
            [g[1] for g in got] == [w[2] for w in want], [w[2] for w in want], got)
    out = s_client(on.port("tls"), "-alpn", "foo", request=True)
    t.check("a client that got no ALPN answer speaks HTTP/1.1 and is served (200, the body)",
            "HTTP/1.1 200" in out and "hello over tls" in out, "200 + body",
            [ln for ln in out.splitlines() if "HTTP/" in ln or "hello" in ln] or out[-400:])


@io.case("tls.sni_certs", "two certificates on one listener: SNI a.test and b.test each get their "
         "own (verified against the test CA for that name), an unknown name and no SNI get the "
         "default (the first)", budget=60)
def sni(t):
    s, c, _ = gateway(t, ("a.test", "b.test"), tls=lambda c: "[ { cert: %s, key: %s }, { cert: %s, key: %s, "
                      "sni: [b.test] } ]" % (c["a.test"] + c["b.test"]))
    port = s.port("tls")
    got = {}
    for label, args in (("a.test", ["-servername", "a.test", "-verify_hostname", "a.test"]),
                        ("b.test", ["-servername", "b.test", "-verify_hostname", "b.test"]),
                        ("other.test", ["-servername", "other.test"]), ("no SNI", ["-noservername"])):
        out = s_client(port, "-CAfile", c["ca"], *args)
        m = re.search(r"subject=CN ?= ?(\S+)", out)
        v = re.search(r"Verify return code: (\d+)", out)
        got[label] = (m.group(1) if m else None, v.group(1) if v else None)
    t.check("SNI a.test -> CN a.test, verify 0 (ok, name checked)", got["a.test"] == ("a.test", "0"),
            ("a.test", "0"), got["a.test"])
    t.check("SNI b.test -> CN b.test, verify 0 (ok, name checked)", got["b.test"] == ("b.test", "0"),
            ("b.test", "0"), got["b.test"])
    t.check("SNI other.test and no SNI -> the default certificate, CN a.test",
            got["other.test"][0] == "a.test" and got["no SNI"][0] == "a.test", "a.test both",
            (got["other.test"], got["no SNI"]))


@io.case("tls.versions", "TLS 1.2 (an ECDHE AEAD suite) and TLS 1.3 handshakes complete and serve "
         "a request; TLS 1.0, TLS 1.1 and a CBC-only TLS 1.2 offer are refused by sluice with an "
         "alert, each counted as a failed handshake", budget=60)
def versions(t):
    s, c, _ = gateway(t)
    port = s.port("tls")
    for v in ("1_2", "1_3"):
        out = s_client(port, "-tls" + v, "-CAfile", c["ca"], request=True)
        proto = re.search(r"Protocol\s*: (\S+)", out)
        cipher = re.search(r"Cipher\s*: (\S+)", out)
        ok = (proto and proto.group(1) == "TLSv1." + v[-1] and "HTTP/1.1 200" in out
              and "Verify return code: 0" in out)
        if v == "1_2":
            ok = ok and cipher and re.fullmatch(r"ECDHE-ECDSA-(AES\d+-GCM-SHA\d+|CHACHA20-POLY1305)", cipher.group(1))
        t.check("TLS 1.%s: handshake, certificate verified, 200 served%s" % (
            v[-1], " (ECDHE + AEAD suite)" if v == "1_2" else ""), ok, "TLSv1.%s" % v[-1],
            (proto and proto.group(1), cipher and cipher.group(1), out[-300:]))
    failed0 = handshakes(s, "failed")
    refused = {}
    # SECLEVEL=0 lets this OpenSSL offer what it would not by default: the refusal is sluice's
    for label, args in (("TLS 1.0", ["-tls1", "-cipher", "DEFAULT@SECLEVEL=0"]),
                        ("TLS 1.1", ["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"]),
                        ("TLS 1.2 CBC only", ["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA"])):
        out = s_client(port, *args)
        alert = re.search(r"alert (protocol version|handshake failure)", out)
        refused[label] = (alert.group(1) if alert else None, bool(re.search(r"Cipher is \(NONE\)|"
                                                                          r"no peer certificate available", out)))
    t.check("TLS 1.0 and 1.1 offers: refused with a protocol_version alert, no session",
            refused["TLS 1.0"] == ("protocol version", True) and refused["TLS 1.1"] == ("protocol version", True),
            ("protocol version", True), (refused["TLS 1.0"], refused["TLS 1.1"]))
    t.check("a TLS 1.2 offer of CBC suites only: refused with a handshake_failure alert, no session",
            refused["TLS 1.2 CBC only"] == ("handshake failure", True), ("handshake failure", True),
            refused["TLS 1.2 CBC only"])
    n = handshakes(s, "failed") - failed0
    t.check("sluice counted the 3 refusals as failed handshakes", n == 3, 3, n)


@io.case("tls.resumption", "a session saved by s_client (-sess_out) is resumed (-sess_in: "
         "'Reused') by ticket over TLS 1.3 and over TLS 1.2, and the resumed connection serves "
         "a request; TLS 1.3 tickets allow no early data", budget=60)
def resumption(t):
    s, c, _ = gateway(t)
    d = io.h.new_tmpdir("sess")
    for v in ("1_3", "1_2"):
        sess = os.path.join(d, "s" + v)
        first = s_client(s.port("tls"), "-tls" + v, "-sess_out", sess, request=True)
        again = s_client(s.port("tls"), "-tls" + v, "-sess_in", sess, request=True)
        new = re.search(r"^(New|Reused), (TLSv[\d.]+)", first, re.M)
        reused = re.search(r"^(New|Reused), (TLSv[\d.]+)", again, re.M)
        t.check("TLS 1.%s: the first connection is New, the second with its session is Reused, "
                "both served 200" % v[-1],
                new and new.groups() == ("New", "TLSv1." + v[-1]) and reused
                and reused.groups() == ("Reused", "TLSv1." + v[-1]) and "HTTP/1.1 200" in first
                and "HTTP/1.1 200" in again, ("New", "Reused"),
                (new and new.groups(), reused and reused.groups(), again[-300:]))
        if v == "1_3":
            early = sorted(set(re.findall(r"Max Early Data: (\d+)", first)))
            t.check("TLS 1.3: the tickets allow no early data (Max Early Data: 0): no 0-RTT replay",
                    early == ["0"], ["0"], early)


@io.case("tls.resumption_sni", "a session made under SNI b.test (its own certificate entry) is "
         "resumed under b.test but never under a.test: there sluice makes a full handshake with "
         "a.test's certificate (RFC 6066 3: no resumption across server names), TLS 1.2 and 1.3",
         budget=60)
def resumption_sni(t):
    s, c, _ = gateway(t, ("a.test", "b.test"), tls=lambda c: "[ { cert: %s, key: %s }, { cert: %s, key: %s, "
                      "sni: [b.test] } ]" % (c["a.test"] + c["b.test"]))
    d = io.h.new_tmpdir("sess")
    for v in ("1_3", "1_2"):
        sess = os.path.join(d, "s" + v)
        got = []
        for name, how in (("b.test", "-sess_out"), ("b.test", "-sess_in"), ("a.test", "-sess_in")):
            out = s_client(s.port("tls"), "-tls" + v, "-servername", name, "-CAfile", c["ca"],
                           "-verify_hostname", name, how, sess, request=True)
            m = re.search(r"^(New|Reused), TLSv", out, re.M)
            v_ok = re.search(r"Verify return code: (\d+)", out)
            got.append((name, m and m.group(1), v_ok and v_ok.group(1), "HTTP/1.1 200" in out))
        want = [("b.test", "New", "0", True), ("b.test", "Reused", "0", True), ("a.test", "New", "0", True)]
        t.check("TLS 1.%s: b.test New, b.test again Reused, a.test with b.test's session New (a full "
                "handshake, a.test's certificate verified), each served 200" % v[-1], got == want, want, got)


@io.case("tls.garbage", "bytes that are not a ClientHello are closed at once (random bytes; a "
         "plaintext HTTP request after a plaintext 400), long before the handshake timeout; a "
         "ClientHello cut short is closed at handshake_timeout; each counted; a real handshake "
         "still works", budget=60)
def garbage(t):
    s, c, p = gateway(t)
    # a second gateway with a short handshake timeout, for the stalled client
    s2 = io.l7(t, io.upstream("127.0.0.1:%d" % p), workers=1,
               tls="[ { cert: %s, key: %s } ], handshake_timeout: 1s" % c["localhost"])
    port = s.port("tls")
    results = {}
    for label, data in (("random bytes", os.urandom(300)),
                        ("plaintext HTTP", b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")):
        sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        t0 = time.monotonic()
        sock.sendall(data)
        got = b""
        try:
            while True:
                d = sock.recv(4096)
                if not d:
                    break
                got += d
            end = "closed"
        except socket.timeout:
            end = "still open after 20 s"
        except ConnectionResetError:
            end = "closed"
        results[label] = (end, time.monotonic() - t0, got)
        sock.close()
    end, took, got = results["random bytes"]
    t.check("random bytes: closed (an alert at most), the 10 s handshake_timeout not reached (%.2f s)"
            % took, end == "closed" and (got == b"" or got[:1] == b"\x15") and took < 9, "closed < 9 s",
            results["random bytes"])
    end, took, got = results["plaintext HTTP"]
    t.check("a plaintext HTTP request to the TLS port: a plaintext 400 saying so, then closed (%.2f s)"
            % took, end == "closed" and got.startswith(b"HTTP/1.1 400 ")
            and b"plain HTTP request sent to a TLS listener" in got and took < 9, "400 + closed < 9 s",
            results["plaintext HTTP"])
    n = handshakes(s, "failed")
    t.check("both counted as failed handshakes", n == 2, 2, n)
    hello = io.h.tls_client_hello("localhost")[3]
    sock = socket.create_connection(("127.0.0.1", s2.port("tls")), timeout=20)
    t0 = time.monotonic()
    sock.sendall(hello[:len(hello) // 2])
    try:
        end = "closed" if sock.recv(4096) == b"" else "answered"
    except socket.timeout:
        end = "still open after 20 s"
    except ConnectionResetError:
        end = "closed"
    took = time.monotonic() - t0
    sock.close()
    t.check("half a ClientHello, then silence: closed by the 1 s handshake_timeout (%.2f s)" % took,
            end == "closed" and 0.5 <= took < 15, "closed after ~1 s", (end, took))
    n = handshakes(s2, "timeout")
    t.check("counted as a handshake timeout", n == 1, 1, n)
    out = s_client(port, "-CAfile", c["ca"], request=True)
    t.check("a real client afterwards: handshake, verify ok, 200",
            "HTTP/1.1 200" in out and "Verify return code: 0" in out, "200", out[-300:])


if __name__ == "__main__":
    io.main()
