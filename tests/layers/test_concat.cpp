#include "common.h"

using namespace dp;
using namespace dp::test;

TEST_CASE("concat: channels (dim 1) and the last dim") {
  auto l = make_layer({{"type", "concat"}});
  CHECK(l->arity() == std::pair<int, int>{2, -1});
  Harness h(*l, {Shape{1, 2}, Shape{2, 2}});
  CHECK(h.out_sample == Shape{3, 2});
  Tensor a = tensor_of(Shape{2, 1, 2}, {1, 2, 3, 4}), b = tensor_of(Shape{2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12});
  h.forward({&a, &b});
  check_close(h.out, {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12});
  auto m = make_layer({{"type", "concat"}, {"dim", -1}});
  Harness hm(*m, {Shape{2, 1}, Shape{2, 2}});
  CHECK(hm.out_sample == Shape{2, 3});
  Tensor c = tensor_of(Shape{1, 2, 1}, {1, 2}), d = tensor_of(Shape{1, 2, 2}, {3, 4, 5, 6});
  hm.forward({&c, &d});
  check_close(hm.out, {1, 3, 4, 2, 5, 6});
}

TEST_CASE("concat: gradients") {
  for (int dim : {1, 2, 3, -1}) {
    CAPTURE(dim);
    auto l = make_layer({{"type", "concat"}, {"dim", dim}});
    Shape a{2, 3, 2}, b{2, 3, 2}, c{2, 3, 2};
    int k = (dim < 0 ? dim + 4 : dim) - 1;
    b[k] = 1, c[k] = 3;
    Harness h(*l, {a, b, c});
    Tensor x = random_tensor(Shape::batched(2, a), 1), y = random_tensor(Shape::batched(2, b), 2),
           z = random_tensor(Shape::batched(2, c), 3);
    check_layer(h, {&x, &y, &z});
  }
}

TEST_CASE("concat: errors") {
  expect_error([] { make_layer({{"type", "concat"}, {"dim", 0}}); }, DP_ERR_MODEL, {"/layers/0/dim"});
  auto l = make_layer({{"type", "concat"}});
  expect_error([&] { l->infer({Shape{3, 8, 8}, Shape{3, 4, 8}}); }, DP_ERR_SHAPE, {"[3, 8, 8] and [3, 4, 8]"});
  expect_error([&] { l->infer({Shape{3, 8, 8}, Shape{3, 8}}); }, DP_ERR_SHAPE, {"[3, 8, 8] and [3, 8]"});
  auto m = make_layer({{"type", "concat"}, {"dim", 3}});
  expect_error([&] { m->infer({Shape{3, 8}, Shape{3, 8}}); }, DP_ERR_SHAPE, {"dim 3"});
}
