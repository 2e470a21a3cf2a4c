#include <cmath>
#include <limits>

#include "common.h"

using namespace dp;
using namespace dp::test;

namespace {
struct PoolCfg {
  int64_t k, s, p, d;
  bool ceil;
  int64_t H, W;
};

int64_t out_len(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  double v = double(in + 2 * p - d * (k - 1) - 1) / double(s);
  int64_t o = int64_t(ceil ? std::ceil(v) : std::floor(v)) + 1;
  if (ceil && (o - 1) * s >= in + p) --o;
  return o;
}

// Values with distinct gaps of >= 0.05, so a +-eps step never changes an argmax.
Tensor distinct(const Shape& s, uint64_t seed) {
  Tensor t(DP_F32, s);
  int64_t n = t.numel();
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[int64_t(uniform01(seed, i) * (i + 1))]);
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = 0.05f * float(perm[i] - n / 2);
  return t;
}
}  // namespace

TEST_CASE("max_pool2d: forward against a naive loop, gradients") {
  const PoolCfg cfgs[] = {
      {2, 2, 0, 1, false, 4, 6}, {3, 2, 1, 1, true, 5, 6}, {3, 2, 1, 1, false, 5, 6},
      {2, 1, 1, 2, false, 5, 5}, {3, 3, 1, 1, true, 7, 8}, {2, 2, 0, 1, true, 5, 5},
      // every window inside the plane (the layer's direct path), with overlap and dilation
      {3, 1, 0, 1, false, 5, 6}, {3, 2, 0, 2, false, 9, 8}, {2, 3, 0, 1, true, 8, 7},
  };
  for (const PoolCfg& c : cfgs) {
    nlohmann::json j{{"type", "max_pool2d"}, {"kernel_size", c.k}, {"stride", c.s}, {"padding", c.p},
                     {"dilation", c.d}, {"ceil_mode", c.ceil}};
    CAPTURE(j.dump());
    auto l = make_layer(j);
    Harness h(*l, {Shape{2, c.H, c.W}});
    int64_t Ho = out_len(c.H, c.k, c.s, c.p, c.d, c.ceil), Wo = out_len(c.W, c.k, c.s, c.p, c.d, c.ceil);
    REQUIRE(h.out_sample == Shape{2, Ho, Wo});
    Tensor x = distinct(Shape{3, 2, c.H, c.W}, 9);
    Tensor& y = h.forward({&x});
    std::vector<float> want;
    for (int64_t pl = 0; pl < 6; ++pl)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t i = 0; i < c.k; ++i)
            for (int64_t jj = 0; jj < c.k; ++jj) {
              int64_t ih = oh * c.s - c.p + i * c.d, iw = ow * c.s - c.p + jj * c.d;
              if (ih >= 0 && ih < c.H && iw >= 0 && iw < c.W) m = std::max(m, x.f32()[(pl * c.H + ih) * c.W + iw]);
            }
          want.push_back(m);
        }
    check_close(y, want, 0.f);
    check_layer(h, {&x});
  }
}

TEST_CASE("max_pool2d: stride defaults to kernel_size, ceil_mode sizes, gradient goes to the max") {
  auto l = make_layer({{"type", "max_pool2d"}, {"kernel_size", 2}});
  CHECK(l->infer({Shape{1, 5, 5}}) == Shape{1, 2, 2});
  auto c = make_layer({{"type", "max_pool2d"}, {"kernel_size", 2}, {"ceil_mode", true}});
  CHECK(c->infer({Shape{1, 5, 5}}) == Shape{1, 3, 3});
  Harness h(*l, {Shape{1, 2, 2}});
  Tensor x = tensor_of(Shape{1, 1, 2, 2}, {1.f, 4.f, 3.f, 2.f});
  h.forward({&x});
  CHECK(h.out.f32()[0] == 4.f);
  Tensor g = tensor_of(Shape{1, 1, 1, 1}, {5.f});
  h.backward({&x}, g);
  check_close(h.gin[0], {0.f, 5.f, 0.f, 0.f}, 0.f);
}

TEST_CASE("max_pool2d: errors") {
  expect_error([] { make_layer({{"type", "max_pool2d"}, {"kernel_size", 3}, {"padding", 2}}); }, DP_ERR_MODEL,
               {"/layers/0/padding", "half"});
  expect_error([] { make_layer({{"type", "max_pool2d"}}); }, DP_ERR_MODEL, {"/layers/0/kernel_size"});
  auto l = make_layer({{"type", "max_pool2d"}, {"kernel_size", 3}});
  expect_error([&] { l->infer({Shape{16, 16}}); }, DP_ERR_SHAPE, {"[C, H, W]", "got [16, 16]"});
  expect_error([&] { l->infer({Shape{1, 2, 2}}); }, DP_ERR_SHAPE, {"[1, 2, 2]"});
  // the index of a maximum within its plane is an int32
  expect_error([&] { l->infer({Shape{1, 65536, 32768}}); }, DP_ERR_SHAPE, {"[1, 65536, 32768]", "2^31 - 1"});
  CHECK_NOTHROW(l->infer({Shape{1, 65536, 32767}}));
}

// The usual pooling (kernel 2, stride 2) on data full of ties and NaNs (values
// from {-1, 0, 1, NaN}): as PyTorch's CPU kernel ("val > maxval ||
// isnan(val)" over the taps row by row), the first maximum among ties and the
// last NaN outright, in the output and where the gradient goes; odd sizes
// leave a row and a column out (or, with ceil_mode, make partial windows).
TEST_CASE("max_pool2d: kernel 2 stride 2, ties and NaNs, as PyTorch's loop") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool ceil : {false, true})
    for (const std::pair<int64_t, int64_t>& hw : {std::pair<int64_t, int64_t>{6, 8}, {7, 9}, {2, 2}, {28, 28}}) {
      const int64_t H = hw.first, W = hw.second;  // not a structured binding: clang 14 cannot CAPTURE one
      CAPTURE(ceil);
      CAPTURE(H);
      CAPTURE(W);
      auto l = make_layer({{"type", "max_pool2d"}, {"kernel_size", 2}, {"ceil_mode", ceil}});
      Harness h(*l, {Shape{3, H, W}});
      const int64_t Ho = out_len(H, 2, 2, 0, 1, ceil), Wo = out_len(W, 2, 2, 0, 1, ceil);
      REQUIRE(h.out_sample == Shape{3, Ho, Wo});
      Tensor x(DP_F32, Shape{2, 3, H, W});
      const float pick[4] = {-1.f, 0.f, 1.f, nan};
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = pick[int64_t(uniform01(11, i) * 4) & 3];
      h.forward({&x});
      Tensor g(DP_F32, h.out.shape());
      for (int64_t i = 0; i < g.numel(); ++i) g.f32()[i] = float(i + 1);
      h.backward({&x}, g);
      std::vector<float> want_gx(static_cast<size_t>(x.numel()), 0.f);
      for (int64_t pl = 0; pl < 6; ++pl)
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < Wo; ++ow) {
            float best = 0.f;
            int64_t at = -1;
            for (int64_t i = 0; i < 2; ++i)
              for (int64_t j = 0; j < 2; ++j) {
                const int64_t ih = 2 * oh + i, iw = 2 * ow + j;
                if (ih >= H || iw >= W) continue;
                const float v = x.f32()[(pl * H + ih) * W + iw];
                if (at < 0 || v > best || std::isnan(v)) best = v, at = (pl * H + ih) * W + iw;
              }
            const int64_t o = (pl * Ho + oh) * Wo + ow;
            const float y = h.out.f32()[o];
            CHECK((std::isnan(best) ? std::isnan(y) : y == best));
            want_gx[static_cast<size_t>(at)] += g.f32()[o];
          }
      check_close(h.gin[0], want_gx, 0.f);
    }
}

// Where the gradient of a window with NaNs goes, as PyTorch 2.15 answers
// (F.max_pool2d(x, ..., return_indices=True)): the last NaN of the window.
TEST_CASE("max_pool2d: the indices of windows with NaNs are PyTorch's") {
  const float n = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    nlohmann::json layer;
    Shape shape;
    std::vector<float> x;
    std::vector<int64_t> want;  // the input element each output's gradient goes to
  };
  const std::vector<Case> cases = {
      {{{"type", "max_pool2d"}, {"kernel_size", 2}}, Shape{1, 2, 2}, {n, 1, n, 2}, {2}},
      {{{"type", "max_pool2d"}, {"kernel_size", 2}}, Shape{1, 2, 2}, {1, n, n, 2}, {2}},
      {{{"type", "max_pool2d"}, {"kernel_size", 2}}, Shape{1, 2, 2}, {1, 3, 3, 2}, {1}},
      {{{"type", "max_pool2d"}, {"kernel_size", 3}, {"stride", 1}, {"padding", 1}}, Shape{1, 3, 3},
       {n, 1, 5, n, 2, 6, n, n, 7}, {3, 3, 5, 7, 7, 7, 7, 7, 7}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.layer.dump());
    auto l = make_layer(c.layer);
    Harness h(*l, {c.shape});
    Tensor x(DP_F32, Shape{1, c.shape[0], c.shape[1], c.shape[2]});
    std::copy(c.x.begin(), c.x.end(), x.f32());
    h.forward({&x});
    REQUIRE(h.out.numel() == static_cast<int64_t>(c.want.size()));
    Tensor g(DP_F32, h.out.shape());
    for (int64_t i = 0; i < g.numel(); ++i) g.f32()[i] = float(1 << i);  // each output's own bit
    h.backward({&x}, g);
    std::vector<float> want_gx(c.x.size(), 0.f);
    for (size_t o = 0; o < c.want.size(); ++o) want_gx[static_cast<size_t>(c.want[o])] += float(1 << o);
    check_close(h.gin[0], want_gx, 0.f);
  }
}
