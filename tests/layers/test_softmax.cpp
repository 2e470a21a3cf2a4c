#include <cmath>
#include <fstream>

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

// Against PyTorch 2.15's F.log_softmax in float64 on the same float32
// inputs (tests/reference/losses.json): the output and the input gradient
// for an upstream gradient, along the last dim and inner ones.
TEST_CASE("log_softmax: as PyTorch, gradients, stable for large inputs") {
  std::ifstream f(std::string(DP_REFERENCE_DIR) + "/losses.json");
  REQUIRE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f)["log_softmax"];
  REQUIRE(ref.size() == 3);
  for (const auto& c : ref) {
    const auto dims = c["shape"].get<std::vector<int64_t>>();
    const int64_t dim = c["dim"].get<int64_t>();
    CAPTURE(dim);
    Shape shape, sample;
    for (int64_t d : dims) shape.push(d);
    for (size_t i = 1; i < dims.size(); ++i) sample.push(dims[i]);
    auto l = make_layer({{"type", "log_softmax"}, {"dim", dim}});
    Harness h(*l, {sample});
    CHECK(h.out_sample == sample);
    Tensor x = tensor_of(shape, c["input"].get<std::vector<float>>());
    Tensor gout = tensor_of(shape, c["gout"].get<std::vector<float>>());
    h.forward({&x});
    check_close(h.out, c["output"].get<std::vector<float>>(), 2e-6f);
    h.backward({&x}, gout);
    check_close(h.gin[0], c["grad"].get<std::vector<float>>(), 2e-6f);
    check_layer(h, {&x}, GradOptions{1e-3, 1e-2});
  }
  // exp never overflows: (x - max) - log(sum exp(x - max))
  auto l = make_layer({{"type", "log_softmax"}});
  Harness h(*l, {Shape{3}});
  Tensor x = tensor_of(Shape{1, 3}, {1000.f, 0.f, -1000.f});
  h.forward({&x});
  check_close(h.out, {0.f, -1000.f, -2000.f});
  expect_error([] { make_layer({{"type", "log_softmax"}, {"dim", 0}}); }, DP_ERR_MODEL, {"/layers/0/dim"});
  auto m = make_layer({{"type", "log_softmax"}, {"dim", 2}});
  expect_error([&] { m->infer({Shape{4}}); }, DP_ERR_SHAPE, {"log_softmax dim 2", "[4]"});
}
