#include <cmath>

#include "common.h"

using namespace dp;
using namespace dp::test;

namespace {
struct ConvCfg {
  int64_t cin, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  bool bias;
  int64_t H, W;
};

nlohmann::json json_of(const ConvCfg& c) {
  return {{"type", "conv2d"}, {"in_channels", c.cin}, {"out_channels", c.cout}, {"kernel_size", {c.kh, c.kw}},
          {"stride", {c.sh, c.sw}}, {"padding", {c.ph, c.pw}}, {"dilation", {c.dh, c.dw}}, {"groups", c.groups},
          {"bias", c.bias}};
}

// Direct convolution, as the definition says.
std::vector<float> naive(const ConvCfg& c, const Tensor& x, const std::vector<float>& p, int64_t Ho, int64_t Wo) {
  int64_t n = x.shape()[0], cig = c.cin / c.groups, cog = c.cout / c.groups;
  std::vector<float> y(n * c.cout * Ho * Wo);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t co = 0; co < c.cout; ++co)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double s = c.bias ? p[c.cout * cig * c.kh * c.kw + co] : 0;
          int64_t g = co / cog;
          for (int64_t ci = 0; ci < cig; ++ci)
            for (int64_t i = 0; i < c.kh; ++i)
              for (int64_t j = 0; j < c.kw; ++j) {
                int64_t ih = oh * c.sh - c.ph + i * c.dh, iw = ow * c.sw - c.pw + j * c.dw;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                s += double(x.f32()[((b * c.cin + g * cig + ci) * c.H + ih) * c.W + iw]) *
                     p[((co * cig + ci) * c.kh + i) * c.kw + j];
              }
          y[((b * c.cout + co) * Ho + oh) * Wo + ow] = float(s);
        }
  return y;
}

const ConvCfg kConfigs[] = {
    {2, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, true, 5, 5},    // same padding
    {2, 2, 3, 3, 2, 2, 1, 1, 2, 2, 1, true, 7, 6},    // stride, padding, dilation
    {4, 6, 3, 2, 2, 1, 0, 1, 1, 1, 2, false, 5, 4},   // groups, rectangular, no bias
    {4, 4, 1, 1, 1, 1, 0, 0, 1, 1, 4, true, 3, 3},    // pointwise, depthwise groups
    {3, 2, 1, 1, 1, 1, 0, 0, 1, 1, 1, false, 2, 3},   // pointwise, no bias
    {2, 2, 2, 2, 3, 3, 1, 0, 1, 1, 2, true, 5, 5},    // stride > kernel
};
}  // namespace

TEST_CASE("conv2d: forward against a direct convolution, gradients") {
  for (const ConvCfg& c : kConfigs) {
    CAPTURE(json_of(c).dump());
    auto l = make_layer(json_of(c));
    Harness h(*l, {Shape{c.cin, c.H, c.W}});
    int64_t Ho = (c.H + 2 * c.ph - c.dh * (c.kh - 1) - 1) / c.sh + 1;
    int64_t Wo = (c.W + 2 * c.pw - c.dw * (c.kw - 1) - 1) / c.sw + 1;
    CHECK(h.out_sample == Shape{c.cout, Ho, Wo});
    REQUIRE(h.param_specs[0].shape == Shape{c.cout, c.cin / c.groups, c.kh, c.kw});
    CHECK(h.param_specs[0].init.bound ==
          doctest::Approx(1.0 / std::sqrt(double(c.cin / c.groups * c.kh * c.kw))));
    CHECK(h.param_specs.size() == (c.bias ? 2u : 1u));
    h.randomize_params(3);
    Tensor x = random_tensor(Shape{2, c.cin, c.H, c.W}, 17);
    Tensor& y = h.forward({&x});
    check_close(y, naive(c, x, h.params, Ho, Wo), 1e-5f);
    check_layer(h, {&x});
  }
}

TEST_CASE("conv2d: splitting over a pool (per sample and per gemm) gives the same results") {
  Workers pool(2);
  for (int64_t n : {1, 5}) {  // 1: gemms split; 5: samples split, per-part weight gradients
    for (const ConvCfg& c : {kConfigs[1], kConfigs[2], kConfigs[3]}) {
      auto l = make_layer(json_of(c));
      Harness a(*l, {Shape{c.cin, c.H, c.W}}), b(*l, {Shape{c.cin, c.H, c.W}});
      b.ctx.pool = &pool;
      a.randomize_params(3), b.randomize_params(3);
      Tensor x = random_tensor(Shape{n, c.cin, c.H, c.W}, 21);
      a.forward({&x});
      b.forward({&x});
      check_close(b.out, std::vector<float>(a.out.f32(), a.out.f32() + a.out.numel()), 1e-5f);
      a.backward({&x}, a.out);
      b.backward({&x}, b.out);
      check_close(b.gin[0], std::vector<float>(a.gin[0].f32(), a.gin[0].f32() + a.gin[0].numel()), 1e-4f);
      for (size_t i = 0; i < a.grads.size(); ++i) CHECK(b.grads[i] == doctest::Approx(a.grads[i]).epsilon(1e-4));
      auto s = check_steady(b, {&x});
      CHECK_MESSAGE(s.ok, s.detail);
    }
  }
}

TEST_CASE("conv2d: errors") {
  auto l = make_layer({{"type", "conv2d"}, {"in_channels", 3}, {"out_channels", 4}, {"kernel_size", 3}});
  expect_error([&] { l->infer({Shape{784}}); }, DP_ERR_SHAPE, {"[C, H, W]", "got [784]"});
  expect_error([&] { l->infer({Shape{1, 28, 28}}); }, DP_ERR_SHAPE, {"[1, 28, 28]", "in_channels"});
  expect_error([&] { l->infer({Shape{3, 2, 8}}); }, DP_ERR_SHAPE, {"[3, 2, 8]", "empty"});
  expect_error([] { make_layer({{"type", "conv2d"}, {"out_channels", 3}, {"kernel_size", 3}, {"groups", 2}}); },
               DP_ERR_MODEL, {"/layers/0/groups", "out_channels"});
  expect_error([] {
    make_layer({{"type", "conv2d"}, {"in_channels", 3}, {"out_channels", 4}, {"kernel_size", 3}, {"groups", 2}});
  }, DP_ERR_MODEL, {"/layers/0/groups", "in_channels"});
  auto g = make_layer({{"type", "conv2d"}, {"out_channels", 4}, {"kernel_size", 1}, {"groups", 2}});
  expect_error([&] { g->infer({Shape{3, 4, 4}}); }, DP_ERR_SHAPE, {"groups", "[3, 4, 4]"});
  expect_error([] { make_layer({{"type", "conv2d"}, {"out_channels", 4}, {"kernel_size", {3, 0}}}); }, DP_ERR_MODEL,
               {"/layers/0/kernel_size"});
  expect_error([] { make_layer({{"type", "conv2d"}, {"out_channels", 4}, {"kernel_size", 2}, {"padding", -1}}); },
               DP_ERR_MODEL, {"/layers/0/padding"});
}

// 2 * padding or dilation * (kernel_size - 1) past int64 gave a wrong output
// shape (and a forward over memory never written): each size is at most
// 2^31 - 1, named by its key.
TEST_CASE("conv2d and the pools: sizes past 2^31 - 1 are refused, naming the key") {
  const int64_t huge = INT64_MAX;
  const nlohmann::json bad_values[] = {huge, {1, huge}, int64_t{1} << 31};
  for (const char* type : {"conv2d", "max_pool2d", "avg_pool2d"})
    for (const char* key : {"kernel_size", "stride", "padding", "dilation"}) {
      if (std::string(type) == "avg_pool2d" && std::string(key) == "dilation") continue;
      for (const auto& v : bad_values) {
        CAPTURE(type);
        CAPTURE(key);
        nlohmann::json j{{"type", type}, {"kernel_size", 3}};
        if (std::string(type) == "conv2d") j["out_channels"] = 1;
        j[key] = v;
        expect_error([&] { make_layer(j); }, DP_ERR_MODEL, {std::string("/layers/0/") + key, "2147483647"});
      }
    }
  // The largest accepted dilation with a large kernel still gives PyTorch's shape (here: too small).
  auto l = make_layer({{"type", "conv2d"}, {"out_channels", 1}, {"kernel_size", 3}, {"dilation", INT32_MAX}});
  expect_error([&] { l->infer({Shape{1, 8, 8}}); }, DP_ERR_SHAPE, {"empty"});
  auto p = make_layer({{"type", "conv2d"}, {"out_channels", 1}, {"kernel_size", 3}, {"padding", INT32_MAX}});
  CHECK(p->infer({Shape{1, 8, 8}}) == Shape{1, 4294967300, 4294967300});
}
