// The cost of a layer coming from a plugin: the same MLP (784-512-256-10,
// batch 256, SGD with momentum, 2 CPU devices by default) with the built-in
// `relu` and with `plugin_relu` (tests/plugins/fixtures.c built as
// bench_plugin_relu.so: relu as a plain C loop behind the plugin ABI, and in a
// build with CUDA also as CUDA kernels, bench/plugin_relu_cuda.cu), timed side
// by side in interleaved rounds (medians); prints both rates and the
// plugin/built-in time ratio (target: at most 1.05; 1.016 on the 2-core dev
// machine). On a GPU: devices "cuda:0" (bench/gpu.sh does).
//
//   bench/plugin_relu [rounds] [steps-per-round] [plugin path or ""] [devices]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dp.h"

static void ok(dp_status s, const char* what) {
  if (s != DP_OK) {
    std::fprintf(stderr, "bench: %s: %s\n", what, dp_last_error());
    std::exit(1);
  }
}

struct Config {
  std::string relu;
  dp_model* model = nullptr;
  dp_group* group = nullptr;
  dp_optimizer* opt = nullptr;
  std::vector<double> seconds;  // per step, one entry per round
};

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  const char* plugin = argc > 3 && argv[3][0] ? argv[3] : DP_BENCH_PLUGIN_RELU;
  const char* devices = argc > 4 ? argv[4] : "cpu:0,cpu:1";
  const int64_t batch = 256;
  dp_context* ctx = nullptr;
  ok(dp_context_create(&ctx), "context");
  ok(dp_context_load_plugin(ctx, plugin), "plugin");

  std::vector<Config> configs(2);
  configs[0].relu = "relu";
  configs[1].relu = "plugin_relu";
  for (auto& c : configs) {
    std::string json = R"({"seed": 0, "input": {"shape": [784]}, "layers": [
      {"type": "linear", "out_features": 512}, {"type": ")" + c.relu + R"("},
      {"type": "linear", "out_features": 256}, {"type": ")" + c.relu + R"("},
      {"type": "linear", "out_features": 10}], "loss": {"type": "cross_entropy"}})";
    ok(dp_model_from_json(ctx, json.c_str(), &c.model), "model");
    ok(dp_group_create(c.model, devices, &c.group), "group");
    ok(dp_optimizer_create(c.group, R"({"type": "sgd", "lr": 0.01, "momentum": 0.9})", &c.opt), "optimizer");
  }
  std::vector<float> x(static_cast<size_t>(batch * 784));
  std::vector<int64_t> y(static_cast<size_t>(batch));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.f - 0.5f;
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int64_t>(i % 10);
  int64_t xs[2] = {batch, 784}, ys[1] = {batch};
  dp_tensor *tx = nullptr, *ty = nullptr;
  ok(dp_tensor_from_host(ctx, DP_F32, x.data(), 2, xs, &tx), "input");
  ok(dp_tensor_from_host(ctx, DP_I64, y.data(), 1, ys, &ty), "target");

  for (auto& c : configs)  // warm-up: first-step allocations
    for (int i = 0; i < 3; ++i) ok(dp_group_train_step(c.group, c.opt, tx, ty, nullptr), "warm-up");
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < configs.size(); ++k) {
      auto& c = configs[(k + r) % configs.size()];  // alternate which goes first
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) ok(dp_group_train_step(c.group, c.opt, tx, ty, nullptr), "step");
      c.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps);
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double builtin = median(configs[0].seconds), plug = median(configs[1].seconds);
  std::printf("devices %s\nbuilt-in relu: %.1f samples/s\nplugin relu:   %.1f samples/s\n", devices, batch / builtin,
              batch / plug);
  std::printf("{\"devices\": \"%s\", \"builtin_samples_per_second\": %.1f, \"plugin_samples_per_second\": %.1f, "
              "\"time_ratio\": %.4f}\n",
              devices, batch / builtin, batch / plug, plug / builtin);
  dp_tensor_destroy(tx);
  dp_tensor_destroy(ty);
  for (auto& c : configs) {
    dp_optimizer_destroy(c.opt);
    dp_group_destroy(c.group);
    dp_model_destroy(c.model);
  }
  dp_context_destroy(ctx);
  return 0;
}
