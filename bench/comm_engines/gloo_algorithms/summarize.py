import sys, re, statistics, collections
rows = collections.defaultdict(list)
order = []
for f in sys.argv[1:]:
    for line in open(f):
        m = re.match(r"row round=(\d+) bytes=(\d+) variant=(\S+) us=([\d.]+)", line)
        if m:
            k = (int(m[2]), m[3]); rows[k].append(float(m[4]))
            if m[3] not in order: order.append(m[3])
sizes = sorted({k[0] for k in rows})
base = "new_default(dp)"
def fmt(b): return f"{b>>10} KB" if b < 1<<20 else f"{b>>20} MB"
# order variants as defined in the probe
vorder = ["new_default(dp)","new_RING","new_BCUBE","new_seg64K","new_reused_opts"]
for k in ["async","sync","sync_busy"]:
    for a in ["Ring","RingChunked","HalvingDoubling","Bcube"]:
        vorder.append(f"old_{a}/{k}")
vorder += ["split256K_Ring/async","split512K_HD/async","split256K_Ring/sync","split512K_HD/sync"]
vorder = [v for v in vorder if v in order]
print("| variant | " + " | ".join(f"{fmt(s)} µs (×dp)" for s in sizes) + " |")
print("|---|" + "---:|" * len(sizes))
for v in vorder:
    cells = []
    for s in sizes:
        x = rows.get((s, v))
        if not x: cells.append("-"); continue
        med = statistics.median(x); b = statistics.median(rows[(s, base)])
        cells.append(f"{med:.0f} [{min(x):.0f}–{max(x):.0f}] ({b/med:.1f}×)")
    print(f"| {v} | " + " | ".join(cells) + " |")
# per-round paired ratio (variant vs dp in same round): median of ratios
print()
print("median over rounds of per-round speed-up vs new_default(dp) (paired):")
rr = collections.defaultdict(dict)
for f in sys.argv[1:]:
    for line in open(f):
        m = re.match(r"row round=(\d+) bytes=(\d+) variant=(\S+) us=([\d.]+)", line)
        if m: rr[(f, int(m[1]), int(m[2]))][m[3]] = float(m[4])
print("| variant | " + " | ".join(fmt(s) for s in sizes) + " |")
print("|---|" + "---:|" * len(sizes))
for v in vorder:
    cells = []
    for s in sizes:
        rat = [d[base]/d[v] for (f, r, b), d in rr.items() if b == s and v in d and base in d]
        cells.append(f"{statistics.median(rat):.1f}×" if rat else "-")
    print(f"| {v} | " + " | ".join(cells) + " |")
