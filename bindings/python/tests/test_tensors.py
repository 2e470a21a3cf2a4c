"""Tensors: copies, zero-copy views both ways, lifetimes under the GC."""
import ctypes
import gc
import weakref

import numpy as np
import pytest

import dp
from dp import _lib


@pytest.mark.parametrize('dtype', [np.float32, np.int64])
def test_round_trip_copy(dtype):
    a = (np.arange(24).reshape(2, 3, 4) * 3 - 7).astype(dtype)
    t = dp.tensor(a)
    assert t.shape == (2, 3, 4) and t.dtype == np.dtype(dtype).name and not t.is_borrowed
    b = t.numpy(copy=True)
    assert b.dtype == dtype and np.array_equal(a, b)
    a[0, 0, 0] = 100  # a copy: independent
    assert t.numpy()[0, 0, 0] != 100


def test_conversions():
    assert dp.tensor([[1.5, 2.0]]).dtype == 'float32'
    assert dp.tensor([1, 2, 3]).dtype == 'int64'
    assert dp.tensor(np.ones((2, 2), np.float64)).dtype == 'float32'
    assert dp.tensor(np.ones(3, np.int32), dtype='int64').numpy().tolist() == [1, 1, 1]
    assert dp.zeros((3, 2)).numpy().tolist() == [[0, 0]] * 3
    with pytest.raises(TypeError):
        dp.tensor([1.0], dtype='float16')


def test_from_numpy_is_zero_copy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = dp.from_numpy(a)
    assert t.is_borrowed and t.data_ptr == a.ctypes.data == a.__array_interface__['data'][0]
    a[1, 2] = -5  # the caller's writes show in dp ...
    assert t.numpy(copy=True)[1, 2] == -5
    t.copy_(np.full((3, 4), 7, np.float32))  # ... and dp's in the caller's array
    assert (a == 7).all()


def test_numpy_view_is_zero_copy():
    t = dp.tensor(np.arange(6, dtype=np.int64))
    v = t.numpy()
    assert v.__array_interface__['data'][0] == t.data_ptr
    w = np.asarray(t)
    assert w.__array_interface__['data'][0] == t.data_ptr
    v[0] = 42
    assert t.numpy(copy=True)[0] == 42 and w[0] == 42


def test_array_keeps_tensor_alive():
    t = dp.tensor(np.arange(1000, dtype=np.float32))
    addr = t.data_ptr
    v = t.numpy()
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is not None  # the array's base holds it
    big = [np.ones(1000, np.float32) for _ in range(100)]  # reuse freed memory, if any was freed
    assert v.__array_interface__['data'][0] == addr and v[999] == 999 and v.sum() == sum(range(1000))
    del v, big
    gc.collect()
    assert ref() is None


def test_tensor_keeps_array_alive():
    a = np.arange(1000, dtype=np.float32)
    t = dp.from_numpy(a)
    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is not None
    _ = [np.zeros(1000, np.float32) for _ in range(100)]
    assert t.numpy().sum() == sum(range(1000))
    g = dp.DataParallel(dp.Model({'seed': 0, 'input': {'shape': [1000]}, 'layers': [{'type': 'relu'}]}), 'cpu:0,cpu:1')
    x = dp.from_numpy(np.arange(2000, dtype=np.float32).reshape(2, 1000) - 1000)
    assert g(x).numpy().sum() == sum(range(1000))  # a borrowed tensor as an input
    del t
    gc.collect()
    assert ref() is None


def test_from_numpy_refuses_what_it_cannot_view():
    with pytest.raises(TypeError):
        dp.from_numpy(np.ones(3, np.float64))
    with pytest.raises(ValueError):
        dp.from_numpy(np.ones((4, 4), np.float32)[:, ::2])
    ro = np.ones(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        dp.from_numpy(ro)
    # as_tensor views what it can and copies the rest
    a = np.ones(3, np.float32)
    assert dp.as_tensor(a).data_ptr == a.ctypes.data
    assert not dp.as_tensor(np.ones((4, 4), np.float32)[:, ::2]).is_borrowed


def test_borrowed_tensor_cannot_be_resized():
    ds = dp.Dataset.from_arrays(np.zeros((4, 3), np.float32), np.zeros(4, np.int64))
    loader = dp.DataLoader(ds, batch_size=2)
    x = dp.from_numpy(np.zeros((2, 3), np.float32))
    y = dp.zeros((0,), 'int64')
    rows = ctypes.c_int64(-1)
    status = _lib.loader_next(loader._h, x._h, y._h, ctypes.byref(rows))
    assert status == 1 and rows.value == -1  # DP_ERR_INVALID_ARGUMENT, out-parameter untouched
    assert 'cannot resize a borrowed tensor' in _lib.last_error().decode()
    assert x.shape == (2, 3) and loader.position == (0, 0)


def test_borrowed_release_is_called_once():
    calls = []
    release = _lib.RELEASE_FN(lambda user: calls.append(user))
    buf = (ctypes.c_float * 4)(1, 2, 3, 4)
    shape = (ctypes.c_int64 * 1)(4)
    h = ctypes.c_void_p()
    ctx = dp.default_context()
    assert _lib.tensor_from_host_borrowed(ctx._h, 0, buf, 1, shape, ctypes.cast(release, ctypes.c_void_p), 1234,
                                          ctypes.byref(h)) == 0
    p = ctypes.c_void_p()
    assert _lib.tensor_data(h, ctypes.byref(p)) == 0 and p.value == ctypes.addressof(buf)
    assert calls == []
    _lib.tensor_destroy(h)
    assert calls == [1234]
    # A failed call (misaligned data) does not release.
    assert _lib.tensor_from_host_borrowed(ctx._h, 0, ctypes.addressof(buf) + 1, 1, shape,
                                          ctypes.cast(release, ctypes.c_void_p), 5, ctypes.byref(h)) == 1
    assert 'aligned' in _lib.last_error().decode() and calls == [1234]


def test_loader_never_refills_a_viewed_batch():
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    ds = dp.Dataset.from_arrays(x, np.arange(10))
    loader = dp.DataLoader(ds, batch_size=3, num_workers=2)
    views = []
    for bx, by in loader:
        views.append((bx.numpy(), by.numpy()))
    for i, (vx, vy) in enumerate(views):
        assert np.array_equal(vx, x[3 * i:3 * i + 3]) and np.array_equal(vy, np.arange(10)[3 * i:3 * i + 3])
    kept = [bx for bx, _ in loader]  # kept tensors are not refilled either
    assert [k.numpy()[0, 0] for k in kept] == [0, 12, 24, 36]
    seen = set()
    for bx, _ in loader:  # nothing kept: the same two pairs take turns (no allocation)
        seen.add(id(bx))
    assert len(seen) == 2
    assert bx.numpy()[0, 0] == 36  # the end of the epoch left the last batch alone


def test_an_integer_past_int64_is_refused_not_rounded_to_float32():
    """NumPy keeps 2**70 as a Python object; dp.tensor turned it into float32 1.18e21 silently
    (torch.tensor raises "Overflow when unpacking long")."""
    for data in ([2 ** 70], [[1, -(2 ** 63) - 1]]):
        with pytest.raises(dp.InvalidArgumentError, match='does not fit int64'):
            dp.tensor(data)
    assert dp.tensor([2 ** 63 - 1]).tolist() == [2 ** 63 - 1]
    assert dp.tensor([1.5, 2 ** 70 * 1.0]).dtype == 'float32'
