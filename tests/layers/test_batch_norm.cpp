#include <cmath>

#include "common.h"

using namespace dp;
using namespace dp::test;

TEST_CASE("batch_norm: specs, training forward normalises and writes mean and unbiased variance") {
  auto l = make_layer({{"type", "batch_norm"}, {"num_features", 2}});
  Harness h(*l, {Shape{2, 3}});
  REQUIRE(h.param_specs.size() == 2);
  CHECK(h.param_specs[0].suffix == "weight");
  CHECK(h.param_specs[0].init.kind == Init::kOnes);
  CHECK(h.param_specs[1].init.kind == Init::kZeros);
  REQUIRE(h.buffer_specs.size() == 2);
  CHECK(h.buffer_specs[0].suffix == "running_mean");
  CHECK(h.buffer_specs[1].suffix == "running_var");
  CHECK(h.buffers == std::vector<float>{0, 0, 1, 1});
  CHECK(l->stats_size() == 4);
  Tensor x = random_tensor(Shape{4, 2, 3}, 5, -2.f, 3.f);
  h.forward({&x});
  for (int c = 0; c < 2; ++c) {
    double s = 0, q = 0, ys = 0, yq = 0;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) {
        double v = x.f32()[(i * 2 + c) * 3 + j], y = h.out.f32()[(i * 2 + c) * 3 + j];
        s += v, q += v * v, ys += y, yq += y * y;
      }
    double mean = s / 12, var = q / 12 - mean * mean;
    CHECK(h.stats[c] == doctest::Approx(mean).epsilon(1e-5));
    CHECK(h.stats[2 + c] == doctest::Approx(var * 12 / 11).epsilon(1e-4));
    CHECK(ys / 12 == doctest::Approx(0).epsilon(1e-5));
    CHECK(yq / 12 == doctest::Approx(var / (var + 1e-5)).epsilon(1e-4));
  }
}

TEST_CASE("batch_norm: gradients in training and eval modes, all input ranks and options") {
  std::vector<std::pair<nlohmann::json, Shape>> cases{
      {{{"type", "batch_norm"}}, Shape{3}},
      {{{"type", "batch_norm1d"}}, Shape{3, 4}},
      {{{"type", "batch_norm2d"}}, Shape{2, 3, 3}},
      {{{"type", "batch_norm2d"}, {"affine", false}}, Shape{2, 2, 3}},
      {{{"type", "batch_norm"}, {"track_running_stats", false}}, Shape{2, 5}},
  };
  for (auto& [j, s] : cases)
    for (bool training : {true, false}) {
      const std::string spec = j.dump();  // clang 14 cannot capture a structured binding in CAPTURE's lambda
      CAPTURE(spec);
      CAPTURE(training);
      auto l = make_layer(j);
      Harness h(*l, {s});
      h.randomize_params(3, 0.5f, 1.5f);
      // Running statistics away from their initial values.
      for (size_t i = 0; i < h.buffers.size(); ++i)
        h.buffers[i] = i < h.buffers.size() / 2 ? 0.3f * float(i) - 0.2f : 0.5f + 0.25f * float(i);
      h.ctx.training = training;
      Tensor x = random_tensor(Shape::batched(4, s), 8, -2.f, 2.f);
      check_layer(h, {&x}, GradOptions{1e-2, 2e-2});
    }
}

TEST_CASE("batch_norm: eval uses running statistics; without tracking, batch statistics") {
  auto l = make_layer({{"type", "batch_norm1d"}});
  Harness h(*l, {Shape{2}});
  h.params = {2.f, 3.f, 0.5f, -1.f};      // gamma, beta
  h.buffers = {1.f, -1.f, 4.f, 0.25f};    // running mean, var
  h.ctx.training = false;
  Tensor x = tensor_of(Shape{2, 2}, {3.f, 0.f, -1.f, 1.f});
  h.forward({&x});
  auto f = [](float v, float m, float var, float g, float b) { return float(g * (v - m) / std::sqrt(var + 1e-5) + b); };
  check_close(h.out, {f(3, 1, 4, 2, .5f), f(0, -1, .25f, 3, -1), f(-1, 1, 4, 2, .5f), f(1, -1, .25f, 3, -1)});
  auto u = make_layer({{"type", "batch_norm1d"}, {"track_running_stats", false}});
  Harness a(*u, {Shape{2}}), b(*u, {Shape{2}});
  CHECK(u->stats_size() == 0);
  CHECK(a.buffer_specs.empty());
  b.ctx.training = false;
  a.forward({&x});
  b.forward({&x});
  check_close(b.out, std::vector<float>(a.out.f32(), a.out.f32() + 4), 0.f);
  CHECK(std::fabs(a.out.f32()[0]) > 0.5f);
}

TEST_CASE("batch_norm: merge_stats folds replicas weighted by count") {
  auto l = make_layer({{"type", "batch_norm"}, {"momentum", 0.1}});
  l->infer({Shape{2}});  // one value per channel per sample
  std::vector<float> buf{0.f, 0.f, 1.f, 1.f};
  float s0[] = {1.f, 2.f, 4.f, 5.f}, s1[] = {3.f, 4.f, 100.f, 100.f}, s2[] = {50.f, 50.f, 50.f, 50.f};
  const float* stats[] = {s0, s1, s2};
  int64_t count[] = {3, 1, 0};
  l->merge_stats(buf.data(), stats, count, 3);
  // Means: replicas 0 and 1 weighted 3:1; variances: replica 1 (one value) skipped.
  CHECK(buf[0] == doctest::Approx(0.1 * (3 * 1 + 3) / 4.0));
  CHECK(buf[1] == doctest::Approx(0.1 * (3 * 2 + 4) / 4.0));
  CHECK(buf[2] == doctest::Approx(0.9 + 0.1 * 4));
  CHECK(buf[3] == doctest::Approx(0.9 + 0.1 * 5));
  auto m = make_layer({{"type", "batch_norm"}, {"momentum", 0.5}});
  m->infer({Shape{2, 3}});  // spatial 3: a single sample still has 3 values
  std::vector<float> b2{1.f, 1.f, 1.f, 1.f};
  m->merge_stats(b2.data(), stats, count, 2);
  CHECK(b2[0] == doctest::Approx(0.5 + 0.5 * 1.5));
  CHECK(b2[2] == doctest::Approx(0.5 + 0.5 * (3 * 4 + 100) / 4.0));
  // Merging one replica's training stats matches the running update of a whole batch.
  Harness h(*m, {Shape{2, 3}});
  Tensor x = random_tensor(Shape{5, 2, 3}, 2);
  h.forward({&x});
  std::vector<float> b3{0.f, 0.f, 1.f, 1.f};
  const float* one[] = {h.stats.data()};
  int64_t n5[] = {5};
  m->merge_stats(b3.data(), one, n5, 1);
  CHECK(b3[0] == doctest::Approx(0.5 * h.stats[0]));
  CHECK(b3[3] == doctest::Approx(0.5 + 0.5 * h.stats[3]));
}

TEST_CASE("batch_norm: shape errors") {
  expect_error([] { make_layer({{"type", "batch_norm2d"}})->infer({Shape{3}}); }, DP_ERR_SHAPE,
               {"[C, H, W]", "got [3]"});
  expect_error([] { make_layer({{"type", "batch_norm1d"}})->infer({Shape{3, 4, 4}}); }, DP_ERR_SHAPE,
               {"[C] or [C, L]", "got [3, 4, 4]"});
  expect_error([] { make_layer({{"type", "batch_norm"}})->infer({Shape{3, 4, 4, 4}}); }, DP_ERR_SHAPE,
               {"got [3, 4, 4, 4]"});
  expect_error([] { make_layer({{"type", "batch_norm"}, {"num_features", 4}})->infer({Shape{3, 4}}); },
               DP_ERR_SHAPE, {"4", "num_features", "[3, 4]"});
  expect_error([] { make_layer({{"type", "batch_norm"}, {"momentum", 2}}); }, DP_ERR_MODEL, {"/layers/0/momentum"});
}

TEST_CASE("batch_norm: a pool (channels split) gives the same results") {
  auto l = make_layer({{"type", "batch_norm2d"}});
  Workers pool(2);
  Harness a(*l, {Shape{5, 3, 3}}), b(*l, {Shape{5, 3, 3}});
  b.ctx.pool = &pool;
  Tensor x = random_tensor(Shape{3, 5, 3, 3}, 4);
  a.forward({&x});
  b.forward({&x});
  check_close(b.out, std::vector<float>(a.out.f32(), a.out.f32() + a.out.numel()), 0.f);
  CHECK(a.stats == b.stats);
  a.backward({&x}, x);
  b.backward({&x}, x);
  check_close(b.gin[0], std::vector<float>(a.gin[0].f32(), a.gin[0].f32() + a.gin[0].numel()), 0.f);
  CHECK(a.grads == b.grads);
}

// Inputs with one value per channel ([N, C], after a linear layer) take rows
// a block of 64 channels at a time: 150 channels are three blocks, split
// over a pool too. The arithmetic is the per-plane path's, so the forward is
// checked bitwise against it written out plainly, and the gradients by
// finite differences.
TEST_CASE("batch_norm: one value per channel, channels in blocks, bitwise the per-channel arithmetic") {
  const int64_t C = 150, n = 9;
  auto l = make_layer({{"type", "batch_norm"}});
  Workers pool(2);
  Harness a(*l, {Shape{C}}), b(*l, {Shape{C}});
  a.randomize_params(5, 0.5f, 1.5f);
  b.params = a.params;
  b.ctx.pool = &pool;
  Tensor x = random_tensor(Shape{n, C}, 6, -2.f, 3.f);
  a.forward({&x});
  b.forward({&x});
  for (int64_t c = 0; c < C; ++c) {
    const float* xs = x.f32();
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; ++i) s += xs[i * C + c];
    const float m = static_cast<float>(s / n);
    for (int64_t i = 0; i < n; ++i) {
      const float d = xs[i * C + c] - m;
      q += double(d) * double(d);
    }
    const float is = static_cast<float>(1.0 / std::sqrt(q / n + 1e-5));
    const float ga = a.params[static_cast<size_t>(c)] * is, be = a.params[static_cast<size_t>(C + c)] - ga * m;
    CAPTURE(c);
    CHECK(a.stats[static_cast<size_t>(c)] == m);
    CHECK(a.stats[static_cast<size_t>(C + c)] == static_cast<float>(q / (n - 1)));
    for (int64_t i = 0; i < n; ++i) CHECK(a.out.f32()[i * C + c] == ga * xs[i * C + c] + be);
  }
  check_close(b.out, std::vector<float>(a.out.f32(), a.out.f32() + a.out.numel()), 0.f);
  CHECK(a.stats == b.stats);
  Tensor g = random_tensor(Shape{n, C}, 7);
  a.backward({&x}, g);
  b.backward({&x}, g);
  check_close(b.gin[0], std::vector<float>(a.gin[0].f32(), a.gin[0].f32() + a.gin[0].numel()), 0.f);
  CHECK(a.grads == b.grads);
  for (bool training : {true, false}) {
    CAPTURE(training);
    Harness h(*l, {Shape{C}});
    h.randomize_params(3, 0.5f, 1.5f);
    h.ctx.pool = &pool;
    h.ctx.training = training;
    Tensor x4 = random_tensor(Shape{4, C}, 8, -2.f, 2.f);
    check_layer(h, {&x4}, GradOptions{1e-2, 2e-2});
  }
}
