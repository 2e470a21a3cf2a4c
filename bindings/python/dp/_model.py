"""Models (dp.Model, from JSON) and the data-parallel groups that train them
on a list of devices (dp.DataParallel, alias dp.Group)."""
import collections
import collections.abc
import ctypes
import json
import math
import os

from . import _lib
from ._context import _ctx, device_count
from ._errors import (ArgumentTypeError, InvalidArgumentError, ModelError, ShapeError, StateDictError, UnknownKeyError,
                      UnsupportedError, _check)
from ._tensor import Tensor, as_tensor, tensor
from ._util import (_INT64, _Owner, _as_f32, _converting, _integer_inputs, _depends, _destroy, _float, _handle, _int, _json_text, _np, _np_or_none, _path, _shape_out,
                    _st_read, _st_write)

_NBT = 'num_batches_tracked'

IncompatibleKeys = collections.namedtuple('IncompatibleKeys', ['missing_keys', 'unexpected_keys'])
IncompatibleKeys.__doc__ = ('What load_state_dict(sd, strict=False) returns, as PyTorch\'s '
                            'torch.nn.modules.module._IncompatibleKeys: the keys sd lacks and those the model lacks.')


def _with_nbt(tensors):
    """libdp's weights in PyTorch's state_dict order, with the
    num_batches_tracked (int64, 0-d) PyTorch keeps beside each batch norm's
    running statistics: dp keeps no count, so it is 0."""
    np = _np()
    out = collections.OrderedDict()
    for name, a in tensors.items():
        out[name] = a
        if name == 'running_var' or name.endswith('.running_var'):
            out[name[:-len('running_var')] + _NBT] = np.array(0, np.int64)
    return out


def _split(flat, info):
    """{name: array of its shape} (copies) from a flat array laid out as info, [(name, shape)]."""
    out, at = collections.OrderedDict(), 0
    for name, shape in info:
        n = math.prod(shape)
        out[name] = flat[at:at + n].reshape(shape).copy()
        at += n
    return out


def _sorted_by_module(tensors, param_names):
    # libdp writes parameters, then buffers; PyTorch lists each module's
    # parameters and then its buffers, module by module, in the Sequential's
    # order ("1.running_mean" of a batch norm without parameters before
    # "2.weight").
    order = {}
    for n in list(param_names) + list(tensors):
        order.setdefault(n.rpartition('.')[0], len(order))
    pos = {n: i for i, n in enumerate(tensors)}

    def key(n):
        first = n.split('.', 1)[0]
        return (int(first) if first.isdigit() else len(tensors), order[n.rpartition('.')[0]], pos[n])
    return collections.OrderedDict((n, tensors[n]) for n in sorted(tensors, key=key))


def _fail_keys(what, missing, unexpected):
    msg = f'Error(s) in loading state_dict for {what}:'
    if missing:
        msg += '\n\tMissing key(s) in state_dict: ' + ', '.join(f'"{k}"' for k in missing) + '.'
    if unexpected:
        msg += '\n\tUnexpected key(s) in state_dict: ' + ', '.join(f'"{k}"' for k in unexpected) + '.'
    raise StateDictError(msg, missing_keys=missing, unexpected_keys=unexpected)


def _is_json_text(s):
    return isinstance(s, (str, bytes)) and s.lstrip()[:1] in ('{', b'{')


def _spec_dict(spec):
    """The model's JSON as a dict, for repr (None where it cannot be read here:
    a file with comments, say; libdp read it)."""
    try:
        if isinstance(spec, dict):
            return spec
        if _is_json_text(spec):
            return json.loads(spec)
        with open(spec, 'rb') as f:
            return json.load(f)
    except (OSError, ValueError, TypeError):
        return None


def _abspath(p, what):
    """A model file's path made absolute, so that a copy built later finds it
    after a chdir."""
    return os.fsencode(os.path.abspath(os.fsdecode(_path(p, what))))


def _json_utf8(spec):
    text = _json_text(spec, 'model JSON')
    with _converting('model JSON'):
        return text.encode()


class Model(_Owner):
    """A model built from JSON (docs/model-format.md): a dict, JSON text, or
    a file path (str or os.PathLike; plugin paths in it are relative to it).

    copy.deepcopy(model) is an independent model with the same weights and
    buffers (gradients start at zero), as for an EMA or best-so-far copy;
    copy.copy and pickle are refused (save weights with save_weights or
    state_dict)."""
    _copy_hint = ('copy.deepcopy(model) makes an independent model with the same weights; to store one, '
                  'save_weights(path) or state_dict()')

    def __init__(self, spec, ctx=None):
        c = _ctx(ctx)
        h = ctypes.c_void_p()
        if isinstance(spec, (dict, list)) or _is_json_text(spec):
            _check(_lib.model_from_json(c._h, _json_utf8(spec), ctypes.byref(h)))
        elif isinstance(spec, (str, bytes, os.PathLike)):
            _check(_lib.model_from_file(c._h, _path(spec, 'dp.Model: path'), ctypes.byref(h)))
        else:
            raise ArgumentTypeError(f'dp.Model takes a dict, JSON text or the path of a JSON file, '
                                    f'not {type(spec).__name__}')
        self._h, self._ctx, self._spec = h, c, _spec_dict(spec)
        _depends(self, c)
        self._source = ('json', _json_utf8(spec)) if isinstance(spec, (dict, list)) or _is_json_text(spec) else \
            ('file', _abspath(spec, 'dp.Model: path'))

    @classmethod
    def from_json(cls, text, ctx=None):
        m = object.__new__(cls)
        c = _ctx(ctx)
        h = ctypes.c_void_p()
        _check(_lib.model_from_json(c._h, _json_utf8(text), ctypes.byref(h)))
        m._h, m._ctx, m._spec = h, c, _spec_dict(text)
        _depends(m, c)
        m._source = ('json', _json_utf8(text))
        return m

    @classmethod
    def from_file(cls, path, ctx=None):
        m = object.__new__(cls)
        c = _ctx(ctx)
        h = ctypes.c_void_p()
        _check(_lib.model_from_file(c._h, _path(path, 'Model.from_file: path'), ctypes.byref(h)))
        m._h, m._ctx, m._spec = h, c, _spec_dict(path)
        _depends(m, c)
        m._source = ('file', _abspath(path, 'Model.from_file: path'))
        return m

    def __deepcopy__(self, memo):
        """An independent model: built again from the same JSON (the same file,
        read again: its plugins are already loaded), in the same context, then
        given this model's parameters and buffers. Gradients start at zero."""
        kind, source = self._source
        h = ctypes.c_void_p()
        build = _lib.model_from_json if kind == 'json' else _lib.model_from_file
        _check(build(self._ctx._h, source, ctypes.byref(h)))
        m = object.__new__(type(self))
        m._h, m._ctx, m._spec, m._source = h, self._ctx, self._spec, self._source
        _depends(m, self._ctx)
        try:
            m.set_parameters(self.parameters())
            m.set_buffers(self.buffers())
        except (InvalidArgumentError, ModelError, ShapeError) as e:  # the file changed since the model was built
            where = os.fsdecode(source) if kind == 'file' else 'its JSON'
            raise ModelError(f'copy.deepcopy(model): the copy, built again from {where}, does not take this '
                             f'model\'s weights (was the file changed?): {e}') from e
        memo[id(self)] = m
        return m

    def __repr__(self):
        """As print(torch_model) reads: each layer with its settings and its
        parameters' shapes, the loss, the input and output shapes."""
        shapes = {}
        for name, shape in self.parameter_info():
            key, _, leaf = name.rpartition('.')
            shapes.setdefault(key, []).append(f'{leaf} {list(shape)}')
        spec = getattr(self, '_spec', None)
        layers = spec.get('layers') if isinstance(spec, dict) else None
        lines = []
        for i, layer in enumerate(layers if isinstance(layers, list) else []):
            if not isinstance(layer, dict):
                continue
            key = str(layer.get('name', i))
            args = ', '.join(f'{k}={v!r}' for k, v in layer.items() if k not in ('type', 'name', 'inputs'))
            line = f'  ({key}): {layer.get("type")}({args})'
            if 'inputs' in layer:
                line += f' <- {layer["inputs"]}'
            if key in shapes:
                line += '    # ' + ', '.join(shapes[key])
            lines.append(line)
        loss = spec.get('loss') if lines else None
        if isinstance(loss, dict):
            lines.append('  (loss): ' + str(loss.get('type')) + '(' +
                         ', '.join(f'{k}={v!r}' for k, v in loss.items() if k != 'type') + ')')
        head = (f'dp.Model(input {list(self.input_shape)} -> output {list(self.output_shape)}, '
                f'{self.num_parameters:,} parameters')
        return head + (':\n' + '\n'.join(lines) + '\n)' if lines else ')')

    def __del__(self):
        _destroy(self, _lib.model_destroy if _lib else None)

    @property
    def num_parameters(self):
        n = ctypes.c_int64()
        _check(_lib.model_num_parameters(self._h, ctypes.byref(n)))
        return n.value

    def parameters(self):
        """All parameters (float32, declaration order) as one flat array (a copy)."""
        np = _np()
        out = np.empty(self.num_parameters, np.float32)
        _check(_lib.model_copy_parameters(self._h, out.ctypes.data, out.size))
        return out

    def set_parameters(self, values):
        np = _np()
        with _converting(f'set_parameters: values ({type(values).__name__}) as float32'):
            a = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        _check(_lib.model_set_parameters(self._h, a.ctypes.data, a.size))

    def gradients(self):
        np = _np()
        out = np.empty(self.num_parameters, np.float32)
        _check(_lib.model_copy_gradients(self._h, out.ctypes.data, out.size))
        return out

    def buffers(self):
        """Buffers (batch-norm running statistics) as one flat array (a copy)."""
        np = _np()
        n = ctypes.c_int64()
        _check(_lib.model_num_buffers(self._h, ctypes.byref(n)))
        out = np.empty(n.value, np.float32)
        _check(_lib.model_copy_buffers(self._h, out.ctypes.data if n.value else None, out.size))
        return out

    def parameter_info(self):
        """[(name, shape)] as nn.Sequential names them ("0.weight")."""
        return self._tensor_info(_lib.model_num_parameter_tensors, _lib.model_parameter_info)

    def buffer_info(self):
        """[(name, shape)] of the buffers ("1.running_mean"), as the model's state_dict names them."""
        self._need('dp_model_buffer_info', 'buffer_info')
        return self._tensor_info(_lib.model_num_buffer_tensors, _lib.model_buffer_info)

    def set_buffers(self, values):
        """Overwrites the buffers from one flat array (buffers()' layout)."""
        self._need('dp_model_set_buffers', 'set_buffers')
        np = _np()
        with _converting(f'set_buffers: values ({type(values).__name__}) as float32'):
            a = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        _check(_lib.model_set_buffers(self._h, a.ctypes.data if a.size else None, a.size))

    def _need(self, fn, what):
        if fn in _lib.missing:
            raise UnsupportedError(f'dp: {_lib.path} predates {fn} (Model.{what}); use a newer libdp')

    def _tensor_info(self, count_fn, info_fn):
        n = ctypes.c_int()
        _check(count_fn(self._h, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            name, nd = ctypes.c_char_p(), ctypes.c_int()
            shp = (ctypes.c_int64 * _lib.MAX_DIMS)()
            _check(info_fn(self._h, i, ctypes.byref(name), ctypes.byref(nd), shp))
            out.append((name.value.decode(), tuple(shp[:nd.value])))
        return out

    def named_parameters(self):
        """[(name, array)] (copies), in declaration order: PyTorch's pairs, so
        `for name, p in model.named_parameters()` and
        `dict(model.named_parameters())` work as there. Changing an array
        changes the copy only: set_parameters or load_state_dict write."""
        return list(_split(self.parameters(), self.parameter_info()).items())

    @property
    def input_shape(self):
        return _shape_out(_lib.model_input_shape, self._h)

    @property
    def output_shape(self):
        return _shape_out(_lib.model_output_shape, self._h)

    def load_safetensors(self, path):
        _check(_lib.model_load_safetensors(self._h, _path(path, 'load_safetensors: path')))

    def save_safetensors(self, path):
        """libdp's weights file: parameters and buffers (no num_batches_tracked)."""
        _check(_lib.model_save_safetensors(self._h, _path(path, 'save_safetensors: path')))

    def save_weights(self, path):
        """The weights for PyTorch in one call: a safetensors file of exactly
        the keys torch's state_dict() has for the same architecture
        (parameters, buffers, num_batches_tracked = 0), no optimizer state:
        torch_model.load_state_dict(safetensors.torch.load_file(path)) takes
        it with strict=True. Written atomically (dp_model_save_weights)."""
        if 'dp_model_save_weights' not in _lib.missing:
            _check(_lib.model_save_weights(self._h, _path(path, 'save_weights: path')))
            return
        # A libdp before dp_model_save_weights: its file, then the counts added here.
        p = os.fsdecode(_path(path, 'save_weights: path'))
        self.save_safetensors(p)
        tensors, _ = _st_read(p)
        if any(n == 'running_var' or n.endswith('.running_var') for n in tensors):
            tmp = p + '.tmp-dp-save-weights'
            try:
                _st_write(tmp, _with_nbt(tensors))
                os.replace(tmp, p)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)

    load_weights = load_safetensors

    def export_onnx(self, path):
        """The model with its current weights as an ONNX file for inference
        runtimes (onnxruntime.InferenceSession(path)): evaluation form (batch
        norm with its running statistics, dropout removed), input "input" and
        output "output", float32, batch dimension "N"; checked with ONNX's
        checker. A layer type without an ONNX mapping (a plugin's) raises
        dp.ModelError naming it; a libdp built without ONNX support, dp.IOError."""
        if 'dp_model_export_onnx' in _lib.missing:
            raise UnsupportedError(f'dp: {_lib.path} predates ONNX export (dp_model_export_onnx); use a newer libdp')
        _check(_lib.model_export_onnx(self._h, _path(path, 'export_onnx: path')))

    def state_dict(self):
        """{name: NumPy array} (copies) with PyTorch's names and order:
        parameters ("0.weight"), buffers ("1.running_mean") and each batch
        norm's num_batches_tracked (0: dp keeps no count)."""
        params = self.parameter_info()
        tensors = _split(self.parameters(), params)
        tensors.update(_split(self.buffers(), self.buffer_info()))
        return _with_nbt(_sorted_by_module(tensors, [n for n, _ in params]))

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copies a state_dict's arrays (NumPy, dp or torch CPU tensors, lists)
        into the parameters and buffers, as PyTorch's load_state_dict:
        strict=True raises dp.StateDictError (a RuntimeError) naming missing
        and unexpected keys; strict=False loads the keys both have and returns
        IncompatibleKeys(missing_keys, unexpected_keys). A shape mismatch
        raises either way. num_batches_tracked is accepted and ignored (dp
        keeps no count), and not required. Nothing changes when it raises."""
        return self._load_state_dict(state_dict, strict, '', type(self).__name__)

    def _load_state_dict(self, state_dict, strict, prefix, what):
        if not isinstance(state_dict, collections.abc.Mapping):
            raise ArgumentTypeError(f'load_state_dict: expected a dict of arrays, got {type(state_dict).__name__}')
        cur = self.state_dict()
        given = {}
        for k in state_dict:
            if not isinstance(k, str):
                raise ArgumentTypeError(f'load_state_dict: keys must be str, got {type(k).__name__} {k!r}')
            if k.startswith(prefix):
                given[k[len(prefix):]] = k
        unexpected = [k for k in state_dict if not k.startswith(prefix) or k[len(prefix):] not in cur]
        missing = [prefix + k for k in cur if k not in given and not k.endswith(_NBT)]
        if strict and (missing or unexpected):
            _fail_keys(what, missing, unexpected)
        out = collections.OrderedDict()
        for k, v in cur.items():
            if k.endswith(_NBT):
                continue
            if k in given:
                a = _as_f32(state_dict[given[k]], f'load_state_dict: {prefix + k!r}')
                if a.shape != v.shape:
                    raise StateDictError(f'Error(s) in loading state_dict for {what}:\n\tsize mismatch for '
                                         f'{prefix + k}: copying a param with shape {tuple(a.shape)} from checkpoint, '
                                         f'the shape in current model is {tuple(v.shape)}.')
                v = a
            out[k] = v
        np = _np()
        flat = [np.concatenate([out[n].reshape(-1) for n, _ in info] or [np.zeros(0, np.float32)])
                for info in (self.parameter_info(), self.buffer_info())]
        self.set_parameters(flat[0])
        self.set_buffers(flat[1])
        return IncompatibleKeys(missing, unexpected)


def _device_ids(ids):
    # PyTorch's device_ids: ints are cuda:i; dp's names ("cpu:0") pass as they are.
    if hasattr(ids, '__index__') or isinstance(ids, (str, bytes)):
        ids = [ids]
    if not hasattr(ids, '__iter__'):
        raise ArgumentTypeError(f'device_ids must be a list of ints (cuda:i, as PyTorch) or device names '
                                f'("cpu:0"), not {type(ids).__name__} {ids!r}')
    out = []
    for d in ids:
        if hasattr(d, '__index__') and not isinstance(d, bool):
            out.append(f'cuda:{_int(d, "device_ids")}')
        elif isinstance(d, (str, bytes)):
            out.append(d.decode('utf-8', 'replace') if isinstance(d, bytes) else d)
        else:
            raise ArgumentTypeError(f'device_ids: {d!r} ({type(d).__name__}) is not an int (cuda:i) or a device '
                                    f'name ("cpu:0")')
    if not out:
        raise ArgumentTypeError('device_ids is empty: name at least one device')
    return ','.join(out)


def _either_devices(fn, devices, device_ids):
    if device_ids is None:
        return 'auto' if devices is None else devices
    if devices is not None:
        raise ArgumentTypeError(f'{fn}: give devices= or device_ids=, not both (devices={devices!r}, '
                                f'device_ids={device_ids!r})')
    return _device_ids(device_ids)


def _check_gather(fn, devices_text, output_device, dim):
    """PyTorch's dim and output_device, as far as dp has them: batches are split
    along dim 0, and outputs gathered on the first device (PyTorch's default,
    device_ids[0])."""
    if isinstance(dim, bool) or not hasattr(dim, '__index__'):
        raise ArgumentTypeError(f'{fn}: dim must be an int, not {type(dim).__name__} {dim!r}')
    if dim != 0:
        raise UnsupportedError(f'{fn}: dim={dim}: dp splits batches along dim 0 only (torch.chunk\'s rule)')
    if output_device is None:
        return
    if hasattr(output_device, 'type') and hasattr(output_device, 'index'):  # a torch.device
        output_device = f'{output_device.type}:{output_device.index or 0}'
    want, first = _device_ids(output_device), devices_text.split(',')[0]
    if want != first:
        raise UnsupportedError(f'{fn}: output_device={output_device!r} ({want}): dp gathers outputs on the first '
                               f'device, {first} (PyTorch\'s default, device_ids[0]); leave it out or name that one')


def _devices(devices):
    if devices is None or devices == 'auto':  # every GPU when there is one, as nn.DataParallel
        gpus = device_count('cuda')
        if gpus:
            return ','.join(f'cuda:{i}' for i in range(gpus))
        return ','.join(f'cpu:{i}' for i in range(os.cpu_count() or 1))
    if isinstance(devices, bytes):
        devices = devices.decode('utf-8', 'replace')
    if isinstance(devices, str):
        return devices
    if hasattr(devices, '__index__') and not isinstance(devices, bool):
        n = _int(devices, 'devices')
        if n < 1:
            raise InvalidArgumentError(f'devices = {n}: a count of CPU devices must be at least 1')
        return ','.join(f'cpu:{i}' for i in range(n))
    if hasattr(devices, '__iter__'):  # names, or ints as PyTorch's device_ids (cuda:i)
        return _device_ids(devices)
    raise ArgumentTypeError(f'devices must be "auto", a str ("cpu:0,cpu:1"), a list of str (["cpu:0", "cuda:0"]) '
                            f'or a count of CPU devices, not {type(devices).__name__} {devices!r}')


def _device_text(devices):
    text = _devices(devices)
    with _converting(f'devices {text!r}'):
        return text.encode()


class DataParallel(_Owner):
    """nn.DataParallel over a list of devices: "auto" (one CPU device per
    core), "cpu:0,cpu:1", a list of names, or a count. Calling it runs the
    forward pass (scatter, parallel replicas, gather)."""
    _copy_hint = 'copy.deepcopy(dp_model.module) and wrap the copy in a new dp.DataParallel'

    def __init__(self, model, devices=None, device_ids=None, *, output_device=None, dim=0):
        devices = _either_devices('DataParallel', devices, device_ids)
        _check_gather('DataParallel', _devices(devices), output_device, dim)
        if isinstance(model, DataParallel):
            raise ArgumentTypeError('DataParallel: model is a DataParallel already; wrap its .module')
        if not isinstance(model, Model):
            model = Model(model)
        h = ctypes.c_void_p()
        _check(_lib.group_create(_handle(model, Model, 'DataParallel: model'), _device_text(devices),
                                 ctypes.byref(h)))
        self._h, self.model, self._ctx = h, model, model._ctx
        _depends(self, model)
        self.training = True
        self._devices = _devices(devices)

    def __repr__(self):
        return f'DataParallel(devices={self._devices!r}, module={self.model!r})'

    def __del__(self):
        _destroy(self, _lib.group_destroy if _lib else None)

    @property
    def module(self):
        """The wrapped dp.Model, as nn.DataParallel's .module."""
        return self.model

    def state_dict(self):
        """The model's state_dict with PyTorch's "module." prefix, as
        nn.DataParallel's (self.module.state_dict() has the plain names)."""
        return collections.OrderedDict(('module.' + k, v) for k, v in self.model.state_dict().items())

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """As Model.load_state_dict, with the keys "module."-prefixed as
        state_dict() writes them (nn.DataParallel's). assign is accepted, as
        PyTorch's, and changes nothing (the values are copied)."""
        return self.model._load_state_dict(state_dict, strict, 'module.', type(self).__name__)

    def save_weights(self, path):
        """self.module.save_weights(path): plain names, for the unwrapped torch model."""
        self.model.save_weights(path)

    @property
    def num_devices(self):
        n = ctypes.c_int()
        _check(_lib.group_num_devices(self._h, ctypes.byref(n)))
        return n.value

    @property
    def global_devices(self):
        """(count, first): the devices of every process of the group (for a
        DistributedDataParallel; num_devices otherwise) and where this
        process's begin among them, in rank order."""
        count, first = ctypes.c_int(), ctypes.c_int()
        _check(_lib.group_global_devices(self._h, ctypes.byref(count), ctypes.byref(first)))
        return count.value, first.value

    def set_split(self, mode):
        """"chunk" (torch.chunk's rule, the default) or "balanced". Across
        processes every process sets the same, before the loaders sharded on
        this group are made (they keep the split rule they were made with)."""
        modes = {'chunk': 0, 'balanced': 1}
        if not isinstance(mode, str):
            raise ArgumentTypeError(f'set_split: mode must be "chunk" or "balanced", not {type(mode).__name__}')
        if mode not in modes:
            raise UnknownKeyError(f'set_split: mode {mode!r} is not "chunk" or "balanced"')
        _check(_lib.group_set_option(self._h, 0, modes[mode]))
        return self

    def set_threads_per_device(self, n):
        _check(_lib.group_set_option(self._h, 1, _int(n, 'set_threads_per_device: n', _INT64)))
        return self

    def set_allow_tf32(self, allow=True):
        """Lets GPU matrix products and convolutions use TF32 (off by default)."""
        _check(_lib.group_set_option(self._h, 2, 1 if allow else 0))
        return self

    def set_cudnn_benchmark(self, on=True):
        """cuDNN times convolution algorithms once per shape (cudnn.benchmark)."""
        _check(_lib.group_set_option(self._h, 3, 1 if on else 0))
        return self

    _PRECISIONS = {'fp32': 0, 'float32': 0, 'bf16': 1, 'bfloat16': 1, 'fp16': 2, 'float16': 2}

    def set_precision(self, precision):
        """Mixed precision as torch.autocast on CUDA: 'bf16' or 'fp16' run matrix
        products and convolutions on GPUs with 16-bit operands and float32
        accumulation; parameters, gradients and the rest stay float32.
        'fp32' (the default) everywhere; CPUs take only 'fp32'."""
        p = self._PRECISIONS.get(str(precision).replace('torch.', ''))
        if p is None:
            raise InvalidArgumentError(f"set_precision: expected 'fp32', 'bf16' or 'fp16', got {precision!r}")
        _check(_lib.group_set_option(self._h, 4, p))
        self.precision = precision
        return self

    def train(self, mode=True):
        _check(_lib.group_set_training(self._h, 1 if mode else 0))
        self.training = bool(mode)
        return self

    def eval(self):
        return self.train(False)

    def _input(self, x):
        """x as the model's float32 input. Integer and bool arrays are refused
        (PyTorch refuses them against float weights): raw uint8 pixels would
        otherwise train, unscaled, as 0..255."""
        if isinstance(x, Tensor):
            kind = x.dtype if x.dtype != 'float32' else None
        elif hasattr(x, 'is_floating_point') and hasattr(x, 'dtype'):  # a torch tensor
            kind = None if x.is_floating_point() else str(x.dtype)
        else:
            dt = getattr(x, 'dtype', None)
            if dt is None and isinstance(x, (list, tuple)) and _np_or_none() is not None:
                with _converting(f'input ({type(x).__name__}) as an array'):
                    dt = _np().asarray(x).dtype  # [[1, 2, 3]]: integers, as torch.tensor reads them
            kind = str(dt) if getattr(dt, 'kind', 'f') in 'iubO' else None
        if kind:
            raise _integer_inputs('input', kind)
        return as_tensor(x, 'float32', ctx=self._ctx)

    def forward(self, x):
        xt = self._input(x)
        h = ctypes.c_void_p()
        _check(_lib.group_forward(self._h, xt._h, ctypes.byref(h)))
        return Tensor._wrap(h, self._ctx)

    __call__ = forward

    def backward(self, grad_output):
        g = as_tensor(grad_output, 'float32', ctx=self._ctx)
        _check(_lib.group_backward(self._h, g._h))

    def zero_grad(self, set_to_none=True):
        """Clears the gradients (set_to_none as PyTorch's: see Optimizer.zero_grad)."""
        _check(_lib.group_zero_grad(self._h))

    def last_split(self):
        """The rows each device ran in the last forward or train step (this
        process's devices)."""
        sizes = (ctypes.c_int64 * 1024)()
        n = ctypes.c_int()
        _check(_lib.group_last_split(self._h, sizes, 1024, ctypes.byref(n)))
        return list(sizes[:n.value])

    def _target(self, y):
        if isinstance(y, Tensor):
            return y
        np = _np_or_none()
        if np is None:
            return tensor(y, ctx=self._ctx)
        with _converting(f'targets ({type(y).__name__}) as an array'):
            a = np.asarray(y)
        return as_tensor(a, 'int64' if a.dtype.kind in 'iub' else 'float32', ctx=self._ctx)

    def train_step(self, optimizer, x, y):
        """zero_grad, forward, the model's loss, backward, optimizer step; the
        batch loss (a float). x float32 [B, ...]; y int64 class indices [B]
        (cross_entropy, nll) or float32 of the output's shape (mse, l1,
        smooth_l1, huber, bce, bce_with_logits: as in PyTorch, 0/1 labels
        for bce must be floats)."""
        from ._optim import Optimizer  # (_optim imports this module)
        opt = _handle(optimizer, Optimizer, 'train_step: optimizer')
        loss = ctypes.c_float()
        xt, yt = self._input(x), self._target(y)
        _check(_lib.group_train_step(self._h, opt, xt._h, yt._h, ctypes.byref(loss)))
        return loss.value

    def forward_backward(self, x, y, loss_scale=1.0):
        """Gradient accumulation, as (loss * loss_scale).backward() in
        PyTorch: forward, the model's loss, backward, the gradients ADDED into
        the model's (no zero_grad, no step). K batches with loss_scale=1/K,
        then optimizer.step() and zero_grad(), train as one batch K times
        larger. With a grad scaler, multiply loss_scale by
        optimizer.get_scale() (scaler.scale(loss)). Returns the unscaled
        batch loss."""
        loss = ctypes.c_float()
        xt, yt = self._input(x), self._target(y)
        _check(_lib.group_forward_backward(self._h, xt._h, yt._h, _float(loss_scale, 'loss_scale'),
                                           ctypes.byref(loss)))
        return loss.value

    def evaluate(self, x, y):
        """(loss, correct): the model's loss without training, and the rows
        whose arg-max is the target (cross_entropy, nll; 0 for the others)."""
        loss, correct = ctypes.c_float(), ctypes.c_int64()
        xt, yt = self._input(x), self._target(y)
        _check(_lib.group_evaluate(self._h, xt._h, yt._h, ctypes.byref(loss), ctypes.byref(correct)))
        return loss.value, correct.value


Group = DataParallel


def save_weights(model, path):
    """The weights of a dp.Model (or a DataParallel's .module) as a
    safetensors file that torch_model.load_state_dict(safetensors.torch.load_file(path))
    takes with strict=True: no optimizer state, plain names."""
    if isinstance(model, DataParallel):
        model = model.model
    _handle(model, Model, 'save_weights: model')
    model.save_weights(path)


def load_weights(model, path):
    """Loads a weights file (save_weights's, or safetensors.torch.save_file(torch_model.state_dict(), path))."""
    if isinstance(model, DataParallel):
        model = model.model
    _handle(model, Model, 'load_weights: model')
    model.load_safetensors(path)
