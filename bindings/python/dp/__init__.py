"""dp: data-parallel training (PyTorch's nn.DataParallel) through libdp's C ABI.

    import dp
    model = dp.Model("examples/fashion_mnist_mlp.json")
    net = dp.DataParallel(model, devices="auto")          # replicas persist
    opt = dp.SGD(net, lr=0.05, momentum=0.9)
    train = dp.FashionMNIST(train=True)
    for x, y in dp.DataLoader(train, batch_size=64, shuffle=True, num_workers=2):
        loss = net.train_step(opt, x, y)      # zero_grad, forward, loss, backward, step

Pure Python over ctypes (no compiled extension): any libdp.so of ABI version
1 serves it (see _lib.py for how it is found; DP_LIBRARY names one).
NumPy is optional for the core and needed for arrays in and out.

Across processes (torchrun, mpirun, srun, or by hand), as torch.distributed:

    dp.init_process_group()                          # the launcher's environment
    net = dp.DistributedDataParallel(model)          # this process's share of the cores
    for x, y in dp.DataLoader(train, batch_size=64, shuffle=True, shard=net):
        loss = net.train_step(opt, x, y)             # this process's rows; the global loss

Zero copy: dp.from_numpy(a) and dp.from_dlpack(x) view the caller's memory
(the dp tensor keeps it alive); Tensor.numpy(), numpy.asarray(t) and
Tensor.__dlpack__ view the dp tensor's (the array keeps the tensor alive).
"""
from . import _lib
# dp.IOError shadows the builtin here as before; it is not in __all__, so `from dp import *` keeps the builtin.
from ._errors import (Error, InvalidArgumentError, JSONError, ModelError, ShapeError, IOError, DeviceError,
                      NumericError, OutOfMemoryError, PluginError, InternalError, CommError, ArgumentTypeError,
                      ClosedError, OutOfRangeError, UnknownKeyError, DLPackError, UnsupportedError,
                      MissingDependencyError, StateDictError)
from ._context import Context, default_context, load_plugin, version, device_count, device_count_why, device_name
from ._tensor import HAVE_ZERO_COPY, Tensor, tensor, zeros, from_numpy, as_tensor, from_dlpack
from ._model import Model, DataParallel, Group, IncompatibleKeys, save_weights, load_weights
from ._optim import Optimizer, SGD, Adam, AdamW
from ._data import Dataset, FASHION_MNIST_DIR, FASHION_MNIST_NORMALIZE, FashionMNIST, DataLoader
from ._checkpoint import save_checkpoint, load_checkpoint, checkpoint_metadata
from . import lr_scheduler  # torch.optim.lr_scheduler's schedulers: dp.lr_scheduler.StepLR(opt, ...)
from ._distributed import (ProcessGroup, DistributedDataParallel, init_process_group, is_initialized, get_rank,
                           get_world_size, get_local_rank, barrier, request_stop, stop_requested,
                           destroy_process_group)

__all__ = ['Error', 'InvalidArgumentError', 'JSONError', 'ModelError', 'ShapeError', 'DeviceError', 'NumericError',
           'OutOfMemoryError', 'PluginError', 'InternalError', 'CommError', 'ArgumentTypeError', 'ClosedError',
           'OutOfRangeError', 'UnknownKeyError', 'DLPackError', 'UnsupportedError', 'MissingDependencyError',
           'StateDictError', 'save_weights', 'load_weights', 'IncompatibleKeys',
           'Context', 'default_context', 'load_plugin', 'Model', 'Tensor', 'tensor', 'zeros', 'from_numpy',
           'as_tensor', 'from_dlpack', 'DataParallel', 'Group',
           'Optimizer', 'SGD', 'Adam', 'AdamW', 'lr_scheduler', 'Dataset', 'FashionMNIST', 'DataLoader', 'save_checkpoint',
           'load_checkpoint', 'checkpoint_metadata', 'version', 'library_path', 'ProcessGroup',
           'DistributedDataParallel', 'init_process_group', 'is_initialized', 'get_rank', 'get_world_size',
           'get_local_rank', 'barrier', 'request_stop', 'stop_requested', 'destroy_process_group',
           'device_count', 'device_count_why', 'device_name', 'ABI_VERSION', 'HAVE_ZERO_COPY', 'FASHION_MNIST_DIR',
           'FASHION_MNIST_NORMALIZE']

ABI_VERSION = _lib.ABI_VERSION
library_path = _lib.path
__version__ = version()

# The exceptions keep dp as their module, as when they were defined here:
# tracebacks read "dp.ModelError: ...", and pickles name dp.ModelError.
for _cls in (Error, InvalidArgumentError, JSONError, ModelError, ShapeError, IOError, DeviceError, NumericError,
             OutOfMemoryError, PluginError, InternalError, CommError, ArgumentTypeError, ClosedError, OutOfRangeError,
             UnknownKeyError, DLPackError, UnsupportedError, MissingDependencyError, StateDictError):
    _cls.__module__ = __name__
del _cls
