"""The library (version, devices) and contexts: the layer registry and
loaded plugins that everything else is made from."""
import ctypes
import threading

from . import _lib
from ._errors import _check
from ._errors import ArgumentTypeError
from ._util import _INT32, _Owner, _destroy, _int, _path, _text


def version():
    """libdp's version string ("0.1.0")."""
    return _lib.version().decode()


def device_count(kind='cuda'):
    """Devices of a kind ("cpu": cores; "cuda": usable GPUs, 0 without a CUDA
    build or GPU: device_count_why() says which)."""
    n, why = ctypes.c_int(), ctypes.c_char_p()
    _check(_lib.device_count(_text(kind, 'device_count: kind'), ctypes.byref(n), ctypes.byref(why)))
    return n.value


def device_count_why(kind='cuda'):
    """Why there are no devices of `kind` ("" when there are)."""
    n, why = ctypes.c_int(), ctypes.c_char_p()
    _check(_lib.device_count(_text(kind, 'device_count_why: kind'), ctypes.byref(n), ctypes.byref(why)))
    return (why.value or b'').decode()


def device_name(kind, index):
    """device_name('cuda', 0) -> 'NVIDIA H200, 139.8 GiB, compute capability 9.0';
    device_name('cpu', 0) -> 'CPU core 0 of <the processor>, oneDNN 2.6.3 sgemm, avx512_core' (the library
    and instruction set of the CPU's matrix products)."""
    name = ctypes.c_char_p()
    _check(_lib.device_name(_text(kind, 'device_name: kind'), _int(index, 'device_name: index', _INT32),
                            ctypes.byref(name)))
    return name.value.decode()


class Context(_Owner):
    """Holds the layer registry and loaded plugins. Everything made from a
    context keeps it alive (a reference), so it is freed last."""
    _copy_hint = 'share the one context (everything made from it keeps it alive), or make another with dp.Context()'

    def __init__(self, memory_limit=0, allow_model_plugins=False):
        """memory_limit: bytes a model, its groups, optimizers and batches may
        take (0: the machine's available memory); beyond it, dp.OutOfMemoryError
        before anything is allocated. allow_model_plugins: let a model's JSON
        load plugin libraries it names by path (docs/plugins.md, threat model)."""
        h = ctypes.c_void_p()
        _check(_lib.context_create(ctypes.byref(h)))
        self._h = h
        self.set_memory_limit(memory_limit)
        self.allow_model_plugins(allow_model_plugins)

    def set_memory_limit(self, nbytes):
        """DP_CONTEXT_MEMORY_LIMIT, for models built after the call."""
        _check(_lib.context_set_option(self._h, 0, _int(nbytes, 'set_memory_limit: nbytes')))
        return self

    def allow_model_plugins(self, allow=True):
        """DP_CONTEXT_ALLOW_MODEL_PLUGINS."""
        if not isinstance(allow, bool):
            raise ArgumentTypeError(f'allow_model_plugins: expected a bool, got {type(allow).__name__}')
        _check(_lib.context_set_option(self._h, 1, 1 if allow else 0))
        return self

    def load_plugin(self, path):
        """Loads a layer plugin (dp_context_load_plugin): a path with '/', or a
        bare name searched in DP_PLUGIN_PATH, then in dp's own plugin folder
        (<folder of libdp.so>/dp/plugins), then in the current folder."""
        _check(_lib.context_load_plugin(self._h, _path(path, 'load_plugin: path')))
        return self

    @property
    def plugins(self):
        """[(path, ["swish@1", ...])] in load order."""
        n = ctypes.c_int()
        _check(_lib.context_num_plugins(self._h, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            p, t = ctypes.c_char_p(), ctypes.c_char_p()
            _check(_lib.context_plugin_info(self._h, i, ctypes.byref(p), ctypes.byref(t)))
            out.append((p.value.decode(), [s for s in t.value.decode().split(',') if s]))
        return out

    def __del__(self):
        _destroy(self, _lib.context_destroy if _lib else None)


_default = None
_default_lock = threading.Lock()


def default_context():
    """The context used when none is given (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Context()
        return _default


def load_plugin(path, ctx=None):
    """Loads a plugin into ctx (default: the default context)."""
    return _ctx(ctx).load_plugin(path)


def _ctx(ctx):
    """ctx, or the default context for None (ArgumentTypeError for anything
    else: its handle would be misread)."""
    if ctx is None:
        return default_context()
    if not isinstance(ctx, Context):
        raise ArgumentTypeError(f'ctx: expected a dp.Context or None, got {type(ctx).__name__}')
    return ctx
