#!/usr/bin/env python3
"""Runs the binding's pytest suite (meson test's 'python'): pytest's own
output and summary line; exit 0 only when tests ran and passed (pytest's 5,
"no tests collected", is a failure here)."""
import os
import sys

sys.dont_write_bytecode = True
here = os.path.dirname(os.path.abspath(__file__))
import pytest  # noqa: E402

rc = pytest.main(['-ra', '-p', 'no:cacheprovider', '--rootdir', here, here] + sys.argv[1:])
if rc == pytest.ExitCode.NO_TESTS_COLLECTED:
    print('run.py: pytest collected no tests: failing')
    rc = 1
sys.exit(int(rc))
