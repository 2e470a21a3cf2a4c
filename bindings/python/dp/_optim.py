"""Optimizers over a group's model: dp.Optimizer from a config, and SGD,
Adam and AdamW with PyTorch's names."""
import ctypes

from . import _lib
from ._errors import _check
from ._model import DataParallel
from ._util import _converting, _destroy, _float, _handle, _json_text


class Optimizer:
    """An optimizer over a group's model from a config (dict or JSON):
    {"type": "sgd" | "adam" | "adamw", "lr": ..., ...} with PyTorch's names."""

    def __init__(self, group, config):
        g = _handle(group, DataParallel, 'Optimizer: group (the model to train: a DataParallel)')
        text = _json_text(config, 'optimizer config')
        with _converting('optimizer config'):
            text = text.encode()
        h = ctypes.c_void_p()
        _check(_lib.optimizer_create(g, text, ctypes.byref(h)))
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
        _check(_lib.optimizer_set_lr(self._h, _float(value, 'lr')))


def _opt_class(kind, doc):
    def __init__(self, group, lr, **kwargs):
        Optimizer.__init__(self, group, dict(type=kind, lr=lr, **kwargs))
    return type(kind.upper() if kind == 'sgd' else {'adam': 'Adam', 'adamw': 'AdamW'}[kind], (Optimizer,),
                {'__init__': __init__, '__doc__': doc})


SGD = _opt_class('sgd', 'SGD(group, lr, momentum=0, dampening=0, nesterov=False, weight_decay=0)')
Adam = _opt_class('adam', 'Adam(group, lr, betas=[0.9, 0.999], eps=1e-8, weight_decay=0)')
AdamW = _opt_class('adamw', 'AdamW(group, lr, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01)')
