// Fuzz target: an optimizer's JSON (Optimizer::from_json) for a model of n
// parameters, then three steps over them, one range at a time and split in
// two ranges (which must agree: an update is elementwise), and its state.
// The same text as a grad scaler's JSON (GradScaler::from_json): settings in
// range, and a scale that stays a finite float >= 0 through its updates.
// Input: one byte of n (0-255), then the JSON text.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace {

void grad_scaler(const std::string& text) {
  dp::GradScaler s;
  try {
    s = dp::GradScaler::from_json(text.c_str());
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
    return;
  }
  if (!s.enabled) return;
  DP_FUZZ_CHECK(s.scale == s.init_scale && s.scale > 0 && std::isfinite(s.scale));
  DP_FUZZ_CHECK(s.growth_factor > 1 && s.backoff_factor > 0 && s.backoff_factor < 1 && s.growth_interval >= 1);
  for (int i = 0; i < 300; ++i) {
    const float before = s.scale;
    s.update(i % 7 == 3);
    DP_FUZZ_CHECK(std::isfinite(s.scale) && s.scale >= 0 && s.growth_tracker >= 0 && s.growth_tracker < s.growth_interval);
    DP_FUZZ_CHECK(i % 7 == 3 ? s.scale <= before : s.scale >= before);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dp::fuzz::Cursor in(data, size);
  const int64_t n = in.u8();
  const std::string text = in.rest_str();
  grad_scaler(text);
  std::unique_ptr<dp::Optimizer> a, b;
  try {
    a = dp::Optimizer::from_json(text, n);
    b = dp::Optimizer::from_json(text, n);
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
    return 0;
  }
  DP_FUZZ_CHECK(a->type() == "sgd" || a->type() == "adam" || a->type() == "adamw");
  for (const auto& st : a->state()) DP_FUZZ_CHECK(static_cast<int64_t>(st.second->size()) == n);
  std::vector<float> pa(static_cast<size_t>(n)), pb, g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    pa[static_cast<size_t>(i)] = static_cast<float>(i % 7) - 3.f;
    g[static_cast<size_t>(i)] = static_cast<float>(i % 5) * 0.25f - 0.5f;
  }
  pb = pa;
  for (int s = 0; s < 3; ++s) {
    a->step(pa.data(), g.data(), n, nullptr);
    b->begin_step();
    b->update(pb.data(), g.data(), 0, n / 2);
    b->update(pb.data(), g.data(), n / 2, n);
    (void)a->rule();
  }
  DP_FUZZ_CHECK(a->steps == 3 && b->steps == 3);
  DP_FUZZ_CHECK(n == 0 || std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)) == 0);
  return 0;
}
