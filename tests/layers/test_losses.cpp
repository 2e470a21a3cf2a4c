#include <cmath>
#include <fstream>

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

// Against PyTorch 2.15's F.cross_entropy in float64 on the same logits
// (exact in float32): class weights, ignore_index (-100, and a class), label
// smoothing; the mean divides by the weights of the rows not ignored.
TEST_CASE("cross_entropy: class weights and ignore_index, as PyTorch") {
  struct Case {
    double ls;
    bool weighted;
    int64_t ignore;
    std::vector<int64_t> t;
    double loss;
    std::vector<float> grad;
  };
  const std::vector<Case> cases = {
      {0.0, true, -100, {0, 2, -100, 1}, 2.486172198925635,
       {-0.014127905904f, 0.00453253315f, 0.009595372754f, 0.08156799956f, 0.60271052463f, -0.68427852419f, 0, 0, 0,
        0.100552094822f, -0.137543143273f, 0.036991048452f}},
      {0.0, false, -100, {0, 2, -100, 1}, 1.4612642291391127,
       {-0.098895341326f, 0.03172773205f, 0.067167609276f, 0.038065066462f, 0.281264911494f, -0.319329977955f, 0, 0, 0,
        0.140772932751f, -0.192560400583f, 0.051787467832f}},
      {0.0, true, 1, {0, 2, 1, 1}, 2.993727634821693,
       {-0.018542876499f, 0.005948949759f, 0.012593926739f, 0.107057999423f, 0.791057563576f, -0.898115562999f, 0, 0, 0,
        0, 0, 0}},
      {0.1, true, -100, {0, 2, -100, 1}, 2.4277290209946014,
       {0.0091413823f, -0.000684454897f, -0.008456927404f, 0.075630404663f, 0.562629455379f, -0.638259860043f, 0, 0, 0,
        0.102986877027f, -0.117648043608f, 0.01466116658f}},
      {0.1, false, -100, {0, 2, -100, 1}, 1.4640420069168907,
       {-0.076673119104f, 0.020616620939f, 0.056056498165f, 0.02695395535f, 0.270153800383f, -0.297107755733f, 0, 0, 0,
        0.129661821639f, -0.170338178361f, 0.040676356721f}},
      {0.1, true, 1, {0, 2, 1, 1}, 2.8749960287364837,
       {0.011998064269f, -0.000898347052f, -0.011099717217f, 0.09926490612f, 0.738451160186f, -0.837716066306f, 0, 0, 0,
        0, 0, 0}},
  };
  Tensor x = tensor_of(Shape{4, 3}, {1.5f, -0.5f, 0.25f, 0.f, 2.f, -1.f, -2.f, 0.5f, 1.f, 0.75f, 0.75f, -0.25f});
  for (const Case& c : cases) {
    nlohmann::json j{{"type", "cross_entropy"}, {"label_smoothing", c.ls}, {"ignore_index", c.ignore}};
    if (c.weighted) j["weight"] = {0.2, 1.0, 3.0};
    CAPTURE(j.dump());
    auto l = make_loss(j);
    dp_dtype dt;
    l->target_shape(Shape{3}, &dt);
    const Tensor t = labels_of(c.t);
    RunCtx ctx;
    ctx.batch_total = 4;
    ctx.loss_total = l->weight_of(t);  // what the group sums over the batch
    Tensor g;
    const double loss = l->forward_backward(ctx, x, t, &g);
    CHECK(loss == doctest::Approx(c.loss).epsilon(1e-9));
    check_close(g, c.grad, 1e-6f);
    CHECK_RESULT(loss_gradcheck(*l, ctx, x, t, 1e-3, 1e-3));
    // Two replicas (rows [0, 1) and [1, 4)), each dividing by the whole batch's weight.
    Tensor ga, gb;
    RunCtx cb = ctx;
    cb.sample_offset = 1;
    const double sa = l->forward_backward(ctx, x.rows(0, 1), t.rows(0, 1), &ga);
    const double sb = l->forward_backward(cb, x.rows(1, 3), t.rows(1, 3), &gb);
    CHECK(sa + sb == doctest::Approx(loss).epsilon(1e-12));
    check_close(gb, std::vector<float>(g.f32() + 3, g.f32() + 12), 0.f);
  }
  // Every row ignored: 0 / 0, NaN as in PyTorch (a training step then skips).
  auto l = make_loss({{"type", "cross_entropy"}});
  const Tensor t = labels_of({-100, -100, -100, -100});
  RunCtx ctx;
  ctx.batch_total = 4;
  ctx.loss_total = l->weight_of(t);
  CHECK(ctx.loss_total == 0);
  Tensor g;
  CHECK(std::isnan(l->forward_backward(ctx, x, t, &g)));
  // With reduction "sum" nothing divides: 0, and a zero gradient, as PyTorch's.
  auto s = make_loss({{"type", "cross_entropy"}, {"reduction", "sum"}});
  CHECK(s->forward_backward(ctx, x, t, &g) == 0.0);
  check_close(g, std::vector<float>(static_cast<size_t>(g.numel()), 0.f), 0.f);
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
  expect_error([] { make_loss({{"type", "cross_entropy"}, {"reduction", "max"}}); }, DP_ERR_MODEL,
               {"/loss/reduction", "expected \"mean\" or \"sum\"", "\"max\""});
  expect_error([] { make_loss({{"type", "cross_entropy"}, {"label_smoothing", 1.5}}); }, DP_ERR_MODEL,
               {"/loss/label_smoothing: expected a number in [0.0, 1.0], got 1.5"});
  expect_error([] { make_loss({{"type", "cross_entropy"}, {"label_smoothing", -0.1}}); }, DP_ERR_MODEL,
               {"/loss/label_smoothing: expected a number in [0.0, 1.0], got -0.1"});
  // class weights: one per class, none negative; ignore_index an integer
  auto w = make_loss({{"type", "cross_entropy"}, {"weight", {1, 2, 3}}});
  expect_error([&] { w->target_shape(Shape{4}, &dt); }, DP_ERR_SHAPE, {"3 values for a model of 4 classes"});
  CHECK_NOTHROW(w->target_shape(Shape{3}, &dt));
  expect_error([] { make_loss({{"type", "cross_entropy"}, {"weight", {1, -2}}}); }, DP_ERR_MODEL,
               {"/loss/weight: expected a list of numbers >= 0.0, got [1,-2]"});
  expect_error([] { make_loss({{"type", "cross_entropy"}, {"weight", nlohmann::json::array()}}); }, DP_ERR_MODEL,
               {"/loss/weight", "a list of numbers"});
  expect_error([] { make_loss({{"type", "cross_entropy"}, {"ignore_index", 1.5}}); }, DP_ERR_MODEL, {"/loss/ignore_index"});
  expect_error([&] { l->forward_backward(ctx, x, labels_of({0, 1, -7, 3, 4}), &g); }, DP_ERR_INVALID_ARGUMENT,
               {"target -7 at row 4 is outside [0, 10) and is not ignore_index -100"});
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
  expect_error([] { make_loss({{"type", "mse"}, {"reduction", "none"}}); }, DP_ERR_MODEL,
               {"/loss/reduction", "no scalar loss to train on"});
}

namespace {
const nlohmann::json& loss_reference() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(DP_REFERENCE_DIR) + "/losses.json");
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
  }();
  return j;
}

// The loss's inputs as dp sees them: [N, ...] float32 outputs, and targets
// of the dtype target_shape asks for.
struct LossCase {
  std::unique_ptr<Loss> loss;
  Tensor x, t;
  std::string name;
};
LossCase loss_case(const nlohmann::json& c) {
  LossCase k;
  k.name = c["name"].get<std::string>();
  k.loss = make_loss(c["loss"]);
  std::vector<int64_t> dims = c["shape"].get<std::vector<int64_t>>();
  Shape shape, sample;
  for (int64_t d : dims) shape.push(d);
  for (size_t i = 1; i < dims.size(); ++i) sample.push(dims[i]);
  k.x = tensor_of(shape, c["input"].get<std::vector<float>>());
  dp_dtype dt = DP_F32;
  const Shape ts = k.loss->target_shape(sample, &dt);
  if (dt == DP_I64) {
    CHECK(ts == Shape{});
    k.t = labels_of(c["target"].get<std::vector<int64_t>>());
  } else {
    CHECK(ts == sample);
    k.t = tensor_of(shape, c["target"].get<std::vector<float>>());
  }
  return k;
}

// As the group sets it for a batch of n rows.
RunCtx batch_ctx(const Loss& l, const Tensor& t, int64_t n) {
  RunCtx ctx;
  ctx.batch_total = n;
  ctx.loss_total = l.weight_of(t);
  return ctx;
}
}  // namespace

// Against PyTorch 2.15's losses in float64 on the same float32 inputs
// (tests/reference/make_loss_reference.py): l1, smooth_l1 (beta 1, 0.5 and
// 0), huber, bce (with outputs of exactly 0 and 1), bce_with_logits (weight,
// pos_weight, logits of ±40), nll (weight, ignore_index); and every loss
// with reduction "sum" (cross entropy's with weights, an ignored row and
// label smoothing too). Each also split
// over two replicas: their shares add up to the batch's loss, and each
// replica's gradient rows are the batch's.
TEST_CASE("losses as PyTorch: values, gradients, split shares, finite differences") {
  const auto& cases = loss_reference()["losses"];
  REQUIRE(cases.size() >= 26);
  for (const auto& c : cases) {
    LossCase k = loss_case(c);
    CAPTURE(k.name);
    const int64_t n = k.x.shape()[0];
    const RunCtx ctx = batch_ctx(*k.loss, k.t, n);
    Tensor g;
    const double v = k.loss->forward_backward(ctx, k.x, k.t, &g);
    CHECK(v == doctest::Approx(c["value"].get<double>()).epsilon(1e-9));
    check_close(g, c["grad"].get<std::vector<float>>(), 1e-6f);

    Tensor xa = k.x.rows(0, 2), xb = k.x.rows(2, n - 2), ta = k.t.rows(0, 2), tb = k.t.rows(2, n - 2);
    RunCtx cb = ctx;
    cb.sample_offset = 2;
    Tensor ga, gb;
    const double sa = k.loss->forward_backward(ctx, xa, ta, &ga), sb = k.loss->forward_backward(cb, xb, tb, &gb);
    CHECK(sa + sb == doctest::Approx(v).epsilon(1e-12));
    const int64_t row = k.x.shape().inner();
    check_close(ga, std::vector<float>(g.f32(), g.f32() + 2 * row), 0);
    check_close(gb, std::vector<float>(g.f32() + 2 * row, g.f32() + n * row), 0);

    // Finite differences (bce's outputs of 0 and 1 have no neighbourhood in
    // [0, 1]: checked below on interior values).
    if (c["loss"]["type"] != "bce") CHECK_RESULT(loss_gradcheck(*k.loss, ctx, k.x, k.t, 1e-3, 1e-3));
  }
}

TEST_CASE("bce: finite differences inside (0, 1); accumulation's loss_scale scales the gradient") {
  for (const char* json : {R"({"type": "bce"})", R"({"type": "bce", "weight": [2, 0.5, 1, 3]})"}) {
    CAPTURE(json);
    auto l = make_loss(nlohmann::json::parse(json));
    Tensor x = random_tensor(Shape{5, 4}, 11, 0.1f, 0.9f), t = random_tensor(Shape{5, 4}, 12, 0.f, 1.f);
    RunCtx ctx;
    ctx.batch_total = 5;
    CHECK_RESULT(loss_gradcheck(*l, ctx, x, t, 1e-3, 1e-3));
    Tensor g, g3;
    const double v = l->forward_backward(ctx, x, t, &g);
    ctx.loss_scale = 0.25;
    CHECK(l->forward_backward(ctx, x, t, &g3) == v);  // the value is the batch's; only the gradient scales
    for (int64_t i = 0; i < g.numel(); ++i) CHECK(g3.f32()[i] == doctest::Approx(0.25 * g.f32()[i]).epsilon(1e-6));
  }
}

TEST_CASE("the new losses: errors") {
  dp_dtype dt;
  Tensor x = random_tensor(Shape{3, 4}, 1), t = random_tensor(Shape{3, 4}, 2);
  RunCtx ctx;
  ctx.batch_total = 3;
  ctx.sample_offset = 10;
  Tensor g;
  for (const std::string type : {"l1", "smooth_l1", "huber", "bce", "bce_with_logits"}) {
    CAPTURE(type);
    auto l = make_loss({{"type", type}});
    CHECK(l->target_shape(Shape{2, 4}, &dt) == Shape{2, 4});
    CHECK(dt == DP_F32);
    expect_error([&] { l->forward_backward(ctx, x, labels_of({1, 2, 3}), &g); }, DP_ERR_SHAPE,
                 {type, "float32 targets of shape [3, 4]", "int64 [3]"});
    expect_error([&] { l->forward_backward(ctx, x, t.rows(0, 2), &g); }, DP_ERR_SHAPE, {"[3, 4]", "[2, 4]"});
    expect_error([&] { make_loss({{"type", type}, {"reduction", "none"}}); }, DP_ERR_MODEL, {"/loss/reduction", "\"none\""});
  }
  expect_error([] { make_loss({{"type", "huber"}, {"delta", 0}}); }, DP_ERR_MODEL, {"/loss/delta: expected a number > 0"});
  expect_error([] { make_loss({{"type", "huber"}, {"delta", -1}}); }, DP_ERR_MODEL, {"/loss/delta"});
  expect_error([] { make_loss({{"type", "smooth_l1"}, {"beta", -0.5}}); }, DP_ERR_MODEL, {"/loss/beta", "-0.5"});
  // Target values, checked by the group before any replica runs (so every process refuses alike):
  // bce's in [0, 1] (NaN too, as PyTorch), any for bce_with_logits; classes in range or ignored.
  Tensor probs = random_tensor(Shape{3, 4}, 4, 0.f, 1.f);
  CHECK_NOTHROW(make_loss({{"type", "bce"}})->check_target_values(Shape{4}, probs));
  for (float bad : {-0.25f, 1.5f, NAN}) {
    CAPTURE(bad);
    probs.f32()[6] = bad;
    expect_error([&] { make_loss({{"type", "bce"}})->check_target_values(Shape{4}, probs); }, DP_ERR_INVALID_ARGUMENT,
                 {"bce expects targets in [0, 1], got", "at row 1"});
    CHECK_NOTHROW(make_loss({{"type", "bce_with_logits"}})->check_target_values(Shape{4}, probs));
  }
  for (const std::string type : {"cross_entropy", "nll"}) {
    CAPTURE(type);
    auto c = make_loss({{"type", type}, {"ignore_index", 9}});
    CHECK_NOTHROW(c->check_target_values(Shape{4}, labels_of({0, 3, 9})));
    expect_error([&] { c->check_target_values(Shape{4}, labels_of({0, 4, 1})); }, DP_ERR_INVALID_ARGUMENT,
                 {"target 4 at row 1 is outside [0, 4) and is not ignore_index 9"});
  }
  CHECK_NOTHROW(make_loss({{"type", "mse"}})->check_target_values(Shape{4}, t));  // any float
  // bce takes probabilities: an output outside [0, 1] is named with its row (a NaN is the step's NaN check's).
  auto bce = make_loss({{"type", "bce"}});
  Tensor p = random_tensor(Shape{3, 4}, 3, 0.f, 1.f);
  p.f32()[9] = 1.5f;
  expect_error([&] { bce->forward_backward(ctx, p, t, &g); }, DP_ERR_INVALID_ARGUMENT,
               {"bce expects the model's outputs in [0, 1]", "sigmoid", "bce_with_logits", "got 1.5 at row 12"});
  p.f32()[9] = NAN;
  CHECK(std::isnan(bce->forward_backward(ctx, p, t, &g)));
  // weight and pos_weight: one per element of the last dim, none negative; pos_weight is bce_with_logits's.
  auto w = make_loss({{"type", "bce_with_logits"}, {"pos_weight", {1, 2, 3}}});
  expect_error([&] { w->target_shape(Shape{4}, &dt); }, DP_ERR_SHAPE,
               {"bce_with_logits's pos_weight has 3 values", "[4]", "last dim (4)"});
  CHECK_NOTHROW(w->target_shape(Shape{2, 3}, &dt));
  expect_error([] { make_loss({{"type", "bce"}, {"weight", {1, -2}}}); }, DP_ERR_MODEL, {"/loss/weight", ">= 0"});
  expect_error([] { make_loss({{"type", "bce"}, {"pos_weight", {1}}}); }, DP_ERR_MODEL, {"pos_weight"});
  // nll: class targets, as cross_entropy
  auto nll = make_loss({{"type", "nll"}, {"weight", {1, 2, 3, 4}}});
  expect_error([&] { nll->target_shape(Shape{2, 4}, &dt); }, DP_ERR_SHAPE, {"nll expects model output of shape [C]"});
  expect_error([&] { nll->target_shape(Shape{5}, &dt); }, DP_ERR_SHAPE, {"nll's weight has 4 values for a model of 5 classes"});
  CHECK(nll->target_shape(Shape{4}, &dt) == Shape{});
  CHECK(dt == DP_I64);
  expect_error([&] { nll->forward_backward(ctx, x, labels_of({0, 4, 1}), &g); }, DP_ERR_INVALID_ARGUMENT,
               {"target 4 at row 11 is outside [0, 4) and is not ignore_index -100"});
  expect_error([&] { nll->forward_backward(ctx, x, t, &g); }, DP_ERR_SHAPE, {"nll expects int64 targets of shape [3]"});
}
