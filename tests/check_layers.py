#!/usr/bin/env python3
"""Folders point down: no file under src/ includes one from a folder above it.

The order is docs/architecture.md's, lowest first. A file may include its own
folder's files, any lower folder's, and the public headers (dp.h,
dp_plugin.h); folders of the same rank never include each other. Exits 1
naming each include that points up or sideways.

    check_layers.py SRC_DIR
"""
import os
import re
import sys

RANK = {
    "core": 0,
    "tensor": 1,
    "layers": 2,
    "model": 3,
    "optim": 4,
    "engine": 5,
    "plugin": 5,
    "backends/cpu": 6,
    "backends/cuda": 6,
    "data": 6,
    "dist": 6,
    "group": 7,
    "io": 8,
    "capi": 9,
    "cli": 10,
}
PUBLIC = {"dp.h", "dp_plugin.h", "dp.hpp"}


def folder_of(rel):
    """The ranked folder a path under src/ belongs to (backends/cuda/ops is backends/cuda)."""
    parts = rel.split("/")
    if parts[0] == "backends" and len(parts) > 2:
        return "backends/" + parts[1]
    return parts[0] if len(parts) > 1 else None


def main():
    src = sys.argv[1]
    bad, seen = [], 0
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            here = folder_of(rel)
            if here not in RANK:
                bad.append(f"{rel}: folder '{here}' has no place in the order (add it to {sys.argv[0]} and docs/architecture.md)")
                continue
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if not m:
                        continue
                    seen += 1
                    inc = m.group(1)
                    if inc in PUBLIC or "/" not in inc:
                        continue
                    there = folder_of(inc)
                    if there == here:
                        continue
                    if there not in RANK or RANK[there] >= RANK[here]:
                        bad.append(f"{rel}:{n}: includes \"{inc}\" from {there}, which is not below {here}")
    for b in bad:
        print(b)
    print(f"{seen} includes checked, {len(bad)} pointing up or sideways")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
