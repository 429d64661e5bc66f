"""Replays every case scripts/difffuzz saved in ctest/fuzz/diff_found/ against sluice alone.

Each file is the raw bytes the fuzzer sent (a mutated request, its body, and a pipelined
`GET /__next ... Connection: close`). The file's name says what the fuzzer saw:
  laxer-PEER-*        sluice forwarded what PEER refused (fixed since): sluice must now
                      forward nothing, or per EXPECT only the messages before the refused one
  framing-PEER-*      sluice framed a message differently from PEER: EXPECT holds the framing
  deliberate.WHY-*    a difference docs/DECISIONS.md accepts: sluice forwards, and EXPECT holds
                      exactly what its upstream must see
Framing is the fuzzer's: (method, target without scheme://authority, body length, body crc32)
per message, as a recording upstream parsed the bytes sluice forwarded.
"""

import importlib.machinery
import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

t = h.Suite("difffuzz_replay", budget=120)

_loader = importlib.machinery.SourceFileLoader(
    "difffuzz", os.path.join(h.SRC, "scripts", "difffuzz"))
_spec = importlib.util.spec_from_loader("difffuzz", _loader)
df = importlib.util.module_from_spec(_spec)
_loader.exec_module(df)

FOUND = os.path.join(h.SRC, "ctest", "fuzz", "diff_found")

# File name -> the messages sluice's upstream must see; a file not named here must reach the
# upstream not at all (sluice refuses the first message).
EXPECT = {
    'deliberate.asterisk-form-nginx-1e590221be42':
        [('GET', '/__next', 0, '00000000')],
    'deliberate.dup-expect-nginx-491a1d5d9668':
        [('POST', '/', 0, '00000000')],
    'deliberate.encoded-nul-nginx-c9f233ef8a8d':
        [('POST', '/%00', 0, '00000000')],
    'deliberate.host-dots-nginx-3541aff716b9':
        [('POST', '/', 0, '00000000')],
    'deliberate.htab-ows+asterisk-form-nginx-1d1ec75b2408':
        [('GET', '/__next', 0, '00000000')],
    'deliberate.htab-ows+encoded-nul-nginx-7c7d2d9a16b0':
        [('POST', '/%00', 0, '00000000')],
    'deliberate.htab-ows-nginx-ef753e7c38d7':
        [('POST', '/', 0, '00000000')],
    'deliberate.http10-get-body-haproxy-251fff64a947':
        [('GET', '/', 5, 'bedc2c7f')],
    'deliberate.method-policy-nginx-d26125f77997':
        [('TRACE', '/form', 0, '00000000')],
    'deliberate.websocket-key-haproxy-6d578f4cf3c3':
        [('POST', '/', 0, '00000000')],
}

S = {}


class OnlySluice:
    """What difffuzz.run_case needs: a recording upstream and a port per proxy."""

    def __init__(self, up, port):
        self.up = {"sluice": up}
        self.port = {"sluice": port}


def setup(t):
    up = df.RecordingUpstream()
    s = h.start_sluice(df.sluice_conf(up.port), suite=t)
    S.update(px=OnlySluice(up, s.port("web")), s=s)


def test_saved_cases(t):
    names = sorted(os.listdir(FOUND))
    t.check("the fuzzer's found cases are there to replay", len(names) > 0, "> 0", len(names))
    for name in names:
        with open(os.path.join(FOUND, name), "rb") as f:
            data = f.read()
        o = df.run_case(S["px"], data, wait=2.0, only=("sluice",))["sluice"]
        want = EXPECT.get(name, [])
        t.check("%s: upstream saw %s" % (name, want or "nothing"),
                o.msgs == want and (want or o.kind == "reject"), want, str(o))
    t.check("gateway still running", S["s"].alive(), True, S["s"].alive())


t.run(setup, test_saved_cases)
