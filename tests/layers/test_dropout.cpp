#include <cmath>

#include "common.h"

using namespace dp;
using namespace dp::test;

namespace {
std::vector<float> run(Layer& l, const Tensor& x, int64_t offset, int64_t step, uint64_t seed = 42) {
  Harness h(l, {x.shape().sample()});
  h.ctx.step = step;
  h.ctx.seed = seed;
  h.ctx.sample_offset = offset;
  h.forward({&x});
  return std::vector<float>(h.out.f32(), h.out.f32() + h.out.numel());
}
}  // namespace

TEST_CASE("dropout: training drops about p and scales by 1/(1-p); eval is the identity") {
  auto l = make_layer({{"type", "dropout"}, {"p", 0.3}}, 4);
  Tensor x(DP_F32, Shape{50, 200});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 1.f + float(i % 7);
  auto y = run(*l, x, 0, 3);
  int64_t dropped = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (y[i] == 0.f)
      ++dropped;
    else
      REQUIRE(y[i] == doctest::Approx(x.f32()[i] / 0.7f));
  }
  CHECK(double(dropped) / double(x.numel()) == doctest::Approx(0.3).epsilon(0.05));
  Harness h(*l, {Shape{200}});
  h.ctx.training = false;
  h.forward({&x});
  check_close(h.out, std::vector<float>(x.f32(), x.f32() + x.numel()), 0.f);
  h.backward({&x}, x);
  check_close(h.gin[0], std::vector<float>(x.f32(), x.f32() + x.numel()), 0.f);
  auto z = make_layer({{"type", "dropout"}, {"p", 0}});
  auto yz = run(*z, x, 0, 1);
  CHECK(yz == std::vector<float>(x.f32(), x.f32() + x.numel()));
}

TEST_CASE("dropout: the mask depends on (seed, index, step, global sample, element) only") {
  auto l = make_layer({{"type", "dropout"}}, 2);
  Tensor x = random_tensor(Shape{8, 3, 5}, 1, 0.5f, 1.5f);
  auto all = run(*l, x, 0, 7);
  Tensor a = random_tensor(Shape{4, 3, 5}, 0), b = random_tensor(Shape{4, 3, 5}, 0);
  std::copy(x.f32(), x.f32() + 60, a.f32());
  std::copy(x.f32() + 60, x.f32() + 120, b.f32());
  auto ya = run(*l, a, 0, 7), yb = run(*l, b, 4, 7);
  ya.insert(ya.end(), yb.begin(), yb.end());
  CHECK(ya == all);
  // A split of 3 + 5 too.
  Tensor c = random_tensor(Shape{3, 3, 5}, 0), d = random_tensor(Shape{5, 3, 5}, 0);
  std::copy(x.f32(), x.f32() + 45, c.f32());
  std::copy(x.f32() + 45, x.f32() + 120, d.f32());
  auto yc = run(*l, c, 0, 7), yd = run(*l, d, 3, 7);
  yc.insert(yc.end(), yd.begin(), yd.end());
  CHECK(yc == all);
  CHECK(run(*l, x, 0, 8) != all);       // another step
  CHECK(run(*l, x, 0, 7, 43) != all);   // another seed
  auto other = make_layer({{"type", "dropout"}}, 3);
  CHECK(run(*other, x, 0, 7) != all);   // another layer index
  CHECK(run(*l, x, 0, 7) == all);       // and the same keys again
}

TEST_CASE("dropout: gradients with a fixed mask") {
  auto l = make_layer({{"type", "dropout"}, {"p", 0.4}}, 1);
  Harness h(*l, {Shape{3, 4}});
  h.ctx.step = 5;
  h.ctx.sample_offset = 10;
  Tensor x = random_tensor(Shape{4, 3, 4}, 2);
  check_layer(h, {&x});
}

TEST_CASE("dropout: p must be in [0, 1)") {
  expect_error([] { make_layer({{"type", "dropout"}, {"p", 1}}); }, DP_ERR_MODEL, {"/layers/0/p", "[0, 1)"});
  expect_error([] { make_layer({{"type", "dropout"}, {"p", -0.1}}); }, DP_ERR_MODEL, {"/layers/0/p"});
}
