#include "common.h"

using namespace dp;
using namespace dp::test;

TEST_CASE("add: sums, gradients to every input, null gins skipped") {
  auto l = make_layer({{"type", "add"}});
  CHECK(l->arity() == std::pair<int, int>{2, -1});
  Harness h(*l, {Shape{2, 2}, Shape{2, 2}, Shape{2, 2}});
  CHECK(h.out_sample == Shape{2, 2});
  Tensor a = tensor_of(Shape{1, 2, 2}, {1, 2, 3, 4}), b = tensor_of(Shape{1, 2, 2}, {10, 20, 30, 40}),
         c = tensor_of(Shape{1, 2, 2}, {100, 200, 300, 400});
  h.forward({&a, &b, &c});
  check_close(h.out, {111, 222, 333, 444});
  Tensor g = tensor_of(Shape{1, 2, 2}, {1, -1, 2, -2});
  h.backward({&a, &b, &c}, g, {true, false, true});
  check_close(h.gin[0], {1, -1, 2, -2});
  CHECK(h.gin[1].data() == nullptr);
  check_close(h.gin[2], {1, -1, 2, -2});
  Tensor x = random_tensor(Shape{3, 2, 2}, 1), y = random_tensor(Shape{3, 2, 2}, 2), z = random_tensor(Shape{3, 2, 2}, 3);
  check_layer(h, {&x, &y, &z});
}

TEST_CASE("add: shape mismatch") {
  auto l = make_layer({{"type", "add"}});
  expect_error([&] { l->infer({Shape{64, 8, 8}, Shape{32, 8, 8}}); }, DP_ERR_SHAPE,
               {"inputs have shapes [64, 8, 8] and [32, 8, 8]; add needs equal shapes"});
}
