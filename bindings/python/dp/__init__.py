"""dp: data-parallel training (PyTorch's nn.DataParallel) through libdp's C ABI.

    import dp
    model = dp.Model("examples/fashion_mnist_mlp.json")
    net = dp.DataParallel(model, devices="auto")          # replicas persist
    opt = dp.SGD(net, lr=0.05, momentum=0.9)
    train = dp.FashionMNIST(train=True)
    for x, y in dp.DataLoader(train, batch_size=64, shuffle=True, num_workers=2):
        loss = net.train_step(opt, x, y)      # zero_grad, forward, loss, backward, step

Pure Python over ctypes (no compiled extension): any libdp.so of ABI version
1 serves it (see _lib.py for how it is found; DP_LIBRARY names one).
NumPy is optional for the core and needed for arrays in and out.

Zero copy: dp.from_numpy(a) and dp.from_dlpack(x) view the caller's memory
(the dp tensor keeps it alive); Tensor.numpy(), numpy.asarray(t) and
Tensor.__dlpack__ view the dp tensor's (the array keeps the tensor alive).
"""
import atexit
import ctypes
import json as _json
import math
import os
import sys
import threading
import weakref

from . import _lib
from . import _dlpack

__all__ = ['Error', 'InvalidArgumentError', 'JSONError', 'ModelError', 'ShapeError', 'DeviceError',
           'NumericError', 'OutOfMemoryError', 'PluginError', 'InternalError', 'Context', 'default_context',
           'load_plugin', 'Model', 'Tensor', 'tensor', 'zeros', 'from_numpy', 'as_tensor', 'from_dlpack',
           'DataParallel', 'Group', 'Optimizer', 'SGD', 'Adam', 'AdamW', 'Dataset', 'FashionMNIST', 'DataLoader',
           'save_checkpoint', 'load_checkpoint', 'checkpoint_metadata', 'version', 'library_path']

ABI_VERSION = _lib.ABI_VERSION
library_path = _lib.path
HAVE_ZERO_COPY = not ({'dp_tensor_from_host_borrowed', 'dp_tensor_data'} & set(_lib.missing))


def version():
    """libdp's version string ("0.1.0")."""
    return _lib.version().decode()


def device_count(kind='cuda'):
    """Devices of a kind ("cpu": cores; "cuda": usable GPUs, 0 without a CUDA
    build or GPU: device_count_why() says which)."""
    n, why = ctypes.c_int(), ctypes.c_char_p()
    _check(_lib.device_count(kind.encode(), ctypes.byref(n), ctypes.byref(why)))
    return n.value


def device_count_why(kind='cuda'):
    """Why there are no devices of `kind` ("" when there are)."""
    n, why = ctypes.c_int(), ctypes.c_char_p()
    _check(_lib.device_count(kind.encode(), ctypes.byref(n), ctypes.byref(why)))
    return (why.value or b'').decode()


def device_name(kind, index):
    """device_name('cuda', 0) -> 'NVIDIA H200, 139.8 GiB, compute capability 9.0'."""
    name = ctypes.c_char_p()
    _check(_lib.device_name(kind.encode(), int(index), ctypes.byref(name)))
    return name.value.decode()


__version__ = version()

# ---------------------------------------------------------------- errors


class Error(Exception):
    """A failed dp call: .status (int, dp_status), .status_name
    ("DP_ERR_MODEL") and .message (dp_last_error(): what and where)."""
    status = None

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message
        self.status_name = _lib.status_name(status).decode()

    def __repr__(self):
        return f'{type(self).__name__}({self.status_name}: {self.message!r})'

    def __reduce__(self):
        return type(self), (self.status, self.message)


class InvalidArgumentError(Error, ValueError):
    """DP_ERR_INVALID_ARGUMENT"""


class JSONError(Error, ValueError):
    """DP_ERR_JSON: text that is not JSON"""


class ModelError(Error, ValueError):
    """DP_ERR_MODEL: JSON that is not a valid model or config (the message has the JSON path)"""


class ShapeError(Error, ValueError):
    """DP_ERR_SHAPE"""


class IOError(Error):  # noqa: A001 (dp.IOError; not in __all__, so `from dp import *` keeps the builtin)
    """DP_ERR_IO: a file that cannot be read or written, or a damaged one"""


class DeviceError(Error):
    """DP_ERR_DEVICE"""


class NumericError(Error, ArithmeticError):
    """DP_ERR_NUMERIC: a NaN or infinite loss (the parameters are unchanged)"""


class OutOfMemoryError(Error, MemoryError):
    """DP_ERR_OUT_OF_MEMORY"""


class PluginError(Error):
    """DP_ERR_PLUGIN"""


class InternalError(Error):
    """DP_ERR_INTERNAL: a bug in dp"""


_ERRORS = {1: InvalidArgumentError, 2: JSONError, 3: ModelError, 4: ShapeError, 5: IOError, 6: DeviceError,
           7: NumericError, 8: OutOfMemoryError, 9: PluginError, 10: InternalError}
for _s, _c in _ERRORS.items():
    _c.status = _s


def _check(status):
    if status:
        raise _ERRORS.get(status, Error)(status, _lib.last_error().decode('utf-8', 'replace'))


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


def _path(p):
    return os.fsencode(os.fspath(p))


def _json_text(spec):
    if isinstance(spec, (dict, list)):
        return _json.dumps(spec)
    if isinstance(spec, bytes):
        return spec.decode()
    return spec

# ---------------------------------------------------------------- context


class Context:
    """Holds the layer registry and loaded plugins. Everything made from a
    context keeps it alive (a reference), so it is freed last."""

    def __init__(self):
        h = ctypes.c_void_p()
        _check(_lib.context_create(ctypes.byref(h)))
        self._h = h

    def load_plugin(self, path):
        """Loads a layer plugin (dp_context_load_plugin): a path with '/', or a
        bare name searched in DP_PLUGIN_PATH."""
        _check(_lib.context_load_plugin(self._h, _path(path)))
        return self

    @property
    def plugins(self):
        """[(path, ["swish@1", ...])] in load order."""
        n = ctypes.c_int()
        _check(_lib.context_num_plugins(self._h, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            p, t = ctypes.c_char_p(), ctypes.c_char_p()
            _check(_lib.context_plugin_info(self._h, i, ctypes.byref(p), ctypes.byref(t)))
            out.append((p.value.decode(), [s for s in t.value.decode().split(',') if s]))
        return out

    def __del__(self):
        _destroy(self, _lib.context_destroy if _lib else None)


def _destroy(obj, fn):
    h = getattr(obj, '_h', None)
    obj._h = None
    if h is not None and h.value and fn is not None:
        fn(h)


_default = None
_default_lock = threading.Lock()


def default_context():
    """The context used when none is given (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Context()
        return _default


def load_plugin(path, ctx=None):
    """Loads a plugin into ctx (default: the default context)."""
    return (ctx or default_context()).load_plugin(path)

# ---------------------------------------------------------------- tensors


_DTYPES = {0: 'float32', 1: 'int64'}
_CODES = {'float32': 0, 'int64': 1}
_TYPESTR = {'float32': '<f4', 'int64': '<i8'}
_ITEMSIZE = {'float32': 4, 'int64': 8}


def _dtype_name(dtype):
    if dtype is None:
        return None
    if isinstance(dtype, int):
        return _DTYPES[dtype]
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
    raise TypeError(f'dp tensors are float32 or int64, not {dtype!r}')


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


class Tensor:
    """A dense row-major host tensor (float32 or int64) owned by libdp, or a
    borrowed view of the caller's memory (dp.from_numpy, dp.from_dlpack).

    Make one with dp.tensor (copies), dp.from_numpy / dp.as_tensor / dp.from_dlpack
    (view when possible) or dp.zeros."""

    def __init__(self, *args, **kwargs):
        raise TypeError('make tensors with dp.tensor, dp.zeros, dp.from_numpy or dp.from_dlpack')

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
            raise TypeError('len() of a 0-d tensor')
        return s[0]

    @property
    def data_ptr(self):
        """The address of the elements (dp_tensor_data), 0 when it has none."""
        if not HAVE_ZERO_COPY:
            raise NotImplementedError('this libdp has no dp_tensor_data (an older library of the same ABI)')
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
        return f'dp.Tensor(shape={self.shape}, dtype={self.dtype}{", borrowed" if self.is_borrowed else ""})'

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
        return a if dtype is None else a.astype(dtype, copy=False)

    def tolist(self):
        return self.numpy(copy=True).tolist()

    def item(self):
        if self.size != 1:
            raise ValueError(f'item() of a tensor of {self.size} elements')
        return self.numpy(copy=True).reshape(()).item()

    # -- in
    def copy_(self, src):
        """Overwrites the contents from an array of the same size and dtype
        (dp_tensor_copy_from_host): no allocation."""
        np = _np()
        a = np.ascontiguousarray(src, dtype=self.dtype)
        _check(_lib.tensor_copy_from_host(self._h, a.ctypes.data, a.nbytes))
        return self

    def clone(self):
        """An owned copy."""
        return tensor(self.numpy(copy=True), ctx=self._ctx)

    # -- DLPack out
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream not in (None, -1):
            raise BufferError('dp tensors are host memory: stream must be None')
        if copy:
            return self.clone().__dlpack__()
        if dl_device is not None and tuple(dl_device) != (_dlpack.kDLCPU, 0):
            raise BufferError(f'dp tensors are on the CPU, not on DLPack device {tuple(dl_device)}')
        holder = _Export(self, None)  # counted as a view while a consumer holds it
        self._exports.add(holder)
        return _dlpack.export(holder, self.data_ptr, self.dtype, self.shape)

    def __dlpack_device__(self):
        return (_dlpack.kDLCPU, 0)


def _ctx(ctx):
    return ctx or default_context()


def _np_or_none():
    try:
        import numpy
        return numpy
    except ImportError:
        return None


def _flatten(data):
    """Nested lists/tuples of numbers: (flat list, shape)."""
    if isinstance(data, (list, tuple)):
        parts = [_flatten(d) for d in data]
        inner = parts[0][1] if parts else ()
        if any(p[1] != inner for p in parts):
            raise ValueError('dp.tensor: ragged nested sequence')
        return [v for p in parts for v in p[0]], (len(parts),) + inner
    return [data], ()


def _tensor_from_sequence(data, dtype, ctx):
    flat, shape = _flatten(data)
    name = _dtype_name(dtype) or ('int64' if all(isinstance(v, int) for v in flat) and flat else 'float32')
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
    a = np.asarray(data)
    name = _dtype_name(dtype) or ('int64' if a.dtype.kind in 'iub' else 'float32')
    a = np.ascontiguousarray(a, dtype=name)
    c = _ctx(ctx)
    nd, shp = _shape_in(a.shape)
    h = ctypes.c_void_p()
    _check(_lib.tensor_from_host(c._h, _CODES[name], a.ctypes.data if a.size else None, nd, shp, ctypes.byref(h)))
    return Tensor._wrap(h, c)


def zeros(shape, dtype='float32', ctx=None):
    """A new zero-filled tensor."""
    if isinstance(shape, int):
        shape = (shape,)
    c = _ctx(ctx)
    nd, shp = _shape_in(shape)
    h = ctypes.c_void_p()
    _check(_lib.tensor_create(c._h, _CODES[_dtype_name(dtype)], nd, shp, ctypes.byref(h)))
    return Tensor._wrap(h, c)


def _viewable(a, np):
    return (a.dtype in (np.float32, np.int64) and a.flags.c_contiguous and a.flags.aligned and a.flags.writeable
            and a.dtype.byteorder in '=<|' and a.ctypes.data != 0)


def from_numpy(array, ctx=None):
    """A tensor viewing a NumPy array's memory (no copy; as torch.from_numpy):
    writes through either show in the other. The tensor keeps the array
    alive. The array must be float32 or int64, C-contiguous, aligned and
    writeable (else TypeError / ValueError; dp.tensor copies instead). A
    borrowed tensor cannot be resized: DataLoader never fills one."""
    np = _np()
    if not isinstance(array, np.ndarray):
        raise TypeError(f'dp.from_numpy takes a numpy.ndarray, not {type(array).__name__}')
    if array.dtype not in (np.float32, np.int64):
        raise TypeError(f'dp.from_numpy: dtype {array.dtype} is not float32 or int64 (dp.tensor converts, copying)')
    if not _viewable(array, np):
        raise ValueError('dp.from_numpy: the array is not C-contiguous, aligned, native-endian and writeable '
                         '(dp.tensor copies it)')
    if not HAVE_ZERO_COPY:
        raise NotImplementedError('this libdp has no dp_tensor_from_host_borrowed (an older library of the same ABI)')
    c = _ctx(ctx)
    nd, shp = _shape_in(array.shape)
    h = ctypes.c_void_p()
    _check(_lib.tensor_from_host_borrowed(c._h, _CODES[array.dtype.name], array.ctypes.data, nd, shp, None, None,
                                          ctypes.byref(h)))
    return Tensor._wrap(h, c, owner=array)


def as_tensor(x, dtype=None, ctx=None):
    """x as a dp tensor without copying where possible: a dp Tensor as is, a
    suitable NumPy array viewed (from_numpy), anything else copied."""
    if isinstance(x, Tensor):
        if dtype is not None and _dtype_name(dtype) != x.dtype:
            return tensor(x.numpy(), dtype=dtype, ctx=ctx)
        return x
    np = _np_or_none()
    if np is None:
        return tensor(x, dtype=dtype, ctx=ctx)
    if isinstance(x, np.ndarray) and HAVE_ZERO_COPY and _viewable(x, np) and (
            dtype is None or _dtype_name(dtype) == x.dtype.name):
        return from_numpy(x, ctx)
    if dtype is None and isinstance(x, np.ndarray) and x.dtype.kind == 'f':
        dtype = 'float32'
    return tensor(x, dtype=dtype, ctx=ctx)


def from_dlpack(x, ctx=None):
    """A tensor viewing any DLPack producer's host memory (NumPy >= 1.22,
    PyTorch, JAX, CuPy host arrays, dp tensors): no copy. The producer's memory
    stays alive until the dp tensor is destroyed (then dp calls the producer's
    deleter). float32 or int64, row-major contiguous, on the CPU; else
    BufferError."""
    if not HAVE_ZERO_COPY:
        raise NotImplementedError('this libdp has no dp_tensor_from_host_borrowed (an older library of the same ABI)')
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

# ---------------------------------------------------------------- models


def _is_json_text(s):
    return isinstance(s, (str, bytes)) and s.lstrip()[:1] in ('{', b'{')


class Model:
    """A model built from JSON (docs/model-format.md): a dict, JSON text, or
    a file path (str or os.PathLike; plugin paths in it are relative to it)."""

    def __init__(self, spec, ctx=None):
        c = _ctx(ctx)
        h = ctypes.c_void_p()
        if isinstance(spec, (dict, list)) or _is_json_text(spec):
            _check(_lib.model_from_json(c._h, _json_text(spec).encode(), ctypes.byref(h)))
        else:
            _check(_lib.model_from_file(c._h, _path(spec), ctypes.byref(h)))
        self._h, self._ctx = h, c

    @classmethod
    def from_json(cls, text, ctx=None):
        m = object.__new__(cls)
        c = _ctx(ctx)
        h = ctypes.c_void_p()
        _check(_lib.model_from_json(c._h, _json_text(text).encode(), ctypes.byref(h)))
        m._h, m._ctx = h, c
        return m

    @classmethod
    def from_file(cls, path, ctx=None):
        m = object.__new__(cls)
        c = _ctx(ctx)
        h = ctypes.c_void_p()
        _check(_lib.model_from_file(c._h, _path(path), ctypes.byref(h)))
        m._h, m._ctx = h, c
        return m

    def __del__(self):
        _destroy(self, _lib.model_destroy if _lib else None)

    @property
    def num_parameters(self):
        n = ctypes.c_int64()
        _check(_lib.model_num_parameters(self._h, ctypes.byref(n)))
        return n.value

    def parameters(self):
        """All parameters (float32, declaration order) as one flat array (a copy)."""
        np = _np()
        out = np.empty(self.num_parameters, np.float32)
        _check(_lib.model_copy_parameters(self._h, out.ctypes.data, out.size))
        return out

    def set_parameters(self, values):
        np = _np()
        a = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        _check(_lib.model_set_parameters(self._h, a.ctypes.data, a.size))

    def gradients(self):
        np = _np()
        out = np.empty(self.num_parameters, np.float32)
        _check(_lib.model_copy_gradients(self._h, out.ctypes.data, out.size))
        return out

    def buffers(self):
        """Buffers (batch-norm running statistics) as one flat array (a copy)."""
        np = _np()
        n = ctypes.c_int64()
        _check(_lib.model_num_buffers(self._h, ctypes.byref(n)))
        out = np.empty(n.value, np.float32)
        _check(_lib.model_copy_buffers(self._h, out.ctypes.data if n.value else None, out.size))
        return out

    def parameter_info(self):
        """[(name, shape)] as nn.Sequential names them ("0.weight")."""
        n = ctypes.c_int()
        _check(_lib.model_num_parameter_tensors(self._h, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            name, nd = ctypes.c_char_p(), ctypes.c_int()
            shp = (ctypes.c_int64 * _lib.MAX_DIMS)()
            _check(_lib.model_parameter_info(self._h, i, ctypes.byref(name), ctypes.byref(nd), shp))
            out.append((name.value.decode(), tuple(shp[:nd.value])))
        return out

    def named_parameters(self):
        """{name: array} (copies), in declaration order."""
        flat, out, at = self.parameters(), {}, 0
        for name, shape in self.parameter_info():
            n = math.prod(shape)
            out[name] = flat[at:at + n].reshape(shape)
            at += n
        return out

    @property
    def input_shape(self):
        return _shape_out(_lib.model_input_shape, self._h)

    @property
    def output_shape(self):
        return _shape_out(_lib.model_output_shape, self._h)

    def load_safetensors(self, path):
        _check(_lib.model_load_safetensors(self._h, _path(path)))

    def save_safetensors(self, path):
        _check(_lib.model_save_safetensors(self._h, _path(path)))

# ---------------------------------------------------------------- groups


def _devices(devices):
    if devices is None or devices == 'auto':  # every GPU when there is one, as nn.DataParallel
        gpus = device_count('cuda')
        if gpus:
            return ','.join(f'cuda:{i}' for i in range(gpus))
        return ','.join(f'cpu:{i}' for i in range(os.cpu_count() or 1))
    if isinstance(devices, int):
        return ','.join(f'cpu:{i}' for i in range(devices))
    if not isinstance(devices, str):
        return ','.join(str(d) for d in devices)
    return devices


class DataParallel:
    """nn.DataParallel over a list of devices: "auto" (one CPU device per
    core), "cpu:0,cpu:1", a list of names, or a count. Calling it runs the
    forward pass (scatter, parallel replicas, gather)."""

    def __init__(self, model, devices='auto'):
        if not isinstance(model, Model):
            model = Model(model)
        h = ctypes.c_void_p()
        _check(_lib.group_create(model._h, _devices(devices).encode(), ctypes.byref(h)))
        self._h, self.model, self._ctx = h, model, model._ctx
        self.training = True

    def __del__(self):
        _destroy(self, _lib.group_destroy if _lib else None)

    @property
    def num_devices(self):
        n = ctypes.c_int()
        _check(_lib.group_num_devices(self._h, ctypes.byref(n)))
        return n.value

    def set_split(self, mode):
        """"chunk" (torch.chunk's rule, the default) or "balanced"."""
        _check(_lib.group_set_option(self._h, 0, {'chunk': 0, 'balanced': 1}[mode]))
        return self

    def set_threads_per_device(self, n):
        _check(_lib.group_set_option(self._h, 1, int(n)))
        return self

    def set_allow_tf32(self, allow=True):
        """Lets GPU matrix products and convolutions use TF32 (off by default)."""
        _check(_lib.group_set_option(self._h, 2, 1 if allow else 0))
        return self

    def set_cudnn_benchmark(self, on=True):
        """cuDNN times convolution algorithms once per shape (cudnn.benchmark)."""
        _check(_lib.group_set_option(self._h, 3, 1 if on else 0))
        return self

    def train(self, mode=True):
        _check(_lib.group_set_training(self._h, 1 if mode else 0))
        self.training = bool(mode)
        return self

    def eval(self):
        return self.train(False)

    def forward(self, x):
        xt = as_tensor(x, 'float32', ctx=self._ctx)
        h = ctypes.c_void_p()
        _check(_lib.group_forward(self._h, xt._h, ctypes.byref(h)))
        return Tensor._wrap(h, self._ctx)

    __call__ = forward

    def backward(self, grad_output):
        g = as_tensor(grad_output, 'float32', ctx=self._ctx)
        _check(_lib.group_backward(self._h, g._h))

    def zero_grad(self):
        _check(_lib.group_zero_grad(self._h))

    def last_split(self):
        """The rows each device ran in the last forward or train step."""
        sizes = (ctypes.c_int64 * 1024)()
        n = ctypes.c_int()
        _check(_lib.group_last_split(self._h, sizes, 1024, ctypes.byref(n)))
        return list(sizes[:n.value])

    def _target(self, y):
        if isinstance(y, Tensor):
            return y
        np = _np_or_none()
        if np is None:
            return tensor(y, ctx=self._ctx)
        a = np.asarray(y)
        return as_tensor(a, 'int64' if a.dtype.kind in 'iub' else 'float32', ctx=self._ctx)

    def train_step(self, optimizer, x, y):
        """zero_grad, forward, the model's loss, backward, optimizer step; the
        batch loss (a float). x float32 [B, ...]; y int64 class indices [B]
        (cross_entropy) or float32 of the output's shape (mse)."""
        loss = ctypes.c_float()
        xt, yt = as_tensor(x, 'float32', ctx=self._ctx), self._target(y)
        _check(_lib.group_train_step(self._h, optimizer._h, xt._h, yt._h, ctypes.byref(loss)))
        return loss.value

    def evaluate(self, x, y):
        """(loss, correct): the model's loss without training, and the rows
        whose arg-max is the target (cross_entropy)."""
        loss, correct = ctypes.c_float(), ctypes.c_int64()
        xt, yt = as_tensor(x, 'float32', ctx=self._ctx), self._target(y)
        _check(_lib.group_evaluate(self._h, xt._h, yt._h, ctypes.byref(loss), ctypes.byref(correct)))
        return loss.value, correct.value


Group = DataParallel

# ---------------------------------------------------------------- optimizers


class Optimizer:
    """An optimizer over a group's model from a config (dict or JSON):
    {"type": "sgd" | "adam" | "adamw", "lr": ..., ...} with PyTorch's names."""

    def __init__(self, group, config):
        h = ctypes.c_void_p()
        _check(_lib.optimizer_create(group._h, _json_text(config).encode(), ctypes.byref(h)))
        self._h, self.group = h, group

    def __del__(self):
        _destroy(self, _lib.optimizer_destroy if _lib else None)

    def step(self):
        _check(_lib.optimizer_step(self._h))

    def zero_grad(self):
        self.group.zero_grad()

    @property
    def lr(self):
        v = ctypes.c_double()
        _check(_lib.optimizer_lr(self._h, ctypes.byref(v)))
        return v.value

    @lr.setter
    def lr(self, value):
        _check(_lib.optimizer_set_lr(self._h, float(value)))


def _opt_class(kind, doc):
    def __init__(self, group, lr, **kwargs):
        Optimizer.__init__(self, group, dict(type=kind, lr=lr, **kwargs))
    return type(kind.upper() if kind == 'sgd' else {'adam': 'Adam', 'adamw': 'AdamW'}[kind], (Optimizer,),
                {'__init__': __init__, '__doc__': doc})


SGD = _opt_class('sgd', 'SGD(group, lr, momentum=0, dampening=0, nesterov=False, weight_decay=0)')
Adam = _opt_class('adam', 'Adam(group, lr, betas=[0.9, 0.999], eps=1e-8, weight_decay=0)')
AdamW = _opt_class('adamw', 'AdamW(group, lr, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01)')

# ---------------------------------------------------------------- data


def _callback_get_item(fn, sample_shape, target_dtype, target_shape):
    np = _np()
    n_in = math.prod(sample_shape)
    n_t = math.prod(target_shape)

    def get_item(user, index, inp, tgt, err, cap):
        try:
            x, y = fn(index)
            xa = np.ascontiguousarray(x, dtype=np.float32)
            if xa.size != n_in:
                raise ValueError(f'input has {xa.size} values, the sample shape {list(sample_shape)} {n_in}')
            ctypes.memmove(inp, xa.ctypes.data, n_in * 4)
            if target_dtype == 'int64':
                ctypes.c_int64.from_address(tgt).value = int(y)
            else:
                ya = np.ascontiguousarray(y, dtype=np.float32)
                if ya.size != n_t:
                    raise ValueError(f'target has {ya.size} values, the target shape {list(target_shape)} {n_t}')
                ctypes.memmove(tgt, ya.ctypes.data, n_t * 4)
            return 0
        except BaseException as e:  # noqa: B902 (reported through the batch, as PyTorch does)
            msg = f'{type(e).__name__}: {e}'.encode('utf-8', 'replace')[:max(int(cap) - 1, 0)]
            if cap:
                ctypes.memmove(err, msg + b'\0', len(msg) + 1)
            return 1
    return get_item


class Dataset:
    """Samples of a float32 input of fixed shape and a target (an int64
    class index, or float32 values). Make one with from_idx, from_cifar10,
    from_arrays or from_callback; FashionMNIST() opens Debian's copy."""

    def __init__(self, *a, **k):
        raise TypeError('use Dataset.from_idx, from_cifar10, from_arrays or from_callback')

    @classmethod
    def _wrap(cls, h, ctx, keep=()):
        d = object.__new__(cls)
        d._h, d._ctx, d._keep = h, ctx, keep
        return d

    def __del__(self):
        _destroy(self, _lib.dataset_destroy if _lib else None)

    @classmethod
    def from_idx(cls, images, labels, ctx=None):
        """IDX files (MNIST, Fashion-MNIST), gzip-compressed or not."""
        c = _ctx(ctx)
        h = ctypes.c_void_p()
        _check(_lib.dataset_from_idx(c._h, _path(images), _path(labels), ctypes.byref(h)))
        return cls._wrap(h, c)

    @classmethod
    def from_cifar10(cls, paths, ctx=None):
        c = _ctx(ctx)
        arr = (ctypes.c_char_p * len(paths))(*[_path(p) for p in paths])
        h = ctypes.c_void_p()
        _check(_lib.dataset_from_cifar10(c._h, arr, len(paths), ctypes.byref(h)))
        return cls._wrap(h, c)

    @classmethod
    def from_arrays(cls, inputs, targets, borrow=True, ctx=None):
        """inputs [N, ...] (float32), targets [N] int class indices or [N, ...]
        float32. borrow=True (where the arrays allow) reads them in place; the
        dataset keeps them alive. Otherwise dp copies them."""
        np = _np()
        c = _ctx(ctx)
        x = np.asarray(inputs)
        y = np.asarray(targets)
        if x.ndim < 1 or y.ndim < 1 or len(x) != len(y):
            raise ValueError(f'inputs and targets need the same first dimension, got {x.shape} and {y.shape}')
        x = np.ascontiguousarray(x, dtype=np.float32)
        tdtype = 'int64' if y.dtype.kind in 'iub' else 'float32'
        y = np.ascontiguousarray(y, dtype=tdtype)
        nd, shp = _shape_in(x.shape[1:])
        tnd, tshp = _shape_in(y.shape[1:])
        h = ctypes.c_void_p()
        _check(_lib.dataset_from_arrays(c._h, x.ctypes.data if x.size else None, nd, shp, len(x), _CODES[tdtype],
                                        y.ctypes.data if y.size else None, tnd, tshp, 1 if borrow else 0,
                                        ctypes.byref(h)))
        return cls._wrap(h, c, keep=(x, y) if borrow else ())

    @classmethod
    def from_callback(cls, get_item, length, sample_shape, target_shape=(), target_dtype='int64', ctx=None):
        """A dataset of the caller's: get_item(index) -> (input, target), as a
        map-style torch Dataset's __getitem__. It runs on the loader's worker
        threads (holding the GIL, so Python callbacks do not run in parallel:
        num_workers > 0 still overlaps them with training); an exception fails
        that batch with its message, as PyTorch does."""
        c = _ctx(ctx)
        target_dtype = _dtype_name(target_dtype)
        fn = _lib.GET_ITEM_FN(_callback_get_item(get_item, tuple(sample_shape), target_dtype, tuple(target_shape)))
        cb = _lib.DatasetCallbacks(ctypes.sizeof(_lib.DatasetCallbacks), None, int(length), fn, _lib.RELEASE_FN())
        nd, shp = _shape_in(sample_shape)
        tnd, tshp = _shape_in(target_shape)
        h = ctypes.c_void_p()
        _check(_lib.dataset_from_callbacks(c._h, ctypes.byref(cb), nd, shp, _CODES[target_dtype], tnd, tshp,
                                           ctypes.byref(h)))
        return cls._wrap(h, c, keep=(fn, get_item))

    def __len__(self):
        n = ctypes.c_int64()
        _check(_lib.dataset_length(self._h, ctypes.byref(n)))
        return n.value

    @property
    def sample_shape(self):
        return _shape_out(_lib.dataset_sample_shape, self._h)

    def set_transform(self, spec):
        """{"random_crop": {"size": 32, "padding": 4}, "horizontal_flip": 0.5,
        "normalize": {"mean": [...], "std": [...]}} (dict or JSON)."""
        _check(_lib.dataset_set_transform(self._h, _json_text(spec).encode()))
        return self


FASHION_MNIST_DIR = '/usr/share/datasets/fashion-mnist'
FASHION_MNIST_NORMALIZE = {'normalize': {'mean': [0.2860], 'std': [0.3530]}}


def FashionMNIST(root=FASHION_MNIST_DIR, train=True, normalize=True, ctx=None):
    """Fashion-MNIST from its IDX files (Debian's dataset-fashion-mnist by
    default), normalised as `dp train --data fashion-mnist` does."""
    prefix = 'train' if train else 't10k'
    ds = Dataset.from_idx(os.path.join(root, f'{prefix}-images-idx3-ubyte.gz'),
                          os.path.join(root, f'{prefix}-labels-idx1-ubyte.gz'), ctx=ctx)
    return ds.set_transform(FASHION_MNIST_NORMALIZE) if normalize else ds


_loaders = weakref.WeakSet()


@atexit.register
def _stop_loaders():
    # Worker threads must not call Python callbacks while the interpreter
    # shuts down: destroy (join) every loader first.
    for ld in list(_loaders):
        ld.close()


class DataLoader:
    """Shuffled batches assembled ahead by worker threads, with PyTorch's
    names and defaults. Iterating runs one epoch and yields (x, y) dp
    tensors: x float32 [rows, ...], y the targets. The loader reuses the two
    tensors it yields for the next batch unless they are still referenced
    beyond the loop variables or viewed (numpy(), __dlpack__), in which case
    it fills new ones; reuse_buffers=False always yields new tensors.
    The order of an epoch is a pure function of (seed, epoch)."""

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, num_workers=0, prefetch=2, seed=0,
                 reuse_buffers=True):
        cfg = {'batch_size': batch_size, 'shuffle': bool(shuffle), 'drop_last': bool(drop_last),
               'num_workers': num_workers, 'prefetch': prefetch, 'seed': seed}
        h = ctypes.c_void_p()
        _check(_lib.loader_create(dataset._h, _json.dumps(cfg).encode(), ctypes.byref(h)))
        self._h, self.dataset, self._ctx = h, dataset, dataset._ctx
        self.batch_size, self.num_workers = batch_size, num_workers
        self._reuse = reuse_buffers
        self._x = self._y = None
        self._abandoned = False
        _loaders.add(self)

    def close(self):
        """Stops the worker threads and frees the loader (also done when it is
        garbage-collected)."""
        _destroy(self, _lib.loader_destroy if _lib else None)

    def __del__(self):
        self.close()

    def __len__(self):
        n = ctypes.c_int64()
        _check(_lib.loader_num_batches(self._h, ctypes.byref(n)))
        return n.value

    @property
    def position(self):
        """(epoch, index of the next batch)."""
        e, b = ctypes.c_int64(), ctypes.c_int64()
        _check(_lib.loader_position(self._h, ctypes.byref(e), ctypes.byref(b)))
        return e.value, b.value

    def seek(self, epoch, batch=0):
        _check(_lib.loader_seek(self._h, int(epoch), int(batch)))
        self._abandoned = False

    def _fresh(self):
        # dp_loader_next sets shape and dtype; it swaps storage with its own.
        return zeros((0,), 'float32', self._ctx), zeros((0,), 'int64', self._ctx)

    def _reusable(self, x, y):
        # x and y are referenced here (next_batch's local, this parameter,
        # getrefcount's argument) and, in a for loop, by the caller's loop
        # variables: anything more means the caller kept them, so they are
        # not refilled under it.
        if x is None or not self._reuse or x._exports or y._exports:
            return False
        refs = getattr(sys, 'getrefcount', None)
        return refs is not None and refs(x) <= 4 and refs(y) <= 4

    def next_batch(self):
        """The next batch as (x, y), or None at the end of an epoch (the next
        call starts the next epoch): dp_loader_next without iteration."""
        x, y, self._x, self._y = self._x, self._y, None, None
        if not self._reusable(x, y):
            x, y = self._fresh()
        rows = ctypes.c_int64()
        _check(_lib.loader_next(self._h, x._h, y._h, ctypes.byref(rows)))
        self._x, self._y = x, y
        return (x, y) if rows.value else None

    def __iter__(self):
        if self._h is None:
            raise ValueError('the loader is closed')
        epoch, batch = self.position
        if batch >= len(self) or (self._abandoned and batch > 0):
            # A finished epoch (a checkpoint saved at its end) or an iteration
            # broken off: start the next epoch, as a new DataLoader iterator does.
            self.seek(epoch + 1, 0)
        return self._epoch()

    def _epoch(self):
        self._abandoned = True
        try:
            while True:
                b = self.next_batch()
                if b is None:
                    break
                yield b
                del b
        except Error:
            self._abandoned = False  # a failed batch is skipped; iterating again continues the epoch
            raise
        self._abandoned = False

# ---------------------------------------------------------------- checkpoints


def save_checkpoint(path, group, optimizer=None, loader=None, metadata=None):
    """Parameters, buffers, optimizer state, loader position and metadata (a
    dict) to a safetensors file, written atomically."""
    _check(_lib.checkpoint_save(_path(path), group._h, optimizer._h if optimizer else None,
                                loader._h if loader else None, _json.dumps(metadata).encode() if metadata else None))


def load_checkpoint(path, group, optimizer=None, loader=None):
    """Restores what save_checkpoint wrote; a damaged or mismatched file
    changes nothing and raises."""
    _check(_lib.checkpoint_load(_path(path), group._h, optimizer._h if optimizer else None,
                                loader._h if loader else None))
    if loader is not None:
        loader._abandoned = False


def checkpoint_metadata(path):
    """The checkpoint's __metadata__ as a dict of strings."""
    p = ctypes.c_void_p()
    _check(_lib.checkpoint_metadata(_path(path), ctypes.byref(p)))
    try:
        return _json.loads(ctypes.string_at(p.value).decode())
    finally:
        _lib.free(p)
