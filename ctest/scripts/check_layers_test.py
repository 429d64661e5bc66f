"""scripts/check-layers against trees made here: a right include passes, a wrong one
(upward, or between peers) fails naming file:line, an exception is allowed only where
core/LAYERS says so, and a cycle is printed. Then the real tree, which must pass."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get('SLUICE_SRC') or os.path.normpath(os.path.join(HERE, '..', '..'))
CHECK = os.path.join(ROOT, 'scripts', 'check-layers')
failures = 0


def check(cond, what, out=''):
    global failures
    print(('ok   ' if cond else 'FAIL ') + what)
    if not cond:
        failures += 1
        print(out)


def tree(files):
    d = tempfile.mkdtemp(prefix='sl-layers-')
    for rel, text in files.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, 'w') as f:
            f.write(text)
    return d


def run(root, *args):
    p = subprocess.run([sys.executable, CHECK, '--root', root] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


LAYERS = 'base\nproto\nhttp l4\n'
good = {
    'core/LAYERS': LAYERS,
    'core/sluice.h': '',
    'core/base/log.h': '',
    'core/base/log.c': '#include "base/log.h"\n',
    'core/proto/h1.h': '#include "base/log.h"\n',
    'core/http/conn.c': '#include "proto/h1.h"\n#include "sluice.h"\n',
    'core/l4/tcp.c': '#include "base/log.h"\n',
}
rc, out = run(tree(good))
check(rc == 0, 'a tree whose includes go downward passes', out)

wrong = dict(good)
wrong['core/base/log.c'] = '#include "base/log.h"\n\n#include "proto/h1.h"\n'
rc, out = run(tree(wrong))
check(rc == 1, 'an upward include fails the check', out)
check('core/base/log.c:3' in out and 'proto/h1.h' in out, 'the violation names file:line and the header', out)

peers = dict(good)
peers['core/l4/tcp.c'] = '#include "http/conn.h"\n'
peers['core/http/conn.h'] = ''
rc, out = run(tree(peers))
check(rc == 1 and 'peers never include each other' in out, 'peer layers including each other fails', out)

stray = dict(good)
stray['core/misc/x.c'] = '#include "base/log.h"\n'
rc, out = run(tree(stray))
check(rc == 1 and 'misc/' in out, 'a folder missing from core/LAYERS fails', out)

excepted = dict(wrong)
excepted['core/LAYERS'] = LAYERS + 'except base/log.c -> proto/h1.h  on its way out\n'
rc, out = run(tree(excepted))
check(rc == 0 and 'excepted: on its way out' in out, 'an exception listed in core/LAYERS is allowed and reported', out)

loop = dict(good)
loop['core/http/req.h'] = ''
loop['core/http/req.c'] = '#include "http/conn.h"\n'
loop['core/http/conn.h'] = ''
loop['core/http/conn.c'] = '#include "http/req.h"\n'
rc, out = run(tree(loop), '--cycles')
check(rc == 1 and 'cycle: http/conn <-> http/req' in out and '1 include cycle' in out,
      'a cycle within a layer is printed by --cycles and fails the check', out)
rc, out = run(tree(loop))
check(rc == 0, 'without --cycles a cycle inside one layer is not a layer violation', out)
listed = dict(loop)
listed['core/LAYERS'] = LAYERS + 'cycle http/req <-> http/conn  the documented seam\n'
rc, out = run(tree(listed), '--cycles')
check(rc == 0 and 'listed in core/LAYERS: the documented seam' in out, 'a cycle core/LAYERS lists is allowed', out)

rc, out = run(ROOT, '--cycles')
check(rc == 0, 'the real core/ follows core/LAYERS, with no unlisted include cycle', out)

print('%d failure(s)' % failures)
sys.exit(1 if failures else 0)
