// N-device training gives the parameters of 1-device training: for every N,
// batch size and split, with dropout, conv, pooling and a residual add, under
// SGD with momentum and under Adam. Uses only the C ABI.
#include <cmath>
#include <cstdlib>

#include "api_util.h"

namespace {

const char* kConvModel = R"({
  "seed": 3, "input": {"shape": [2, 8, 8]},
  "layers": [
    {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1, "name": "c1"},
    {"type": "relu", "name": "r1"},
    {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1, "name": "c2"},
    {"type": "add", "inputs": ["c2", "r1"], "name": "res"},
    {"type": "relu"},
    {"type": "max_pool2d", "kernel_size": 2},
    {"type": "dropout", "p": 0.25},
    {"type": "flatten"},
    {"type": "linear", "out_features": 5}
  ],
  "loss": {"type": "cross_entropy"}})";

// Branches joined by concat, average pooling, grouped and strided conv, and
// smooth activations; an MSE loss.
const char* kBranchModel = R"({
  "seed": 11, "input": {"shape": [4, 6, 6]},
  "layers": [
    {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "groups": 2, "name": "a"},
    {"type": "tanh", "name": "ta"},
    {"type": "conv2d", "out_channels": 2, "kernel_size": [3, 3], "stride": 2, "padding": 1, "dilation": 1, "inputs": ["input"], "name": "b"},
    {"type": "gelu", "name": "gb"},
    {"type": "avg_pool2d", "kernel_size": 2, "stride": 1, "inputs": ["ta"], "name": "pa"},
    {"type": "global_avg_pool", "inputs": ["pa"], "name": "ga"},
    {"type": "global_avg_pool", "inputs": ["gb"], "name": "gg"},
    {"type": "concat", "inputs": ["ga", "gg"]},
    {"type": "dropout", "p": 0.1},
    {"type": "linear", "out_features": 3},
    {"type": "sigmoid"}
  ],
  "loss": {"type": "mse"}})";

struct Run {
  std::vector<float> params;
  std::vector<float> losses;
  std::vector<int64_t> split;
};

// Step `step`'s batch (inputs in [-1, 1]; 5 classes, or 3 MSE targets in [0, 1]): the tensors of
// dp_group_train_step, the caller's to destroy.
struct StepBatch {
  dp_tensor* input = nullptr;
  dp_tensor* target = nullptr;
};
StepBatch step_batch(dp_context* ctx, int step, const std::vector<int64_t>& shape, bool mse, bool ignored = false) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t batch = shape[0];
  TestRng rng(1000 + step);
  std::vector<float> x(static_cast<size_t>(numel));
  for (float& v : x) v = rng.uniform(-1, 1);
  StepBatch b;
  b.input = make_f32(ctx, x, shape);
  if (mse) {
    std::vector<float> t(static_cast<size_t>(batch * 3));
    for (float& v : t) v = rng.uniform(0, 1);
    b.target = make_f32(ctx, t, {batch, 3});
  } else {
    std::vector<int64_t> t(static_cast<size_t>(batch));
    for (auto& v : t) {
      v = rng.next() % (ignored ? 6 : 5);
      if (v == 5) v = -100;  // cross entropy's ignore_index
    }
    b.target = make_i64(ctx, t, {batch});
  }
  return b;
}

Run train(const char* json, const std::string& devices, const char* opt_json, int64_t batch, int steps,
          int split_mode = DP_SPLIT_CHUNK, int threads = 1, double clip = 0) {
  dp_context* ctx = nullptr;
  dp_model* model = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  DP_REQUIRE_OK(dp_model_from_json(ctx, json, &model));
  DP_REQUIRE_OK(dp_group_create(model, devices.c_str(), &group));
  DP_REQUIRE_OK(dp_group_set_option(group, DP_GROUP_SPLIT, split_mode));
  DP_REQUIRE_OK(dp_group_set_option(group, DP_GROUP_THREADS_PER_DEVICE, threads));
  DP_REQUIRE_OK(dp_optimizer_create(group, opt_json, &opt));
  if (clip > 0) DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(opt, clip));

  int nd = 0;
  int64_t in_shape[DP_MAX_DIMS];
  DP_REQUIRE_OK(dp_model_input_shape(model, &nd, in_shape));
  std::vector<int64_t> shape{batch};
  for (int i = 0; i < nd; ++i) shape.push_back(in_shape[i]);
  // Class targets for cross_entropy and nll, float targets of the output's shape ([B, 3]) otherwise.
  const bool mse = std::string(json).find("cross_entropy") == std::string::npos &&
                   std::string(json).find("\"nll\"") == std::string::npos;
  bool ignored = std::string(json).find("\"ignore_index\"") != std::string::npos;  // then some targets are -100

  Run run;
  for (int step = 0; step < steps; ++step) {
    const StepBatch b = step_batch(ctx, step, shape, mse, ignored);
    float loss = 0;
    DP_REQUIRE_OK(dp_group_train_step(group, opt, b.input, b.target, &loss));
    run.losses.push_back(loss);
    dp_tensor_destroy(b.input);
    dp_tensor_destroy(b.target);
  }
  int64_t sizes[16];
  int count = 0;
  DP_REQUIRE_OK(dp_group_last_split(group, sizes, 16, &count));
  run.split.assign(sizes, sizes + count);
  run.params = params_of(model);
  dp_optimizer_destroy(opt);
  dp_group_destroy(group);
  dp_model_destroy(model);
  dp_context_destroy(ctx);
  return run;
}

const char* const kSgd = R"({"type": "sgd", "lr": 0.05, "momentum": 0.9})";
const char* const kAdam = R"({"type": "adam", "lr": 0.01})";

// Under SGD with momentum and Adam, for each batch size, 1 device against
// each N: the same parameters (within `tol`, require_close) and losses of 20 steps.
void check_many_as_one(const std::string& json, const std::vector<int64_t>& batches, const std::vector<int>& ns,
                       double tol = 1e-5, double adam_tol = 0) {
  for (const char* opt : {kSgd, kAdam}) {
    for (int64_t batch : batches) {
      Run one = train(json.c_str(), "cpu:0", opt, batch, 20);
      for (int n : ns) {
        const std::string optimizer = opt;
        CAPTURE(json);
        CAPTURE(optimizer);
        CAPTURE(batch);
        CAPTURE(n);
        Run many = train(json.c_str(), cpu_devices(n), opt, batch, 20);
        int64_t chunk = (batch + n - 1) / n;
        CHECK(many.split.size() == static_cast<size_t>((batch + chunk - 1) / chunk));
        require_close(one.params, many.params, opt == kAdam && adam_tol > 0 ? adam_tol : tol);
        for (size_t s = 0; s < one.losses.size(); ++s) CHECK(many.losses[s] == doctest::Approx(one.losses[s]).epsilon(1e-5));
      }
    }
  }
}

// `json` with its loss {"type": from} replaced by the JSON `to`.
std::string with_loss(std::string json, const char* from, const std::string& to) {
  const std::string loss = std::string("\"loss\": {\"type\": \"") + from + "\"}";
  REQUIRE(json.find(loss) != std::string::npos);
  return json.replace(json.find(loss), loss.size(), "\"loss\": " + to);
}

}  // namespace

TEST_CASE("N devices train exactly as one: conv, pool, dropout, residual add") {
  check_many_as_one(kConvModel, {30, 10, 7}, {2, 3, 8});
}

// Cross entropy's mean with class weights and ignored rows divides by the
// batch's weight, not its rows: every replica divides by the whole batch's.
TEST_CASE("N devices train exactly as one: cross entropy with class weights, ignore_index, label smoothing") {
  check_many_as_one(with_loss(kConvModel, "cross_entropy",
                              R"({"type": "cross_entropy", "weight": [0.5, 2, 1, 0.25, 3], "ignore_index": -100, "label_smoothing": 0.1})"),
                    {30, 10, 7}, {2, 3, 8});
}

// Every other loss: nll after log_softmax (class weights, ignored rows) on
// the conv model, and the element-wise losses on the branch model (whose
// sigmoid output suits bce too).
TEST_CASE("N devices train exactly as one: nll, l1, smooth_l1, huber, bce, bce_with_logits") {
  std::string nll = with_loss(kConvModel, "cross_entropy", R"({"type": "nll", "weight": [0.5, 2, 1, 0.25, 3], "ignore_index": -100})");
  const std::string last = R"({"type": "linear", "out_features": 5})";
  nll.replace(nll.find(last), last.size(), last + R"(, {"type": "log_softmax"})");
  check_many_as_one(nll, {30, 7}, {3, 8});
  for (const char* loss : {R"({"type": "l1"})", R"({"type": "smooth_l1", "beta": 0.05})", R"({"type": "huber", "delta": 0.05})",
                           R"({"type": "bce", "weight": [1, 0.5, 2]})",
                           R"({"type": "bce_with_logits", "weight": [1, 0.5, 2], "pos_weight": [3, 1, 0.25]})"})
    check_many_as_one(with_loss(kBranchModel, "mse", loss), {30, 7}, {3, 8});
}

// reduction "sum": every replica's share is its rows' sum, nothing divides.
// Within 3e-5 (measured up to 2.0e-5): SGD's steps are then the batch's
// rows times a mean's (lr 0.05 moves as lr 1.5 would on batches of 30), and
// the rounding of another order of sums grows with them (Adam's, which
// does not scale with the gradient, stay within 1e-5).
TEST_CASE("N devices train exactly as one: reduction sum (cross entropy with weights and ignored rows, mse)") {
  check_many_as_one(with_loss(kConvModel, "cross_entropy",
                              R"({"type": "cross_entropy", "weight": [0.5, 2, 1, 0.25, 3], "ignore_index": -100, "reduction": "sum"})"),
                    {30, 7}, {3, 8}, 3e-5);
  check_many_as_one(with_loss(kBranchModel, "mse", R"({"type": "mse", "reduction": "sum"})"), {30, 7}, {3, 8}, 3e-5);
}

// layer_norm over a sample's last dim and over all three: each row is its
// own, so only the parameters' gradients cross devices. SGD within 1e-5;
// Adam within 1e-4, the tolerance processes are held to (docs/distributed.md):
// Adam moves a parameter by about lr whatever its gradient's size, and the
// first norm's biases, whose gradients over 7 rows nearly cancel, carry the
// rounding of another order of sums to 1.7e-5 (OpenBLAS's products) and
// 3.3e-5 (oneDNN's) of require_close's 1e-2 floor in 20 steps.
TEST_CASE("N devices train exactly as one: layer_norm") {
  std::string json = kConvModel;
  const std::string relu = R"({"type": "relu", "name": "r1"})";
  json.replace(json.find(relu), relu.size(), R"({"type": "layer_norm", "normalized_shape": [4, 8, 8], "name": "n1"}, )" + relu);
  const std::string last = R"({"type": "linear", "out_features": 5})";
  json.replace(json.find(last), last.size(),
               R"({"type": "linear", "out_features": 6}, {"type": "layer_norm", "normalized_shape": 6, "eps": 1e-3}, )" + last);
  check_many_as_one(json, {30, 7}, {3, 8}, 1e-5, 1e-4);
}

TEST_CASE("N devices train exactly as one: branches, concat, grouped conv, MSE, balanced split") {
  const char* sgd = R"({"type": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 1e-4})";
  const char* adamw = R"({"type": "adamw", "lr": 0.01, "weight_decay": 0.05})";
  for (const char* opt : {sgd, adamw}) {
    for (int64_t batch : {30, 7}) {
      Run one = train(kBranchModel, "cpu:0", opt, batch, 20);
      for (int n : {3, 8}) {
        for (int mode : {DP_SPLIT_CHUNK, DP_SPLIT_BALANCED}) {
          CAPTURE(opt);
          CAPTURE(batch);
          CAPTURE(n);
          CAPTURE(mode);
          Run many = train(kBranchModel, cpu_devices(n), opt, batch, 20, mode);
          require_close(one.params, many.params);
        }
      }
    }
  }
}

// CPU replicas sum their gradients in buckets while backward runs (the last
// replica to finish a layer sums it, helped by those already done). Any
// bucket size adds the same numbers in the same order: tiny buckets (many
// collectives, idle replicas taking part) give bitwise the parameters of one
// bucket.
TEST_CASE("gradient buckets of any size give bitwise the same result") {
  const char* sgd = R"({"type": "sgd", "lr": 0.05, "momentum": 0.9})";
  for (int64_t batch : {30, 10, 7}) {
    for (int n : {3, 8}) {
      CAPTURE(batch);
      CAPTURE(n);
      setenv("DP_BUCKET_MB", "0.0001", 1);  // 26 floats: a bucket per layer and more
      Run tiny = train(kConvModel, cpu_devices(n), sgd, batch, 5);
      unsetenv("DP_BUCKET_MB");
      Run one = train(kConvModel, cpu_devices(n), sgd, batch, 5);
      REQUIRE(tiny.params.size() == one.params.size());
      for (size_t i = 0; i < one.params.size(); ++i) REQUIRE(tiny.params[i] == one.params[i]);
    }
  }
}

// With DP_SPLIT_LAYERS=1 (the default across processes only), a linear layer of
// at least 2 x 64 Ki weights computes its weight gradient
// in blocks of rows and reports each final as it ends (Layer::grad_splits),
// so buckets may end inside it: more buckets than layers, started while the
// layer computes the rest. The blocks do not depend on the bucket size, so
// any bucket size still gives bitwise the parameters of one bucket, and N
// devices still train as one.
TEST_CASE("a large layer's gradient in buckets inside it: bitwise for any bucket size, N devices as one") {
  const char* json = R"({
    "seed": 4, "input": {"shape": [600]},
    "layers": [
      {"type": "linear", "out_features": 480},
      {"type": "relu"},
      {"type": "linear", "out_features": 5}
    ],
    "loss": {"type": "cross_entropy"}})";
  const char* sgd = R"({"type": "sgd", "lr": 0.05, "momentum": 0.9})";
  const char* adam = R"({"type": "adam", "lr": 0.01})";
  setenv("DP_SPLIT_LAYERS", "1", 1);  // between threads too (by default only across processes)
  for (const char* opt : {sgd, adam}) {
    Run one = train(json, "cpu:0", opt, 10, 6);
    for (int n : {1, 3}) {
      CAPTURE(opt);
      CAPTURE(n);
      setenv("DP_BUCKET_MB", "64", 1);  // one bucket: the layer's pieces are not used
      Run whole = train(json, cpu_devices(n), opt, 10, 6);
      setenv("DP_BUCKET_MB", "0.0001", 1);  // a bucket per piece (5 in the first layer: more than layers + 1) and per layer
      Run tiny = train(json, cpu_devices(n), opt, 10, 6);
      unsetenv("DP_BUCKET_MB");
      Run split = train(json, cpu_devices(n), opt, 10, 6);  // the default: 0.25 MiB, cut inside the layer
      REQUIRE(tiny.params.size() == whole.params.size());
      CHECK(tiny.params == whole.params);
      CHECK(split.params == whole.params);
      // (Adam turns the rounding of near-zero gradients of this wide layer
      // into steps of size lr: 3e-4 apart; the other tests hold Adam to 1e-5.)
      if (opt == sgd) require_close(one.params, whole.params);
    }
  }
  unsetenv("DP_SPLIT_LAYERS");
}

// Threads inside a device split its products and element-wise loops, and
// with one device the optimizer's update too (also when clipping defers it
// to the end of the step): each against the same devices with one thread.
TEST_CASE("threads per device train as one thread: products, update and clipping split over them") {
  // Layers wide enough for the products to split (64 rows or columns and
  // more), and 70 k parameters in all: one bucket, whose update is cut in
  // several ranges (Optimizer::kGrain per thread).
  const char* mlp = R"({
    "seed": 5, "input": {"shape": [200]},
    "layers": [
      {"type": "linear", "out_features": 256}, {"type": "relu"},
      {"type": "linear", "out_features": 70}, {"type": "tanh"},
      {"type": "linear", "out_features": 5}
    ],
    "loss": {"type": "cross_entropy"}})";
  for (const char* json : {mlp, kConvModel})
    for (const char* opt : {kSgd, kAdam})
      for (double clip : {0.0, 0.5})
        for (int64_t batch : {30, 7}) {
          const std::string optimizer = opt;
          CAPTURE(json);
          CAPTURE(optimizer);
          CAPTURE(clip);
          CAPTURE(batch);
          for (int devices : {1, 2}) {
            const Run one = train(json, cpu_devices(devices), opt, batch, 12, DP_SPLIT_CHUNK, 1, clip);
            for (int threads : {2, 3}) {
              CAPTURE(devices);
              CAPTURE(threads);
              const Run many = train(json, cpu_devices(devices), opt, batch, 12, DP_SPLIT_CHUNK, threads, clip);
              require_close(one.params, many.params, 1e-5);  // the split products' bits differ, a little
              for (size_t s = 0; s < one.losses.size(); ++s)
                CHECK(many.losses[s] == doctest::Approx(one.losses[s]).epsilon(1e-5));
            }
          }
        }
}

// Several groups on one model (dp.h: each call starts from the newest
// parameters, whichever group wrote them): two groups of 1 and 3 CPU devices
// taking turns with plain SGD (no optimizer state, so two optimizers act as
// one) train as one group taking every step; a model without dropout (whose
// masks are keyed by each group's own step count).
TEST_CASE("two groups on one model take turns: as one group taking every step") {
  const char* json = R"({
    "seed": 8, "input": {"shape": [6]},
    "layers": [{"type": "linear", "out_features": 16}, {"type": "tanh"}, {"type": "linear", "out_features": 5}],
    "loss": {"type": "cross_entropy"}})";
  const char* sgd = R"({"type": "sgd", "lr": 0.1})";
  Run one = train(json, "cpu:0", sgd, 12, 6);
  dp_context* ctx = nullptr;
  dp_model* model = nullptr;
  DP_REQUIRE_OK(dp_context_create(&ctx));
  DP_REQUIRE_OK(dp_model_from_json(ctx, json, &model));
  dp_group* groups[2] = {nullptr, nullptr};
  dp_optimizer* opts[2] = {nullptr, nullptr};
  DP_REQUIRE_OK(dp_group_create(model, "cpu:0", &groups[0]));
  DP_REQUIRE_OK(dp_group_create(model, cpu_devices(3).c_str(), &groups[1]));
  for (int g = 0; g < 2; ++g) DP_REQUIRE_OK(dp_optimizer_create(groups[g], sgd, &opts[g]));
  for (int step = 0; step < 6; ++step) {
    const StepBatch b = step_batch(ctx, step, {12, 6}, false);  // train()'s data
    float loss = 0;
    DP_REQUIRE_OK(dp_group_train_step(groups[step % 2], opts[step % 2], b.input, b.target, &loss));
    CHECK(std::fabs(loss - one.losses[static_cast<size_t>(step)]) <= 1e-5f);
    dp_tensor_destroy(b.input);
    dp_tensor_destroy(b.target);
  }
  require_close(params_of(model), one.params);
  for (int g = 0; g < 2; ++g) {
    dp_optimizer_destroy(opts[g]);
    dp_group_destroy(groups[g]);
  }
  dp_model_destroy(model);
  dp_context_destroy(ctx);
}
