"""mTLS: a listener's tls.client_auth, sluice.tls.get_client_cert and the mtls-auth plugin,
with curl and the openssl CLI as clients.

Certificates are made here: a server CA and leaf (a.test, b.test), a client CA run as an
`openssl ca` (index, serial, CRL) signing alice (subject CN=alice,O=Example, SANs URI and
email), bob (SAN DNS:bob.example.org), carol (known to no consumer), an expired client
(-startdate/-enddate in the past) and a revoked one (openssl ca -revoke, -gencrl), and a
second client CA signing mallory.

  1. required: alice gets through; no certificate, mallory (another CA), the expired and
     the revoked certificate fail the handshake (curl gets no HTTP answer) and count as
     failed handshakes; a listener whose second certificate SNI selects asks the same.
  2. get_client_cert (a test plugin answering with it): subject, issuer, serial, sha256
     fingerprint, SANs and validity as openssl prints them, verified; nil on a plain
     listener.
  3. mtls-auth: alice (by subject) reaches the upstream as consumer alice with
     X-Client-Cert-Subject set by sluice (the client's own copies gone); bob (by SAN) is
     stopped by acl (not in the group); carol (verified, no consumer) 401; a certificate
     whose DNS SAN hides a NUL ("bob.example.org\0.evil.example", made with
     python3-cryptography) does not pass for bob.
  4. optional: no certificate reaches the plugin as nil and mtls-auth answers 401; another
     CA's, the expired and the revoked certificates complete the handshake, get_client_cert
     reports verified false with OpenSSL's reason, and mtls-auth answers 401.
  5. HTTP/2 (ALPN h2 on the same listener): alice 200 through mtls-auth, optional without a
     certificate 401.
  6. Reload: a CRL revoking alice, POST /reload (the config text unchanged: the CRL file's
     content counts as a change): a keep-alive connection from before keeps
     working, a new connection with alice fails its handshake, and a TLS 1.3 session
     saved before the reload is not resumed past the new CRL.
  6b. With watch: true, replacing the CRL file alone (revoking bob) reloads: bob's next
     handshake fails.
  7. sluice check: mtls-auth with no client_auth listener, an unreadable CA file, a
     credential without subject or san are errors at their line.
"""

import json
import os
import re
import ssl
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("mtls", budget=240)

DIR = None
C = {}  # name -> path


# ---------------------------------------------------------------- certificates

CA_CNF = """\
[ ca ]
default_ca = client_ca
[ client_ca ]
dir = %(dir)s
database = $dir/index.txt
new_certs_dir = $dir/newcerts
certificate = $dir/clientca.crt
private_key = $dir/clientca.key
serial = $dir/serial
crlnumber = $dir/crlnumber
default_md = sha256
default_days = 30
default_crl_days = 30
policy = policy_any
unique_subject = no
[ policy_any ]
commonName = supplied
organizationName = optional
"""


def client_cert(name, subj, san, start=None, end=None):
    """A client certificate from the `openssl ca` of DIR (the client CA)."""
    key, csr = os.path.join(DIR, name + ".key"), os.path.join(DIR, name + ".csr")
    crt, ext = os.path.join(DIR, name + ".crt"), os.path.join(DIR, name + ".ext")
    h.openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", key)
    h.openssl("req", "-new", "-key", key, "-out", csr, "-subj", subj)
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n")
        if san:
            f.write("subjectAltName=%s\n" % san)
    args = ["ca", "-batch", "-config", C["ca.cnf"], "-in", csr, "-out", crt, "-extfile", ext,
            "-preserveDN", "-notext"]
    if start:
        args += ["-startdate", start, "-enddate", end]
    h.openssl(*args)
    C[name], C[name + ".key"] = crt, key


# python3-cryptography imports only under /usr/bin/python3. A client certificate whose DNS
# SAN hides a NUL ("bob.example.org\0.evil.example"): the openssl CLI cannot write one.
NUL_SAN = r"""
import datetime, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
d = sys.argv[1]
ca_key = serialization.load_pem_private_key(open(d + "/clientca.key", "rb").read(), None)
ca = x509.load_pem_x509_certificate(open(d + "/clientca.crt", "rb").read())
key = ec.generate_private_key(ec.SECP256R1())
now = datetime.datetime.utcnow()
cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nul")]))
        .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("bob.example.org\x00.evil.example"),
                                                    x509.DNSName("ok.example")]), critical=False)
        .sign(ca_key, hashes.SHA256()))
open(d + "/nul.crt", "wb").write(cert.public_bytes(serialization.Encoding.PEM))
open(d + "/nul.key", "wb").write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
"""


def gencrl(out):
    h.openssl("ca", "-config", C["ca.cnf"], "-gencrl", "-out", out)


def setup():
    global DIR
    DIR = h.new_tmpdir("mtls")
    h.make_ca(DIR, "srvca")
    C["srvca"] = os.path.join(DIR, "srvca.crt")
    C["srv"], C["srv.key"] = h.make_leaf(DIR, "srv", "a.test", "DNS:a.test,DNS:localhost,IP:127.0.0.1", "srvca")
    C["srvb"], C["srvb.key"] = h.make_leaf(DIR, "srvb", "b.test", "DNS:b.test", "srvca")
    h.make_ca(DIR, "clientca")
    C["clientca"] = os.path.join(DIR, "clientca.crt")
    os.makedirs(os.path.join(DIR, "newcerts"))
    open(os.path.join(DIR, "index.txt"), "w").close()
    with open(os.path.join(DIR, "serial"), "w") as f:
        f.write("1000\n")
    with open(os.path.join(DIR, "crlnumber"), "w") as f:
        f.write("01\n")
    C["ca.cnf"] = os.path.join(DIR, "ca.cnf")
    with open(C["ca.cnf"], "w") as f:
        f.write(CA_CNF % {"dir": DIR})
    client_cert("alice", "/O=Example/CN=alice", "URI:spiffe://example.org/alice,email:alice@example.org")
    client_cert("bob", "/CN=bob", "DNS:bob.example.org")
    client_cert("carol", "/CN=carol", None)
    client_cert("expired", "/CN=expired", None, start="20200101000000Z", end="20200201000000Z")
    client_cert("revoked", "/CN=revoked", None)
    h.openssl("ca", "-config", C["ca.cnf"], "-revoke", C["revoked"])
    C["crl"] = os.path.join(DIR, "client.crl")
    gencrl(C["crl"])
    r = subprocess.run(["/usr/bin/python3", "-c", NUL_SAN, DIR], capture_output=True, text=True, timeout=60)
    if r.returncode == 0:
        C["nul"], C["nul.key"] = os.path.join(DIR, "nul.crt"), os.path.join(DIR, "nul.key")
    else:
        print("note: no NUL-SAN certificate (python3-cryptography): %s" % r.stderr[-200:], flush=True)
    h.make_ca(DIR, "otherca")
    C["mallory"], C["mallory.key"] = h.make_leaf(DIR, "mallory", "alice", "DNS:alice", "otherca")


# ---------------------------------------------------------------- the gateway

# A plugin answering with what sluice.tls.get_client_cert returned.
CERTINFO = """\
local sluice = require("sluice")
return {
    name = "certinfo",
    version = "1.0",
    schema = {},
    access = function()
        local c = sluice.tls.get_client_cert()
        return sluice.response.exit(200, { cert = c or false })
    end,
}
"""

CONF = """\
workers: 1
watch: false
shutdown_timeout: 2s
admin: { listen: 127.0.0.1:0 }
plugin_paths: [ %(dir)s/plugins ]
listeners:
  - name: req
    listen: 127.0.0.1:0
    tls:
      certificates:
        - { cert: %(srv)s, key: %(srv_key)s }
        - { cert: %(srvb)s, key: %(srvb_key)s, sni: [b.test] }
      client_auth: { ca: %(clientca)s, crl: %(crl)s }
  - name: opt
    listen: 127.0.0.1:0
    tls:
      certificates: [ { cert: %(srv)s, key: %(srv_key)s } ]
      client_auth: { ca: %(clientca)s, crl: %(crl)s, mode: optional, depth: 2 }
  - name: plain
    listen: 127.0.0.1:0
consumers:
  - { name: alice, groups: [staff], credentials: { mtls-auth: { subject: "CN=alice,O=Example" } } }
  - { name: bob, groups: [guests], credentials: { mtls-auth: { san: bob.example.org } } }
upstreams: [ { name: up, targets: [ { address: %(up)s } ] } ]
routes:
  - name: who
    match: { paths: [/who] }
    plugins: [ { name: certinfo } ]
  - name: api
    match: { paths: [/api] }
    upstream: up
    plugins:
      - { name: mtls-auth }
      - { name: acl, config: { allow: [staff] } }
"""


def conf_text(up):
    return CONF % {"dir": DIR, "srv": C["srv"], "srv_key": C["srv.key"], "srvb": C["srvb"],
                   "srvb_key": C["srvb.key"], "clientca": C["clientca"], "crl": C["crl"], "up": up.address}


def handler(req):
    return h.Response(200, json.dumps(req.summary()).encode(), [("Content-Type", "application/json")])


def curl(port, path, who=None, host="localhost", http2=False, headers=(), extra=()):
    """(http status as text, body, http version): "000" when no HTTP answer came."""
    args = ["curl", "-sS", "--max-time", "10", "--cacert", C["srvca"], "-o", "-",
            "-w", "\n%{http_code} %{http_version}", "--resolve", "%s:%d:127.0.0.1" % (host, port)]
    args += ["--http2"] if http2 else ["--http1.1"]
    if who:
        args += ["--cert", C[who], "--key", C[who + ".key"]]
    for hd in headers:
        args += ["-H", hd]
    args += list(extra) + ["https://%s:%d%s" % (host, port, path)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    body, _, tail = p.stdout.rpartition("\n")
    code, _, ver = tail.partition(" ")
    return code, body, ver, p.stderr.strip()


def cert_of(port, path="/who", who=None):
    code, body, _, err = curl(port, path, who)
    try:
        return code, json.loads(body)["cert"]
    except (ValueError, KeyError, TypeError):
        return code, ("no json", body, err)


def openssl_field(who, *opt):
    return h.openssl("x509", "-in", C[who], "-noout", *opt).stdout.decode().strip()


def failed_handshakes(s, listener):
    _, samples = s.metrics()
    return sum(h.metric_values(samples, "sluice_tls_handshakes_total", listener=listener, result="failed"))


def start(t):
    up = h.MockUpstream(handler, name="up")
    os.makedirs(os.path.join(DIR, "plugins"), exist_ok=True)
    with open(os.path.join(DIR, "plugins", "certinfo.lua"), "w") as f:
        f.write(CERTINFO)
    s = h.start_sluice(conf_text(up), suite=t, name="mtls", env=dict(os.environ, SLUICE_LOG_LEVEL="debug"))
    return s, up


# ---------------------------------------------------------------- tests

def test_required(t, s):
    p = s.port("req")
    code, body, _, _ = curl(p, "/api", "alice")
    t.check("required: alice's certificate gets through", code == "200", "200", (code, body[:200]))
    before = failed_handshakes(s, "req")
    for who, what in ((None, "no certificate"), ("mallory", "a certificate from another CA"),
                      ("expired", "an expired certificate"), ("revoked", "a revoked certificate (CRL)")):
        code, body, _, err = curl(p, "/who", who)
        t.check("required: %s fails the handshake (no HTTP answer)" % what, code == "000", "000",
                (code, body[:200], err[:200]))
    deadline = time.monotonic() + 3
    while failed_handshakes(s, "req") - before < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    got = failed_handshakes(s, "req") - before
    t.check("... each counted in sluice_tls_handshakes_total{result=\"failed\"}", got >= 4, ">= 4", got)
    reasons = ("peer did not return a certificate", "client certificate verify failed: certificate has expired",
               "client certificate verify failed: certificate revoked")
    # a failed handshake is counted, then its line is written: polled like the count
    h.wait_until(lambda: all(w in s.log() for w in reasons))
    log = s.log()
    why = [w for w in reasons if w not in log]
    t.check("... with the reason in the debug log", not why, "every reason", why)
    # the second certificate, chosen by SNI, asks for the client certificate the same way
    code, body, _, _ = curl(p, "/who", "alice", host="b.test")
    c = json.loads(body)["cert"] if code == "200" else None
    t.check("SNI b.test: alice is verified there too", bool(c) and c["verified"] is True, True, (code, body[:200]))
    code, _, _, _ = curl(p, "/who", None, host="b.test")
    t.check("SNI b.test: no certificate fails the handshake", code == "000", "000", code)


def test_cert_fields(t, s):
    code, c = cert_of(s.port("req"), who="alice")
    if code != "200" or not isinstance(c, dict):
        t.check("get_client_cert answers", False, "200 and a table", (code, c))
        return
    t.check("subject in RFC 2253 form", c["subject"] == "CN=alice,O=Example", "CN=alice,O=Example", c["subject"])
    t.check("issuer", c["issuer"] == "CN=clientca", "CN=clientca", c["issuer"])
    serial = openssl_field("alice", "-serial").split("=", 1)[1]
    t.check("serial (upper-case hex, as openssl prints it)", c["serial"] == serial, serial, c["serial"])
    fp = openssl_field("alice", "-fingerprint", "-sha256").split("=", 1)[1].replace(":", "").lower()
    t.check("sha256 fingerprint", c["fingerprint"] == fp, fp, c["fingerprint"])
    t.check("SANs by kind", c["sans"].get("uri") == ["spiffe://example.org/alice"] and
            c["sans"].get("email") == ["alice@example.org"], "uri and email", c["sans"])
    end = openssl_field("alice", "-enddate").split("=", 1)[1]
    want = int(time.mktime(time.strptime(end, "%b %d %H:%M:%S %Y GMT"))) - time.timezone
    t.check("not_after (Unix seconds)", c["not_after"] == want, want, c["not_after"])
    t.check("not_before is before now", 0 < c["not_before"] <= time.time() + 5, "<= now", c["not_before"])
    t.check("verified, no verify_error", c["verified"] is True and "verify_error" not in c, True, c)
    r = h.request(s.port("plain"), "GET", "/who")
    t.check("a plain listener: get_client_cert is nil", r.status == 200 and json.loads(r.body)["cert"] is False,
            False, r.body[:200])


def test_mtls_auth(t, s, up):
    p = s.port("req")
    code, body, _, _ = curl(p, "/api", "alice", headers=["X-Client-Cert-Subject: CN=root", "X-Consumer: root"])
    seen = json.loads(body) if code == "200" else {}
    hs = [tuple(x) for x in seen.get("headers", [])]
    subj = [v for k, v in hs if k.lower() == "x-client-cert-subject"]
    t.check("alice (by subject) reaches the upstream", code == "200", "200", (code, body[:200]))
    t.check("... with X-Client-Cert-Subject from the certificate only (the client's copy gone)",
            subj == ["CN=alice,O=Example"], ["CN=alice,O=Example"], subj)
    t.check("... as consumer alice (X-Consumer)", h.hget(hs, "X-Consumer") == "alice", "alice", h.hget(hs, "X-Consumer"))
    code, body, _, _ = curl(p, "/api", "bob")
    t.check("bob (by SAN DNS) is a consumer, and acl after mtls-auth refuses his group: 403",
            code == "403", "403", (code, body[:200]))
    code, body, _, _ = curl(p, "/api", "carol")
    t.check("carol (verified, named by no consumer): 401", code == "401", "401", (code, body[:200]))
    if "nul" in C:
        code, c = cert_of(p, who="nul")
        dns = c.get("sans", {}).get("dns") if isinstance(c, dict) else None
        t.check("a DNS SAN hiding a NUL byte is left out of get_client_cert's SANs", dns == ["ok.example"],
                ["ok.example"], (code, c))
        code, body, _, _ = curl(p, "/api", "nul")
        t.check("... so it cannot pass for bob's SAN (bob.example.org\\0.evil.example): 401", code == "401",
                "401", (code, body[:200]))
    r = h.request(s.port("plain"), "GET", "/api", headers=[("X-Client-Cert-Subject", "CN=alice,O=Example")])
    t.check("plain listener with a forged X-Client-Cert-Subject: 401", r.status == 401, 401, r.status)


def test_optional(t, s):
    p = s.port("opt")
    code, c = cert_of(p)
    t.check("optional, no certificate: the handshake succeeds and the plugin gets nil",
            code == "200" and c is False, ("200", False), (code, c))
    code, body, _, _ = curl(p, "/api")
    t.check("optional, no certificate: mtls-auth answers 401", code == "401", "401", (code, body[:200]))
    for who, reason in (("mallory", "unable to verify the first certificate"),
                        ("expired", "certificate has expired"), ("revoked", "certificate revoked")):
        code, c = cert_of(p, who=who)
        ok = code == "200" and isinstance(c, dict) and c["verified"] is False and c.get("verify_error") == reason
        t.check("optional, %s: handshake done, verified false, verify_error '%s'" % (who, reason), ok,
                reason, (code, c))
        code, body, _, _ = curl(p, "/api", who)
        t.check("optional, %s: mtls-auth answers 401" % who, code == "401", "401", (code, body[:200]))
    code, body, _, _ = curl(p, "/api", "alice")
    t.check("optional, alice: 200", code == "200", "200", (code, body[:200]))


def test_http2(t, s):
    code, body, ver, _ = curl(s.port("req"), "/api", "alice", http2=True)
    t.check("HTTP/2 (ALPN h2) with alice's certificate through mtls-auth: 200",
            (code, ver) == ("200", "2"), ("200", "2"), (code, ver, body[:200]))
    code, body, ver, _ = curl(s.port("opt"), "/api", None, http2=True)
    t.check("HTTP/2 on the optional listener without a certificate: 401", (code, ver) == ("401", "2"),
            ("401", "2"), (code, ver))
    code, body, ver, _ = curl(s.port("req"), "/who", "alice", http2=True)
    c = json.loads(body)["cert"] if code == "200" else None
    t.check("HTTP/2: get_client_cert sees the connection's certificate",
            bool(c) and c["subject"] == "CN=alice,O=Example", "CN=alice,O=Example", (code, body[:200]))


def alice_ctx():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(C["srvca"])
    ctx.load_cert_chain(C["alice"], C["alice.key"])
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def keepalive_get(c, path):
    c.send(h.build_request("GET", path, None, None, host="a.test"))
    return c.read_response("GET", timeout=10)


def s_client_session(port, sess_args, answer=True):
    """openssl s_client with alice's certificate over TLS 1.3, one request; its output."""
    return h.s_client_request(port, ["-servername", "a.test", "-CAfile", C["srvca"], "-cert", C["alice"],
                                     "-key", C["alice.key"], "-tls1_3"] + sess_args, path="/who", answer=answer)


def test_reload(t, s):
    p = s.port("req")
    sess = os.path.join(DIR, "alice.sess")
    out = s_client_session(p, ["-sess_out", sess])
    t.check("before the reload: a TLS 1.3 session with alice's certificate is saved",
            os.path.exists(sess) and "200 OK" in out, "a session file", out[-300:])
    out = s_client_session(p, ["-sess_in", sess])
    t.check("... and resumed before the reload (Reused)", "Reused" in out and "200 OK" in out, "Reused",
            out[-300:])
    old = h.Client(p, timeout=10, connect_timeout=10.0)
    old.sock = alice_ctx().wrap_socket(old.sock, server_hostname="a.test")
    old.sock.settimeout(10)
    r = keepalive_get(old, "/api")
    t.check("a keep-alive connection with alice: 200", r.status == 200, 200, r.status)
    # a new CRL revoking alice too, and a reload
    h.openssl("ca", "-config", C["ca.cnf"], "-revoke", C["alice"])
    gencrl(C["crl"])
    st, ans = s.reload(new_content=False)
    t.check("POST /reload after replacing the CRL file (the config text unchanged): a new generation",
            st == 200 and ans.get("ok") and not ans.get("unchanged") and ans.get("generation") == 2,
            "generation 2", (st, ans))
    time.sleep(0.3)
    r = keepalive_get(old, "/api")
    t.check("the connection from before the reload keeps working", r.status == 200, 200, r.status)
    old.close()
    code, body, _, err = curl(p, "/api", "alice")
    t.check("a new connection with alice's (now revoked) certificate fails its handshake", code == "000",
            "000", (code, err[:200]))
    out = s_client_session(p, ["-sess_in", sess], answer=False)
    t.check("the session saved before the reload is not resumed past the new CRL",
            "Reused" not in out and "200 OK" not in out, "no resumption, no answer", out[-400:])
    code, c = cert_of(s.port("opt"), who="alice")
    t.check("optional listener after the reload: alice's certificate reads revoked",
            code == "200" and isinstance(c, dict) and c.get("verify_error") == "certificate revoked",
            "certificate revoked", (code, c))


def test_watch(t, up):
    """watch: true, and only the CRL file replaced: the watcher reloads by itself."""
    s = h.start_sluice(conf_text(up).replace("watch: false", "watch: true"), suite=t, name="mtls-watch")
    try:
        p = s.port("req")
        code, _, _, err = curl(p, "/who", "bob")
        t.check("watch: true: bob's certificate passes the handshake", code == "200", "200", (code, err[:200]))
        gen = s.status()["generation"]
        h.openssl("ca", "-config", C["ca.cnf"], "-revoke", C["bob"])
        gencrl(C["crl"])
        ok = h.wait_until(lambda: curl(p, "/who", "bob")[0] == "000", 10)
        st = s.status()
        t.check("a CRL revoking bob, no reload asked for: a new generation refuses bob's handshake",
                ok and st["generation"] > gen, ("000", "generation > %d" % gen),
                (curl(p, "/who", "bob")[0], st["generation"]))
    finally:
        s.stop()


def check_conf(text):
    d = h.new_tmpdir("mtlscheck")
    path = os.path.join(d, "sluice.yaml")
    with open(path, "w") as f:
        f.write(text)
    r = h.run_cli(["check", "-c", path])
    return r.returncode, r.stdout + r.stderr


def test_check(t):
    base = """\
listeners:
  - name: web
    listen: 127.0.0.1:0
%s
upstreams: [ { name: up, targets: [ { address: 127.0.0.1:9 } ] } ]
routes:
  - name: api
    match: { paths: [/api] }
    upstream: up
    plugins: [ { name: mtls-auth } ]
"""
    rc, out = check_conf(base % "")
    t.check("check: mtls-auth with no listener asking for client certificates is an error at the plugin",
            rc == 1 and re.search(r":10:\d+: route 'api', plugin 'mtls-auth': no http listener has tls.client_auth", out),
            "exit 1, line 10", (rc, out[-300:]))
    tls = """    tls:
      certificates: [ { cert: %s, key: %s } ]
      client_auth: { ca: %s }""" % (C["srv"], C["srv.key"], "/nonexistent/ca.pem")
    rc, out = check_conf(base % tls)
    t.check("check: an unreadable CA file is an error at client_auth",
            rc == 1 and re.search(r":6:\d+: client_auth: cannot read CA file /nonexistent/ca.pem", out),
            "exit 1, line 6", (rc, out[-300:]))
    tls = """    tls:
      certificates: [ { cert: %s, key: %s } ]
      client_auth: { ca: %s, mode: sometimes }
consumers:
  - { name: x, credentials: { mtls-auth: { issuer: CN=x } } }""" % (C["srv"], C["srv.key"], C["clientca"])
    rc, out = check_conf(base % tls)
    t.check("check: a bad mode and an mtls-auth credential without subject or san are errors",
            rc == 1 and "mode 'sometimes' is not one of required, optional" in out and "need 'subject' or 'san'" in out,
            "both errors", (rc, out[-400:]))
    tls = """    tls:
      certificates: [ { cert: %s, key: %s } ]
      client_auth: { ca: %s }""" % (C["srv"], C["srv.key"], C["clientca"])
    rc, out = check_conf(base % tls)
    t.check("check: the same config with client_auth is fine", rc == 0, 0, (rc, out[-300:]))
    rc, out = check_conf((base % tls).replace("plugins: [ { name: mtls-auth } ]",
                                              "plugins: [ { name: acl, config: { allow: [a] } }, { name: mtls-auth } ]"))
    t.check("check: acl listed before mtls-auth is refused (mtls-auth is an auth plugin)",
            rc == 1 and "must come after 'mtls-auth'" in out, "must come after 'mtls-auth'", (rc, out[-300:]))


def main(t):
    setup()
    test_check(t)
    s, up = start(t)
    try:
        test_required(t, s)
        test_cert_fields(t, s)
        test_mtls_auth(t, s, up)
        test_optional(t, s)
        test_http2(t, s)
        test_reload(t, s)
        test_watch(t, up)
    finally:
        s.stop()
        up.stop()


t.run(main)
