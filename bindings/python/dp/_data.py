"""Datasets (IDX, CIFAR-10, arrays, Python callbacks; FashionMNIST) and the
DataLoader that batches them on worker threads."""
import atexit
import collections
import ctypes
import math
import os
import re
import sys
import threading
import warnings
import weakref

from . import _lib
from ._context import _ctx, device_count, device_count_why
from ._errors import (ArgumentTypeError, ClosedError, Error, InvalidArgumentError, OutOfRangeError, ShapeError,
                      _check)
from ._model import DataParallel
from ._tensor import _CODES, _dtype_name, zeros
from ._util import _Owner, _integer_inputs, _converting, _depends, _destroy, _release_parents, _dumps, _handle, _int, _json_text, _np, _path, _shape_in, _shape_out


# Set while a Python dataset callback runs on this thread (a loader's worker,
# or the caller's with num_workers=0): a DataLoader garbage-collected there
# must not be destroyed there (its destructor would join the running thread).
_in_callback = threading.local()
# Loaders whose last reference went inside a callback: (handle, the
# DataLoader), destroyed by the next DataLoader call outside one (or at exit).
# Until then the DataLoader keeps its dataset, whose Python callbacks it
# calls, and the dataset keeps its handle (_depends). A deque and
# no lock: append and popleft are atomic, and a collection that runs while
# this drains may add to it (a lock would be taken twice on one thread).
_deferred = collections.deque()


# How libdp reports a get_item failure (src/data/callbacks.cpp), with the
# exception type our get_item wrote: the sample whose interrupt to raise.
_CALLBACK_FAILED = re.compile(r'dataset callback failed at index (\d+): (?:KeyboardInterrupt|SystemExit):')


def _destroy_deferred():
    if not _deferred or getattr(_in_callback, 'depth', 0):
        return
    while True:
        try:
            h, loader = _deferred.popleft()
        except IndexError:
            return
        _lib.loader_destroy(h)
        _release_parents(loader)  # its dataset, if that was collected meanwhile


def _callback_get_item(fn, sample_shape, target_dtype, target_shape, interrupts):
    np = _np()
    n_in = math.prod(sample_shape)
    n_t = math.prod(target_shape)

    def get_item(user, index, inp, tgt, err, cap):
        depth = getattr(_in_callback, 'depth', 0)
        try:
            _in_callback.depth = depth + 1
            x, y = fn(index)
            xa = np.asarray(x)
            if xa.dtype.kind in 'iub':
                raise _integer_inputs('get_item\'s input', xa.dtype)
            # The sample's shape, or flat: another layout (HWC for [C, H, W]) would be read as this one.
            if xa.ndim != 1 and xa.shape != sample_shape:
                raise ShapeError(f'input has shape {list(xa.shape)}; the sample shape is {list(sample_shape)} '
                                 '(return that shape or a flat array; an image in HWC order needs '
                                 'x.transpose(2, 0, 1) for [C, H, W])')
            xa = np.ascontiguousarray(xa, dtype=np.float32)
            if xa.size != n_in:
                raise ShapeError(f'input has {xa.size} values; the sample shape {list(sample_shape)} has {n_in}')
            ctypes.memmove(inp, xa.ctypes.data, n_in * 4)
            if target_dtype == 'int64':
                ya = np.asarray(y)
                if ya.size != 1 or ya.dtype.kind not in 'iubf' or (ya.dtype.kind == 'f' and ya.item() != int(ya.item())):
                    raise ArgumentTypeError(f'target {y!r} is not a class index (an int): give target_dtype="float32" '
                                    'for float targets')
                ctypes.c_int64.from_address(tgt).value = int(ya.item())
            else:
                ya = np.ascontiguousarray(y, dtype=np.float32)
                if ya.size != n_t:
                    raise ShapeError(f'target has {ya.size} values; the target shape {list(target_shape)} has {n_t}')
                ctypes.memmove(tgt, ya.ctypes.data, n_t * 4)
            return 0
        except BaseException as e:  # noqa: B902 (reported through the batch, as PyTorch does)
            if not isinstance(e, Exception):  # KeyboardInterrupt, SystemExit: not the batch's fault
                interrupts[int(index)] = e  # next_batch raises it in place of that sample's batch's dp.Error
            msg = f'{type(e).__name__}: {e}'.encode('utf-8', 'replace')[:max(int(cap) - 1, 0)]
            if cap:
                ctypes.memmove(err, msg + b'\0', len(msg) + 1)
            return 1
        finally:
            _in_callback.depth = depth
    return get_item


class Dataset(_Owner):
    """Samples of a float32 input of fixed shape and a target (an int64
    class index, or float32 values). Make one with from_idx, from_cifar10,
    from_arrays or from_callback; FashionMNIST() opens Debian's copy."""
    _copy_hint = 'share it (loaders only read it), or open it again'

    def __init__(self, *a, **k):
        raise ArgumentTypeError('make datasets with Dataset.from_idx, from_cifar10, from_arrays or from_callback '
                                '(or dp.FashionMNIST())')

    @classmethod
    def _wrap(cls, h, ctx, keep=()):
        d = object.__new__(cls)
        d._h, d._ctx, d._keep = h, ctx, keep
        _depends(d, ctx)
        return d

    def __del__(self):
        _destroy(self, _lib.dataset_destroy if _lib else None)

    @classmethod
    def from_idx(cls, images, labels, ctx=None):
        """IDX files (MNIST, Fashion-MNIST), gzip-compressed or not."""
        c = _ctx(ctx)
        h = ctypes.c_void_p()
        _check(_lib.dataset_from_idx(c._h, _path(images, 'from_idx: images'), _path(labels, 'from_idx: labels'),
                                     ctypes.byref(h)))
        return cls._wrap(h, c)

    @classmethod
    def from_cifar10(cls, paths, ctx=None):
        c = _ctx(ctx)
        if isinstance(paths, (str, bytes, os.PathLike)) or not hasattr(paths, '__iter__'):
            raise ArgumentTypeError(f'from_cifar10: paths must be a list of batch files (data_batch_1.bin, ...), '
                                    f'not {type(paths).__name__} {paths!r}')
        paths = list(paths)
        arr = (ctypes.c_char_p * len(paths))(*[_path(p, f'from_cifar10: paths[{i}]') for i, p in enumerate(paths)])
        h = ctypes.c_void_p()
        _check(_lib.dataset_from_cifar10(c._h, arr, len(paths), ctypes.byref(h)))
        return cls._wrap(h, c)

    @classmethod
    def from_arrays(cls, inputs, targets, borrow=True, ctx=None):
        """inputs [N, ...] (float32), targets [N] int class indices or [N, ...]
        float32. borrow=True (where the arrays allow) reads them in place; the
        dataset keeps them alive. Otherwise dp copies them."""
        np = _np()
        c = _ctx(ctx)
        with _converting(f'from_arrays: inputs ({type(inputs).__name__}) as an array'):
            x = np.asarray(inputs)
        with _converting(f'from_arrays: targets ({type(targets).__name__}) as an array'):
            y = np.asarray(targets)
        if x.ndim < 1 or y.ndim < 1 or len(x) != len(y):
            raise ShapeError(f'from_arrays: inputs and targets need the same first dimension (one row per sample), '
                             f'got shapes {x.shape} and {y.shape}')
        if x.dtype.kind in 'iub':
            raise _integer_inputs('from_arrays: inputs', x.dtype)
        with _converting(f'from_arrays: inputs of dtype {x.dtype} as float32'):
            x = np.ascontiguousarray(x, dtype=np.float32)
        tdtype = 'int64' if y.dtype.kind in 'iub' else 'float32'
        with _converting(f'from_arrays: targets of dtype {y.dtype} as {tdtype}'):
            y = np.ascontiguousarray(y, dtype=tdtype)
        nd, shp = _shape_in(x.shape[1:])
        tnd, tshp = _shape_in(y.shape[1:])
        h = ctypes.c_void_p()
        _check(_lib.dataset_from_arrays(c._h, x.ctypes.data if x.size else None, nd, shp, len(x), _CODES[tdtype],
                                        y.ctypes.data if y.size else None, tnd, tshp, 1 if borrow else 0,
                                        ctypes.byref(h)))
        return cls._wrap(h, c, keep=(x, y) if borrow else ())

    @classmethod
    def from_callback(cls, get_item, length, sample_shape, target_shape=(), target_dtype='int64', ctx=None):
        """A dataset of the caller's: get_item(index) -> (input, target), as a
        map-style torch Dataset's __getitem__. It runs on the loader's worker
        threads (holding the GIL, so Python callbacks do not run in parallel:
        num_workers > 0 still overlaps them with training); an exception fails
        that batch with its message, as PyTorch does. KeyboardInterrupt and
        SystemExit (Ctrl-C while get_item runs) are not a batch's failure:
        the loader's next_batch (or the loop over it) raises them as they were."""
        c = _ctx(ctx)
        if not callable(get_item):
            raise ArgumentTypeError(f'from_callback: get_item must be callable (index -> (input, target)), '
                                    f'not {type(get_item).__name__}')
        target_dtype = _dtype_name(target_dtype) or 'int64'
        nd, shp = _shape_in(sample_shape, 'from_callback: sample_shape')
        tnd, tshp = _shape_in(target_shape, 'from_callback: target_shape')
        interrupts = {}  # sample index -> the KeyboardInterrupt/SystemExit its get_item raised
        fn = _lib.GET_ITEM_FN(_callback_get_item(get_item, tuple(shp[:nd]), target_dtype, tuple(tshp[:tnd]), interrupts))
        cb = _lib.DatasetCallbacks(ctypes.sizeof(_lib.DatasetCallbacks), None, _int(length, 'from_callback: length'),
                                   fn, _lib.RELEASE_FN())
        h = ctypes.c_void_p()
        _check(_lib.dataset_from_callbacks(c._h, ctypes.byref(cb), nd, shp, _CODES[target_dtype], tnd, tshp,
                                           ctypes.byref(h)))
        ds = cls._wrap(h, c, keep=(fn, get_item))
        ds._interrupts = interrupts
        return ds

    def __len__(self):
        n = ctypes.c_int64()
        _check(_lib.dataset_length(self._h, ctypes.byref(n)))
        return n.value

    @property
    def sample_shape(self):
        return _shape_out(_lib.dataset_sample_shape, self._h)

    def set_transform(self, spec):
        """{"random_crop": {"size": 32, "padding": 4}, "horizontal_flip": 0.5,
        "normalize": {"mean": [...], "std": [...]}} (dict or JSON)."""
        text = _json_text(spec, 'set_transform: spec')
        with _converting('set_transform: spec'):
            text = text.encode()
        _check(_lib.dataset_set_transform(self._h, text))
        return self


FASHION_MNIST_DIR = '/usr/share/datasets/fashion-mnist'
FASHION_MNIST_NORMALIZE = {'normalize': {'mean': [0.2860], 'std': [0.3530]}}


def FashionMNIST(root=FASHION_MNIST_DIR, train=True, normalize=True, ctx=None):
    """Fashion-MNIST from its IDX files (Debian's dataset-fashion-mnist by
    default), normalised as `dp train --data fashion-mnist` does."""
    prefix = 'train' if train else 't10k'

    def file(name):  # compressed, or not when only that is there
        gz = os.path.join(root, name + '.gz')
        plain = os.path.join(root, name)
        return plain if not os.path.exists(gz) and os.path.exists(plain) else gz
    ds = Dataset.from_idx(file(f'{prefix}-images-idx3-ubyte'), file(f'{prefix}-labels-idx1-ubyte'), ctx=ctx)
    return ds.set_transform(FASHION_MNIST_NORMALIZE) if normalize else ds


_loaders = weakref.WeakSet()


@atexit.register
def _stop_loaders():
    # Worker threads must not call Python callbacks while the interpreter
    # shuts down: destroy (join) every loader first.
    for ld in list(_loaders):
        ld.close()
    _destroy_deferred()


class DataLoader(_Owner):
    """Shuffled batches assembled ahead by worker threads, with PyTorch's
    names and defaults. Iterating runs one epoch and yields (x, y) dp
    tensors: x float32 [rows, ...], y the targets. Two pairs of tensors take
    turns (no allocation per batch): a pair is refilled two batches after it
    was yielded unless it is still referenced or viewed (numpy(),
    __dlpack__), in which case the loader fills new ones; reuse_buffers=False
    always yields new tensors. After the loop, x and y hold the last batch.
    The order of an epoch is a pure function of (seed, epoch).

    shard=model (a DistributedDataParallel) makes it a distributed sampler,
    PyTorch's sampler=DistributedSampler(dataset) done by the group: each
    process's loader reads only its devices' rows of each global batch
    (batch_size is the global batch), so the processes together read every
    batch once, in the order of one unsharded loader. Every process makes it
    with the same dataset size, batch_size, shuffle, drop_last and seed (a
    collective call, checked). A process's share of a batch may be 0 rows:
    the loop then yields empty tensors, which train_step takes, and every
    process's loop runs the same number of batches (len(loader)).

    prefetch (PyTorch's prefetch_factor, accepted too): batches assembled
    ahead per worker. pin_memory=True: batches in page-locked memory, which
    GPU groups copy asynchronously (as PyTorch's; without a GPU, a warning
    and unpinned batches, as PyTorch's). persistent_workers: accepted, as
    PyTorch's True is what dp's worker threads always do (they live as long as
    the loader, across epochs); True with num_workers=0 is refused, as there."""
    _copy_hint = 'make another DataLoader with the same arguments (same seed: the same order)'

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, num_workers=0, prefetch=2, seed=0,
                 reuse_buffers=True, shard=None, pin_memory=False, prefetch_factor=None, persistent_workers=False):
        if persistent_workers and not num_workers:
            raise InvalidArgumentError('DataLoader: persistent_workers option needs num_workers > 0')
        if prefetch_factor is not None:  # PyTorch's name for prefetch (batches ahead per worker)
            if prefetch != 2:
                raise ArgumentTypeError('DataLoader: give prefetch= or prefetch_factor= (the same), not both')
            prefetch = prefetch_factor
        cfg = {'batch_size': batch_size, 'shuffle': bool(shuffle), 'drop_last': bool(drop_last),
               'num_workers': num_workers, 'prefetch': prefetch, 'seed': seed}
        if pin_memory and not device_count('cuda'):  # as PyTorch: a warning, and unpinned batches
            warnings.warn('DataLoader: pin_memory=True, but no usable GPU: batches are not pinned '
                          f'({device_count_why("cuda")})', stacklevel=2)
        elif pin_memory:  # page-locked batches, which GPU groups copy asynchronously
            cfg['pin_memory'] = True
        ds = _handle(dataset, Dataset, 'DataLoader: dataset')
        if shard is not None and not isinstance(shard, DataParallel):
            raise ArgumentTypeError(f'DataLoader: shard: expected the DistributedDataParallel that trains on this '
                                    f'data, got {type(shard).__name__}')
        gh = _handle(shard, DataParallel, 'DataLoader: shard', optional=True)
        text = _dumps(cfg, 'DataLoader: batch_size, num_workers, prefetch and seed must be ints').encode()
        h = ctypes.c_void_p()
        _check(_lib.loader_create(ds, text, ctypes.byref(h)))
        if shard is not None:
            try:
                _check(_lib.loader_shard(h, gh))
            except BaseException:
                _lib.loader_destroy(h)
                raise
        self._h, self.dataset, self._ctx = h, dataset, dataset._ctx
        _depends(self, dataset)
        self.batch_size, self.num_workers = batch_size, num_workers
        self._reuse = reuse_buffers
        self._last = self._spare = (None, None)
        self._abandoned = False
        self._iters = 0  # iterators made: the newest owns the position
        _loaders.add(self)
        _destroy_deferred()

    def _handle(self):
        if self._h is None:
            raise ClosedError('the DataLoader is closed (close() was called); make a new one')
        return self._h

    def close(self):
        """Stops the worker threads and frees the loader (also done when it is
        garbage-collected)."""
        if getattr(_in_callback, 'depth', 0) and getattr(self, '_h', None) is not None:
            # Inside a dataset callback (a collection ran there): later, elsewhere.
            _deferred.append((self._h, self))
            self._h = None
            return
        _destroy(self, _lib.loader_destroy if _lib else None)
        _destroy_deferred()

    def __del__(self):
        self.close()

    def __len__(self):
        n = ctypes.c_int64()
        _check(_lib.loader_num_batches(self._handle(), ctypes.byref(n)))
        return n.value

    @property
    def position(self):
        """(epoch, index of the next batch)."""
        e, b = ctypes.c_int64(), ctypes.c_int64()
        _check(_lib.loader_position(self._handle(), ctypes.byref(e), ctypes.byref(b)))
        return e.value, b.value

    def seek(self, epoch, batch=0):
        """Moves to batch `batch` (0 to len(self), the end of the epoch) of
        epoch `epoch` (>= 0); OutOfRangeError (an IndexError and a ValueError)
        outside those ranges."""
        h = self._handle()
        epoch, batch = _int(epoch, 'seek: epoch'), _int(batch, 'seek: batch')
        try:
            _check(_lib.loader_seek(h, epoch, batch))
        except InvalidArgumentError as e:  # the only refusal of a live loader: a position out of range
            raise OutOfRangeError(e.message) from None
        self._abandoned = False

    def _fresh(self):
        # dp_loader_next sets shape and dtype; it swaps storage with its own.
        return zeros((0,), 'float32', self._ctx), zeros((0,), 'int64', self._ctx)

    def _reusable(self, x, y):
        # The spare pair (the batch before the last one yielded) is referenced
        # here (next_batch's local, this parameter, getrefcount's argument):
        # anything more means the caller kept it, so it is not refilled under
        # it. The last batch yielded is never refilled by the next call, so
        # that after a loop its variables still hold the last batch.
        if x is None or not self._reuse or x._exports or y._exports:
            return False
        refs = getattr(sys, 'getrefcount', None)
        return refs is not None and refs(x) <= 3 and refs(y) <= 3

    def next_batch(self):
        """The next batch as (x, y), or None at the end of an epoch (the next
        call starts the next epoch): dp_loader_next without iteration. A
        sharded loader's (x, y) hold this process's rows, possibly none; None
        comes at the end of the global epoch, on every process together.
        The batch returned last stays as it is until the call after next
        (two pairs of tensors take turns), and the end of an epoch leaves it
        alone: after `for x, y in loader:` x and y hold the last batch."""
        _destroy_deferred()
        x, y = self._spare
        self._spare = (None, None)
        if not self._reusable(x, y):
            x, y = self._fresh()
        rows = ctypes.c_int64()
        try:
            _check(_lib.loader_next(self._handle(), x._h, y._h, ctypes.byref(rows)))
        except Error as e:
            # Ctrl-C in get_item: the user's stop, not a failed batch to skip. Only this batch's
            # own (the sample its error names): another loader of the dataset, or a batch read
            # ahead and never taken, may have left others.
            interrupts = getattr(self.dataset, '_interrupts', None)
            m = _CALLBACK_FAILED.search(str(e)) if interrupts else None
            stop = interrupts.pop(int(m.group(1)), None) if m else None
            if stop is not None:
                raise stop
            raise
        if not rows.value:
            self._spare = (x, y)  # the end-of-epoch fill stays in the spare pair
            return None
        self._spare, self._last = self._last, (x, y)
        return x, y

    def __iter__(self):
        self._handle()
        epoch, batch = self.position
        if batch >= len(self) or (self._abandoned and batch > 0):
            # A finished epoch (a checkpoint saved at its end) or an iteration
            # broken off: start the next epoch, as a new DataLoader iterator does.
            self.seek(epoch + 1, 0)
        self._iters += 1
        return self._epoch(self._iters)

    def _epoch(self, it):
        return _EpochIterator(self, it)


class _EpochIterator:
    """iter(loader): the batches left in the loader's epoch. A DataLoader has
    one position (libdp's loader): the newest iterator owns it, and an older
    one raises instead of reading the newer one's batches (PyTorch's
    iterators are independent: zip(loader, loader)). A batch that fails (a
    Python dataset's exception) raises, and the loader has moved past it: the
    same iterator goes on with the next batch, as PyTorch's does, and so does
    a new iter() (the epoch is not over)."""

    def __init__(self, loader, it):
        self._loader, self._it, self._done = loader, it, False

    def __iter__(self):
        return self

    def __next__(self):
        ld = self._loader
        if self._done:
            raise StopIteration
        if ld._iters != self._it:
            raise InvalidArgumentError('DataLoader: this iterator was replaced by a newer iter() of the same '
                                       'DataLoader, which owns its position: iterate one at a time, or make '
                                       'a DataLoader per iterator')
        ld._abandoned = True  # until the epoch ends: a loop broken off leaves it set
        try:
            b = ld.next_batch()
        except Error:
            ld._abandoned = False  # a failed batch is skipped; iterating again continues the epoch
            raise
        if b is None:
            self._done = True
            ld._abandoned = False
            raise StopIteration
        return b
