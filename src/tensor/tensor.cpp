#include "tensor/tensor.h"

#include <cstdint>
#include <cstring>
#include <new>

#include "core/memory.h"

namespace dp {

// 64-byte alignment: a cache line, and what AVX-512 loads prefer.
static constexpr std::align_val_t kAlign{64};

void Tensor::release() {
  if (capacity_ == 0) return;
  if (alloc_)
    alloc_->release(ptr_, capacity_);
  else
    ::operator delete(ptr_, kAlign);
  ptr_ = nullptr;
  capacity_ = 0;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this == &o) return *this;
  release();
  alloc_ = o.alloc_;
  ptr_ = o.ptr_;
  capacity_ = o.capacity_;
  dtype_ = o.dtype_;
  shape_ = o.shape_;
  o.ptr_ = nullptr;
  o.capacity_ = 0;
  o.shape_ = Shape();
  return *this;
}

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
  Tensor v = view(base, dtype_, s);
  v.alloc_ = alloc_;  // a view of device memory is device memory
  return v;
}

void Tensor::resize(dp_dtype dtype, const Shape& shape) {
  if (is_view()) fail(DP_ERR_INTERNAL, "resize of a tensor view");
  const int64_t numel = shape.checked_numel("tensor");
  if (static_cast<uint64_t>(numel) > SIZE_MAX / dtype_size(dtype))  // its bytes would wrap to a small block
    fail(DP_ERR_OUT_OF_MEMORY, "a tensor of shape " + shape.str() + " needs more bytes than a size_t holds");
  size_t need = static_cast<size_t>(numel) * dtype_size(dtype);
  if (need > capacity_ || ptr_ == nullptr) {
    // More than the machine has can only fail, or be killed later: refuse it
    // before asking (a sanitizer's allocator would abort instead).
    if (!alloc_ && need > physical_memory())
      fail(DP_ERR_OUT_OF_MEMORY, "a tensor of shape " + shape.str() + " needs " + format_bytes(double(need)) +
                                     ", more than the machine's memory (" + format_bytes(double(physical_memory())) + ")");
    release();
    if (need == 0) need = 1;  // a real pointer, even for an empty tensor
    try {
      ptr_ = alloc_ ? alloc_->allocate(need) : ::operator new(need, kAlign);
    } catch (...) {
      shape_ = Shape{0};  // no storage: an empty tensor, not a stale shape
      throw;
    }
    capacity_ = need;
  }
  dtype_ = dtype;
  shape_ = shape;
}

void Tensor::set_allocator(Allocator* alloc) {
  if (is_view()) fail(DP_ERR_INTERNAL, "set_allocator on a tensor view");
  if (alloc == alloc_) return;
  Tensor moved(alloc);
  moved.resize(dtype_, shape_);
  if (bytes() > 0) std::memcpy(moved.ptr_, ptr_, bytes());
  *this = std::move(moved);
}

void Tensor::zero() {
  if (alloc_) fail(DP_ERR_INTERNAL, "Tensor::zero on device memory");
  if (ptr_) std::memset(ptr_, 0, bytes());
}

}  // namespace dp
