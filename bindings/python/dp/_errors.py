"""The dp.Error hierarchy: one exception class per dp_status, the classes for
what the binding itself refuses before calling libdp (each also the builtin
exception Python code expects: TypeError, ValueError, IndexError, ...), and
_check, which turns a failed call's status and dp_last_error() into the
exception.

Every exception the package raises is a dp.Error; the one exception is the
ImportError of `import dp` when libdp.so cannot be loaded (there is no dp
module yet to hold dp.Error). tests/test_errors.py checks both."""
from . import _lib


class Error(Exception):
    """A failed dp call: .status (int, dp_status), .status_name
    ("DP_ERR_MODEL") and .message (dp_last_error(): what and where).

    Raised by the binding itself (a check before libdp is called) it is made
    from the message alone, Cls(message), and carries the class's status (or
    None, with status_name None, for UnsupportedError, which has none)."""
    status = None

    def __init__(self, status, message=None):
        if message is None and not isinstance(status, int):  # Cls(message): the binding's own check
            status, message = type(self).status, status
        super().__init__(message)
        self.status = status
        self.message = message
        self.status_name = _lib.status_name(status).decode() if status is not None else None

    def __str__(self):  # the message as is (KeyError would quote it)
        return str(self.message)

    def __repr__(self):
        if self.status_name is None:
            return f'{type(self).__name__}({self.message!r})'
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


class CommError(Error, RuntimeError):
    """DP_ERR_COMM: another process of the process group died, left, or did not answer in time
    (a RuntimeError, as torch.distributed's DistBackendError)"""


class StateDictError(ModelError, RuntimeError):
    """load_state_dict(sd, strict=True) with missing or unexpected keys, or any
    load_state_dict with a tensor of the wrong shape: a ModelError (what libdp
    reports for a weights file that does not fit) and a RuntimeError (what
    PyTorch's load_state_dict raises). .missing_keys and .unexpected_keys
    list the names (empty for a shape mismatch)."""

    def __init__(self, status, message=None, missing_keys=(), unexpected_keys=()):
        super().__init__(status, message)
        self.missing_keys, self.unexpected_keys = list(missing_keys), list(unexpected_keys)


# The binding's own refusals (before libdp is called). Each also derives from
# the builtin exception Python code expects there, so `except TypeError` and
# the like keep working.

class ArgumentTypeError(Error, TypeError):
    """An argument of the wrong type (an int where a path goes, a Model where a
    DataParallel goes, a dtype other than float32/int64); also TypeError.
    status DP_ERR_INVALID_ARGUMENT."""


class ClosedError(InvalidArgumentError):
    """Use of a closed DataLoader or a destroyed ProcessGroup; also ValueError
    (as a closed file's)."""


class OutOfRangeError(InvalidArgumentError, IndexError):
    """An index or position outside its range (DataLoader.seek); also
    ValueError and IndexError."""


class UnknownKeyError(InvalidArgumentError, KeyError):
    """A name that is not one of the known choices (set_split's mode); also
    ValueError and KeyError."""


class DLPackError(Error, BufferError):
    """A DLPack exchange dp cannot make (another device, a dtype other than
    float32/int64, strides that are not row-major, a stream); also BufferError.
    status DP_ERR_INVALID_ARGUMENT."""


class UnsupportedError(Error, NotImplementedError):
    """The loaded libdp lacks the function a call needs (an older library of
    the same ABI); also NotImplementedError (a RuntimeError). status None."""


class MissingDependencyError(Error, ImportError):
    """NumPy is needed and not installed; also ImportError."""


_ERRORS = {1: InvalidArgumentError, 2: JSONError, 3: ModelError, 4: ShapeError, 5: IOError, 6: DeviceError,
           7: NumericError, 8: OutOfMemoryError, 9: PluginError, 10: InternalError, 11: CommError}
for _s, _c in _ERRORS.items():
    _c.status = _s
ArgumentTypeError.status = DLPackError.status = 1  # ClosedError, OutOfRangeError, UnknownKeyError inherit it


def _check(status):
    if status:
        raise _ERRORS.get(status, Error)(status, _lib.last_error().decode('utf-8', 'replace'))
