"""Optimizers over a group's model: dp.Optimizer from a config, and SGD,
Adam and AdamW with PyTorch's names."""
import ctypes
import json as _json
import os
import tempfile

from . import _lib
from ._errors import ArgumentTypeError, StateDictError, UnsupportedError, _check
from ._model import DataParallel
from ._util import _converting, _destroy, _float, _handle, _json_text, _np, _st_read, _st_write

_PREFIX = 'optimizer.'


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
        try:
            self._config = _json.loads(text.decode())
        except ValueError:  # libdp took it, so it is JSON; keep going without the hyperparameters
            self._config = {}

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
        """With a schedule: its base learning rate."""
        _check(_lib.optimizer_set_lr(self._h, _float(value, 'lr')))

    def set_lr_schedule(self, schedule):
        """A learning-rate schedule computed per step as PyTorch's schedulers
        do (dp_optimizer_set_lr_schedule), e.g. {"type": "cosine_warmup",
        "warmup_steps": 100, "total_steps": 1000}; also "linear", "step",
        "multistep", "cosine", "onecycle". None removes it."""
        text = None if schedule is None else _json_text(schedule, 'lr schedule').encode()
        _check(_lib.optimizer_set_lr_schedule(self._h, text))
        return self

    def set_clip_grad_norm(self, max_norm):
        """torch.nn.utils.clip_grad_norm_(params, max_norm) before every step:
        the global 2-norm of the gradients summed over all devices (and
        processes), and above max_norm the gradients scaled by
        max_norm / (norm + 1e-6). 0 turns it off; float('inf') measures the
        norm without clipping. A non-finite norm takes no step
        (dp.NumericError)."""
        _check(_lib.optimizer_set_clip_grad_norm(self._h, _float(max_norm, 'max_norm')))
        return self

    @property
    def grad_norm(self):
        """The last step's gradient norm before clipping (what
        clip_grad_norm_ returns); needs set_clip_grad_norm."""
        v = ctypes.c_double()
        _check(_lib.optimizer_grad_norm(self._h, ctypes.byref(v)))
        return v.value

    def set_grad_scaler(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                        enabled=True):
        """Dynamic loss scaling, as torch.amp.GradScaler(device, init_scale,
        growth_factor, backoff_factor, growth_interval, enabled) with
        scaler.scale(loss).backward(), scaler.step(opt), scaler.update() in
        every train_step (dp_optimizer_set_grad_scaler): the loss's gradient
        multiplied by the scale, the summed gradients unscaled and checked
        before the step; a step with an inf/NaN gradient is skipped (no error;
        the parameters and state unchanged) and the scale multiplied by
        backoff_factor; after growth_interval clean steps in a row, by
        growth_factor. With forward_backward pass loss_scale times
        get_scale() (PyTorch's scaler.scale(loss)). enabled=False turns it
        off. Starts at init_scale; load a checkpoint (or a state_dict) after
        it to continue a run's scale."""
        if not enabled:
            text = None
        else:
            cfg = {'init_scale': _float(init_scale, 'init_scale'), 'growth_factor': _float(growth_factor, 'growth_factor'),
                   'backoff_factor': _float(backoff_factor, 'backoff_factor')}
            if isinstance(growth_interval, bool) or not isinstance(growth_interval, int):
                raise ArgumentTypeError(f'set_grad_scaler: growth_interval must be an int, got '
                                        f'{type(growth_interval).__name__}')
            cfg['growth_interval'] = growth_interval
            text = _json.dumps(cfg).encode()
        _check(_lib.optimizer_set_grad_scaler(self._h, text))
        return self

    def _scaler_state(self):
        scale, tracker, skipped = ctypes.c_double(), ctypes.c_int64(), ctypes.c_int64()
        _check(_lib.optimizer_grad_scaler_state(self._h, ctypes.byref(scale), ctypes.byref(tracker),
                                                ctypes.byref(skipped)))
        return scale.value, tracker.value, skipped.value

    def get_scale(self):
        """The scale the next step's loss gradient is multiplied by (PyTorch's
        GradScaler.get_scale(): 1.0 without a grad scaler)."""
        return self._scaler_state()[0]

    def get_growth_tracker(self):
        """Clean steps in a row since the scale last changed (PyTorch's
        GradScaler._get_growth_tracker(); 0 without a grad scaler)."""
        return self._scaler_state()[1]

    @property
    def skipped_steps(self):
        """Steps the grad scaler skipped (inf/NaN gradients)."""
        return self._scaler_state()[2]

    # -- state_dict: libdp exposes the optimizer's state only through
    # checkpoints, so these go through a temporary checkpoint file.
    def _checkpoint(self, d):
        if self.group.global_devices[0] != self.group.num_devices:
            raise UnsupportedError('Optimizer.state_dict/load_state_dict: not for a DistributedDataParallel (only '
                                   'rank 0 writes checkpoints); use dp.save_checkpoint / dp.load_checkpoint')
        p = os.path.join(d, 'optimizer.safetensors')
        _check(_lib.checkpoint_save(os.fsencode(p), self.group._h, self._h, None, None))
        tensors, meta = _st_read(p)
        return p, tensors, meta

    def _param_names(self):
        return [n for n, _ in self.group.model.parameter_info()]

    @property
    def param_groups(self):
        """[{hyperparameters..., "lr": the current lr, "params": [0, 1, ...]}] (one group, as PyTorch's; a
        copy: set the lr through .lr)."""
        g = {k: v for k, v in self._config.items() if k != 'type'}
        g['lr'] = self.lr
        g['params'] = list(range(len(self._param_names())))
        return [g]

    def state_dict(self):
        """PyTorch's layout: {"state": {param index: {"momentum_buffer" (SGD) or
        "exp_avg", "exp_avg_sq" (Adam, AdamW): NumPy arrays, "step": float32
        0-d}}, "param_groups": [...]}; "state" is empty before the first step,
        as PyTorch's. Parameter indices follow Model.parameter_info(). With a
        grad scaler, also "grad_scaler": its state in GradScaler.state_dict()'s
        names ("scale", "_growth_tracker", "growth_factor", ...) and
        "skipped_steps"."""
        np = _np()
        names = self._param_names()
        index = {n: i for i, n in enumerate(names)}
        with tempfile.TemporaryDirectory(prefix='dp-optim-') as d:
            _, tensors, meta = self._checkpoint(d)
        steps = int(meta.get('optimizer_steps', '0'))
        state = {}
        if steps:
            for k, a in tensors.items():
                if k.startswith(_PREFIX):
                    kind, name = k[len(_PREFIX):].split('.', 1)
                    state.setdefault(index[name], {})[kind] = a
            for i in range(len(names)):
                state.setdefault(i, {})['step'] = np.array(float(steps), np.float32)
        sd = {'state': state, 'param_groups': self.param_groups}
        if 'grad_scaler' in meta:
            sd['grad_scaler'] = _json.loads(meta['grad_scaler'])
        return sd

    def load_state_dict(self, state_dict):
        """Restores what state_dict() returned (of an optimizer of the same type
        over the same architecture): the state, the step count, the lr, and
        the grad scaler's scale, growth tracker and skipped steps (its
        settings stay this optimizer's; without "grad_scaler" a scaler starts
        afresh).
        dp.StateDictError (a RuntimeError) for one that does not fit; nothing
        changes then."""
        np = _np()
        if not isinstance(state_dict, dict) or 'state' not in state_dict or 'param_groups' not in state_dict:
            raise ArgumentTypeError('Optimizer.load_state_dict: expected a dict with "state" and "param_groups" '
                                    '(what state_dict() returns)')
        names = self._param_names()
        groups = state_dict['param_groups']
        if len(groups) != 1 or len(groups[0].get('params', ())) != len(names):
            raise StateDictError(f'loaded state dict has {len(groups)} parameter group(s) of '
                                 f'{[len(g.get("params", ())) for g in groups]} parameters; this optimizer has one '
                                 f'group of {len(names)}')
        pos = {p: i for i, p in enumerate(groups[0]['params'])}
        state = {pos.get(k, k): v for k, v in state_dict['state'].items()}
        with tempfile.TemporaryDirectory(prefix='dp-optim-') as d:
            p, tensors, meta = self._checkpoint(d)
            kinds = sorted({k[len(_PREFIX):].split('.', 1)[0] for k in tensors if k.startswith(_PREFIX)})
            steps = 0
            for i, st in state.items():
                if not isinstance(i, int) or not 0 <= i < len(names):
                    raise StateDictError(f'loaded state dict has state for parameter {i!r}; this optimizer has '
                                         f'parameters 0 to {len(names) - 1}')
                extra = sorted(set(st) - set(kinds) - {'step'})
                if extra:
                    raise StateDictError(f'loaded state dict has state {extra} for parameter {i}, which a '
                                         f'{meta.get("optimizer_type")} optimizer does not keep (it keeps {kinds})')
                if 'step' in st:
                    steps = max(steps, int(np.asarray(st['step']).reshape(())))
            for k in list(tensors):
                if not k.startswith(_PREFIX):
                    continue
                kind, name = k[len(_PREFIX):].split('.', 1)
                st = state.get(names.index(name))
                if not st:
                    tensors[k] = np.zeros_like(tensors[k])
                    continue
                if kind not in st:
                    raise StateDictError(f'loaded state dict has no "{kind}" for parameter {names.index(name)} '
                                         f'("{name}")')
                src = st[kind]
                if hasattr(src, 'detach') and hasattr(src, 'cpu'):
                    src = src.detach().cpu()
                with _converting(f'Optimizer.load_state_dict: {kind} of "{name}" as float32'):
                    a = np.asarray(src, dtype=np.float32)
                if a.shape != tensors[k].shape:
                    raise StateDictError(f'size mismatch for {kind} of parameter {names.index(name)} ("{name}"): '
                                         f'{tuple(a.shape)} in the state dict, {tuple(tensors[k].shape)} here')
                tensors[k] = a
            meta['optimizer_steps'] = str(steps if state else 0)
            meta.pop('grad_scaler', None)
            scaler = state_dict.get('grad_scaler')
            if scaler is not None:
                if not isinstance(scaler, dict):
                    raise ArgumentTypeError('Optimizer.load_state_dict: "grad_scaler" must be a dict (what '
                                            'state_dict() returns)')
                # torch.amp.GradScaler.state_dict() has no skipped_steps: none then.
                scaler = dict({'skipped_steps': 0}, **scaler)
                with _converting('Optimizer.load_state_dict: "grad_scaler" must be JSON-serialisable'):
                    meta['grad_scaler'] = _json.dumps(scaler)
            _st_write(p, tensors, meta)
            _check(_lib.checkpoint_load(os.fsencode(p), self.group._h, self._h, None))
        lr = groups[0].get('lr')
        if lr is not None and lr != self.lr:
            self.lr = lr


def _opt_class(kind, doc):
    def __init__(self, group, lr, **kwargs):
        Optimizer.__init__(self, group, dict(type=kind, lr=lr, **kwargs))
    return type(kind.upper() if kind == 'sgd' else {'adam': 'Adam', 'adamw': 'AdamW'}[kind], (Optimizer,),
                {'__init__': __init__, '__doc__': doc})


SGD = _opt_class('sgd', 'SGD(group, lr, momentum=0, dampening=0, nesterov=False, weight_decay=0)')
Adam = _opt_class('adam', 'Adam(group, lr, betas=[0.9, 0.999], eps=1e-8, weight_decay=0)')
AdamW = _opt_class('adamw', 'AdamW(group, lr, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01)')
