"""Small helpers every module uses: shapes in and out of the C ABI, NumPy
on demand, paths, JSON text, and freeing a handle."""
import ctypes
import json as _json
import os

from . import _lib
from ._errors import _check


def _shape_out(fn, handle):
    nd = ctypes.c_int()
    shp = (ctypes.c_int64 * _lib.MAX_DIMS)()
    _check(fn(handle, ctypes.byref(nd), shp))
    return tuple(shp[:nd.value])


def _shape_in(shape):
    shape = tuple(int(s) for s in shape)
    return len(shape), (ctypes.c_int64 * max(len(shape), 1))(*shape)


def _np():
    try:
        import numpy
    except ImportError as e:
        raise ImportError('dp: this needs NumPy (apt install python3-numpy, or pip install numpy)') from e
    return numpy


def _np_or_none():
    try:
        import numpy
        return numpy
    except ImportError:
        return None


def _path(p):
    return os.fsencode(os.fspath(p))


def _json_text(spec):
    if isinstance(spec, (dict, list)):
        return _json.dumps(spec)
    if isinstance(spec, bytes):
        return spec.decode()
    return spec


def _destroy(obj, fn):
    h = getattr(obj, '_h', None)
    obj._h = None
    if h is not None and h.value and fn is not None:
        fn(h)
