// The grad scaler (dp_optimizer_set_grad_scaler, torch.amp.GradScaler's
// dynamic loss scaling) through the C ABI: float32 training with it equals
// training without it bit for bit while nothing overflows (1 and 3 devices,
// SGD momentum and Adam, with and without clipping, through train_step and
// through forward_backward + dp_optimizer_step); overflowing scales skip
// steps (parameters and state unchanged), back off and grow again as
// PyTorch's update rule says; against PyTorch itself (tests/reference/
// grad_scaler.json, written by make_grad_scaler_reference.py); the
// settings and their errors; checkpoints that resume bitwise.
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <ostream>
#include <nlohmann/json.hpp>
#include <string>

#include <unistd.h>

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
  std::vector<float> grads() const {
    int64_t n = 0;
    DP_REQUIRE_OK(dp_model_num_parameters(model, &n));
    std::vector<float> g(static_cast<size_t>(n));
    DP_REQUIRE_OK(dp_model_copy_gradients(model, g.data(), n));
    return g;
  }
};

struct State {
  double scale = 0;
  int64_t tracker = -1, skipped = -1;
  bool operator==(const State& o) const { return scale == o.scale && tracker == o.tracker && skipped == o.skipped; }
};
std::ostream& operator<<(std::ostream& o, const State& s) {
  return o << "{scale " << s.scale << ", tracker " << s.tracker << ", skipped " << s.skipped << "}";
}
State state_of(const dp_optimizer* opt) {
  State s;
  DP_REQUIRE_OK(dp_optimizer_grad_scaler_state(opt, &s.scale, &s.tracker, &s.skipped));
  return s;
}
double norm_of(const dp_optimizer* opt) {
  double n = 0;
  DP_REQUIRE_OK(dp_optimizer_grad_norm(opt, &n));
  return n;
}

// Rows [first, first + rows) of a deterministic classification set: 6 features, 5 classes.
struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
};
Batch make_batch(int64_t first, int64_t rows, float range = 2) {
  Batch b;
  for (int64_t r = first; r < first + rows; ++r) {
    TestRng rng(static_cast<uint64_t>(r) + 11);
    for (int i = 0; i < 6; ++i) b.x.push_back(rng.uniform(-range, range));
    b.y.push_back(rng.next() % 5);
  }
  return b;
}

// A training step on `h` of batch `step` (16 rows): train_step, or (k > 1)
// k micro-batches through forward_backward with loss_scale factor / k, then
// dp_optimizer_step. Returns the status of the call that stepped.
dp_status train(Handles& h, int step, int k = 1, double factor = 1.0, float* loss = nullptr, float range = 2) {
  dp_status st = DP_OK;
  const int64_t rows = 16 / k;
  for (int i = 0; i < k; ++i) {
    const Batch b = make_batch(step * 16 + i * rows, rows, range);
    dp_tensor* x = make_f32(h.ctx, b.x, {rows, 6});
    dp_tensor* y = make_i64(h.ctx, b.y, {rows});
    if (k == 1)
      st = dp_group_train_step(h.group, h.opt, x, y, loss);
    else
      DP_REQUIRE_OK(dp_group_forward_backward(h.group, x, y, factor / k, loss));
    dp_tensor_destroy(x);
    dp_tensor_destroy(y);
  }
  if (k > 1) {
    st = dp_optimizer_step(h.opt);
    DP_REQUIRE_OK(dp_group_zero_grad(h.group));
  }
  return st;
}

const char* const kMlp = R"({"seed": 5, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 12}, {"type": "tanh"}, {"type": "linear", "out_features": 5}],
  "loss": {"type": "cross_entropy"}})";
const char* const kSgd = R"({"type": "sgd", "lr": 0.2, "momentum": 0.9, "weight_decay": 0.01})";
const char* const kAdam = R"({"type": "adam", "lr": 0.01})";

// A linear model under an MSE loss with inputs of +-1e3 and targets 0:
// gradients of about 1e6, so the scaled ones overflow float32 for scales of
// about 2^110 and more (it depends on the batch). Learning rates small enough not to diverge.
const char* const kLinear = R"({"seed": 3, "input": {"shape": [6]},
  "layers": [{"type": "linear", "out_features": 4}, {"type": "linear", "out_features": 1}],
  "loss": {"type": "mse"}})";
const char* const kSgdSmall = R"({"type": "sgd", "lr": 1e-10, "momentum": 0.9})";
const char* const kAdamSmall = R"({"type": "adam", "lr": 1e-3})";
const char* const kOverflowing = R"({"init_scale": 1.7014118346046923e38, "growth_interval": 3})";  // 2^127

dp_status train_big(Handles& h, int step, float* loss = nullptr) {
  std::vector<float> x(16 * 6), t(16, 0.0f);
  TestRng rng(static_cast<uint64_t>(step) + 100);
  for (float& v : x) v = rng.uniform(-1e3f, 1e3f);
  dp_tensor* xt = make_f32(h.ctx, x, {16, 6});
  dp_tensor* tt = make_f32(h.ctx, t, {16, 1});
  const dp_status st = dp_group_train_step(h.group, h.opt, xt, tt, loss);
  dp_tensor_destroy(xt);
  dp_tensor_destroy(tt);
  return st;
}

// PyTorch's update rule, spelled out independently of dp's code.
State expect_next(const State& s, bool skipped, double growth, double backoff, int64_t interval) {
  State n = s;
  if (skipped) {
    n.scale = static_cast<float>(s.scale * backoff);
    n.tracker = 0;
    ++n.skipped;
  } else if (s.tracker + 1 == interval) {
    const float grown = static_cast<float>(s.scale * growth);
    if (std::isfinite(grown)) n.scale = grown;
    n.tracker = 0;
  } else {
    n.tracker = s.tracker + 1;
  }
  return n;
}

std::string temp_path(const char* name) {
  return "/tmp/dp_test_grad_scaler_" + std::to_string(::getpid()) + "_" + name;
}

// Copies the file `from` to `to` with `with` written over the bytes at
// `offset` past the first `find` (the length kept: a damaged checkpoint), and
// its "header_crc32" blanked to spaces: a file without that checksum (as dp
// wrote before it kept one), so that the check behind it is what refuses it.
void write_patched(const std::string& from, const std::string& to, const std::string& find, size_t offset,
                   const std::string& with) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(find);
  REQUIRE(at != std::string::npos);
  bytes.replace(at + offset, with.size(), with);
  const size_t crc = bytes.find("\"header_crc32\":\"");
  REQUIRE(crc != std::string::npos);
  const size_t entry = 16 + 8 + 1;  // "header_crc32":"xxxxxxxx"
  if (bytes[crc - 1] == ',')
    bytes.replace(crc - 1, entry + 1, entry + 1, ' ');
  else
    bytes.replace(crc, entry + 1, entry + 1, ' ');  // the comma after it
  std::ofstream(to, std::ios::binary) << bytes;
}

// A damaged checkpoint is refused (DP_ERR_IO, the message naming `why`), and
// nothing changes: the scaler's state and the parameters.
void check_load_refused(Handles& h, const std::string& path, const char* why) {
  const State before = state_of(h.opt);
  const std::vector<float> before_params = params_of(h.model);
  CHECK(dp_checkpoint_load(path.c_str(), h.group, h.opt, nullptr) == DP_ERR_IO);
  CHECK(std::string(dp_last_error()).find(why) != std::string::npos);
  CHECK(state_of(h.opt) == before);
  CHECK(params_of(h.model) == before_params);
}

}  // namespace

TEST_CASE("with the grad scaler and no overflow, float32 training is bitwise training without it") {
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
    for (const char* opt : {kSgd, kAdam}) {
      for (double clip : {0.0, 0.3}) {
        for (int k : {1, 2}) {
          CAPTURE(devices);
          CAPTURE(opt);
          CAPTURE(clip);
          CAPTURE(k);
          Handles plain(kMlp, devices, opt), scaled(kMlp, devices, opt);
          // growth_interval 3: the scale doubles twice during the run (still a power of two).
          DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(scaled.opt, R"({"growth_interval": 3})"));
          if (clip > 0) {
            DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(plain.opt, clip));
            DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(scaled.opt, clip));
          }
          for (int step = 0; step < 7; ++step) {
            CAPTURE(step);
            const double scale = state_of(scaled.opt).scale;
            CHECK(scale == std::ldexp(1.0, 16 + step / 3));
            float l0 = 0, l1 = 0;
            DP_REQUIRE_OK(train(plain, step, k, 1.0, &l0));
            // forward_backward's gradients are scaled by the caller (scaler.scale(loss)).
            DP_REQUIRE_OK(train(scaled, step, k, scale, &l1));
            CHECK(l0 == l1);  // the loss itself is never scaled
            if (clip > 0) CHECK(norm_of(plain.opt) == norm_of(scaled.opt));
            REQUIRE(params_of(plain.model) == params_of(scaled.model));
          }
          CHECK(state_of(scaled.opt) == State{std::ldexp(1.0, 18), 1, 0});
          CHECK(state_of(plain.opt) == State{1.0, 0, 0});  // off: PyTorch's get_scale() of a disabled scaler
        }
      }
    }
  }
}

// A scaler started at 2^127 skips steps until the scale is low enough, then
// grows every 3 clean steps into an overflow again. The run must equal a run
// without scaler that takes only the steps the scaler took (so a skip left
// parameters and optimizer state as they were), and the state must follow
// PyTorch's rule step by step.
TEST_CASE("overflowing scales skip the step, back off, and grow again after growth_interval clean steps") {
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
    for (const char* opt : {kSgdSmall, kAdamSmall}) {
      for (double clip : {0.0, 1e5}) {
        CAPTURE(devices);
        CAPTURE(opt);
        CAPTURE(clip);
        Handles scaled(kLinear, devices, opt), plain(kLinear, devices, opt);
        DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(scaled.opt, kOverflowing));
        if (clip > 0) {
          DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(plain.opt, clip));
          DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(scaled.opt, clip));
        }
        State s = state_of(scaled.opt);
        CHECK(s == State{std::ldexp(1.0, 127), 0, 0});
        int skips = 0, grown_then_skipped = 0, clipped = 0;
        bool last_grew = false;
        for (int step = 0; step < 40; ++step) {
          CAPTURE(step);
          const std::vector<float> before = params_of(scaled.model);
          float l0 = 0;
          DP_REQUIRE_OK(train_big(scaled, step, &l0));  // a skip is no error
          const State now = state_of(scaled.opt);
          const bool skipped = now.skipped > s.skipped;
          CHECK(now == expect_next(s, skipped, 2.0, 0.5, 3));
          if (skipped) {
            ++skips;
            grown_then_skipped += last_grew;
            CHECK(params_of(scaled.model) == before);
            for (float g : scaled.grads()) CHECK(g == 0.0f);  // left zero, as after a non-finite loss
            if (clip > 0) CHECK(!std::isfinite(norm_of(scaled.opt)));
          } else {
            float l1 = 0;
            DP_REQUIRE_OK(train_big(plain, step, &l1));
            CHECK(l0 == l1);
            if (clip > 0) {
              CHECK(norm_of(plain.opt) == norm_of(scaled.opt));
              clipped += norm_of(plain.opt) > clip;
            }
          }
          REQUIRE(params_of(scaled.model) == params_of(plain.model));
          last_grew = now.scale > s.scale;
          s = now;
        }
        CHECK(skips >= 15);              // from 2^127 down to where it fits
        CHECK(grown_then_skipped >= 1);  // and growing into an overflow again
        CHECK(s.scale < std::ldexp(1.0, 112));
        if (clip > 0) CHECK(clipped > 0);
      }
    }
  }
}

TEST_CASE("a NaN loss stays an error and changes nothing, the scaler included; an inf gradient is a skipped step") {
  Handles h(kMlp, "cpu:0,cpu:1", kSgd);
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, R"({"growth_interval": 2})"));
  DP_REQUIRE_OK(train(h, 0));
  const State s = state_of(h.opt);
  CHECK(s == State{65536.0, 1, 0});
  const std::vector<float> p = params_of(h.model);
  Batch b = make_batch(0, 8);
  b.x[3] = NAN;
  dp_tensor* x = make_f32(h.ctx, b.x, {8, 6});
  dp_tensor* y = make_i64(h.ctx, b.y, {8});
  CHECK(dp_group_train_step(h.group, h.opt, x, y, nullptr) == DP_ERR_NUMERIC);
  CHECK(std::string(dp_last_error()).find("loss is NaN") != std::string::npos);
  CHECK(state_of(h.opt) == s);
  CHECK(params_of(h.model) == p);

  // An infinite gradient through backward and dp_optimizer_step, clipping on:
  // with the scaler a skip (DP_OK), where without it clipping refuses.
  DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(h.opt, 1.0));
  const Batch ok = make_batch(0, 8);
  dp_tensor* x2 = make_f32(h.ctx, ok.x, {8, 6});
  dp_tensor* out = nullptr;
  DP_REQUIRE_OK(dp_group_zero_grad(h.group));
  DP_REQUIRE_OK(dp_group_forward(h.group, x2, &out));
  std::vector<float> go(8 * 5, 0.01f);
  go[7] = INFINITY;
  dp_tensor* gout = make_f32(h.ctx, go, {8, 5});
  DP_REQUIRE_OK(dp_group_backward(h.group, gout));
  DP_REQUIRE_OK(dp_optimizer_step(h.opt));
  CHECK(params_of(h.model) == p);
  CHECK(state_of(h.opt) == State{32768.0, 0, 1});
  CHECK(std::isinf(norm_of(h.opt)));
  DP_REQUIRE_OK(dp_group_zero_grad(h.group));
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, nullptr));
  DP_REQUIRE_OK(dp_group_backward(h.group, gout));
  CHECK(dp_optimizer_step(h.opt) == DP_ERR_NUMERIC);
  CHECK(params_of(h.model) == p);
  for (dp_tensor* t : {x, y, x2, out, gout}) dp_tensor_destroy(t);
}

TEST_CASE("finite scaled gradients that overflow once unscaled (a scale below 1): an error, nothing changes") {
  // PyTorch checks only the scaled gradients, so its step would go on with the
  // NaN that clip_grad_norm_ makes of the inf; dp refuses, as it does for an
  // infinite norm without the scaler: no scale mends a true gradient over float32.
  Handles h(kMlp, "cpu:0,cpu:1", kSgd);
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, R"({"init_scale": 0.25})"));
  DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(h.opt, 1.0));
  DP_REQUIRE_OK(train(h, 0));  // a step taken: scale 0.25, tracker 1
  const State s = state_of(h.opt);
  CHECK(s == State{0.25, 1, 0});
  const std::vector<float> p = params_of(h.model);
  const Batch b = make_batch(0, 8);
  dp_tensor* x = make_f32(h.ctx, b.x, {8, 6});
  dp_tensor* out = nullptr;
  DP_REQUIRE_OK(dp_group_zero_grad(h.group));
  DP_REQUIRE_OK(dp_group_forward(h.group, x, &out));
  std::vector<float> go(8 * 5, 0.0f);
  go[2] = 2e38f;  // the output's gradient, as scaled: finite; times 4, not
  dp_tensor* gout = make_f32(h.ctx, go, {8, 5});
  DP_REQUIRE_OK(dp_group_backward(h.group, gout));
  const std::vector<float> g = h.grads();
  bool finite = true;
  for (float v : g) finite = finite && std::isfinite(v);
  REQUIRE(finite);
  CHECK(dp_optimizer_step(h.opt) == DP_ERR_NUMERIC);
  CHECK(std::string(dp_last_error()).find("overflow float32") != std::string::npos);
  CHECK(std::isinf(norm_of(h.opt)));
  CHECK(params_of(h.model) == p);
  CHECK(state_of(h.opt) == s);  // not a skip: the scaler is as it was
  // The optimizer goes on: the next step is taken.
  DP_REQUIRE_OK(dp_group_zero_grad(h.group));
  DP_REQUIRE_OK(train(h, 1));
  CHECK(state_of(h.opt) == State{0.25, 2, 0});
  CHECK(params_of(h.model) != p);
  for (dp_tensor* t : {x, out, gout}) dp_tensor_destroy(t);
}

TEST_CASE("a scale whose inverse overflows float32: an error naming it, nothing changes, set_grad_scaler mends it") {
  // 1e-39 is a float32 (subnormal) > 0, so the setting is accepted; 1/1e-39
  // is not a float32, so no gradient can be unscaled: the step is refused.
  for (double clip : {0.0, 1.0}) {
    CAPTURE(clip);
    Handles h(kMlp, "cpu:0,cpu:1", kSgd);
    DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, R"({"init_scale": 1e-39})"));
    if (clip > 0) DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(h.opt, clip));
    const State s = state_of(h.opt);
    const std::vector<float> p = params_of(h.model);
    CHECK(train(h, 0) == DP_ERR_NUMERIC);
    const std::string why = dp_last_error();
    CHECK(why.find("inverse overflows float32") != std::string::npos);
    CHECK(why.find("scale is 1.00000022e-39") != std::string::npos);  // 1e-39 as a float32, not "0.000000"
    CHECK(why.find("skipped steps") == std::string::npos);      // none were
    CHECK(params_of(h.model) == p);
    CHECK(state_of(h.opt) == s);
    DP_REQUIRE_OK(dp_group_zero_grad(h.group));
    DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, "{}"));
    DP_REQUIRE_OK(train(h, 0));
    CHECK(state_of(h.opt) == State{65536.0, 1, 0});
    CHECK(params_of(h.model) != p);
  }
}

TEST_CASE("grad scaler settings: PyTorch's defaults, off, bad values named, nothing changed on failure") {
  Handles h(kMlp, "cpu:0", kSgd);
  CHECK(state_of(h.opt) == State{1.0, 0, 0});
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, "{}"));
  CHECK(state_of(h.opt) == State{65536.0, 0, 0});
  for (int step = 0; step < 3; ++step) DP_REQUIRE_OK(train(h, step));
  const State after = state_of(h.opt);
  CHECK(after == State{65536.0, 3, 0});
  struct Bad {
    const char* json;
    dp_status status;
    const char* says;
  };
  for (const Bad& bad : {Bad{R"({"init_scale": 0})", DP_ERR_MODEL, "/init_scale"},
                         Bad{R"({"init_scale": -2})", DP_ERR_MODEL, "/init_scale"},
                         Bad{R"({"init_scale": 1e39})", DP_ERR_MODEL, "/init_scale"},
                         Bad{R"({"init_scale": 1e-46})", DP_ERR_MODEL, "/init_scale"},
                         Bad{R"({"init_scale": "big"})", DP_ERR_MODEL, "/init_scale"},
                         Bad{R"({"growth_factor": 1})", DP_ERR_MODEL, "/growth_factor"},
                         Bad{R"({"backoff_factor": 1})", DP_ERR_MODEL, "/backoff_factor"},
                         Bad{R"({"backoff_factor": 0})", DP_ERR_MODEL, "/backoff_factor"},
                         Bad{R"({"growth_interval": 0})", DP_ERR_MODEL, "/growth_interval"},
                         Bad{R"({"growth_interval": 2.5})", DP_ERR_MODEL, "/growth_interval"},
                         Bad{R"({"growth_interval": 3000000000})", DP_ERR_MODEL, "/growth_interval"},
                         Bad{R"({"enabled": 1})", DP_ERR_MODEL, "/enabled"},
                         Bad{R"({"grwoth_factor": 2})", DP_ERR_MODEL, "unknown key 'grwoth_factor'"},
                         Bad{R"([1])", DP_ERR_MODEL, "expected an object"},
                         Bad{R"({"init_scale": )", DP_ERR_JSON, "grad scaler JSON"}}) {
    CAPTURE(bad.json);
    CHECK(dp_optimizer_set_grad_scaler(h.opt, bad.json) == bad.status);
    CHECK(std::string(dp_last_error()).find(bad.says) != std::string::npos);
    CHECK(state_of(h.opt) == after);  // the scaler as it was
  }
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, R"({"init_scale": 8, "enabled": false})"));
  CHECK(state_of(h.opt) == State{1.0, 0, 0});
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, R"({"init_scale": 8})"));
  CHECK(state_of(h.opt) == State{8.0, 0, 0});
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, ""));
  CHECK(state_of(h.opt) == State{1.0, 0, 0});
  // Out-parameters untouched on failure; each may be NULL.
  double scale = -1;
  int64_t tracker = -1, skipped = -1;
  CHECK(dp_optimizer_grad_scaler_state(nullptr, &scale, &tracker, &skipped) == DP_ERR_INVALID_ARGUMENT);
  CHECK((scale == -1 && tracker == -1 && skipped == -1));
  CHECK(dp_optimizer_set_grad_scaler(nullptr, "{}") == DP_ERR_INVALID_ARGUMENT);
  DP_REQUIRE_OK(dp_optimizer_grad_scaler_state(h.opt, nullptr, nullptr, &skipped));
  CHECK(skipped == 0);
}

// PyTorch's torch.amp.GradScaler("cpu") on float32, with a scale that
// overflows on some steps and recovers (a small growth_interval): the same
// skipped steps, scales and losses, and parameters within float32 rounding.
TEST_CASE("the grad scaler computes what PyTorch's GradScaler computes, on 1 and 3 devices") {
  std::ifstream f(std::string(DP_REFERENCE_DIR) + "/grad_scaler.json");
  REQUIRE(f.good());
  const json ref = json::parse(f);
  const int64_t rows = ref["rows"].get<int64_t>();
  for (const json& c : ref["cases"]) {
    for (const char* devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"}) {
      const std::string name = c["name"].get<std::string>();
      CAPTURE(name);
      CAPTURE(devices);
      Handles h(ref["model"].dump(), devices, c["optimizer"].dump());
      const auto p0 = ref["params"].get<std::vector<float>>();
      DP_REQUIRE_OK(dp_model_set_parameters(h.model, p0.data(), static_cast<int64_t>(p0.size())));
      DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(h.opt, c["grad_scaler"].dump().c_str()));
      if (c["max_norm"].get<double>() > 0) DP_REQUIRE_OK(dp_optimizer_set_clip_grad_norm(h.opt, c["max_norm"].get<double>()));
      if (!c["lr_schedule"].is_null()) DP_REQUIRE_OK(dp_optimizer_set_lr_schedule(h.opt, c["lr_schedule"].dump().c_str()));
      const auto scales = c["scales"].get<std::vector<double>>();
      const auto skipped = c["skipped"].get<std::vector<int>>();
      const auto losses = c["losses"].get<std::vector<float>>();
      const auto lrs = c["lrs"].get<std::vector<double>>();
      int64_t skips = 0;
      for (size_t step = 0; step < scales.size(); ++step) {
        CAPTURE(step);
        const State s = state_of(h.opt);
        CHECK(s.scale == scales[step]);
        double lr = 0;
        dp_tensor* x = make_f32(h.ctx, ref["inputs"][step].get<std::vector<float>>(), {rows, 6});
        dp_tensor* y = make_f32(h.ctx, ref["targets"][step].get<std::vector<float>>(), {rows, 5});
        float loss = 0;
        DP_REQUIRE_OK(dp_group_train_step(h.group, h.opt, x, y, &loss));
        CHECK(loss == doctest::Approx(losses[step]).epsilon(1e-5));
        DP_REQUIRE_OK(dp_optimizer_lr(h.opt, &lr));
        if (!skipped[step]) CHECK(lr == doctest::Approx(lrs[step]).epsilon(1e-12));
        skips += skipped[step];
        CHECK(state_of(h.opt).skipped == skips);
        dp_tensor_destroy(x);
        dp_tensor_destroy(y);
      }
      CHECK(state_of(h.opt).scale == c["final_scale"].get<double>());
      CHECK(state_of(h.opt).tracker == c["final_growth_tracker"].get<int64_t>());
      // Adam divides by sqrt(v): float32 rounding (sums in another order)
      // reaches the parameters as about 2e-6 after 30 steps, as in
      // test_training_knobs.
      const double tol = c["optimizer"]["type"] == "adam" ? 5e-4 : 1e-4;
      require_close(params_of(h.model), c["params_after"].get<std::vector<float>>(), tol, "parameters after the steps");
    }
  }
}

// A run checkpointed mid-way (after skips, with a grown scale, a schedule
// that counts skipped steps) and resumed by fresh handles goes on bitwise as
// the uninterrupted run, scaler state included; a checkpoint without a
// scaler's record loads into an optimizer with one as a fresh scaler; a
// damaged record is refused and changes nothing.
TEST_CASE("checkpoints hold the grad scaler's state: a resumed run is bitwise the uninterrupted one") {
  const std::string path = temp_path("resume.ckpt"), plain_path = temp_path("plain.ckpt"), bad_path = temp_path("bad.ckpt");
  const char* const schedule = R"({"type": "step", "step_size": 4, "gamma": 0.5})";
  for (const char* opt : {kSgdSmall, kAdamSmall}) {
    CAPTURE(opt);
    Handles whole(kLinear, "cpu:0,cpu:1", opt);
    DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(whole.opt, kOverflowing));
    DP_REQUIRE_OK(dp_optimizer_set_lr_schedule(whole.opt, schedule));
    State mid;
    std::vector<float> mid_params;
    for (int step = 0; step < 40; ++step) {
      DP_REQUIRE_OK(train_big(whole, step));
      if (step == 29) {
        DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), whole.group, whole.opt, nullptr, nullptr));
        mid = state_of(whole.opt);
        mid_params = params_of(whole.model);
      }
    }
    REQUIRE(mid.skipped > 0);
    CHECK(state_of(whole.opt).skipped > mid.skipped);  // the second part skips too
    char* meta = nullptr;
    DP_REQUIRE_OK(dp_checkpoint_metadata(path.c_str(), &meta));
    const json m = json::parse(meta);
    dp_free(meta);
    REQUIRE(m.contains("grad_scaler"));
    const json rec = json::parse(m["grad_scaler"].get<std::string>());
    CHECK(rec["scale"].get<double>() == mid.scale);
    CHECK(rec["_growth_tracker"].get<int64_t>() == mid.tracker);
    CHECK(rec["skipped_steps"].get<int64_t>() == mid.skipped);

    Handles resumed(kLinear, "cpu:0,cpu:1", opt);
    DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(resumed.opt, kOverflowing));
    DP_REQUIRE_OK(dp_optimizer_set_lr_schedule(resumed.opt, schedule));
    DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), resumed.group, resumed.opt, nullptr));
    CHECK(state_of(resumed.opt) == mid);
    CHECK(params_of(resumed.model) == mid_params);
    for (int step = 30; step < 40; ++step) DP_REQUIRE_OK(train_big(resumed, step));
    CHECK(state_of(resumed.opt) == state_of(whole.opt));
    CHECK(params_of(resumed.model) == params_of(whole.model));

    // A damaged record (same length, a key renamed): DP_ERR_IO, nothing changes.
    write_patched(path, bad_path, "_growth_tracker", 1, "G");
    check_load_refused(resumed, bad_path, "grad_scaler");
    // The key is dp's own.
    CHECK(dp_checkpoint_save(bad_path.c_str(), whole.group, whole.opt, nullptr, R"({"grad_scaler": 1})") ==
          DP_ERR_INVALID_ARGUMENT);

    // Saved without a scaler: no record; loaded with one, the scaler starts afresh.
    Handles plain(kLinear, "cpu:0", opt);
    DP_REQUIRE_OK(train_big(plain, 0));
    DP_REQUIRE_OK(dp_checkpoint_save(plain_path.c_str(), plain.group, plain.opt, nullptr, nullptr));
    DP_REQUIRE_OK(dp_checkpoint_metadata(plain_path.c_str(), &meta));
    CHECK(!json::parse(meta).contains("grad_scaler"));
    dp_free(meta);
    DP_REQUIRE_OK(dp_checkpoint_load(plain_path.c_str(), resumed.group, resumed.opt, nullptr));
    CHECK(state_of(resumed.opt) == State{std::ldexp(1.0, 127), 0, 0});
  }
  std::remove(path.c_str());
  std::remove(plain_path.c_str());
  std::remove(bad_path.c_str());
}

// The state is read against this optimizer's settings: a tracker counted
// against a longer growth_interval is cut to this one's (the next clean step
// grows the scale; PyTorch's tracker would never reach a shorter interval);
// a scale of 0 (a damaged file: no run reaches it) is refused.
TEST_CASE("a checkpoint's scaler state against this optimizer's settings: the tracker cut, a scale of 0 refused") {
  const std::string path = temp_path("interval.ckpt"), bad_path = temp_path("zero.ckpt");
  Handles saved(kMlp, "cpu:0", kSgd);
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(saved.opt, "{}"));  // growth_interval 2000
  for (int step = 0; step < 10; ++step) DP_REQUIRE_OK(train(saved, step));
  REQUIRE(state_of(saved.opt) == State{65536.0, 10, 0});
  DP_REQUIRE_OK(dp_checkpoint_save(path.c_str(), saved.group, saved.opt, nullptr, nullptr));

  Handles loaded(kMlp, "cpu:0", kSgd);
  DP_REQUIRE_OK(dp_optimizer_set_grad_scaler(loaded.opt, R"({"growth_interval": 4})"));
  DP_REQUIRE_OK(dp_checkpoint_load(path.c_str(), loaded.group, loaded.opt, nullptr));
  CHECK(state_of(loaded.opt) == State{65536.0, 3, 0});
  DP_REQUIRE_OK(train(loaded, 10));
  CHECK(state_of(loaded.opt) == State{131072.0, 0, 0});

  // A scale of 0, written over the record's scale with the file's length kept.
  const std::string key = "\\\"scale\\\":";  // \"scale\": inside the metadata's string
  write_patched(path, bad_path, key + "65536.0", key.size(), "0.00000");
  check_load_refused(loaded, bad_path, "'scale' must be a float32 number > 0");
  std::remove(path.c_str());
  std::remove(bad_path.c_str());
}
