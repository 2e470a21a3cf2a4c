#include <fstream>

#include "common.h"

using namespace dp;
using namespace dp::test;

namespace {
Shape shape_of(const std::vector<int64_t>& dims, size_t from = 0) {
  Shape s;
  for (size_t i = from; i < dims.size(); ++i) s.push(dims[i]);
  return s;
}
}  // namespace

// Against PyTorch 2.15's nn.LayerNorm in float64 on the same float32 inputs
// and parameters (tests/reference/losses.json): the output, the input
// gradient and the parameter gradients for an upstream gradient; with and
// without affine parameters and bias, normalized over one and two trailing
// dims, rows far from 0.
TEST_CASE("layer_norm: as PyTorch, gradients by finite differences") {
  std::ifstream f(std::string(DP_REFERENCE_DIR) + "/losses.json");
  REQUIRE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f)["layer_norm"];
  REQUIRE(ref.size() == 5);
  for (const auto& c : ref) {
    CAPTURE(c["layer"].dump());
    const auto dims = c["shape"].get<std::vector<int64_t>>();
    auto l = make_layer(c["layer"]);
    const Shape sample = shape_of(dims, 1);
    Harness h(*l, {sample});
    CHECK(h.out_sample == sample);
    // The parameters as PyTorch's named_parameters(): weight, then bias.
    std::vector<float> params, want_grads;
    for (const char* name : {"weight", "bias"}) {
      if (!c["params"].contains(name)) continue;
      for (float v : c["params"][name].get<std::vector<float>>()) params.push_back(v);
      for (float v : c["param_grads"][name].get<std::vector<float>>()) want_grads.push_back(v);
    }
    REQUIRE(h.params.size() == params.size());
    h.params = params;
    Tensor x = tensor_of(shape_of(dims), c["input"].get<std::vector<float>>());
    Tensor gout = tensor_of(shape_of(dims), c["gout"].get<std::vector<float>>());
    h.forward({&x});
    check_close(h.out, c["output"].get<std::vector<float>>(), 2e-5f);
    h.backward({&x}, gout);
    check_close(h.gin[0], c["grad"].get<std::vector<float>>(), 2e-5f);
    for (size_t i = 0; i < want_grads.size(); ++i)
      CHECK_MESSAGE(std::fabs(h.grads[i] - want_grads[i]) <= 2e-5f * std::max(1.f, std::fabs(want_grads[i])),
                    "param grad " << i << ": " << h.grads[i] << " vs " << want_grads[i]);
    // Finite differences on inputs near 0 (float32's steps are too coarse at 1000).
    Tensor xr = random_tensor(shape_of(dims), 3, -2.f, 2.f);
    check_layer(h, {&xr}, GradOptions{1e-3, 1e-2});
  }
}

TEST_CASE("layer_norm: parameters and defaults as torch.nn.LayerNorm") {
  auto l = make_layer({{"type", "layer_norm"}, {"normalized_shape", 4}});
  Harness h(*l, {Shape{3, 4}});
  REQUIRE(h.param_specs.size() == 2);
  CHECK(h.param_specs[0].suffix == "weight");
  CHECK(h.param_specs[0].shape == Shape{4});
  CHECK(h.param_specs[1].suffix == "bias");
  CHECK(h.params == std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0});
  auto two = make_layer({{"type", "layer_norm"}, {"normalized_shape", {3, 4}}, {"bias", false}});
  Harness h2(*two, {Shape{3, 4}});
  REQUIRE(h2.param_specs.size() == 1);
  CHECK(h2.param_specs[0].shape == (Shape{3, 4}));
  auto none = make_layer({{"type", "layer_norm"}, {"normalized_shape", 4}, {"elementwise_affine", false}});
  Harness h3(*none, {Shape{4}});
  CHECK(h3.param_specs.empty());
  // A row of one constant value normalizes to 0 (variance 0, + eps), as PyTorch's.
  Tensor x = tensor_of(Shape{1, 4}, {3.f, 3.f, 3.f, 3.f});
  h3.forward({&x});
  check_close(h3.out, {0.f, 0.f, 0.f, 0.f});
}

TEST_CASE("layer_norm: a pool (rows and columns split) gives the same results, no allocation per step") {
  // 150 columns: three blocks of the parameter gradients' column sweep; 600
  // rows, so that the rows' loops split too (parallel_for's grain: 219 rows
  // of 150; 300 rows would run as one part).
  auto l = make_layer({{"type", "layer_norm"}, {"normalized_shape", 150}});
  Workers pool(2);
  Harness a(*l, {Shape{150}}), b(*l, {Shape{150}});
  a.randomize_params(5, 0.5f, 1.5f);
  b.params = a.params;
  b.ctx.pool = &pool;
  Tensor x = random_tensor(Shape{600, 150}, 6, -2.f, 3.f);
  Tensor g = random_tensor(Shape{600, 150}, 7, -1.f, 1.f);
  a.forward({&x});
  b.forward({&x});
  check_close(b.out, std::vector<float>(a.out.f32(), a.out.f32() + a.out.numel()), 0.f);
  a.backward({&x}, g);
  b.backward({&x}, g);
  check_close(b.gin[0], std::vector<float>(a.gin[0].f32(), a.gin[0].f32() + a.gin[0].numel()), 0.f);
  CHECK(a.grads == b.grads);
  // The model's input needs no gradient: only the parameters'.
  std::vector<float> before = a.grads;
  a.backward({&x}, g, {false});
  for (size_t i = 0; i < before.size(); ++i) CHECK(a.grads[i] == doctest::Approx(2 * before[i]).epsilon(1e-6));
  auto s = check_steady(b, {&x}, allocations);
  CHECK_MESSAGE(s.ok, s.detail);
}

TEST_CASE("layer_norm: errors") {
  expect_error([] { make_layer({{"type", "layer_norm"}}); }, DP_ERR_MODEL, {"/layers/0/normalized_shape", "required"});
  expect_error([] { make_layer({{"type", "layer_norm"}, {"normalized_shape", 0}}); }, DP_ERR_MODEL,
               {"/layers/0/normalized_shape"});
  expect_error([] { make_layer({{"type", "layer_norm"}, {"normalized_shape", {4, -1}}}); }, DP_ERR_MODEL,
               {"/layers/0/normalized_shape", "-1"});
  expect_error([] { make_layer({{"type", "layer_norm"}, {"normalized_shape", nlohmann::json::array()}}); },
               DP_ERR_MODEL, {"/layers/0/normalized_shape", "got 0"});
  expect_error([] { make_layer({{"type", "layer_norm"}, {"normalized_shape", "4"}}); }, DP_ERR_MODEL,
               {"/layers/0/normalized_shape"});
  expect_error([] { make_layer({{"type", "layer_norm"}, {"normalized_shape", 4}, {"eps", -1}}); }, DP_ERR_MODEL,
               {"/layers/0/eps"});
  expect_error([] { make_layer({{"type", "layer_norm"}, {"normalized_shape", 4}, {"affine", true}}); }, DP_ERR_MODEL,
               {"unknown key 'affine'", "elementwise_affine"});
  auto l = make_layer({{"type", "layer_norm"}, {"normalized_shape", {3, 4}}});
  expect_error([&] { l->infer({Shape{4, 3}}); }, DP_ERR_SHAPE, {"[3, 4]", "[4, 3]", "trailing"});
  expect_error([&] { l->infer({Shape{4}}); }, DP_ERR_SHAPE, {"[3, 4]", "[4]"});
}
