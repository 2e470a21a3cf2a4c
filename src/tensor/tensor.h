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

inline size_t dtype_size(dp_dtype t) { return t == DP_I64 ? 8 : 4; }
inline const char* dtype_name(dp_dtype t) { return t == DP_I64 ? "int64" : "float32"; }

class Tensor {
 public:
  Tensor() = default;
  Tensor(dp_dtype dtype, const Shape& shape) { resize(dtype, shape); }
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Non-owning view of `data` (which must outlive the view).
  static Tensor view(void* data, dp_dtype dtype, const Shape& shape);
  // Rows [begin, begin + count) of dim 0, as a view.
  Tensor rows(int64_t begin, int64_t count) const;

  // Sets shape and dtype; reallocates only when the bytes exceed capacity.
  // Contents are unspecified afterwards. Not allowed on views.
  void resize(dp_dtype dtype, const Shape& shape);
  void resize(const Shape& shape) { resize(dtype_, shape); }
  void zero();

  dp_dtype dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_view() const { return ptr_ != nullptr && !owned_; }

  float* f32() { return static_cast<float*>(ptr_); }
  const float* f32() const { return static_cast<const float*>(ptr_); }
  int64_t* i64() { return static_cast<int64_t*>(ptr_); }
  const int64_t* i64() const { return static_cast<const int64_t*>(ptr_); }
  void* data() { return ptr_; }
  const void* data() const { return ptr_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> owned_;
  void* ptr_ = nullptr;
  size_t capacity_ = 0;
  dp_dtype dtype_ = DP_F32;
  Shape shape_;
};

}  // namespace dp
