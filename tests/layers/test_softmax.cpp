#include <cmath>

#include "common.h"

using namespace dp;
using namespace dp::test;

TEST_CASE("softmax: rows sum to 1, known values, stable for large inputs") {
  auto l = make_layer({{"type", "softmax"}});
  Harness h(*l, {Shape{3}});
  Tensor x = tensor_of(Shape{2, 3}, {1.f, 2.f, 3.f, 1000.f, 1000.f, 1000.f});
  h.forward({&x});
  check_close(h.out, {0.09003057f, 0.24472847f, 0.66524096f, 1.f / 3, 1.f / 3, 1.f / 3});
}

TEST_CASE("softmax: along an inner dim, gradients") {
  for (int dim : {1, 2, -1, -2, 3}) {
    CAPTURE(dim);
    auto l = make_layer({{"type", "softmax"}, {"dim", dim}});
    Harness h(*l, {Shape{3, 4, 2}});
    Tensor x = random_tensor(Shape{2, 3, 4, 2}, 6, -3.f, 3.f);
    h.forward({&x});
    int d = dim < 0 ? dim + 4 : dim;
    int64_t sizes[4] = {2, 3, 4, 2};
    int64_t stride = 1;
    for (int i = d + 1; i < 4; ++i) stride *= sizes[i];
    // Every line along d sums to 1.
    for (int64_t i = 0; i < x.numel(); ++i) {
      if ((i / stride) % sizes[d] != 0) continue;
      double s = 0;
      for (int64_t k = 0; k < sizes[d]; ++k) s += h.out.f32()[i + k * stride];
      REQUIRE(s == doctest::Approx(1.0).epsilon(1e-5));
    }
    check_layer(h, {&x}, GradOptions{1e-3, 1e-2});
  }
}

TEST_CASE("softmax: errors") {
  expect_error([] { make_layer({{"type", "softmax"}, {"dim", 0}}); }, DP_ERR_MODEL, {"/layers/0/dim"});
  auto l = make_layer({{"type", "softmax"}, {"dim", -3}});
  expect_error([&] { l->infer({Shape{4}}); }, DP_ERR_SHAPE, {"[4]", "-3"});
  auto m = make_layer({{"type", "softmax"}, {"dim", 2}});
  expect_error([&] { m->infer({Shape{4}}); }, DP_ERR_SHAPE, {"[4]"});
}
