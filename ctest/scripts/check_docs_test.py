"""scripts/check-docs on the real tree (it must pass) and on doctored copies of it: a
documented config key removed from the parser's key tables, a plugin schema field
removed, a metric renamed in the code, and a key added to the code but not to the docs
must each fail, naming the key; a file the docs name in a code span that is renamed, or
a missing path written into a doc, must fail at FILE:LINE, while an existing file (with
a :LINE), a directory, a glob, a placeholder, a build/ path, an absolute path and a path
in a fenced block pass; docs/BENCHMARKS.md's results regions must be what
scripts/bench-report makes of bench/results/ (an edited page, a newer file, a missing
file each fail)."""
import json
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
    """The source tree (no .git, no build directories): the docs name files everywhere."""
    d = tempfile.mkdtemp(prefix='sl-docs-')
    for name in os.listdir(ROOT):
        src, dst = os.path.join(ROOT, name), os.path.join(d, name)
        if name == '.git' or name.startswith('build'):
            continue
        if os.path.isdir(src):
            shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns('__pycache__'))
        else:
            shutil.copy(src, dst)
    return d


def append(root, rel, text):
    """Append text to a file; the 1-based number of its first new line."""
    p = os.path.join(root, rel)
    with open(p) as f:
        old = f.read()
    with open(p, 'w') as f:
        f.write(old + ('' if old.endswith('\n') else '\n') + text)
    return old.count('\n') + (0 if old.endswith('\n') else 1) + 1


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
edit(d, 'core/config/root.c', r'\{"listen", "token_env", "debug_token_env"\}', '{"listen", "debug_token_env"}')
edit(d, 'core/config/root.c', r'AD_TOKEN_ENV, AD_DEBUG_TOKEN_ENV, AD_N', 'AD_DEBUG_TOKEN_ENV, AD_N, AD_TOKEN_ENV')
rc, out = run(d)
check(rc == 1 and re.search(r'docs/config\.md:\d+: documented key `token_env` is not a key', out) is not None,
      'admin.token_env removed from the parser: fails at the docs line naming it', out)
shutil.rmtree(d)

# a key added to the code, not to the docs
d = copy_tree()
edit(d, 'core/config/root.c', r'\{"address", "timeout", ', '{"address", "timeout", "pool_size", ')
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

# repository paths in code spans: a file the docs name is moved away
d = copy_tree()
os.rename(os.path.join(d, 'core', 'proto', 'sni.c'), os.path.join(d, 'core', 'proto', 'sni_hello.c'))
rc, out = run(d)
check(rc == 1 and re.search(r'docs/DECISIONS\.md:\d+: `core/proto/sni\.c` does not exist', out) is not None,
      'a file named in the docs renamed: fails at the docs line naming it', out)
shutil.rmtree(d)

# paths written into a doc: the missing ones fail at their line, the rest pass
d = copy_tree()
no = append(d, 'docs/testing.md',
            'Gone: `core/http1.c` and `ctest/fuzz/nope/` and `core/sluice.h/` and `core/gone/<name>.c`.\n')
ex = append(d, 'examples/custom-plugin/README.md', 'Also `spec/nope_spec.lua`.\n')
rc, out = run(d)
missing = ['docs/testing.md:%d: `%s` does not exist' % (no, p)
           for p in ('core/http1.c', 'ctest/fuzz/nope/', 'core/sluice.h/', 'core/gone/<name>.c')]
missing.append('examples/custom-plugin/README.md:%d: `spec/nope_spec.lua` does not exist' % ex)
check(rc == 1 and all(m in out for m in missing) and out.count('does not exist') == 5,
      'missing files, a missing directory, a file named as a directory, a placeholder in a missing '
      'directory and a missing path in an example README fail at FILE:LINE', out)
shutil.rmtree(d)

d = copy_tree()
append(d, 'docs/testing.md',
       'Fine: `core/proto/http1.c:120`, `ctest/integration/`, `ctest/fuzz/corpus`, `examples/*/smoke.yaml`, '
       '`plugins/NAME.lua`, `core/<layer>/<name>.c`, `spec/smoke/PLUGIN.yaml`, `core/LAYERS`, `Dockerfile`, '
       '`scripts/bench --scenarios h2`, `--root=docs/config.md`, `build/ctest/fault_upstream`, `build/nope.c`, '
       '`/etc/sluice/nope.yaml`, `plugins` and `plugins:`.\n'
       '\n```yaml\nroutes_file: conf/nope.lua\n```\n')
append(d, 'examples/custom-plugin/README.md', 'Its own `plugins/tenant.lua` and `spec/tenant_spec.lua`.\n')
rc, out = run(d)
check(rc == 0, 'an existing file (with :LINE), directories, globs, placeholders, a command\'s path, build/ and '
      'absolute paths, bare directory names, a fenced block and example-relative paths pass', out)
shutil.rmtree(d)

d = copy_tree()
os.makedirs(os.path.join(d, 'ctest', 'interop'), exist_ok=True)
with open(os.path.join(d, 'ctest', 'interop', 'peer_zz.py'), 'w') as f:
    f.write('import interop as io\n\n\n@io.case("l4.new_case", "a case the table "\n         "does not have", '
            'budget=5)\ndef new_case(t):\n    pass\n')
line = append(d, 'docs/testing.md', '| zz | l7 | gone | a row whose case is gone |\n')
rc, out = run(d)
check(rc == 1 and 'interop case interop.zz.l4.new_case is not in the table' in out
      and 'docs/testing.md:%d: interop row `zz | l7 | gone`' % line in out,
      'an interop case missing from docs/testing.md\'s table, and a row naming no case, fail', out)
shutil.rmtree(d)

d = copy_tree()
line = append(d, 'conf/sluice.yaml', '# coming (an error in this build): redis\n')
rc, out = run(d)
check(rc == 1 and 'conf/sluice.yaml:%d: `redis` is listed as coming, but this build accepts it' % line in out,
      'a key the default config calls "coming" that the parser accepts fails at FILE:LINE', out)
shutil.rmtree(d)

# docs/BENCHMARKS.md's results regions are what bench/results/ gives (whatever the figures are)
d = copy_tree()
edit(d, 'docs/BENCHMARKS.md', r'\*\*(PASS|MISS)\*\*', '**no data**')
rc, out = run(d)
check(rc == 1 and re.search(r'docs/BENCHMARKS\.md:\d+: the results differ from what bench/results/ gives', out)
      is not None, 'a goal\'s verdict edited on the page (not in its results file) fails', out)
shutil.rmtree(d)

d = copy_tree()
res = os.path.join(d, 'bench', 'results')
small = [n for n in sorted(os.listdir(res)) if n.startswith('small-')][-1]
with open(os.path.join(res, small)) as f:
    rec = json.load(f)
rec['goals'] = [dict(g, value=0.5, clean=True) if g['id'] == 'small.cpu_vs_nginx' else g for g in rec['goals']]
with open(os.path.join(res, small), 'w') as f:
    json.dump(rec, f)
rc, out = run(d)
check(rc == 1 and 'the results differ from what bench/results/ gives' in out,
      'a newer figure in a results file that the page does not show fails', out)
subprocess.run([sys.executable, os.path.join(d, 'scripts', 'bench-report'), '--root', d], check=True,
               capture_output=True)
rc, out = run(d)
with open(os.path.join(d, 'docs', 'BENCHMARKS.md')) as f:
    page = f.read()
check(rc == 0 and re.search(r'\| small GET: proxy CPU per request ≤ 0\.8× nginx \| 0\.50×[^|]* \| \*\*PASS\*\*', page)
      is not None, 'scripts/bench-report rewrites the page from the file, PASS computed from the value', out)
for n in os.listdir(res):
    if n.startswith('grpc-'):
        os.remove(os.path.join(res, n))
rc, out = run(d)
check(rc == 1 and 'docs/BENCHMARKS.md: results region `grpc` has no bench/results/grpc-*.json' in out,
      'a results region without a results file fails', out)
shutil.rmtree(d)

# the page's rendering: one heading line and one table per scenario, paired ratios folded in
sys.path.insert(0, os.path.join(ROOT, 'scripts'))
import benchlib  # noqa: E402

rec = {'scenario': 'small', 'title': 'small GET', 'date': '2026-12-07T13:54:47Z', 'commit': 'abc1234',
       'machine': {'cpu': 'AMD EPYC', 'cores': 2, 'kernel': '6.18.44-fc'}, 'peers': {'nginx': '1.22.1-deb'},
       'command': 'scripts/bench', '_file': 'small-20261207T135447Z.json', 'notes': ['a story'],
       'tables': [{'title': None, 'header': ['proxy', 'req/s'],
                   'rows': [['sluice', '39,035 (33,312–40,540)'], ['nginx', '37,887 (23,938–39,784)']]},
                  {'title': 'Paired ratios', 'header': ['ratio', 'req/s'],
                   'rows': [['sluice/nginx', '1.05× (1.01–1.39)']]}]}
out = benchlib.render_run(rec)
check(out == '#### Small GET · `abc1234`, 2026-12-07 · AMD EPYC, 2 cores, Linux 6.18 · nginx 1.22.1 · '
             '[small-20261207T135447Z.json](../bench/results/small-20261207T135447Z.json) · `scripts/bench`\n'
             '| proxy | req/s | sluice ÷ this: req/s |\n|---|---|---|\n| sluice | 39,035 |  |\n'
             '| nginx | 37,887 | 1.05× |',
      'a run renders as one heading line and one table of medians, the ratio on the peer\'s row, '
      'notes left in the file', out)
page, missing, _ = benchlib.render_page('<!-- results small grpc -->\nold\n<!-- /results -->\n', [rec])
check(missing == ['grpc'] and page.count('#### Small GET') == 1
      and 'No results file for scenario grpc yet.' in page,
      'a region naming several scenarios renders each and names the one without a file', page)

print('%d failure(s)' % failures)
sys.exit(1 if failures else 0)
