"""Training across processes, with torch.distributed's names: a process
group (dp.init_process_group and the default group's get_rank, barrier, ...)
and dp.DistributedDataParallel, one group over every process's devices.

    import dp
    dp.init_process_group()                  # torchrun's environment; none: a world of one
    model = dp.DistributedDataParallel(dp.Model("model.json"))      # this process's cores
    loader = dp.DataLoader(train, batch_size=64, shuffle=True, shard=model)
    for x, y in loader:                       # this process's rows of each global batch
        loss = model.train_step(opt, x, y)    # the global batch's loss, on every rank

Unlike torch.distributed, the sampler belongs to the group (DataLoader's
shard=), and train_step reduces the loss over the global batch, so results
do not depend on the number of processes; backward, as DataParallel's, adds
the gradients of every device of every process (a grad_output scaled for
the global batch gives the global batch's gradients).
"""
import ctypes
import datetime
import numbers
import operator
import os
import threading
import urllib.parse
import warnings

from . import _lib
from ._context import device_count
from ._errors import ArgumentTypeError, ClosedError, InvalidArgumentError, UnsupportedError, _check
from ._model import DataParallel, Model, _check_gather, _device_text, _devices, _either_devices
from ._util import _Owner, _converting, _depends, _destroy, _dumps, _handle


def _int_key(name, value):
    try:
        return operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f'{name} must be an int, got {type(value).__name__} {value!r}') from None


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return float(timeout)
    raise ArgumentTypeError(f'timeout must be a datetime.timedelta or seconds, got {type(timeout).__name__}')


def _config(init_method, timeout, world_size, rank, local_rank, master_addr, master_port):
    """The process group's JSON config (a dict) from init_process_group's
    arguments: only the keys given; the rest come from the environment."""
    cfg = {}
    if init_method is not None and init_method != 'env://':
        if not isinstance(init_method, str):
            raise ArgumentTypeError(f'init_method must be a str ("env://" or "tcp://HOST:PORT"), '
                                    f'got {type(init_method).__name__}')
        url = urllib.parse.urlsplit(init_method)
        if url.scheme not in ('tcp', 'env'):
            raise InvalidArgumentError(f'init_method {init_method!r}: dp supports "env://" (the default: MASTER_ADDR, '
                             f'MASTER_PORT, RANK, WORLD_SIZE) and "tcp://HOST:PORT"')
        if url.scheme == 'tcp':
            try:
                port = url.port
            except ValueError:
                port = None
            if not url.hostname or port is None:
                raise InvalidArgumentError(f'init_method {init_method!r}: expected "tcp://HOST:PORT"')
            if master_addr is not None or master_port is not None:
                raise InvalidArgumentError('give the address either in init_method or as master_addr/master_port, '
                                           'not both')
            cfg['master_addr'], cfg['master_port'] = url.hostname, port
        # As torch.distributed: "tcp://host:port?rank=0&world_size=2".
        query = urllib.parse.parse_qs(url.query)
        for key in ('rank', 'world_size'):
            if key in query:
                try:
                    cfg[key] = int(query[key][-1])
                except ValueError:
                    raise InvalidArgumentError(f'init_method {init_method!r}: {key} must be an int') from None
    # -1 is torch.distributed's "not given" for rank and world_size.
    for key, value in (('rank', rank), ('world_size', world_size)):
        if value is not None and value != -1:
            value = _int_key(key, value)
            if key in cfg and cfg[key] != value:
                raise InvalidArgumentError(f'{key}={value} differs from init_method\'s {key}={cfg[key]}')
            cfg[key] = value
    # init_method="env://" named: the launcher's variables are expected, as torch.distributed
    # expects them (without any init_method, no launcher is a world of one).
    if init_method == 'env://':
        for key, names in (('rank', ('RANK', 'OMPI_COMM_WORLD_RANK', 'SLURM_PROCID')),
                           ('world_size', ('WORLD_SIZE', 'OMPI_COMM_WORLD_SIZE', 'SLURM_NTASKS'))):
            if key not in cfg and not any(os.environ.get(n) for n in names):
                raise InvalidArgumentError(f'init_method="env://": environment variable {names[0]} expected, but not '
                                           f'set (a launcher sets it: torchrun, mpirun, srun; or give {key}=)')
    if local_rank is not None:
        cfg['local_rank'] = _int_key('local_rank', local_rank)
    if master_addr is not None:
        cfg['master_addr'] = str(master_addr)
    if master_port is not None:
        cfg['master_port'] = _int_key('master_port', master_port)
    if timeout is not None:
        cfg['timeout_s'] = _seconds(timeout)
    return cfg


class ProcessGroup(_Owner):
    """The processes that train one model together (dp_process_group), as
    torch.distributed's ProcessGroup. Creating one is collective: it returns
    once every process has joined. config: a dict (or JSON text) with any of
    "rank", "world_size", "local_rank", "master_addr", "master_port",
    "timeout_s"; keys left out come from the launcher's environment (torchrun's
    RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; mpirun's; srun's),
    and with none a world of one process. Most programs use
    dp.init_process_group instead, which keeps one as the default group."""
    _copy_hint = 'a process has one group per set of processes: pass this one'

    def __init__(self, config=None):
        if 'dp_process_group_create' in _lib.missing:
            raise UnsupportedError(f'dp: {_lib.path} predates process groups (dp_process_group_create); '
                                   f'use a newer libdp')
        if config is not None and not isinstance(config, (dict, str, bytes)):
            raise ArgumentTypeError(f'ProcessGroup: config must be a dict or JSON text, got {type(config).__name__}')
        with _converting('ProcessGroup: config'):
            if isinstance(config, dict):
                text = _dumps(config, 'ProcessGroup: config').encode() if config else None
            else:
                text = (config.encode() if isinstance(config, str) else config) or None
        h = ctypes.c_void_p()
        _check(_lib.process_group_create(text, ctypes.byref(h)))
        self._h = h

    def _handle(self):
        if self._h is None:
            raise ClosedError('the process group was destroyed (destroy() or dp.destroy_process_group()); '
                              'make a new one')
        return self._h

    def _int(self, fn):
        v = ctypes.c_int()
        _check(fn(self._handle(), ctypes.byref(v)))
        return v.value

    @property
    def rank(self):
        """This process's rank, in [0, world_size)."""
        return self._int(_lib.process_group_rank)

    @property
    def world_size(self):
        """The number of processes."""
        return self._int(_lib.process_group_world_size)

    @property
    def local_rank(self):
        """This process's rank among those on its machine (LOCAL_RANK)."""
        return self._int(_lib.process_group_local_rank)

    @property
    def local_world_size(self):
        """The number of the group's processes on this machine (those with
        this host name): they share its cores."""
        return self._int(_lib.process_group_local_world_size)

    def barrier(self):
        """Returns once every process has called it."""
        _check(_lib.process_group_barrier(self._handle()))

    def check_same(self, what, value):
        """A collective check that every process has the same value (str) of
        a setting of its own (a script's arguments, say): InvalidArgumentError
        on every process naming the rank that differs and both values."""
        if 'dp_process_group_check_same' in _lib.missing:
            raise UnsupportedError(f'dp: {_lib.path} predates dp_process_group_check_same; use a newer libdp')
        with _converting('ProcessGroup.check_same: what and value (str)'):
            w, v = str(what).encode(), str(value).encode()
        _check(_lib.process_group_check_same(self._handle(), w, v))

    def request_stop(self):
        """Asks every process of the group to stop together, e.g. when this
        one got KeyboardInterrupt: a process that leaves its loop alone
        leaves the others waiting in its next collective until the timeout.
        The request travels with the results of the next train_step,
        evaluate or forward of a model on this group (not backward), and after
        it stop_requested() gives every process the same answer."""
        _check(_lib.process_group_request_stop(self._handle()))

    def stop_requested(self):
        """How many processes have asked to stop (request_stop), as agreed by
        all after the same step: 0 while none has. A training loop checks it
        after each step and leaves the loop when it is non-zero, on every
        process after the same step, then saves (save is collective)."""
        return self._int(_lib.process_group_stop_requested)

    def destroy(self):
        """Leaves the process group (also done when it is garbage-collected).
        Groups made on it keep the connections until they are freed."""
        _destroy(self, _lib.process_group_destroy if _lib else None)

    def __del__(self):
        self.destroy()

    def __repr__(self):
        if self._h is None:
            return 'ProcessGroup(destroyed)'
        return f'ProcessGroup(rank={self.rank}, world_size={self.world_size}, local_rank={self.local_rank})'


_default = None
_default_lock = threading.Lock()


def init_process_group(backend=None, init_method=None, timeout=None, world_size=None, rank=None, *,
                       local_rank=None, master_addr=None, master_port=None):
    """Joins the default process group, as torch.distributed.init_process_group:
    a collective call that returns once every process has joined. Without
    arguments it reads the launcher's environment ("env://": torchrun's RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; Open MPI's and Slurm's
    variables too), and with no launcher it makes a world of one process, so a
    script may call it unconditionally. Arguments given override the
    environment: init_method "tcp://HOST:PORT" (or master_addr and
    master_port), world_size, rank, local_rank, timeout (a datetime.timedelta
    or seconds: how long to wait for the others, here and in every later
    collective call; default DP_COMM_TIMEOUT, else 300 s). backend: None,
    "gloo" or "nccl": processes talk over TCP with Gloo, and groups on GPUs
    sum gradients with NCCL whichever is named; "mpi" (a job mpirun started,
    in a dp built with Open MPI): CPU tensors go through Open MPI, over
    shared memory on one machine, and any failure in a step ends the whole
    job (docs/distributed.md). None also reads DP_BACKEND. Rank 0 serves the
    start-up store at master_addr:master_port. Raises ValueError when already
    initialized, dp.ModelError for a bad value (a rank outside the world),
    dp.CommError when the others do not all arrive within the timeout,
    dp.IOError when rank 0 cannot listen on the port. Returns the group."""
    global _default
    if backend is not None and str(backend).lower() not in ('gloo', 'nccl', 'cpu:gloo,cuda:nccl', 'mpi'):
        raise InvalidArgumentError(f'backend {backend!r}: dp\'s process groups use Gloo (or Open MPI under mpirun), '
                                   f'and NCCL for groups on GPUs; use backend="gloo", "mpi" or "nccl", or leave it out')
    cfg = _config(init_method, timeout, world_size, rank, local_rank, master_addr, master_port)
    if backend is not None:
        cfg['backend'] = 'mpi' if str(backend).lower() == 'mpi' else 'gloo'
    with _default_lock:
        if _default is not None:
            raise InvalidArgumentError('trying to initialize the default process group twice '
                             '(dp.destroy_process_group() first)')
        _default = ProcessGroup(cfg)
        return _default


def is_initialized():
    """Whether init_process_group has made the default process group."""
    return _default is not None


def _group(group):
    if group is not None:
        if not isinstance(group, ProcessGroup):
            raise ArgumentTypeError(f'group: expected a dp.ProcessGroup or None (the default group), '
                                    f'got {type(group).__name__}')
        return group
    pg = _default
    if pg is None:
        raise InvalidArgumentError('the default process group has not been initialized: call dp.init_process_group() '
                         'first (without a launcher it makes a world of one process)')
    return pg


def get_rank(group=None):
    """This process's rank in the group (default: the default group). Raises
    ValueError before init_process_group, as torch.distributed does."""
    return _group(group).rank


def get_world_size(group=None):
    """The number of processes in the group (default: the default group).
    Raises ValueError before init_process_group, as torch.distributed does."""
    return _group(group).world_size


def get_local_rank(group=None):
    """This process's rank among the group's processes on its machine
    (LOCAL_RANK). Raises ValueError before init_process_group."""
    return _group(group).local_rank


def barrier(group=None):
    """Returns once every process of the group (default: the default group) has called it."""
    _group(group).barrier()


def request_stop(group=None):
    """Asks every process of the group (default: the default group) to stop
    together: see ProcessGroup.request_stop."""
    _group(group).request_stop()


def stop_requested(group=None):
    """How many processes of the group (default: the default group) have
    asked to stop, the same on every process after the same step: see
    ProcessGroup.stop_requested."""
    return _group(group).stop_requested()


def destroy_process_group(group=None):
    """Leaves the group (default: the default group, which is then no longer
    initialized; init_process_group may make a new one). Models made on it
    keep working until they are freed; free them before joining a new group
    on the same port."""
    global _default
    with _default_lock:
        if group is None or group is _default:
            pg = _group(group)
            _default = None
        else:
            pg = _group(group)
    pg.destroy()


def _process_devices(devices, pg):
    """DistributedDataParallel's devices: "auto" in a world of several
    processes is this process's share of the machine's GPUs (with at least
    one per process: GPUs // processes on this machine, from
    cuda:local_rank * that; one GPU per process is cuda:LOCAL_RANK; every
    GPU it sees when CUDA_VISIBLE_DEVICES shows it fewer), else of its cores
    (cores // processes, at least 1); in a world of one, as
    DataParallel's "auto"."""
    if (devices is None or devices == 'auto') and pg.world_size > 1:
        local = pg.local_world_size
        gpus = device_count('cuda')
        if gpus >= local:
            k = gpus // local
            return ','.join(f'cuda:{i}' for i in range(pg.local_rank * k, (pg.local_rank + 1) * k))
        if gpus > 0 and os.environ.get('CUDA_VISIBLE_DEVICES'):  # each process shown its own GPUs
            return ','.join(f'cuda:{i}' for i in range(gpus))
        n = max(1, device_count('cpu') // local)
        return ','.join(f'cpu:{i}' for i in range(n))
    return _devices(devices)


class DistributedDataParallel(DataParallel):
    """One group over the devices of every process of a process group, as
    torch.nn.parallel.DistributedDataParallel; the same API as DataParallel.
    Every process makes it (a collective call) from the same model, naming
    its own devices ("auto": this process's share of the machine's GPUs, or
    of its cores; "cpu:0,cpu:1"; "cuda:1"; a list; a count; every process
    on CPUs or every process on GPUs), and then makes the same calls in the
    same order. Every process starts from rank 0's parameters and buffers.
    The global batch is split over all processes' devices in rank order;
    each process passes only its rows (a DataLoader made with shard=this
    reads exactly those), may pass 0 rows, and train_step/evaluate return the
    global batch's loss and correct count on every process; calling it
    returns this process's rows of the output. save_checkpoint writes on rank
    0 only, load_checkpoint reads on every process (both collective).
    process_group: default, the one init_process_group made.

    PyTorch's keyword arguments, as far as they mean something here:
    device_ids (instead of devices: ints are cuda:i, as PyTorch's),
    output_device (the first device, PyTorch's default) and dim (0);
    find_unused_parameters, gradient_as_bucket_view, static_graph,
    check_reduction and bucket_cap_mb are accepted and change nothing (dp sums
    every parameter's gradient, zero where a parameter was not used, and sizes
    its own buckets: bucket_cap_mb warns so); broadcast_buffers and init_sync
    only as True (every process starts from rank 0's parameters and buffers,
    and batch norm's statistics are merged over all processes at every step)."""

    def __init__(self, model, devices=None, process_group=None, *, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, init_sync=True, bucket_cap_mb=None, find_unused_parameters=False,
                 check_reduction=False, gradient_as_bucket_view=False, static_graph=False):
        fn = 'DistributedDataParallel'
        devices = _either_devices(fn, devices, device_ids)
        for name, value in (('broadcast_buffers', broadcast_buffers), ('init_sync', init_sync),
                            ('find_unused_parameters', find_unused_parameters), ('check_reduction', check_reduction),
                            ('gradient_as_bucket_view', gradient_as_bucket_view), ('static_graph', static_graph)):
            if not isinstance(value, bool):
                raise ArgumentTypeError(f'{fn}: {name} must be a bool, not {type(value).__name__} {value!r}')
        if not broadcast_buffers:
            raise UnsupportedError(f'{fn}: broadcast_buffers=False: dp keeps every buffer the same on every process '
                                   '(batch norm\'s statistics are merged over all processes at every step), so no '
                                   'process can keep its own')
        if not init_sync:
            raise UnsupportedError(f'{fn}: init_sync=False: every process starts from rank 0\'s parameters and buffers')
        if bucket_cap_mb is not None:
            if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, numbers.Real) or not bucket_cap_mb > 0:
                raise InvalidArgumentError(f'{fn}: bucket_cap_mb must be a positive number, got {bucket_cap_mb!r}')
            warnings.warn(f'{fn}: bucket_cap_mb={bucket_cap_mb} is ignored: dp sizes its own gradient buckets '
                          '(0.25 MiB on CPUs, 4 MiB on GPUs; the DP_BUCKET_MB environment variable sets them)',
                          stacklevel=2)
        pg = _group(process_group)
        if not isinstance(model, Model):
            model = Model(model)
        m = _handle(model, Model, 'DistributedDataParallel: model')
        h = ctypes.c_void_p()
        mine = _process_devices(devices, pg)
        _check_gather(fn, mine, output_device, dim)
        _check(_lib.group_create_distributed(m, _device_text(mine), pg._handle(), ctypes.byref(h)))
        self._h, self.model, self._ctx, self.process_group = h, model, model._ctx, pg
        _depends(self, model)
        self.training = True
        self._devices = _devices(mine)

    def __repr__(self):
        return (f'DistributedDataParallel(rank={self.process_group.rank}, devices={self._devices!r}, '
                f'module={self.model!r})')
