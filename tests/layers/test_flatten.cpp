#include "common.h"

using namespace dp;
using namespace dp::test;

TEST_CASE("flatten: shapes as torch.flatten over the batched tensor") {
  CHECK(make_layer({{"type", "flatten"}})->infer({Shape{2, 3, 4}}) == Shape{24});
  CHECK(make_layer({{"type", "flatten"}, {"start_dim", 2}})->infer({Shape{2, 3, 4}}) == Shape{2, 12});
  CHECK(make_layer({{"type", "flatten"}, {"end_dim", -2}})->infer({Shape{2, 3, 4}}) == Shape{6, 4});
  CHECK(make_layer({{"type", "flatten"}, {"start_dim", 2}, {"end_dim", 2}})->infer({Shape{2, 3, 4}}) ==
        Shape{2, 3, 4});
  CHECK(make_layer({{"type", "flatten"}})->infer({Shape{5}}) == Shape{5});
  // Negative dims count from the end, as torch.flatten(x, -3) on [N, 2, 3, 4]
  CHECK(make_layer({{"type", "flatten"}, {"start_dim", -3}})->infer({Shape{2, 3, 4}}) == Shape{24});
  CHECK(make_layer({{"type", "flatten"}, {"start_dim", -2}})->infer({Shape{2, 3, 4}}) == Shape{2, 12});
}

TEST_CASE("flatten: values and gradients") {
  auto l = make_layer({{"type", "flatten"}});
  Harness h(*l, {Shape{2, 3}});
  Tensor x = random_tensor(Shape{2, 2, 3}, 3);
  h.forward({&x});
  CHECK(h.out.shape() == Shape{2, 6});
  check_close(h.out, std::vector<float>(x.f32(), x.f32() + 12), 0.f);
  check_layer(h, {&x});
}

TEST_CASE("flatten: errors") {
  expect_error([] { make_layer({{"type", "flatten"}, {"start_dim", 0}}); }, DP_ERR_MODEL, {"/layers/0/start_dim"});
  expect_error([] { make_layer({{"type", "flatten"}, {"end_dim", 0}}); }, DP_ERR_MODEL, {"/layers/0/end_dim"});
  auto l = make_layer({{"type", "flatten"}, {"start_dim", 3}});
  expect_error([&] { l->infer({Shape{4, 4}}); }, DP_ERR_SHAPE, {"[4, 4]", "start_dim 3"});
  auto m = make_layer({{"type", "flatten"}, {"start_dim", 2}, {"end_dim", 1}});
  expect_error([&] { m->infer({Shape{4, 4}}); }, DP_ERR_SHAPE, {"[4, 4]"});
  auto b = make_layer({{"type", "flatten"}, {"start_dim", -3}});  // the batch dim of [N, 4, 4]
  expect_error([&] { b->infer({Shape{4, 4}}); }, DP_ERR_SHAPE, {"[4, 4]", "start_dim -3"});
}
