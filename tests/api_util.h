// Small helpers for tests that use only the C ABI (dp.h).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dp.h"

#define DP_REQUIRE_OK(call)                                              \
  do {                                                                   \
    dp_status s_ = (call);                                               \
    INFO(#call << " -> " << std::string(dp_status_name(s_)) << ": " << std::string(dp_last_error())); \
    REQUIRE(s_ == DP_OK);                                                \
  } while (0)

// Deterministic pseudo-random data (an LCG), the same in every test run.
struct TestRng {
  uint64_t s;
  explicit TestRng(uint64_t seed) : s(seed * 6364136223846793005ull + 1442695040888963407ull) {}
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * (next() / 2147483648.0f); }
};

inline dp_tensor* make_f32(dp_context* ctx, const std::vector<float>& v, std::vector<int64_t> shape) {
  dp_tensor* t = nullptr;
  DP_REQUIRE_OK(dp_tensor_from_host(ctx, DP_F32, v.data(), static_cast<int>(shape.size()), shape.data(), &t));
  return t;
}

inline dp_tensor* make_i64(dp_context* ctx, const std::vector<int64_t>& v, std::vector<int64_t> shape) {
  dp_tensor* t = nullptr;
  DP_REQUIRE_OK(dp_tensor_from_host(ctx, DP_I64, v.data(), static_cast<int>(shape.size()), shape.data(), &t));
  return t;
}

inline std::vector<float> params_of(const dp_model* m) {
  int64_t n = 0;
  DP_REQUIRE_OK(dp_model_num_parameters(m, &n));
  std::vector<float> p(static_cast<size_t>(n));
  DP_REQUIRE_OK(dp_model_copy_parameters(m, p.data(), n));
  return p;
}

inline std::vector<float> tensor_data(const dp_tensor* t) {
  int nd = 0;
  int64_t shape[DP_MAX_DIMS];
  DP_REQUIRE_OK(dp_tensor_shape(t, &nd, shape));
  int64_t n = 1;
  for (int i = 0; i < nd; ++i) n *= shape[i];
  std::vector<float> v(static_cast<size_t>(n));
  DP_REQUIRE_OK(dp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(float)));
  return v;
}

inline std::vector<int64_t> shape_of(const dp_tensor* t) {
  int nd = 0;
  int64_t shape[DP_MAX_DIMS];
  DP_REQUIRE_OK(dp_tensor_shape(t, &nd, shape));
  return std::vector<int64_t>(shape, shape + nd);
}

inline std::string cpu_devices(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? ",cpu:" : "cpu:") + std::to_string(i);
  return s;
}

// a and b agree within `tol` relative, element by element, against the larger
// magnitude of the two with a floor of 1e-2 for values near zero (another
// split sums gradients in another order, so a bias that has drifted to 1e-4
// differs in its last bits: 1e-8 absolute, not 1e-5 of itself).
inline void require_close(const std::vector<float>& a, const std::vector<float>& b, double tol = 1e-5,
                          const char* what = "parameters") {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double scale = std::fmax(1e-2, std::fmax(std::fabs(a[i]), std::fabs(b[i])));
    double rel = std::fabs(double(a[i]) - double(b[i])) / scale;
    if (rel > worst) worst = rel, at = i;
  }
  INFO(what << ": worst relative difference " << worst << " at " << at << ": " << a[at] << " vs " << b[at]);
  CHECK(worst <= tol);
}
