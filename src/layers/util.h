// Small helpers shared by the built-in layers (not part of the layer API).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/layer.h"

namespace dp {

// Elements per parallel_for chunk for cheap element-wise loops.
constexpr int64_t kElemGrain = 1 << 15;

// The sum of p[0, n) in float, as eight interleaved partial sums (so the loop
// vectorises: one running sum is a chain of dependent adds, 4 cycles each)
// combined in a fixed order: the same result every run, on every split.
inline float lane_sum(const float* __restrict p, int64_t n) {
  constexpr int kLanes = 8;
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += p[j + k];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; j < n; ++j) s += p[j];
  return s;
}

// "[1, 2], [3] and [4]"
inline std::string shapes_str(const std::vector<Shape>& in) {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) s += (i == 0 ? "" : i + 1 == in.size() ? " and " : ", ") + in[i].str();
  return s;
}

inline void expect_rank(const char* what, const Shape& s, int rank, const char* pattern) {
  if (s.ndim != rank) fail(DP_ERR_SHAPE, std::string(what) + " expects input of shape " + pattern + ", got " + s.str());
}

inline int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// The most a window layer's kernel_size, stride, padding or dilation may be
// (cuDNN takes them as int). With them at most this and the input at most
// 2^59 elements (Shape::checked_numel), window_out cannot overflow int64:
// d * (k - 1) < 2^62, and in + 2 * p stays below 2^60.
constexpr int64_t kMaxWindowArg = INT32_MAX;

// A window layer's kernel_size, stride, padding or dilation from its JSON: at
// least min_value, at most kMaxWindowArg.
inline std::array<int64_t, 2> window_arg(Args& a, const char* key, std::array<int64_t, 2> default_value,
                                         int64_t min_value) {
  return a.pair(key, default_value, min_value, kMaxWindowArg);
}
inline std::array<int64_t, 2> required_window_arg(Args& a, const char* key) {
  return a.required_pair(key, 1, kMaxWindowArg);
}

// Output length of a convolution or pooling window, as PyTorch computes it
// (pooling_output_shape): may be <= 0 when the input is too small. Its
// arguments come through window_arg (bounded: no overflow).
inline int64_t window_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t eff = d * (k - 1) + 1;
  int64_t o = floor_div(in + 2 * p - eff + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && o > 0 && (o - 1) * s >= in + p) --o;
  return o;
}

inline std::string pair_str(int64_t a, int64_t b) { return "[" + std::to_string(a) + ", " + std::to_string(b) + "]"; }

// Resolves a torch-style dim over a batched tensor of rank `rank`.
inline int resolve_dim(int64_t dim, int rank) { return static_cast<int>(dim < 0 ? dim + rank : dim); }

// A loss's "reduction": "mean" (the default) or "sum", as PyTorch's
// (Loss::sum_); "none" leaves no scalar to train on.
inline void read_reduction(Args& a, Loss* loss) {
  std::string red = a.string("reduction", "mean");
  if (red != "mean" && red != "sum")
    fail(DP_ERR_MODEL, a.path_of("reduction") + ": expected \"mean\" or \"sum\"" +
                           (red == "none" ? " (\"none\" leaves no scalar loss to train on)" : "") + ", got \"" + red + "\"");
  loss->sum_ = red == "sum";
}

}  // namespace dp
