"""The library (version, devices) and contexts: the layer registry and
loaded plugins that everything else is made from."""
import ctypes
import threading

from . import _lib
from ._errors import _check
from ._util import _destroy, _path


def version():
    """libdp's version string ("0.1.0")."""
    return _lib.version().decode()


def device_count(kind='cuda'):
    """Devices of a kind ("cpu": cores; "cuda": usable GPUs, 0 without a CUDA
    build or GPU: device_count_why() says which)."""
    n, why = ctypes.c_int(), ctypes.c_char_p()
    _check(_lib.device_count(kind.encode(), ctypes.byref(n), ctypes.byref(why)))
    return n.value


def device_count_why(kind='cuda'):
    """Why there are no devices of `kind` ("" when there are)."""
    n, why = ctypes.c_int(), ctypes.c_char_p()
    _check(_lib.device_count(kind.encode(), ctypes.byref(n), ctypes.byref(why)))
    return (why.value or b'').decode()


def device_name(kind, index):
    """device_name('cuda', 0) -> 'NVIDIA H200, 139.8 GiB, compute capability 9.0'."""
    name = ctypes.c_char_p()
    _check(_lib.device_name(kind.encode(), int(index), ctypes.byref(name)))
    return name.value.decode()


class Context:
    """Holds the layer registry and loaded plugins. Everything made from a
    context keeps it alive (a reference), so it is freed last."""

    def __init__(self):
        h = ctypes.c_void_p()
        _check(_lib.context_create(ctypes.byref(h)))
        self._h = h

    def load_plugin(self, path):
        """Loads a layer plugin (dp_context_load_plugin): a path with '/', or a
        bare name searched in DP_PLUGIN_PATH."""
        _check(_lib.context_load_plugin(self._h, _path(path)))
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
    return (ctx or default_context()).load_plugin(path)


def _ctx(ctx):
    return ctx or default_context()
