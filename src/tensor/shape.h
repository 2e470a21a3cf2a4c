// A small fixed-capacity shape, as in the C ABI (DP_MAX_DIMS). Runtime tensors
// carry the batch as dim 0; shapes inferred at model build are per sample.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.h"
#include "dp.h"

namespace dp {

struct Shape {
  int ndim = 0;
  int64_t d[DP_MAX_DIMS] = {};

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    for (int64_t v : dims) push(v);
  }
  void push(int64_t v) {
    if (ndim >= DP_MAX_DIMS) fail(DP_ERR_SHAPE, "more than " + std::to_string(DP_MAX_DIMS) + " dimensions");
    d[ndim++] = v;
  }
  int64_t operator[](int i) const { return d[i]; }
  int64_t& operator[](int i) { return d[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= d[i];
    return n;
  }
  // numel(), or DP_ERR_SHAPE naming `what` when it overflows: for shapes
  // that come from outside (a model's JSON, a caller's tensor), before
  // anything is sized by them. Bytes of 8-byte elements still fit int64.
  // (A const char* `what` builds no string unless it fails: Tensor::resize
  // runs per layer per step.)
  int64_t checked_numel(const char* what) const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i)
      if (d[i] < 0 || __builtin_mul_overflow(n, d[i], &n) || n > (int64_t{1} << 59))
        fail(DP_ERR_SHAPE, std::string(what) + ": shape " + str() + " has too many elements (at most 2^59)");
    return n;
  }
  int64_t checked_numel(const std::string& what) const { return checked_numel(what.c_str()); }
  // Elements per index of dim 0 (a sample, for batched tensors).
  int64_t inner() const {
    int64_t n = 1;
    for (int i = 1; i < ndim; ++i) n *= d[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; ++i)
      if (d[i] != o.d[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }

  // [batch] + per-sample shape.
  static Shape batched(int64_t batch, const Shape& sample) {
    Shape s;
    s.push(batch);
    for (int i = 0; i < sample.ndim; ++i) s.push(sample.d[i]);
    return s;
  }
  // Drops dim 0.
  Shape sample() const {
    Shape s;
    for (int i = 1; i < ndim; ++i) s.push(d[i]);
    return s;
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  }
};

}  // namespace dp
