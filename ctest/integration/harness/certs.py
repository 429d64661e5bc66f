"""harness.certs — test certificates made by the openssl CLI (a CA and leaves it signs)."""

import os
import subprocess
import threading
import time


def openssl(*args, cwd=None):
    """Runs the openssl CLI; raises with its stderr when it fails."""
    r = subprocess.run(["openssl"] + list(args), capture_output=True, timeout=60, cwd=cwd,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), r.stderr.decode(errors="replace")))
    return r


def make_ca(d, name="ca"):
    """A test CA (EC P-256) made by the openssl CLI in folder d: (key path, cert path)."""
    key, crt = os.path.join(d, name + ".key"), os.path.join(d, name + ".crt")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", key)
    openssl("req", "-x509", "-new", "-key", key, "-out", crt, "-days", "30", "-subj", "/CN=" + name,
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return key, crt


def make_leaf(d, name, cn, san, ca="ca", rsa=False, curve="prime256v1", eku="serverAuth"):
    """A certificate signed by CA `ca` of folder d, with subjectAltName `san`
    ("DNS:a.test,IP:127.0.0.1"), its key EC on `curve` (rsa: RSA 2048), for `eku`
    (serverAuth; clientAuth for a client certificate): (cert path, key path)."""
    key, csr = os.path.join(d, name + ".key"), os.path.join(d, name + ".csr")
    crt, ext = os.path.join(d, name + ".crt"), os.path.join(d, name + ".ext")
    if rsa:
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", key)
    else:
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:" + curve, "-out", key)
    openssl("req", "-new", "-key", key, "-out", csr, "-subj", "/CN=" + cn)
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                "extendedKeyUsage=%s\n" % (san, eku))
    openssl("x509", "-req", "-in", csr, "-CA", os.path.join(d, ca + ".crt"), "-CAkey", os.path.join(d, ca + ".key"),
            "-CAcreateserial", "-out", crt, "-days", "30", "-extfile", ext)
    return crt, key


def s_client_request(port, args, wait=0.7, timeout=30, path="/", host="a.test", answer=True):
    """openssl s_client to 127.0.0.1:port with `args` that sends one GET and keeps its stdin
    open `wait` s (TLS 1.3 tickets arrive after the handshake) and, with `answer`, until the
    HTTP answer's head is in its output or s_client ended (up to timeout): s_client closes
    the connection when its stdin ends, and a fixed wait alone was short on a loaded
    machine. answer=False for a connection expected to get no answer. Its output as text."""
    p = subprocess.Popen(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port] + list(args),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = bytearray()

    def read():
        for chunk in iter(lambda: p.stdout.read1(65536), b""):
            out.extend(chunk)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        p.stdin.write(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, host)).encode())
        p.stdin.flush()
        deadline = time.monotonic() + timeout
        time.sleep(wait)

        def answered():
            at = out.find(b"HTTP/1.")
            return at >= 0 and b"\r\n\r\n" in out[at:]
        while answer and not answered() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        p.stdin.close()
        p.wait(max(1.0, deadline - time.monotonic()))
        reader.join(5)
        return bytes(out).decode(errors="replace")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
