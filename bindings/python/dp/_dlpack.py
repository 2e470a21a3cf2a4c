"""DLPack (https://dmlc.github.io/dlpack/latest/python_spec.html) with ctypes
alone: the structs of dlpack.h (unversioned, ABI 0.x), the "dltensor"
PyCapsule, and the two directions.

Producer (Tensor.__dlpack__): a DLManagedTensor allocated here, pointing at
the dp tensor's storage; until the consumer calls its deleter (or the capsule
dies unconsumed) a registry entry keeps the Python Tensor, hence the dp
tensor and its memory, alive.

Consumer (from_dlpack): the producer's DLManagedTensor becomes a borrowed dp
tensor (dp_tensor_from_host_borrowed) whose release is the producer's own
deleter, so dp_tensor_destroy hands the memory back; the capsule is renamed
"used_dltensor" as the spec requires.
"""
import ctypes

from ._errors import ArgumentTypeError, DLPackError, Error


kDLCPU, kDLCUDAHost = 1, 3
kDLInt, kDLUInt, kDLFloat = 0, 1, 2


class DLDevice(ctypes.Structure):
    _fields_ = [('device_type', ctypes.c_int32), ('device_id', ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [('code', ctypes.c_uint8), ('bits', ctypes.c_uint8), ('lanes', ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [('data', ctypes.c_void_p), ('device', DLDevice), ('ndim', ctypes.c_int32), ('dtype', DLDataType),
                ('shape', ctypes.POINTER(ctypes.c_int64)), ('strides', ctypes.POINTER(ctypes.c_int64)),
                ('byte_offset', ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [('dl_tensor', DLTensor), ('manager_ctx', ctypes.c_void_p), ('deleter', DELETER)]

_NAME = b'dltensor'
_USED = b'used_dltensor'
_api = ctypes.pythonapi
# Separate prototypes (not ctypes.pythonapi's shared attributes), taking the
# capsule as a raw pointer where no reference may be taken (a destructor).
_PyCapsule_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ('PyCapsule_New', _api))
_PyCapsule_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(('PyCapsule_IsValid', _api))
_PyCapsule_IsValid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(('PyCapsule_IsValid', _api))
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ('PyCapsule_GetPointer', _api))
_PyCapsule_GetPointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ('PyCapsule_GetPointer', _api))
_PyCapsule_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(('PyCapsule_SetName', _api))

# ---- producer ----

# address of a DLManagedTensor -> (the struct, its shape array, the exporter)
_live = {}


def _deleter(managed):
    _live.pop(ctypes.addressof(managed.contents), None)


_DELETER = DELETER(_deleter)


def _capsule_destructor(capsule):
    # The capsule is being freed (refcount 0): only raw-pointer calls here.
    # Unconsumed (still named "dltensor"): the producer frees the tensor.
    if _PyCapsule_IsValid_raw(capsule, _NAME):
        p = _PyCapsule_GetPointer_raw(capsule, _NAME)
        _live.pop(p, None)


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_capsule_destructor)

DTYPES = {'float32': (kDLFloat, 32), 'int64': (kDLInt, 64)}


def export(owner, data_ptr, dtype, shape):
    """A "dltensor" capsule viewing data_ptr; owner stays alive until the
    consumer's deleter call (or the unconsumed capsule's death)."""
    m = DLManagedTensor()
    shp = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    code, bits = DTYPES[dtype]
    t = m.dl_tensor
    t.data = data_ptr or None
    t.device = DLDevice(kDLCPU, 0)
    t.ndim = len(shape)
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shp, ctypes.POINTER(ctypes.c_int64))
    t.strides = None  # compact row-major
    t.byte_offset = 0
    m.manager_ctx = None
    m.deleter = _DELETER
    addr = ctypes.addressof(m)
    _live[addr] = (m, shp, owner)
    return _PyCapsule_New(addr, _NAME, ctypes.cast(_CAPSULE_DESTRUCTOR, ctypes.c_void_p))


def live_exports():
    """How many DLPack exports are still held by consumers (for tests)."""
    return len(_live)


# ---- consumer ----

def consume(x):
    """x.__dlpack__() as (capsule, DLManagedTensor pointer, dtype name, shape,
    data address). Raises DLPackError (a BufferError) for what dp cannot
    view: another device, a dtype other than float32/int64, non-compact
    strides, a producer's refusal; ArgumentTypeError for no __dlpack__."""
    if not hasattr(x, '__dlpack__'):
        raise ArgumentTypeError(f'dp.from_dlpack takes an object with __dlpack__ (a NumPy >= 1.22 array, a PyTorch '
                                f'tensor, a dp.Tensor, ...), not {type(x).__name__}')
    if hasattr(x, '__dlpack_device__'):
        dev = tuple(x.__dlpack_device__())
        if dev[0] not in (kDLCPU, kDLCUDAHost):
            raise DLPackError(f'dp.from_dlpack: the tensor is on DLPack device {dev}; dp takes host memory (kDLCPU)')
    try:
        try:
            capsule = x.__dlpack__(stream=None)
        except TypeError:
            capsule = x.__dlpack__()
    except Error:
        raise
    except BufferError as e:  # the producer's refusal (NumPy: a read-only array)
        raise DLPackError(f'dp.from_dlpack: {type(x).__name__}.__dlpack__() refused: {e}') from e
    if not _PyCapsule_IsValid(capsule, _NAME):
        raise DLPackError('dp.from_dlpack: __dlpack__ did not return a "dltensor" capsule (already consumed?)')
    p = _PyCapsule_GetPointer(capsule, _NAME)
    m = DLManagedTensor.from_address(p)
    t = m.dl_tensor
    if t.device.device_type not in (kDLCPU, kDLCUDAHost):
        raise DLPackError(f'dp.from_dlpack: device type {t.device.device_type}; dp takes host memory')
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    names = {(kDLFloat, 32): 'float32', (kDLInt, 64): 'int64'}
    if lanes != 1 or (code, bits) not in names:
        raise DLPackError(f'dp.from_dlpack: dtype (code {code}, bits {bits}, lanes {lanes}) is not float32 or '
                          'int64; convert first (dp.tensor(numpy.asarray(x, numpy.float32)) copies)')
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides and 0 not in shape:  # an empty tensor's strides are anything (NumPy 2.5 gives 0s)
        expect = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and t.strides[i] != expect:
                raise DLPackError(f'dp.from_dlpack: strides {tuple(t.strides[i] for i in range(t.ndim))} are not '
                                  f'row-major contiguous for shape {shape}; dp views contiguous memory only')
            expect *= shape[i]
    data = (t.data or 0) + t.byte_offset
    return capsule, p, names[(code, bits)], shape, data, m


def mark_used(capsule):
    _PyCapsule_SetName(capsule, _USED)
