// Fuzz target: a loader's transform JSON (data/transform.cpp) for a sample
// shape, and the transform applied to a sample (from a separate buffer, and
// in place when it allows that).
// Input: one byte of ndim (0-4), ndim bytes of dims (0-255), eight bytes of
// random key, then the JSON text.
#include <cstdint>
#include <string>
#include <vector>

#include "data/transform.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dp::fuzz::Cursor in(data, size);
  dp::Shape shape;
  const int ndim = in.u8() % 5;
  for (int i = 0; i < ndim; ++i) shape.push(in.u8());
  const uint64_t key = in.u64();
  const std::string text = in.rest_str();
  std::shared_ptr<const dp::Transform> t;
  try {
    t = dp::Transform::from_json(text, shape);
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
    return 0;
  }
  if (!t) return 0;
  const dp::Shape& a = t->input_shape();
  const dp::Shape& b = t->output_shape();
  DP_FUZZ_CHECK(a.ndim == shape.ndim && b.ndim == shape.ndim);
  for (int i = 0; i < b.ndim; ++i) DP_FUZZ_CHECK(b[i] >= 0 && (i >= b.ndim - 2 || b[i] == a[i]));
  // A crop of absurd size is a valid transform that no sample could go
  // through (a loader's batch would not fit): apply only sane ones.
  const int64_t n_in = a.numel(), n_out = b.numel();
  if (n_in > (1 << 18) || n_out > (1 << 20)) return 0;
  std::vector<float> src(static_cast<size_t>(n_in)), dst(static_cast<size_t>(n_out));
  for (int64_t i = 0; i < n_in; ++i) src[static_cast<size_t>(i)] = static_cast<float>(i % 251) / 251.f;
  t->apply(src.data(), dst.data(), key);
  if (!t->needs_source()) {
    DP_FUZZ_CHECK(n_in == n_out);
    std::vector<float> inplace = src;
    t->apply(inplace.data(), inplace.data(), key);
    DP_FUZZ_CHECK(std::memcmp(inplace.data(), dst.data(), dst.size() * sizeof(float)) == 0 || dst.empty());
  }
  return 0;
}
