#!/usr/bin/env python3
# Median across rounds of the per-run medians in bench_raw.txt.
import re, statistics, sys, collections
d = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1] if len(sys.argv) > 1 else 'bench_raw.txt'):
    m = re.match(r'(\S+) np=2 bytes=(\d+) allreduce_us=([\d.]+) busbw_GBps=([\d.]+) memcpy_us=([\d.]+) memcpy_GBps=([\d.]+)', line)
    if not m: continue
    k = (m.group(1), int(m.group(2)))
    for i, f in enumerate(['ar_us', 'busbw', 'mc_us', 'mc_GBps']): d[k][f].append(float(m.group(3 + i)))
print('| engine | size | allreduce us (median, [min-max]) | busbw GB/s | memcpy us | memcpy GB/s | runs |')
for (e, b), v in sorted(d.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    med = {f: statistics.median(x) for f, x in v.items()}
    print(f"| {e} | {b//1024} KB | {med['ar_us']:.0f} [{min(v['ar_us']):.0f}-{max(v['ar_us']):.0f}] | {med['busbw']:.2f} | {med['mc_us']:.1f} | {med['mc_GBps']:.1f} | {len(v['ar_us'])} |")
