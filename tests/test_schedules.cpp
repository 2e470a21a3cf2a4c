// Learning-rate schedules against PyTorch's (tests/reference/lr_schedules.json,
// written by make_lr_schedules.py): the lr of every step, the updates made
// with it, a resumed run, and bad schedules refused without change.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "api_util.h"

namespace {

const char* kModel = R"({"seed": 2, "input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 3}],
  "loss": {"type": "cross_entropy"}})";

struct Run {
  dp_context* ctx = nullptr;
  dp_model* m = nullptr;
  dp_group* g = nullptr;
  dp_optimizer* opt = nullptr;
  dp_tensor *x = nullptr, *y = nullptr;
  explicit Run(double lr) {
    DP_REQUIRE_OK(dp_context_create(&ctx));
    DP_REQUIRE_OK(dp_model_from_json(ctx, kModel, &m));
    DP_REQUIRE_OK(dp_group_create(m, "cpu:0,cpu:1", &g));
    const std::string o = R"({"type": "sgd", "momentum": 0.9, "lr": )" + std::to_string(lr) + "}";
    DP_REQUIRE_OK(dp_optimizer_create(g, o.c_str(), &opt));
    x = make_f32(ctx, {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f}, {2, 4});
    y = make_i64(ctx, {0, 2}, {2});
  }
  ~Run() {
    dp_tensor_destroy(x), dp_tensor_destroy(y);
    dp_optimizer_destroy(opt), dp_group_destroy(g), dp_model_destroy(m), dp_context_destroy(ctx);
  }
  double step() {
    DP_REQUIRE_OK(dp_group_train_step(g, opt, x, y, nullptr));
    double lr = -1;
    DP_REQUIRE_OK(dp_optimizer_lr(opt, &lr));
    return lr;
  }
};

nlohmann::json reference() {
  std::ifstream f(DP_REFERENCE_DIR "/lr_schedules.json");
  REQUIRE(f.good());
  std::stringstream s;
  s << f.rdbuf();
  return nlohmann::json::parse(s.str());
}

}  // namespace

TEST_CASE("lr schedules give PyTorch's learning rate at every step, and train with it") {
  const nlohmann::json ref = reference();
  REQUIRE(ref["cases"].size() >= 10);
  for (const auto& c : ref["cases"]) {
    const std::string sched = c["schedule"].dump();
    CAPTURE(sched);
    const std::vector<double> want = c["lr"].get<std::vector<double>>();
    Run a(c["base"].get<double>());
    DP_REQUIRE_OK(dp_optimizer_set_lr_schedule(a.opt, sched.c_str()));
    Run b(c["base"].get<double>());  // the same lrs set by hand
    for (size_t t = 0; t < want.size(); ++t) {
      CAPTURE(t);
      const double got = a.step();
      // PyTorch's chained forms round differently: 1e-12 of the base.
      REQUIRE(std::fabs(got - want[t]) <= 1e-12 * c["base"].get<double>());
      DP_REQUIRE_OK(dp_optimizer_set_lr(b.opt, got));
      b.step();
    }
    CHECK(params_of(a.m) == params_of(b.m));
  }
}

TEST_CASE("a resumed run follows the same schedule; set_lr sets its base; none restores it") {
  const std::string sched = R"({"type": "cosine_warmup", "warmup_steps": 5, "total_steps": 30})";
  char path[] = "/tmp/dp_sched_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::vector<double> whole;
  {
    Run a(0.2);
    DP_REQUIRE_OK(dp_optimizer_set_lr_schedule(a.opt, sched.c_str()));
    for (int t = 0; t < 20; ++t) {
      whole.push_back(a.step());
      if (t == 11) DP_REQUIRE_OK(dp_checkpoint_save(path, a.g, a.opt, nullptr, nullptr));
    }
  }
  {
    Run r(0.2);
    DP_REQUIRE_OK(dp_optimizer_set_lr_schedule(r.opt, sched.c_str()));
    DP_REQUIRE_OK(dp_checkpoint_load(path, r.g, r.opt, nullptr));
    for (int t = 12; t < 20; ++t) CHECK(r.step() == whole[static_cast<size_t>(t)]);
    // set_lr sets the base: the schedule scales it.
    DP_REQUIRE_OK(dp_optimizer_set_lr(r.opt, 0.4));
    const double at20 = r.step();
    CHECK(at20 == doctest::Approx(0.4 * (1 + std::cos(3.14159265358979323846 * 15 / 25)) / 2).epsilon(1e-12));
    DP_REQUIRE_OK(dp_optimizer_set_lr_schedule(r.opt, nullptr));
    CHECK(r.step() == 0.4);
  }
  std::remove(path);
}

TEST_CASE("bad schedules are refused, naming the key, and change nothing") {
  Run a(0.1);
  DP_REQUIRE_OK(dp_optimizer_set_lr_schedule(a.opt, R"({"type": "step", "step_size": 2})"));
  const struct {
    const char* json;
    dp_status status;
    const char* says;
  } bad[] = {
      {"{oops", DP_ERR_JSON, "lr schedule JSON"},
      {R"({"type": "cosinus"})", DP_ERR_MODEL, "unknown lr schedule 'cosinus' (known: constant, cosine"},
      {R"({"type": "step"})", DP_ERR_MODEL, "/step_size: missing"},
      {R"({"type": "exponential"})", DP_ERR_MODEL, "/gamma: missing"},
      {R"({"type": "step", "step_size": 2, "gama": 0.5})", DP_ERR_MODEL, "/gama"},
      {R"({"type": "multistep", "milestones": [5, 3]})", DP_ERR_MODEL, "/milestones/1: expected non-negative step numbers in increasing order"},
      {R"({"type": "cosine_warmup", "warmup_steps": 10, "total_steps": 10})", DP_ERR_MODEL, "/total_steps: expected more than warmup_steps"},
      {R"({"type": "onecycle", "total_steps": 10})", DP_ERR_MODEL, "/max_lr: missing"},
      {R"({"type": "onecycle", "max_lr": 1, "total_steps": 3})", DP_ERR_MODEL, "every phase of the cycle needs at least one step"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.json);
    CHECK(dp_optimizer_set_lr_schedule(a.opt, b.json) == b.status);
    const std::string msg = dp_last_error();
    CHECK_MESSAGE(msg.find(b.says) != std::string::npos, msg);
  }
  // Still StepLR(step_size 2, gamma 0.1): 0.1, 0.1, 0.01, 0.01, 0.001.
  const double want[] = {0.1, 0.1, 0.01, 0.01, 0.001};
  for (double w : want) CHECK(a.step() == doctest::Approx(w).epsilon(1e-12));
}
