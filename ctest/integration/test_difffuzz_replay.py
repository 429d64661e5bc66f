"""Replays every case scripts/difffuzz saved in ctest/fuzz/diff_found/ against sluice alone.

Each file is the raw bytes the fuzzer sent (a mutated request, its body, and a pipelined
`GET /__next ... Connection: close`). The file's name says what the fuzzer saw:
  laxer-PEER-*        sluice forwarded what PEER refused: sluice must now forward nothing
                      (or, per EXPECT, only the messages before the refused one)
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
