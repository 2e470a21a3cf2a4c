// The C ABI end to end: models, tensors, groups, optimizers, and every class
// of bad input (a clear status and message, nothing lost, objects usable).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "api_util.h"

namespace {

const char* kMlp = R"({"seed": 1, "input": {"shape": [4]},
  "layers": [{"type": "linear", "out_features": 8}, {"type": "relu"},
             {"type": "linear", "out_features": 3, "name": "head"}],
  "loss": {"type": "cross_entropy"}})";

struct Fixture {
  dp_context* ctx = nullptr;
  Fixture() { DP_REQUIRE_OK(dp_context_create(&ctx)); }
  ~Fixture() { dp_context_destroy(ctx); }
  dp_model* model(const char* json) {
    dp_model* m = nullptr;
    DP_REQUIRE_OK(dp_model_from_json(ctx, json, &m));
    return m;
  }
  // Expects `json` to be rejected with `status` and a message containing each of `parts`.
  void rejects(const char* json, dp_status status, std::vector<std::string> parts) {
    dp_model* m = reinterpret_cast<dp_model*>(0x1);
    dp_status s = dp_model_from_json(ctx, json, &m);
    std::string msg = dp_last_error();
    INFO(json);
    INFO(msg);
    CHECK(s == status);
    CHECK(m == reinterpret_cast<dp_model*>(0x1));  // out-parameter untouched
    for (const auto& p : parts) CHECK(msg.find(p) != std::string::npos);
  }
};

}  // namespace

TEST_CASE("version, status names, NULL-safe destroy") {
  CHECK(std::string(dp_version()) == "0.1.0");
  CHECK(std::string(dp_status_name(DP_ERR_SHAPE)) == "DP_ERR_SHAPE");
  dp_context_destroy(nullptr);
  dp_model_destroy(nullptr);
  dp_tensor_destroy(nullptr);
  dp_group_destroy(nullptr);
  dp_optimizer_destroy(nullptr);
  CHECK(dp_context_create(nullptr) == DP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(dp_last_error()).find("NULL") != std::string::npos);
}

TEST_CASE("parameters: count, names as nn.Sequential, shapes, round trip") {
  Fixture f;
  dp_model* m = f.model(kMlp);
  int64_t n = 0;
  DP_REQUIRE_OK(dp_model_num_parameters(m, &n));
  CHECK(n == 4 * 8 + 8 + 8 * 3 + 3);
  int tensors = 0;
  DP_REQUIRE_OK(dp_model_num_parameter_tensors(m, &tensors));
  REQUIRE(tensors == 4);
  const char* expect[] = {"0.weight", "0.bias", "head.weight", "head.bias"};
  for (int i = 0; i < 4; ++i) {
    const char* name = nullptr;
    int nd = 0;
    int64_t shape[DP_MAX_DIMS];
    DP_REQUIRE_OK(dp_model_parameter_info(m, i, &name, &nd, shape));
    CHECK(std::string(name) == expect[i]);
  }
  std::vector<float> p = params_of(m);
  // PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  for (int i = 0; i < 32; ++i) CHECK(std::fabs(p[i]) <= 0.5f);
  for (int i = 40; i < 64; ++i) CHECK(std::fabs(p[i]) <= 1 / std::sqrt(8.0f));
  std::vector<float> q(p.size(), 0.25f);
  DP_REQUIRE_OK(dp_model_set_parameters(m, q.data(), n));
  CHECK(params_of(m) == q);
  CHECK(dp_model_copy_parameters(m, q.data(), n - 1) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_model_set_parameters(m, q.data(), n + 1) == DP_ERR_INVALID_ARGUMENT);
  // The same seed gives the same initial parameters; another seed others.
  dp_model* m2 = f.model(kMlp);
  dp_model* m3 = f.model(R"({"seed": 2, "input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 8}, {"type": "relu"}, {"type": "linear", "out_features": 3}]})");
  CHECK(params_of(m2) == p);
  CHECK(params_of(m3) != p);
  dp_model_destroy(m);
  dp_model_destroy(m2);
  dp_model_destroy(m3);
}

TEST_CASE("buffers: names as nn.Sequential's state_dict, shapes, round trip; a group sees what was set") {
  Fixture f;
  dp_model* m = f.model(R"({"input": {"shape": [3]}, "layers": [{"type": "linear", "out_features": 2},
    {"type": "batch_norm", "affine": false}, {"type": "linear", "out_features": 2}, {"type": "batch_norm"}]})");
  int tensors = 0;
  DP_REQUIRE_OK(dp_model_num_buffer_tensors(m, &tensors));
  REQUIRE(tensors == 4);
  const char* expect[] = {"1.running_mean", "1.running_var", "3.running_mean", "3.running_var"};
  for (int i = 0; i < 4; ++i) {
    const char* name = nullptr;
    int nd = 0;
    int64_t shape[DP_MAX_DIMS];
    DP_REQUIRE_OK(dp_model_buffer_info(m, i, &name, &nd, shape));
    CHECK(std::string(name) == expect[i]);
    CHECK(nd == 1);
    CHECK(shape[0] == 2);
  }
  const char* name = nullptr;
  int nd = 0;
  int64_t shape[DP_MAX_DIMS];
  CHECK(dp_model_buffer_info(m, 4, &name, &nd, shape) == DP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(dp_last_error()).find("buffer index 4 is outside [0, 4)") != std::string::npos);
  // Set and read back; wrong counts refused.
  const std::vector<float> stats{1, 1, 4, 4, 0, 0, 1, 1};
  DP_REQUIRE_OK(dp_model_set_buffers(m, stats.data(), 8));
  std::vector<float> got(8);
  DP_REQUIRE_OK(dp_model_copy_buffers(m, got.data(), 8));
  CHECK(got == stats);
  CHECK(dp_model_set_buffers(m, stats.data(), 7) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_model_set_buffers(m, nullptr, 8) == DP_ERR_INVALID_ARGUMENT);
  // A group evaluates with statistics set this way.
  dp_model* probe = f.model(R"({"input": {"shape": [2]}, "layers": [{"type": "batch_norm", "affine": false}]})");
  const std::vector<float> probe_stats{1, 1, 4, 4};
  DP_REQUIRE_OK(dp_model_set_buffers(probe, probe_stats.data(), 4));
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_group_create(probe, "cpu:0,cpu:1", &g));
  DP_REQUIRE_OK(dp_group_set_training(g, 0));
  dp_tensor* x = make_f32(f.ctx, {3, 5, -1, 1}, {2, 2});
  dp_tensor* y = nullptr;
  DP_REQUIRE_OK(dp_group_forward(g, x, &y));
  const std::vector<float> out = tensor_data(y);
  const std::vector<float> want{1, 2, -1, 0};  // (x - 1) / sqrt(4 + 1e-5)
  for (size_t i = 0; i < 4; ++i) CHECK(out[i] == doctest::Approx(want[i]).epsilon(1e-5));
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
  dp_group_destroy(g);
  dp_model_destroy(probe);
  dp_model_destroy(m);
}

TEST_CASE("forward gathers every replica's rows in order: same output on 1 and 3 devices") {
  Fixture f;
  dp_model* m = f.model(kMlp);
  TestRng rng(5);
  std::vector<float> x(10 * 4);
  for (float& v : x) v = rng.uniform(-2, 2);
  dp_tensor* in = make_f32(f.ctx, x, {10, 4});
  std::vector<float> outs[2];
  int k = 0;
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
    dp_group* g = nullptr;
    DP_REQUIRE_OK(dp_group_create(m, devices, &g));
    dp_tensor* out = nullptr;
    DP_REQUIRE_OK(dp_group_forward(g, in, &out));
    CHECK(shape_of(out) == std::vector<int64_t>{10, 3});
    outs[k++] = tensor_data(out);
    dp_tensor_destroy(out);
    dp_group_destroy(g);
  }
  for (size_t i = 0; i < outs[0].size(); ++i) CHECK(outs[1][i] == doctest::Approx(outs[0][i]).epsilon(1e-6));
  dp_tensor_destroy(in);
  dp_model_destroy(m);
}

TEST_CASE("backward accumulates until zero_grad; train_step on fixed data lowers the loss") {
  Fixture f;
  dp_model* m = f.model(kMlp);
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
  TestRng rng(9);
  std::vector<float> x(6 * 4), go(6 * 3);
  for (float& v : x) v = rng.uniform(-1, 1);
  for (float& v : go) v = rng.uniform(-1, 1);
  dp_tensor* in = make_f32(f.ctx, x, {6, 4});
  dp_tensor* gout = make_f32(f.ctx, go, {6, 3});
  int64_t n = 0;
  DP_REQUIRE_OK(dp_model_num_parameters(m, &n));
  std::vector<float> g1(n), g2(n);
  dp_tensor* out = nullptr;
  DP_REQUIRE_OK(dp_group_forward(g, in, &out));
  DP_REQUIRE_OK(dp_group_backward(g, gout));
  DP_REQUIRE_OK(dp_model_copy_gradients(m, g1.data(), n));
  DP_REQUIRE_OK(dp_group_backward(g, gout));
  DP_REQUIRE_OK(dp_model_copy_gradients(m, g2.data(), n));
  double norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    CHECK(g2[i] == doctest::Approx(2 * g1[i]).epsilon(1e-6));
    norm += std::fabs(g1[i]);
  }
  CHECK(norm > 0);
  DP_REQUIRE_OK(dp_group_zero_grad(g));
  DP_REQUIRE_OK(dp_model_copy_gradients(m, g2.data(), n));
  for (float v : g2) CHECK(v == 0.0f);
  // The backward gradient of the output, times the output, matches a direct
  // check on the last bias: d(sum go*out)/d(head.bias) = column sums of go.
  DP_REQUIRE_OK(dp_group_backward(g, gout));
  DP_REQUIRE_OK(dp_model_copy_gradients(m, g2.data(), n));
  for (int c = 0; c < 3; ++c) {
    double s = 0;
    for (int r = 0; r < 6; ++r) s += go[r * 3 + c];
    CHECK(g2[n - 3 + c] == doctest::Approx(s).epsilon(1e-5));
  }

  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.2, "momentum": 0.9})", &opt));
  dp_tensor* target = make_i64(f.ctx, {0, 1, 2, 0, 1, 2}, {6});
  float first = 0, loss = 0;
  DP_REQUIRE_OK(dp_group_train_step(g, opt, in, target, &first));
  CHECK(first == doctest::Approx(std::log(3.0)).epsilon(0.3));
  for (int s = 0; s < 50; ++s) DP_REQUIRE_OK(dp_group_train_step(g, opt, in, target, &loss));
  CHECK(loss < 0.2 * first);
  float eval_loss = 0;
  int64_t correct = 0;
  DP_REQUIRE_OK(dp_group_evaluate(g, in, target, &eval_loss, &correct));
  CHECK(correct == 6);
  CHECK(eval_loss < first);

  dp_optimizer_destroy(opt);
  dp_tensor_destroy(target);
  dp_tensor_destroy(out);
  dp_tensor_destroy(in);
  dp_tensor_destroy(gout);
  dp_group_destroy(g);
  dp_model_destroy(m);
}

// As torch.optim after zero_grad() (whose default leaves .grad None): a step
// with no backward since then changes nothing and counts no step; after a
// backward it updates (it moved SGD's momentum and weight decay, and Adam's
// weights, on zeroed gradients before).
TEST_CASE("optimizer_step without a backward since zero_grad (or creation) is no step, as PyTorch's") {
  Fixture f;
  dp_model* m = f.model(kMlp);
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
  TestRng rng(4);
  std::vector<float> x(6 * 4), go(6 * 3);
  for (float& v : x) v = rng.uniform(-1, 1);
  for (float& v : go) v = rng.uniform(-1, 1);
  dp_tensor* in = make_f32(f.ctx, x, {6, 4});
  dp_tensor* gout = make_f32(f.ctx, go, {6, 3});
  auto forward_backward = [&](dp_group* on) {
    dp_tensor* out = nullptr;
    DP_REQUIRE_OK(dp_group_forward(on, in, &out));
    DP_REQUIRE_OK(dp_group_backward(on, gout));
    dp_tensor_destroy(out);
  };
  for (const char* cfg : {R"({"type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.1})",
                          R"({"type": "adamw", "lr": 0.1})"}) {
    CAPTURE(cfg);
    dp_optimizer* opt = nullptr;
    DP_REQUIRE_OK(dp_optimizer_create(g, cfg, &opt));
    int64_t steps = -1;
    std::vector<float> p = params_of(m);
    DP_REQUIRE_OK(dp_optimizer_step(opt));  // nothing since the group was made (or the last config's zero_grad)
    CHECK(params_of(m) == p);
    DP_REQUIRE_OK(dp_optimizer_steps(opt, &steps));
    CHECK(steps == 0);
    forward_backward(g);
    DP_REQUIRE_OK(dp_optimizer_step(opt));
    CHECK(params_of(m) != p);
    DP_REQUIRE_OK(dp_group_zero_grad(g));
    p = params_of(m);
    DP_REQUIRE_OK(dp_optimizer_step(opt));  // zeroed since: no step
    CHECK(params_of(m) == p);
    DP_REQUIRE_OK(dp_optimizer_steps(opt, &steps));
    CHECK(steps == 1);
    dp_optimizer_destroy(opt);
  }
  // The gradients are the model's: zeroed through another group of it, a
  // step of this group's optimizer has none to take.
  dp_group* g2 = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &g2));
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.1, "weight_decay": 0.1})", &opt));
  forward_backward(g);
  DP_REQUIRE_OK(dp_group_zero_grad(g2));
  const std::vector<float> p = params_of(m);
  DP_REQUIRE_OK(dp_optimizer_step(opt));
  CHECK(params_of(m) == p);
  dp_optimizer_destroy(opt);
  dp_tensor_destroy(in);
  dp_tensor_destroy(gout);
  dp_group_destroy(g2);
  dp_group_destroy(g);
  dp_model_destroy(m);
}

TEST_CASE("batch norm: per-replica batch statistics, running statistics merged by sample count") {
  Fixture f;
  const char* json = R"({"input": {"shape": [2]}, "layers": [{"type": "batch_norm", "momentum": 0.5}]})";
  dp_model* m = f.model(json);
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
  DP_REQUIRE_OK(dp_group_set_option(g, DP_GROUP_SPLIT, DP_SPLIT_CHUNK));
  // 5 rows on 2 devices: 3 + 2. Feature 0 is the row index, feature 1 is 1.
  dp_tensor* in = make_f32(f.ctx, {0, 1, 1, 1, 2, 1, 3, 1, 4, 1}, {5, 2});
  dp_tensor* out = nullptr;
  DP_REQUIRE_OK(dp_group_forward(g, in, &out));
  std::vector<float> y = tensor_data(out);
  // Replica 0 normalises rows 0..2 with its own mean (1) and biased var (2/3).
  CHECK(y[0] == doctest::Approx(-1 / std::sqrt(2.0 / 3 + 1e-5)));
  CHECK(y[6] == doctest::Approx(-0.5 / std::sqrt(0.25 + 1e-5)));  // row 3 in replica 1 (mean 3.5)
  int64_t nb = 0;
  DP_REQUIRE_OK(dp_model_num_buffers(m, &nb));
  REQUIRE(nb == 4);
  std::vector<float> buf(4);
  DP_REQUIRE_OK(dp_model_copy_buffers(m, buf.data(), 4));
  // mean: 0.5*0 + 0.5*(3*1 + 2*3.5)/5 = 1; var (unbiased per replica): 0.5*1 + 0.5*(3*1 + 2*0.5)/5 = 0.9
  CHECK(buf[0] == doctest::Approx(1.0));
  CHECK(buf[2] == doctest::Approx(0.9));
  // Evaluation mode uses the running statistics and leaves them alone.
  DP_REQUIRE_OK(dp_group_set_training(g, 0));
  dp_tensor_destroy(out);
  DP_REQUIRE_OK(dp_group_forward(g, in, &out));
  y = tensor_data(out);
  CHECK(y[0] == doctest::Approx((0 - 1) / std::sqrt(0.9 + 1e-5)));
  std::vector<float> buf2(4);
  DP_REQUIRE_OK(dp_model_copy_buffers(m, buf2.data(), 4));
  CHECK(buf2 == buf);
  dp_tensor_destroy(out);
  dp_tensor_destroy(in);
  dp_group_destroy(g);
  dp_model_destroy(m);
}

TEST_CASE("dropout: active in training, identity in evaluation") {
  Fixture f;
  dp_model* m = f.model(R"({"input": {"shape": [1000]}, "layers": [{"type": "dropout", "p": 0.5}]})");
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
  std::vector<float> ones(2000, 1.0f);
  dp_tensor* in = make_f32(f.ctx, ones, {2, 1000});
  dp_tensor* out = nullptr;
  DP_REQUIRE_OK(dp_group_forward(g, in, &out));
  std::vector<float> y = tensor_data(out);
  int zeros = 0;
  for (float v : y) {
    CHECK((v == 0.0f || v == 2.0f));
    zeros += v == 0.0f;
  }
  CHECK(zeros > 850);
  CHECK(zeros < 1150);
  dp_tensor_destroy(out);
  // A second training forward draws a new mask.
  DP_REQUIRE_OK(dp_group_forward(g, in, &out));
  CHECK(tensor_data(out) != y);
  dp_tensor_destroy(out);
  // Only 0 and 1: 2 (a caller's mistake) is refused and the mode stays evaluation.
  DP_REQUIRE_OK(dp_group_set_training(g, 0));
  CHECK(dp_group_set_training(g, 2) == DP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(dp_last_error()).find("dp_group_set_training: training must be 0 or 1, got 2") != std::string::npos);
  CHECK(dp_group_set_training(g, -1) == DP_ERR_INVALID_ARGUMENT);
  DP_REQUIRE_OK(dp_group_forward(g, in, &out));
  CHECK(tensor_data(out) == ones);
  dp_tensor_destroy(out);
  dp_tensor_destroy(in);
  dp_group_destroy(g);
  dp_model_destroy(m);
}

TEST_CASE("bad model JSON: a clear error naming the JSON path and what is valid") {
  Fixture f;
  f.rejects("{\"input\": ", DP_ERR_JSON, {"model JSON", "parse error"});
  f.rejects(R"({"input": {"shape": [3, 32, 32]}, "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": -1}]})",
            DP_ERR_MODEL, {"/layers/0/kernel_size: expected a positive integer", "got -1"});
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "relu"}, {"type": "relu"}, {"type": "relu"}, {"type": "relu"}, {"type": "conv3d"}]})",
            DP_ERR_MODEL, {"unknown layer type 'conv3d' at /layers/4/type", "known:", "conv2d", "linear"});
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "linear", "out_features": 2, "bais": false}]})",
            DP_ERR_MODEL, {"/layers/0/bais", "unknown key", "bias"});
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "linear"}]})", DP_ERR_MODEL, {"/layers/0/out_features", "missing"});
  // A required key misspelt: the near miss is named (finish() never runs to call it unknown).
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "linear", "bias": true, "out_feature": 2}]})", DP_ERR_MODEL,
            {"/layers/0/out_features: missing", "the object has 'out_feature': a misspelling of 'out_features'?"});
  f.rejects(R"({"input": {"shape": [3, 8, 8]}, "layers": [{"type": "conv2d", "out_channels": 2, "kernal_size": 3}]})",
            DP_ERR_MODEL, {"/layers/0/kernel_size: missing", "'kernal_size'"});
  f.rejects(R"({"layers": [{"type": "relu"}]})", DP_ERR_MODEL, {"/input"});
  // A key given twice: the parser would keep the last one silently.
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "relu"}, {"type": "linear", "out_features": 2, "out_features": 3}]})",
            DP_ERR_JSON, {"model JSON: /layers/1: 'out_features' appears twice"});
  f.rejects(R"({"seed": 1, "input": {"shape": [3]}, "seed": 2, "layers": [{"type": "relu"}]})", DP_ERR_JSON,
            {"model JSON: 'seed' appears twice"});
  f.rejects(R"({"input": {"shape": [3]}, "layers": []})", DP_ERR_MODEL, {"/layers"});
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "relu"}], "loss": {"type": "hinge"}})", DP_ERR_MODEL,
            {"unknown loss type 'hinge' at /loss/type", "cross_entropy", "mse"});
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "relu", "name": "a"}, {"type": "add", "inputs": ["a", "b"]}]})",
            DP_ERR_MODEL, {"/layers/1/inputs/1", "no earlier layer named 'b'"});
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "relu", "name": "a"}, {"type": "relu", "name": "a"}]})",
            DP_ERR_MODEL, {"/layers/1/name", "already used"});
  // A default name (the index) taken by an earlier "name": reported at the layer, not at a key it lacks.
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "relu", "name": "1"}, {"type": "relu"}]})", DP_ERR_MODEL,
            {"/layers/1: this layer's default name '1' (its index) is already used"});
  // Names are state_dict keys and C strings: "a\u0000b" and "a\u0000c" both read "a".
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "linear", "out_features": 2, "name": "a\u0000b"}]})",
            DP_ERR_MODEL, {"/layers/0/name", "control character (NUL)"});
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "relu", "name": "a\nb"}]})", DP_ERR_MODEL,
            {"/layers/0/name", "control character (code 10)"});
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "relu"}], "optimiser": 1})", DP_ERR_MODEL, {"unknown key 'optimiser'"});
  // An integer past INT64_MAX is quoted as written, not read as -1 (which a
  // dim would have taken as valid).
  f.rejects(R"({"input": {"shape": [18446744073709551615]}, "layers": [{"type": "relu"}]})", DP_ERR_MODEL,
            {"/input/shape", "18446744073709551615"});
  f.rejects(R"({"seed": 18446744073709551615, "input": {"shape": [3]}, "layers": [{"type": "relu"}]})", DP_ERR_MODEL,
            {"/seed", "a non-negative integer up to 9223372036854775807", "18446744073709551615"});
  f.rejects(R"({"input": {"shape": [3]}, "layers": [{"type": "softmax", "dim": 18446744073709551615}]})", DP_ERR_MODEL,
            {"/layers/0/dim", "18446744073709551615"});
  f.rejects(R"({"input": {"shape": [3, 8, 8]}, "layers": [{"type": "max_pool2d", "kernel_size": [2, 18446744073709551615]}]})",
            DP_ERR_MODEL, {"/layers/0/kernel_size", "18446744073709551615"});
}

TEST_CASE("shape mismatches name both layers and both shapes") {
  Fixture f;
  f.rejects(R"({"input": {"shape": [1, 8, 8]}, "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1, "name": "conv1"},
      {"type": "conv2d", "out_channels": 2, "kernel_size": 3, "padding": 1, "name": "conv2"},
      {"type": "add", "inputs": ["conv1", "conv2"], "name": "res"}]})",
            DP_ERR_SHAPE, {"/layers/2 (add 'res')", "conv1", "[4, 8, 8]", "conv2", "[2, 8, 8]"});
  f.rejects(R"({"input": {"shape": [784]}, "layers": [{"type": "relu", "name": "act"}, {"type": "conv2d", "out_channels": 2, "kernel_size": 3}]})",
            DP_ERR_SHAPE, {"/layers/1 (conv2d '1')", "/layers/0 (relu 'act')", "[784]"});
  f.rejects(R"({"input": {"shape": [10]}, "layers": [{"type": "linear", "in_features": 12, "out_features": 2}]})",
            DP_ERR_SHAPE, {"/layers/0 (linear '0')", "12", "10"});
  f.rejects(R"({"input": {"shape": [10]}, "layers": [{"type": "linear", "out_features": 2}], "loss": {"type": "mse"}, "seed": -4})",
            DP_ERR_MODEL, {"/seed"});
}

TEST_CASE("missing and unreadable model files") {
  Fixture f;
  dp_model* m = nullptr;
  CHECK(dp_model_from_file(f.ctx, "/nonexistent/model.json", &m) == DP_ERR_IO);
  CHECK(std::string(dp_last_error()).find("/nonexistent/model.json") != std::string::npos);
  CHECK(m == nullptr);
  const char* path = "test_capi_model.json";
  {
    std::ofstream out(path);
    out << R"({"input": {"shape": [2]}, "layers": [{"type": "linear", "out_features": -2}]})";
  }
  CHECK(dp_model_from_file(f.ctx, path, &m) == DP_ERR_MODEL);
  CHECK(std::string(dp_last_error()).find("test_capi_model.json: /layers/0/out_features") != std::string::npos);
  {
    std::ofstream out(path);
    out << kMlp;
  }
  DP_REQUIRE_OK(dp_model_from_file(f.ctx, path, &m));
  dp_model_destroy(m);
  // Not a regular file, or over 64 MiB: DP_ERR_IO at once (/dev/zero was read
  // until memory ran out; a directory was reported as DP_ERR_JSON).
  auto refused = [&](const char* file, std::vector<std::string> parts) {
    CAPTURE(file);
    dp_model* none = nullptr;
    CHECK(dp_model_from_file(f.ctx, file, &none) == DP_ERR_IO);
    CHECK(none == nullptr);
    std::string msg = dp_last_error();
    for (const auto& part : parts) CHECK_MESSAGE(msg.find(part) != std::string::npos, msg);
  };
  refused(".", {"model file '.' is not a regular file (a directory)"});
  refused("/dev/zero", {"model file '/dev/zero' is not a regular file"});
  {
    std::ofstream out(path);
    out << kMlp;
  }
  REQUIRE(truncate(path, (int64_t{64} << 20) + 1) == 0);  // sparse: no 64 MiB written
  refused(path, {"test_capi_model.json' has 67108865 bytes, more than the limit of 67108864 (64 MiB)"});
  std::remove(path);
}

TEST_CASE("bad tensors, devices and calls: clear errors, objects stay usable") {
  Fixture f;
  dp_model* m = f.model(kMlp);
  dp_group* g = reinterpret_cast<dp_group*>(0x1);
  CHECK(dp_group_create(m, "cpu:0,gpu:1", &g) == DP_ERR_DEVICE);
  CHECK(std::string(dp_last_error()).find("'gpu:1' in \"cpu:0,gpu:1\": expected cpu:N or cuda:N") != std::string::npos);
  CHECK(dp_group_create(m, "cpu:99999999999999", &g) == DP_ERR_DEVICE);  // was "expected cpu:N"
  CHECK(std::string(dp_last_error()).find("the device number is too large (at most 99999)") != std::string::npos);
  int gpus = 0;
  const char* why = nullptr;
  REQUIRE(dp_device_count("cuda", &gpus, &why) == DP_OK);
  CHECK((gpus > 0) == (std::string(why).empty()));
  CHECK(dp_group_create(m, "cuda:99", &g) == DP_ERR_DEVICE);  // no machine has it
  CHECK(std::string(dp_last_error()).find("cuda:99") != std::string::npos);
  if (gpus == 0) CHECK(dp_group_create(m, "cuda:0", &g) == DP_ERR_DEVICE);
  CHECK(dp_group_create(m, "cpu:0,cuda:0", &g) == DP_ERR_DEVICE);
  CHECK(dp_device_count("tpu", &gpus, nullptr) == DP_ERR_INVALID_ARGUMENT);
  {  // page-locked memory needs a GPU; without one the tensor stays as it was
    dp_tensor* t = nullptr;
    int64_t shape[1] = {3};
    float v[3] = {1, 2, 3}, back[3] = {};
    DP_REQUIRE_OK(dp_tensor_from_host(f.ctx, DP_F32, v, 1, shape, &t));
    dp_status st = dp_tensor_pin_memory(t);
    CHECK(st == (gpus > 0 ? DP_OK : DP_ERR_DEVICE));
    DP_REQUIRE_OK(dp_tensor_copy_to_host(t, back, sizeof back));
    CHECK(back[2] == 3.0f);
    dp_tensor_destroy(t);
  }
  CHECK(dp_group_create(m, "", &g) == DP_ERR_DEVICE);
  CHECK(g == reinterpret_cast<dp_group*>(0x1));
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1,cpu:2", &g));
  int nd = 0;
  CHECK(dp_group_num_devices(g, &nd) == DP_OK);
  CHECK(nd == 3);

  // Wrong input shape and dtype.
  dp_tensor* bad = make_f32(f.ctx, std::vector<float>(10), {2, 5});
  dp_tensor* out = reinterpret_cast<dp_tensor*>(0x1);
  CHECK(dp_group_forward(g, bad, &out) == DP_ERR_SHAPE);
  CHECK(std::string(dp_last_error()).find("[2, 5]") != std::string::npos);
  CHECK(out == reinterpret_cast<dp_tensor*>(0x1));
  dp_tensor* ints = make_i64(f.ctx, {1, 2, 3, 4}, {1, 4});
  CHECK(dp_group_forward(g, ints, &out) == DP_ERR_SHAPE);
  // Backward before any forward, or with the wrong shape.
  CHECK(dp_group_backward(g, bad) == DP_ERR_INVALID_ARGUMENT);
  // Bad options.
  CHECK(dp_group_set_option(g, DP_GROUP_SPLIT, 7) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_group_set_option(g, static_cast<dp_group_option>(99), 1) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_group_set_option(g, DP_GROUP_THREADS_PER_DEVICE, 0) == DP_ERR_INVALID_ARGUMENT);
  // Bad optimizer configs.
  dp_optimizer* opt = reinterpret_cast<dp_optimizer*>(0x1);
  CHECK(dp_optimizer_create(g, R"({"type": "rmsprop"})", &opt) == DP_ERR_MODEL);
  CHECK(std::string(dp_last_error()).find("known: adam, adamw, sgd") != std::string::npos);
  CHECK(dp_optimizer_create(g, R"({"type": "sgd", "lr": -1})", &opt) == DP_ERR_MODEL);
  CHECK(std::string(dp_last_error()).find("/lr") != std::string::npos);
  CHECK(dp_optimizer_create(g, R"({"type": "adam", "betas": [0.9]})", &opt) == DP_ERR_MODEL);
  CHECK(dp_optimizer_create(g, R"({"type": "sgd", "nesterov": true})", &opt) == DP_ERR_MODEL);
  CHECK(dp_optimizer_create(g, "{type: sgd}", &opt) == DP_ERR_JSON);
  CHECK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.1, "lr": 0.2})", &opt) == DP_ERR_JSON);
  CHECK(std::string(dp_last_error()).find("optimizer JSON: 'lr' appears twice") != std::string::npos);
  CHECK(dp_optimizer_create(g, R"({"lr": 0.1})", &opt) == DP_ERR_MODEL);
  CHECK(std::string(dp_last_error()).find("/type: missing; expected an optimizer type") != std::string::npos);
  CHECK(opt == reinterpret_cast<dp_optimizer*>(0x1));
  DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.1})", &opt));

  // Bad targets: wrong dtype, wrong length, class out of range.
  dp_tensor* x = make_f32(f.ctx, std::vector<float>(12, 0.5f), {3, 4});
  dp_tensor* ft = make_f32(f.ctx, {0, 1, 2}, {3});
  CHECK(dp_group_train_step(g, opt, x, ft, nullptr) == DP_ERR_SHAPE);
  CHECK(std::string(dp_last_error()).find("int64") != std::string::npos);
  dp_tensor* short_t = make_i64(f.ctx, {0, 1}, {2});
  CHECK(dp_group_train_step(g, opt, x, short_t, nullptr) == DP_ERR_SHAPE);
  dp_tensor* far = make_i64(f.ctx, {0, 1, 7}, {3});
  std::vector<float> before = params_of(m);
  CHECK(dp_group_train_step(g, opt, x, far, nullptr) == DP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(dp_last_error()).find("target 7") != std::string::npos);
  CHECK(params_of(m) == before);

  // NaN input: the loss is NaN, the step is refused, parameters unchanged.
  std::vector<float> nan_x(12, 0.5f);
  nan_x[5] = NAN;
  dp_tensor* xn = make_f32(f.ctx, nan_x, {3, 4});
  dp_tensor* t = make_i64(f.ctx, {0, 1, 2}, {3});
  CHECK(dp_group_train_step(g, opt, xn, t, nullptr) == DP_ERR_NUMERIC);
  CHECK(std::string(dp_last_error()).find("NaN") != std::string::npos);
  CHECK(params_of(m) == before);
  {  // and the gradients are zero, as after zero_grad (the step's were never used)
    int64_t n = 0;
    DP_REQUIRE_OK(dp_model_num_parameters(m, &n));
    std::vector<float> grads(static_cast<size_t>(n), -1.f);
    DP_REQUIRE_OK(dp_model_copy_gradients(m, grads.data(), n));
    CHECK(grads == std::vector<float>(static_cast<size_t>(n), 0.f));
  }

  // After all of that, the group still trains.
  float loss = -1;
  DP_REQUIRE_OK(dp_group_train_step(g, opt, x, t, &loss));
  CHECK(std::isfinite(loss));
  CHECK(params_of(m) != before);

  // Tensors: bad arguments.
  dp_tensor* tt = reinterpret_cast<dp_tensor*>(0x1);
  int64_t shape9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  float one = 1;
  CHECK(dp_tensor_from_host(f.ctx, DP_F32, &one, 9, shape9, &tt) == DP_ERR_INVALID_ARGUMENT);
  int64_t neg = -1;
  CHECK(dp_tensor_from_host(f.ctx, DP_F32, &one, 1, &neg, &tt) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_tensor_from_host(f.ctx, static_cast<dp_dtype>(5), &one, 1, shape9, &tt) == DP_ERR_INVALID_ARGUMENT);
  CHECK(tt == reinterpret_cast<dp_tensor*>(0x1));
  float small[2];
  CHECK(dp_tensor_copy_to_host(x, small, sizeof small) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_tensor_copy_from_host(x, small, sizeof small) == DP_ERR_INVALID_ARGUMENT);
  int64_t sizes[1];
  int count = 0;
  CHECK(dp_group_last_split(g, sizes, 1, &count) == DP_ERR_INVALID_ARGUMENT);

  for (dp_tensor* d : {bad, ints, x, ft, short_t, far, xn, t}) dp_tensor_destroy(d);
  dp_optimizer_destroy(opt);
  dp_group_destroy(g);
  dp_model_destroy(m);
}

// A loss finite in double but beyond float32 (mse of outputs near 1e30)
// came back as inf with DP_OK, and its step turned the parameters into inf.
TEST_CASE("a loss beyond float32's range is DP_ERR_NUMERIC: nothing stepped, nothing accumulated (1 and 2 devices)") {
  Fixture f;
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1"}) {
    CAPTURE(devices);
    dp_model* m = f.model(R"({"seed": 3, "input": {"shape": [3]}, "layers": [{"type": "linear", "out_features": 2}],
                              "loss": {"type": "mse"}})");
    dp_group* g = nullptr;
    DP_REQUIRE_OK(dp_group_create(m, devices, &g));
    dp_optimizer* opt = nullptr;
    DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.1})", &opt));
    std::vector<float> x = {1, 2, 3, 1e30f, 5, 6, 7, 8, 9, 10, 11, 12};
    dp_tensor* tx = make_f32(f.ctx, x, {4, 3});
    dp_tensor* ty = make_f32(f.ctx, std::vector<float>(8, 0.f), {4, 2});
    const std::vector<float> before = params_of(m);
    float loss = -1;
    CHECK(dp_group_train_step(g, opt, tx, ty, &loss) == DP_ERR_NUMERIC);
    CHECK(std::string(dp_last_error()).find("infinite as float32") != std::string::npos);
    CHECK(params_of(m) == before);
    DP_REQUIRE_OK(dp_group_zero_grad(g));
    CHECK(dp_group_forward_backward(g, tx, ty, 1.0, &loss) == DP_ERR_NUMERIC);
    int64_t n = 0;
    DP_REQUIRE_OK(dp_model_num_parameters(m, &n));
    std::vector<float> grads(static_cast<size_t>(n), -1.f);
    DP_REQUIRE_OK(dp_model_copy_gradients(m, grads.data(), n));
    CHECK(grads == std::vector<float>(static_cast<size_t>(n), 0.f));
    // A batch in range still trains.
    x[3] = 4;
    dp_tensor* ok = make_f32(f.ctx, x, {4, 3});
    DP_REQUIRE_OK(dp_group_train_step(g, opt, ok, ty, &loss));
    CHECK(std::isfinite(loss));
    CHECK(params_of(m) != before);
    dp_tensor_destroy(ok), dp_tensor_destroy(tx), dp_tensor_destroy(ty);
    dp_optimizer_destroy(opt);
    dp_group_destroy(g);
    dp_model_destroy(m);
  }
}

// Mixed precision runs on GPUs only: a CPU group says so and stays as it was
// (float32, training bitwise as a group never asked).
TEST_CASE("DP_GROUP_PRECISION: float32 on CPUs; bf16 and fp16 refused there, naming why; bad values refused") {
  Fixture f;
  auto run = [&](bool ask_bf16) {
    dp_model* m = f.model(kMlp);
    dp_group* g = nullptr;
    DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
    DP_REQUIRE_OK(dp_group_set_option(g, DP_GROUP_PRECISION, DP_PRECISION_FP32));
    if (ask_bf16) {
      for (int p : {DP_PRECISION_BF16, DP_PRECISION_FP16}) {
        CHECK(dp_group_set_option(g, DP_GROUP_PRECISION, p) == DP_ERR_DEVICE);
        const std::string msg = dp_last_error();
        CHECK_MESSAGE(msg.find(p == DP_PRECISION_BF16 ? "bf16" : "fp16") != std::string::npos, msg);
        CHECK_MESSAGE(msg.find("CUDA devices") != std::string::npos, msg);
      }
      CHECK(dp_group_set_option(g, DP_GROUP_PRECISION, 3) == DP_ERR_INVALID_ARGUMENT);
      CHECK(std::string(dp_last_error()).find("DP_PRECISION_FP32, _BF16 or _FP16") != std::string::npos);
    }
    dp_optimizer* opt = nullptr;
    DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.1})", &opt));
    dp_tensor* x = make_f32(f.ctx, {0.5f, -1, 2, 0.25f, 1, 1, -0.5f, 0}, {2, 4});
    dp_tensor* y = make_i64(f.ctx, {2, 0}, {2});
    for (int k = 0; k < 3; ++k) DP_REQUIRE_OK(dp_group_train_step(g, opt, x, y, nullptr));
    std::vector<float> p = params_of(m);
    dp_tensor_destroy(x), dp_tensor_destroy(y);
    dp_optimizer_destroy(opt);
    dp_group_destroy(g);
    dp_model_destroy(m);
    return p;
  };
  CHECK(run(true) == run(false));
}

TEST_CASE("a model without a loss cannot train_step, but forward/backward work") {
  Fixture f;
  dp_model* m = f.model(R"({"input": {"shape": [2]}, "layers": [{"type": "linear", "out_features": 2}]})");
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &g));
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd"})", &opt));
  dp_tensor* x = make_f32(f.ctx, {1, 2}, {1, 2});
  dp_tensor* t = make_i64(f.ctx, {0}, {1});
  CHECK(dp_group_train_step(g, opt, x, t, nullptr) == DP_ERR_MODEL);
  CHECK(std::string(dp_last_error()).find("no loss") != std::string::npos);
  dp_tensor_destroy(x);
  dp_tensor_destroy(t);
  dp_optimizer_destroy(opt);
  dp_group_destroy(g);
  dp_model_destroy(m);
}

// dp.h: one object, one thread at a time. Two threads training one group
// used to wait forever on its workers; a call made while another thread's
// runs now fails at once, saying so, and the group goes on working.
TEST_CASE("one group used by two threads at once: the second call is refused, nothing hangs") {
  Fixture f;
  dp_model* m = f.model(R"({"input": {"shape": [256]}, "layers": [{"type": "linear", "out_features": 256},
      {"type": "relu"}, {"type": "linear", "out_features": 4}], "loss": {"type": "cross_entropy"}})");
  dp_group* g = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(g, R"({"type": "sgd", "lr": 0.01})", &opt));
  dp_tensor* x = make_f32(f.ctx, std::vector<float>(64 * 256, 0.1f), {64, 256});
  dp_tensor* y = make_i64(f.ctx, std::vector<int64_t>(64, 1), {64});
  std::atomic<int> ok{0}, busy{0}, other{0};
  std::string other_message;
  std::mutex mu;
  // Until a collision was seen (at most 30 s): on a loaded machine the two
  // threads may not overlap in a fixed number of calls.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto worker = [&](bool eval) {
    for (int i = 0; (i < 300 || busy == 0) && std::chrono::steady_clock::now() < end; ++i) {
      float loss = 0;
      int64_t correct = 0;
      dp_status st = eval ? dp_group_evaluate(g, x, y, &loss, &correct) : dp_group_train_step(g, opt, x, y, &loss);
      if (st == DP_OK) {
        ++ok;
      } else if (st == DP_ERR_INVALID_ARGUMENT &&
                 std::string(dp_last_error()).find("the group is in use by another thread's call") != std::string::npos) {
        ++busy;
      } else {
        std::lock_guard<std::mutex> lock(mu);
        other_message = dp_last_error();
        ++other;
      }
    }
  };
  std::thread a(worker, false), b(worker, true);
  a.join();
  b.join();
  CAPTURE(other_message);
  CHECK(other == 0);
  CHECK(busy > 0);
  CHECK(ok > 0);
  // Usable as before.
  float loss = 0;
  DP_REQUIRE_OK(dp_group_train_step(g, opt, x, y, &loss));
  DP_REQUIRE_OK(dp_optimizer_step(opt));
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
  dp_optimizer_destroy(opt);
  dp_group_destroy(g);
  dp_model_destroy(m);
}

// The same promise for one model: two groups of it trained from two threads,
// or its parameters read while a group trains it, raced on the parameters
// without a word. Now the second call is refused, saying which, and nothing
// is left half-written.
TEST_CASE("one model used by two threads at once, through two groups or a dp_model call: refused, saying which") {
  Fixture f;
  dp_model* m = f.model(R"({"input": {"shape": [256]}, "layers": [{"type": "linear", "out_features": 256},
      {"type": "relu"}, {"type": "linear", "out_features": 4}], "loss": {"type": "cross_entropy"}})");
  dp_group* g1 = nullptr;
  dp_group* g2 = nullptr;
  DP_REQUIRE_OK(dp_group_create(m, "cpu:0", &g1));
  DP_REQUIRE_OK(dp_group_create(m, "cpu:1", &g2));
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_optimizer_create(g1, R"({"type": "sgd", "lr": 0.01})", &opt));
  dp_tensor* x = make_f32(f.ctx, std::vector<float>(64 * 256, 0.1f), {64, 256});
  dp_tensor* y = make_i64(f.ctx, std::vector<int64_t>(64, 1), {64});
  int64_t n = 0;
  DP_REQUIRE_OK(dp_model_num_parameters(m, &n));
  std::vector<float> params(static_cast<size_t>(n));
  // What each thread's refusals said; anything else fails the test.
  std::mutex mu;
  std::map<std::string, int> refused;
  std::string other_message;
  auto count = [&](dp_status st) {
    if (st == DP_OK) return;
    std::lock_guard<std::mutex> lock(mu);
    std::string e = dp_last_error();
    for (const char* what : {"through another group", "the model is in use by another thread's call",
                             "the group is in use by another thread's call"})
      if (st == DP_ERR_INVALID_ARGUMENT && e.find(what) != std::string::npos) {
        ++refused[what];
        return;
      }
    other_message = e;
  };
  auto seen = [&](const char* what) {
    std::lock_guard<std::mutex> lock(mu);
    return refused[what] > 0;
  };
  // Each pair runs until the collision it is after was seen (at most 30 s).
  std::atomic<bool> done{false};
  auto train_until = [&](const char* what) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int i = 0; (i < 50 || !seen(what)) && std::chrono::steady_clock::now() < end; ++i) {
      float loss = 0;
      count(dp_group_train_step(g1, opt, x, y, &loss));
    }
    done = true;
  };
  auto evaluate_other_group = [&] {
    while (!done) {
      float loss = 0;
      int64_t correct = 0;
      count(dp_group_evaluate(g2, x, y, &loss, &correct));
    }
  };
  auto read_parameters = [&] {
    while (!done) count(dp_model_copy_parameters(m, params.data(), n));
  };
  std::thread a(train_until, "through another group"), b(evaluate_other_group);
  a.join();
  b.join();
  done = false;
  // A train step refused while the parameters are read.
  std::thread c(train_until, "the model is in use by another thread's call"), d(read_parameters);
  c.join();
  d.join();
  CAPTURE(other_message);
  CHECK(other_message.empty());
  // Each pair collided at least once, and each refusal named the model.
  CHECK(refused["through another group"] > 0);
  CHECK(refused["the model is in use by another thread's call"] > 0);
  CHECK(refused["the group is in use by another thread's call"] == 0);
  // Usable as before, from one thread: both groups, and the model's values.
  float loss = 0;
  int64_t correct = 0;
  DP_REQUIRE_OK(dp_group_train_step(g1, opt, x, y, &loss));
  DP_REQUIRE_OK(dp_group_evaluate(g2, x, y, &loss, &correct));
  DP_REQUIRE_OK(dp_model_copy_parameters(m, params.data(), n));
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
  dp_optimizer_destroy(opt);
  dp_group_destroy(g1);
  dp_group_destroy(g2);
  dp_model_destroy(m);
}
