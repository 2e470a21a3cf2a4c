#include <cmath>

#include "common.h"

using namespace dp;
using namespace dp::test;

TEST_CASE("avg_pool2d: forward against a naive loop (count_include_pad both ways), gradients") {
  struct Cfg {
    int64_t k, s, p;
    bool ceil, include;
    int64_t H, W;
  };
  const Cfg cfgs[] = {
      {2, 2, 0, false, true, 4, 4}, {3, 2, 1, false, true, 5, 6}, {3, 2, 1, false, false, 5, 6},
      {3, 2, 1, true, true, 6, 6},  {3, 2, 1, true, false, 6, 6}, {2, 3, 1, true, true, 7, 5},
      {2, 2, 0, true, false, 5, 5},
  };
  for (const Cfg& c : cfgs) {
    nlohmann::json j{{"type", "avg_pool2d"}, {"kernel_size", c.k}, {"stride", c.s}, {"padding", c.p},
                     {"ceil_mode", c.ceil}, {"count_include_pad", c.include}};
    CAPTURE(j.dump());
    auto l = make_layer(j);
    Harness h(*l, {Shape{2, c.H, c.W}});
    auto len = [&](int64_t in) {
      double v = double(in + 2 * c.p - c.k) / double(c.s);
      int64_t o = int64_t(c.ceil ? std::ceil(v) : std::floor(v)) + 1;
      if (c.ceil && (o - 1) * c.s >= in + c.p) --o;
      return o;
    };
    int64_t Ho = len(c.H), Wo = len(c.W);
    REQUIRE(h.out_sample == Shape{2, Ho, Wo});
    Tensor x = random_tensor(Shape{2, 2, c.H, c.W}, 4);
    Tensor& y = h.forward({&x});
    std::vector<float> want;
    for (int64_t pl = 0; pl < 4; ++pl)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double s = 0;
          int inside = 0, padded = 0;
          for (int64_t i = 0; i < c.k; ++i)
            for (int64_t jj = 0; jj < c.k; ++jj) {
              int64_t ih = oh * c.s - c.p + i, iw = ow * c.s - c.p + jj;
              if (ih < c.H + c.p && iw < c.W + c.p) ++padded;  // inside the padded input
              if (ih >= 0 && ih < c.H && iw >= 0 && iw < c.W) {
                ++inside;
                s += x.f32()[(pl * c.H + ih) * c.W + iw];
              }
            }
          want.push_back(float(s / (c.include ? padded : inside)));
        }
    check_close(y, want, 1e-5f);
    check_layer(h, {&x});
  }
}

TEST_CASE("avg_pool2d: a hand-computed corner, errors") {
  auto l = make_layer({{"type", "avg_pool2d"}, {"kernel_size", 2}, {"stride", 1}, {"padding", 1},
                       {"count_include_pad", false}});
  Harness h(*l, {Shape{1, 2, 2}});
  Tensor x = tensor_of(Shape{1, 1, 2, 2}, {1.f, 2.f, 3.f, 4.f});
  h.forward({&x});
  REQUIRE(h.out.shape() == (Shape{1, 1, 3, 3}));
  check_close(h.out, {1.f, 1.5f, 2.f, 2.f, 2.5f, 3.f, 3.f, 3.5f, 4.f});
  auto inc = make_layer({{"type", "avg_pool2d"}, {"kernel_size", 2}, {"stride", 1}, {"padding", 1}});
  Harness hi(*inc, {Shape{1, 2, 2}});
  hi.forward({&x});
  check_close(hi.out, {0.25f, 0.75f, 0.5f, 1.f, 2.5f, 1.5f, 0.75f, 1.75f, 1.f});
  expect_error([] { make_layer({{"type", "avg_pool2d"}, {"kernel_size", 2}, {"padding", 2}}); }, DP_ERR_MODEL,
               {"/layers/0/padding"});
  auto p = make_layer({{"type", "avg_pool2d"}, {"kernel_size", 2}});
  expect_error([&] { p->infer({Shape{3, 8}}); }, DP_ERR_SHAPE, {"[C, H, W]", "[3, 8]"});
}
