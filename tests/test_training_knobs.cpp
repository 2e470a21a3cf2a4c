// Gradient clipping (dp_optimizer_set_clip_grad_norm, clip_grad_norm_) and
// gradient accumulation (dp_group_forward_backward), through the C ABI:
// against PyTorch on the same weights and batches (tests/reference/
// clip_accumulate.json, written by make_clip_reference.py), on 1 and 3
// devices; K accumulated batches against one batch K times larger; and the
// faults: a non-finite gradient norm or loss changes nothing.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "api_util.h"

#ifndef DP_REFERENCE_DIR
#error "DP_REFERENCE_DIR must name tests/reference"
#endif

using nlohmann::json;

namespace {

struct Handles {
  dp_context* ctx = nullptr;
  dp_model* model = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  Handles(const std::string& model_json, const std::string& devices, const std::string& opt_json) {
    DP_REQUIRE_OK(dp_context_create(&ctx));
    DP_REQUIRE_OK(dp_model_from_json(ctx, model_json.c_str(), &model));
    DP_REQUIRE_OK(dp_group_create(model, devices.c_str(), &group));
    DP_REQUIRE_OK(dp_optimizer_create(group, opt_json.c_str(), &opt));
  }
  ~Handles() {
    dp_optimizer_destroy(opt);
    dp_group_destroy(group);
    dp_model_destroy(model);
    dp_context_destroy(ctx);
  }
  void set_params(std::vector<float> p) {
    DP_REQUIRE_OK(dp_model_set_parameters(model, p.data(), static_cast<int64_t>(p.size())));
  }
  std::vector<float> grads() const {
    int64_t n = 0;
    DP_REQUIRE_OK(dp_model_num_parameters(model, &n));
    std::vector<float> g(static_cast<size_t>(n));
    DP_REQUIRE_OK(dp_model_copy_gradients(model, g.data(), n));
    return g;
  }
};

// Rows [first, first + rows) of a deterministic classification set: 6 features, 5 classes.
struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
};
Batch make_batch(int64_t first, int64_t rows) {
  Batch b;
  for (int64_t r = first; r < first + rows; ++r) {
    TestRng rng(static_cast<uint64_t>(r) + 1);
    for (int i = 0; i < 6; ++i) b.x.push_back(rng.uniform(-2, 2));
    b.y.push_back(rng.next() % 5);
  }
  return b;
}

const char* const kMlp = R"({"seed": 5, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 12}, {"type": "tanh"}, {"type": "linear", "out_features": 5}],
  "loss": {"type": "cross_entropy"}})";

}  // namespace

TEST_CASE("clip_grad_norm_ and gradient accumulation compute what PyTorch computes, on 1 and 3 devices") {
  std::ifstream f(std::string(DP_REFERENCE_DIR) + "/clip_accumulate.json");
  REQUIRE(f.good());
  const json ref = json::parse(f);
  const int64_t rows = ref["rows"].get<int64_t>();
  for (const json& c : ref["cases"]) {
    for (const char* devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
      const std::string name = c["name"].get<std::string>();
      CAPTURE(name);
      CAPTURE(devices);
      Handles h(ref["model"].dump(), devices, c["optimizer"].dump());
      h.set_params(ref["params"].get<std::vector<float>>());
      const double max_norm = c["max_norm"].get<double>();
      const int k = c["accumulate"].get<int>();
      if (max_norm > 0) DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(h.opt, max_norm));
      const auto want_losses = c["losses"].get<std::vector<float>>();
      const auto want_norms = c["grad_norms"].get<std::vector<double>>();
      size_t batch = 0;
      const size_t steps = want_losses.size() / static_cast<size_t>(k);
      for (size_t step = 0; step < steps; ++step) {
        CAPTURE(step);
        for (int i = 0; i < k; ++i, ++batch) {
          dp_tensor* x = make_f32(h.ctx, ref["inputs"][batch].get<std::vector<float>>(), {rows, 6});
          dp_tensor* y = make_i64(h.ctx, ref["targets"][batch].get<std::vector<int64_t>>(), {rows});
          float loss = 0;
          if (k == 1)
            DP_REQUIRE_OK(dp_group_train_step(h.group, h.opt, x, y, &loss));
          else
            DP_REQUIRE_OK(dp_group_forward_backward(h.group, x, y, 1.0 / k, &loss));
          CHECK(loss == doctest::Approx(want_losses[batch]).epsilon(1e-5));
          dp_tensor_destroy(x);
          dp_tensor_destroy(y);
        }
        if (k > 1) {
          DP_REQUIRE_OK(dp_optimizer_step(h.opt));
          DP_REQUIRE_OK(dp_group_zero_grad(h.group));
        }
        if (max_norm > 0) {
          double norm = 0;
          DP_REQUIRE_OK(dp_optimizer_grad_norm(h.opt, &norm));
          CHECK(norm == doctest::Approx(want_norms[step]).epsilon(1e-5));
          CHECK(norm > max_norm);  // the reference clips on every step
        }
      }
      // Adam divides by sqrt(v): the float32 rounding of small gradients
      // (1e-8 apart from PyTorch's after the first step, summed in another
      // order) reaches the parameters as about 3e-6 after five steps.
      const double tol = c["optimizer"]["type"] == "adam" ? 5e-4 : 1e-4;
      require_close(params_of(h.model), c["params_after"].get<std::vector<float>>(), tol, "parameters after the steps");
    }
  }
}

// Mean losses: K batches of B rows, each scaled by 1/K, add up to the
// gradients of the K*B rows' mean (up to rounding), so the steps agree.
TEST_CASE("K accumulated batches train as one batch K times larger, on any number of devices") {
  const char* const sgd = R"({"type": "sgd", "lr": 0.2, "momentum": 0.9, "weight_decay": 0.01})";
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
    CAPTURE(devices);
    Handles big(kMlp, "cpu:0", sgd), acc(kMlp, devices, sgd);
    for (int step = 0; step < 4; ++step) {
      const Batch b = make_batch(step * 20, 20);
      dp_tensor* x = make_f32(big.ctx, b.x, {20, 6});
      dp_tensor* y = make_i64(big.ctx, b.y, {20});
      float big_loss = 0;
      DP_REQUIRE_OK(dp_group_train_step(big.group, big.opt, x, y, &big_loss));
      double acc_loss = 0;
      for (int i = 0; i < 4; ++i) {  // 4 micro-batches of 5 rows
        const Batch m = make_batch(step * 20 + i * 5, 5);
        dp_tensor* mx = make_f32(acc.ctx, m.x, {5, 6});
        dp_tensor* my = make_i64(acc.ctx, m.y, {5});
        float loss = 0;
        DP_REQUIRE_OK(dp_group_forward_backward(acc.group, mx, my, 0.25, &loss));
        acc_loss += loss / 4;
        dp_tensor_destroy(mx);
        dp_tensor_destroy(my);
      }
      DP_REQUIRE_OK(dp_optimizer_step(acc.opt));
      DP_REQUIRE_OK(dp_group_zero_grad(acc.group));
      CHECK(acc_loss == doctest::Approx(big_loss).epsilon(1e-5));
      dp_tensor_destroy(x);
      dp_tensor_destroy(y);
    }
    require_close(params_of(acc.model), params_of(big.model), 1e-5, "parameters: 4 x 5 rows accumulated against 20 rows");
  }
}

TEST_CASE("forward_backward adds to the gradients; a NaN loss leaves them as they were") {
  Handles h(kMlp, "cpu:0,cpu:1", R"({"type": "sgd", "lr": 0.1})");
  const Batch b = make_batch(0, 8);
  dp_tensor* x = make_f32(h.ctx, b.x, {8, 6});
  dp_tensor* y = make_i64(h.ctx, b.y, {8});
  DP_REQUIRE_OK(dp_group_forward_backward(h.group, x, y, 1.0, nullptr));
  const std::vector<float> once = h.grads();
  DP_REQUIRE_OK(dp_group_forward_backward(h.group, x, y, 0.5, nullptr));
  std::vector<float> want = once;
  for (float& g : want) g *= 1.5f;
  require_close(h.grads(), want, 1e-6, "gradients after 1 + 0.5 of the same batch");

  std::vector<float> bad = b.x;
  bad[7] = NAN;
  dp_tensor* nan_x = make_f32(h.ctx, bad, {8, 6});
  const std::vector<float> before = h.grads();
  CHECK(dp_group_forward_backward(h.group, nan_x, y, 1.0, nullptr) == DP_ERR_NUMERIC);
  CHECK(std::string(dp_last_error()).find("loss is NaN") != std::string::npos);
  CHECK(h.grads() == before);
  CHECK(dp_group_forward_backward(h.group, x, y, INFINITY, nullptr) == DP_ERR_INVALID_ARGUMENT);
  DP_REQUIRE_OK(dp_group_forward_backward(h.group, x, y, 1.0, nullptr));  // still usable
  dp_tensor_destroy(nan_x);
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
}

TEST_CASE("clipping's settings: off by default, infinity measures without clipping, bad limits refused") {
  const char* const sgd = R"({"type": "sgd", "lr": 0.3})";
  Handles plain(kMlp, "cpu:0", sgd), measured(kMlp, "cpu:0,cpu:1", sgd), clipped(kMlp, "cpu:0", sgd);
  double norm = 0;
  CHECK(dp_optimizer_grad_norm(plain.opt, &norm) == DP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(dp_last_error()).find("dp_optimizer_set_clip_grad_norm") != std::string::npos);
  CHECK(dp_optimizer_set_clip_grad_norm(plain.opt, -1) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_optimizer_set_clip_grad_norm(plain.opt, NAN) == DP_ERR_INVALID_ARGUMENT);
  DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(measured.opt, INFINITY));
  const Batch b = make_batch(100, 16);
  dp_tensor* x = make_f32(plain.ctx, b.x, {16, 6});
  dp_tensor* y = make_i64(plain.ctx, b.y, {16});
  DP_REQUIRE_OK(dp_group_train_step(plain.group, plain.opt, x, y, nullptr));
  DP_REQUIRE_OK(dp_group_train_step(measured.group, measured.opt, x, y, nullptr));
  require_close(params_of(measured.model), params_of(plain.model), 1e-6, "measured, not clipped");
  DP_REQUIRE_OK(dp_optimizer_grad_norm(measured.opt, &norm));
  CHECK(norm > 0);
  // Half the measured norm: every gradient halves (up to the 1e-6 in the divisor).
  DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(clipped.opt, norm / 2));
  DP_REQUIRE_OK(dp_group_train_step(clipped.group, clipped.opt, x, y, nullptr));
  std::vector<float> p0 = params_of(plain.model), p1 = params_of(clipped.model);
  Handles fresh(kMlp, "cpu:0", sgd);
  const std::vector<float> start = params_of(fresh.model);
  for (size_t i = 0; i < p0.size(); ++i) {
    CAPTURE(i);
    CHECK(double(p1[i]) - start[i] == doctest::Approx((double(p0[i]) - start[i]) / 2).epsilon(1e-4).scale(1e-6));
  }
  dp_tensor_destroy(x);
  dp_tensor_destroy(y);
}

// Gradients that overflow float32 while the loss (a double) stays finite.
TEST_CASE("a non-finite gradient norm takes no step: DP_ERR_NUMERIC, parameters and optimizer state unchanged") {
  const char* const model = R"({"input": {"shape": [2]}, "layers": [{"type": "linear", "out_features": 1}],
    "loss": {"type": "mse"}})";
  const char* const sgd = R"({"type": "sgd", "lr": 0.1, "momentum": 0.9})";
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1"}) {
    CAPTURE(devices);
    Handles h(model, devices, sgd), twin(model, devices, sgd);
    const std::vector<float> p{0.5f, 0.0f, 0.0f};  // weight [1, 2], bias
    h.set_params(p);
    twin.set_params(p);
    DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(h.opt, 1.0));
    DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(twin.opt, 1.0));
    // Outputs 1e19 against 0: each row's weight gradient is about 2e38, two rows overflow.
    dp_tensor* x = make_f32(h.ctx, {2e19f, 0, 2e19f, 0}, {2, 2});
    dp_tensor* t = make_f32(h.ctx, {0, 0}, {2, 1});
    CHECK(dp_group_train_step(h.group, h.opt, x, t, nullptr) == DP_ERR_NUMERIC);
    CHECK(std::string(dp_last_error()).find("gradient norm is infinite") != std::string::npos);
    CHECK(params_of(h.model) == p);
    for (float g : h.grads()) CHECK(g == 0.0f);
    // Through backward and dp_optimizer_step: the same refusal, nothing scaled or stepped.
    dp_tensor* out = nullptr;
    DP_REQUIRE_OK(dp_group_forward(h.group, x, &out));
    dp_tensor* inf_grad = make_f32(h.ctx, {INFINITY, 1}, {2, 1});
    DP_REQUIRE_OK(dp_group_backward(h.group, inf_grad));
    CHECK(dp_optimizer_step(h.opt) == DP_ERR_NUMERIC);
    CHECK(params_of(h.model) == p);
    DP_REQUIRE_OK(dp_group_zero_grad(h.group));
    // Then a sound step goes on exactly as on a twin that never failed (the
    // momentum buffer's first step included).
    dp_tensor* x2 = make_f32(h.ctx, {1, 2, 3, 4}, {2, 2});
    dp_tensor* t2 = make_f32(h.ctx, {1, 0}, {2, 1});
    DP_REQUIRE_OK(dp_group_train_step(h.group, h.opt, x2, t2, nullptr));
    DP_REQUIRE_OK(dp_group_train_step(twin.group, twin.opt, x2, t2, nullptr));
    CHECK(params_of(h.model) == params_of(twin.model));
    for (dp_tensor* d : {x, t, out, inf_grad, x2, t2}) dp_tensor_destroy(d);
  }
}

// dp_optimizer_copy_state / set_state / steps / grad scaler state: a fresh
// optimizer (on a fresh model, another split) given a trained one's
// parameters and state continues as the trained one does (within the
// equivalence tolerance: another split sums in another order); bad names,
// counts and values change nothing.
TEST_CASE("optimizer state through the C ABI: a fresh optimizer given another's state continues as it would") {
  struct Case {
    const char* opt;
    double lr;
    std::vector<std::string> names;
  };
  const Case cases[] = {
      {R"({"type": "sgd", "lr": 0.2, "momentum": 0.9, "nesterov": true, "weight_decay": 0.01})", 0.2, {"momentum_buffer"}},
      {R"({"type": "adam", "lr": 0.01})", 0.01, {"exp_avg", "exp_avg_sq"}},
      {R"({"type": "adamw", "lr": 0.01, "weight_decay": 0.1})", 0.01, {"exp_avg", "exp_avg_sq"}},
      {R"({"type": "sgd", "lr": 0.2})", 0.2, {}},
  };
  const char* const schedule = R"({"type": "step", "step_size": 2, "gamma": 0.5})";
  auto step = [](Handles& h, int64_t i) {
    const Batch b = make_batch(i * 8, 8);
    dp_tensor* x = make_f32(h.ctx, b.x, {8, 6});
    dp_tensor* y = make_i64(h.ctx, b.y, {8});
    DP_REQUIRE_OK(dp_group_train_step(h.group, h.opt, x, y, nullptr));
    dp_tensor_destroy(x);
    dp_tensor_destroy(y);
  };
  auto state = [](const Handles& h, const std::string& name) {
    int64_t n = 0;
    DP_REQUIRE_OK(dp_model_num_parameters(h.model, &n));
    std::vector<float> s(static_cast<size_t>(n));
    DP_REQUIRE_OK(dp_optimizer_copy_state(h.opt, name.c_str(), s.data(), n));
    return s;
  };
  for (const Case& c : cases) {
    CAPTURE(c.opt);
    Handles a(kMlp, "cpu:0", c.opt), b(kMlp, "cpu:0,cpu:1,cpu:2", c.opt);
    for (Handles* h : {&a, &b}) {
      DP_REQUIRE_OK(dp_optimizer_set_lr_schedule(h->opt, schedule));
      DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h->opt, R"({"init_scale": 1024, "growth_interval": 3})"));
    }
    // Names, in a stable order; zero before the first step.
    int count = -1;
    DP_REQUIRE_OK(dp_optimizer_num_states(a.opt, &count));
    REQUIRE(count == static_cast<int>(c.names.size()));
    for (int i = 0; i < count; ++i) {
      const char* name = nullptr;
      DP_REQUIRE_OK(dp_optimizer_state_name(a.opt, i, &name));
      CHECK(std::string(name) == c.names[static_cast<size_t>(i)]);
      for (float v : state(a, name)) CHECK(v == 0.0f);
    }
    for (int64_t i = 0; i < 5; ++i) step(a, i);
    int64_t steps = 0;
    DP_REQUIRE_OK(dp_optimizer_steps(a.opt, &steps));
    CHECK(steps == 5);
    double scale = 0;
    int64_t tracker = -1, skipped = -1;
    DP_REQUIRE_OK(dp_optimizer_grad_scaler_state(a.opt, &scale, &tracker, &skipped));
    CHECK(scale == 2048);  // grown once, after 3 clean steps
    CHECK(tracker == 2);

    // b takes a's parameters and state, then both go on alike.
    b.set_params(params_of(a.model));
    for (const std::string& name : c.names) {
      const std::vector<float> s = state(a, name);
      DP_REQUIRE_OK(dp_optimizer_set_state(b.opt, name.c_str(), s.data(), static_cast<int64_t>(s.size())));
      CHECK(state(b, name) == s);
    }
    DP_REQUIRE_OK(dp_optimizer_set_steps(b.opt, steps));
    DP_REQUIRE_OK(dp_optimizer_set_grad_scaler_state(b.opt, scale, tracker, skipped));
    for (int64_t i = 5; i < 9; ++i) {
      step(a, i);
      step(b, i);
    }
    double lr_a = 0, lr_b = 0;
    DP_REQUIRE_OK(dp_optimizer_lr(a.opt, &lr_a));
    DP_REQUIRE_OK(dp_optimizer_lr(b.opt, &lr_b));
    CHECK(lr_a == lr_b);
    CHECK(lr_a == doctest::Approx(c.lr * std::pow(0.5, 4)));  // the 9th step's: t = 8 (no step skipped)
    // Another split sums in another order: equal within the equivalence tolerance.
    require_close(params_of(b.model), params_of(a.model), 1e-5, "parameters after the resumed steps");
    for (const std::string& name : c.names) require_close(state(b, name), state(a, name), 1e-5, name.c_str());
  }
}

TEST_CASE("optimizer state through the C ABI: bad names, counts and values are refused, nothing changes") {
  Handles h(kMlp, "cpu:0", R"({"type": "adam", "lr": 0.01})");
  int64_t n = 0;
  DP_REQUIRE_OK(dp_model_num_parameters(h.model, &n));
  std::vector<float> ones(static_cast<size_t>(n) + 1, 1.0f), got(static_cast<size_t>(n) + 1, -1.0f);
  CHECK(dp_optimizer_copy_state(h.opt, "momentum_buffer", got.data(), n) == DP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(dp_last_error()).find("no state 'momentum_buffer' in a adam optimizer (it keeps exp_avg, exp_avg_sq)") !=
        std::string::npos);
  CHECK(dp_optimizer_copy_state(h.opt, "exp_avg", got.data(), n - 1) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_optimizer_set_state(h.opt, "exp_avg", ones.data(), n + 1) == DP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(dp_last_error()).find("got " + std::to_string(n + 1) + " floats") != std::string::npos);
  CHECK(dp_optimizer_set_state(h.opt, nullptr, ones.data(), n) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_optimizer_set_steps(h.opt, -1) == DP_ERR_INVALID_ARGUMENT);
  const char* name = nullptr;
  CHECK(dp_optimizer_state_name(h.opt, 2, &name) == DP_ERR_INVALID_ARGUMENT);
  CHECK(name == nullptr);
  for (double bad : {0.0, -1.0, double(INFINITY), double(NAN), 1e39, 0.1})  // 0.1 is no float32
    CHECK(dp_optimizer_set_grad_scaler_state(h.opt, bad, 0, 0) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_optimizer_set_grad_scaler_state(h.opt, 1, -1, 0) == DP_ERR_INVALID_ARGUMENT);
  CHECK(dp_optimizer_set_grad_scaler_state(h.opt, 1, 0, -1) == DP_ERR_INVALID_ARGUMENT);
  // Nothing changed: zero state, no steps, the scaler's state as it was.
  DP_REQUIRE_OK(dp_optimizer_copy_state(h.opt, "exp_avg", got.data(), n + 1));
  for (int64_t i = 0; i < n; ++i) CHECK(got[static_cast<size_t>(i)] == 0.0f);
  CHECK(got[static_cast<size_t>(n)] == -1.0f);  // count is what dst holds: only n written
  int64_t steps = -1, skipped = -1;
  DP_REQUIRE_OK(dp_optimizer_steps(h.opt, &steps));
  CHECK(steps == 0);
  double scale = 0;
  DP_REQUIRE_OK(dp_optimizer_grad_scaler_state(h.opt, &scale, nullptr, &skipped));
  CHECK(scale == 1);
  CHECK(skipped == 0);
  // A tracker past this scaler's growth_interval is cut to one less (as a checkpoint's).
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, R"({"growth_interval": 4})"));
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler_state(h.opt, 8, 100, 3));
  int64_t tracker = 0;
  DP_REQUIRE_OK(dp_optimizer_grad_scaler_state(h.opt, &scale, &tracker, &skipped));
  CHECK(scale == 8);
  CHECK(tracker == 3);
  CHECK(skipped == 3);
}
