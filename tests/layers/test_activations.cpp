#include <cmath>

#include "common.h"

using namespace dp;
using namespace dp::test;

namespace {
// Values in [-2, 2] at least 0.05 away from 0 (the kink of relu).
Tensor away_from_zero(const Shape& s, uint64_t seed) {
  Tensor t = random_tensor(s, seed, -2.f, 2.f);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::fabs(t.f32()[i]) < 0.05f) t.f32()[i] = t.f32()[i] < 0 ? -0.3f : 0.3f;
  return t;
}

std::vector<float> apply(const char* type, nlohmann::json extra, const std::vector<float>& in) {
  nlohmann::json j = extra;
  j["type"] = type;
  auto l = make_layer(j);
  Harness h(*l, {Shape{int64_t(in.size())}});
  Tensor x = tensor_of(Shape{1, int64_t(in.size())}, in);
  Tensor& y = h.forward({&x});
  return std::vector<float>(y.f32(), y.f32() + y.numel());
}
}  // namespace

TEST_CASE("activations: known values") {
  std::vector<float> x{-2.f, -0.5f, 0.f, 1.f, 3.f};
  auto r = apply("relu", nlohmann::json::object(), x);
  CHECK(r == std::vector<float>{0.f, 0.f, 0.f, 1.f, 3.f});
  auto lr = apply("leaky_relu", nlohmann::json::object(), x);
  CHECK(lr[0] == doctest::Approx(-0.02));
  CHECK(lr[4] == doctest::Approx(3));
  auto lr2 = apply("leaky_relu", {{"negative_slope", 0.2}}, x);
  CHECK(lr2[1] == doctest::Approx(-0.1));
  auto s = apply("sigmoid", nlohmann::json::object(), {0.f, 2.f, -100.f, 100.f});
  CHECK(s[0] == doctest::Approx(0.5));
  CHECK(s[1] == doctest::Approx(0.8807970779778823));
  CHECK(s[2] == doctest::Approx(0.0).epsilon(1e-6));
  CHECK(s[3] == doctest::Approx(1.0));
  CHECK(std::isfinite(s[2]));
  auto t = apply("tanh", nlohmann::json::object(), {0.5f});
  CHECK(t[0] == doctest::Approx(0.46211715726000974));
  auto g = apply("gelu", nlohmann::json::object(), {1.f, -1.f, 0.f});
  CHECK(g[0] == doctest::Approx(0.8413447460685429));
  CHECK(g[1] == doctest::Approx(-0.15865525393145707));
  CHECK(g[2] == 0.f);
  auto gt = apply("gelu", {{"approximate", "tanh"}}, {1.f, -1.f});
  CHECK(gt[0] == doctest::Approx(0.8411919906082768));
  CHECK(gt[1] == doctest::Approx(-0.15880800939172324));
}

TEST_CASE("activations: gradients on several shapes") {
  std::vector<nlohmann::json> layers{{{"type", "relu"}},
                                     {{"type", "leaky_relu"}},
                                     {{"type", "leaky_relu"}, {"negative_slope", 0.3}},
                                     {{"type", "sigmoid"}},
                                     {{"type", "tanh"}},
                                     {{"type", "gelu"}},
                                     {{"type", "gelu"}, {"approximate", "tanh"}}};
  for (const auto& j : layers)
    for (const Shape& s : {Shape{7}, Shape{2, 3, 4}}) {
      CAPTURE(j.dump());
      auto l = make_layer(j);
      Harness h(*l, {s});
      CHECK(h.out_sample == s);
      Tensor x = away_from_zero(Shape::batched(3, s), 5);
      check_layer(h, {&x}, GradOptions{1e-3, 1e-2});
    }
}

TEST_CASE("activations: bad arguments") {
  expect_error([] { make_layer({{"type", "gelu"}, {"approximate", "fast"}}); }, DP_ERR_MODEL,
               {"/layers/0/approximate", "\"fast\""});
  expect_error([] { make_layer({{"type", "leaky_relu"}, {"negative_slope", "x"}}); }, DP_ERR_MODEL,
               {"/layers/0/negative_slope"});
}
