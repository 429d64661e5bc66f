"""scripts/check-docs on the real tree (it must pass) and on doctored copies of it: a
documented config key removed from the parser's key tables, a plugin schema field
removed, a metric renamed in the code, and a key added to the code but not to the docs
must each fail, naming the key."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get('SLUICE_SRC') or os.path.normpath(os.path.join(HERE, '..', '..'))
CHECK = os.path.join(ROOT, 'scripts', 'check-docs')
failures = 0


def check(cond, what, out=''):
    global failures
    print(('ok   ' if cond else 'FAIL ') + what)
    if not cond:
        failures += 1
        print(out)


def run(root):
    r = subprocess.run([sys.executable, CHECK, '--root', root], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def copy_tree():
    d = tempfile.mkdtemp(prefix='sl-docs-')
    for sub in ('core', 'lua', 'plugins', 'docs', 'conf'):
        shutil.copytree(os.path.join(ROOT, sub), os.path.join(d, sub))
    shutil.copy(os.path.join(ROOT, 'README.md'), d)
    return d


def edit(root, rel, old, new):
    p = os.path.join(root, rel)
    with open(p) as f:
        text = f.read()
    assert re.search(old, text), (rel, old)
    with open(p, 'w') as f:
        f.write(re.sub(old, new, text, count=1))


rc, out = run(ROOT)
check(rc == 0, 'the real tree: docs and code agree', out)

# a documented core key removed from the code
d = copy_tree()
edit(d, 'core/config/root.c', r'\{"listen", "token_env"\}', '{"listen"}')
edit(d, 'core/config/root.c', r'AD_TOKEN_ENV, AD_N', 'AD_N, AD_TOKEN_ENV')
rc, out = run(d)
check(rc == 1 and re.search(r'docs/config\.md:\d+: documented key `token_env` is not a key', out) is not None,
      'admin.token_env removed from the parser: fails at the docs line naming it', out)
shutil.rmtree(d)

# a key added to the code, not to the docs
d = copy_tree()
edit(d, 'core/config/root.c', r'\{"address", "timeout"\}', '{"address", "timeout", "pool_size"}')
rc, out = run(d)
check(rc == 1 and 'config key `pool_size` (core/config/*.c) is not documented' in out,
      'an undocumented key in the code fails', out)
shutil.rmtree(d)

# a documented plugin key removed from the plugin's schema
d = copy_tree()
edit(d, 'plugins/cors.lua', r'\n\s*max_age = \{[^\n]*', '')
rc, out = run(d)
check(rc == 1 and re.search(r'docs/plugins\.md:\d+: documented key `max_age` of plugin cors is not in its schema',
                            out) is not None, 'cors max_age removed from its schema: fails', out)
shutil.rmtree(d)

# a metric renamed in the code
d = copy_tree()
for dirpath, _, files in os.walk(os.path.join(d, 'core')):
    for fn in files:
        p = os.path.join(dirpath, fn)
        with open(p, errors='replace') as f:
            text = f.read()
        if 'sluice_tcp_sni_total' in text:
            with open(p, 'w') as f:
                f.write(text.replace('sluice_tcp_sni_total', 'sluice_tcp_sni_sessions_total'))
rc, out = run(d)
check(rc == 1 and 'metric `sluice_tcp_sni_total` is not produced by the code' in out
      and 'metric `sluice_tcp_sni_sessions_total` (in the code) is not documented' in out,
      'a metric renamed in the code fails both ways', out)
shutil.rmtree(d)

# a README link out of the repository, and one to a missing file
d = copy_tree()
with open(os.path.join(d, 'README.md'), 'a') as f:
    f.write('\nSee [the design](../shared/DESIGN.md) and [gone](docs/nope.md).\n')
rc, out = run(d)
check(rc == 1 and 'link `../shared/DESIGN.md` leaves the repository' in out and 'link `docs/nope.md` names no file' in out,
      'README links outside the repository or to no file fail', out)
shutil.rmtree(d)

print('%d failure(s)' % failures)
sys.exit(1 if failures else 0)
