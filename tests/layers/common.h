// Shared by the layer tests: building layers from JSON through the registry,
// error assertions, and the heap-allocation counter (alloc_counter.cpp).
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "alloc_counter.h"
#include "gradcheck.h"
#include "layers/registry.h"

namespace dp {
namespace test {

inline const Registry& registry() {
  static Registry r;
  return r;
}

// As the model builder does: factory, then finish() rejecting unknown keys;
// from `reg` (one with plugins loaded) or the built-ins.
inline std::unique_ptr<Layer> make_layer(const Registry& reg, const nlohmann::json& j, int index = 0) {
  static thread_local std::vector<nlohmann::json> keep;  // Args keeps a reference
  keep.push_back(j);
  Args a(keep.back(), "/layers/" + std::to_string(index));
  std::string type = j.at("type").get<std::string>();
  a.accept("type");
  LayerFactory f = reg.layer(type);
  REQUIRE((f != nullptr));
  auto l = f(a);
  a.finish(type);
  l->type = type;
  l->index = index;
  return l;
}
inline std::unique_ptr<Layer> make_layer(const nlohmann::json& j, int index = 0) { return make_layer(registry(), j, index); }

inline std::unique_ptr<Loss> make_loss(const nlohmann::json& j) {
  static thread_local std::vector<nlohmann::json> keep;
  keep.push_back(j);
  Args a(keep.back(), "/loss");
  std::string type = j.at("type").get<std::string>();
  a.accept("type");
  LossFactory f = registry().loss(type);
  REQUIRE((f != nullptr));
  auto l = f(a);
  a.finish(type);
  l->type = type;
  return l;
}

// Runs fn, which must throw dp::Error with `status` and a message containing
// every one of `parts`.
inline void expect_error(const std::function<void()>& fn, dp_status status, std::vector<std::string> parts) {
  bool threw = false;
  try {
    fn();
  } catch (const Error& e) {
    threw = true;
    CHECK_MESSAGE(e.status() == status, "status " << e.status() << ": " << e.what());
    for (const auto& p : parts) CHECK_MESSAGE(std::string(e.what()).find(p) != std::string::npos, "'" << p << "' not in: " << e.what());
  }
  CHECK_MESSAGE(threw, "no dp::Error thrown");
}

#define CHECK_RESULT(r)                                                                         \
  do {                                                                                          \
    auto _r = (r);                                                                              \
    CHECK_MESSAGE(_r.ok, _r.detail << " (worst " << _r.worst << ", checked " << _r.checked << ")"); \
  } while (0)

// Gradient check plus the steady-state (no reallocation, no allocation) check.
inline void check_layer(Harness& h, const std::vector<Tensor*>& in, const GradOptions& opt = {}) {
  auto r = gradcheck(h, in, opt);
  CHECK_MESSAGE(r.ok, r.detail << " (worst " << r.worst << ")");
  CHECK(r.checked > 0);
  auto s = check_steady(h, in, allocations);
  CHECK_MESSAGE(s.ok, s.detail);
}

inline void check_close(const Tensor& t, const std::vector<float>& want, float tol = 1e-5f) {
  REQUIRE(t.numel() == static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    CHECK_MESSAGE(std::fabs(t.f32()[i] - want[i]) <= tol * std::max(1.f, std::fabs(want[i])),
                  "at " << i << ": " << t.f32()[i] << " vs " << want[i]);
}

}  // namespace test
}  // namespace dp
