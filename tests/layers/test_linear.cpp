#include <cmath>
#include <cstring>

#include "common.h"

using namespace dp;
using namespace dp::test;

TEST_CASE("linear: parameters, forward against a naive loop, over the last dim") {
  auto l = make_layer({{"type", "linear"}, {"out_features", 5}});
  Harness h(*l, {Shape{3, 4}});
  CHECK(h.out_sample == Shape{3, 5});
  REQUIRE(h.param_specs.size() == 2);
  CHECK(h.param_specs[0].shape == Shape{5, 4});
  CHECK(h.param_specs[1].shape == Shape{5});
  CHECK(h.param_specs[0].init.kind == Init::kUniform);
  CHECK(h.param_specs[0].init.bound == doctest::Approx(0.5));
  CHECK(h.param_specs[1].init.bound == doctest::Approx(0.5));
  Tensor x = random_tensor(Shape{2, 3, 4}, 3);
  h.randomize_params(11);
  Tensor& y = h.forward({&x});
  REQUIRE(y.shape() == (Shape{2, 3, 5}));
  for (int r = 0; r < 6; ++r)
    for (int o = 0; o < 5; ++o) {
      double s = h.params[20 + o];
      for (int i = 0; i < 4; ++i) s += double(x.f32()[r * 4 + i]) * h.params[o * 4 + i];
      CHECK(y.f32()[r * 5 + o] == doctest::Approx(s).epsilon(1e-5));
    }
}

TEST_CASE("linear: gradients") {
  for (bool bias : {true, false}) {
    CAPTURE(bias);
    auto l = make_layer({{"type", "linear"}, {"in_features", 6}, {"out_features", 3}, {"bias", bias}});
    Harness h(*l, {Shape{6}});
    CHECK(h.params.size() == size_t(18 + (bias ? 3 : 0)));
    h.randomize_params(5);
    Tensor x = random_tensor(Shape{4, 6}, 8);
    check_layer(h, {&x});
  }
  auto l = make_layer({{"type", "linear"}, {"out_features", 2}});
  Harness h(*l, {Shape{2, 3}});
  Tensor x = random_tensor(Shape{3, 2, 3}, 9);
  check_layer(h, {&x});
}

TEST_CASE("linear: a pool gives the same result") {
  auto l = make_layer({{"type", "linear"}, {"out_features", 70}});
  Harness a(*l, {Shape{33}}), b(*l, {Shape{33}});
  Workers pool(2);
  b.ctx.pool = &pool;
  Tensor x = random_tensor(Shape{80, 33}, 4);
  a.forward({&x});
  b.forward({&x});
  for (int64_t i = 0; i < a.out.numel(); ++i) REQUIRE(a.out.f32()[i] == doctest::Approx(b.out.f32()[i]));
  a.backward({&x}, a.out);
  b.backward({&x}, b.out);
  for (size_t i = 0; i < a.grads.size(); ++i) REQUIRE(a.grads[i] == doctest::Approx(b.grads[i]).epsilon(1e-4));
  for (int64_t i = 0; i < a.gin[0].numel(); ++i) REQUIRE(a.gin[0].f32()[i] == doctest::Approx(b.gin[0].f32()[i]));
}

TEST_CASE("linear: grads accumulate, gin may be null") {
  auto l = make_layer({{"type", "linear"}, {"out_features", 2}});
  Harness h(*l, {Shape{3}});
  Tensor x = random_tensor(Shape{2, 3}, 1);
  Tensor& y = h.forward({&x});
  h.backward({&x}, y, {false});
  std::vector<float> g1 = h.grads;
  h.backward({&x}, y, {false});
  CHECK(h.gin[0].data() == nullptr);
  for (size_t i = 0; i < g1.size(); ++i) CHECK(h.grads[i] == doctest::Approx(2 * g1[i]));
}

// What the replica relies on when it skips zeroing a linear layer's
// gradients (Layer::assigns_grads): backward writes every one of them, the
// same bits as zeroing and then adding, with and without a listener for the
// weight gradient's blocks (and so with one product or several).
TEST_CASE("linear: with assign_grads, backward writes over the gradients, the bits of zeroing and adding") {
  CHECK(make_layer({{"type", "linear"}, {"out_features", 2}})->assigns_grads());
  for (bool bias : {true, false})
    for (bool blocks : {false, true}) {
      CAPTURE(bias);
      CAPTURE(blocks);
      auto l = make_layer({{"type", "linear"}, {"out_features", 200}, {"bias", bias}});
      Harness add(*l, {Shape{784}}), assign(*l, {Shape{784}});
      add.randomize_params(3);
      assign.params = add.params;
      Tensor x = random_tensor(Shape{24, 784}, 5);
      Tensor g = random_tensor(Shape{24, 200}, 6);
      add.forward({&x});
      assign.forward({&x});
      static int64_t reported;  // the listener has no user pointer in the harness
      reported = 0;
      auto listener = +[](void*, int64_t) { ++reported; };
      if (blocks) add.grads_final = assign.grads_final = listener;
      std::fill(assign.grads.begin(), assign.grads.end(), std::nanf(""));  // what a step left: overwritten
      assign.assign_grads = true;
      add.backward({&x}, g, {false});
      assign.backward({&x}, g, {false});
      if (blocks) CHECK(reported == 2 * 2);  // 200 rows in blocks of 84: two splits, each reported by both
      REQUIRE(add.grads.size() == assign.grads.size());
      for (size_t i = 0; i < add.grads.size(); ++i) REQUIRE(std::memcmp(&add.grads[i], &assign.grads[i], 4) == 0);
    }
}

TEST_CASE("linear: errors") {
  auto l = make_layer({{"type", "linear"}, {"in_features", 10}, {"out_features", 2}});
  expect_error([&] { l->infer({Shape{784}}); }, DP_ERR_SHAPE, {"[784]", "10"});
  auto m = make_layer({{"type", "linear"}, {"out_features", 2}});
  expect_error([&] { m->infer({Shape{}}); }, DP_ERR_SHAPE, {"[]", "in_features"});
  expect_error([] { make_layer({{"type", "linear"}, {"in_features", 3}}); }, DP_ERR_MODEL, {"/layers/0/out_features"});
  expect_error([] { make_layer({{"type", "linear"}, {"out_features", 0}}); }, DP_ERR_MODEL,
               {"/layers/0/out_features", "positive"});
}
