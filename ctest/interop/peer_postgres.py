"""PostgreSQL as the origin, its own client tools (pgbench, psql) as the clients, through
sluice's L4 path (tcp listeners, splice auto and off): the wire protocol's bulk, its
many-small-messages load, its out-of-band cancel (a second connection carrying the
CancelRequest) and a session that outlives a reload."""

import os
import re
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop as io  # noqa: E402

# COPY rows: "<i>\t<md5(i)><60 x>", 100 bytes on average: 520,000 of them are about 52 MB
COPY_ROWS = 520000
COPY_SQL = ("COPY (SELECT i, md5(i::text) || repeat('x', 60) FROM generate_series(1, %d) i) TO STDOUT"
            % COPY_ROWS)


def start(t, splice=("auto",)):
    """A throwaway cluster and sluice in front of it (io.tcp_gateway): (sluice, env, pg port)."""
    _, p, env = io.postgres(t)
    return io.tcp_gateway(t, p, splice), env, p


def via(env, port):
    """The client tools' environment, pointed at `port` (sluice's listener)."""
    return dict(env, PGPORT=str(port))


def pgbench(t, env, what, seconds):
    """One pgbench -c 16 -j 2 -T seconds run; checks it had no failed transaction and no
    aborted client; returns its TPS (0.0 when it did not report one)."""
    r = io.run(["pgbench", "-n", "-c", "16", "-j", "2", "-T", str(seconds)], env=env, timeout=seconds + 60,
               text=True)
    out = r.stdout + r.stderr
    done = re.search(r"number of transactions actually processed: (\d+)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    t.check("pgbench %s: exit 0, no aborted client, no error line" % what,
            r.returncode == 0 and not re.search("aborted|error", out, re.I), "exit 0, clean", out[-600:])
    t.check("pgbench %s: number of failed transactions: 0" % what, failed and failed.group(1) == "0",
            "0", failed.group(0) if failed else out[-400:])
    t.check("pgbench %s: transactions processed (> 0) and a TPS figure" % what,
            done and int(done.group(1)) > 0 and tps, "> 0", done.group(0) if done else out[-400:])
    return float(tps.group(1)) if tps else 0.0


def pgbench_case(t, splice):
    s, env, _ = start(t, (splice,))
    port = s.port(splice)
    r = io.run(["pgbench", "-i", "-s", "5", "-q"], env=via(env, port), timeout=120, text=True)
    t.check("pgbench -i -s 5 through sluice (splice %s): exit 0" % splice, r.returncode == 0, 0,
            (r.stdout + r.stderr)[-600:])
    n = io.run(["psql", "-qAtc", "select count(*) from pgbench_accounts"], env=env, text=True).stdout.strip()
    t.check("pgbench_accounts has 500000 rows (scale 5), read directly", n == "500000", "500000", n)
    direct = pgbench(t, env, "direct", 5)
    before = io.tcp_bytes(s, splice)
    through = pgbench(t, via(env, port), "through sluice (splice %s)" % splice, 5)
    after = io.tcp_bytes(s, splice)
    t.check("the pgbench run's bytes crossed the listener both ways (sluice_tcp_bytes_total grew)",
            after["in"] > before["in"] and after["out"] > before["out"], "both grew", (before, after))
    t.info("pgbench -c 16 -j 2 -T 5: direct %.0f TPS, through sluice (splice %s) %.0f TPS, ratio %.2f"
           % (direct, splice, through, through / direct if direct else 0))


@io.case("l4.pgbench", "pgbench -i -s 5 through a tcp listener (splice auto), then pgbench -c 16 -j 2 "
         "direct and through sluice: zero failed transactions and no aborted client (TPS ratio recorded)",
         budget=90)
def l4_pgbench(t):
    pgbench_case(t, "auto")


@io.case("l4.pgbench_splice_off", "the same pgbench load through a tcp listener with splice: off "
         "(read/write copies only): zero failed transactions, no aborted client", budget=90)
def l4_pgbench_splice_off(t):
    pgbench_case(t, "off")


def copy_out(env, port, sql, path):
    """psql runs sql (a COPY ... TO STDOUT) through port into path: (exit code, size, sha256)."""
    with open(path, "wb") as f:
        r = subprocess.run(["psql", "-qX", "-v", "ON_ERROR_STOP=1", "-c", sql], env=via(env, port), stdout=f,
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=60)
    return r.returncode, os.path.getsize(path), io.file_sha256(path)


@io.case("l4.copy_50m", "a 50 MB COPY ... TO STDOUT through tcp listeners with splice auto and off "
         "arrives sha256-identical to the same COPY read directly, and the same 50 MB sent back "
         "with COPY ... FROM STDIN through each is stored exactly (read back directly)", budget=90)
def l4_copy_50m(t):
    s, env, p = start(t, ("auto", "off"))
    d = io.h.new_tmpdir("copy")
    ref = os.path.join(d, "direct")
    want = copy_out(env, p, COPY_SQL, ref)
    t.check("direct COPY: exit 0, more than 50 MB", want[0] == 0 and want[1] > 50 * 10 ** 6, "> 50 MB", want)
    for mode in ("auto", "off"):
        got = copy_out(env, s.port(mode), COPY_SQL, os.path.join(d, mode))
        t.check("COPY TO STDOUT through sluice (splice %s): exit 0, %d bytes, the direct read's sha256"
                % (mode, want[1]), got == want, want, got)
        out = io.tcp_bytes(s, mode)["out"]
        t.check("listener %s counted the COPY's bytes upstream -> client (>= %d)" % (mode, want[1]),
                out >= want[1], ">= %d" % want[1], out)
        table = "up_" + mode
        io.run(["psql", "-qc", "create table %s (i int, v text)" % table], env=env)
        with open(ref, "rb") as f:
            r = subprocess.run(["psql", "-qX", "-v", "ON_ERROR_STOP=1", "-c", "COPY %s FROM STDIN" % table],
                               env=via(env, s.port(mode)), stdin=f, capture_output=True, timeout=60)
        t.check("COPY FROM STDIN through sluice (splice %s): exit 0" % mode, r.returncode == 0, 0, r.stderr[-400:])
        back = copy_out(env, p, "COPY (SELECT * FROM %s ORDER BY i) TO STDOUT" % table, os.path.join(d, table))
        t.check("what the upload stored, read back directly: %d bytes, the same sha256" % want[1], back == want,
                want, back)


@io.case("l4.cancel", "a query through sluice (select pg_sleep(30)) is cancelled by psql's "
         "CancelRequest, sent on a second connection through sluice: it ends within seconds with "
         "'canceling statement due to user request'", budget=60)
def l4_cancel(t):
    s, env, _ = start(t)
    errlog = os.path.join(io.h.new_tmpdir("cancel"), "psql.err")
    psql = io.spawn(["psql", "-qX", "-c", "select pg_sleep(30)"], log=errlog, env=via(env, s.port("auto")))
    running = ""
    deadline = time.monotonic() + 15
    q = "select count(*) from pg_stat_activity where query = 'select pg_sleep(30)' and state = 'active'"
    while time.monotonic() < deadline and running != "1":
        running = io.run(["psql", "-qAtc", q], env=env, text=True).stdout.strip()
        time.sleep(0.1)
    t.check("the pg_sleep(30) query runs on the server (seen directly in pg_stat_activity)", running == "1",
            "1", running)
    n0 = accepted(s)
    t0 = time.monotonic()
    os.kill(psql.pid, signal.SIGINT)  # psql sends a CancelRequest to where it connected: sluice
    try:
        rc = psql.proc.wait(15)
    except subprocess.TimeoutExpired:
        rc = None
    took = time.monotonic() - t0
    err = open(errlog, errors="replace").read()
    t.check("psql ended within 5 s of SIGINT", rc is not None and took < 5, "< 5 s", (rc, round(took, 2)))
    t.check("the server said: canceling statement due to user request",
            "canceling statement due to user request" in err, "that message", err[-400:])
    t.check("the CancelRequest came as a new connection through sluice (accepted count + 1)",
            accepted(s) == n0 + 1, n0 + 1, accepted(s))
    left = io.run(["psql", "-qAtc", q], env=env, text=True).stdout.strip()
    t.check("no pg_sleep query left running on the server", left == "0", "0", left)


def accepted(s):
    """Connections the workers accepted so far (/status), every listener."""
    return sum(w.get("connections", 0) for w in s.status().get("workers", []))


# ---------------------------------------------------------------- a session across a reload
# psql reads its queries from a pipe here and answers each on its stdout; the marker lines
# (\echo) say where one answer ends.

class Session:
    def __init__(self, env, port, d):
        self.proc = subprocess.Popen(["psql", "-qAtX", "-v", "ON_ERROR_STOP=1"], env=via(env, port),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(os.path.join(d, "session.err"), "wb"),
                                     preexec_fn=io.h._die_with_parent)
        self.p = io.Proc(self.proc, "psql")
        io.h._register(self.p)
        self.n = 0

    def query(self, sql, timeout=10.0):
        """Runs sql on the session; its output lines (None when psql ended or took too long)."""
        self.n += 1
        mark = "--end %d--" % self.n
        try:
            self.proc.stdin.write(("%s\n\\echo %s\n" % (sql, mark)).encode())
            self.proc.stdin.flush()
        except OSError:
            return None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        buf = b""
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.2)
            if not r:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            buf += chunk
            if (mark + "\n").encode() in buf:
                lines = buf.decode().split("\n")
                return lines[:lines.index(mark)]
        return None


@io.case("l4.session_across_reload", "a psql session open through a tcp listener stays usable "
         "after an explicit reload (same backend, its temp table still there) while the old "
         "generation drains, and a new session is served by the new generation", budget=60)
def l4_session_across_reload(t):
    s, env, _ = start(t)
    sess = Session(env, s.port("auto"), io.h.new_tmpdir("session"))
    first = sess.query("select pg_backend_pid(); create temp table k(v int); insert into k values (7);")
    t.check("the session answers before the reload (its backend pid)", first and first[0].isdigit(),
            "a pid", first)
    gen0 = s.status().get("generation")
    code, answer = s.reload()
    st = s.status()
    t.check("the reload was applied: a new generation", code == 200 and answer.get("applied")
            and st.get("generation") != gen0, "applied, generation changed", (code, answer, gen0, st.get("generation")))
    t.check("the old generation is retiring (it still holds the session)", bool(st.get("retiring_generations")),
            "non-empty", st.get("retiring_generations"))
    after = sess.query("select pg_backend_pid(); select sum(v) from k;")
    t.check("the same session answers after the reload: same backend, temp table sum 7",
            first and after == [first[0], "7"], [first[0] if first else None, "7"], after)
    big = sess.query("select count(*), sum(length(r)) from (select repeat('y', 1000) r "
                     "from generate_series(1, 20000)) x;")
    t.check("the old session still moves a larger query after the reload", big == ["20000|20000000"],
            ["20000|20000000"], big)
    r = io.run(["psql", "-qAtc", "select 41 + 1"], env=via(env, s.port("auto")), text=True)
    t.check("a new session through sluice after the reload answers", r.stdout.strip() == "42", "42",
            r.stdout + r.stderr)
    try:
        sess.proc.stdin.close()  # psql's end of input: it quits
    except OSError:  # (a psql that already ended)
        pass
    t.check("the old session ends cleanly (psql exit 0)", sess.p.proc.wait(10) == 0, 0, sess.p.proc.returncode)
    io.h._unregister(sess.p)


if __name__ == "__main__":
    io.main()
