"""Optimizers over a group's model: dp.Optimizer from a config, and SGD,
Adam and AdamW with PyTorch's names."""
import ctypes
import json as _json
import math

from . import _lib
from ._errors import ArgumentTypeError, InvalidArgumentError, StateDictError, UnsupportedError, _check
from ._model import DataParallel
from ._util import _Owner, _as_f32, _converting, _depends, _destroy, _dumps, _float, _handle, _json_text, _np


class Optimizer(_Owner):
    """An optimizer over a group's model from a config (dict or JSON):
    {"type": "sgd" | "adam" | "adamw", "lr": ..., ...} with PyTorch's names."""
    _copy_hint = 'make another optimizer and load_state_dict(opt.state_dict()) into it'

    def __init__(self, group, config):
        g = _handle(group, DataParallel, 'Optimizer: group (the model to train: a DataParallel)')
        text = _json_text(config, 'optimizer config')
        with _converting('optimizer config'):
            text = text.encode()
        h = ctypes.c_void_p()
        _check(_lib.optimizer_create(g, text, ctypes.byref(h)))
        self._h, self.group = h, group
        _depends(self, group)
        try:
            self._config = _json.loads(text.decode())
        except ValueError:  # libdp took it, so it is JSON; keep going without the hyperparameters
            self._config = {}
        # What libdp keeps but does not report: the base lr (a schedule's), whether
        # a schedule is set, the grad scaler's settings (None: off).
        self._base_lr = self.lr
        self._scheduled = False
        self._scaler_cfg = None
        self._initial_lr = None  # a dp.lr_scheduler's "initial_lr": the lr before the first scheduler
        self._lr_schedulers = 0  # dp.lr_scheduler schedulers made on it (set_lr_schedule is then refused)

    def __del__(self):
        _destroy(self, _lib.optimizer_destroy if _lib else None)

    def step(self):
        """One step on the model's gradients; none (no update, no step counted)
        with no backward since zero_grad(), as torch.optim after zero_grad()."""
        _check(_lib.optimizer_step(self._h))

    def zero_grad(self, set_to_none=True):
        """As torch.optim's: the next step() without a backward before it
        does nothing (dp's gradients count as None until a backward, whichever
        set_to_none says; PyTorch's False would apply momentum and weight decay
        to zero gradients)."""
        self.group.zero_grad(set_to_none)

    @property
    def lr(self):
        v = ctypes.c_double()
        _check(_lib.optimizer_lr(self._h, ctypes.byref(v)))
        return v.value

    @lr.setter
    def lr(self, value):
        """With a schedule: its base learning rate."""
        value = _float(value, 'lr')
        _check(_lib.optimizer_set_lr(self._h, value))
        self._base_lr = value

    def set_lr_schedule(self, schedule):
        """A learning-rate schedule with PyTorch's schedulers' formulas, per
        step (dp_optimizer_set_lr_schedule), e.g. {"type": "cosine_warmup",
        "warmup_steps": 100, "total_steps": 1000}; also "linear", "step",
        "exponential", "multistep", "cosine", "onecycle". None removes it. Unlike a PyTorch
        scheduler, which counts from its own creation, step t of the schedule
        is the optimizer's t-th step (its steps so far, with those a grad
        scaler skipped), so a schedule set after 5 steps starts at t = 5, and
        a resumed run (checkpoint or state_dict) continues its curve. .lr is
        set as each step starts: read after a step, it is that step's lr."""
        text = None if schedule is None else _json_text(schedule, 'lr schedule').encode()
        if text and self._lr_schedulers:
            raise InvalidArgumentError('set_lr_schedule: a dp.lr_scheduler scheduler sets this optimizer\'s lr: use '
                                       'that or a libdp schedule, not both')
        _check(_lib.optimizer_set_lr_schedule(self._h, text))
        self._scheduled = text is not None and text != b''
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
            text = _dumps(cfg, 'set_grad_scaler').encode()
        _check(_lib.optimizer_set_grad_scaler(self._h, text))
        self._scaler_cfg = cfg if enabled else None
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

    # -- state_dict: PyTorch's layout, over dp_optimizer_copy_state / set_state.
    def _param_shapes(self):
        return self.group.model.parameter_info()

    def _hyperparameters(self):
        """This optimizer's settings under PyTorch's param_groups keys, defaults
        included, so that torch.optim's step() finds every key it reads."""
        c, kind = self._config, self._config.get('type')
        if kind == 'sgd':
            return {'momentum': c.get('momentum', 0), 'dampening': c.get('dampening', 0),
                    'weight_decay': c.get('weight_decay', 0), 'nesterov': c.get('nesterov', False),
                    'maximize': False, 'foreach': None, 'differentiable': False, 'fused': None}
        return {'betas': tuple(c.get('betas', (0.9, 0.999))), 'eps': c.get('eps', 1e-8),
                'weight_decay': c.get('weight_decay', 0.01 if kind == 'adamw' else 0), 'amsgrad': False,
                'maximize': False, 'foreach': None, 'capturable': False, 'differentiable': False, 'fused': None,
                'decoupled_weight_decay': kind == 'adamw'}

    @property
    def param_groups(self):
        """[{"lr": the current lr, every hyperparameter (PyTorch's keys and
        defaults), "initial_lr": the base lr under a schedule (as PyTorch's
        schedulers add it), "params": [0, 1, ...]}] (one group, as PyTorch's).
        As in PyTorch, `for g in opt.param_groups: g["lr"] = 0.01` sets the lr
        of the steps that follow (as .lr does); under a schedule, "initial_lr"
        is its base lr and "lr" is the schedule's to set. The other
        hyperparameters are fixed when the optimizer is made: writing one
        raises InvalidArgumentError."""
        g = {'lr': self.lr}
        g.update(self._hyperparameters())
        if self._scheduled:
            g['initial_lr'] = self._base_lr
        elif self._initial_lr is not None:  # a dp.lr_scheduler scheduler's
            g['initial_lr'] = self._initial_lr
        g['params'] = list(range(len(self._param_shapes())))
        return [_ParamGroup(self, g)]

    def _state_names(self):
        n = ctypes.c_int()
        _check(_lib.optimizer_num_states(self._h, ctypes.byref(n)))
        names = []
        for i in range(n.value):
            s = ctypes.c_char_p()
            _check(_lib.optimizer_state_name(self._h, i, ctypes.byref(s)))
            names.append(s.value.decode())
        return names

    def _steps(self):
        v = ctypes.c_int64()
        _check(_lib.optimizer_steps(self._h, ctypes.byref(v)))
        return v.value

    def _need_state_abi(self, what):
        if {'dp_optimizer_copy_state', 'dp_optimizer_set_state'} & set(_lib.missing):
            raise UnsupportedError(f'dp: {_lib.path} predates dp_optimizer_copy_state (Optimizer.{what}); use a newer '
                                   'libdp, or dp.save_checkpoint / dp.load_checkpoint')

    def state_dict(self):
        """PyTorch's layout: {"state": {param index: {"momentum_buffer" (SGD) or
        "exp_avg", "exp_avg_sq" (Adam, AdamW): NumPy arrays, "step": float32
        0-d}}, "param_groups": [...]}; "state" is empty before the first step,
        as PyTorch's. Parameter indices follow Model.parameter_info(). With a
        grad scaler, also "grad_scaler": its state in GradScaler.state_dict()'s
        names ("scale", "_growth_tracker", "growth_factor", ...) and
        "skipped_steps"."""
        self._need_state_abi('state_dict')
        np = _np()
        shapes = self._param_shapes()
        steps = self._steps()
        state = {}
        if steps:
            total = sum(math.prod(s) for _, s in shapes)
            for kind in self._state_names():
                flat = np.empty(total, np.float32)
                _check(_lib.optimizer_copy_state(self._h, kind.encode(), flat.ctypes.data, total))
                at = 0
                for i, (_, shape) in enumerate(shapes):
                    n = math.prod(shape)
                    state.setdefault(i, {})[kind] = flat[at:at + n].reshape(shape).copy()
                    at += n
            for i in range(len(shapes)):
                state.setdefault(i, {})['step'] = np.array(float(steps), np.float32)
        sd = {'state': state, 'param_groups': [dict(g.items()) for g in self.param_groups]}
        scale, tracker, skipped = self._scaler_state()
        if self._scaler_cfg is not None or skipped:
            cfg = self._scaler_cfg or {}
            sd['grad_scaler'] = {'scale': scale, 'init_scale': cfg.get('init_scale', 2.0 ** 16),
                                 'growth_factor': cfg.get('growth_factor', 2.0),
                                 'backoff_factor': cfg.get('backoff_factor', 0.5),
                                 'growth_interval': cfg.get('growth_interval', 2000), '_growth_tracker': tracker,
                                 'enabled': self._scaler_cfg is not None, 'skipped_steps': skipped}
        return sd

    def load_state_dict(self, state_dict):
        """Restores what state_dict() returned, or a torch.optim state dict of
        the same type over the same architecture: the state, the step count,
        the lr (under a schedule, its base: "initial_lr"), and the grad
        scaler's scale, growth tracker and skipped steps (its settings stay
        this optimizer's; without "grad_scaler" a scaler starts afresh).
        Hyperparameters are fixed when a dp optimizer is created: a state dict
        whose momentum, betas, eps, weight_decay (...) differ from this
        optimizer's is refused, naming them (PyTorch would adopt them). A
        PyTorch SGD state dict has no "step": its momentum buffers count as
        one step taken (PyTorch uses a buffer once it exists).
        dp.StateDictError (a RuntimeError) for one that does not fit; nothing
        changes then."""
        self._need_state_abi('load_state_dict')
        np = _np()
        if not isinstance(state_dict, dict) or 'state' not in state_dict or 'param_groups' not in state_dict:
            raise ArgumentTypeError('Optimizer.load_state_dict: expected a dict with "state" and "param_groups" '
                                    '(what state_dict() returns)')
        shapes = self._param_shapes()
        groups = state_dict['param_groups']
        if len(groups) != 1 or len(groups[0].get('params', ())) != len(shapes):
            raise StateDictError(f'loaded state dict has {len(groups)} parameter group(s) of '
                                 f'{[len(g.get("params", ())) for g in groups]} parameters; this optimizer has one '
                                 f'group of {len(shapes)}')
        group = groups[0]
        mine = self._hyperparameters()
        differ = []
        for k in ('momentum', 'dampening', 'nesterov', 'weight_decay', 'betas', 'eps', 'amsgrad', 'maximize',
                  'decoupled_weight_decay'):
            if k in group and group[k] is not None and k in mine:
                a, b = group[k], mine[k]
                same = (tuple(map(float, a)) == tuple(map(float, b))) if k == 'betas' else a == b
                if not same:
                    differ.append(f'{k}={a!r} (this optimizer: {b!r})')
        if differ:
            raise StateDictError(f'loaded state dict has other hyperparameters than this {self._config.get("type")} '
                                 f'optimizer: {", ".join(differ)}; dp fixes them at creation: create the optimizer '
                                 'with those values')
        kinds = self._state_names()
        pos = {p: i for i, p in enumerate(group['params'])}
        state = {pos.get(k, k): v for k, v in state_dict['state'].items()}
        staged = {kind: [np.zeros(s, np.float32) for _, s in shapes] for kind in kinds}
        steps, buffers = 0, False
        for i, st in state.items():
            if not isinstance(i, int) or not 0 <= i < len(shapes):
                raise StateDictError(f'loaded state dict has state for parameter {i!r}; this optimizer has '
                                     f'parameters 0 to {len(shapes) - 1}')
            st = {k: v for k, v in st.items() if v is not None}  # torch's SGD without momentum: momentum_buffer None
            extra = sorted(set(st) - set(kinds) - {'step'})
            if extra:
                raise StateDictError(f'loaded state dict has state {extra} for parameter {i}, which a '
                                     f'{self._config.get("type")} optimizer does not keep (it keeps {kinds})')
            if 'step' in st:
                with _converting(f'Optimizer.load_state_dict: step of parameter {i}'):
                    steps = max(steps, int(np.asarray(st['step']).reshape(())))
            name, shape = shapes[i]
            for kind in kinds:
                if kind not in st:
                    if st:
                        raise StateDictError(f'loaded state dict has no "{kind}" for parameter {i} ("{name}")')
                    continue
                a = _as_f32(st[kind], f'Optimizer.load_state_dict: {kind} of "{name}"')
                if a.shape != tuple(shape):
                    raise StateDictError(f'size mismatch for {kind} of parameter {i} ("{name}"): '
                                         f'{tuple(a.shape)} in the state dict, {tuple(shape)} here')
                staged[kind][i] = a
                buffers = True
        if buffers and steps == 0:
            steps = 1  # torch.optim.SGD keeps no step: a buffer that exists is used
        scaler = state_dict.get('grad_scaler')
        if scaler is not None:
            if not isinstance(scaler, dict):
                raise ArgumentTypeError('Optimizer.load_state_dict: "grad_scaler" must be a dict (what '
                                        'state_dict() returns)')
            with _converting('Optimizer.load_state_dict: "grad_scaler"'):
                sc = (float(scaler['scale']), int(scaler.get('_growth_tracker', 0)),
                      int(scaler.get('skipped_steps', 0)))  # torch's GradScaler.state_dict() has no skipped_steps
        else:
            cfg = self._scaler_cfg or {}
            sc = (float(cfg.get('init_scale', 2.0 ** 16)), 0, 0)  # afresh
        lr, initial = self._lrs_of(group, 'Optimizer.load_state_dict')
        # All checked but the scaler's values (checked first by libdp); then write.
        _check(_lib.optimizer_set_grad_scaler_state(self._h, *sc))
        for kind, parts in staged.items():
            flat = np.ascontiguousarray(np.concatenate([p.reshape(-1) for p in parts]), np.float32)
            _check(_lib.optimizer_set_state(self._h, kind.encode(), flat.ctypes.data, flat.size))
        _check(_lib.optimizer_set_steps(self._h, steps))
        self._set_lrs(lr, initial)

    def _lrs_of(self, group, where):
        """The lr to restore from a param group (under a libdp schedule, its
        base: "initial_lr") and a dp.lr_scheduler's "initial_lr" (or None)."""
        lr = group.get('initial_lr', group.get('lr')) if self._scheduled else group.get('lr')
        with _converting(f'{where}: initial_lr'):
            initial = None if self._scheduled or group.get('initial_lr') is None else float(group['initial_lr'])
        return lr, initial

    def _set_lrs(self, lr, initial):
        if lr is not None and lr != self._base_lr:
            self.lr = lr
        if initial is not None:  # a dp.lr_scheduler's, as PyTorch's param_groups keep it
            self._initial_lr = initial


class _ParamGroup(dict):
    """An entry of Optimizer.param_groups: a dict whose "lr" (or, under a
    schedule, "initial_lr") writes through to the optimizer, as torch.optim's
    do, and reads its current value; a state_dict or a pickle holds it as a
    plain dict. Keys are fixed: adding or removing one raises."""

    def __init__(self, opt, values):
        super().__init__(values)
        self._opt = opt

    def _live(self):
        return 'initial_lr' if self._opt._scheduled else 'lr'

    def __getitem__(self, key):
        if key == 'lr':
            return self._opt.lr
        if key == 'initial_lr' and self._opt._scheduled:
            return self._opt._base_lr
        if key == 'initial_lr' and self._opt._initial_lr is not None:
            return self._opt._initial_lr
        return super().__getitem__(key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def _check(self, key, value):
        """What writing value to key does: True to write through, False for no change."""
        if key == self._live() or (key == 'initial_lr' and not self._opt._scheduled):  # (dp.lr_scheduler's, settable)
            return True
        try:
            same = key in self and bool(self[key] == value)
        except Exception:  # noqa: B902 (an array's ambiguous truth value: not the same)
            same = False
        if same:
            return False
        if key == 'lr':
            raise InvalidArgumentError('param_groups[0]["lr"]: an lr schedule sets each step\'s lr; set '
                                       'param_groups[0]["initial_lr"] (or .lr) for its base lr, or remove the '
                                       'schedule (set_lr_schedule(None))')
        raise InvalidArgumentError(f'param_groups[0][{key!r}]: dp fixes an optimizer\'s {key} when it is made; '
                                   'make a new optimizer with the value (its state_dict carries the state '
                                   'over); only "lr" changes')

    def __setitem__(self, key, value):
        if not self._check(key, value):
            return
        if key == 'initial_lr' and not self._opt._scheduled:  # a dp.lr_scheduler's
            self._opt._initial_lr = _float(value, 'initial_lr')
            super().__setitem__(key, self._opt._initial_lr)
        else:
            self._opt.lr = value  # checked there; under a schedule, its base lr
            super().__setitem__(key, self._opt._base_lr if self._opt._scheduled else self._opt.lr)

    def update(self, *args, **kwargs):
        items = dict(*args, **kwargs)
        write = [k for k, v in items.items() if self._check(k, v)]  # all checked before any is written
        for k in write:
            self[k] = items[k]

    def __ior__(self, other):
        self.update(other)
        return self

    def _fixed(self, *args, **kwargs):
        raise InvalidArgumentError('param_groups[0]: its keys are fixed (PyTorch\'s, for this optimizer)')

    setdefault = pop = popitem = clear = __delitem__ = _fixed

    def __reduce__(self):
        return (dict, (dict(self.items()),))

    def items(self):
        return [(k, self[k]) for k in self]

    def values(self):
        return [self[k] for k in self]


# torch.optim's implementation choices, accepted at the values dp's one implementation is
# (so that PyTorch code passing them, or a param_groups entry's, runs), refused otherwise.
_TORCH_IMPLEMENTATION_ARGS = {'maximize': False, 'foreach': None, 'fused': None, 'capturable': False,
                              'differentiable': False}


def _opt_class(kind, doc):
    def __init__(self, group, lr=1e-3, **kwargs):
        for k, default in _TORCH_IMPLEMENTATION_ARGS.items():
            if k in kwargs:
                v = kwargs.pop(k)
                if v is not default and v != default:
                    raise UnsupportedError(f'{type(self).__name__}: {k}={v!r} is not supported (dp has one '
                                           f'implementation: {k}={default!r}, PyTorch\'s default)')
        t = kind
        if 'decoupled_weight_decay' in kwargs:  # torch 2.x's Adam(decoupled_weight_decay=True) is AdamW
            d = kwargs.pop('decoupled_weight_decay')
            if kind == 'adam' and d is True:
                t = 'adamw'
                kwargs.setdefault('weight_decay', 0)  # Adam's default, not AdamW's 0.01
            elif d is not (kind == 'adamw'):
                raise UnsupportedError(f'{type(self).__name__}: decoupled_weight_decay={d!r}: use dp.Adam for '
                                       'L2 weight decay, dp.AdamW for decoupled')
        Optimizer.__init__(self, group, dict(type=t, lr=lr, **kwargs))
    return type(kind.upper() if kind == 'sgd' else {'adam': 'Adam', 'adamw': 'AdamW'}[kind], (Optimizer,),
                {'__init__': __init__, '__doc__': doc})


SGD = _opt_class('sgd', 'SGD(group, lr=1e-3, momentum=0, dampening=0, nesterov=False, weight_decay=0)')
Adam = _opt_class('adam', 'Adam(group, lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0)')
AdamW = _opt_class('adamw', 'AdamW(group, lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01)')
