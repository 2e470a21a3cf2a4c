#include <cmath>

#include "common.h"

using namespace dp;
using namespace dp::test;

namespace {
double naive_ce(const float* x, int64_t C, int64_t t, double ls) {
  double mx = x[0];
  for (int64_t c = 1; c < C; ++c) mx = std::max(mx, double(x[c]));
  double se = 0;
  for (int64_t c = 0; c < C; ++c) se += std::exp(x[c] - mx);
  double lse = mx + std::log(se), smooth = 0;
  for (int64_t c = 0; c < C; ++c) smooth += lse - x[c];
  return (1 - ls) * (lse - x[t]) + ls * smooth / double(C);
}
}  // namespace

TEST_CASE("cross_entropy: target shape, values, label smoothing, split shares") {
  for (double ls : {0.0, 0.2, 1.0}) {  // 1: PyTorch's largest, the uniform target
    CAPTURE(ls);
    auto l = make_loss({{"type", "cross_entropy"}, {"label_smoothing", ls}});
    dp_dtype dt = DP_F32;
    CHECK(l->target_shape(Shape{5}, &dt) == Shape{});
    CHECK(dt == DP_I64);
    Tensor x = random_tensor(Shape{6, 5}, 3, -4.f, 4.f);
    Tensor t = labels_of({0, 4, 2, 2, 1, 3});
    RunCtx ctx;
    ctx.batch_total = 6;
    Tensor g;
    double loss = l->forward_backward(ctx, x, t, &g);
    double want = 0;
    for (int r = 0; r < 6; ++r) want += naive_ce(x.f32() + r * 5, 5, t.i64()[r], ls);
    CHECK(loss == doctest::Approx(want / 6).epsilon(1e-6));
    for (int r = 0; r < 6; ++r) {  // each gout row sums to 0
      double s = 0;
      for (int c = 0; c < 5; ++c) s += g.f32()[r * 5 + c];
      CHECK(s == doctest::Approx(0).epsilon(1e-6));
    }
    CHECK_RESULT(loss_gradcheck(*l, ctx, x, t, 1e-3, 1e-3));
    // Two replicas: rows [0, 2) and [2, 6) return shares adding to the batch loss.
    Tensor xa = x.rows(0, 2), xb = x.rows(2, 4), ta = t.rows(0, 2), tb = t.rows(2, 4);
    Tensor ga, gb;
    RunCtx cb = ctx;
    cb.sample_offset = 2;
    double sa = l->forward_backward(ctx, xa, ta, &ga), sb = l->forward_backward(cb, xb, tb, &gb);
    CHECK(sa + sb == doctest::Approx(loss).epsilon(1e-6));
    check_close(gb, std::vector<float>(g.f32() + 10, g.f32() + 30), 1e-6f);
  }
}

TEST_CASE("cross_entropy: stable for huge logits") {
  auto l = make_loss({{"type", "cross_entropy"}});
  Tensor x = tensor_of(Shape{1, 3}, {1000.f, 0.f, -1000.f});
  RunCtx ctx;
  ctx.batch_total = 1;
  Tensor g;
  CHECK(l->forward_backward(ctx, x, labels_of({1}), &g) == doctest::Approx(1000.0));
  check_close(g, {1.f, -1.f, 0.f});
  CHECK(l->forward_backward(ctx, x, labels_of({0}), &g) == doctest::Approx(0.0));
}

TEST_CASE("cross_entropy: errors") {
  auto l = make_loss({{"type", "cross_entropy"}});
  dp_dtype dt;
  expect_error([&] { l->target_shape(Shape{10, 4}, &dt); }, DP_ERR_SHAPE, {"[C]", "[10, 4]"});
  Tensor x = random_tensor(Shape{5, 10}, 1);
  RunCtx ctx;
  ctx.batch_total = 20;
  ctx.sample_offset = 2;
  Tensor g;
  expect_error([&] { l->forward_backward(ctx, x, labels_of({0, 1, 12, 3, 4}), &g); }, DP_ERR_INVALID_ARGUMENT,
               {"target 12 at row 4 is outside [0, 10)"});
  expect_error([&] { l->forward_backward(ctx, x, labels_of({0, 1, 2, -1, 4}), &g); }, DP_ERR_INVALID_ARGUMENT,
               {"target -1 at row 5"});
  expect_error([&] { l->forward_backward(ctx, x, labels_of({0, 1}), &g); }, DP_ERR_SHAPE, {"[5]", "[2]"});
  expect_error([] { make_loss({{"type", "cross_entropy"}, {"reduction", "sum"}}); }, DP_ERR_MODEL,
               {"/loss/reduction", "\"sum\""});
  expect_error([] { make_loss({{"type", "cross_entropy"}, {"label_smoothing", 1.5}}); }, DP_ERR_MODEL,
               {"/loss/label_smoothing: expected a number in [0.0, 1.0], got 1.5"});
  expect_error([] { make_loss({{"type", "cross_entropy"}, {"label_smoothing", -0.1}}); }, DP_ERR_MODEL,
               {"/loss/label_smoothing: expected a number in [0.0, 1.0], got -0.1"});
}

TEST_CASE("mse: values, gradient, split shares") {
  auto l = make_loss({{"type", "mse"}});
  dp_dtype dt = DP_I64;
  CHECK(l->target_shape(Shape{2, 3}, &dt) == Shape{2, 3});
  CHECK(dt == DP_F32);
  Tensor x = tensor_of(Shape{2, 2}, {1, 2, 3, 4}), t = tensor_of(Shape{2, 2}, {0, 2, 5, 4});
  RunCtx ctx;
  ctx.batch_total = 4;  // this replica holds half the batch
  Tensor g;
  CHECK(l->forward_backward(ctx, x, t, &g) == doctest::Approx((1.0 + 4.0) / 8));
  check_close(g, {2.f / 8, 0.f, -4.f / 8, 0.f});
  Tensor y = random_tensor(Shape{4, 3}, 2), u = random_tensor(Shape{4, 3}, 3);
  ctx.batch_total = 4;
  CHECK_RESULT(loss_gradcheck(*l, ctx, y, u, 1e-2, 1e-3));
  double all = l->forward_backward(ctx, y, u, &g);
  Tensor g1;
  double s = l->forward_backward(ctx, y.rows(0, 1), u.rows(0, 1), &g1) +
             l->forward_backward(ctx, y.rows(1, 3), u.rows(1, 3), &g1);
  CHECK(s == doctest::Approx(all).epsilon(1e-6));
  expect_error([&] { l->forward_backward(ctx, y, labels_of({1, 2, 3, 4}), &g); }, DP_ERR_SHAPE, {"float32", "int64"});
  expect_error([] { make_loss({{"type", "mse"}, {"reduction", "none"}}); }, DP_ERR_MODEL, {"/loss/reduction"});
}
