"""dp.Tensor and the ways to make one: copies (tensor, zeros) and views of
the caller's memory (from_numpy, as_tensor, from_dlpack; DLPack's structs and
capsules are in _dlpack.py)."""
import ctypes
import math
import weakref

from . import _dlpack
from . import _lib
from ._context import _ctx
from ._errors import ArgumentTypeError, DLPackError, InvalidArgumentError, ShapeError, UnsupportedError, _check
from ._util import _Owner, _converting, _destroy, _np, _np_or_none, _shape_in, _shape_out

HAVE_ZERO_COPY = not ({'dp_tensor_from_host_borrowed', 'dp_tensor_data'} & set(_lib.missing))

_DTYPES = {0: 'float32', 1: 'int64'}
_CODES = {'float32': 0, 'int64': 1}
_TYPESTR = {'float32': '<f4', 'int64': '<i8'}
_ITEMSIZE = {'float32': 4, 'int64': 8}


def _dtype_name(dtype):
    if dtype is None:
        return None
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype in _DTYPES:
            return _DTYPES[dtype]
        raise ArgumentTypeError(f'dp tensors are float32 or int64 (dtype codes 0 and 1), not code {dtype}')
    name = getattr(dtype, 'name', None) or str(dtype)
    if name in ('float32', 'float', 'f4', '<f4'):
        return 'float32'
    if name in ('int64', 'long', 'i8', '<i8'):
        return 'int64'
    try:
        name = _np().dtype(dtype).name
    except Exception:
        pass
    if name in _CODES:
        return name
    raise ArgumentTypeError(f'dp tensors are float32 or int64, not {dtype!r}')


class _Export:
    """The base of a NumPy array viewing a dp tensor: keeps the tensor alive
    and lets the tensor know it is viewed (weakly)."""
    __slots__ = ('tensor', '_iface', '__weakref__')

    def __init__(self, tensor, iface):
        self.tensor = tensor
        self._iface = iface

    @property
    def __array_interface__(self):
        return self._iface


class Tensor(_Owner):
    """A dense row-major host tensor (float32 or int64) owned by libdp, or a
    borrowed view of the caller's memory (dp.from_numpy, dp.from_dlpack).

    Make one with dp.tensor (copies), dp.from_numpy / dp.as_tensor / dp.from_dlpack
    (view when possible) or dp.zeros."""

    def __init__(self, *args, **kwargs):
        raise ArgumentTypeError('make tensors with dp.tensor, dp.zeros, dp.from_numpy or dp.from_dlpack')

    @classmethod
    def _wrap(cls, handle, ctx, owner=None):
        t = object.__new__(cls)
        t._h = handle
        t._ctx = ctx
        t._owner = owner  # what a borrowed tensor views (kept alive with it)
        t._exports = weakref.WeakSet()
        return t

    def __del__(self):
        _destroy(self, _lib.tensor_destroy if _lib else None)

    # -- metadata
    @property
    def shape(self):
        return _shape_out(_lib.tensor_shape, self._h)

    @property
    def dtype(self):
        d = ctypes.c_int()
        _check(_lib.tensor_dtype(self._h, ctypes.byref(d)))
        return _DTYPES[d.value]

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.size * _ITEMSIZE[self.dtype]

    def __len__(self):
        s = self.shape
        if not s:
            raise ArgumentTypeError('len() of a 0-d tensor')
        return s[0]

    @property
    def data_ptr(self):
        """The address of the elements (dp_tensor_data), 0 when it has none."""
        if not HAVE_ZERO_COPY:
            raise UnsupportedError(f'{_lib.path} has no dp_tensor_data (an older library of the same ABI)')
        p = ctypes.c_void_p()
        _check(_lib.tensor_data(self._h, ctypes.byref(p)))
        return p.value or 0

    def pin_memory(self):
        """Moves the elements to page-locked memory (Tensor.pin_memory()): GPU
        groups copy it up without a staging copy. Needs a usable GPU."""
        _check(_lib.tensor_pin_memory(self._h))
        return self

    @property
    def is_borrowed(self):
        b = ctypes.c_int()
        _check(_lib.tensor_is_borrowed(self._h, ctypes.byref(b)))
        return bool(b.value)

    def __repr__(self):
        """As torch's: the values (summarised past 6 per dimension, 3 from each
        end), then shape, dtype and device; reads the elements in place."""
        if getattr(self, '_h', None) is None:
            return 'dp.Tensor(<destroyed>)'
        shape, dtype = self.shape, self.dtype
        tail = f'shape={shape}, dtype={dtype}, device=\'cpu\'{", borrowed" if self.is_borrowed else ""})'
        np = _np_or_none()
        if np is None:
            return 'dp.Tensor(' + tail
        a = self.numpy(copy=not HAVE_ZERO_COPY)
        try:
            if a.dtype.kind == 'f':
                text = np.array2string(a, separator=', ', threshold=6, edgeitems=3, precision=4,
                                       floatmode='maxprec_equal', prefix='dp.Tensor(')
            else:
                text = np.array2string(a, separator=', ', threshold=6, edgeitems=3, prefix='dp.Tensor(')
        finally:
            del a  # the view goes: the tensor is not counted as viewed (DataLoader may refill it)
        return f'dp.Tensor({text}, {tail}'

    __str__ = __repr__

    # -- NumPy out
    def numpy(self, copy=False):
        """A NumPy array of the contents: a view (no copy) that keeps this
        tensor alive, or a copy with copy=True."""
        np = _np()
        shape, dtype = self.shape, self.dtype
        if copy or not HAVE_ZERO_COPY:
            out = np.empty(shape, dtype)
            _check(_lib.tensor_copy_to_host(self._h, out.ctypes.data, out.nbytes))
            return out
        ptr = self.data_ptr
        if not ptr or math.prod(shape) == 0:
            return np.empty(shape, dtype)
        iface = {'shape': shape, 'typestr': _TYPESTR[dtype], 'data': (ptr, False), 'version': 3, 'strides': None}
        e = _Export(self, iface)
        self._exports.add(e)
        return np.asarray(e)

    def __array__(self, dtype=None, copy=None):
        a = self.numpy(copy=bool(copy))
        if dtype is None:
            return a
        with _converting(f'Tensor.__array__: dtype {dtype!r}'):
            return a.astype(dtype, copy=False)

    def tolist(self):
        return self.numpy(copy=True).tolist()

    def item(self):
        if self.size != 1:
            raise ShapeError(f'item() of a tensor of {self.size} elements (shape {list(self.shape)}); '
                             'it takes exactly one')
        return self.numpy(copy=True).reshape(()).item()

    # -- in
    def copy_(self, src):
        """Overwrites the contents from an array of the same size and dtype
        (dp_tensor_copy_from_host): no allocation."""
        np = _np()
        with _converting(f'Tensor.copy_: src ({type(src).__name__}) as {self.dtype}'):
            a = np.ascontiguousarray(src, dtype=self.dtype)
        _check(_lib.tensor_copy_from_host(self._h, a.ctypes.data, a.nbytes))
        return self

    def clone(self):
        """An owned copy."""
        return tensor(self.numpy(copy=True), ctx=self._ctx)

    def __deepcopy__(self, memo):
        """copy.deepcopy: an owned copy (clone)."""
        t = self.clone()
        memo[id(self)] = t
        return t

    def __copy__(self):
        """copy.copy: another dp.Tensor viewing the same elements (as a copy.copy
        of a torch tensor shares its storage); it keeps this one alive."""
        if not HAVE_ZERO_COPY:
            raise UnsupportedError(f'copy.copy of a dp.Tensor needs dp_tensor_data, which {_lib.path} lacks: '
                                   'use copy.deepcopy or clone()')
        return from_numpy(self.numpy(), ctx=self._ctx)

    # -- DLPack out
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream not in (None, -1):
            raise DLPackError(f'__dlpack__: dp tensors are host memory: stream must be None (or -1), not {stream!r}')
        if copy:
            return self.clone().__dlpack__()
        if dl_device is not None and tuple(dl_device) != (_dlpack.kDLCPU, 0):
            raise DLPackError(f'__dlpack__: dp tensors are on the CPU (DLPack device ({_dlpack.kDLCPU}, 0)), '
                              f'not on DLPack device {tuple(dl_device)}')
        holder = _Export(self, None)  # counted as a view while a consumer holds it
        self._exports.add(holder)
        return _dlpack.export(holder, self.data_ptr, self.dtype, self.shape)

    def __dlpack_device__(self):
        return (_dlpack.kDLCPU, 0)


def _flatten(data):
    """Nested lists/tuples of numbers: (flat list, shape)."""
    if isinstance(data, (list, tuple)):
        parts = [_flatten(d) for d in data]
        inner = parts[0][1] if parts else ()
        if any(p[1] != inner for p in parts):
            raise ShapeError(f'dp.tensor: ragged nested sequence: sub-sequences of shapes '
                             f'{sorted({p[1] for p in parts})} at one level')
        return [v for p in parts for v in p[0]], (len(parts),) + inner
    return [data], ()


def _tensor_from_sequence(data, dtype, ctx):
    flat, shape = _flatten(data)
    name = _dtype_name(dtype) or ('int64' if all(isinstance(v, int) for v in flat) and flat else 'float32')
    with _converting(f'dp.tensor: a nested sequence of numbers as {name}'):
        buf = ((ctypes.c_float if name == 'float32' else ctypes.c_int64) * max(len(flat), 1))(*flat)
    c = _ctx(ctx)
    nd, shp = _shape_in(shape)
    h = ctypes.c_void_p()
    _check(_lib.tensor_from_host(c._h, _CODES[name], buf, nd, shp, ctypes.byref(h)))
    return Tensor._wrap(h, c)


def tensor(data, dtype=None, ctx=None):
    """A new tensor holding a copy of data (anything numpy.asarray takes;
    nested lists of numbers without NumPy); dtype float32 or int64, by default
    float32 for floats, int64 for integers."""
    if isinstance(data, Tensor):
        data = data.numpy()
    np = _np_or_none()
    if np is None:
        return _tensor_from_sequence(data, dtype, ctx)
    with _converting(f'dp.tensor: {type(data).__name__} as an array'):
        a = np.asarray(data)
    if a.dtype.kind == 'O':  # NumPy keeps Python ints past int64 as objects: they became float32 silently
        big = next((v for v in a.flat if isinstance(v, int) and not -(1 << 63) <= v < (1 << 63)), None)
        if big is not None:
            raise InvalidArgumentError(f'dp.tensor: the integer {big} does not fit int64 (torch.tensor raises '
                                       'too); give floats (float(x)) for float32')
    name = _dtype_name(dtype) or ('int64' if a.dtype.kind in 'iub' else 'float32')
    with _converting(f'dp.tensor: {type(data).__name__} of dtype {a.dtype} as {name}'):
        a = np.asarray(a, dtype=name, order='C')  # (ascontiguousarray would make a 0-d array 1-d)
    c = _ctx(ctx)
    nd, shp = _shape_in(a.shape)
    h = ctypes.c_void_p()
    _check(_lib.tensor_from_host(c._h, _CODES[name], a.ctypes.data if a.size else None, nd, shp, ctypes.byref(h)))
    return Tensor._wrap(h, c)


def zeros(shape, dtype='float32', ctx=None):
    """A new zero-filled tensor."""
    if hasattr(shape, '__index__'):
        shape = (shape,)
    c = _ctx(ctx)
    nd, shp = _shape_in(shape, 'dp.zeros: shape')
    h = ctypes.c_void_p()
    _check(_lib.tensor_create(c._h, _CODES[_dtype_name(dtype) or 'float32'], nd, shp, ctypes.byref(h)))
    return Tensor._wrap(h, c)


def _viewable(a, np):
    return (a.dtype in (np.float32, np.int64) and a.flags.c_contiguous and a.flags.aligned and a.flags.writeable
            and a.dtype.byteorder in '=<|' and a.ctypes.data != 0)


def from_numpy(array, ctx=None):
    """A tensor viewing a NumPy array's memory (no copy; as torch.from_numpy):
    writes through either show in the other. The tensor keeps the array
    alive. The array must be float32 or int64 (else dp.ArgumentTypeError, a
    TypeError), C-contiguous, aligned and writeable (else
    dp.InvalidArgumentError, a ValueError; dp.tensor copies instead). A
    borrowed tensor cannot be resized: DataLoader never fills one."""
    np = _np()
    if not isinstance(array, np.ndarray):
        raise ArgumentTypeError(f'dp.from_numpy takes a numpy.ndarray, not {type(array).__name__} '
                                '(dp.tensor and dp.as_tensor take anything numpy.asarray takes)')
    if array.dtype not in (np.float32, np.int64):
        raise ArgumentTypeError(f'dp.from_numpy: dtype {array.dtype} is not float32 or int64 '
                                '(dp.tensor converts, copying)')
    if not _viewable(array, np):
        raise InvalidArgumentError('dp.from_numpy: the array is not C-contiguous, aligned, native-endian and '
                                   'writeable (dp.tensor copies it)')
    if not HAVE_ZERO_COPY:
        raise UnsupportedError(f'{_lib.path} has no dp_tensor_from_host_borrowed (an older library of the same '
                               'ABI); dp.tensor copies instead')
    c = _ctx(ctx)
    nd, shp = _shape_in(array.shape)
    h = ctypes.c_void_p()
    _check(_lib.tensor_from_host_borrowed(c._h, _CODES[array.dtype.name], array.ctypes.data, nd, shp, None, None,
                                          ctypes.byref(h)))
    return Tensor._wrap(h, c, owner=array)


def as_tensor(x, dtype=None, ctx=None):
    """x as a dp tensor without copying where possible: a dp Tensor as is, a
    suitable NumPy array viewed (from_numpy), a DLPack producer's suitable
    host tensor (PyTorch's, JAX's) viewed (from_dlpack), anything else
    copied. A torch tensor that requires grad is refused: dp does not take
    part in torch's autograd (pass x.detach())."""
    if isinstance(x, Tensor):
        if dtype is not None and _dtype_name(dtype) != x.dtype:
            return tensor(x.numpy(), dtype=dtype, ctx=ctx)
        return x
    if getattr(x, 'requires_grad', False) is True and hasattr(x, 'detach'):
        raise ArgumentTypeError(f'a {type(x).__name__} that requires grad: dp does not take part in torch\'s '
                                'autograd, so no gradient would reach it; pass x.detach()')
    np = _np_or_none()
    if (HAVE_ZERO_COPY and hasattr(x, '__dlpack__') and not (np is not None and isinstance(x, np.ndarray))
            and _dlpack_dtype(x) is not None and (dtype is None or _dtype_name(dtype) == _dlpack_dtype(x))):
        try:
            return from_dlpack(x, ctx)
        except Exception:  # noqa: B902 (not viewable: strides, device, a producer's refusal): copied below
            pass
    if np is None:
        return tensor(x, dtype=dtype, ctx=ctx)
    if isinstance(x, np.ndarray) and HAVE_ZERO_COPY and _viewable(x, np) and (
            dtype is None or _dtype_name(dtype) == x.dtype.name):
        return from_numpy(x, ctx)
    if dtype is None and isinstance(x, np.ndarray) and x.dtype.kind == 'f':
        dtype = 'float32'
    return tensor(x, dtype=dtype, ctx=ctx)


def _dlpack_dtype(x):
    """x.dtype's name as dp's ("float32", "int64") where it is one of them
    (NumPy's and PyTorch's dtypes name themselves so: torch.float32)."""
    name = str(getattr(x, 'dtype', '')).replace('torch.', '')
    return name if name in ('float32', 'int64') else None


def from_dlpack(x, ctx=None):
    """A tensor viewing any DLPack producer's host memory (NumPy >= 1.22,
    PyTorch, JAX, CuPy host arrays, dp tensors): no copy. The producer's memory
    stays alive until the dp tensor is destroyed (then dp calls the producer's
    deleter). float32 or int64, row-major contiguous, on the CPU; else
    dp.DLPackError (a BufferError)."""
    if not HAVE_ZERO_COPY:
        raise UnsupportedError(f'{_lib.path} has no dp_tensor_from_host_borrowed (an older library of the same '
                               'ABI); dp.tensor copies instead')
    c = _ctx(ctx)
    capsule, managed, dtype, shape, data, m = _dlpack.consume(x)
    nd, shp = _shape_in(shape)
    h = ctypes.c_void_p()
    if not data or math.prod(shape) == 0:  # nothing to view: an owned empty tensor; the capsule frees x's
        _check(_lib.tensor_create(c._h, _CODES[dtype], nd, shp, ctypes.byref(h)))
        return Tensor._wrap(h, c)
    deleter = ctypes.cast(m.deleter, ctypes.c_void_p).value
    _check(_lib.tensor_from_host_borrowed(c._h, _CODES[dtype], data, nd, shp, deleter, managed, ctypes.byref(h)))
    _dlpack.mark_used(capsule)  # from here dp's dp_tensor_destroy calls the deleter
    # Without a deleter the producer object itself is kept alive.
    return Tensor._wrap(h, c, owner=None if deleter else x)
