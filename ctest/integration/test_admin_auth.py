"""Issue 12 item 4: the admin API asks for a token, refuses to be exposed without one, and
bounds how long and how large a request may be.

- No `admin.token_env`: every endpoint answers without credentials (as before).
- With `admin.token_env: VAR`: /metrics, /status, /reload (and any other path) answer 401
  with `WWW-Authenticate: Bearer` and a JSON body without the token or with a wrong one
  (shorter, longer, other scheme, two headers); 200 with `Authorization: Bearer TOKEN`;
  /health and /ready stay open.
- `sluice reload -c FILE` sends the token from the same variable; without the variable it
  fails with FILE:LINE:COL naming it, without contacting the server.
- `sluice check`: a non-loopback admin listen without token_env is an error at the
  listen value; token_env naming an unset variable is an error at token_env.
- POST /reload of a config that exposes the admin API without a token is rejected (422,
  the error names admin.token_env) and the old generation keeps serving.
- 20 admin connections that never finish their head are closed within 8 s (5 s timeout);
  a head larger than the admin buffer is answered 431 at once and the connection closed.
- Requests are read by the proxy's HTTP/1 parser (proto/http1.h): a malformed request
  line, a bad or doubled Content-Length, a body over the admin buffer and an HTTP/1.1
  request without Host are answered 400 with a JSON error; a chunked body is read; the
  admin API and the listener keep serving after each. A HEAD request gets the head alone.
- Paths are case-sensitive (/HEALTH is 404, and with a token it is not public); a known
  path asked with a method it does not take is 405 with `Allow` (POST /metrics, GET
  /reload, GET /cache, DELETE /status, POST /upstreams/NAME/targets); an unknown path 404.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("admin_auth", budget=90)

TOKEN = "s3cr3t-Admin_token.0123456789"
VAR = "SLUICE_TEST_ADMIN_TOKEN"


def config(admin_port, token_env=None, admin_host="127.0.0.1"):
    addr = "%s:%d" % (admin_host, admin_port)
    if addr.startswith("["):
        addr = '"%s"' % addr
    admin = "admin: { listen: %s%s }\n" % (
        addr, ", token_env: %s" % token_env if token_env else "")
    return ("workers: 1\nshutdown_timeout: 2s\n" + admin +
            "listeners:\n  - { name: web, listen: 127.0.0.1:0 }\n"
            "routes:\n  - { name: e, match: { paths: [/] }, plugins: [ { name: echo } ] }\n")


def env_with(token):
    env = dict(os.environ)
    env.pop(VAR, None)
    if token is not None:
        env[VAR] = token
    return env


def admin_req(s, method, path, auth=None, extra=None):
    hdrs = [("Host", "127.0.0.1")]
    if auth is not None:
        hdrs.append(("Authorization", auth))
    hdrs += extra or []
    return h.request(s.admin_port, method, path, headers=hdrs,
                     body=b"" if method == "POST" else None, timeout=10)


def cli(args, token):
    return subprocess.run([h.BIN] + args, capture_output=True, text=True, timeout=20,
                          stdin=subprocess.DEVNULL, env=env_with(token))


def test_status_global_chain(t):
    """/status lists the global chain (`plugins`) beside each route's own: it was in no
    route's list and nowhere else, though it runs first on every route."""
    cfg = config(0).replace("routes:", "plugins: [ { name: request-id } ]\nroutes:")
    s = h.start_sluice(cfg, suite=t, name="global", env=env_with(None))
    d = json.loads(admin_req(s, "GET", "/status").body)
    t.check("/status plugins: the global chain", d.get("plugins") == ["request-id"], ["request-id"],
            d.get("plugins"))
    t.check("and the route lists its own chain", [r["plugins"] for r in d["routes"]] == [["echo"]],
            [["echo"]], d["routes"])
    s.stop()


def test_no_token_is_open(t):
    s = h.start_sluice(config(0), suite=t, name="open", env=env_with(None))
    for method, path in (("GET", "/status"), ("GET", "/metrics"), ("POST", "/reload")):
        r = admin_req(s, method, path)
        t.check("no token configured: %s %s answers 200 without credentials" % (method, path),
                r.status == 200, 200, r.status)
    s.stop()


def test_token_required(t):
    port = h.free_port()
    s = h.start_sluice(config(port, VAR), suite=t, name="token", env=env_with(TOKEN))
    wrong = [
        ("no Authorization", None, []),
        ("wrong token", "Bearer nope", []),
        ("token prefix", "Bearer " + TOKEN[:-1], []),
        ("token plus a byte", "Bearer " + TOKEN + "x", []),
        ("empty bearer", "Bearer ", []),
        ("Basic scheme", "Basic " + TOKEN, []),
        ("token without scheme", TOKEN, []),
        ("two Authorization headers", "Bearer " + TOKEN, [("Authorization", "Bearer " + TOKEN)]),
    ]
    for method, path in (("GET", "/status"), ("GET", "/metrics"), ("POST", "/reload"),
                         ("GET", "/nowhere")):
        for label, auth, extra in wrong:
            r = admin_req(s, method, path, auth, extra)
            ok = (r.status == 401 and (r.header("WWW-Authenticate") or "").startswith("Bearer")
                  and TOKEN.encode() not in r.body)
            body_ok = False
            try:
                body_ok = "error" in r.json()
            except ValueError:
                pass
            t.check("token set: %s %s with %s -> 401, WWW-Authenticate: Bearer, JSON error"
                    % (method, path, label), ok and body_ok,
                    "401 + Bearer challenge + JSON", (r.status, r.header("WWW-Authenticate"), r.body[:120]))
    for method, path in (("GET", "/status"), ("GET", "/metrics"), ("POST", "/reload")):
        r = admin_req(s, method, path, "Bearer " + TOKEN)
        t.check("token set: %s %s with the token -> 200" % (method, path), r.status == 200, 200,
                (r.status, r.body[:200]))
    r = admin_req(s, "GET", "/status", "bearer  " + TOKEN)
    t.check("the scheme is case-insensitive", r.status == 200, 200, r.status)
    for path in ("/health", "/ready", "/health?probe=1"):
        r = admin_req(s, "GET", path)
        t.check("token set: GET %s stays open" % path, r.status == 200, 200, r.status)

    # sluice reload -c: the token comes from the same variable
    p = cli(["reload", "-c", s.config_path], TOKEN)
    t.check("sluice reload -c with %s set succeeds" % VAR,
            p.returncode == 0 and '"ok":true' in p.stdout, "exit 0, ok:true",
            (p.returncode, p.stdout[-300:], p.stderr[-300:]))
    p = cli(["reload", "-c", s.config_path], None)
    pos = re.search(re.escape(s.config_path) + r":\d+:\d+: .*%s.*not set" % VAR, p.stderr)
    t.check("sluice reload -c without %s exits 1 with FILE:LINE:COL naming it" % VAR,
            p.returncode == 1 and pos is not None, "exit 1, FILE:L:C ... %s ... not set" % VAR,
            (p.returncode, p.stderr[-300:]))
    p = cli(["reload", "-c", s.config_path], "another-token")
    t.check("sluice reload -c with a wrong token exits 1 saying the token was refused",
            p.returncode == 1 and "token" in p.stderr and "refused" in p.stderr,
            "exit 1, refused", (p.returncode, p.stdout[-200:], p.stderr[-300:]))
    s.stop()


def test_reload_adds_token(t):
    s = h.start_sluice(config(0), suite=t, name="addtoken", env=env_with(TOKEN))
    with open(s.config_path, "w") as f:
        f.write(config(0, VAR))
    code, ans = s.reload()
    t.check("a reload that adds token_env is applied", code == 200 and ans.get("ok"), 200, (code, ans))
    r = admin_req(s, "GET", "/status")
    t.check("... and from then on /status wants the token", r.status == 401, 401, r.status)
    r = admin_req(s, "GET", "/status", "Bearer " + TOKEN)
    t.check("... which it accepts", r.status == 200, 200, r.status)
    # a body line that looks like a header does not count as one
    c = h.Client(s.admin_port, timeout=5)
    line = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
    c.send(b"POST /reload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % len(line)
           + line)
    r = c.read_response("POST")
    c.close()
    t.check("an Authorization line in the body is not a header", r.status == 401, 401, r.status)
    s.stop()


def write_conf(text):
    d = h.new_tmpdir("admin_check")
    path = os.path.join(d, "sluice.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def test_check_non_loopback(t):
    path = write_conf(config(9, admin_host="0.0.0.0"))
    p = cli(["check", "-c", path], None)
    # line 3 is the admin line; the listen value starts after "admin: { listen: "
    want = "%s:3:18:" % path
    t.check("check: non-loopback admin without a token -> FILE:LINE:COL naming admin.token_env",
            p.returncode == 1 and want in p.stderr and "admin.token_env" in p.stderr,
            want + " ... admin.token_env", (p.returncode, p.stderr))
    path = write_conf(config(9, admin_host="[::]"))
    p = cli(["check", "-c", path], None)
    t.check("check: [::] without a token is refused too", p.returncode == 1 and "token_env" in p.stderr,
            "exit 1", (p.returncode, p.stderr))
    path = write_conf(config(9, VAR, admin_host="0.0.0.0"))
    p = cli(["check", "-c", path], TOKEN)
    t.check("check: non-loopback admin with token_env set and the variable present -> ok",
            p.returncode == 0, 0, (p.returncode, p.stderr))
    p = cli(["check", "-c", path], None)
    t.check("check: token_env naming an unset variable -> FILE:LINE:COL naming it",
            p.returncode == 1 and re.search(re.escape(path) + r":3:\d+: .*%s.*not set" % VAR, p.stderr),
            "FILE:3:C ... not set", (p.returncode, p.stderr))
    p = cli(["check", "-c", path], "")
    t.check("check: token_env naming an empty variable is an error",
            p.returncode == 1 and "empty" in p.stderr, "exit 1, empty", (p.returncode, p.stderr))
    for host in ("127.0.0.2", "[::1]"):
        path = write_conf(config(9, admin_host=host))
        p = cli(["check", "-c", path], None)
        t.check("check: loopback %s without a token -> ok" % host, p.returncode == 0, 0,
                (p.returncode, p.stderr))


def test_reload_rejects_exposed_admin(t):
    s = h.start_sluice(config(0), suite=t, name="expose", env=env_with(None))
    gen = s.status()["generation"]
    with open(s.config_path, "w") as f:
        f.write(config(h.free_port(), admin_host="0.0.0.0"))
    code, ans = s.reload()
    t.check("POST /reload of a non-loopback admin without token -> 422 naming admin.token_env "
            "at FILE:LINE:COL",
            code == 422 and re.search(re.escape(s.config_path) + r":3:\d+: .*admin\.token_env",
                                      ans.get("error", "")),
            "422, FILE:3:C ... admin.token_env", (code, ans))
    st = s.status()
    r = h.request(s.port(), "GET", "/")
    t.check("the old generation keeps serving", st["generation"] == gen and r.status == 200,
            (gen, 200), (st["generation"], r.status))
    s.stop()


def test_unfinished_requests_closed(t):
    s = h.start_sluice(config(0), suite=t, name="slow", env=env_with(None))
    socks = []
    for _ in range(20):
        c = socket.create_connection(("127.0.0.1", s.admin_port), timeout=3)
        c.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never the blank line
        socks.append(c)
    t0 = time.monotonic()
    r = h.request(s.admin_port, "GET", "/health", timeout=3)
    t.check("the admin API still answers while 20 heads are pending", r.status == 200, 200, r.status)
    closed_at = []
    for c in socks:
        c.settimeout(max(0.1, t0 + 10 - time.monotonic()))
        try:
            while c.recv(4096):
                pass
            closed_at.append(time.monotonic() - t0)
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed_at.append(time.monotonic() - t0)
        c.close()
    last = max(closed_at) if closed_at else None
    t.info("20 unfinished heads: %d closed, last after %s s" % (len(closed_at),
                                                                 "%.2f" % last if last else "-"))
    t.check("20 unfinished admin requests are all closed within 8 s",
            len(closed_at) == 20 and last <= 8.0, "20 closed, <= 8 s", (len(closed_at), last))
    t.check("... and not before the 5 s head timeout's lower bound (4 s)",
            bool(closed_at) and min(closed_at) >= 4.0, ">= 4 s", min(closed_at) if closed_at else None)

    c = h.Client(s.admin_port, timeout=5)
    t0 = time.monotonic()
    try:
        c.send(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    data, how = c.read_until_close(timeout=3)
    c.close()
    t.check("a head over the admin buffer is answered 431 at once, then closed",
            how == "eof" and data.startswith(b"HTTP/1.1 431 ") and b'"error"' in data
            and time.monotonic() - t0 < 3,
            "431, then EOF", (how, data[:80], time.monotonic() - t0))
    s.stop()


def raw_admin(s, data, half_close=False):
    """Sends raw bytes to the admin port; (status or None, body bytes, how it closed)."""
    c = h.Client(s.admin_port, timeout=5)
    try:
        c.send(data)
        if half_close:
            c.shutdown_write()
    except (BrokenPipeError, ConnectionResetError):
        pass
    got, how = c.read_until_close(timeout=4)
    c.close()
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", got)
    return (int(m.group(1)) if m else None), got.split(b"\r\n\r\n", 1)[-1], how


def test_malformed_requests(t):
    s = h.start_sluice(config(0), suite=t, name="malformed", env=env_with(None))
    big = b"{" + b" " * 9000 + b"}"
    cases = [
        ("a bad request line", b"GARBAGE\r\n\r\n", 400),
        ("a request line without a version", b"GET /status\r\nHost: a\r\n\r\n", 400),
        ("an HTTP/1.1 request without Host", b"GET /status HTTP/1.1\r\n\r\n", 400),
        ("a bare LF in the head", b"GET /status HTTP/1.1\nHost: a\n\n", 400),
        ("a Content-Length that is not a number",
         b"PUT /upstreams/u/targets HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n{}", 400),
        ("two Content-Lengths",
         b"PUT /upstreams/u/targets HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
        ("Content-Length and chunked",
         b"PUT /upstreams/u/targets HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("a bad chunk size",
         b"PUT /upstreams/u/targets HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        ("a body over the admin buffer",
         b"PUT /upstreams/u/targets HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(big) + big, 400),
        ("a chunked body over the admin buffer",
         b"PUT /upstreams/u/targets HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
         + b"%x\r\n" % len(big) + big + b"\r\n0\r\n\r\n", 400),
        ("a request line over the limit", b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414),
    ]
    for label, data, want in cases:
        for half in (False, True):
            st, body, how = raw_admin(s, data, half_close=half)
            err = ""
            try:
                err = json.loads(body).get("error", "")
            except ValueError:
                pass
            t.check("%s%s: %d with a JSON error, then closed" % (label, " (then a half-close)" if half else "", want),
                    st == want and len(err) > 3 and how == "eof", (want, "error", "eof"), (st, body[:100], how))
            r = h.request(s.admin_port, "GET", "/health", timeout=3)
            t.check("... the admin API still answers", r.status == 200, 200, r.status)
    r = h.request(s.port(), "GET", "/", timeout=3)
    t.check("the listener still serves after the malformed admin requests", r.status == 200, 200, r.status)

    # bodies the parser frames: Content-Length and chunked reach the registry whole
    reg = b'{"address": "127.0.0.1:9", "ttl": "2s"}'
    for label, data in (
            ("Content-Length", h.build_request("PUT", "/upstreams/nope/targets", body=reg)),
            ("chunked", h.build_request("PUT", "/upstreams/nope/targets", body=reg, chunked=True)),
            ("chunked in two pieces", b"PUT /upstreams/nope/targets HTTP/1.1\r\nHost: a\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n5\r\n" + reg[:5] + b"\r\n%x\r\n" % (len(reg) - 5)
             + reg[5:] + b"\r\n0\r\n\r\n")):
        st, body, how = raw_admin(s, data)
        t.check("a %s body is read whole: the registry answers 404 for an unknown upstream" % label,
                st == 404 and b"no upstream" in body, 404, (st, body[:120]))
    st, body, how = raw_admin(s, h.build_request("PUT", "/upstreams/nope/targets", body=b"address=1"))
    t.check("a body that is not JSON: 400 naming it", st == 400 and b"JSON object" in body, 400, (st, body[:120]))

    # HEAD (a load balancer's health check): GET's head, Content-Length included, no body
    for path in ("/health", "/ready", "/status", "/metrics"):
        st, body, how = raw_admin(s, b"HEAD %s HTTP/1.1\r\nHost: a\r\n\r\n" % path.encode())
        _, gbody, _ = raw_admin(s, b"GET %s HTTP/1.1\r\nHost: a\r\n\r\n" % path.encode())
        t.check("HEAD %s: 200 and no body after the head" % path, st == 200 and body == b"" and how == "eof"
                and len(gbody) > 0, (200, b"", "eof"), (st, body[:80], how))
    s.stop()


def test_paths_and_methods(t):
    s = h.start_sluice(config(0), suite=t, name="paths", env=env_with(None))
    for path in ("/HEALTH", "/Metrics", "/STATUS", "/Reload", "/nowhere"):
        for method in ("GET", "POST"):
            r = admin_req(s, method, path)
            t.check("%s %s (paths are case-sensitive) -> 404" % (method, path), r.status == 404, 404,
                    (r.status, r.body[:120]))
    for method, path, allow in (("POST", "/metrics", "GET, HEAD"), ("POST", "/health", "GET, HEAD"),
                                ("DELETE", "/status", "GET, HEAD"), ("GET", "/reload", "POST"),
                                ("HEAD", "/reload", "POST"), ("GET", "/cache", "DELETE"),
                                ("POST", "/upstreams/u/targets", "GET, HEAD, PUT"),
                                ("GET", "/upstreams/u/targets/127.0.0.1:1", "DELETE")):
        r = admin_req(s, method, path)
        t.check("%s %s -> 405 with Allow: %s" % (method, path, allow),
                r.status == 405 and r.header("Allow") == allow, (405, allow), (r.status, r.header("Allow")))
    s.stop()
    s = h.start_sluice(config(h.free_port(), VAR), suite=t, name="paths-token", env=env_with(TOKEN))
    r = admin_req(s, "GET", "/HEALTH")
    t.check("token set: GET /HEALTH is not the public /health -> 401", r.status == 401, 401, r.status)
    s.stop()


t.run(test_status_global_chain, test_no_token_is_open, test_token_required, test_reload_adds_token, test_check_non_loopback,
      test_reload_rejects_exposed_admin, test_unfinished_requests_closed, test_malformed_requests,
      test_paths_and_methods)
