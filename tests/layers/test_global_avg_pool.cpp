#include "common.h"

using namespace dp;
using namespace dp::test;

TEST_CASE("global_avg_pool: values, gradients, errors") {
  auto l = make_layer({{"type", "global_avg_pool"}});
  Harness h(*l, {Shape{2, 2, 3}});
  CHECK(h.out_sample == Shape{2});
  Tensor x = tensor_of(Shape{1, 2, 2, 3}, {1, 2, 3, 4, 5, 6, -1, -1, -1, -1, -1, 5});
  h.forward({&x});
  check_close(h.out, {3.5f, 0.f});
  Tensor r = random_tensor(Shape{3, 2, 2, 3}, 1);
  check_layer(h, {&r});
  expect_error([&] { l->infer({Shape{10}}); }, DP_ERR_SHAPE, {"[C, H, W]", "got [10]"});
}
