"""Checkpoints: parameters, buffers, optimizer state, loader position and
metadata in one safetensors file."""
import ctypes
import json as _json

from . import _lib
from ._data import DataLoader
from ._errors import InternalError, _check
from ._model import DataParallel
from ._optim import Optimizer
from ._util import _dumps, _handle, _path


def _handles(fn, group, optimizer, loader):
    return (_handle(group, DataParallel, f'{fn}: group'), _handle(optimizer, Optimizer, f'{fn}: optimizer', True),
            _handle(loader, DataLoader, f'{fn}: loader', True))


def save_checkpoint(path, group, optimizer=None, loader=None, metadata=None):
    """Parameters, buffers, optimizer state, loader position and metadata (a
    dict) to a safetensors file, written atomically."""
    g, o, ld = _handles('save_checkpoint', group, optimizer, loader)
    meta = None
    if metadata:
        meta = _dumps(metadata, 'save_checkpoint: metadata must be JSON-serialisable').encode()
    _check(_lib.checkpoint_save(_path(path, 'save_checkpoint: path'), g, o, ld, meta))


def load_checkpoint(path, group, optimizer=None, loader=None):
    """Restores what save_checkpoint wrote; a damaged or mismatched file
    changes nothing and raises."""
    g, o, ld = _handles('load_checkpoint', group, optimizer, loader)
    _check(_lib.checkpoint_load(_path(path, 'load_checkpoint: path'), g, o, ld))
    if loader is not None:
        loader._abandoned = False


def checkpoint_metadata(path):
    """The checkpoint's __metadata__ as a dict of strings."""
    p = ctypes.c_void_p()
    _check(_lib.checkpoint_metadata(_path(path, 'checkpoint_metadata: path'), ctypes.byref(p)))
    try:
        return _json.loads(ctypes.string_at(p.value).decode())
    except ValueError as e:  # dp_checkpoint_metadata returns JSON it made itself
        raise InternalError(f'checkpoint_metadata: {path}: dp_checkpoint_metadata returned text that is not JSON: '
                            f'{e}') from e
    finally:
        _lib.free(p)
