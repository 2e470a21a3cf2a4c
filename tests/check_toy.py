#!/usr/bin/env python3
"""examples/toy prints what the tutorial shows for 1, 2, 3 and 8 devices.

    check_toy.py TOY [SHAPE_PROBE_PLUGIN]

The "In Model" lines come from inside the replicas (the shape_probe plugin),
which run at once: within a batch they are compared as a multiset."""
import subprocess
import sys

toy = sys.argv[1]
# Batches of 100 samples by 30: 30, 30, 30, 10; each split by torch.chunk's rule.
expect = {
    1: [[30], [30], [30], [10]],
    2: [[15, 15], [15, 15], [15, 15], [5, 5]],
    3: [[10, 10, 10], [10, 10, 10], [10, 10, 10], [4, 4, 2]],
    8: [[4] * 7 + [2]] * 3 + [[2] * 5],
}
failed = 0
for n, batches in expect.items():
    devices = ','.join(f'cpu:{i}' for i in range(n))
    out = subprocess.run([toy, devices] + sys.argv[2:3], capture_output=True, text=True, check=True).stdout
    want = [f"Let's use {n} devices!"] if n > 1 else []
    for sizes in batches:
        want += [f'\tIn Model: input size [{s}, 5] output size [{s}, 2]' for s in sizes]
        want.append(f'Outside: input size [{sum(sizes)}, 5] output_size [{sum(sizes)}, 2]')
    def batches_of(lines):  # each batch's In Model lines sorted, then its Outside line
        out, cur = [], []
        for line in lines:
            if line.startswith('\tIn Model'):
                cur.append(line)
            else:
                out += sorted(cur) + [line]
                cur = []
        return out + sorted(cur)
    if batches_of(out.splitlines()) != batches_of(want):
        failed += 1
        print(f'{n} devices: expected\n' + '\n'.join(want) + '\ngot\n' + out)
print(f'{len(expect) - failed} passed, {failed} failed')
sys.exit(1 if failed else 0)
