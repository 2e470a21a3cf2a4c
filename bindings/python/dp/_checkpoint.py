"""Checkpoints: parameters, buffers, optimizer state, loader position and
metadata in one safetensors file."""
import ctypes
import json as _json

from . import _lib
from ._errors import _check
from ._util import _path


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
