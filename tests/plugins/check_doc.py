#!/usr/bin/env python3
"""Runs the walk-through of docs/plugins.md exactly as written: every code
block whose first line names a file ("file: scale.c") is written to an empty
folder, and every ```sh block runs there, in order, with the built `dp` on
PATH and a generated dp.pc (Cflags: -I<source>/include) on PKG_CONFIG_PATH,
since dp is not installed yet. A block whose first line is "# needs: nvcc"
(the CUDA part) runs where nvcc is found (PATH or /usr/local/cuda/bin), and
is reported as skipped elsewhere; it trains only where a GPU is, and then its
result must say 2 devices too.

    check_doc.py docs/plugins.md build/src/cli/dp include/

DP_DOC_KEEP=DIR copies what the CUDA block built (scale.so, model.json) to DIR:
bench/gpu_pack.sh packs it for a GPU machine without nvcc, where bench/gpu.sh
runs the block's training line on cuda:0.
"""
import json
import os
import shutil
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
nvcc = shutil.which('nvcc') or ('/usr/local/cuda/bin/nvcc' if os.access('/usr/local/cuda/bin/nvcc', os.X_OK) else None)
cuda_scripts = [b for b in scripts if b.startswith('# needs: nvcc')]
if 'scale.c' not in files or 'model.json' not in files or 'scale_cuda.cu' not in files or len(scripts) < 2 or \
        len(cuda_scripts) != 1:
    print(f'docs: expected scale.c, scale_cuda.cu, model.json, a sh block and one "# needs: nvcc" block; '
          f'found {sorted(files)}, {len(scripts)} sh, {len(cuda_scripts)} for nvcc')
    sys.exit(1)

with tempfile.TemporaryDirectory() as tmp:
    for name, body in files.items():
        with open(os.path.join(tmp, name), 'w') as f:
            f.write(body)
    pc = os.path.join(tmp, 'pkgconfig')
    os.mkdir(pc)
    with open(os.path.join(pc, 'dp.pc'), 'w') as f:
        f.write(f'Name: dp\nDescription: dp (uninstalled, for this test)\nVersion: 0.1.0\nCflags: -I{include}\nLibs:\n')
    path = os.path.dirname(dp_exe) + os.pathsep + os.environ.get('PATH', '')
    if nvcc:
        path += os.pathsep + os.path.dirname(nvcc)
    env = dict(os.environ, PATH=path, PKG_CONFIG_PATH=pc)
    env.pop('DP_PLUGIN_PATH', None)
    problems, skipped = [], []
    devices = subprocess.run([dp_exe, 'devices'], capture_output=True, text=True, env=env).stdout
    has_gpu = re.search(r'^cuda:[0-9]', devices, re.M) is not None

    def check_result(out, what):
        """The block's dp plugins line, its symbols, and (if it trained) its result."""
        nm = subprocess.run(['nm', '-D', '--undefined-only', os.path.join(tmp, 'scale.so')], capture_output=True,
                            text=True).stdout
        if re.search(r'\bdp_', nm):
            problems.append(f'{what}: scale.so needs dp_* symbols:\n' + nm)
        if what == 'the CUDA block' and 'cudaGetLastError' not in nm:
            problems.append(f'{what}: scale.so has no CUDA code (no cudaGetLastError among its symbols):\n' + nm)
        if 'scale@1' not in out:
            problems.append(f'{what}: dp plugins did not list scale@1')
        last = out.strip().splitlines()[-1] if out.strip() else ''
        if not last.startswith('{'):
            return False
        result = json.loads(last)
        if not (result.get('epochs') == 2 and result.get('devices') == 2 and result.get('train_loss', float('nan')) > 0):
            problems.append(f'{what}: unexpected training result: {result}')
        return True

    for script in scripts:
        what = 'the CUDA block' if script in cuda_scripts else 'the CPU block'
        if script in cuda_scripts and not nvcc:
            skipped.append('the CUDA block (no nvcc)')
            continue
        r = subprocess.run(['sh', '-ex', '-c', script], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        if r.returncode:
            print(f'docs: this block failed ({r.returncode}):\n{script}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}')
            sys.exit(1)
        trained = check_result(r.stdout, what)
        if script in cuda_scripts and os.environ.get('DP_DOC_KEEP'):
            os.makedirs(os.environ['DP_DOC_KEEP'], exist_ok=True)
            for name in ('scale.so', 'model.json'):
                shutil.copy(os.path.join(tmp, name), os.environ['DP_DOC_KEEP'])
        if not trained:
            if script in cuda_scripts and has_gpu:
                problems.append(f'{what}: a GPU is here (dp devices lists cuda:0) but the block did not train')
            elif script in cuda_scripts:
                skipped.append('training on cuda:0 (no GPU: built and listed only)')
            else:
                problems.append(f'{what}: no training result')
        if problems:
            print('docs: ' + '\n'.join(problems) + '\noutput:\n' + r.stdout)
            sys.exit(1)
print('docs/plugins.md built and trained as written' + (f'; skipped: {", ".join(skipped)}' if skipped else ''))
