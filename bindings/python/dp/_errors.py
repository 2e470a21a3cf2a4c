"""The dp.Error hierarchy: one exception class per dp_status, and _check,
which turns a failed call's status and dp_last_error() into the exception."""
from . import _lib


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


class CommError(Error):
    """DP_ERR_COMM: another process of the process group died, left, or did not answer in time"""


_ERRORS = {1: InvalidArgumentError, 2: JSONError, 3: ModelError, 4: ShapeError, 5: IOError, 6: DeviceError,
           7: NumericError, 8: OutOfMemoryError, 9: PluginError, 10: InternalError, 11: CommError}
for _s, _c in _ERRORS.items():
    _c.status = _s


def _check(status):
    if status:
        raise _ERRORS.get(status, Error)(status, _lib.last_error().decode('utf-8', 'replace'))
