"""Learning-rate schedulers as torch.optim.lr_scheduler's: the same names,
arguments, formulas and call pattern, over a dp optimizer.

    sched = dp.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    for epoch in range(90):
        for x, y in loader:
            net.train_step(opt, x, y)
        sched.step()                          # after the epoch's optimizer steps

Each scheduler counts its own step() calls (last_epoch), per epoch or per
batch as you call it, and sets the optimizer's lr (Optimizer.lr) to PyTorch's
value for that count, computed with PyTorch's (chainable) formulas, so the
lrs match PyTorch's to the last bit or so. Making one sets the lr of count 0,
as PyTorch's do; get_last_lr(), state_dict() and load_state_dict() are
PyTorch's. The optimizer keeps "initial_lr" (the lr before the first
scheduler) for schedulers made after it, as PyTorch's param_groups do.

Compared with Optimizer.set_lr_schedule (libdp's schedules, a function of the
optimizer's step count, which dp train and checkpoints resume by themselves):
these are Python objects, resumed through their state_dict, and the two
cannot be mixed on one optimizer. dp fixes momentum and betas when an
optimizer is made, so OneCycleLR and CyclicLR need cycle_momentum=False."""
import bisect
import math
import numbers
import types
from collections import Counter

from ._errors import ArgumentTypeError, InvalidArgumentError, UnknownKeyError, UnsupportedError
from ._optim import Optimizer

__all__ = ['LRScheduler', 'LambdaLR', 'MultiplicativeLR', 'StepLR', 'MultiStepLR', 'ConstantLR', 'LinearLR',
           'ExponentialLR', 'PolynomialLR', 'CosineAnnealingLR', 'CosineAnnealingWarmRestarts', 'SequentialLR',
           'ChainedScheduler', 'OneCycleLR', 'CyclicLR', 'ReduceLROnPlateau']


def _optimizer(optimizer):
    if not isinstance(optimizer, Optimizer):
        raise ArgumentTypeError(f'{type(optimizer).__name__} is not a dp Optimizer')
    if optimizer._scheduled:
        raise InvalidArgumentError('this optimizer has a libdp lr schedule (set_lr_schedule): use that or a '
                                   'dp.lr_scheduler scheduler, not both (set_lr_schedule(None) removes it)')
    return optimizer


def _one(value, name):
    """A per-param-group argument: a value, or a list with one (dp optimizers have one group)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise InvalidArgumentError(f'expected 1 {name}, but got {len(value)} (a dp optimizer has one param group)')
        return value[0]
    return value


def _number(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f'{name}: expected a number, got {type(value).__name__}')
    return float(value)


def _count(value, name, least):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise InvalidArgumentError(f'{name}: expected an integer >= {least}, got {value!r}')
    return int(value)


class LRScheduler:
    """The base of the schedulers: subclasses define get_lr() (the chainable
    formula, from the optimizer's current lr) and, where PyTorch has one,
    _get_closed_form_lr() (from base_lrs, for step(epoch))."""

    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = _optimizer(optimizer)
        if last_epoch == -1:
            if getattr(optimizer, '_initial_lr', None) is None:
                optimizer._initial_lr = optimizer.lr
        elif getattr(optimizer, '_initial_lr', None) is None:
            raise UnknownKeyError("param 'initial_lr' is not specified in param_groups[0] when resuming a scheduler "
                                  'with last_epoch >= 0: make it with last_epoch=-1, then load_state_dict')
        self.base_lrs = [optimizer._initial_lr]
        self.last_epoch = last_epoch
        self._initial_step()
        optimizer._lr_schedulers += 1  # its lr is a scheduler's now: set_lr_schedule refuses

    def _initial_step(self):
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self):
        raise UnsupportedError(f'{type(self).__name__} defines no get_lr() (a scheduler subclass must)')

    def get_last_lr(self):
        """The lr the last step() set: [lr] (one param group)."""
        return list(self._last_lr)

    def step(self, epoch=None):
        """One count on: the optimizer's lr becomes the schedule's next value.
        step(epoch) (deprecated in PyTorch) sets the count, with the closed form."""
        self._step_count += 1
        self._update_lr(epoch)

    def _update_lr(self, epoch=None):
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = _count(epoch, 'epoch', 0)
            closed = getattr(self, '_get_closed_form_lr', None)
            values = closed() if closed else self.get_lr()
        self.optimizer.lr = values[0]
        self._last_lr = [self.optimizer.lr]

    def state_dict(self):
        """Every attribute but the optimizer, as PyTorch's."""
        return {k: v for k, v in self.__dict__.items() if k != 'optimizer'}

    def load_state_dict(self, state_dict):
        """Restores the count and settings (not the optimizer's lr, as in PyTorch:
        the optimizer's own state_dict or checkpoint carries that)."""
        self.__dict__.update(state_dict)

    def _lr(self):
        return self.optimizer.lr


class LambdaLR(LRScheduler):
    """lr = initial lr * lr_lambda(count)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        f = _one(lr_lambda, 'lr_lambdas')
        if not callable(f):
            raise ArgumentTypeError(f'lr_lambda: expected a function of the count, got {type(f).__name__}')
        self.lr_lambdas = [f]
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [self.base_lrs[0] * self.lr_lambdas[0](self.last_epoch)]

    def state_dict(self):
        """As PyTorch's: functions are not saved; a callable object's attributes are."""
        s = {k: v for k, v in self.__dict__.items() if k not in ('optimizer', 'lr_lambdas')}
        s['lr_lambdas'] = [None if isinstance(f, types.FunctionType) else f.__dict__.copy() for f in self.lr_lambdas]
        return s

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        saved = state.pop('lr_lambdas', [None])
        self.__dict__.update(state)
        for f, attrs in zip(self.lr_lambdas, saved):
            if attrs is not None:
                f.__dict__.update(attrs)


class MultiplicativeLR(LambdaLR):
    """lr = previous lr * lr_lambda(count), from count 1 on."""

    def get_lr(self):
        return [self._lr() if self._is_initial else self._lr() * self.lr_lambdas[0](self.last_epoch)]


class StepLR(LRScheduler):
    """lr = initial lr * gamma ** (count // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size = _count(step_size, 'step_size', 1)
        self.gamma = _number(gamma, 'gamma')
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [self._lr()]
        return [self._lr() * self.gamma]

    def _get_closed_form_lr(self):
        return [self.base_lrs[0] * self.gamma ** (self.last_epoch // self.step_size)]


class MultiStepLR(LRScheduler):
    """lr = initial lr * gamma ** (milestones passed); a milestone given twice counts twice."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones = Counter(_count(m, 'milestones', 0) for m in milestones)
        self.gamma = _number(gamma, 'gamma')
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return [self._lr()]
        return [self._lr() * self.gamma ** self.milestones[self.last_epoch]]

    def _get_closed_form_lr(self):
        return [self.base_lrs[0] * self.gamma ** bisect.bisect_right(sorted(self.milestones.elements()),
                                                                    self.last_epoch)]


class ConstantLR(LRScheduler):
    """lr = initial lr * factor for counts below total_iters, then the initial lr."""

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        factor = _number(factor, 'factor')
        if not 0 <= factor <= 1:
            raise InvalidArgumentError('Constant multiplicative factor expected to be between 0 and 1.')
        self.factor, self.total_iters = factor, _count(total_iters, 'total_iters', 0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [self._lr() * self.factor]
        if self.last_epoch != self.total_iters:
            return [self._lr()]
        return [self._lr() * (1.0 / self.factor)]

    def _get_closed_form_lr(self):
        return [self.base_lrs[0] * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))]


class LinearLR(LRScheduler):
    """lr from initial lr * start_factor to initial lr * end_factor over total_iters counts, linearly."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        start, end = _number(start_factor, 'start_factor'), _number(end_factor, 'end_factor')
        if not 0 < start <= 1:
            raise InvalidArgumentError('Starting multiplicative factor expected to be greater than 0 and less or '
                                       'equal to 1.')
        if not 0 <= end <= 1:
            raise InvalidArgumentError('Ending multiplicative factor expected to be between 0 and 1.')
        self.start_factor, self.end_factor = start, end
        self.total_iters = _count(total_iters, 'total_iters', 1)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [self._lr() * self.start_factor]
        if self._is_initial or self.last_epoch > self.total_iters:
            return [self._lr()]
        d = self.end_factor - self.start_factor
        return [self._lr() * (1.0 + d / (self.total_iters * self.start_factor + (self.last_epoch - 1) * d))]

    def _get_closed_form_lr(self):
        return [self.base_lrs[0] * (self.start_factor + (self.end_factor - self.start_factor) *
                                    min(self.total_iters, self.last_epoch) / self.total_iters)]


class ExponentialLR(LRScheduler):
    """lr = initial lr * gamma ** count."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = _number(gamma, 'gamma')
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [self._lr() if self._is_initial else self._lr() * self.gamma]

    def _get_closed_form_lr(self):
        return [self.base_lrs[0] * self.gamma ** self.last_epoch]


class PolynomialLR(LRScheduler):
    """lr = initial lr * (1 - min(count, total_iters) / total_iters) ** power
    (step to step, as PyTorch's: each count multiplies by the ratio of two such factors)."""

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1):
        self.total_iters = _count(total_iters, 'total_iters', 1)
        self.power = _number(power, 'power')
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        t, n = self.last_epoch, self.total_iters
        if self._is_initial or t > n:
            return [self._lr()]
        return [self._lr() * ((1.0 - t / n) / (1.0 - (t - 1) / n)) ** self.power]

    def _get_closed_form_lr(self):
        return [self.base_lrs[0] * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (initial lr - eta_min) * (1 + cos(pi * count / T_max)) / 2
    (computed step to step, as PyTorch's, so an lr changed by hand carries on)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max = _count(T_max, 'T_max', 1)
        self.eta_min = _number(eta_min, 'eta_min')
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        t, T, lo, base = self.last_epoch, self.T_max, self.eta_min, self.base_lrs[0]
        if self._is_initial:
            return [self._lr()]
        if self._step_count == 1 and t > 0:
            return [lo + (base - lo) * (1 + math.cos(t * math.pi / T)) / 2]
        if (t - 1 - T) % (2 * T) == 0:
            return [self._lr() + (base - lo) * (1 - math.cos(math.pi / T)) / 2]
        return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T)) * (self._lr() - lo) + lo]

    def _get_closed_form_lr(self):
        return [self.eta_min + (self.base_lrs[0] - self.eta_min) *
                (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2]


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR: cosine from the initial lr to eta_min over T_0 counts, then again
    from the top over T_0 * T_mult, T_0 * T_mult ** 2, ... (T_cur counts within
    the current cycle). step(epoch) takes fractional epochs (epoch + i / iters
    per batch), as PyTorch's."""

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):
        self.T_0 = _count(T_0, 'T_0', 1)
        self.T_i = self.T_0
        self.T_mult = _count(T_mult, 'T_mult', 1)
        self.eta_min = _number(eta_min, 'eta_min')
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [self.eta_min + (self.base_lrs[0] - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2]

    def step(self, epoch=None):
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur %= self.T_i
                self.T_i *= self.T_mult
        else:
            epoch = _number(epoch, 'epoch')
            if epoch < 0:
                raise InvalidArgumentError(f'Expected non-negative epoch, but got {epoch}')
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:  # the cycle epoch falls in: T_0 (T_mult ** n - 1) / (T_mult - 1) <= epoch
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self._step_count += 1
        self.last_epoch = math.floor(epoch)
        self.optimizer.lr = self.get_lr()[0]
        self._last_lr = [self.optimizer.lr]


def _check_inner(name, schedulers, optimizer):
    """The schedulers a SequentialLR or ChainedScheduler drives: dp.lr_scheduler's, on its optimizer,
    stepped without a metric."""
    for i, s in enumerate(schedulers):
        if isinstance(s, ReduceLROnPlateau):
            raise InvalidArgumentError(f'{name} does not support ReduceLROnPlateau (index {i}): its step takes a '
                                       'metric')
        if not isinstance(s, LRScheduler):
            raise ArgumentTypeError(f'{name}: schedulers[{i}] is a {type(s).__name__}, not a dp.lr_scheduler '
                                    'scheduler')
        if s.optimizer is not optimizer:
            raise InvalidArgumentError(f'{name} expects all schedulers to belong to the same optimizer, but '
                                       f'schedulers[{i}] has another')


class SequentialLR(LRScheduler):
    """schedulers[i] from milestones[i - 1] on, each restarted at its milestone
    (count 0, closed form), as PyTorch's: the usual warmup then decay is
    SequentialLR(opt, [LinearLR(opt, ...), CosineAnnealingLR(opt, ...)], milestones=[warmup])."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        schedulers, milestones = list(schedulers), list(milestones)
        if not schedulers:
            raise InvalidArgumentError('SequentialLR expects at least one scheduler, but got no scheduler.')
        _check_inner('SequentialLR', schedulers, optimizer)
        if len(milestones) != len(schedulers) - 1:
            raise InvalidArgumentError('Sequential Schedulers expects number of schedulers provided to be one more '
                                       f'than the number of milestone points, but got number of schedulers '
                                       f'{len(schedulers)} and the number of milestones to be equal to '
                                       f'{len(milestones)}')
        self.optimizer = _optimizer(optimizer)
        self._schedulers, self._milestones = schedulers, [_count(m, 'milestones', 0) for m in milestones]
        self.last_epoch = last_epoch + 1
        optimizer.lr = optimizer._initial_lr  # the schedulers' own first steps undone
        for s in schedulers:
            s.last_epoch -= 1
        first = self._schedulers[bisect.bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def step(self):
        self.last_epoch += 1
        i = bisect.bisect_right(self._milestones, self.last_epoch)
        s = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            s._update_lr(0)
        else:
            s.step()
        self._last_lr = s.get_last_lr()

    def state_dict(self):
        s = {k: v for k, v in self.__dict__.items() if k not in ('optimizer', '_schedulers')}
        s['_schedulers'] = [x.state_dict() for x in self._schedulers]
        return s

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        inner = state.pop('_schedulers')
        self.__dict__.update(state)
        for x, sd in zip(self._schedulers, inner):
            x.load_state_dict(sd)


class ChainedScheduler(LRScheduler):
    """Steps every scheduler in order at each step(), so their chainable
    formulas compose (e.g. ConstantLR warmup times ExponentialLR decay), as
    PyTorch's."""

    def __init__(self, schedulers, optimizer=None):
        schedulers = list(schedulers)
        if not schedulers:
            raise InvalidArgumentError('ChainedScheduler expects at least one scheduler to be chained, but got no '
                                       'scheduler.')
        optimizer = optimizer if optimizer is not None else getattr(schedulers[0], 'optimizer', None)
        _check_inner('ChainedScheduler', schedulers, optimizer)
        self.optimizer = _optimizer(optimizer)
        self._schedulers = schedulers
        self._last_lr = [optimizer.lr]

    def step(self):
        for s in self._schedulers:
            s.step()
        self._last_lr = [self.optimizer.lr]

    state_dict = SequentialLR.state_dict
    load_state_dict = SequentialLR.load_state_dict


class OneCycleLR(LRScheduler):
    """The 1cycle policy: from max_lr / div_factor up to max_lr over pct_start
    of total_steps, then down to that / final_div_factor (three_phase: back
    to the start first). Stepping past total_steps raises, as PyTorch's."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy='cos', cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1):
        _optimizer(optimizer)
        if cycle_momentum:
            raise UnsupportedError('OneCycleLR: dp fixes momentum and betas when an optimizer is made, so it cannot '
                                   'cycle them: pass cycle_momentum=False (the lr still follows the cycle)')
        if total_steps is not None:
            self.total_steps = _count(total_steps, 'total_steps', 1)
        elif epochs is not None and steps_per_epoch is not None:
            self.total_steps = _count(epochs, 'epochs', 1) * _count(steps_per_epoch, 'steps_per_epoch', 1)
        else:
            raise InvalidArgumentError('You must define either total_steps OR (epochs AND steps_per_epoch)')
        pct = _number(pct_start, 'pct_start')
        if not 0 <= pct <= 1:
            raise InvalidArgumentError(f'Expected float between 0 and 1 pct_start, but got {pct_start}')
        if anneal_strategy not in ('cos', 'linear'):
            raise InvalidArgumentError(f"anneal_strategy must be one of 'cos' or 'linear', instead got "
                                       f'{anneal_strategy}')
        self.anneal_strategy = anneal_strategy
        peak = _number(_one(max_lr, 'max_lrs'), 'max_lr')
        n = self.total_steps
        if three_phase:  # (end step, start lr, end lr) by name
            self._phases = [(pct * n - 1, 'initial_lr', 'max_lr'), (2 * pct * n - 2, 'max_lr', 'initial_lr'),
                            (n - 1, 'initial_lr', 'min_lr')]
        else:
            self._phases = [(pct * n - 1, 'initial_lr', 'max_lr'), (n - 1, 'max_lr', 'min_lr')]
        start = peak / _number(div_factor, 'div_factor')
        self._lrs = {'initial_lr': start, 'max_lr': peak, 'min_lr': start / _number(final_div_factor, 'final_div_factor')}
        if last_epoch == -1:
            optimizer._initial_lr = start
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        t = self.last_epoch
        if t > self.total_steps:
            raise InvalidArgumentError(f'Tried to step {t} times. The specified number of total steps is '
                                       f'{self.total_steps}')
        begin, phase = 0.0, self._phases[-1]  # (after the cycle: the last phase, extended)
        for p in self._phases[:-1]:
            if t <= p[0]:
                phase = p
                break
            begin = p[0]
        end, start_lr, end_lr = phase
        pct = (t - begin) / (end - begin)
        a, b = self._lrs[start_lr], self._lrs[end_lr]
        if self.anneal_strategy == 'cos':
            return [b + (a - b) / 2.0 * (math.cos(math.pi * pct) + 1)]
        # The step after the last (count total_steps, allowed) extrapolates the line:
        # below 0, which PyTorch keeps and never uses, and a dp optimizer refuses.
        return [max((b - a) * pct + a, 0.0)]


class CyclicLR(LRScheduler):
    """Cyclical learning rates (Smith, 2017), as PyTorch's: up from base_lr
    to max_lr over step_size_up counts, down over step_size_down (default the
    same), the height scaled by mode: "triangular" (1), "triangular2" (halved
    each cycle), "exp_range" (gamma ** count), or scale_fn(x) of the cycle
    (scale_mode "cycle") or of the count ("iterations"). Stepped per batch.
    Making it sets the optimizer's lr to base_lr, as PyTorch's."""

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None, mode='triangular',
                 gamma=1.0, scale_fn=None, scale_mode='cycle', cycle_momentum=True, base_momentum=0.8,
                 max_momentum=0.9, last_epoch=-1):
        _optimizer(optimizer)
        if cycle_momentum:
            raise UnsupportedError('CyclicLR: dp fixes momentum and betas when an optimizer is made, so it cannot '
                                   'cycle them: pass cycle_momentum=False (the lr still follows the cycle)')
        base = _number(_one(base_lr, 'base_lrs'), 'base_lr')
        if last_epoch == -1:
            optimizer.lr = base
        self.max_lrs = [_number(_one(max_lr, 'max_lrs'), 'max_lr')]
        up = _number(step_size_up, 'step_size_up')
        down = _number(step_size_down, 'step_size_down') if step_size_down is not None else up
        if not up > 0 or not down >= 0:  # (PyTorch divides by zero at the first count for up = 0)
            raise InvalidArgumentError(f'CyclicLR: step_size_up must be > 0 and step_size_down >= 0, '
                                       f'got {step_size_up!r} and {step_size_down!r}')
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ('triangular', 'triangular2', 'exp_range') and scale_fn is None:
            raise InvalidArgumentError('mode is invalid and scale_fn is None')
        if scale_fn is not None and not callable(scale_fn):
            raise ArgumentTypeError(f'CyclicLR: scale_fn must be callable, got {type(scale_fn).__name__}')
        if scale_mode not in ('cycle', 'iterations'):
            raise InvalidArgumentError(f"CyclicLR: scale_mode must be 'cycle' or 'iterations', got {scale_mode!r}")
        self.mode, self.gamma, self.scale_mode = mode, _number(gamma, 'gamma'), scale_mode
        self._scale_fn_custom = scale_fn
        self._init_scale_mode()
        self.cycle_momentum = False
        super().__init__(optimizer, last_epoch)
        self.base_lrs = [base]  # after the first step, as PyTorch's (that one used initial_lr)

    def _init_scale_mode(self):
        if self._scale_fn_custom is None:  # the named modes fix the scale's argument
            self.scale_mode = 'iterations' if self.mode == 'exp_range' else 'cycle'

    def scale_fn(self, x):
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == 'triangular2':
            return 1 / (2.0 ** (x - 1))
        if self.mode == 'exp_range':
            return self.gamma ** x
        return 1.0

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        base_height = (self.max_lrs[0] - self.base_lrs[0]) * scale_factor
        return [self.base_lrs[0] + base_height * self.scale_fn(cycle if self.scale_mode == 'cycle' else self.last_epoch)]

    def state_dict(self):
        """PyTorch's: a scale_fn that is a function is not kept (give it again
        when making the scheduler); a callable object's attributes are."""
        state = super().state_dict()
        fn = state.pop('_scale_fn_custom')
        state['_scale_fn_custom'] = None
        if fn is not None and not isinstance(fn, types.FunctionType):
            state['_scale_fn_custom'] = dict(fn.__dict__)
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        fn = state.pop('_scale_fn_custom', None)
        super().load_state_dict(state)
        if fn is not None and self._scale_fn_custom is not None:
            self._scale_fn_custom.__dict__.update(fn)
        self._init_scale_mode()


class ReduceLROnPlateau(LRScheduler):
    """step(metric): when the metric has not improved (mode "min": fallen by
    more than threshold, relative or absolute; "max": risen) for more than
    patience calls, lr = max(lr * factor, min_lr), then cooldown calls pass
    before counting again."""

    def __init__(self, optimizer, mode='min', factor=0.1, patience=10, threshold=1e-4, threshold_mode='rel',
                 cooldown=0, min_lr=0, eps=1e-8):
        self.factor = _number(factor, 'factor')
        if self.factor >= 1.0:
            raise InvalidArgumentError('Factor should be < 1.0.')
        self.optimizer = _optimizer(optimizer)
        self.min_lrs = [_number(_one(min_lr, 'min_lrs'), 'min_lr')]
        self.patience, self.cooldown = _count(patience, 'patience', 0), _count(cooldown, 'cooldown', 0)
        self.eps = _number(eps, 'eps')
        self.last_epoch = 0
        self._last_lr = [optimizer.lr]
        if mode not in ('min', 'max'):
            raise InvalidArgumentError(f'mode {mode} is unknown!')
        if threshold_mode not in ('rel', 'abs'):
            raise InvalidArgumentError(f'threshold mode {threshold_mode} is unknown!')
        self.mode, self.threshold, self.threshold_mode = mode, _number(threshold, 'threshold'), threshold_mode
        self.best = math.inf if mode == 'min' else -math.inf
        self.cooldown_counter = 0
        self.num_bad_epochs = 0
        optimizer._lr_schedulers += 1

    def _is_better(self, a, best):
        if self.mode == 'min':
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == 'rel' else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if self.threshold_mode == 'rel' else best + self.threshold)

    def step(self, metrics, epoch=None):
        try:
            current = float(metrics)
        except (TypeError, ValueError) as e:
            raise ArgumentTypeError(f'ReduceLROnPlateau.step: metrics must be a number, got {metrics!r}') from e
        self.last_epoch = self.last_epoch + 1 if epoch is None else _count(epoch, 'epoch', 0)
        if self._is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:  # bad calls in cooldown do not count
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            old = self.optimizer.lr
            new = max(old * self.factor, self.min_lrs[0])
            if old - new > self.eps:
                self.optimizer.lr = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [self.optimizer.lr]

    @property
    def in_cooldown(self):
        return self.cooldown_counter > 0
