// A contiguous host tensor. Storage only grows: resize() to a shape that fits
// the current capacity never allocates, which is what keeps the training step
// free of allocations after the first one. A tensor may also be a view of
// memory it does not own (a replica's rows of a batch).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/shape.h"

namespace dp {

// Where a tensor's storage comes from: host memory by default, a device's
// caching allocator for tensors that live on a GPU (src/backends/cuda). A
// device tensor's f32()/data() are device pointers: only kernels touch them.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p, size_t bytes) = 0;
};

inline size_t dtype_size(dp_dtype t) { return t == DP_I64 ? 8 : 4; }
inline const char* dtype_name(dp_dtype t) { return t == DP_I64 ? "int64" : "float32"; }

class Tensor {
 public:
  Tensor() = default;
  Tensor(dp_dtype dtype, const Shape& shape) { resize(dtype, shape); }
  // An empty tensor whose storage will come from `alloc` (null: host memory).
  explicit Tensor(Allocator* alloc) : alloc_(alloc) {}
  ~Tensor() { release(); }
  Tensor(Tensor&& o) noexcept { *this = std::move(o); }
  Tensor& operator=(Tensor&& o) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Non-owning view of host memory `data` (which must outlive the view).
  static Tensor view(void* data, dp_dtype dtype, const Shape& shape);
  // Rows [begin, begin + count) of dim 0, as a view.
  Tensor rows(int64_t begin, int64_t count) const;

  // Sets shape and dtype; reallocates only when the bytes exceed capacity.
  // Contents are unspecified afterwards. Not allowed on views.
  void resize(dp_dtype dtype, const Shape& shape);
  void resize(const Shape& shape) { resize(dtype_, shape); }
  void zero();
  // Moves the storage to `alloc` (host-accessible memory, e.g. page-locked),
  // keeping shape and contents; later growth also comes from `alloc`.
  void set_allocator(Allocator* alloc);

  dp_dtype dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_view() const { return ptr_ != nullptr && capacity_ == 0; }
  Allocator* allocator() const { return alloc_; }

  float* f32() { return static_cast<float*>(ptr_); }
  const float* f32() const { return static_cast<const float*>(ptr_); }
  int64_t* i64() { return static_cast<int64_t*>(ptr_); }
  const int64_t* i64() const { return static_cast<const int64_t*>(ptr_); }
  void* data() { return ptr_; }
  const void* data() const { return ptr_; }

 private:
  void release();

  Allocator* alloc_ = nullptr;  // null: host memory
  void* ptr_ = nullptr;
  size_t capacity_ = 0;  // bytes owned at ptr_; 0 for a view
  dp_dtype dtype_ = DP_F32;
  Shape shape_;
};

}  // namespace dp
