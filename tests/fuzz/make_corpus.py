#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

    python3 tests/fuzz/make_corpus.py [build/src/libdp.so]

Small files, taken from the repository's examples and tests or made here
(IDX, CIFAR-10, safetensors); the checkpoints are saved by dp itself through
the C ABI (ctypes), for the model fuzz_checkpoint.cpp loads into. Each
target's input layout is described at the top of its fuzz_<target>.cpp.
Deterministic: running it again rewrites the same bytes.
"""
import ctypes
import gzip
import json
import os
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "corpus")

# fuzz_checkpoint.cpp's model and optimizers (the same JSON values).
CKPT_MODEL = ('{"input": {"shape": [3]}, "layers": [{"type": "linear", "out_features": 4}, {"type": "batch_norm1d"},'
              ' {"type": "relu"}, {"type": "linear", "out_features": 2}], "loss": {"type": "cross_entropy"}}')
CKPT_OPTIMIZERS = [None, '{"type": "sgd", "lr": 0.1, "momentum": 0.9}', '{"type": "adam"}', '{"type": "adamw"}']


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def gz(data):
    return gzip.compress(data, compresslevel=9, mtime=0)


def u16(n):
    return struct.pack("<H", n)


def read(*path):
    with open(os.path.join(ROOT, *path), "rb") as f:
        return f.read()


def compact(obj):
    return json.dumps(obj, separators=(",", ":"))


# ---- model_json ----
def model_json():
    for f in sorted(os.listdir(os.path.join(ROOT, "examples"))):
        if f.endswith(".json"):
            put("model_json", "example_" + f, read("examples", f))
    for f in ["cnn_bn_sgd", "dag_adamw", "mlp_mse_adam", "mlp_nll_sgd", "mlp_bce_logits_adamw", "mlp_huber_sgd",
              "mlp_layer_norm_adam"]:
        put("model_json", "reference_" + f + ".json", compact(json.loads(read("tests", "reference", f + ".json"))["model"]))
    put("model_json", "io_pytorch_linear.json", compact(json.loads(read("tests", "io", "pytorch_linear.json"))["model"]))
    put("model_json", "plugins.json", compact({
        "seed": 3, "input": {"shape": [2, 6]},
        "layers": [{"type": "swish"}, {"type": "rms_norm", "normalized_shape": 6, "eps": 1e-6, "elementwise_affine": True},
                   {"type": "shape_probe", "quiet": True}, {"type": "flatten"}, {"type": "linear", "out_features": 3}],
        "loss": {"type": "mse"}}))
    put("model_json", "plugins_list.json", compact({
        "plugins": ["swish", "./libs/rms_norm.so"], "input": {"shape": [4]}, "layers": [{"type": "swish"}]}))
    put("model_json", "every_layer.json", compact({
        "description": "every built-in type once", "seed": 1, "input": {"shape": [2, 8, 8]},
        "layers": [
            {"type": "conv2d", "out_channels": 4, "kernel_size": [3, 2], "stride": [1, 2], "padding": 1, "dilation": 1,
             "groups": 2, "bias": False, "in_channels": 2, "name": "c"},
            {"type": "batch_norm2d", "num_features": 4, "eps": 1e-5, "momentum": 0.1, "affine": True,
             "track_running_stats": True},
            {"type": "leaky_relu", "negative_slope": 0.2},
            {"type": "max_pool2d", "kernel_size": 2, "stride": 1, "padding": 1, "dilation": 1, "ceil_mode": True},
            {"type": "avg_pool2d", "kernel_size": 2, "ceil_mode": False, "count_include_pad": False, "name": "p"},
            {"type": "sigmoid", "inputs": ["p"], "name": "s"},
            {"type": "tanh", "inputs": ["p"], "name": "t"},
            {"type": "add", "inputs": ["s", "t"]},
            {"type": "concat", "inputs": ["s", "t"], "dim": 1},
            {"type": "gelu", "approximate": "tanh"},
            {"type": "dropout", "p": 0.25},
            {"type": "global_avg_pool"},
            {"type": "batch_norm1d"},
            {"type": "softmax", "dim": -1},
            {"type": "log_softmax", "dim": 1},
            {"type": "layer_norm", "normalized_shape": [8], "eps": 1e-5, "elementwise_affine": True, "bias": True},
            {"type": "linear", "out_features": 5, "in_features": 8, "bias": True},
            {"type": "relu"},
            {"type": "flatten", "start_dim": 1, "end_dim": -1}],
        "loss": {"type": "cross_entropy", "label_smoothing": 0.1}}))


# ---- train_step: a flags byte, a batch byte, then a model's JSON ----
def train_step():
    d = os.path.join(OUT, "model_json")
    for f in sorted(os.listdir(d)):  # (the large examples go past the caps: refused at once)
        with open(os.path.join(d, f), "rb") as fh:
            put("train_step", f, bytes([0, 8]) + fh.read())
    small = lambda layers, loss, shape=(2, 6, 6): compact({"seed": 5, "input": {"shape": list(shape)}, "layers": layers, "loss": loss})
    convs = [{"type": "conv2d", "out_channels": 3, "kernel_size": 3, "padding": 1, "name": "c"},
             {"type": "leaky_relu", "negative_slope": 0.1}, {"type": "max_pool2d", "kernel_size": 2, "ceil_mode": True},
             {"type": "avg_pool2d", "kernel_size": 2, "stride": 1, "padding": 1, "count_include_pad": False, "name": "p"},
             {"type": "tanh", "inputs": ["p"], "name": "t"}, {"type": "sigmoid", "inputs": ["p"], "name": "s"},
             {"type": "add", "inputs": ["t", "s"], "name": "a"}, {"type": "concat", "inputs": ["a", "t"], "dim": 1},
             {"type": "dropout", "p": 0.3}, {"type": "gelu"}, {"type": "flatten"}, {"type": "linear", "out_features": 4}]
    put("train_step", "convs_cross_entropy", bytes([1, 7]) + small(convs, {"type": "cross_entropy", "label_smoothing": 0.1}).encode())
    put("train_step", "convs_nll", bytes([2, 8]) + small(convs + [{"type": "log_softmax"}],
                                                        {"type": "nll", "weight": [1, 2, 0.5, 1], "ignore_index": 3}).encode())
    for i, loss in enumerate([{"type": "mse"}, {"type": "l1"}, {"type": "smooth_l1", "beta": 0.5}, {"type": "huber", "delta": 0.3},
                              {"type": "bce"}, {"type": "bce_with_logits", "pos_weight": [2, 1, 0.5]}]):
        layers = [{"type": "linear", "out_features": 5}, {"type": "swish"},
                  {"type": "rms_norm", "normalized_shape": 5, "eps": 1e-6, "elementwise_affine": True},
                  {"type": "layer_norm", "normalized_shape": 5, "bias": i % 2 == 0},
                  {"type": "softmax", "dim": -1}, {"type": "linear", "out_features": 3}, {"type": "sigmoid"}]
        put("train_step", "mlp_" + loss["type"], bytes([i % 8, 4 + i]) + small(layers, loss, shape=(7,)).encode())


# ---- safetensors ----
def st_file(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] in data order."""
    header, at, data = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
        at += len(raw)
        data += raw
    text = compact(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors():
    put("safetensors", "pytorch_linear.safetensors", read("tests", "io", "pytorch_linear.safetensors"))
    put("safetensors", "dtypes.safetensors", st_file([
        ("f32", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)), ("i64", "I64", [1], struct.pack("<q", -5)),
        ("bf16", "BF16", [3], b"\x80\x3f" * 3), ("u8", "U8", [2, 1, 1], b"\x01\x02"), ("bool", "BOOL", [1], b"\x01"),
        ("f64", "F64", [], struct.pack("<d", 0.5)), ("c64", "C64", [1], b"\0" * 8), ("f8", "F8_E4M3", [1], b"\x01")],
        {"format": "pt", "note": "x"}))
    put("safetensors", "empty_tensors.safetensors", st_file([("z", "F32", [0, 3], b""), ("s", "I32", [], b"\1\0\0\0")]))
    put("safetensors", "metadata_only.safetensors", st_file([], {"format": "dp-checkpoint-1", "model": "{}"}))


# ---- checkpoint: saved by dp ----
def checkpoint(libdp):
    put("checkpoint", "weights_pytorch_linear", bytes([1 << 3]) + read("tests", "io", "pytorch_linear.safetensors"))
    if not libdp:
        print("no libdp.so given: checkpoint seeds beyond the weights file skipped", file=sys.stderr)
        return
    lib = ctypes.CDLL(libdp)
    lib.dp_last_error.restype = ctypes.c_char_p
    vp = ctypes.c_void_p

    def ok(status):
        if status != 0:
            raise RuntimeError(lib.dp_last_error().decode())

    ctx, model, group = vp(), vp(), vp()
    ok(lib.dp_context_create(ctypes.byref(ctx)))
    ok(lib.dp_model_from_json(ctx, CKPT_MODEL.encode(), ctypes.byref(model)))
    ok(lib.dp_group_create(model, b"cpu:0", ctypes.byref(group)))
    xs = (ctypes.c_float * 30)(*[((i * 7) % 11) / 5.0 - 1 for i in range(30)])
    ys = (ctypes.c_int64 * 10)(*[i % 2 for i in range(10)])
    ds, loader = vp(), vp()
    ok(lib.dp_dataset_from_arrays(ctx, xs, 1, (ctypes.c_int64 * 1)(3), ctypes.c_int64(10), 1, ys, 0, None, 0,
                                  ctypes.byref(ds)))
    ok(lib.dp_loader_create(ds, b'{"batch_size": 4, "shuffle": true}', ctypes.byref(loader)))
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "ckpt.safetensors").encode()
        for i, text in enumerate(CKPT_OPTIMIZERS):
            opt = vp()
            if text:
                ok(lib.dp_optimizer_create(group, text.encode(), ctypes.byref(opt)))
                # Two steps, so that the state is not all zeros.
                x, y = vp(), vp()
                ok(lib.dp_tensor_from_host(ctx, 0, xs, 2, (ctypes.c_int64 * 2)(4, 3), ctypes.byref(x)))
                ok(lib.dp_tensor_from_host(ctx, 1, ys, 1, (ctypes.c_int64 * 1)(4), ctypes.byref(y)))
                for _ in range(2):
                    ok(lib.dp_group_train_step(group, opt, x, y, None))
                lib.dp_tensor_destroy(x)
                lib.dp_tensor_destroy(y)
            for with_loader in (False, True):
                meta = b'{"epoch_note": "seed", "n": 3}' if with_loader else None
                ok(lib.dp_checkpoint_save(path, group, opt, loader if with_loader else None, meta))
                with open(path, "rb") as f:
                    data = f.read()
                mode = i | (4 if with_loader else 0)
                put("checkpoint", "ckpt_opt%d%s" % (i, "_loader" if with_loader else ""), bytes([mode]) + data)
                if i == 0 and not with_loader:
                    put("checkpoint", "ckpt_as_weights", bytes([1 << 3]) + data)
                    put("checkpoint", "ckpt_all_three", bytes([3 << 3]) + data)
            if text and i == 2:  # with a grad scaler's record (scale, growth tracker, skipped steps)
                ok(lib.dp_optimizer_set_grad_scaler(opt, b'{"growth_interval": 3}'))
                ok(lib.dp_checkpoint_save(path, group, opt, None, None))
                with open(path, "rb") as f:
                    put("checkpoint", "ckpt_opt2_grad_scaler", bytes([2]) + f.read())
            if text:
                lib.dp_optimizer_destroy(opt)
        path = os.path.join(tmp, "w.safetensors").encode()
        ok(lib.dp_model_save_safetensors(model, path))
        with open(path, "rb") as f:
            put("checkpoint", "weights_saved", bytes([1 << 3]) + f.read())
    finally:
        shutil.rmtree(tmp)
    lib.dp_loader_destroy(loader)
    lib.dp_dataset_destroy(ds)
    lib.dp_group_destroy(group)
    lib.dp_model_destroy(model)
    lib.dp_context_destroy(ctx)


# ---- idx, cifar10 ----
def idx_pair(count, rows, cols):
    images = struct.pack(">IIII", 0x803, count, rows, cols) + bytes((i * 37) % 256 for i in range(count * rows * cols))
    labels = struct.pack(">II", 0x801, count) + bytes(i % 10 for i in range(count))
    return images, labels


def idx():
    for name, (c, r, w) in {"3x4x4": (3, 4, 4), "1x2x3": (1, 2, 3), "empty": (0, 28, 28)}.items():
        images, labels = idx_pair(c, r, w)
        put("idx", name, b"\0" + u16(len(images)) + images + labels)
        put("idx", name + "_flag_gz", b"\3" + u16(len(images)) + images + labels)
        gi, gl = gz(images), gz(labels)
        put("idx", name + "_raw_gz", b"\0" + u16(len(gi)) + gi + gl)


def cifar_records(n):
    return b"".join(bytes([r % 10]) + bytes((r * 31 + i) % 256 for i in range(3072)) for r in range(n))


def cifar10():
    put("cifar10", "one_record", b"\0" + cifar_records(1))
    put("cifar10", "two_records_gz", b"\1" + cifar_records(2))
    put("cifar10", "raw_gz", b"\0" + gz(cifar_records(2)))
    first = cifar_records(1)
    put("cifar10", "two_files", b"\2" + u16(len(first)) + first + cifar_records(1))


# ---- loader_json, transform, optimizer, devices ----
def loader_json():
    configs = [{}, {"batch_size": 4, "shuffle": True, "drop_last": False, "num_workers": 2, "prefetch": 2, "seed": 7},
               {"batch_size": 3, "drop_last": True, "num_workers": 1}, {"batch_size": 64, "pin_memory": False},
               {"batch_size": 5, "shuffle": True, "num_workers": 0, "seed": 12345678901}]
    for i, c in enumerate(configs):
        put("loader_json", "config%d" % i, bytes([(10 << 1) | (i & 1), 1, 2]) + compact(c).encode())
    put("loader_json", "comments", bytes([7 << 1, 0, 0]) + b'// a comment\n{"batch_size": 2 /* two */}')


def transform():
    cases = [
        ([3, 8, 8], {"random_crop": {"size": 6, "padding": 2}, "horizontal_flip": 0.5,
                     "normalize": {"mean": [0.4914, 0.4822, 0.4465], "std": [0.247, 0.243, 0.261]}}),
        ([1, 5, 7], {"random_crop": {"size": [3, 7], "padding": 0}}),
        ([2, 4], {"horizontal_flip": 1, "normalize": {"mean": [0, 1], "std": [1, 2]}}),
        ([4], {"normalize": {"mean": [0, 0, 0, 0], "std": [1, 1, 1, 1]}}),
        ([1, 2, 3, 3], {"random_crop": {"size": 5, "padding": 1}}),
        ([1, 4, 4], {}),
    ]
    for i, (shape, t) in enumerate(cases):
        put("transform", "case%d" % i, bytes([len(shape)] + shape) + struct.pack("<Q", 0x9e3779b97f4a7c15 * (i + 1) % 2**64)
            + compact(t).encode())


def optimizer():
    opts = [json.loads(read("tests", "reference", f + ".json"))["optimizer"] for f in ["cnn_bn_sgd", "dag_adamw", "mlp_mse_adam"]]
    opts += [{"type": "sgd"}, {"type": "sgd", "lr": 0.5, "momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-4},
             {"type": "adam", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0, "amsgrad": False},
             {"type": "adamw"}]
    for i, o in enumerate(opts):
        put("optimizer", "opt%d" % i, bytes([(i * 37) % 256]) + compact(o).encode())


def devices():
    for i, s in enumerate(["cpu:0", "cpu:0,cpu:1", "cpu", "cuda:0", "cuda:0,cuda:1", "auto", " cpu:0 , cpu:1 ",
                           "cpu:0,cuda:0", "cpu:1,cpu:1,cpu:1"]):
        put("devices", "dev%d" % i, bytes([0, 0]) + s.encode())
    put("devices", "auto_2_processes", b"\2\1auto")


# ---- plugin_args ----
def plugin_args():
    def prog(obj, flags, ops):
        text = compact(obj).encode()
        return u16(len(text)) + text + bytes([flags]) + ops

    def lit(s):
        return bytes([len(s)]) + s.encode()

    q = lambda v: struct.pack("<q", v)
    d = lambda v: struct.pack("<d", v)
    # Keys by index in the object's (sorted) order: flag, n, name, type, x.
    obj = {"n": 3, "x": 0.5, "flag": True, "name": "abc", "type": "fuzz_args"}
    ops = (bytes([0, 0]) + bytes([1, 0]) + bytes([2, 1]) +            # json, path, has n
           bytes([3, 1]) + q(0) + q(1) +                              # int n >= 1
           bytes([4, 4]) + d(0) + d(0) + d(1) +                       # float x in [0, 1]
           bytes([5, 0, 0]) +                                         # bool flag
           bytes([6, 2]) + lit("def") + b"\0" +                      # string name
           bytes([3 | 0x20]) + lit("absent") + q(7) + q(0))           # int absent (default)
    put("plugin_args", "all_accessors", prog(obj, 0, ops))
    put("plugin_args", "wrong_types", prog({"n": "three", "x": [1], "flag": 1}, 1,
                                           bytes([3, 0]) + q(0) + q(0) + bytes([4, 1]) + d(0) + d(0) + d(1) + bytes([5, 2, 1])))
    put("plugin_args", "nulls", prog({"a": 1}, 2, bytes([0x48]) + bytes([0x0b, 0]) + q(0) + q(0) + bytes([0x13, 0]) + q(0) + q(0) +
                                     bytes([0x16, 0]) + lit("") + b"\1" + bytes([7, 1])))
    put("plugin_args", "unread_key", prog({"a": 1, "b": 2}, 0, bytes([3, 0]) + q(0) + q(0)))


def main():
    libdp = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "src", "libdp.so")
    if not os.path.exists(libdp):
        libdp = None
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    model_json()
    train_step()
    safetensors()
    checkpoint(libdp)
    idx()
    cifar10()
    loader_json()
    transform()
    optimizer()
    devices()
    plugin_args()
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(OUT) for f in fs)
    print("corpus: %d bytes in %s" % (total, OUT))


if __name__ == "__main__":
    main()
