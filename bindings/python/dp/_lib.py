"""Finding libdp.so and declaring its C ABI (include/dp.h) for ctypes.

Only the C ABI is used: any libdp of ABI version 1 serves this binding.
Lookup order: the DP_LIBRARY environment variable (a file path); a libdp.so*
next to this package (a wheel-style install); the path meson configured into
_config.py at install time; the build trees of a source checkout
(build*/src/libdp.so next to bindings/); the system's linker path.
"""
import ctypes
import ctypes.util
import glob
import os

c_int, c_int64, c_size_t, c_double, c_float = ctypes.c_int, ctypes.c_int64, ctypes.c_size_t, ctypes.c_double, ctypes.c_float
c_char_p, c_void_p = ctypes.c_char_p, ctypes.c_void_p
P = ctypes.POINTER
MAX_DIMS = 8
ABI_VERSION = 1

# Handles are opaque: void pointers.
ctx_p = model_p = tensor_p = group_p = opt_p = dataset_p = loader_p = pg_p = c_void_p

RELEASE_FN = ctypes.CFUNCTYPE(None, c_void_p)
GET_ITEM_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int64, P(c_float), c_void_p, P(ctypes.c_char), c_size_t)


class DatasetCallbacks(ctypes.Structure):
    _fields_ = [('struct_size', c_size_t), ('user', c_void_p), ('length', c_int64),
                ('get_item', GET_ITEM_FN), ('release', RELEASE_FN)]


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get('DP_LIBRARY')
    if env:
        return [env], True
    found = sorted(glob.glob(os.path.join(here, 'libdp.so*')) + glob.glob(os.path.join(here, 'libdp*.dylib')))
    try:
        from . import _config  # written by meson at install time
        found.append(_config.LIBDP)
    except ImportError:
        pass
    root = os.path.normpath(os.path.join(here, '..', '..', '..'))
    found += sorted(glob.glob(os.path.join(root, 'build', 'src', 'libdp.so')))
    found += sorted(glob.glob(os.path.join(root, 'build*', 'src', 'libdp.so')))
    sys_lib = ctypes.util.find_library('dp')
    if sys_lib:
        found.append(sys_lib)
    return found, False


def _load():
    paths, explicit = _candidates()
    errors = []
    for p in paths:
        if not explicit and not os.path.exists(p) and '/' in p:
            continue
        try:
            return ctypes.CDLL(p), p
        except OSError as e:
            errors.append(f'{p}: {e}')
            if explicit:
                break
    raise ImportError('dp: cannot load libdp.so (set DP_LIBRARY to its path); tried: ' +
                      ('; '.join(errors) or ', '.join(paths) or 'nothing found'))


lib, path = _load()

# (name, restype, argtypes); restype int is a dp_status.
_S = c_int
_PROTOS = [
    ('dp_last_error', c_char_p, []),
    ('dp_version', c_char_p, []),
    ('dp_status_name', c_char_p, [c_int]),
    ('dp_context_create', _S, [P(ctx_p)]),
    ('dp_context_destroy', None, [ctx_p]),
    ('dp_context_load_plugin', _S, [ctx_p, c_char_p]),
    ('dp_context_set_option', _S, [ctx_p, c_int, c_int64]),
    ('dp_context_num_plugins', _S, [ctx_p, P(c_int)]),
    ('dp_context_plugin_info', _S, [ctx_p, c_int, P(c_char_p), P(c_char_p)]),
    ('dp_model_from_json', _S, [ctx_p, c_char_p, P(model_p)]),
    ('dp_model_from_file', _S, [ctx_p, c_char_p, P(model_p)]),
    ('dp_model_destroy', None, [model_p]),
    ('dp_model_num_parameters', _S, [model_p, P(c_int64)]),
    ('dp_model_copy_parameters', _S, [model_p, c_void_p, c_int64]),
    ('dp_model_set_parameters', _S, [model_p, c_void_p, c_int64]),
    ('dp_model_copy_gradients', _S, [model_p, c_void_p, c_int64]),
    ('dp_model_num_parameter_tensors', _S, [model_p, P(c_int)]),
    ('dp_model_parameter_info', _S, [model_p, c_int, P(c_char_p), P(c_int), P(c_int64)]),
    ('dp_model_num_buffers', _S, [model_p, P(c_int64)]),
    ('dp_model_copy_buffers', _S, [model_p, c_void_p, c_int64]),
    ('dp_model_set_buffers', _S, [model_p, c_void_p, c_int64]),
    ('dp_model_num_buffer_tensors', _S, [model_p, P(c_int)]),
    ('dp_model_buffer_info', _S, [model_p, c_int, P(c_char_p), P(c_int), P(c_int64)]),
    ('dp_model_input_shape', _S, [model_p, P(c_int), P(c_int64)]),
    ('dp_model_output_shape', _S, [model_p, P(c_int), P(c_int64)]),
    ('dp_tensor_from_host', _S, [ctx_p, c_int, c_void_p, c_int, P(c_int64), P(tensor_p)]),
    ('dp_tensor_copy_from_host', _S, [tensor_p, c_void_p, c_size_t]),
    ('dp_tensor_create', _S, [ctx_p, c_int, c_int, P(c_int64), P(tensor_p)]),
    ('dp_tensor_shape', _S, [tensor_p, P(c_int), P(c_int64)]),
    ('dp_tensor_dtype', _S, [tensor_p, P(c_int)]),
    ('dp_tensor_copy_to_host', _S, [tensor_p, c_void_p, c_size_t]),
    ('dp_tensor_destroy', None, [tensor_p]),
    ('dp_tensor_from_host_borrowed', _S, [ctx_p, c_int, c_void_p, c_int, P(c_int64), c_void_p, c_void_p, P(tensor_p)]),
    ('dp_tensor_data', _S, [tensor_p, P(c_void_p)]),
    ('dp_tensor_is_borrowed', _S, [tensor_p, P(c_int)]),
    ('dp_tensor_pin_memory', _S, [tensor_p]),
    ('dp_device_count', _S, [c_char_p, P(c_int), P(c_char_p)]),
    ('dp_device_name', _S, [c_char_p, c_int, P(c_char_p)]),
    ('dp_group_create', _S, [model_p, c_char_p, P(group_p)]),
    ('dp_group_destroy', None, [group_p]),
    ('dp_group_num_devices', _S, [group_p, P(c_int)]),
    ('dp_group_set_option', _S, [group_p, c_int, c_int64]),
    ('dp_group_set_training', _S, [group_p, c_int]),
    ('dp_group_forward', _S, [group_p, tensor_p, P(tensor_p)]),
    ('dp_group_backward', _S, [group_p, tensor_p]),
    ('dp_group_zero_grad', _S, [group_p]),
    ('dp_group_last_split', _S, [group_p, P(c_int64), c_int, P(c_int)]),
    ('dp_process_group_create', _S, [c_char_p, P(pg_p)]),
    ('dp_process_group_destroy', None, [pg_p]),
    ('dp_process_group_rank', _S, [pg_p, P(c_int)]),
    ('dp_process_group_world_size', _S, [pg_p, P(c_int)]),
    ('dp_process_group_local_rank', _S, [pg_p, P(c_int)]),
    ('dp_process_group_local_world_size', _S, [pg_p, P(c_int)]),
    ('dp_process_group_barrier', _S, [pg_p]),
    ('dp_process_group_check_same', _S, [pg_p, c_char_p, c_char_p]),
    ('dp_process_group_request_stop', _S, [pg_p]),
    ('dp_process_group_stop_requested', _S, [pg_p, P(c_int)]),
    ('dp_group_create_distributed', _S, [model_p, c_char_p, pg_p, P(group_p)]),
    ('dp_group_global_devices', _S, [group_p, P(c_int), P(c_int)]),
    ('dp_optimizer_create', _S, [group_p, c_char_p, P(opt_p)]),
    ('dp_optimizer_step', _S, [opt_p]),
    ('dp_optimizer_lr', _S, [opt_p, P(c_double)]),
    ('dp_optimizer_set_lr', _S, [opt_p, c_double]),
    ('dp_optimizer_set_lr_schedule', _S, [opt_p, c_char_p]),
    ('dp_optimizer_set_clip_grad_norm', _S, [opt_p, c_double]),
    ('dp_optimizer_grad_norm', _S, [opt_p, P(c_double)]),
    ('dp_optimizer_set_grad_scaler', _S, [opt_p, c_char_p]),
    ('dp_optimizer_grad_scaler_state', _S, [opt_p, P(c_double), P(c_int64), P(c_int64)]),
    ('dp_optimizer_set_grad_scaler_state', _S, [opt_p, c_double, c_int64, c_int64]),
    ('dp_optimizer_num_states', _S, [opt_p, P(c_int)]),
    ('dp_optimizer_state_name', _S, [opt_p, c_int, P(c_char_p)]),
    ('dp_optimizer_copy_state', _S, [opt_p, c_char_p, c_void_p, c_int64]),
    ('dp_optimizer_set_state', _S, [opt_p, c_char_p, c_void_p, c_int64]),
    ('dp_optimizer_steps', _S, [opt_p, P(c_int64)]),
    ('dp_optimizer_set_steps', _S, [opt_p, c_int64]),
    ('dp_optimizer_destroy', None, [opt_p]),
    ('dp_group_train_step', _S, [group_p, opt_p, tensor_p, tensor_p, P(c_float)]),
    ('dp_group_forward_backward', _S, [group_p, tensor_p, tensor_p, c_double, P(c_float)]),
    ('dp_group_evaluate', _S, [group_p, tensor_p, tensor_p, P(c_float), P(c_int64)]),
    ('dp_dataset_from_idx', _S, [ctx_p, c_char_p, c_char_p, P(dataset_p)]),
    ('dp_dataset_from_cifar10', _S, [ctx_p, P(c_char_p), c_int, P(dataset_p)]),
    ('dp_dataset_from_arrays', _S, [ctx_p, c_void_p, c_int, P(c_int64), c_int64, c_int, c_void_p, c_int, P(c_int64),
                                    c_int, P(dataset_p)]),
    ('dp_dataset_from_callbacks', _S, [ctx_p, P(DatasetCallbacks), c_int, P(c_int64), c_int, c_int, P(c_int64),
                                       P(dataset_p)]),
    ('dp_dataset_length', _S, [dataset_p, P(c_int64)]),
    ('dp_dataset_sample_shape', _S, [dataset_p, P(c_int), P(c_int64)]),
    ('dp_dataset_set_transform', _S, [dataset_p, c_char_p]),
    ('dp_dataset_destroy', None, [dataset_p]),
    ('dp_loader_create', _S, [dataset_p, c_char_p, P(loader_p)]),
    ('dp_loader_destroy', None, [loader_p]),
    ('dp_loader_num_batches', _S, [loader_p, P(c_int64)]),
    ('dp_loader_next', _S, [loader_p, tensor_p, tensor_p, P(c_int64)]),
    ('dp_loader_position', _S, [loader_p, P(c_int64), P(c_int64)]),
    ('dp_loader_seek', _S, [loader_p, c_int64, c_int64]),
    ('dp_loader_shard', _S, [loader_p, group_p]),
    ('dp_model_load_safetensors', _S, [model_p, c_char_p]),
    ('dp_model_save_safetensors', _S, [model_p, c_char_p]),
    ('dp_model_save_weights', _S, [model_p, c_char_p]),
    ('dp_model_export_onnx', _S, [model_p, c_char_p]),
    ('dp_checkpoint_save', _S, [c_char_p, group_p, opt_p, loader_p, c_char_p]),
    ('dp_checkpoint_load', _S, [c_char_p, group_p, opt_p, loader_p]),
    ('dp_checkpoint_metadata', _S, [c_char_p, P(c_void_p)]),
    ('dp_free', None, [c_void_p]),
]

missing = []
for _name, _res, _args in _PROTOS:
    try:
        _f = getattr(lib, _name)
    except AttributeError:
        missing.append(_name)
        continue
    _f.restype = _res
    _f.argtypes = _args
    globals()[_name[3:]] = _f  # _lib.model_from_json, ...
