#!/usr/bin/env python3
"""Runs the walk-through of docs/plugins.md exactly as written: every code
block whose first line names a file ("file: scale.c") is written to an empty
folder, and every ```sh block runs there, with the built `dp` on PATH and a
generated dp.pc (Cflags: -I<source>/include) on PKG_CONFIG_PATH, since dp is
not installed yet.

    check_doc.py docs/plugins.md build/src/cli/dp include/
"""
import json
import os
import re
import subprocess
import sys
import tempfile

doc, dp_exe, include = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
blocks = re.findall(r'^```(\w+)\n(.*?)^```', open(doc).read(), re.M | re.S)
files, scripts = {}, []
for lang, body in blocks:
    m = re.match(r'\s*(?:/\*|//)\s*file:\s*(\S+)', body)
    if m:
        files[m.group(1)] = body
    elif lang == 'sh':
        scripts.append(body)
if 'scale.c' not in files or 'model.json' not in files or not scripts:
    print(f'docs: expected scale.c, model.json and a sh block; found {sorted(files)}, {len(scripts)} sh')
    sys.exit(1)

with tempfile.TemporaryDirectory() as tmp:
    for name, body in files.items():
        with open(os.path.join(tmp, name), 'w') as f:
            f.write(body)
    pc = os.path.join(tmp, 'pkgconfig')
    os.mkdir(pc)
    with open(os.path.join(pc, 'dp.pc'), 'w') as f:
        f.write(f'Name: dp\nDescription: dp (uninstalled, for this test)\nVersion: 0.1.0\nCflags: -I{include}\nLibs:\n')
    env = dict(os.environ, PATH=os.path.dirname(dp_exe) + os.pathsep + os.environ.get('PATH', ''),
               PKG_CONFIG_PATH=pc)
    env.pop('DP_PLUGIN_PATH', None)
    out = ''
    for script in scripts:
        r = subprocess.run(['sh', '-ex', '-c', script], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        out += r.stdout
        if r.returncode:
            print(f'docs: this block failed ({r.returncode}):\n{script}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}')
            sys.exit(1)
    nm = subprocess.run(['nm', '-D', '--undefined-only', os.path.join(tmp, 'scale.so')], capture_output=True, text=True).stdout
    problems = []
    if re.search(r'\bdp_', nm):
        problems.append('scale.so needs dp_* symbols:\n' + nm)
    if 'scale@1' not in out:
        problems.append('dp plugins did not list scale@1')
    result = json.loads(out.strip().splitlines()[-1])
    if not (result.get('epochs') == 2 and result.get('devices') == 2 and result.get('train_loss', float('nan')) > 0):
        problems.append(f'unexpected training result: {result}')
    if problems:
        print('docs: ' + '\n'.join(problems) + '\noutput:\n' + out)
        sys.exit(1)
print('1 passed, 0 failed (docs/plugins.md built and trained as written)')
