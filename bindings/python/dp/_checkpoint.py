"""Checkpoints: parameters, buffers, optimizer state, loader position and
metadata in one safetensors file."""
import ctypes
import json as _json

from . import _lib
from ._data import DataLoader
from ._errors import ArgumentTypeError, InternalError, InvalidArgumentError, StateDictError, _check
from ._model import DataParallel
from ._optim import Optimizer
from ._util import _dumps, _handle, _path


def _handles(fn, group, optimizer, loader):
    return (_handle(group, DataParallel, f'{fn}: group'), _handle(optimizer, Optimizer, f'{fn}: optimizer', True),
            _handle(loader, DataLoader, f'{fn}: loader', True))


# The optimizer's learning rates as its param_groups hold them ("lr", and "initial_lr" under a
# schedule or a dp.lr_scheduler), kept in __metadata__ under this name: libdp's checkpoints leave
# the lr to the optimizer's settings, while PyTorch's optimizer.load_state_dict restores it, and a
# dp.lr_scheduler resumed after load_checkpoint goes on from it.
_LRS_KEY = 'python_param_group_lrs'


def save_checkpoint(path, group, optimizer=None, loader=None, metadata=None):
    """Parameters, buffers, optimizer state and learning rate, loader
    position and metadata (a dict) to a safetensors file, written atomically."""
    g, o, ld = _handles('save_checkpoint', group, optimizer, loader)
    if metadata is not None and not isinstance(metadata, dict):
        raise ArgumentTypeError(f'save_checkpoint: metadata must be a dict, got {type(metadata).__name__}')
    metadata = dict(metadata or {})
    if _LRS_KEY in metadata:
        raise InvalidArgumentError(f'save_checkpoint: metadata key "{_LRS_KEY}" is reserved (the optimizer\'s '
                                   'learning rates)')
    if optimizer is not None:
        pg = optimizer.param_groups[0]
        metadata[_LRS_KEY] = _json.dumps({k: pg[k] for k in ('lr', 'initial_lr') if k in pg})
    meta = _dumps(metadata, 'save_checkpoint: metadata must be JSON-serialisable').encode() if metadata else None
    _check(_lib.checkpoint_save(_path(path, 'save_checkpoint: path'), g, o, ld, meta))


def load_checkpoint(path, group, optimizer=None, loader=None):
    """Restores what save_checkpoint wrote, the optimizer's learning rate
    too (as PyTorch's optimizer.load_state_dict; a checkpoint from the C API or
    dp train keeps the optimizer's own); a damaged or mismatched file changes
    nothing and raises."""
    g, o, ld = _handles('load_checkpoint', group, optimizer, loader)
    lrs = None
    if optimizer is not None:
        text = checkpoint_metadata(path).get(_LRS_KEY)
        try:
            lrs = optimizer._lrs_of(_json.loads(text), f'load_checkpoint: {path}') if text else None
        except (ValueError, AttributeError) as e:
            raise StateDictError(f'load_checkpoint: {path}: __metadata__ "{_LRS_KEY}" is not what save_checkpoint '
                                 f'writes: {text!r}') from e
    _check(_lib.checkpoint_load(_path(path, 'load_checkpoint: path'), g, o, ld))
    if lrs is not None:
        optimizer._set_lrs(*lrs)
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
