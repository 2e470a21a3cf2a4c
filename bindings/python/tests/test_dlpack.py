"""DLPack in both directions, with NumPy (and PyTorch when there is one)."""
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import dp
from dp import _dlpack

NP_DLPACK = hasattr(np, 'from_dlpack')


@pytest.mark.skipif(not NP_DLPACK, reason='NumPy < 1.22 has no from_dlpack')
@pytest.mark.parametrize('dtype', [np.float32, np.int64])
def test_numpy_consumes_dp(dtype):
    t = dp.tensor(np.arange(12, dtype=dtype).reshape(3, 4))
    assert t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)
    assert a.dtype == dtype and a.shape == (3, 4)
    assert a.__array_interface__['data'][0] == t.data_ptr
    addr = t.data_ptr
    del t
    gc.collect()  # the export keeps the dp tensor alive
    _ = [np.ones(12, dtype) for _ in range(50)]
    assert a.__array_interface__['data'][0] == addr and a.sum() == 66
    assert _dlpack.live_exports() >= 1
    del a
    gc.collect()
    assert _dlpack.live_exports() == 0


def test_unconsumed_capsule_is_freed():
    t = dp.tensor(np.arange(3, dtype=np.float32))
    before = _dlpack.live_exports()
    cap = t.__dlpack__()
    assert _dlpack.live_exports() == before + 1 and type(cap).__name__ == 'PyCapsule'
    del cap
    gc.collect()
    assert _dlpack.live_exports() == before


@pytest.mark.skipif(not NP_DLPACK, reason='NumPy < 1.22 has no __dlpack__')
@pytest.mark.parametrize('dtype', [np.float32, np.int64])
def test_dp_consumes_numpy(dtype):
    a = np.arange(20, dtype=dtype).reshape(4, 5)
    refs = sys.getrefcount(a)
    t = dp.from_dlpack(a)
    assert t.is_borrowed and t.data_ptr == a.ctypes.data and t.shape == (4, 5) and t.dtype == np.dtype(dtype).name
    assert sys.getrefcount(a) == refs + 1  # NumPy's DLManagedTensor holds the array
    addr = a.ctypes.data
    del a
    gc.collect()
    _ = [np.zeros(20, dtype) for _ in range(50)]
    assert t.data_ptr == addr and t.numpy(copy=True).sum() == 190
    b = np.arange(6, dtype=dtype)
    refs = sys.getrefcount(b)
    u = dp.from_dlpack(b)
    del u
    gc.collect()
    assert sys.getrefcount(b) == refs  # dp_tensor_destroy called NumPy's deleter


def test_dp_to_dp_and_errors():
    t = dp.tensor(np.arange(6, dtype=np.float32))
    u = dp.from_dlpack(t)
    assert u.data_ptr == t.data_ptr and u.is_borrowed
    del t
    gc.collect()
    assert u.numpy().tolist() == [0, 1, 2, 3, 4, 5]
    del u
    gc.collect()
    assert _dlpack.live_exports() == 0
    if NP_DLPACK:
        with pytest.raises(BufferError):
            dp.from_dlpack(np.ones(3, np.float64))
        with pytest.raises(BufferError):
            dp.from_dlpack(np.ones((4, 4), np.float32)[:, ::2])
        assert dp.from_dlpack(np.ones((0, 3), np.float32)).shape == (0, 3)
        # an empty array's strides say nothing (NumPy 2.5 exports zeros): still a view
        empty = np.lib.stride_tricks.as_strided(np.ones((0, 3), np.float32), strides=(0, 0))
        assert dp.from_dlpack(empty).shape == (0, 3)


class _Producer:
    """A DLPack producer that is not a NumPy array (as a torch tensor is not)."""

    def __init__(self, a):
        self.a, self.dtype = a, a.dtype

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __array__(self, dtype=None):
        return np.asarray(self.a, dtype)


@pytest.mark.skipif(not NP_DLPACK, reason='NumPy without __dlpack__')
def test_as_tensor_views_a_dlpack_producer():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = dp.as_tensor(_Producer(a))
    assert t.data_ptr == a.ctypes.data  # viewed, not copied
    b = np.arange(6, dtype=np.float32).reshape(3, 2).T  # not contiguous: copied instead
    assert dp.as_tensor(_Producer(b)).numpy().tolist() == b.tolist()


TORCH = os.environ.get('DP_TORCH_PYTHON', '/tmp/torchenv/bin/python')
TORCH_SCRIPT = r'''
import gc, sys
sys.path.insert(0, sys.argv[1])
import torch, dp
t = dp.tensor([[1.0, 2.0], [3.0, 4.0]])
a = torch.from_dlpack(t)
assert a.data_ptr() == t.data_ptr and a.tolist() == [[1.0, 2.0], [3.0, 4.0]]
a[0, 0] = 10.0  # torch's view is writeable: dp sees it
assert t.numpy()[0, 0] == 10.0
del t; gc.collect(); assert a.sum().item() == 19.0
x = torch.arange(12, dtype=torch.int64).reshape(3, 4)
u = dp.from_dlpack(x)
assert u.data_ptr == x.data_ptr() and u.shape == (3, 4) and u.dtype == 'int64'
del x; gc.collect(); assert u.numpy().sum() == 66
del a, u; gc.collect()
from dp import _dlpack; assert _dlpack.live_exports() == 0
# as_tensor views a torch tensor (model calls take their input so) and refuses
# one that requires grad, or integer inputs, instead of copying them silently
w = torch.ones(2, 3)
assert dp.as_tensor(w).data_ptr == w.data_ptr()
for bad, what in ((torch.ones(2, 3, requires_grad=True), 'detach'), (torch.ones(2, 3, dtype=torch.uint8), 'uint8')):
    try:
        g = dp.DataParallel(dp.Model({"input": {"shape": [3]}, "layers": [{"type": "linear", "out_features": 2}],
                                      "loss": {"type": "cross_entropy"}}), 1)
        g(bad)
        raise AssertionError('not refused')
    except dp.ArgumentTypeError as e:
        assert what in str(e), e
print('torch ok')
'''


@pytest.mark.skipif(not os.path.exists(TORCH), reason=f'no PyTorch interpreter at {TORCH} (DP_TORCH_PYTHON)')
def test_torch_both_ways():
    r = subprocess.run([TORCH, '-c', TORCH_SCRIPT, os.path.dirname(os.path.dirname(os.path.abspath(dp.__file__)))],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and 'No module named' in r.stderr:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr
    assert 'torch ok' in r.stdout
