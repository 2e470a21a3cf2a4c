"""Small helpers every module uses: shapes in and out of the C ABI, NumPy
on demand, paths, JSON text, checked arguments (every refusal a dp.Error that
is also the builtin exception Python code expects), and freeing a handle."""
import contextlib
import ctypes
import json as _json
import os

from . import _lib
from ._errors import (ArgumentTypeError, ClosedError, Error, InvalidArgumentError, JSONError,
                      MissingDependencyError, UnsupportedError, _check)

_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)


def _integer_inputs(what, kind):
    """The error for integer or bool inputs to a model, as PyTorch refuses them against float
    weights: dp does not convert or scale them (raw uint8 pixels would train as 0..255)."""
    return ArgumentTypeError(f'{what}: {kind} values, where the model takes floats: dp does not convert or scale '
                             'them (uint8 pixels would train as 0..255); convert and normalise first, e.g. '
                             'x.astype(numpy.float32) / 255')


@contextlib.contextmanager
def _converting(what):
    """Turns what Python, NumPy or ctypes raise while converting an argument
    into the dp.Error of the same builtin flavour, its message prefixed with
    what was being converted (the original is the __cause__)."""
    try:
        yield
    except Error:
        raise
    except (TypeError, ctypes.ArgumentError) as e:
        raise ArgumentTypeError(f'{what}: {e}') from e
    except (ValueError, OverflowError) as e:
        raise InvalidArgumentError(f'{what}: {e}') from e
    except (RuntimeError, NotImplementedError) as e:  # e.g. torch: a tensor that requires grad, a meta tensor
        raise InvalidArgumentError(f'{what}: {type(e).__name__}: {e}') from e


def _int(value, what, bounds=_INT64):
    """value as a Python int for a C integer argument (int() semantics, as
    before), else ArgumentTypeError / InvalidArgumentError naming `what`."""
    with _converting(f'{what} must be an int, got {type(value).__name__} {value!r}'):
        v = int(value)
    if not bounds[0] <= v <= bounds[1]:
        raise InvalidArgumentError(f'{what} = {v} is out of range [{bounds[0]}, {bounds[1]}]')
    return v


def _float(value, what):
    with _converting(f'{what} must be a number, got {type(value).__name__} {value!r}'):
        return float(value)


def _text(value, what):
    """A str (or bytes) argument as bytes for the C ABI."""
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise ArgumentTypeError(f'{what} must be a str, got {type(value).__name__} {value!r}')
    with _converting(what):
        return value.encode()


def _handle(obj, cls, what, optional=False):
    """obj's handle for a C call, after checking that obj is a cls (a handle
    of another type would be misread by libdp) and is not closed."""
    if obj is None and optional:
        return None
    if not isinstance(obj, cls):
        name = ' or '.join(f'dp.{c.__name__}' for c in (cls if isinstance(cls, tuple) else (cls,)))
        raise ArgumentTypeError(f'{what}: expected a {name}{" or None" if optional else ""}, '
                                f'got {type(obj).__name__}')
    h = getattr(obj, '_h', None)
    if h is None:
        raise ClosedError(f'{what}: the {type(obj).__name__} is closed (destroyed); make a new one')
    return h


def _shape_out(fn, handle):
    nd = ctypes.c_int()
    shp = (ctypes.c_int64 * _lib.MAX_DIMS)()
    _check(fn(handle, ctypes.byref(nd), shp))
    return tuple(shp[:nd.value])


def _shape_in(shape, what='shape'):
    if isinstance(shape, (str, bytes)) or not hasattr(shape, '__iter__'):
        raise ArgumentTypeError(f'{what} must be a sequence of ints, got {type(shape).__name__} {shape!r}')
    shape = tuple(_int(s, f'{what}[{i}]') for i, s in enumerate(shape))
    return len(shape), (ctypes.c_int64 * max(len(shape), 1))(*shape)


def _np():
    try:
        import numpy
    except ImportError as e:
        raise MissingDependencyError('dp: this needs NumPy (apt install python3-numpy, or pip install numpy)') from e
    return numpy


def _np_or_none():
    try:
        import numpy
        return numpy
    except ImportError:
        return None


def _path(p, what='path'):
    if not isinstance(p, (str, bytes, os.PathLike)):
        raise ArgumentTypeError(f'{what} must be a path (str, bytes or os.PathLike), got {type(p).__name__} {p!r}')
    with _converting(f'{what} {p!r}'):
        return os.fsencode(os.fspath(p))


def _as_f32(src, what):
    """A state_dict value (NumPy array, dp tensor, torch CPU tensor, list)
    as a float32 NumPy array; ArgumentTypeError / InvalidArgumentError naming
    `what` for None or what cannot be one (a meta or GPU torch tensor...)."""
    if src is None:
        raise ArgumentTypeError(f'{what}: None is not an array')
    with _converting(f'{what} ({type(src).__name__}) as float32'):
        if hasattr(src, 'detach') and hasattr(src, 'cpu'):  # a torch tensor
            src = src.detach().cpu()
        return _np().asarray(src, dtype=_np().float32)


def _dumps(spec, what):
    """spec as JSON text: NumPy scalars and arrays (np.float32(0.1),
    np.array([0.9, 0.999])) as numbers and lists; NaN and infinity refused
    (InvalidArgumentError naming `what`), as JSON has neither."""
    def value(v):
        if hasattr(v, 'item') and getattr(v, 'ndim', None) == 0:
            return v.item()
        if hasattr(v, 'tolist') and hasattr(v, 'ndim'):
            return v.tolist()
        raise ArgumentTypeError(f'{what}: cannot be written as JSON: {type(v).__name__} {v!r} is not a JSON value')
    with _converting(f'{what}: cannot be written as JSON'):
        return _json.dumps(spec, default=value, allow_nan=False)


def _json_text(spec, what='config'):
    """A dict, list, JSON text (str) or UTF-8 JSON bytes as JSON text."""
    if isinstance(spec, (dict, list)):
        return _dumps(spec, what)
    if isinstance(spec, bytes):
        try:
            return spec.decode()
        except UnicodeDecodeError as e:
            raise JSONError(f'{what}: the JSON bytes are not UTF-8: {e}') from e
    if isinstance(spec, str):
        return spec
    raise ArgumentTypeError(f'{what} must be a dict, a list or JSON text, got {type(spec).__name__}')


class _Owner:
    """The base of every class that owns a libdp handle (self._h). Python's
    default copy.copy would give two objects one handle, each freeing it (a
    crash or freed memory read later), and pickle cannot carry it: both are
    refused with what to do instead (_copy_hint), unless the class defines
    its own __copy__ / __deepcopy__ (dp.Tensor, dp.Model)."""
    _copy_hint = ''

    def _refuse_copy(self, how):
        name = 'dp.' + type(self).__name__
        raise UnsupportedError(f'{how} of a {name}: it owns a libdp object that Python cannot copy'
                               + (f'; {self._copy_hint}' if self._copy_hint else ''))

    def __copy__(self):
        self._refuse_copy('copy.copy')

    def __deepcopy__(self, memo):
        self._refuse_copy('copy.deepcopy')

    def __reduce_ex__(self, protocol):
        self._refuse_copy('pickling')


# What must be destroyed before what (dp.h, "Lifetimes": a context outlives
# what is made from it, a model its groups, a group its optimizers, a dataset
# its loaders). Reference counting already frees them in that order, as each
# child holds its parent; a garbage collection of a reference cycle does not:
# it runs the finalizers of everything in the cycle in any order. So a parent
# whose children still hold their handles keeps its own until the last of
# them is destroyed, which then destroys it.
def _depends(child, *parents):
    """Records that child's handle must be destroyed before each parent's."""
    child._parents = tuple(p for p in parents if p is not None)
    for p in child._parents:
        p._children = getattr(p, '_children', 0) + 1


def _destroy(obj, fn):
    if getattr(obj, '_children', 0):  # the last child to go destroys it (_depends)
        obj._destroy_fn = fn
        return
    h = getattr(obj, '_h', None)
    obj._h = None
    if h is not None and h.value and fn is not None:
        fn(h)
    _release_parents(obj)


def _release_parents(obj):
    """After obj's handle is destroyed: each parent whose finalizer ran while obj
    held its handle is destroyed once no other child holds one."""
    parents, obj._parents = getattr(obj, '_parents', ()), ()
    for p in parents:
        p._children -= 1
        if not p._children and getattr(p, '_destroy_fn', None) is not None:
            _destroy(p, p._destroy_fn)


# safetensors, read and written here only around libdp's own files (state_dict,
# optimizer state): the format is an 8-byte little-endian header size, a JSON
# header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, and
# the tensors' bytes back to back.
_ST_DTYPES = {'F32': '<f4', 'I64': '<i8', 'F64': '<f8'}


def _st_read(path):
    """(tensors {name: array} in file order, metadata {str: str})."""
    np = _np()
    with open(path, 'rb') as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], 'little')
    header = _json.loads(raw[8:8 + n].decode())
    meta = header.pop('__metadata__', {}) or {}
    base, out = 8 + n, {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]['data_offsets'][0]):
        b, end = e['data_offsets']
        out[name] = np.frombuffer(raw, _ST_DTYPES[e['dtype']], (end - b) // np.dtype(_ST_DTYPES[e['dtype']]).itemsize,
                                  base + b).reshape(e['shape']).copy()
    return out, meta


def _st_write(path, tensors, metadata=None):
    """Writes {name: array} (float32 or int64, in order) as safetensors."""
    np = _np()
    header, blobs, at = {}, [], 0
    if metadata:
        header['__metadata__'] = {str(k): str(v) for k, v in metadata.items()}
    for name, a in tensors.items():
        a = np.asarray(a, order='C')  # 0-d stays 0-d (num_batches_tracked: shape [], as torch writes it)
        code = {'float32': 'F32', 'int64': 'I64', 'float64': 'F64'}[a.dtype.name]
        b = a.astype(_ST_DTYPES[code], copy=False).tobytes()
        header[name] = {'dtype': code, 'shape': list(a.shape), 'data_offsets': [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    text = _json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    with open(path, 'wb') as f:
        f.write(len(text).to_bytes(8, 'little'))
        f.write(text)
        for b in blobs:
            f.write(b)
