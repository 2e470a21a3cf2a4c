#include "tensor/tensor.h"

#include <cstring>
#include <new>

namespace dp {

// 64-byte alignment: a cache line, and what AVX-512 loads prefer.
static constexpr std::align_val_t kAlign{64};

void Tensor::Free::operator()(void* p) const { ::operator delete(p, kAlign); }

Tensor Tensor::view(void* data, dp_dtype dtype, const Shape& shape) {
  Tensor t;
  t.ptr_ = data;
  t.dtype_ = dtype;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  Shape s = shape_;
  s.d[0] = count;
  auto* base = static_cast<char*>(ptr_) + begin * shape_.inner() * static_cast<int64_t>(dtype_size(dtype_));
  return view(base, dtype_, s);
}

void Tensor::resize(dp_dtype dtype, const Shape& shape) {
  if (is_view()) fail(DP_ERR_INTERNAL, "resize of a tensor view");
  size_t need = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (need > capacity_) {
    owned_.reset(::operator new(need, kAlign));
    capacity_ = need;
  }
  ptr_ = owned_.get();
  dtype_ = dtype;
  shape_ = shape;
}

void Tensor::zero() {
  if (ptr_) std::memset(ptr_, 0, bytes());
}

}  // namespace dp
