#!/usr/bin/env python3
"""Every C entry point returning dp_status wraps its body in DP_GUARD_BEGIN /
DP_GUARD_END, so no exception can cross the ABI; void entries (destroy, free)
only delete or free, which cannot throw, or call a function of the same file
declared noexcept. Fails naming the function otherwise.

    check_guards.py src/capi/*.cpp
"""
import re
import sys

bad = []
count = 0
for path in sys.argv[1:]:
    src = open(path).read()
    for m in re.finditer(r'^dp_status (dp_\w+)\([^)]*\)\s*\{', src, re.M):
        count += 1
        depth, i = 1, m.end()
        while depth and i < len(src):
            depth += {'{': 1, '}': -1}.get(src[i], 0)
            i += 1
        body = src[m.end():i - 1].strip()
        if not body.startswith('DP_GUARD_BEGIN') or not body.endswith('DP_GUARD_END'):
            bad.append(m.group(1))
    for m in re.finditer(r'^void (dp_\w+)\([^)]*\)\s*\{([^}]*)\}', src, re.M):
        call = re.fullmatch(r'\s*(\w+)\(\w+\);\s*', m.group(2))
        if call and re.search(r'^void ' + call.group(1) + r'\([^)]*\) noexcept \{', src, re.M):
            continue
        if not re.fullmatch(r'\s*(delete \w+|std::free\(\w+\));\s*', m.group(2)):
            bad.append(m.group(1))
if bad or count < 20:
    print('unguarded entry points:', ', '.join(bad) or f'(only {count} found)')
    sys.exit(1)
print(f'1 passed, 0 failed ({count} guarded entry points)')
