"""TLS on both sides of the HTTP path, against the real openssl and curl CLIs.

Certificates are made here by the openssl CLI: a test CA, leaves for a.test, b.test,
c.test (no sni: its own SAN names select it), a default name, *.w.test and
*.deep.w.test, an upstream leaf (DNS:up.test, IP:127.0.0.1), a second unrelated CA,
and a key that does not match its certificate.

  1. SNI: curl --resolve gets a.test's and b.test's own certificates (verified against
     the test CA); an unknown name and no SNI get the default; an entry without `sni`
     is chosen by its certificate's SAN; *.w.test serves x.w.test and the longer
     *.deep.w.test wins for h.deep.w.test; a name listed with a trailing dot ("bb.test.")
     is the same name, as in sni_routes and routes' hosts.
  1b. One name, an RSA and an ECDSA certificate: s_client limited to ECDSA or RSA
     signatures (TLS 1.3), or to ECDHE-ECDSA or ECDHE-RSA suites (TLS 1.2), gets the one
     it can verify, ECDSA when it takes both; with a P-384 ECDSA key, a TLS 1.3 client
     without the P-384 scheme, or a TLS 1.2 one without the P-384 group, gets RSA; the
     same name listed in two entries' `sni`
     with RSA keys is a config error at the second; two certificates whose own names
     overlap (no `sni`) load, the first keeping the shared name.
  2. Versions, ALPN, resumption: -tls1_1 is refused, min_version 1.3 refuses -tls1_2
     (the same client gets TLS 1.2 from a 1.2 listener); ALPN h2,http/1.1 answers
     h2 (HTTP/2 is on by default) and http/1.1 alone answers http/1.1; -tls1_2 -reconnect is Reused; TLS 1.3 -sess_out/-sess_in is Reused;
     with workers: 2 every one of many resumptions is Reused whichever worker accepts;
     session_tickets: false gives New.
  3. Config: `sluice check` on a mismatched key, an unreadable certificate, a DER
     certificate (the reason: "no start line") and an IP address in `sni` exits 1
     with FILE:LINE:COL naming the file, and so does an encrypted key (run with a pty
     as its terminal: no passphrase prompt, no hang); a reload with a broken certificate
     or an encrypted key is 422 and
     the old one keeps serving; a reload to a new certificate serves it to new
     connections while a keep-alive connection from before keeps working.
  4. Upstream TLS (a Python ssl server reporting session reuse and the SNI it got):
     verified 200; the configured SNI arrives (sni: UP.test. arrives as up.test and
     verifies); without sni the IP SAN is verified (and a
     certificate without it is refused); the next connection resumes; a wrong CA is 502
     with "certificate verify failed" in the log; verify: false passes; a target that
     closes without close_notify ends a close-delimited body whole (a body with a length
     cut short that way is still a failure); HTTP health probes over TLS keep the target
     healthy.
  5. Robustness: 1,000 garbage connections and 100 stalled half ClientHellos
     (handshake_timeout 1s) while HTTPS keeps answering; FDs back to baseline, RSS growth
     small, sluice_tls_handshakes_total failed >= 1000 and timeout >= 100; plain HTTP on
     the TLS port gets a plaintext 400, whatever its method (OpenSSL itself recognises
     only GET, POST, HEAD and PUT) and for an HTTP/2 prior-knowledge preface.
  6. Bulk: 20 MiB request and response bodies through client TLS and upstream TLS,
     checksummed at the far ends; pipelined requests over TLS answered in order.
"""

import fcntl
import hashlib
import http.server
import json
import os
import pty
import random
import re
import select
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import termios
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("tls", budget=280)

SLOW = os.environ.get("SLUICE_SANITIZE", "").upper() in ("1", "ON", "TRUE")
CERTS = {}   # name -> path, filled by setup()
DIR = None


# ---------------------------------------------------------------- certificates

def run(argv, timeout=60, input=None):
    return subprocess.run(argv, capture_output=True, timeout=timeout, input=input,
                          stdin=None if input is not None else subprocess.DEVNULL)


def openssl(*args):
    return h.openssl(*args)


def make_ca(name):
    return h.make_ca(DIR, name)


def make_leaf(name, cn, san, ca="ca", rsa=False, curve="prime256v1", eku="serverAuth"):
    crt, key = h.make_leaf(DIR, name, cn, san, ca, rsa, curve, eku)
    CERTS[name] = crt
    CERTS[name + ".key"] = key
    return crt, key


def pem(path):
    with open(path) as f:
        return ssl.DER_cert_to_PEM_cert(ssl.PEM_cert_to_DER_cert(f.read()))


def cert_cn(pem_text):
    r = run(["openssl", "x509", "-noout", "-subject"], input=pem_text.encode())
    m = re.search(r"CN\s*=\s*([^,/\n]+)", r.stdout.decode())
    return m.group(1).strip() if m else None


# ---------------------------------------------------------------- TLS clients

def served_pem(port, sni, timeout=10):
    """The certificate the gateway serves for this SNI (None: no SNI), unverified."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        with ctx.wrap_socket(s, server_hostname=sni) as ts:
            return ssl.DER_cert_to_PEM_cert(ts.getpeercert(binary_form=True))


def client_ctx(ca=None, max13=True):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca:
        ctx.load_verify_locations(ca)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if not max13:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def tls_client(port, sni="a.test", ctx=None, timeout=30.0, session=None):
    """A harness Client whose socket is TLS (ctx default: verified by the test CA)."""
    c = h.Client(port, timeout=timeout, connect_timeout=10.0)
    ctx = ctx or client_ctx(CERTS["ca"])
    c.sock = ctx.wrap_socket(c.sock, server_hostname=sni, session=session)
    c.sock.settimeout(timeout)
    return c


def tls_request(port, method="GET", path="/", body=None, sni="a.test", timeout=30.0, headers=None):
    c = tls_client(port, sni, timeout=timeout)
    try:
        c.send(h.build_request(method, path, headers, body, host=sni))
        return c.read_response(method, timeout=timeout)
    finally:
        c.close()


def s_client(port, *args, stdin=b"", timeout=30):
    r = run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port] + list(args),
            timeout=timeout, input=stdin)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def s_client_request(port, args, wait=0.7, timeout=30):
    return h.s_client_request(port, args, wait, timeout)


def body_path(raw):
    try:
        return json.loads(raw).get("path")
    except ValueError:
        return None


def metric(s, name, **labels):
    _, samples = s.metrics()
    return sum(h.metric_values(samples, name, **labels))


def run_on_a_tty(argv, timeout=15):
    """Runs argv in a session of its own whose controlling terminal is a new pty (what a
    program started from a shell has); (exit code, output). A program that waits for
    input on its terminal times out: exit code None. Without ptys (a bare container), the
    program runs with no terminal at all."""
    try:
        master, slave = pty.openpty()
    except OSError:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace")

    def take_the_tty():
        try:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        except OSError:
            pass

    p = subprocess.Popen(argv, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True, preexec_fn=take_the_tty)
    os.close(slave)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        rc = None
    try:
        while True:   # what it wrote to the terminal itself (a prompt)
            if not select.select([master], [], [], 0)[0]:
                break
            chunk = os.read(master, 4096)
            if not chunk:
                break
            out += chunk
    except OSError:
        pass
    os.close(master)
    return rc, out.decode(errors="replace")


def post_reload(s):
    req = urllib.request.Request("http://%s/reload" % s.admin, data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------- TLS upstream

class TLSUpstream:
    """A threaded HTTPS/1.1 keep-alive server (http.server + ssl) on 127.0.0.1:0.

    Every answer carries X-Reused (this connection resumed a session) and X-SNI (the
    name the client sent, "-" for none). GET /health: 200. GET /big?n=N: N bytes of
    pattern data. GET /closed?n=N: N bytes that only the close delimits, and GET
    /short?n=N: a Content-Length of N and N/2 bytes; after either the connection is closed
    without close_notify (Python's ssl sends none on close, as many servers). Anything
    else: JSON with the body's length and sha256.
    """

    def __init__(self, cert, key):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.sni = {}
        self.lock = threading.Lock()
        self.log = []          # (path, reused, sni) per request
        self.handshake_errors = 0

        def on_sni(sock, name, ctx):
            self.sni[id(sock)] = name
        self.ctx.sni_callback = on_sni
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def setup(self):
                self.request.settimeout(30)
                try:
                    self.request.do_handshake()
                except (ssl.SSLError, OSError):
                    with outer.lock:
                        outer.handshake_errors += 1
                    raise
                super().setup()

            def _body(self):
                hs = hashlib.sha256()
                n = 0
                if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            break
                        left = size
                        while left:
                            d = self.rfile.read(min(left, 1 << 20))
                            hs.update(d)
                            n += len(d)
                            left -= len(d)
                        self.rfile.readline()
                else:
                    left = int(self.headers.get("Content-Length") or 0)
                    while left:
                        d = self.rfile.read(min(left, 1 << 20))
                        if not d:
                            break
                        hs.update(d)
                        n += len(d)
                        left -= len(d)
                return n, hs.hexdigest()

            def _answer(self):
                n, digest = self._body()
                reused = self.connection.session_reused
                sni = outer.sni.get(id(self.connection)) or "-"
                with outer.lock:
                    outer.log.append((self.path, reused, sni))
                if "/closed?" in self.path or "/short?" in self.path:
                    total = int(self.path.split("n=", 1)[1])
                    self.send_response(200)
                    if "/short?" in self.path:
                        self.send_header("Content-Length", str(total))
                        total //= 2
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for piece in h.pattern_blocks(total):
                        self.wfile.write(piece)
                    self.close_connection = True
                    return
                if "/big?" in self.path:
                    total = int(self.path.split("n=", 1)[1])
                    self.send_response(200)
                    self.send_header("Content-Length", str(total))
                    self.send_header("X-Reused", "1" if reused else "0")
                    self.send_header("X-SNI", sni)
                    self.end_headers()
                    for piece in h.pattern_blocks(total):
                        self.wfile.write(piece)
                    return
                body = json.dumps({"path": self.path, "body_len": n, "sha256": digest,
                                   "reused": reused, "sni": sni}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-Reused", "1" if reused else "0")
                self.send_header("X-SNI", sni)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = _answer

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 128

            def get_request(self):
                sock, addr = self.socket.accept()
                return outer.ctx.wrap_socket(sock, server_side=True,
                                             do_handshake_on_connect=False), addr

            def handle_error(self, request, client_address):
                pass

        self.srv = Server(("127.0.0.1", 0), Handler)
        self.port = self.srv.server_address[1]
        self.address = "127.0.0.1:%d" % self.port
        self.th = threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.1},
                                   daemon=True)
        self.th.start()
        h._register(self)

    def paths(self, prefix):
        with self.lock:
            return [x for x in self.log if x[0].startswith(prefix)]

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()
        h._unregister(self)


# ---------------------------------------------------------------- configs

ROUTES = """routes:
  - { name: echo, match: { paths: [/] }, plugins: [ { name: echo } ] }
"""


def listener_tls(extra="", certs=None):
    certs = certs or """        - { cert: %(default)s, key: %(default.key)s }
        - { cert: %(a)s, key: %(a.key)s, sni: [a.test] }
        - { cert: %(b)s, key: %(b.key)s, sni: [b.test, "bb.test."] }
        - { cert: %(c)s, key: %(c.key)s }
        - { cert: %(w)s, key: %(w.key)s, sni: ["*.w.test"] }
        - { cert: %(dw)s, key: %(dw.key)s, sni: ["*.deep.w.test"] }
""" % CERTS
    return """    tls:
      certificates:
%s%s""" % (certs, extra)


def gw_config(tls_extra="", workers=1, certs=None, more=""):
    return ("workers: %d\nwatch: false\nadmin: { listen: 127.0.0.1:0 }\nlisteners:\n"
            "  - name: web\n    listen: 127.0.0.1:0\n    protocol: http\n%s\n%s%s"
            % (workers, listener_tls(tls_extra, certs), more, ROUTES))


# ---------------------------------------------------------------- tests

def setup(t):
    global DIR
    DIR = h.new_tmpdir("certs")
    make_ca("ca")
    make_ca("otherca")
    CERTS["ca"] = os.path.join(DIR, "ca.crt")
    CERTS["otherca"] = os.path.join(DIR, "otherca.crt")
    make_leaf("default", "default.test", "DNS:default.test")
    make_leaf("a", "a.test", "DNS:a.test")
    make_leaf("a2", "a.test", "DNS:a.test")      # the same name, a new certificate
    make_leaf("b", "b.test", "DNS:b.test")
    make_leaf("c", "c.test", "DNS:c.test")
    make_leaf("w", "wild.w.test", "DNS:*.w.test")
    make_leaf("dw", "wild.deep.w.test", "DNS:*.deep.w.test")
    make_leaf("d_rsa", "d.test", "DNS:d.test", rsa=True)   # one name, an RSA and an ECDSA certificate
    make_leaf("d_ec", "d.test", "DNS:d.test")
    make_leaf("d_rsa2", "d.test", "DNS:d.test", rsa=True)
    make_leaf("e_ec384", "e.test", "DNS:e.test", curve="secp384r1")   # ECDSA P-384 beside RSA
    make_leaf("e_rsa", "e.test", "DNS:e.test", rsa=True)
    make_leaf("ov1", "ov1.test", "DNS:ov1.test,DNS:shared.test")   # two certificates sharing a name
    make_leaf("ov2", "ov2.test", "DNS:ov2.test,DNS:shared.test")
    make_leaf("up", "up.test", "DNS:up.test,IP:127.0.0.1")
    make_leaf("other", "up.test", "DNS:up.test,IP:127.0.0.1", ca="otherca")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out",
            os.path.join(DIR, "mismatch.key"))
    CERTS["mismatch.key"] = os.path.join(DIR, "mismatch.key")
    t.check("test certificates made by the openssl CLI",
            all(os.path.exists(p) for p in CERTS.values()), "files", sorted(CERTS))


def test_sni(t):
    s = h.start_sluice(gw_config(), suite=t, name="sni")
    p = s.port()
    try:
        for name in ("a", "b"):
            r = run(["curl", "-sv", "--max-time", "20", "--resolve", "%s.test:%d:127.0.0.1" % (name, p),
                     "--cacert", CERTS["ca"], "https://%s.test:%d/hello" % (name, p)])
            err = r.stderr.decode(errors="replace")
            m = re.search(r"subject: (.*)", err)
            t.check("curl https://%s.test/ verifies against the test CA and gets 200" % name,
                    r.returncode == 0 and body_path(r.stdout) == "/hello",
                    "exit 0, echo body", (r.returncode, r.stdout[:200], err[-400:]))
            t.check("curl sees %s.test's own certificate" % name,
                    m is not None and "CN=%s.test" % name in m.group(1).replace(" ", ""),
                    "subject CN=%s.test" % name, m and m.group(1))
        out = s_client(p, "-servername", "b.test")[1]
        t.check("openssl s_client -servername b.test: b.test's certificate",
                re.search(r"subject=.*CN\s*=\s*b\.test", out) is not None, "subject=CN = b.test",
                re.findall(r"subject=.*", out))
        cases = [("unknown.test", "default"), (None, "default"), ("A.TEST", "a"), ("c.test", "c"),
                 ("x.w.test", "w"), ("h.deep.w.test", "dw"), ("deep.w.test", "w"),
                 ("w.test", "default"), ("bb.test", "b"), ("bb.test.", "b")]
        for sni, want in cases:
            got = served_pem(p, sni)
            t.check("SNI %s gets the %s certificate" % (sni, want), got == pem(CERTS[want]),
                    cert_cn(pem(CERTS[want])), cert_cn(got))
    finally:
        s.stop()


def key_bits(out):
    m = re.search(r"Server public key is (\d+) bit", out)
    return {"256": "ECDSA", "2048": "RSA"}.get(m.group(1)) if m else None


def test_rsa_and_ecdsa(t):
    """One name, an RSA and an ECDSA certificate (nginx's two ssl_certificate lines, HAProxy's
    two crt): the client gets the one its signature algorithms and suites take, ECDSA when
    it takes both. Before, the first entry took the name and the second was never served:
    an ECDSA-only client failed the handshake."""
    certs = ("        - { cert: %(default)s, key: %(default.key)s }\n"
             "        - { cert: %(d_rsa)s, key: %(d_rsa.key)s, sni: [d.test] }\n"
             "        - { cert: %(d_ec)s, key: %(d_ec.key)s, sni: [d.test] }\n"
             "        - { cert: %(e_ec384)s, key: %(e_ec384.key)s, sni: [e.test] }\n"
             "        - { cert: %(e_rsa)s, key: %(e_rsa.key)s, sni: [e.test] }\n"
             "        - { cert: %(ov1)s, key: %(ov1.key)s }\n"
             "        - { cert: %(ov2)s, key: %(ov2.key)s }\n" % CERTS)
    s = h.start_sluice(gw_config(certs=certs), suite=t, name="dual")
    p = s.port()
    try:
        cases = [("TLS 1.3, ECDSA signatures only", ["-tls1_3", "-sigalgs", "ECDSA+SHA256"], "ECDSA"),
                 ("TLS 1.3, RSA signatures only", ["-tls1_3", "-sigalgs", "RSA-PSS+SHA256:RSA+SHA256"], "RSA"),
                 ("TLS 1.3, both (openssl's default list)", ["-tls1_3"], "ECDSA"),
                 ("TLS 1.2, ECDHE-RSA suites only", ["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"], "RSA"),
                 ("TLS 1.2, ECDHE-ECDSA suites only", ["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"], "ECDSA"),
                 ("TLS 1.2, both suites, RSA signatures only",
                  ["-tls1_2", "-sigalgs", "RSA+SHA256"], "RSA")]
        for what, args, want in cases:
            rc, out = s_client(p, "-servername", "d.test", "-CAfile", CERTS["ca"], "-verify_return_error", *args)
            t.check("d.test, %s: the %s certificate, verified" % (what, want),
                    key_bits(out) == want and "Verify return code: 0 (ok)" in out, want,
                    (key_bits(out), re.findall(r".*(?:alert|Verify return code).*", out)[:3]))
        # The ECDSA certificate's curve counts: TLS 1.3 names it in the scheme (P-384 is
        # ecdsa_secp384r1_sha384), TLS 1.2 in supported_groups. Chrome offers no P-521 scheme.
        cases = [("TLS 1.3, ECDSA only for P-256", ["-tls1_3", "-sigalgs", "ECDSA+SHA256:RSA-PSS+SHA256"], "RSA"),
                 ("TLS 1.3, ECDSA for P-384", ["-tls1_3", "-sigalgs", "ECDSA+SHA384:RSA-PSS+SHA256"], "ECDSA"),
                 ("TLS 1.2, groups without P-384", ["-tls1_2", "-groups", "P-256:X25519"], "RSA"),
                 ("TLS 1.2, groups with P-384", ["-tls1_2", "-groups", "P-384:X25519"], "ECDSA")]
        for what, args, want in cases:
            rc, out = s_client(p, "-servername", "e.test", "-CAfile", CERTS["ca"], "-verify_return_error", *args)
            got = {"384": "ECDSA", "2048": "RSA"}.get((re.findall(r"Server public key is (\d+) bit", out) or [""])[0])
            t.check("e.test (ECDSA P-384 and RSA), %s: the %s certificate" % (what, want),
                    got == want and "Verify return code: 0 (ok)" in out, want,
                    (got, re.findall(r".*(?:alert|Verify return code).*", out)[:3]))
        r = run(["curl", "-s", "--max-time", "20", "--resolve", "d.test:%d:127.0.0.1" % p,
                 "--cacert", CERTS["ca"], "https://d.test:%d/dual" % p])
        t.check("curl https://d.test/ verifies and gets 200", r.returncode == 0 and body_path(r.stdout) == "/dual",
                "exit 0, /dual", (r.returncode, r.stdout[:120]))
        for sni, want in (("shared.test", "ov1"), ("ov2.test", "ov2")):
            got = served_pem(p, sni)
            t.check("certificates' own names overlapping (shared.test, one key type): %s gets %s" % (sni, want),
                    got == pem(CERTS[want]), cert_cn(pem(CERTS[want])), cert_cn(got))
        rc, out = s_client(p, "-sigalgs", "ECDSA+SHA256")
        t.check("no SNI still gets the default entry", "CN = default.test" in out or "CN=default.test" in out,
                "default.test", re.findall(r"subject=.*", out))
    finally:
        s.stop()

    d = h.new_tmpdir("dual")
    cfg = os.path.join(d, "same-key-type.yaml")
    with open(cfg, "w") as f:
        f.write(gw_config(certs="        - { cert: %(d_rsa)s, key: %(d_rsa.key)s, sni: [d.test] }\n"
                                "        - { cert: %(d_rsa2)s, key: %(d_rsa2.key)s, sni: [D.test.] }\n" % CERTS))
    r = h.run_cli(["check", "-c", cfg])
    out = r.stdout + r.stderr
    m = re.search(r"^%s:(\d+):(\d+): (.*)$" % re.escape(cfg), out, re.M)
    t.check("check: two RSA certificates for d.test (the second never served) exit 1 at the second entry",
            r.returncode == 1 and m is not None and int(m.group(1)) == 11 and "d.test" in m.group(3),
            "%s:11:COL: ... d.test ..." % cfg, (r.returncode, out))


def test_versions_alpn_resumption(t):
    s = h.start_sluice(gw_config('      min_version: "1.2"\n'), suite=t, name="versions")
    s13 = h.start_sluice(gw_config('      min_version: "1.3"\n'), suite=t, name="v13")
    p, p13 = s.port(), s13.port()
    try:
        # SECLEVEL=0 so the client itself is willing to offer TLS 1.1 (OpenSSL 3 refuses
        # it at level 1): the refusal must come from the gateway.
        rc, out = s_client(p, "-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0", "-servername", "a.test")
        t.check("-tls1_1 is refused: no handshake", rc != 0 and "Cipher is (NONE)" in out
                and "TLSv1.1, Cipher is" not in out, "handshake failure", out[-600:])
        t.check("-tls1_1: the gateway answers a protocol_version alert",
                "alert protocol version" in out, "alert protocol version", out[-600:])
        rc, out = s_client(p, "-tls1_2", "-servername", "a.test")
        t.check("control: -tls1_2 handshakes with a min_version 1.2 listener",
                "Protocol  : TLSv1.2" in out or "TLSv1.2, Cipher is" in out, "TLSv1.2", out[-600:])
        rc, out = s_client(p13, "-tls1_2", "-servername", "a.test")
        t.check("min_version 1.3 refuses -tls1_2 (a protocol_version alert)",
                "Cipher is (NONE)" in out and "alert protocol version" in out, "no handshake", out[-600:])
        rc, out = s_client(p13, "-tls1_3", "-servername", "a.test")
        t.check("min_version 1.3 accepts -tls1_3", "TLSv1.3, Cipher is" in out, "TLSv1.3", out[-600:])

        rc, out = s_client(p, "-alpn", "h2,http/1.1", "-servername", "a.test")
        t.check("ALPN h2,http/1.1 -> h2 (http2 on by default)", "ALPN protocol: h2" in out, "ALPN protocol: h2",
                re.findall(r".*ALPN.*", out))
        rc, out = s_client(p, "-alpn", "http/1.1", "-servername", "a.test")
        t.check("ALPN http/1.1 -> http/1.1", "ALPN protocol: http/1.1" in out, "ALPN protocol: http/1.1",
                re.findall(r".*ALPN.*", out))

        rc, out = s_client(p, "-tls1_2", "-reconnect", "-servername", "a.test")
        reused = out.count("Reused, TLSv1.2")
        t.check("-tls1_2 -reconnect: the 5 reconnections are Reused", reused == 5, 5,
                (reused, re.findall(r"^(?:New|Reused), .*", out, re.M)))

        sess = os.path.join(DIR, "s13.pem")
        out1 = s_client_request(p, ["-tls1_3", "-servername", "a.test", "-sess_out", sess])
        out2 = s_client_request(p, ["-tls1_3", "-servername", "a.test", "-sess_in", sess])
        t.check("TLS 1.3: a first connection is New, TLSv1.3", "New, TLSv1.3" in out1, "New, TLSv1.3",
                re.findall(r"^(?:New|Reused), .*", out1, re.M))
        t.check("TLS 1.3: -sess_in resumes: Reused, TLSv1.3", "Reused, TLSv1.3" in out2, "Reused, TLSv1.3",
                re.findall(r"^(?:New|Reused), .*", out2, re.M))
        t.check("TLS 1.3 resumed connection answered the request", "HTTP/1.1 200" in out2, "HTTP/1.1 200",
                out2[-400:])
    finally:
        s.stop()
        s13.stop()

    # tickets shared by workers: whichever worker accepts, the ticket decrypts
    s = h.start_sluice(gw_config(), workers=2, suite=t, name="tickets")
    p = s.port()
    try:
        results = {}
        for ver in ("1.2", "1.3"):
            ctx = client_ctx(CERTS["ca"], max13=(ver == "1.3"))
            c = tls_client(p, ctx=ctx)
            c.send(h.build_request("GET", "/", host="a.test"))
            c.read_response()
            sess = c.sock.session
            c.close()
            n_ok, seen = 0, []
            for i in range(30):
                c = tls_client(p, ctx=ctx, session=sess)
                c.send(h.build_request("GET", "/", host="a.test"))
                r = c.read_response()
                seen.append(c.sock.session_reused)
                n_ok += r.status == 200 and c.sock.session_reused
                c.close()
            results[ver] = (n_ok, seen.count(False))
            t.check("workers: 2, TLS %s: 30 of 30 resumptions Reused" % ver, n_ok == 30, 30, (n_ok, seen))
        # counted once each response is written: polled
        st = s.status_until(lambda st: len(st.get("workers", [])) == 2 and all(w.get("requests") for w in st["workers"]))
        per = [w.get("requests") for w in st.get("workers", [])]
        t.check("both workers accepted some of the resumed connections", len(per) == 2 and all(per),
                "requests on both", per)
        rc, out = s_client(p, "-tls1_2", "-reconnect", "-servername", "a.test")
        t.check("workers: 2, -tls1_2 -reconnect: 5 Reused", out.count("Reused, TLSv1.2") == 5, 5,
                re.findall(r"^(?:New|Reused), .*", out, re.M))
    finally:
        s.stop()

    s = h.start_sluice(gw_config("      session_tickets: false\n"), suite=t, name="notickets")
    p = s.port()
    try:
        rc, out = s_client(p, "-tls1_2", "-reconnect", "-servername", "a.test")
        lines = re.findall(r"^(?:New|Reused), .*", out, re.M)
        t.check("session_tickets: false: -tls1_2 -reconnect stays New",
                len(lines) == 6 and all(x.startswith("New") for x in lines), "6 x New", lines)
        sess = os.path.join(DIR, "s13n.pem")
        s_client_request(p, ["-tls1_3", "-servername", "a.test", "-sess_out", sess])
        out2 = s_client_request(p, ["-tls1_3", "-servername", "a.test", "-sess_in", sess]) \
            if os.path.exists(sess) else "no session written"
        t.check("session_tickets: false: TLS 1.3 -sess_in is not Reused", "Reused" not in out2,
                "New", re.findall(r"^(?:New|Reused), .*", out2, re.M) or out2[-200:])
    finally:
        s.stop()


def write_tls_config(d, name, entries):
    """A config file d/name whose one listener has these certificate entries (text), the
    first on line 8."""
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write("admin: { listen: 127.0.0.1:0 }\nlisteners:\n  - name: web\n    listen: 127.0.0.1:0\n"
                "    protocol: http\n    tls:\n      certificates:\n%s%s" % (entries, ROUTES))
    return path


def test_config_errors_and_reload(t):
    d = h.new_tmpdir("cfg")
    bad_key = write_tls_config(d, "bad.yaml", "        - { cert: %s, key: %s }\n" % (CERTS["a"], CERTS["mismatch.key"]))
    r = h.run_cli(["check", "-c", bad_key])
    out = r.stdout + r.stderr
    m = re.search(r"^%s:(\d+):(\d+): (.*)$" % re.escape(bad_key), out, re.M)
    t.check("check: a key that does not match its certificate exits 1", r.returncode == 1, 1, (r.returncode, out))
    t.check("check: FILE:LINE:COL at the certificates entry, naming the key or cert file",
            m is not None and int(m.group(1)) == 8 and ("mismatch.key" in m.group(3) or "a.crt" in m.group(3)),
            "%s:8:COL: ... mismatch.key" % bad_key, out)

    unreadable = os.path.join(d, "unreadable.crt")
    with open(unreadable, "w") as f:
        f.write(open(CERTS["a"]).read())
    os.chmod(unreadable, 0)
    if os.getuid() == 0:   # root reads any mode: make it unreadable the other way
        os.remove(unreadable)
        os.mkdir(unreadable)
    cfg2 = write_tls_config(d, "unreadable.yaml",
                            "        - { cert: %s, key: %s }\n"
                            "        - { cert: unreadable.crt, key: %s, sni: [z.test] }\n"
                            % (CERTS["a"], CERTS["a.key"], CERTS["a.key"]))
    r = h.run_cli(["check", "-c", cfg2])
    out = r.stdout + r.stderr
    m = re.search(r"^%s:(\d+):(\d+): (.*)$" % re.escape(cfg2), out, re.M)
    t.check("check: an unreadable certificate exits 1", r.returncode == 1, 1, (r.returncode, out))
    t.check("check: FILE:LINE:COL at the entry, naming unreadable.crt",
            m is not None and int(m.group(1)) == 9 and "unreadable.crt" in m.group(3),
            "%s:9:COL: ... unreadable.crt" % cfg2, out)

    # A DER certificate (PEM is what `cert` takes): the reason, not OpenSSL's last wrapper
    # of it ("SSL routines::PEM lib", which every bad file gave)
    der = os.path.join(d, "a.der")
    openssl("x509", "-in", CERTS["a"], "-outform", "der", "-out", der)
    cfg5 = write_tls_config(d, "der.yaml", "        - { cert: a.der, key: %s }\n" % CERTS["a.key"])
    r = h.run_cli(["check", "-c", cfg5])
    out = r.stdout + r.stderr
    t.check("check: a DER certificate exits 1 at the entry, saying no PEM was found",
            r.returncode == 1 and re.search(r"^%s:8:\d+: .*a\.der.*no start line" % re.escape(cfg5), out, re.M),
            "%s:8:COL: cannot load certificate a.der ...: ...no start line" % cfg5, (r.returncode, out))

    # An IP address in a certificate's sni: no ClientHello names one (RFC 6066), as sni_routes says
    cfg4 = write_tls_config(d, "ipsni.yaml", "        - { cert: %s, key: %s, sni: [a.test, 127.0.0.1] }\n"
                            % (CERTS["a"], CERTS["a.key"]))
    r = h.run_cli(["check", "-c", cfg4])
    out = r.stdout + r.stderr
    t.check("check: an IP address in a certificate's sni exits 1 at it",
            r.returncode == 1 and re.search(r"^%s:8:\d+: .*127\.0\.0\.1.*IP address" % re.escape(cfg4), out, re.M),
            "%s:8:COL: sni '127.0.0.1': an IP address ..." % cfg4, (r.returncode, out))

    # A passphrase-protected key: OpenSSL's default is to prompt on the terminal, which
    # hung `sluice check`, a start from a shell, and a reload of such a gateway. Run with a
    # terminal of its own (a pty as the controlling tty), it must fail at once and say why.
    enc = os.path.join(d, "enc.key")
    openssl("pkey", "-in", CERTS["a.key"], "-aes256", "-passout", "pass:secret", "-out", enc)
    cfg3 = write_tls_config(d, "encrypted.yaml", "        - { cert: %s, key: enc.key }\n" % CERTS["a"])
    rc, out = run_on_a_tty([h.BIN, "check", "-c", cfg3])
    m = re.search(r"^%s:(\d+):(\d+): (.*)$" % re.escape(cfg3), out, re.M)
    t.check("check: an encrypted key exits 1 without asking for a passphrase",
            rc == 1 and "pass phrase" not in out.lower(), 1, (rc, out[-400:]))
    t.check("check: FILE:LINE:COL at the entry, saying enc.key is encrypted",
            m is not None and int(m.group(1)) == 8 and "enc.key" in m.group(3) and "encrypted" in m.group(3),
            "%s:8:COL: key enc.key is encrypted ..." % cfg3, out[-400:])

    # reload: broken certificate rejected, then a swap to a new certificate file
    certs_a = "        - { cert: %s, key: %s }\n" % (CERTS["a"], CERTS["a.key"])
    s = h.start_sluice(gw_config(certs=certs_a), suite=t, name="reload")
    p = s.port()
    try:
        gen = s.status()["generation"]
        ka = tls_client(p)
        ka.send(h.build_request("GET", "/before", host="a.test"))
        r0 = ka.read_response()
        t.check("keep-alive connection answered before the reloads", r0.status == 200, 200, r0.status)
        write(s.config_path, gw_config(certs="        - { cert: %s, key: %s }\n" % (CERTS["a"], CERTS["mismatch.key"])))
        code, js = post_reload(s)
        t.check("reload with a mismatched key: 422", code == 422 and js.get("ok") is False, 422, (code, js))
        t.check("the rejection names the certificate entry", "mismatch.key" in str(js.get("error")) or
                "a.crt" in str(js.get("error")), "error naming the file", js.get("error"))
        write(s.config_path, gw_config(certs="        - { cert: %s, key: %s }\n" % (CERTS["a"], enc)))
        code, js = post_reload(s)
        t.check("reload with an encrypted key: 422 saying so", code == 422 and "enc.key is encrypted" in str(js.get("error")),
                (422, "enc.key is encrypted"), (code, js))
        r = tls_request(p, path="/after-reject")
        t.check("old certificate keeps serving HTTPS after a rejected reload",
                r.status == 200 and served_pem(p, "a.test") == pem(CERTS["a"]) and s.status()["generation"] == gen,
                (200, "a.crt", gen), (r.status, cert_cn(served_pem(p, "a.test")), s.status()["generation"]))

        write(s.config_path, gw_config(certs="        - { cert: %s, key: %s }\n" % (CERTS["a2"], CERTS["a2.key"])))
        code, js = post_reload(s)
        t.check("reload to a new certificate file: 200", code == 200 and js.get("ok") is True, 200, (code, js))
        got = served_pem(p, "a.test")
        t.check("new connections get the new certificate", got == pem(CERTS["a2"]), "a2.crt",
                "old a.crt" if got == pem(CERTS["a"]) else got[:80])
        r = tls_request(p, path="/new")
        t.check("... and it verifies and answers", r.status == 200, 200, r.status)
        ka.send(h.build_request("GET", "/kept", host="a.test"))
        r1 = ka.read_response()
        t.check("the keep-alive connection from before the reload keeps working",
                r1.status == 200 and b"/kept" in r1.body, (200, "/kept"), (r1.status, r1.body[:120]))
        t.check("... still on the old certificate",
                ssl.DER_cert_to_PEM_cert(ka.sock.getpeercert(binary_form=True)) == pem(CERTS["a"]), "a.crt", "other")
        ka.close()
    finally:
        s.stop()


def proxy_config(targets, more_upstream="", workers=1, tls_extra=""):
    return """workers: %d
watch: false
admin: { listen: 127.0.0.1:0 }
listeners:
  - name: web
    listen: 127.0.0.1:0
    protocol: http
    tls:
      certificates:
        - { cert: %s, key: %s, sni: [a.test] }
%s
upstreams:
%s
routes:
%s  - { name: echo, match: { paths: [/] }, plugins: [ { name: echo } ] }
""" % (workers, CERTS["a"], CERTS["a.key"], tls_extra,
       "".join("  - name: %s\n    targets: [ { address: %s, tls: %s } ]\n%s" % (n, addr, tls, more_upstream)
               for n, addr, tls in targets),
       "".join("  - { name: r-%s, match: { paths: [/%s/] }, upstream: %s }\n" % (n, n, n)
               for n, _, _ in targets))


def test_upstream_tls(t):
    up = TLSUpstream(CERTS["up"], CERTS["up.key"])
    nosan = TLSUpstream(CERTS["a"], CERTS["a.key"])       # DNS:a.test only, no IP SAN
    ca, other = CERTS["ca"], CERTS["otherca"]
    targets = [
        ("sni", up.address, "{ verify: true, ca: %s, sni: up.test }" % ca),
        ("ip", up.address, "{ ca: %s }" % ca),
        ("nosan", nosan.address, "{ ca: %s }" % ca),
        ("wrongname", up.address, "{ ca: %s, sni: nope.test }" % ca),
        ("wrongca", up.address, "{ verify: true, ca: %s, sni: up.test }" % other),
        # `ca` with verify: false is refused at load ('ca' has no use): no CA at all here
        ("noverify", up.address, "{ verify: false, sni: up.test }"),
        ("dot", up.address, "{ ca: %s, sni: UP.test. }" % ca),    # an absolute name, upper-case
    ]
    s = h.start_sluice(proxy_config(targets, "    keepalive: { max_idle: 0 }\n"), suite=t, name="upstream")
    p = s.port()
    try:
        r1 = tls_request(p, path="/sni/one")
        t.check("HTTPS upstream, verified with the test CA: 200", r1.status == 200, 200, (r1.status, r1.body[:200]))
        t.check("the upstream saw the configured SNI up.test", r1.header("X-SNI") == "up.test", "up.test",
                r1.header("X-SNI"))
        t.check("first upstream connection is a full handshake", r1.header("X-Reused") == "0", "0",
                r1.header("X-Reused"))
        r2 = tls_request(p, path="/sni/two")
        t.check("a second upstream connection resumes the session (max_idle 0: a new connection)",
                r2.status == 200 and r2.header("X-Reused") == "1", (200, "1"), (r2.status, r2.header("X-Reused")))
        seen = up.paths("/sni/")
        t.check("the upstream logged both, resumed the second",
                [x[1] for x in seen] == [False, True], [False, True], seen)

        r = tls_request(p, path="/ip/x")
        t.check("no sni: the target's IP is verified against the IP SAN: 200",
                r.status == 200 and r.header("X-SNI") == "-", (200, "-"), (r.status, r.header("X-SNI")))
        r = tls_request(p, path="/nosan/x")
        t.check("no sni, a certificate without that IP SAN: 502", r.status == 502, 502, r.status)
        r = tls_request(p, path="/wrongname/x")
        t.check("sni that the certificate does not name: 502", r.status == 502, 502, r.status)
        r = tls_request(p, path="/wrongca/x")
        t.check("a wrong CA: 502", r.status == 502, 502, r.status)
        t.check("the wrong-CA request never reached the upstream", up.paths("/wrongca/") == [], [], up.paths("/wrongca/"))
        ok = h.wait_until(lambda: re.search(r"upstream TLS handshake: certificate verify failed: "
                                        r"unable to get local issuer certificate", s.log()) is not None, 5)
        t.check("the gateway log names the verification error", ok,
                "upstream TLS handshake: certificate verify failed: unable to get local issuer certificate",
                [ln for ln in s.log().splitlines() if "TLS" in ln][-5:])
        r = tls_request(p, path="/dot/x")
        t.check("sni: UP.test. (absolute, upper-case) is sent and verified as up.test, as curl does: 200",
                r.status == 200 and r.header("X-SNI") == "up.test", (200, "up.test"), (r.status, r.header("X-SNI")))
        r = tls_request(p, path="/noverify/x")
        t.check("verify: false (no CA that could verify it): 200", r.status == 200 and r.header("X-SNI") == "up.test",
                (200, "up.test"), (r.status, r.header("X-SNI")))

        # an upstream that closes without close_notify: like a FIN, as nginx and curl take
        # it: a body only the close delimits is whole; one with a length, cut short, is not
        n = 300000
        c = tls_client(p)
        c.send(h.build_request("GET", "/sni/closed?n=%d" % n, host="a.test"))
        hs = hashlib.sha256()
        try:
            r = c.read_response(timeout=30, sink=hs.update)
            got = (r.status, r.body_len, hs.hexdigest() == h.pattern_sha256(n))
        except Exception as e:  # noqa: BLE001
            got = repr(e)
        c.close()
        t.check("a close-delimited body from a TLS upstream that sends no close_notify arrives whole",
                got == (200, n, True), (200, n, True), got)
        c = tls_client(p)
        c.send(h.build_request("GET", "/sni/short?n=%d" % n, host="a.test"))
        try:
            r = c.read_response(timeout=30)
            got = (r.status, r.body_len)
        except Exception as e:  # noqa: BLE001
            got = "cut: " + type(e).__name__
        c.close()
        t.check("... a Content-Length body cut short the same way is still cut at the client",
                got != (200, n), "cut", got)
        ok = h.wait_until(lambda: "upstream failed mid-response" in s.log(), 5)
        t.check("... and logged as a failure mid-response", ok, "upstream failed mid-response",
                [ln for ln in s.log().splitlines() if "mid" in ln][-3:])
    finally:
        s.stop()

    # health probes over TLS keep the target healthy
    conf = proxy_config([("hc", up.address, "{ ca: %s, sni: up.test }" % ca)],
                        "    health: { active: { type: http, path: /health, interval: 200ms, timeout: 1s,\n"
                        "                        healthy_threshold: 1, unhealthy_threshold: 2 } }\n")
    up.handshake_errors = 0   # the refused handshakes above were counted there
    s = h.start_sluice(conf, suite=t, name="health")
    try:
        n0 = len(up.paths("/health"))
        got = h.wait_until(lambda: len(up.paths("/health")) >= n0 + 4, 10)
        probes = up.paths("/health")[n0:]
        t.check("HTTP health probes reach the TLS target over TLS", got and all(x[2] == "up.test" for x in probes),
                ">= 4 probes with SNI up.test", probes[:6])
        st = None
        for u in s.status()["upstreams"]:
            if u["name"] == "hc":
                st = u["targets"][0]
        t.check("/status: the TLS target is healthy after probing", st is not None and st.get("health") == "healthy",
                "healthy", st)
        t.check("the probes caused no failed handshakes at the upstream", up.handshake_errors == 0, 0,
                up.handshake_errors)
        r = tls_request(s.port(), path="/hc/x")
        t.check("traffic flows to the probed TLS target", r.status == 200, 200, r.status)
    finally:
        s.stop()
        up.stop()
        nosan.stop()


def test_upstream_client_cert(t):
    """tls.cert/key on a target: sluice offers a client certificate to an upstream that
    asks for one (real nginx, ssl_verify_client on); a reload takes a replaced pair."""
    make_leaf("gw", "gw.test", "DNS:gw.test", eku="clientAuth")
    make_leaf("gw2", "gw2.test", "DNS:gw2.test", eku="clientAuth")
    make_leaf("stranger", "stranger.test", "DNS:stranger.test", ca="otherca", eku="clientAuth")
    d = h.new_tmpdir("nginx-mtls")
    sk, port = h.refused_port()
    sk.close()
    nginx = h.start_nginx(d, "    server { listen 127.0.0.1:%d ssl; ssl_certificate %s; ssl_certificate_key %s;\n"
                             "             ssl_client_certificate %s; ssl_verify_client on;\n"
                             "             location / { return 200 \"dn=$ssl_client_s_dn\\n\"; } }\n"
                          % (port, CERTS["up"], CERTS["up.key"], CERTS["ca"]), [port])
    live_crt, live_key = os.path.join(d, "client.crt"), os.path.join(d, "client.key")
    shutil.copy(CERTS["gw"], live_crt)
    shutil.copy(CERTS["gw.key"], live_key)
    addr = "127.0.0.1:%d" % port
    ca = CERTS["ca"]
    targets = [("m", addr, "{ ca: %s, sni: up.test, cert: %s, key: %s }" % (ca, live_crt, live_key)),
               ("none", addr, "{ ca: %s, sni: up.test }" % ca),
               ("other", addr, "{ ca: %s, sni: up.test, cert: %s, key: %s }"
                % (ca, CERTS["stranger"], CERTS["stranger.key"]))]
    s = h.start_sluice(proxy_config(targets), suite=t, name="upstream-client-cert")
    try:
        r = tls_request(s.port(), path="/m/x")
        t.check("tls.cert/key: nginx (ssl_verify_client on) verifies the gateway's certificate: 200, CN=gw.test",
                r.status == 200 and b"CN=gw.test" in r.body, (200, "CN=gw.test"), (r.status, r.body[:200]))
        r = tls_request(s.port(), path="/none/x")
        t.check("no client certificate: nginx's own 400 (No required SSL certificate was sent) passes through",
                r.status == 400 and b"No required SSL certificate" in r.body, 400, (r.status, r.body[:200]))
        r = tls_request(s.port(), path="/other/x")
        t.check("a certificate of another CA: nginx refuses it (400)", r.status == 400, 400, (r.status, r.body[:120]))
        shutil.copy(CERTS["gw2"], live_crt + ".new")
        shutil.copy(CERTS["gw2.key"], live_key + ".new")
        os.rename(live_key + ".new", live_key)
        os.rename(live_crt + ".new", live_crt)
        code, ans = s.reload(new_content=False)
        changed = ans.get("changed", []) if isinstance(ans, dict) else []
        t.check("a reload after replacing the pair applies it (cert: files in changed)",
                code == 200 and any(c.startswith("cert:") and c.endswith("client.crt") for c in changed),
                "cert:.../client.crt", (code, ans))
        r = tls_request(s.port(), path="/m/y")
        t.check("... and the next connection offers the new certificate (CN=gw2.test)",
                r.status == 200 and b"CN=gw2.test" in r.body, (200, "CN=gw2.test"), (r.status, r.body[:200]))
    finally:
        s.stop()
        nginx.terminate()
        nginx.wait(10)
    cfg = os.path.join(d, "half.yaml")
    with open(cfg, "w") as f:
        f.write(proxy_config([("m", addr, "{ ca: %s, cert: %s }" % (ca, CERTS["gw"])),
                              ("k", addr, "{ ca: %s, cert: %s, key: %s }" % (ca, CERTS["gw"], CERTS["mismatch.key"]))]))
    r = h.run_cli(["check", "-c", cfg])
    t.check("cert without key is a config error at the target's tls, and a key that does not match is one too",
            r.returncode == 1 and "needs both 'cert' and 'key'" in r.stderr and "mismatch" in r.stderr,
            "two errors, exit 1", (r.returncode, r.stderr[-400:]))


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def client_hello():
    """A real ClientHello's bytes (from Python's ssl through a memory BIO)."""
    ctx = client_ctx()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="a.test")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def test_robustness(t):
    s = h.start_sluice(gw_config("      handshake_timeout: 1s\n"), workers=2, suite=t, name="robust")
    p = s.port()
    try:
        for i in range(20):  # warm both workers' pools
            tls_request(p, path="/warm")
        time.sleep(0.3)
        fd0, rss0 = fd_count(s.pid), s.rss_kb()
        hello = client_hello()
        t.check("a real ClientHello to cut in half", len(hello) > 100 and hello[0] == 0x16, ">100 bytes", len(hello))

        stop = threading.Event()
        served = {"ok": 0, "bad": []}

        def steady():
            while not stop.is_set():
                try:
                    r = tls_request(p, path="/steady", timeout=30)
                    if r.status == 200:
                        served["ok"] += 1
                    else:
                        served["bad"].append(r.status)
                except Exception as e:  # noqa: BLE001
                    served["bad"].append(repr(e))
                time.sleep(0.02)

        errors = []

        def garbage(k):
            rnd = random.Random(k)
            for i in range(k, 1000, 20):
                try:
                    c = socket.create_connection(("127.0.0.1", p), timeout=20)
                    if i % 2:
                        # a handshake record of junk; its message type is never ClientHello
                        # (1), whose random length could make the gateway wait for more
                        data = b"\x16\x03\x01\x00\x40" + bytes([rnd.choice(range(2, 256))])
                        data += rnd.randbytes(63)
                    else:
                        # no SSLv2 high bit and no major version 3: OpenSSL rejects the
                        # 5-byte header itself instead of waiting for the body it announces
                        data = bytes([rnd.choice([b for b in range(0x40) if not 0x14 <= b <= 0x18]),
                                      rnd.choice([b for b in range(256) if b != 3])])
                        data += rnd.randbytes(198)
                    c.sendall(data)
                    c.settimeout(20)
                    while c.recv(4096):
                        pass
                    c.close()
                except OSError as e:
                    if not isinstance(e, ConnectionResetError):
                        errors.append(repr(e))

        # 100 stalled handshakes (50 half ClientHellos, 50 silent), each watched by its own
        # thread: how long until the gateway closes it (handshake_timeout 1s; the default,
        # 10s, or a header timeout would be far slower)
        stalled = []

        def stall(k):
            try:
                c = socket.create_connection(("127.0.0.1", p), timeout=20)
            except OSError as e:
                stalled.append(("connect", repr(e)))
                return
            t0 = time.monotonic()
            try:
                if k % 2 == 0:
                    c.sendall(hello[:len(hello) // 2])
                c.settimeout(30)
                got = c.recv(1)
                stalled.append(("closed" if got == b"" else "data", time.monotonic() - t0))
            except ConnectionResetError:
                stalled.append(("closed", time.monotonic() - t0))
            except OSError as e:
                stalled.append(("error", repr(e)))
            finally:
                c.close()

        st = threading.Thread(target=steady, daemon=True)
        st.start()
        sts = [threading.Thread(target=stall, args=(k,), daemon=True) for k in range(100)]
        for th in sts:
            th.start()
        ths = [threading.Thread(target=garbage, args=(k,), daemon=True) for k in range(20)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(120)
        t.check("1,000 garbage connections were each closed by the gateway", not errors and
                not any(th.is_alive() for th in ths), "no errors", errors[:5])
        for th in sts:
            th.join(60)
        closed = [x[1] for x in stalled if x[0] == "closed"]
        t.check("100 stalled handshakes closed by handshake_timeout: 1s (each within 8 s)",
                len(closed) == 100 and max(closed) < 8.0, "100 closed, max < 8 s",
                (len(closed), max(closed) if closed else None, [x for x in stalled if x[0] != "closed"][:3]))
        time.sleep(0.5)
        stop.set()
        st.join(60)
        t.check("HTTPS kept answering during the attack", served["ok"] >= 5 and not served["bad"],
                ">= 5 ok, none bad", served)
        r = tls_request(p, path="/after")
        t.check("HTTPS answers afterwards", r.status == 200, 200, r.status)

        failed = metric(s, "sluice_tls_handshakes_total", listener="web", result="failed")
        timeout = metric(s, "sluice_tls_handshakes_total", listener="web", result="timeout")
        okc = metric(s, "sluice_tls_handshakes_total", listener="web", result="ok")
        t.check("sluice_tls_handshakes_total{result=failed} >= 1000", failed >= 1000, ">= 1000", failed)
        t.check("sluice_tls_handshakes_total{result=timeout} >= 100", timeout >= 100, ">= 100", timeout)
        t.check("sluice_tls_handshakes_total{result=ok} counts the good ones", okc >= 20 + served["ok"],
                ">= %d" % (20 + served["ok"]), okc)

        ok = h.wait_until(lambda: abs(fd_count(s.pid) - fd0) <= 2, 10)
        t.check("open FDs back to baseline (+-2)", ok, fd0, fd_count(s.pid))
        growth = (s.rss_kb() - rss0) / 1024.0
        t.info("handshakes ok=%d failed=%d timeout=%d; stalled closed after %.2f-%.2f s; HTTPS during: %d ok; "
               "fds %d -> %d; RSS %+.1f MiB" % (okc, failed, timeout, min(closed or [0]), max(closed or [0]),
                                                served["ok"], fd0, fd_count(s.pid), growth))
        if SLOW:
            # ASan keeps freed memory in quarantine: RSS says nothing there (LeakSanitizer
            # checks leaks at exit); the plain build asserts the bound
            t.info("sanitizer build: RSS bound not asserted")
        else:
            t.check("RSS growth < 8 MiB", growth < 8, "< 8 MiB", "%.1f MiB" % growth)

        # every method, not only the four OpenSSL itself names ("http request"), and an
        # HTTP/2 prior-knowledge preface: nginx answers them all
        for m in ("GET", "POST", "DELETE", "OPTIONS", "PATCH", "CONNECT", "PRI"):
            c = h.Client(p, timeout=10)
            if m == "PRI":
                c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            elif m == "CONNECT":
                c.send(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n")
            else:
                c.send(h.build_request(m, "/", host="a.test"))
            data, how = c.read_until_close(10)
            c.close()
            t.check("plain HTTP %s to the TLS port: a plaintext 400, then close" % m,
                    data.startswith(b"HTTP/1.1 400 ") and b"plain HTTP request sent to a TLS listener" in data
                    and how in ("eof", "reset"), "HTTP/1.1 400 ...", (data[:120], how))
    finally:
        s.stop()


def test_bulk(t):
    up = TLSUpstream(CERTS["up"], CERTS["up.key"])
    s = h.start_sluice(proxy_config([("up", up.address, "{ ca: %s, sni: up.test }" % CERTS["ca"])]),
                       suite=t, name="bulk")
    p = s.port()
    n = 20 << 20
    try:
        body = b"".join(h.pattern_blocks(n, seed=7))
        digest = hashlib.sha256(body).hexdigest()
        r = tls_request(p, "POST", "/up/upload", body=body, timeout=120)
        js = r.json() if r.status == 200 else {}
        t.check("20 MiB request body over client TLS and upstream TLS: sha256 at the upstream",
                js.get("body_len") == n and js.get("sha256") == digest, (n, digest[:16]),
                (r.status, js.get("body_len"), str(js.get("sha256"))[:16]))
        c = tls_client(p, timeout=120)
        c.send(h.build_request("GET", "/up/big?n=%d" % n, host="a.test"))
        hs = hashlib.sha256()
        r = c.read_response(timeout=120, sink=hs.update)
        c.close()
        t.check("20 MiB response body from a TLS upstream: sha256 at the client",
                r.status == 200 and r.body_len == n and hs.hexdigest() == h.pattern_sha256(n),
                (200, n), (r.status, r.body_len))

        c = tls_client(p, timeout=60)
        reqs = b"".join(h.build_request("GET", "/p%d" % i, host="a.test") for i in range(10))
        reqs += b"".join(h.build_request("GET", "/up/q%d" % i, host="a.test") for i in range(5))
        c.send(reqs)
        rs = c.read_responses(15, timeout=60)
        paths = [json.loads(r.body).get("path") for r in rs]
        want = ["/p%d" % i for i in range(10)] + ["/up/q%d" % i for i in range(5)]
        t.check("15 pipelined requests over TLS answered in order", paths == want, want, paths)
        c.close()
    finally:
        s.stop()
        up.stop()


t.run(setup, test_sni, test_rsa_and_ecdsa, test_versions_alpn_resumption, test_config_errors_and_reload, test_upstream_tls,
      test_upstream_client_cert,
      test_robustness, test_bulk)
