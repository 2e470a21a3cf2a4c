import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package in bindings/python/dp
ROOT = os.environ.get('DP_SOURCE_ROOT', os.path.normpath(os.path.join(HERE, '..', '..', '..')))


def _built(env, *rel):
    if os.environ.get(env):
        return os.environ[env]
    import dp
    p = os.path.normpath(os.path.join(os.path.dirname(os.path.realpath(dp.library_path)), '..', *rel))
    return p if os.path.exists(p) else None


@pytest.fixture(scope='session')
def root():
    return ROOT


@pytest.fixture(scope='session')
def cli():
    p = _built('DP_CLI', 'src', 'cli', 'dp')
    if not p:
        pytest.skip('the dp command was not found (set DP_CLI)')
    return p


@pytest.fixture(scope='session')
def shape_probe():
    p = _built('DP_SHAPE_PROBE', 'plugins', 'shape_probe.so')
    if not p:
        pytest.skip('plugins/shape_probe.so was not found (set DP_SHAPE_PROBE)')
    return p


@pytest.fixture(scope='session')
def swish():
    p = _built('DP_SWISH', 'plugins', 'swish.so')
    if not p:
        pytest.skip('plugins/swish.so was not found (set DP_SWISH)')
    return p
